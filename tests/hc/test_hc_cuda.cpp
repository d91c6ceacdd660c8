// The CUDA hyper-connection paths (kernels/cuda/hc.{cu,cpp}) against the references (references/hc.cpp), on the GPU.
//
// Every test skips ("no CUDA device") where no GPU is usable, and in builds without the CUDA kernels
// (PARITY_CUDA=OFF). For each cuda variant, stream dtype and shape:
//   * cuda:v1 forward and backward against the reference fed fp32 inputs (autograd backward, random upstream grads)
//     under the one-rounding bound: |got - want| <= half an ULP of the output's dtype + kRtol * max|want|;
//   * and against the naive low-precision composition (the same reference fed the native inputs, the HF rounding):
//     max|got - want| <= kNaiveK * max|naive - want| + kRtol * max|want| (the naive_relative rule);
//   * cuda:hf on bf16 streams: forward BITWISE equal to its contract written in LibTorch ops (HF's roundings, the
//     mix summed over j in order in fp32), and against the reference fed bf16 on the GPU (LibTorch CUDA ops, whose
//     bf16 matmul sums the H products its own way in cuBLAS): at most 1 bf16 ULP apart, in a few elements per
//     million (measured on H100: 2 of 1.2M, 5 of 4.2M, 22 of 33.5M), the count printed;
//   * inputs untouched, every output element written (outputs start as NaN), bitwise equal run to run.
// The measured errors are printed ([hc-cuda] lines) so that a GPU log records them.
#include "tests/hc/hc_test_support.hpp"

#ifdef PARITY_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "kernels/cuda/hc.cuh"
#endif

#include <algorithm>
#include <bit>
#include <cstdio>
#include <iterator>
#include <limits>
#include <optional>
#include <random>

namespace parity::hc {
namespace {

using namespace parity::hc::test;

// fp32-evaluation budget relative to the output's largest |value|: sums over K = H*D (16384 at V4 dims) or T in a
// different order than cuBLAS / LibTorch land at a few 1e-7 relative; one bf16 rounding (2^-9) is far above.
constexpr double kRtol = 1e-5;
constexpr double kNaiveK = 2.0;
constexpr uint64_t kSeed = 20250607;

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      {4, 1, 8, {}, "single token"},
      {4, 7, 13, {}, "odd T, hidden not a multiple of 8: the element-wise paths"},
      {4, 15, 24, {3, 5}, "leading dims flattened to T"},
      {3, 9, 16, {}, "hc = 3: run-time H below the kernels' register capacity"},
      {2, 33, 64, {}, "hc = 2"},
      {2, 45, 256, {}, "hc = 2 at hidden 256: hc_pre's bf16 dx_dfn on the tensor cores with 8 of its 24 mixes, the "
                       "last 16-token tile 13 tokens"},
      {4, 301, 1000, {}, "odd T over three 128-token tiles, hidden not a multiple of 256"},
      {4, 257, 4096, {}, "V4 hidden (K = 16384): bf16 takes the fused kernels (the forward's 17 tiles of 16 tokens, "
                         "hc_head's backward's 33 of 8, the last one token); fp32 256 K-chunks; grad_fn over several "
                         "token splits"},
      {4, 43, 2048, {}, "hidden 2048: the fused kernels with one 32-element block per warp, the last tile partial "
                        "(the forward's 11 of 16 tokens, hc_head's backward's 3 of 8)"},
      {3, 600, 4096, {}, "hc = 3 at V4 hidden: hc_pre's bf16 dx_dfn on the tensor cores with 6 live warps a CTA; on "
                         "132 SMs 4 token splits of up to 10 tiles, so the last of those warps refills a ring stage "
                         "up to twice"},
  };
  return s;
}

const Registry& registry() {
  static const Registry reg = [] {
    Registry r;
    register_hc_reference(r);
#ifdef PARITY_WITH_CUDA
    register_hc_cuda(r);
#endif
    return r;
  }();
  return reg;
}

// Why a test cannot run here, if it cannot.
std::optional<std::string> skip_reason() {
#ifndef PARITY_WITH_CUDA
  return "built without the CUDA kernels (PARITY_CUDA=OFF)";
#else
  if (!cuda_available()) return "no CUDA device";
  return std::nullopt;
#endif
}

at::Device gpu() { return at::Device(at::kCUDA, 0); }

TensorMap inputs(const Op& op, const OpContext& ctx, const Shape& s, uint64_t seed = kSeed) {
  return make_inputs(op, ctx, s, gpu(), seed);
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor d = (a.to(at::kDouble) - b.to(at::kDouble)).abs();
  if (d.numel() == 0) return 0;
  if (at::isnan(d).any().item<bool>()) return std::numeric_limits<double>::infinity();
  return d.max().item<double>();
}

double max_abs(const at::Tensor& a) { return a.numel() == 0 ? 0 : a.to(at::kDouble).abs().max().item<double>(); }

// One tensor of a variant against the reference (one-rounding bound, elementwise) and against the naive
// composition (max error at most kNaiveK times the naive one, plus the fp32 budget).
::testing::AssertionResult close(const std::string& what, const at::Tensor& got, const at::Tensor& want,
                                 const at::Tensor& naive) {
  if (got.sizes() != want.sizes()) return within_rounding_bound(what, got, want, kRtol);  // names the shapes
  const double err = max_abs_diff(got, want), err_naive = max_abs_diff(naive, want), scale = max_abs(want);
  std::printf("[hc-cuda] %-58s max|got-ref| %.3e  max|naive-ref| %.3e  ratio %.3f  max|ref| %.3e\n", what.c_str(),
              err, err_naive, err_naive > 0 ? err / err_naive : 0.0, scale);
  if (::testing::AssertionResult r = within_rounding_bound(what, got, want, kRtol); !r) return r;
  if (!(err <= kNaiveK * err_naive + kRtol * scale))
    return ::testing::AssertionFailure() << what << ": max error " << err << " above " << kNaiveK
                                         << " x the naive composition's " << err_naive << " + " << kRtol * scale;
  return ::testing::AssertionSuccess();
}

// cuda:hf's contract in LibTorch ops (bf16 streams): HF's roundings, with the mix summed over j = 0..H-1 in fp32 in
// order (bf16 x bf16 products are exact in fp32, so only the order of the sums matters).
at::Tensor hc_post_hf_sequential(const Constants& k, const TensorMap& in) {
  const at::Tensor& r = in.at("residual");
  const at::ScalarType dt = r.scalar_type();
  const at::Tensor x = in.at("x").reshape({-1, k.hidden}).to(at::kFloat);
  const at::Tensor res = r.reshape({-1, k.hc, k.hidden}).to(at::kFloat);
  const at::Tensor p = in.at("post").to(dt).reshape({-1, k.hc}).to(at::kFloat);
  const at::Tensor c = in.at("comb").to(dt).reshape({-1, k.hc, k.hc}).to(at::kFloat);
  const at::Tensor a = (p.unsqueeze(-1) * x.unsqueeze(-2)).to(dt);  // bf16(post * x)            [T, H, D]
  at::Tensor m = c.select(1, 0).unsqueeze(-1) * res.select(1, 0).unsqueeze(-2);  // comb[t,0,k] residual[t,0,:]
  for (int64_t j = 1; j < k.hc; ++j) m = m + c.select(1, j).unsqueeze(-1) * res.select(1, j).unsqueeze(-2);
  return (a.to(at::kFloat) + m.to(dt).to(at::kFloat)).to(dt).view(r.sizes());
}

// Against the LibTorch CUDA composition: every differing element within 1 bf16 ULP, and rare.
// cuBLAS does not sum comb^T @ residual's four bf16 products in sequential fp32, so the mix m can land one bf16 ULP
// away from cuda:hf's in rare elements; where post*x and m nearly cancel, that one ULP of m is many ULPs of the result
// (measured on an H100: 22 of 33.5M elements differ, 7 of them by more than 1 ULP; 152 of 268M at pack 16384, up to
// 32 ULP). The contract is therefore a rare-mismatch budget, as in the case file (bitwise(max_fraction=1e-6)).
::testing::AssertionResult differs_rarely(const std::string& what, const at::Tensor& got, const at::Tensor& want) {
  const int64_t n = bitwise_diff_count(got, want);
  const int64_t allowed = 2 + got.numel() / 1000000;
  std::printf("[hc-cuda] %-58s differs from the LibTorch CUDA composition in %lld / %lld\n", what.c_str(),
              static_cast<long long>(n), static_cast<long long>(got.numel()));
  if (n <= allowed) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << n << " / " << got.numel()
                                       << " elements differ from the LibTorch composition (" << allowed << " allowed)";
}

// ---------------------------------------------------------------------------------------------------------------
// Every cuda variant, every shape, bf16 and fp32 streams
// ---------------------------------------------------------------------------------------------------------------

std::vector<Case> cuda_cases() { return cases(registry(), at::kCUDA, shapes()); }

class CudaVariant : public VariantTest<registry> {
 protected:
  void SetUp() override {
    if (const auto why = skip_reason()) GTEST_SKIP() << *why;
  }
  std::string label(const std::string& tensor) const {
    return fmt::format("{} {} {} h{} t{} d{} {}", c().op, c().variant, dtype_name(c().dtype), c().shape.hc,
                       c().shape.tokens, c().shape.hidden, tensor);
  }
};

TEST_P(CudaVariant, ForwardMatchesReference) {
  SCOPED_TRACE(c().shape.covers);
  const OpContext ctx = this->ctx();
  const TensorMap in = inputs(op(), ctx, c().shape);
  const TensorMap before = clone(in);
  const TensorMap out = run_forward(op(), variant(), ctx, in);
  expect_unchanged(before, in);
  const TensorMap grad_out = make_grad_out(op(), out, kSeed + 1);
  const Expected naive = run_reference(op(), ctx, in, grad_out, false);
  if (hf_rounding()) {
    const at::Tensor& got = out.at("out");
    const at::Tensor contract = hc_post_hf_sequential(constants(ctx), in);
    EXPECT_TRUE(bitwise("out (cuda:hf vs its contract in LibTorch ops)", got, contract));
    EXPECT_TRUE(differs_rarely(label("out"), got, naive.out.at("out")));
    return;
  }
  const Expected want = run_reference(op(), ctx, in, grad_out, true);
  for (const std::string& name : op().outputs)
    EXPECT_TRUE(close(label(name), out.at(name), want.out.at(name), naive.out.at(name)));
}

TEST_P(CudaVariant, BackwardMatchesAutograd) {
  SCOPED_TRACE(c().shape.covers);
  const OpContext ctx = this->ctx();
  const TensorMap in = inputs(op(), ctx, c().shape);
  const TensorMap before = clone(in);
  const TensorMap out = run_forward(op(), variant(), ctx, in);
  const TensorMap saved = clone(out);
  const TensorMap grad_out = make_grad_out(op(), out, kSeed + 1);
  const TensorMap grads = run_backward(op(), variant(), ctx, in, out, grad_out);
  expect_unchanged(before, in);
  expect_unchanged(saved, out);
  const Expected want = run_reference(op(), ctx, in, grad_out, true);
  const Expected naive = run_reference(op(), ctx, in, grad_out, false);
  for (const std::string& name : op().grad_inputs) {
    EXPECT_EQ(grads.at(name).scalar_type(), in.at(name).scalar_type()) << "grad " << name;
    EXPECT_TRUE(close(label("grad " + name), grads.at(name), want.grads.at(name), naive.grads.at(name)));
  }
}

// Same bits run to run: no atomics, every sum in a fixed order.
TEST_P(CudaVariant, Deterministic) {
  const OpContext ctx = this->ctx();
  const TensorMap in = inputs(op(), ctx, c().shape);
  auto run = [&] {
    TensorMap out = run_forward(op(), variant(), ctx, in);
    TensorMap grads = run_backward(op(), variant(), ctx, in, out, make_grad_out(op(), out, kSeed + 1));
    for (auto& [name, t] : grads) out["grad " + name] = t;
    return out;
  };
  const TensorMap a = run(), b = run();
  for (const auto& [name, t] : a) EXPECT_TRUE(bitwise(name + " (run to run)", b.at(name), t));
}

INSTANTIATE_TEST_SUITE_P(Hc, CudaVariant, ::testing::ValuesIn(cuda_cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaVariant);  // no cuda variants in a PARITY_CUDA=OFF build

// ---------------------------------------------------------------------------------------------------------------
// cuda:hf at V4 width: bitwise with its contract, within 1 ULP of the LibTorch CUDA composition; backward = v1's
// ---------------------------------------------------------------------------------------------------------------

TEST(HcPostCudaHf, BitwiseWithItsContractAtV4Width) {
  if (const auto why = skip_reason()) GTEST_SKIP() << *why;
  const Shape s{4, 2048, 4096, {}, "V4 width"};
  const Op& op = registry().op("hc_post");
  const OpContext ctx = context(s, at::kBFloat16);
  const TensorMap in = inputs(op, ctx, s, kSeed + 7);
  const at::Tensor got = run_forward(op, registry().variant("hc_post", "cuda:hf"), ctx, in).at("out");
  EXPECT_TRUE(bitwise("out (cuda:hf vs its contract in LibTorch ops)", got, hc_post_hf_sequential(constants(ctx), in)));
  EXPECT_TRUE(differs_rarely("hc_post cuda:hf bf16 h4 t2048 d4096 out", got,
                                    hc_post_ref(constants(ctx), in).at("out")));
}

TEST(HcPostCudaHf, BackwardIsV1) {
  if (const auto why = skip_reason()) GTEST_SKIP() << *why;
  const Shape s = shapes()[5];
  const Op& op = registry().op("hc_post");
  const OpContext ctx = context(s, at::kBFloat16);
  const TensorMap in = inputs(op, ctx, s);
  const Variant& v1 = registry().variant("hc_post", "cuda:v1");
  const Variant& hf = registry().variant("hc_post", "cuda:hf");
  const TensorMap out = run_forward(op, v1, ctx, in);
  const TensorMap g = make_grad_out(op, out, kSeed + 1);
  const TensorMap gv1 = run_backward(op, v1, ctx, in, out, g), ghf = run_backward(op, hf, ctx, in, out, g);
  for (const auto& [name, t] : gv1) EXPECT_TRUE(bitwise("grad " + name, ghf.at(name), t));
}

// ---------------------------------------------------------------------------------------------------------------
// Which hc_pre / hc_head forward runs: the shapes above test the fused one only if it is taken where it should be
// ---------------------------------------------------------------------------------------------------------------

TEST(HcFusedForward, TakenAtV4DimsOnHopperOnly) {
  if (const auto why = skip_reason()) GTEST_SKIP() << *why;
#ifdef PARITY_WITH_CUDA
  namespace kc = cuda;
  const at::Tensor buf = at::empty({64}, at::TensorOptions().dtype(at::kBFloat16).device(gpu()));
  const void* p = buf.data_ptr();
  const void* off = static_cast<const char*>(p) + 2;  // 2-byte aligned only
  const at::Tensor fn_buf = at::empty({64}, at::TensorOptions().dtype(at::kFloat).device(gpu()));
  const float* fn = fn_buf.data_ptr<float>();  // read in float2: one float off is refused
  const bool hopper = at::cuda::getCurrentDeviceProperties()->major == 9;
  for (const kc::MixKind kind : {kc::MixKind::pre, kc::MixKind::head}) {
    std::printf("[hc-cuda] fused forward %s: %d resident clusters of 16 CTAs (hidden 4096), %d (2048)\n",
                kind == kc::MixKind::pre ? "pre" : "head", kc::mix_fused_fwd_clusters(kind, 4096),
                kc::mix_fused_fwd_clusters(kind, 2048));
    EXPECT_EQ(kc::mix_fused_fwd_fits(kind, kc::Dtype::bf16, p, fn, p, 4, 4096), hopper);
    EXPECT_EQ(kc::mix_fused_fwd_fits(kind, kc::Dtype::bf16, p, fn, p, 4, 2048), hopper);
    EXPECT_FALSE(kc::mix_fused_fwd_fits(kind, kc::Dtype::fp32, p, fn, p, 4, 4096));
    EXPECT_FALSE(kc::mix_fused_fwd_fits(kind, kc::Dtype::bf16, p, fn, p, 3, 4096));
    EXPECT_FALSE(kc::mix_fused_fwd_fits(kind, kc::Dtype::bf16, p, fn, p, 4, 1024));
    EXPECT_FALSE(kc::mix_fused_fwd_fits(kind, kc::Dtype::bf16, off, fn, p, 4, 4096));
    EXPECT_FALSE(kc::mix_fused_fwd_fits(kind, kc::Dtype::bf16, p, fn, off, 4, 4096));
    EXPECT_FALSE(kc::mix_fused_fwd_fits(kind, kc::Dtype::bf16, p, fn + 1, p, 4, 4096));
  }
#endif
}

// Where the one-pass backward can run: hc_head at hidden 2048 and 4096 (the bridge takes it there), hc_pre at 4096
// (mix_fused_bwd_mma, held to the two-pass kernels by the test below), bf16, hc 4, 16-byte aligned tensors, Hopper.
TEST(HcFusedBackward, TakenAtV4DimsOnHopperOnly) {
  if (const auto why = skip_reason()) GTEST_SKIP() << *why;
#ifdef PARITY_WITH_CUDA
  namespace kc = cuda;
  const at::Tensor buf = at::empty({64}, at::TensorOptions().dtype(at::kBFloat16).device(gpu()));
  const void* p = buf.data_ptr();
  const void* off = static_cast<const char*>(p) + 2;
  const bool hopper = at::cuda::getCurrentDeviceProperties()->major == 9;
  for (const kc::MixKind kind : {kc::MixKind::pre, kc::MixKind::head}) {
    const bool pre = kind == kc::MixKind::pre;
    EXPECT_EQ(kc::mix_fused_bwd_fits(kind, kc::Dtype::bf16, p, p, p, 4, 4096), hopper);
    EXPECT_EQ(kc::mix_fused_bwd_fits(kind, kc::Dtype::bf16, p, p, p, 4, 2048), hopper && !pre);
    EXPECT_FALSE(kc::mix_fused_bwd_fits(kind, kc::Dtype::fp32, p, p, p, 4, 4096));
    EXPECT_FALSE(kc::mix_fused_bwd_fits(kind, kc::Dtype::bf16, p, p, p, 3, 4096));
    EXPECT_FALSE(kc::mix_fused_bwd_fits(kind, kc::Dtype::bf16, p, p, p, 4, 1024));
    EXPECT_FALSE(kc::mix_fused_bwd_fits(kind, kc::Dtype::bf16, off, p, p, 4, 4096));
    EXPECT_FALSE(kc::mix_fused_bwd_fits(kind, kc::Dtype::bf16, p, off, p, 4, 4096));
    EXPECT_FALSE(kc::mix_fused_bwd_fits(kind, kc::Dtype::bf16, p, p, off, 4, 4096));
  }
#endif
}

// hc_pre's one-pass backward (mix_comb_bwd, mix_fused_bwd_mma) against the two-pass kernels (reduce, token,
// dx_dfn_mma), which the cases hold to the reference: both compute grad_x by the same expression from the same
// coefficients, whose fp64 row sums differ only in their order, so grad_x may differ by a bf16 ULP where a coefficient
// lands on another fp32 rounding (on the H200: no element of 4.3M or 67M did); grad_fn sums its tokens in other splits;
// grad_base and grad_scale sum the same fp64 gate rows. 257 tokens: 17 tiles over 7 clusters, the last tile one token;
// 4099: the ring and the slots wrap many times, the last tile three tokens. The two passes run twice: with the sums in
// dx_dfn_mma's launch (its arrivals counters, which it must leave zero) and as launches of their own, the same bits.
TEST(HcFusedBackward, PreOnePassAgreesWithTwoPass) {
  if (const auto why = skip_reason()) GTEST_SKIP() << *why;
#ifdef PARITY_WITH_CUDA
  namespace kc = cuda;
  constexpr int kHc = 4, kMixes = 2 * kHc + kHc * kHc;
  constexpr int64_t kHidden = 4096, kK = kHc * kHidden;
  const at::Tensor probe = at::empty({64}, at::TensorOptions().dtype(at::kBFloat16).device(gpu()));
  if (!kc::mix_fused_bwd_fits(kc::MixKind::pre, kc::Dtype::bf16, probe.data_ptr(), probe.data_ptr(), probe.data_ptr(),
                              kHc, kHidden))
    GTEST_SKIP() << "no one-pass backward on this device (it needs clusters of 16 CTAs: Hopper)";
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(gpu());
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(gpu());
  const kc::MixConsts k{1e-6f, 1e-6f, 2.f, 20};
  const cudaStream_t s = at::cuda::getCurrentCUDAStream();
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  for (const int64_t tokens : {int64_t{257}, int64_t{4099}}) {
    at::manual_seed(kSeed + tokens);
    const at::Tensor x = at::randn({tokens, kHc, kHidden}, f32).to(at::kBFloat16);
    const at::Tensor gy = at::randn({tokens, kHidden}, f32).to(at::kBFloat16);
    const at::Tensor mixes = at::randn({tokens, kMixes}, f32), fn = at::randn({kMixes, kK}, f32) * 0.02;
    const at::Tensor base = at::randn({kMixes}, f32), scale = at::randn({3}, f32) * 0.3 + 1.0;
    const at::Tensor g_post = at::randn({tokens, kHc}, f32), g_comb = at::randn({tokens, kHc, kHc}, f32);
    enum class Pass { one, two, two_sums_apart };
    at::Tensor arrivals = at::empty({kc::mix_bwd_arrivals(kHidden)}, f32.dtype(at::kInt));
    const auto run = [&](Pass pass) {
      const bool one_pass = pass == Pass::one;
      unsigned* arrive =
          pass == Pass::two ? reinterpret_cast<unsigned*>(arrivals.fill_(-1).data_ptr<int32_t>()) : nullptr;
      constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();  // poison: every element must be written
      at::Tensor gx = at::full({tokens, kHc, kHidden}, kNaN, f32).to(at::kBFloat16);
      at::Tensor gfn = at::full({kMixes, kK}, kNaN, f32), gbase = at::full({kMixes}, kNaN, f32);
      at::Tensor gscale = at::full({3}, kNaN, f32);
      at::Tensor gate = at::empty({tokens, kc::mix_gate_width(kc::MixKind::pre)}, f64);
      at::Tensor hist = at::empty({kc::sinkhorn_hist_floats(tokens, kHc, k.sinkhorn_iters)}, f32);
      const int splits = one_pass ? kc::mix_fused_bwd_splits(kc::MixKind::pre, tokens, kHidden)
                                  : kc::mix_bwd_splits(kc::MixKind::pre, kc::Dtype::bf16, tokens, kHc, kHidden, sms);
      at::Tensor part = at::empty({splits, kMixes, kK}, f32);
      if (one_pass) {
        kc::launch_mix_comb_bwd(mixes.data_ptr<float>(), g_comb.data_ptr<float>(), base.data_ptr<float>(),
                                scale.data_ptr<float>(), gate.data_ptr<double>(), hist.data_ptr<float>(), tokens, kHc,
                                k, s);
        kc::launch_mix_fused_bwd(kc::MixKind::pre, x.data_ptr(), gy.data_ptr(), mixes.data_ptr<float>(),
                                 g_post.data_ptr<float>(), fn.data_ptr<float>(), base.data_ptr<float>(),
                                 scale.data_ptr<float>(), gate.data_ptr<double>(), gx.data_ptr(),
                                 part.data_ptr<float>(), tokens, kHc, kHidden, k, s);
        kc::launch_mix_bwd_sums(kc::MixKind::pre, part.data_ptr<float>(), splits,
                                {gfn.data_ptr<float>(), gate.data_ptr<double>(), gbase.data_ptr<float>(),
                                 gscale.data_ptr<float>(), nullptr},
                                tokens, kHc, kHidden, s);
      } else {
        at::Tensor red = at::empty({tokens, 1 + kHc}, f64);
        at::Tensor coef = at::empty({kc::mix_coef_floats(kc::MixKind::pre, tokens)}, f32);
        kc::launch_mix_bwd_reduce(kc::MixKind::pre, kc::Dtype::bf16, x.data_ptr(), gy.data_ptr(),
                                  red.data_ptr<double>(), mixes.data_ptr<float>(), g_comb.data_ptr<float>(),
                                  base.data_ptr<float>(), scale.data_ptr<float>(), gate.data_ptr<double>(),
                                  hist.data_ptr<float>(), tokens, kHc, kHidden, k, s);
        kc::launch_mix_bwd_token(kc::MixKind::pre, mixes.data_ptr<float>(), red.data_ptr<double>(),
                                 g_post.data_ptr<float>(), base.data_ptr<float>(), scale.data_ptr<float>(),
                                 coef.data_ptr<float>(), gate.data_ptr<double>(), arrive, tokens, kHc, kHidden, k, s);
        const auto dx_dfn = [&] {
          kc::launch_mix_bwd_dx_dfn(kc::MixKind::pre, kc::Dtype::bf16, x.data_ptr(), gy.data_ptr(),
                                    coef.data_ptr<float>(), fn.data_ptr<float>(), gx.data_ptr(),
                                    part.data_ptr<float>(), tokens, kHc, kHidden, splits,
                                    {gfn.data_ptr<float>(), gate.data_ptr<double>(), gbase.data_ptr<float>(),
                                     gscale.data_ptr<float>(), arrive},
                                    s);
        };
        dx_dfn();
        if (arrive) {  // again alone, on the counters it must have left zero: grad_fn written again, the same bits
          const at::Tensor first = gfn.clone();
          gfn.fill_(kNaN);
          dx_dfn();
          EXPECT_TRUE(at::equal(first.view(at::kInt), gfn.view(at::kInt))) << tokens << " tokens: dx_dfn again";
        }
      }
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      return std::vector<at::Tensor>{gx.cpu(), gfn.cpu(), gbase.cpu(), gscale.cpu()};
    };
    const std::vector<at::Tensor> one = run(Pass::one), two = run(Pass::two), apart = run(Pass::two_sums_apart);
    const std::string at_shape = fmt::format("{} tokens", tokens);
    for (int o = 0; o < 4; ++o)
      EXPECT_TRUE(at::equal(two[o].view(at::kShort), apart[o].view(at::kShort)))
          << at_shape << ", output " << o << ": the sums in dx_dfn's launch differ from their own launches'";
    // grad_x: every element written (no NaN left of the poison), and within one bf16 ULP of the two-pass one.
    const auto* a = static_cast<const int16_t*>(one[0].data_ptr());
    const auto* b = static_cast<const int16_t*>(two[0].data_ptr());
    int64_t unwritten = 0, differ = 0, far = 0;
    for (int64_t e = 0; e < one[0].numel(); ++e) {
      unwritten += (a[e] & 0x7f80) == 0x7f80 && (a[e] & 0x7f) != 0;
      if (a[e] == b[e]) continue;
      ++differ;
      const auto key = [](int16_t v) { return v < 0 ? -int32_t(v & 0x7fff) : int32_t(v); };
      far += std::abs(key(a[e]) - key(b[e])) > 1;
    }
    EXPECT_EQ(unwritten, 0) << at_shape;
    EXPECT_EQ(far, 0) << at_shape << ": grad_x elements more than 1 ULP from the two-pass path (" << differ
                      << " differ at all, of " << one[0].numel() << ")";
    // grad_fn, grad_base, grad_scale: fp32 sums of the same products in other orders.
    for (int o = 1; o < 4; ++o) {
      EXPECT_FALSE(one[o].isnan().any().item<bool>()) << at_shape << ", output " << o;
      const double scale_of = two[o].abs().max().item<double>();
      const double worst = (one[o] - two[o]).abs().max().item<double>();
      EXPECT_LE(worst, 1e-5 * scale_of) << at_shape << ", output " << o << " (1 grad_fn, 2 grad_base, 3 grad_scale)";
    }
  }
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// The Sinkhorn's division: one reciprocal per line and one range check instead of `/` per element
// ---------------------------------------------------------------------------------------------------------------

// Against the CPU's IEEE division, bit for bit (a NaN matches any NaN). A thread divides 4 lines of 4 numerators under
// one range check, so operands are drawn per group of 4 lines, in four kinds, so that both of divide_lines()' paths
// run: within 2^+-30 of 1 (its fast path); within 2^+-61 (mostly fast, and the edges of its range at 2^+-60); any bit
// pattern; and special values (zeros, subnormals, the largest finite, Inf, NaN, the range edges and their neighbours)
// among values near 1: the last two take the `/` fallback.
TEST(HcSinkhornDivide, BitwiseEqualToIeeeDivision) {
  if (const auto why = skip_reason()) GTEST_SKIP() << *why;
#ifdef PARITY_WITH_CUDA
  constexpr int64_t kGroups = int64_t{1} << 20, kLines = 4 * kGroups;
  constexpr uint32_t kLo = (127u - 60) << 23, kHi = (127u + 60) << 23;  // divide_lines()' range: 2^-60 .. 2^60
  const uint32_t specials[] = {0u,         0x80000000u, 1u,          0x807fffffu, 0x00800000u, 0x7f7fffffu,
                               0x7f800000u, 0xff800000u, 0x7fc00000u, kLo - 1,     kLo,         kLo + 1,
                               kHi - 1,     kHi,         kHi + 1,     0x3f800000u, 0xc0200000u};
  std::mt19937_64 rng(kSeed);
  const auto near_one = [](uint64_t r, int span) {  // sign and mantissa from r, exponent within 2^+-span
    return (uint32_t(r) & 0x807fffffu) | uint32_t(127 - span + (r >> 32) % (2 * span + 1)) << 23;
  };
  auto draw = [&](int64_t group) -> uint32_t {
    const uint64_t r = rng();
    switch (group % 4) {
      case 0: return near_one(r, 30);
      case 1: return near_one(r, 61);
      case 2: return uint32_t(r);
      default: return r & (uint64_t{1} << 63) ? specials[(r >> 32) % std::size(specials)] : near_one(r, 30);
    }
  };
  std::vector<uint32_t> num(4 * kLines), den(kLines), want(4 * kLines);
  int64_t fast = 0;
  for (int64_t g = 0; g < kGroups; ++g) {
    uint32_t lo = ~0u, hi = 0;
    for (int64_t i = 4 * g; i < 4 * g + 4; ++i) {
      den[i] = draw(g);
      for (int k = 0; k < 4; ++k) {
        num[4 * i + k] = draw(g);
        want[4 * i + k] = std::bit_cast<uint32_t>(std::bit_cast<float>(num[4 * i + k]) / std::bit_cast<float>(den[i]));
      }
      for (const uint32_t v : {den[i], num[4 * i], num[4 * i + 1], num[4 * i + 2], num[4 * i + 3]})
        lo = std::min(lo, v & 0x7fffffffu), hi = std::max(hi, v & 0x7fffffffu);
    }
    fast += lo >= kLo && hi <= kHi;
  }
  std::printf("[hc-cuda] sinkhorn divide: %lld groups of 4 lines, %lld in the fast path's range\n",
              static_cast<long long>(kGroups), static_cast<long long>(fast));
  ASSERT_GT(fast, kGroups / 4);
  ASSERT_GT(kGroups - fast, kGroups / 4);
  const auto bits = [](std::vector<uint32_t>& v) {
    return at::from_blob(v.data(), {static_cast<int64_t>(v.size())}, at::kInt).to(gpu());
  };
  const at::Tensor n = bits(num), d = bits(den);
  at::Tensor q = at::full({4 * kLines}, -1, at::TensorOptions().dtype(at::kInt).device(gpu()));
  cuda::launch_sinkhorn_divide(static_cast<const float*>(n.data_ptr()), static_cast<const float*>(d.data_ptr()),
                               static_cast<float*>(q.data_ptr()), kLines, at::cuda::getCurrentCUDAStream());
  const at::Tensor got = q.cpu();
  const uint32_t* g = static_cast<const uint32_t*>(got.data_ptr());
  int64_t differ = 0;
  for (int64_t e = 0; e < 4 * kLines; ++e) {
    const bool nan = std::isnan(std::bit_cast<float>(want[e])) && std::isnan(std::bit_cast<float>(g[e]));
    if (g[e] == want[e] || nan) continue;
    if (++differ <= 5)
      ADD_FAILURE() << fmt::format("{:a} / {:a}: got {:a}, IEEE {:a}", std::bit_cast<float>(num[e]),
                                   std::bit_cast<float>(den[e / 4]), std::bit_cast<float>(g[e]),
                                   std::bit_cast<float>(want[e]));
  }
  EXPECT_EQ(differ, 0) << "quotients of " << 4 * kLines;
#endif
}

// post and comb at hc = 4, four threads per token (a line each, transposed by shuffles) against one thread per token:
// bit for bit. In the first half, tokens come in four kinds, so that every warp (8 tokens) reruns its normalisations
// with `/`: logits ~N(0, 1); ~N(0, 40), whose softmax underflows to zeros (out of the fast division's range); one
// logit +Inf or NaN (NaN through every line of the quad); and all logits equal and huge. In the second half every
// token's logits are ~N(0, 1), so whole warps keep the fast division. 1003 tokens: the last block's quads run past
// the last token.
TEST(HcPostComb, FourThreadsPerTokenGiveTheBitsOfOne) {
  if (const auto why = skip_reason()) GTEST_SKIP() << *why;
#ifdef PARITY_WITH_CUDA
  constexpr int64_t kTokens = 1003;
  constexpr int kHc = 4, kMixes = 2 * kHc + kHc * kHc;
  std::mt19937_64 rng(kSeed);
  std::normal_distribution<float> normal(0.f, 1.f);
  constexpr float kInf = std::numeric_limits<float>::infinity(), kNaN = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> mixes(kTokens * kMixes), base_values(kMixes);
  for (float& b : base_values) b = normal(rng);
  for (int64_t t = 0; t < kTokens; ++t)
    for (int m = 0; m < kMixes; ++m) {
      float& x = mixes[t * kMixes + m];
      switch (t < kTokens / 2 ? t % 4 : 0) {
        case 0: x = normal(rng); break;
        case 1: x = 40.f * normal(rng); break;
        case 2: x = m == 2 * kHc + t % (kHc * kHc) ? (t % 8 == 2 ? kInf : kNaN) : normal(rng); break;
        default: x = 1e30f;
      }
    }
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(gpu());
  const at::Tensor mix = at::from_blob(mixes.data(), {kTokens, kMixes}, at::kFloat).to(gpu());
  const at::Tensor base = at::from_blob(base_values.data(), {kMixes}, at::kFloat).to(gpu());
  const at::Tensor scale = at::full({3}, 0.75f, opts);
  const cuda::MixConsts k{1e-6f, 1e-6f, 2.f, 20};
  std::vector<at::Tensor> out;  // post, comb: four threads per token, then one
  for (const bool one : {false, true}) {
    at::Tensor post = at::full({kTokens, kHc}, -1.f, opts), comb = at::full({kTokens, kHc, kHc}, -1.f, opts);
    cuda::launch_mix_post_comb(mix.data_ptr<float>(), base.data_ptr<float>(), scale.data_ptr<float>(),
                               post.data_ptr<float>(), comb.data_ptr<float>(), kTokens, kHc, k,
                               at::cuda::getCurrentCUDAStream(), one);
    out.push_back(post.cpu());
    out.push_back(comb.cpu());
  }
  for (int o = 0; o < 2; ++o) {
    const at::Tensor quad = out[o], single = out[o + 2];
    const uint32_t* q = static_cast<const uint32_t*>(quad.data_ptr());
    const uint32_t* w = static_cast<const uint32_t*>(single.data_ptr());
    int64_t differ = 0, nan = 0, zero = 0;
    for (int64_t e = 0; e < quad.numel(); ++e) {
      nan += std::isnan(std::bit_cast<float>(w[e]));
      zero += std::bit_cast<float>(w[e]) == 0.f;
      if (q[e] != w[e] && ++differ <= 5)
        ADD_FAILURE() << fmt::format("{} element {}: four threads {:a}, one {:a}", o == 0 ? "post" : "comb", e,
                                     std::bit_cast<float>(q[e]), std::bit_cast<float>(w[e]));
    }
    EXPECT_EQ(differ, 0) << (o == 0 ? "post" : "comb") << " elements of " << quad.numel();
    if (o == 1) {
      std::printf("[hc-cuda] post_comb: %lld comb elements, %lld NaN, %lld zero\n",
                  static_cast<long long>(quad.numel()), static_cast<long long>(nan), static_cast<long long>(zero));
      EXPECT_GT(nan, 0) << "no token took the NaN through the Sinkhorn";
    }
  }
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// Inputs outside the contract
// ---------------------------------------------------------------------------------------------------------------

TEST(HcCudaInputs, Fp16StreamsAreRejectedByName) {
  if (const auto why = skip_reason()) GTEST_SKIP() << *why;
  expect_fp16_rejected(registry(), gpu(), shapes()[1], kSeed);
}

TEST(HcCudaInputs, CpuTensorsAndWideHcAreRejected) {
  if (const auto why = skip_reason()) GTEST_SKIP() << *why;
  const Op& op = registry().op("hc_post");
  const Variant& v = registry().variant("hc_post", "cuda:v1");
  {
    const Shape s{4, 3, 8, {}, "cpu inputs"};
    const OpContext ctx = context(s, at::kBFloat16);
    TensorMap in = op.make_inputs(ctx, kSeed, at::kCPU);
    TensorMap out = poisoned_outputs(op, ctx, in, gpu());
    EXPECT_THROW(v.forward(ctx, in, out), InputError);
  }
  {
    const Shape s{8, 3, 8, {}, "hc = 8"};
    const OpContext ctx = context(s, at::kBFloat16);
    TensorMap in = inputs(op, ctx, s);
    TensorMap out = poisoned_outputs(op, ctx, in, gpu());
    EXPECT_THROW(v.forward(ctx, in, out), InputError);
  }
}

// No token: every output is empty and every parameter gradient a sum over nothing, zero, on every path (hc_pre's
// tensor-core backward built its tensor maps over a null pointer at hidden 4096).
TEST(HcCudaInputs, ZeroTokensGiveEmptyOutputsAndZeroParameterGradients) {
  if (const auto why = skip_reason()) GTEST_SKIP() << *why;
  for (const char* name : {"hc_pre", "hc_head", "hc_post"}) {
    const Op& op = registry().op(name);
    const Variant& v = registry().variant(name, "cuda:v1");
    for (const int64_t hidden : {int64_t{4096}, int64_t{13}}) {
      const Shape s{4, 0, hidden, {}, "no token"};
      const OpContext ctx = context(s, at::kBFloat16);
      const TensorMap in = inputs(op, ctx, s);
      const TensorMap out = run_forward(op, v, ctx, in);
      const TensorMap grads = run_backward(op, v, ctx, in, out, make_grad_out(op, out, kSeed));
      for (const auto& [g, t] : grads)
        EXPECT_TRUE(t.numel() == 0 || t.eq(0).all().item<bool>()) << name << " hidden " << hidden << ": grad " << g;
    }
  }
}

// Every tensor handed to a CUDA variant on one device (the bridge's guard is x's): another GPU's is refused by name.
TEST(HcCudaInputs, TensorsOnAnotherGpuAreRejected) {
  if (const auto why = skip_reason()) GTEST_SKIP() << *why;
  if (at::cuda::device_count() < 2) GTEST_SKIP() << "one CUDA device";
  const Op& op = registry().op("hc_post");
  const Variant& v = registry().variant("hc_post", "cuda:v1");
  const Shape s{4, 3, 8, {}, "comb on another GPU"};
  const OpContext ctx = context(s, at::kBFloat16);
  TensorMap in = inputs(op, ctx, s);
  in["comb"] = in.at("comb").to(at::Device(at::kCUDA, 1));
  TensorMap out = poisoned_outputs(op, ctx, in, gpu());
  try {
    v.forward(ctx, in, out);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'comb' on cuda:1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace parity::hc
