"""PyTorch timing of the hc ops (the HF composition of references/hc.cpp), eager and torch.compile: the peers a user
has without Parity's kernels. `parity run --perf` times LibTorch eager next to our kernels in its own run; this script
adds torch.compile (Python only) with a device-to-device copy timed in the same process, so both are read as % of the
copy rate. Usage: python3 bench/hc_torch_timing.py [--tokens 16384] [--hc 4] [--hidden 4096] [--json out.json]
Median of 20 CUDA-event-timed runs after warm-ups (compile happens in the warm-ups); bf16 streams; TF32 off (the
contract's fp32 projection)."""
import argparse
import json

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--tokens", type=int, default=16384)
ap.add_argument("--hc", type=int, default=4)
ap.add_argument("--hidden", type=int, default=4096)
ap.add_argument("--json", help="write the rows as JSON here")
ARGS = ap.parse_args()
T, H, D = ARGS.tokens, ARGS.hc, ARGS.hidden
EPS, RMS_EPS, ITERS, POST_MULT = 1e-6, 1e-6, 20, 2.0
torch.backends.cuda.matmul.allow_tf32 = False
dev, bf = "cuda", torch.bfloat16
g = torch.Generator(device=dev).manual_seed(0)


def randn(*shape, dtype=torch.float32, std=1.0, mean=0.0):
    return (torch.randn(*shape, device=dev, generator=g) * std + mean).to(dtype)


def bench(f, warm=3, reps=20):
    for _ in range(warm):
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def rms_norm(x):
    return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + RMS_EPS).to(x.dtype)


def sinkhorn(c):
    c = torch.softmax(c, -1) + EPS
    c = c / (c.sum(-2, keepdim=True) + EPS)
    for _ in range(ITERS - 1):
        c = c / (c.sum(-1, keepdim=True) + EPS)
        c = c / (c.sum(-2, keepdim=True) + EPS)
    return c


def hc_pre(x, fn, base, scale):
    flat = rms_norm(x.flatten(-2).float())
    mixes = torch.nn.functional.linear(flat, fn)
    w0, w1, w2 = mixes.split([H, H, H * H], -1)
    b0, b1, b2 = base.split([H, H, H * H])
    pre = torch.sigmoid(w0 * scale[0] + b0) + EPS
    post = POST_MULT * torch.sigmoid(w1 * scale[1] + b1)
    comb = sinkhorn(w2.view(*w2.shape[:-1], H, H) * scale[2] + b2.view(H, H))
    collapsed = (pre.unsqueeze(-1) * x).sum(-2).to(x.dtype)
    return mixes, pre, post, comb, collapsed


def hc_head(x, fn, base, scale):
    flat = rms_norm(x.flatten(-2).float())
    mixes = torch.nn.functional.linear(flat, fn)
    pre = torch.sigmoid(mixes * scale + base) + EPS
    return mixes, pre, (pre.unsqueeze(-1) * x).sum(-2).to(x.dtype)


def hc_post(x, residual, post, comb):
    # A tuple like hc_pre's and hc_head's, so one fwd+bwd driver serves all three.
    mixed = torch.matmul(comb.to(x.dtype).transpose(-1, -2), residual)
    return (post.to(x.dtype).unsqueeze(-1) * x.unsqueeze(-2) + mixed,)


def fwd_bwd(f, leaves, outs_idx, gouts):
    def run():
        o = f(*leaves)
        torch.autograd.grad([o[i] for i in outs_idx], leaves, gouts)
    return run


def main():
    nbytes = 1 << 30
    src, dst = torch.ones(nbytes, dtype=torch.uint8, device=dev), torch.empty(nbytes, dtype=torch.uint8, device=dev)
    copy_ms = bench(lambda: dst.copy_(src))
    copy_gbs = 2 * nbytes / copy_ms / 1e6
    del src, dst
    e = 2
    xs = randn(T, H, D, dtype=bf)
    gx = randn(T, H, D, dtype=bf)
    post, comb = POST_MULT * torch.sigmoid(randn(T, H)), torch.softmax(randn(T, H, H, std=2.0), -1)
    layer_out = randn(T, D, dtype=bf)
    ops = {"hc_post": (hc_post, (layer_out, xs, post, comb), (0,), [gx],
                       (T * D + 2 * T * H * D) * e, (T * D + 2 * T * H * D + 3 * T * H * D + 2 * T * D) * e)}
    for name, m, n_scale, f in (("hc_pre", (2 + H) * H, 3, hc_pre), ("hc_head", H, 1, hc_head)):
        fn, base, scale = randn(m, H * D, std=(H * D) ** -0.5), randn(m), randn(n_scale, std=0.3, mean=1.0)
        one_pass = (T * H * D + T * D) * e + m * H * D * 4
        outs = f(xs, fn, base, scale)
        idx = (2, 3, 4) if name == "hc_pre" else (2,)
        ops[name] = (f, (xs, fn, base, scale), idx, [torch.randn_like(outs[i]) for i in idx],
                     one_pass, one_pass + (2 * T * H * D + T * D) * e)
    rows = []
    for name, (f, inputs, idx, gouts, fwd_bytes, fb_bytes) in ops.items():
        for peer, g in (("eager", f), ("torch.compile", torch.compile(f))):
            rows.append((name, "fwd", peer, bench(lambda: g(*inputs), warm=3), fwd_bytes))
            leaves = [t.detach().requires_grad_(True) for t in inputs]
            rows.append((name, "fwd+bwd", peer, bench(fwd_bwd(g, leaves, idx, gouts), warm=3), fb_bytes))
            torch.cuda.empty_cache()
    print(f"\n{'op':10s} {'dir':8s} {'peer':14s} {'ms':>9s} {'GB':>8s} {'% copy':>7s}")
    for name, d, peer, ms, b in rows:
        print(f"{name:10s} {d:8s} {peer:14s} {ms:9.4f} {b / 1e9:8.3f} {100 * b / ms / 1e6 / copy_gbs:6.1f}%")
    gpu = torch.cuda.get_device_name()
    print(f"(torch copy rate {copy_gbs:.1f} GB/s, {gpu}, torch {torch.__version__})")
    if ARGS.json:
        with open(ARGS.json, "w") as out:
            json.dump({"gpu": gpu, "torch": torch.__version__, "shape": {"tokens": T, "hc": H, "hidden": D},
                       "copy_gbps": copy_gbs, "method": "median of 20 CUDA-event samples after 3 warm-ups",
                       "rows": [{"op": n, "direction": d, "peer": p, "median_ms": ms, "bytes": b,
                                 "pct_copy_bw": 100 * b / ms / 1e6 / copy_gbs} for n, d, p, ms, b in rows]},
                      out, indent=1)


if __name__ == "__main__":
    main()
