#!/usr/bin/env python3
"""Stand-in for a kernel written outside Parity (Triton, a prototype): reads the inputs that
`parity compare --export-inputs` wrote for an hc_post case, computes hc_post with plain torch ops (fp32 math, one
rounding to the stream dtype, as the v1 paths promise) and its backward with autograd, and writes a candidate file.

    parity compare --case hc_post/hf_tiny_bf16 --export-inputs in.h5
    python examples/capture_hc_post.py in.h5 candidate.h5
    parity compare --case hc_post/hf_tiny_bf16 --candidate candidate.h5
"""
import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import parity_h5  # noqa: E402


def hc_post(x, residual, post, comb):
    """out[t, i] = post[t, i] * x[t] + sum_j comb[t, j, i] * residual[t, j]  (HF DeepseekV4 hc_post)."""
    f32 = torch.float32
    out = post.to(f32).unsqueeze(-1) * x.to(f32).unsqueeze(-2) + comb.to(f32).transpose(-1, -2) @ residual.to(f32)
    return out.to(residual.dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", type=pathlib.Path, help="file written by parity compare --export-inputs")
    parser.add_argument("candidate", type=pathlib.Path, help="candidate file to write")
    args = parser.parse_args()

    inputs, grad_outputs, attrs = parity_h5.read_inputs(args.inputs)
    if attrs.get("op") != "hc_post":
        sys.exit(f"{args.inputs}: exported for op '{attrs.get('op')}', this example computes hc_post")
    leaves = {name: t.clone().requires_grad_(t.is_floating_point()) for name, t in inputs.items()}
    out = hc_post(leaves["x"], leaves["residual"], leaves["post"], leaves["comb"])
    grads = None
    if grad_outputs:  # the case runs backward: hand Parity the gradients too
        out.backward(grad_outputs["out"])
        grads = {name: leaf.grad for name, leaf in leaves.items()}
    parity_h5.write_candidate(args.candidate, {"out": out}, grads=grads, inputs=inputs)
    print(f"wrote {args.candidate}: out {tuple(out.shape)} {out.dtype}" + (", grads" if grads else ""))


if __name__ == "__main__":
    main()
