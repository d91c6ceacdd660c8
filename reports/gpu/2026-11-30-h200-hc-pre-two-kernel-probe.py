# Probe (timing only): could hc_pre's forward at V4 dims (T=16384, H=4, D=4096, bf16) run as two kernels per token
# chunk, a tensor-core GEMM for the mixes (fn split in three bf16 terms: N = 72; cuBLAS through torch.mm) and the
# collapse y = sum_h pre_h x_h (Triton, a program per token and 1024 positions) reading the chunk again, from L2 where
# the chunk fits it? pre stands in as sigmoid of four mix columns. Each pipeline is one CUDA graph; CUDA events around
# its replay, 3 warm-ups, the median of 20. "serial": GEMM then collapse, chunk after chunk, one stream; "overlapped":
# the GEMMs on one stream, each chunk's collapse on a second stream after its GEMM.
import statistics
import torch
import triton
import triton.language as tl

torch.manual_seed(0)
T, H, D = 16384, 4, 4096
K = H * D
x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
W = torch.randn(K, 72, device="cuda", dtype=torch.bfloat16) * 0.01
mixes = torch.empty(T, 72, device="cuda", dtype=torch.bfloat16)
pre = torch.empty(T, 4, device="cuda", dtype=torch.float32)
y = torch.empty(T, D, device="cuda", dtype=torch.bfloat16)
src = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
dst = torch.empty_like(src)


@triton.jit
def collapse(x_ptr, pre_ptr, y_ptr, D: tl.constexpr, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for h in tl.static_range(4):
        p = tl.load(pre_ptr + t * 4 + h)
        acc += p * tl.load(x_ptr + (t * 4 + h) * D + d).to(tl.float32)
    tl.store(y_ptr + t * D + d, acc.to(tl.bfloat16))


def timed(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def graphed(body):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            body()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    return g.replay


def gemm(c0, C):
    torch.mm(x[c0:c0 + C], W, out=mixes[c0:c0 + C])
    torch.sigmoid(mixes[c0:c0 + C, :4].float(), out=pre[c0:c0 + C])


def coll(c0, C):
    collapse[(C, D // 1024)](x[c0:], pre[c0:], y[c0:], D=D, BLOCK=1024, num_warps=4)


def serial(C, do_gemm=True, do_coll=True):
    def body():
        for c0 in range(0, T, C):
            if do_gemm: gemm(c0, C)
            if do_coll: coll(c0, C)
    return graphed(body)


def overlapped(C):
    side = torch.cuda.Stream()
    def body():
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        for c0 in range(0, T, C):
            gemm(c0, C)
            done = torch.cuda.Event()
            done.record(main)
            side.wait_event(done)
            with torch.cuda.stream(side):
                coll(c0, C)
        main.wait_stream(side)
    return graphed(body)


copy_ms = timed(lambda: dst.copy_(src))
copy_gbs = 2 * src.numel() / copy_ms / 1e6
one_pass = (x.numel() + y.numel()) * 2
pct = lambda ms: one_pass / (ms * 1e6) / copy_gbs * 100
print(f"copy {copy_gbs:.1f} GB/s (1 GiB, read + write); one-pass bytes {one_pass / 1e9:.3f} GB: 75% of copy is "
      f"{one_pass / (0.75 * copy_gbs * 1e6):.4f} ms")
for C in (16384, 4096, 2048, 1024, 512):
    g, c, s, o = (timed(f) for f in (serial(C, True, False), serial(C, False, True), serial(C), overlapped(C)))
    print(f"chunk {C:5d}: gemm {g:.4f}  collapse alone {c:.4f}  serial {s:.4f} ({pct(s):.1f}%)  "
          f"overlapped {o:.4f} ms ({pct(o):.1f}% of copy)")
