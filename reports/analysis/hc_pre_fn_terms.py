"""Can hc_pre's fused forward multiply fn in two bf16 terms instead of three? (mix_fused_fwd, kernels/cuda/hc.cu)

The tensor-core multiply splits fp32 fn exactly into three bf16 terms (hi + mid + lo == fn), so every product x * fn
is exact and only the sums round; the third term's MMAs are a third of the multiply, which is what keeps hc_pre's
forward at the 75% line on an H100 (ablation: 0.2996 -> 0.2464 ms without the MMAs). With two terms fn is kept to
16 significant bits. This script measures what that alone does to the mixes at V4's K = 4 * 4096, against the fp64
reference and next to the naive composition the case's naive_relative(k=2, floor=1) policy measures against (HF's
fp32 x.float() @ fn.T, here LibTorch's CPU sgemm): products and sums of the two- and three-term versions in fp64,
so that only fn's rounding shows. Measured (2026-11-27, torch 2.11 CPU, 5 seeds, T = 256):

    max |err| over the mixes (|mix| up to ~10): naive fp32 3.25e-06 to 3.83e-06; fn in two terms 2.32e-05 to
    2.48e-05 (6.1x to 7.6x the naive); three terms 0 (exact)

The policy allows twice the naive error plus one fp32 rounding step at the reference's magnitude (~1e-6 at |mix| ~10),
so two terms would fail it before the kernel's own fp32 sums add anything: the third term stays.

    python reports/analysis/hc_pre_fn_terms.py
"""
import torch

T, K, M = 256, 16384, 24


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


for seed in range(5):
    torch.manual_seed(seed)
    x = torch.randn(T, K).to(torch.bfloat16)
    fn = torch.randn(M, K) * 0.02
    hi = bf16(fn)
    mid = bf16(fn - hi)
    lo = bf16(fn - hi - mid)
    assert torch.equal(hi + mid + lo, fn), "three bf16 terms hold fp32 fn exactly"
    ref = x.double() @ fn.double().T
    err = {
        "naive fp32": (x.float() @ fn.T).double(),
        "two terms": x.double() @ (hi + mid).double().T,
        "three terms": x.double() @ (hi + mid + lo).double().T,
    }
    err = {k: (v - ref).abs().max().item() for k, v in err.items()}
    print(f"seed {seed}: " + ", ".join(f"{k} {v:.2e}" for k, v in err.items())
          + f"; two / naive {err['two terms'] / err['naive fp32']:.1f}x; max |mix| {ref.abs().max().item():.2f}")
