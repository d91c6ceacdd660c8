#!/usr/bin/env python3
"""Golden data for Parity's mHC ops, captured from HF transformers' DeepSeek-V4 (spec: hf-deepseek-v4.md).

    python golden/generate.py --out golden [--only hc_pre_tiny_fp32 ...]

Writes DIR/hc/<name>.h5 (schema: harness/include/parity/golden.hpp) and DIR/MANIFEST.json, which lists every
.h5 file under DIR, so regenerating a subset with --only keeps the other entries valid.

Everything runs on the CPU, single-threaded, with deterministic algorithms and fixed seeds, so a rerun reproduces
every dataset bitwise; with SOURCE_DATE_EPOCH set (it feeds the `created` attr) it reproduces the files byte for byte.

The tiny model (spec §15) is re-randomised as in §13: HF's default init makes the mHC maps near-uniform, which would
hide most indexing and direction mistakes. Every capture is taken at layer 1, not layer 0: layer 0's input is the
embedding repeated over the hc_mult streams, and with identical streams comb^T @ X and comb @ X agree to the Sinkhorn
residue, so a transposed comb would pass.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import pathlib
import zlib

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import transformers
from torch.overrides import TorchFunctionMode
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

SCHEMA_VERSION = 1
SEED = 20260901
BATCH, SEQ = 2, 32
LAYER = 1

HF_CONFIG = dict(
    vocab_size=256, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=1, head_dim=32, q_lora_rank=32,
    partial_rotary_factor=0.25,
    num_experts_per_tok=2, n_routed_experts=8, n_shared_experts=1, routed_scaling_factor=1.5,
    max_position_embeddings=256, rope_theta=10000.0, compress_rope_theta=160000.0,
    layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                 "compressed_sparse_attention"],
    compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6,
    mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
    swiglu_limit=1.0, sliding_window=8, o_groups=2, o_lora_rank=16,
    index_n_heads=8, index_head_dim=16, index_topk=4,
    num_nextn_predict_layers=0, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False,
)

DTYPE_NAMES = {
    torch.float64: "fp64", torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
    torch.int64: "int64", torch.int32: "int32", torch.uint8: "uint8",
}
GROUPS = ("inputs", "stages", "outputs", "grad_outputs", "grads")


# --- model --------------------------------------------------------------------------------------------------------

def build_model() -> DeepseekV4ForCausalLM:
    cfg = DeepseekV4Config(**HF_CONFIG)
    # Eager attention and experts: the default grouped_mm experts sum in a different order (spec §17.11).
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    torch.manual_seed(SEED)  # HF's own init draws from the global generator before randomise() overwrites it
    model = DeepseekV4ForCausalLM(cfg).eval()
    randomise(model, torch.Generator().manual_seed(SEED))
    return model


def randomise(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Spec §13. Raises on any tensor no rule covers, so a new HF parameter cannot keep its degenerate init."""
    def normal(t, std=1.0, mean=0.0):
        t.copy_(torch.randn(t.shape, generator=gen, dtype=t.dtype) * std + mean)

    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf in ("base", "hc_base", "sinks", "position_bias") or name.endswith("embed_tokens.weight"):
                normal(p)
            elif leaf in ("scale", "hc_scale"):
                normal(p, std=0.3, mean=1.0)
            elif p.dim() == 1 and name.endswith("norm.weight"):
                normal(p, std=0.1, mean=1.0)
            elif p.dim() >= 2:  # Linear, grouped-linear, expert and router weights, fn/hc_fn: fan_in is the last dim
                normal(p, std=p.shape[-1] ** -0.5)
            else:
                raise RuntimeError(f"randomise: no rule for parameter {name} {tuple(p.shape)}")
        for name, b in model.named_buffers():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "e_score_correction_bias":
                normal(b, std=0.1)
            elif leaf == "tid2eid":
                experts = model.config.n_routed_experts
                b.copy_(torch.stack([torch.randperm(experts, generator=gen)[: b.shape[1]] for _ in range(b.shape[0])]))
            elif not leaf.endswith("inv_freq"):  # rope tables are computed from the config, not initialised
                raise RuntimeError(f"randomise: no rule for buffer {name} {tuple(b.shape)}")


def input_ids() -> torch.Tensor:
    gen = torch.Generator().manual_seed(SEED + 1)
    return torch.randint(0, HF_CONFIG["vocab_size"], (BATCH, SEQ), generator=gen)


def store_first_arg(store: dict, key: str):
    """A forward pre-hook that keeps the module's first argument; returning None leaves the call unchanged."""
    def hook(module, args):
        store[key] = args[0]
    return hook


def capture_streams(model) -> dict[str, torch.Tensor]:
    """The [B,S,H,D] streams entering layer LAYER and entering the HyperHead, from one stateless forward."""
    streams = {}
    hooks = [
        model.model.layers[LAYER].register_forward_pre_hook(store_first_arg(streams, "layer")),
        model.model.hc_head.register_forward_pre_hook(store_first_arg(streams, "head")),
    ]
    with torch.no_grad():
        model(input_ids(), use_cache=False)
    for h in hooks:
        h.remove()
    return {k: v.detach().clone() for k, v in streams.items()}


# --- capturing HF's own intermediates -----------------------------------------------------------------------------

class StageRecorder(TorchFunctionMode):
    """Records, from HF's own forward, the F.linear output (`mixes`) and `sigmoid(..) + eps` (`pre`).

    Both HC modules compute pre as the first sigmoid plus eps; post is `2 * sigmoid(..)` and never matches."""

    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps
        self.first_sigmoid = None
        self.stages: dict[str, torch.Tensor] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is F.linear:
            assert "mixes" not in self.stages, "more than one F.linear inside the HC module"
            self.stages["mixes"] = out
        elif func is torch.sigmoid and self.first_sigmoid is None:
            self.first_sigmoid = out
        elif func is torch.Tensor.add and args[0] is self.first_sigmoid and args[1] == self.eps:
            self.stages["pre"] = out
        return out


def mirrored_stages(x, fn, base, scale, hc: int, eps: float, rms_eps: float) -> dict[str, torch.Tensor]:
    """The same ops as HF's forward up to pre, written out here so the recorder cannot have grabbed the wrong tensor."""
    flat = x.flatten(2).float()
    flat = flat * torch.rsqrt(flat.float().square().mean(-1, keepdim=True) + rms_eps).to(flat.dtype)
    mixes = F.linear(flat, fn.float())
    pre = torch.sigmoid(mixes[..., :hc] * scale[0] + base[:hc]) + eps
    return {"mixes": mixes, "pre": pre}


def assert_bitwise(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, f"{name}: {got.dtype}{tuple(got.shape)} vs " \
        f"{want.dtype}{tuple(want.shape)}"
    assert torch.equal(got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)), \
        f"{name}: HF's value differs bitwise from the mirrored recomputation"


def random_like(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    # Never ones: an all-ones upstream gradient hides transposes and per-element scaling mistakes.
    return torch.randn(t.shape, generator=gen).to(t.dtype)


def case_generator(name: str) -> torch.Generator:
    # Per-file seed, so a file's content does not depend on which other files one run generates.
    return torch.Generator().manual_seed(SEED + zlib.crc32(name.encode()))


def backward(outputs: dict, wrt: dict, gen: torch.Generator) -> tuple[dict, dict]:
    grad_outputs = {k: random_like(v, gen) for k, v in outputs.items()}
    grads = torch.autograd.grad(list(outputs.values()), list(wrt.values()), list(grad_outputs.values()))
    return grad_outputs, dict(zip(wrt.keys(), grads))


# --- cases ---------------------------------------------------------------------------------------------------------

def hc_pre(name: str, x_dtype: torch.dtype) -> dict:
    """HF DeepseekV4HyperConnection (layer LAYER's attn_hc, fp32 params) on that layer's real input streams."""
    model = build_model()
    hc = model.model.layers[LAYER].attn_hc
    x = capture_streams(model)["layer"].to(x_dtype).requires_grad_()
    recorder = StageRecorder(hc.hc_eps)
    with recorder:
        post, comb, collapsed = hc(x)
    with torch.no_grad():
        mirror = mirrored_stages(x, hc.fn, hc.base, hc.scale, hc.hc_mult, hc.hc_eps, hc.input_norm.eps)
    for stage in ("mixes", "pre"):
        assert_bitwise(f"{name} {stage}", recorder.stages[stage], mirror[stage])
    params = {"fn": hc.fn, "base": hc.base, "scale": hc.scale}
    outputs = {"post": post, "comb": comb, "collapsed": collapsed}
    grad_outputs, grads = backward(outputs, {"x": x, **params}, case_generator(name))
    return {"op": "hc_pre", "dtype": x_dtype, "inputs": {"x": x, **params}, "stages": recorder.stages,
            "outputs": outputs, "grad_outputs": grad_outputs, "grads": grads}


def hc_post(name: str, dtype: torch.dtype) -> dict:
    """The attention-site stream update inside a real DeepseekV4DecoderLayer forward (layer LAYER).

    The hooks hand HF detached copies of post, comb and the attention output (same values, so the forward is
    unchanged); that cuts the paths by which the residual also feeds post/comb/attention, and the gradient with
    respect to the residual is then the hc_post op's own partial derivative rather than the whole layer's."""
    model = build_model().to(dtype)
    layer = model.model.layers[LAYER]
    cap = {}

    def cut(t):
        return t.detach().requires_grad_()

    def on_attn_hc(module, args, out):
        post, comb, collapsed = out
        cap["post"], cap["comb"] = cut(post), cut(comb)
        return cap["post"], cap["comb"], collapsed

    def on_self_attn(module, args, kwargs, out):
        cap["x"] = cut(out[0])
        return (cap["x"], *out[1:])

    hooks = [
        layer.register_forward_pre_hook(store_first_arg(cap, "residual")),
        layer.attn_hc.register_forward_hook(on_attn_hc),
        layer.self_attn.register_forward_hook(on_self_attn, with_kwargs=True),
        layer.ffn_hc.register_forward_pre_hook(store_first_arg(cap, "out")),
    ]
    model(input_ids(), use_cache=False)
    for h in hooks:
        h.remove()

    x, residual, post, comb, out = (cap[k] for k in ("x", "residual", "post", "comb", "out"))
    with torch.no_grad():
        # HF's update with its casts (spec §10) must match bitwise; in fp32 it must also match the plain formula.
        mirrored = post.to(dtype).unsqueeze(-1) * x.unsqueeze(-2) + comb.to(dtype).transpose(-1, -2) @ residual
        assert_bitwise(f"{name} out", out, mirrored)
        if dtype == torch.float32:
            err = (out - (post.unsqueeze(-1) * x.unsqueeze(-2) + comb.transpose(-1, -2) @ residual)).abs().max()
            assert err < 1e-5, f"{name}: out differs from post*x + comb^T@residual by {err.item()}"
    inputs = {"x": x, "residual": residual, "post": post, "comb": comb}
    grad_outputs, grads = backward({"out": out}, inputs, case_generator(name))
    return {"op": "hc_post", "dtype": dtype, "inputs": inputs, "stages": {}, "outputs": {"out": out},
            "grad_outputs": grad_outputs, "grads": grads}


def hc_head(name: str, dtype: torch.dtype) -> dict:
    """HF DeepseekV4HyperHead (model.hc_head) on the real final streams."""
    model = build_model()
    head = model.model.hc_head
    x = capture_streams(model)["head"].to(dtype).requires_grad_()
    recorder = StageRecorder(head.eps)
    with recorder:
        out = head(x)
    with torch.no_grad():
        mirror = mirrored_stages(x, head.hc_fn, head.hc_base, head.hc_scale.float(), head.hc_mult, head.eps,
                                 head.input_norm.eps)
    for stage in ("mixes", "pre"):
        assert_bitwise(f"{name} {stage}", recorder.stages[stage], mirror[stage])
    params = {"fn": head.hc_fn, "base": head.hc_base, "scale": head.hc_scale}
    grad_outputs, grads = backward({"out": out}, {"x": x, **params}, case_generator(name))
    return {"op": "hc_head", "dtype": dtype, "inputs": {"x": x, **params}, "stages": recorder.stages,
            "outputs": {"out": out}, "grad_outputs": grad_outputs, "grads": grads}


CASES = {
    "hc_pre_tiny_fp32": lambda n: hc_pre(n, torch.float32),
    "hc_pre_tiny_bf16": lambda n: hc_pre(n, torch.bfloat16),
    "hc_post_tiny_fp32": lambda n: hc_post(n, torch.float32),
    "hc_post_tiny_bf16": lambda n: hc_post(n, torch.bfloat16),
    "hc_head_tiny_fp32": lambda n: hc_head(n, torch.float32),
}


# --- files ---------------------------------------------------------------------------------------------------------

def config_json(dtype: torch.dtype) -> str:
    cfg = {
        "hf_config": {**HF_CONFIG, "_attn_implementation": "eager", "_experts_implementation": "eager"},
        "capture": {"layer": LAYER, "batch": BATCH, "seq": SEQ},
        "hc_mult": HF_CONFIG["hc_mult"], "hidden": HF_CONFIG["hidden_size"],
        "sinkhorn_iters": HF_CONFIG["hc_sinkhorn_iters"], "hc_eps": HF_CONFIG["hc_eps"],
        "rms_eps": HF_CONFIG["rms_norm_eps"], "post_mult": 2.0, "dtype": DTYPE_NAMES[dtype],
    }
    return json.dumps(cfg, sort_keys=True)


def cpu_platform() -> str:
    """The CPU as LibTorch's kernels choose their code, as Parity names it (results.hpp cpu_platform): the fp32 sums of
    the captured model, and so every golden, follow it."""
    vendor = "unknown-vendor"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("vendor_id"):
                vendor = line.split(":", 1)[1].strip()
                break
    return f"cpu {vendor} {torch.backends.cpu.get_cpu_capability()}"


def created() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc) if epoch else \
        datetime.datetime.now(datetime.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bf16: store the raw bits, the dtype attr restores them
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def write_h5(path: pathlib.Path, case: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f.attrs["schema_version"] = SCHEMA_VERSION
        f.attrs["op"] = case["op"]
        f.attrs["generator"] = "golden/generate.py"
        f.attrs["generator_sha256"] = hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()
        f.attrs["torch_version"] = str(torch.__version__)  # TorchVersion is no str to h5py
        f.attrs["transformers_version"] = transformers.__version__
        f.attrs["seed"] = SEED
        f.attrs["config_json"] = config_json(case["dtype"])
        f.attrs["created"] = created()
        f.attrs["cpu_platform"] = cpu_platform()
        for group in GROUPS:
            g = f.create_group(group)
            for name, t in sorted(case[group].items()):
                ds = g.create_dataset(name, data=to_numpy(t))
                ds.attrs["dtype"] = DTYPE_NAMES[t.dtype]


def write_manifest(out: pathlib.Path) -> None:
    files = {}
    for path in sorted(out.rglob("*.h5")):
        data = path.read_bytes()
        files[path.relative_to(out).as_posix()] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    # Same layout as nlohmann::json::dump(2), so the C++ write_manifest produces identical bytes.
    (out / "MANIFEST.json").write_text(json.dumps({"files": files}, indent=2, sort_keys=True) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=pathlib.Path,
                        help="output directory (golden for the committed set)")
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), help="generate only these files")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name in args.only or CASES:
        write_h5(args.out / "hc" / f"{name}.h5", CASES[name](name))
        print(f"wrote {args.out / 'hc' / name}.h5")
    write_manifest(args.out)


if __name__ == "__main__":
    main()
