"""Why cuda:v1's grad/scale misses its naive_relative bound on the H100 (hc_pre/v4flash_pack16k, hc_head/v4_small).

grad/scale = sum over tokens t and streams h of gz[t,h] * mixes[t,h]: a sum of T*H terms of both signs, so its error
is fed by every mix's error and is best measured against eps32 * ||terms||_2, not against the ULP of a result that
may have cancelled. This script redoes cuda:v1's arithmetic for the pre gate (the same in hc_pre and hc_head) in
fp32 with numpy, step by step as kernels/cuda/hc.cu orders it: the mix projection in 16 k-splits that each own 4
consecutive elements of every 64-element chunk (sequential fp32 FMAs, K/16 long), partial tiles summed in order; the
rms scale in fp32; <g_y, x_h> per warp (8 elements per lane per step, lanes strided, butterfly); the gate backward in
fp32 and the fp64 column sum. It compares that with a BLAS fp32 composition (numpy's sgemm: the kind of arithmetic
the naive path runs) over random draws at a given shape, against the fp64 reference. Measured (2026-11-21):

    T=256, hidden=512 (K=2048), 40 draws:   cuda:v1 median 1.80 max 6.50;  BLAS median 2.62 max 6.13
    T=256, hidden=4096 (K=16384), 40 draws: cuda:v1 median 5.46 max 22.78; BLAS median 2.65 max 8.02;
                                            candidate fix median 0.78 max 3.27
    (fp64 sum of squares alone: median 3.20 max 12.39)

At the CI width the kernel is as accurate as BLAS (a single draw of the naive error is too noisy a yardstick for a
scalar sum); at V4 width its 1024-long fp32 chains, above all the sum of squares behind the rms scale (whose error
multiplies every mix of a token alike, so it does not cancel), cost 2-3x. The fix costs registers in the
projection kernel and must be timed on a GPU before it lands: ptxas -v (CUDA 13.0, sm_90a) gives, for mix_fwd
hc_head bf16 / hc_pre bf16 / hc_pre fp32, 72 / 163 / 151 registers today, 90 / 170 / 198 with the sum of squares
folded into fp64 after every chunk (hc_head then fits 2 CTAs per SM instead of 3), 116 / 245 / 168 with it
accumulated in fp64 throughout.

    python reports/analysis/hc_scale_error.py --tokens 256 --hidden 512 --draws 40
    python reports/analysis/hc_scale_error.py --tokens 2048 --hidden 4096 --draws 8
"""
import argparse

import numpy as np

F32, EPS = np.float32, np.finfo(np.float32).eps
HC, RMS_EPS, SCALE = 4, 1e-6, 0.5


def bf16(a):
    b = np.asarray(a, np.float32).view(np.uint32)
    return (((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def fma(acc, a, b):  # one fp32 rounding, as FFMA
    return (acc.astype(np.float64) + a.astype(np.float64) * b.astype(np.float64)).astype(F32)


def mixes_cuda(x, fn, fixed=False):
    """fixed: the candidate fix, each k-split's chain folded into an fp64 total every 4 chunks (16 FMAs) and the
    sum of squares of the rms scale taken in fp64."""
    t, k = x.shape
    acc, acc_ss = np.zeros((16, t, HC), F32), np.zeros((16, t), F32)
    total = np.zeros((16, t, HC), np.float64)
    for c in range(k // 64):
        for s in range(16):
            for e in range(4):
                j = c * 64 + s * 4 + e
                acc[s] = fma(acc[s], x[:, j:j + 1], fn[:, j][None, :])
                acc_ss[s] = fma(acc_ss[s], x[:, j], x[:, j])
        if fixed and (c + 1) % 4 == 0:
            total, acc = total + acc, np.zeros_like(acc)
    acc = (total + acc).astype(F32)
    dots, ss = np.zeros((t, HC), F32), np.zeros(t, F32)
    for s in range(16):
        dots, ss = (dots + acc[s]).astype(F32), (ss + acc_ss[s]).astype(F32)
    if fixed:
        ss = (x.astype(np.float64) ** 2).sum(1).astype(F32)
    return (dots * rsqrt(ss, k)[:, None]).astype(F32)


def mixes_blas(x, fn):
    return ((x @ fn.T).astype(F32) * rsqrt((x * x).sum(1, dtype=F32), x.shape[1])[:, None]).astype(F32)


def rsqrt(ss, k):
    return (F32(1) / np.sqrt((ss / F32(k)).astype(F32) + F32(RMS_EPS))).astype(F32)


def g_pre_cuda(x3, g):  # <g_y, x_h>: one warp per token, 8 elements per lane per step
    t, h, d = x3.shape
    part = np.zeros((32, t, h), F32)
    for lane in range(32):
        for d0 in range(lane * 8, d, 256):
            for hh in range(h):
                for e in range(8):
                    part[lane][:, hh] = fma(part[lane][:, hh], g[:, d0 + e], x3[:, hh, d0 + e])
    for o in (16, 8, 4, 2, 1):
        part = (part + part[np.arange(32) ^ o]).astype(F32)
    return part[0]


def grad_scale_f32(m, rd, base):
    z = ((m * F32(SCALE)).astype(F32) + base).astype(F32)
    sg = (F32(1) / (F32(1) + np.exp(-z).astype(F32))).astype(F32)
    gz = (rd * (sg * (F32(1) - sg)).astype(F32)).astype(F32)
    sc = np.zeros(m.shape[0], F32)
    for h in range(HC):
        sc = fma(sc, gz[:, h], m[:, h])
    return sc.astype(np.float64).sum()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--draws", type=int, default=20)
    a = p.parse_args()
    k = HC * a.hidden
    err = {"cuda:v1 (emulated)": [], "cuda:v1 + fp64 folds and sum of squares": [], "BLAS fp32": []}
    for seed in range(a.draws):
        rng = np.random.default_rng(seed)
        x3 = bf16(rng.standard_normal((a.tokens, HC, a.hidden), dtype=np.float32))
        g = bf16(rng.standard_normal((a.tokens, a.hidden), dtype=np.float32))
        fn = (rng.standard_normal((HC, k)) / np.sqrt(k)).astype(F32)
        base = (rng.standard_normal(HC) * 0.1).astype(F32)
        x = x3.reshape(a.tokens, k)
        xd = x.astype(np.float64)
        m = (xd @ fn.astype(np.float64).T) / np.sqrt((xd * xd).sum(1) / k + RMS_EPS)[:, None]
        sg = 1 / (1 + np.exp(-(m * SCALE + base)))
        rd = np.einsum("td,thd->th", g.astype(np.float64), x3.astype(np.float64))
        terms = rd * sg * (1 - sg) * m
        unit = EPS * np.sqrt((terms ** 2).sum())
        rd32 = g_pre_cuda(x3, g)
        for name, mix in (("cuda:v1 (emulated)", mixes_cuda(x, fn)),
                          ("cuda:v1 + fp64 folds and sum of squares", mixes_cuda(x, fn, fixed=True)),
                          ("BLAS fp32", mixes_blas(x, fn))):
            err[name].append(abs(grad_scale_f32(mix, rd32, base) - terms.sum()) / unit)
    print(f"grad/scale error in eps32 * ||terms||_2, T={a.tokens}, hidden={a.hidden} (K={k}), {a.draws} draws")
    for name, e in err.items():
        print(f"  {name:40s} median {np.median(e):6.2f}   max {np.max(e):6.2f}")


if __name__ == "__main__":
    main()
