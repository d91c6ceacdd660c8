"""h5py helpers for Parity's golden schema, for kernels that run outside Parity (`parity compare`).

    import parity_h5
    inputs, grad_outputs, attrs = parity_h5.read_inputs("in.h5")    # what `parity compare --export-inputs` wrote
    ...                                                             # run your kernel on them
    parity_h5.write_candidate("out.h5", {"out": out}, grads={"x": gx}, inputs=inputs)

The schema (harness/include/parity/golden.hpp, candidate.hpp): groups /inputs, /grad_outputs, /outputs, /grads; every
dataset carries attr `dtype` ("bf16", "fp32", ...). bf16, which HDF5 and numpy lack, is stored as its raw bits (uint16)
and restored from that attr. `attrs["outputs_json"]` of an exported file lists the outputs a candidate must hold.
"""
from __future__ import annotations

import json

import h5py
import numpy as np
import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64,
          "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8}
DTYPE_NAMES = {t: name for name, t in DTYPES.items()}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def to_tensor(ds: h5py.Dataset) -> torch.Tensor:
    """One dataset as a torch tensor of the dtype its `dtype` attr names."""
    if "dtype" not in ds.attrs:
        raise ValueError(f"{ds.file.filename}: dataset '{ds.name}' has no dtype attr")
    dtype = _text(ds.attrs["dtype"])
    if dtype not in DTYPES:
        raise ValueError(f"{ds.file.filename}: dataset '{ds.name}': unknown dtype '{dtype}'")
    data = np.asarray(ds[()])
    if dtype == "bf16":
        return torch.from_numpy(data.astype(np.uint16).view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(data.copy()).to(DTYPES[dtype])


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def read_group(path, group: str) -> dict[str, torch.Tensor]:
    """Every dataset of one group ({} when the file has no such group)."""
    with h5py.File(path, "r") as f:
        return {name: to_tensor(ds) for name, ds in f[group].items()} if group in f else {}


def read_attrs(path) -> dict[str, str]:
    with h5py.File(path, "r") as f:
        return {k: _text(v) for k, v in f.attrs.items()}


def read_inputs(path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, str]]:
    """Inputs, upstream gradients and root attrs of an exported (or golden) file."""
    return read_group(path, "inputs"), read_group(path, "grad_outputs"), read_attrs(path)


def expected_outputs(attrs: dict[str, str]) -> list[dict]:
    """[{name, shape, dtype}] of the outputs a candidate for this exported file must hold."""
    return json.loads(attrs["outputs_json"])


def write_candidate(path, outputs: dict[str, torch.Tensor], grads: dict[str, torch.Tensor] | None = None,
                    inputs: dict[str, torch.Tensor] | None = None) -> None:
    """Writes /outputs (and /grads, /inputs when given). Pass the inputs you computed from: Parity then refuses the
    candidate if they are not the case's, instead of comparing outputs of other inputs."""
    groups = {"outputs": outputs, "grads": grads, "inputs": inputs}
    with h5py.File(path, "w") as f:
        for group, tensors in groups.items():
            if not tensors:
                continue
            g = f.create_group(group)
            for name, t in sorted(tensors.items()):
                if t.dtype not in DTYPE_NAMES:
                    raise ValueError(f"/{group}/{name}: dtype {t.dtype} has no golden-schema name")
                g.create_dataset(name, data=to_numpy(t)).attrs["dtype"] = DTYPE_NAMES[t.dtype]
