"""PyTorch eager timing of the hc ops (the HF composition of references/hc.cpp), the baseline for
bench/hc_cuda_timing.cu. Usage: python3 bench/hc_eager_timing.py [tokens=16384] [hc=4] [hidden=4096]
Median of 20 CUDA-event-timed runs after 3 warm-ups; bf16 streams; TF32 off (the contract's fp32 projection)."""
import sys

import torch

T = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
H = int(sys.argv[2]) if len(sys.argv) > 2 else 4
D = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
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
    return post.to(x.dtype).unsqueeze(-1) * x.unsqueeze(-2) + torch.matmul(comb.to(x.dtype).transpose(-1, -2), residual)


def main():
    nbytes = 1 << 30
    src, dst = torch.ones(nbytes, dtype=torch.uint8, device=dev), torch.empty(nbytes, dtype=torch.uint8, device=dev)
    copy_ms = bench(lambda: dst.copy_(src))
    copy_gbs = 2 * nbytes / copy_ms / 1e6
    del src, dst
    rows = []
    e = 2
    # hc_post
    x, res = randn(T, D, dtype=bf), randn(T, H, D, dtype=bf)
    post, comb = POST_MULT * torch.sigmoid(randn(T, H)), torch.softmax(randn(T, H, H, std=2.0), -1)
    gout = randn(T, H, D, dtype=bf)
    rows.append(("hc_post fwd eager (HF)", bench(lambda: hc_post(x, res, post, comb)), (T * D + 2 * T * H * D) * e))
    leaves = [t.detach().requires_grad_(True) for t in (x, res, post, comb)]

    def post_fwd_bwd():
        torch.autograd.grad(hc_post(*leaves), leaves, gout)

    fwd_bwd_bytes = (T * D + 2 * T * H * D + 3 * T * H * D + 2 * T * D) * e
    rows.append(("hc_post fwd+bwd eager (HF)", bench(post_fwd_bwd), fwd_bwd_bytes))
    del x, res, post, comb, gout, leaves
    # hc_pre / hc_head
    xs = randn(T, H, D, dtype=bf)
    for name, m, n_scale, f in (("hc_pre", (2 + H) * H, 3, hc_pre), ("hc_head", H, 1, hc_head)):
        fn, base, scale = randn(m, H * D, std=(H * D) ** -0.5), randn(m), randn(n_scale, std=0.3, mean=1.0)
        one_pass = (T * H * D + T * D) * e + m * H * D * 4
        rows.append((f"{name} fwd eager (HF)", bench(lambda: f(xs, fn, base, scale)), one_pass))
        leaves = [t.detach().requires_grad_(True) for t in (xs, fn, base, scale)]
        outs = f(*leaves)
        grad_idx = (2, 3, 4) if name == "hc_pre" else (2,)
        gos = [torch.randn_like(outs[i]) for i in grad_idx]

        def fwd_bwd():
            o = f(*leaves)
            torch.autograd.grad([o[i] for i in grad_idx], leaves, gos)

        rows.append((f"{name} fwd+bwd eager (HF)", bench(fwd_bwd), one_pass + (2 * T * H * D + T * D) * e))
        del leaves, outs, gos
    print(f"\n{'eager op':36s} {'ms':>10s} {'GB':>10s} {'GB/s':>10s} {'% copy':>8s}")
    for name, ms, b in rows:
        print(f"{name:36s} {ms:10.4f} {b / 1e9:10.3f} {b / ms / 1e6:10.1f} {100 * b / ms / 1e6 / copy_gbs:7.1f}%")
    print(f"(torch copy rate {copy_gbs:.1f} GB/s, {torch.cuda.get_device_name()})")


if __name__ == "__main__":
    main()
