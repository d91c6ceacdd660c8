// Hyper-connections reference: HF transformers 5.17.0's composition, line for line (see hc.hpp). Fed fp32 it is
// the fp32 reference; fed bf16 streams it rounds exactly where HF rounds.
#include "references/hc.hpp"

#include <fmt/format.h>

#include <cmath>
#include <parity/error.hpp>

namespace parity::hc {

// Every path reads the constants here, and so does the cost model when a case file is loaded: a value no path could
// mean is refused there, naming the file and the constant (a NaN or negative eps made every output NaN, a parity
// failure blamed on the kernels; sinkhorn_iters = 2.5 ran as 2).
Constants constants(const OpContext& ctx) {
  const auto fail = [](const char* name, double v, const char* want) {
    throw InputError(fmt::format("constants.{} = {}: {}", name, v, want));
  };
  const double iters = ctx.constant(kSinkhornIters);
  if (!(iters >= 1 && iters < 0x1p53 && iters == std::floor(iters)))
    fail(kSinkhornIters, iters, "must be a whole number >= 1");
  const auto eps = [&](const char* name) {
    const double v = ctx.constant(name);
    if (!(v >= 0 && std::isfinite(v))) fail(name, v, "must be finite and >= 0");
    return v;
  };
  const double post_mult = ctx.constant(kPostMult);
  if (!std::isfinite(post_mult)) fail(kPostMult, post_mult, "must be finite");
  return {ctx.dim(kHc), ctx.dim(kHidden), static_cast<int64_t>(iters), eps(kHcEps), eps(kRmsEps), post_mult};
}

namespace {

// HF's `.float()`: compute in at least fp32. Fed fp64 (the fp64 reference) the composition stays in fp64.
at::Tensor at_least_fp32(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? t : t.to(at::kFloat);
}

// DeepseekV4UnweightedRMSNorm (M:66-72): the rsqrt is cast to x's dtype before the multiply.
at::Tensor unweighted_rms_norm(const at::Tensor& x, double eps) {
  return x * at::rsqrt(at_least_fp32(x).square().mean(-1, true) + eps).to(x.scalar_type());
}

// Stream collapse: pre (fp32) promotes the product to fp32, one rounding back to the streams' dtype.
at::Tensor collapse(const at::Tensor& pre, const at::Tensor& x) {
  return (pre.unsqueeze(-1) * x).sum(-2).to(x.scalar_type());
}

at::Tensor sinkhorn(at::Tensor comb, const Constants& k) {
  comb = at::softmax(comb, -1) + k.hc_eps;
  comb = comb / (comb.sum(-2, true) + k.hc_eps);
  for (int64_t i = 0; i < k.sinkhorn_iters - 1; ++i) {
    comb = comb / (comb.sum(-1, true) + k.hc_eps);
    comb = comb / (comb.sum(-2, true) + k.hc_eps);
  }
  return comb;
}

}  // namespace

namespace {

// The stages of hc_pre and hc_head: the normed projection, the gates, the collapse (Op::stages).
at::Tensor mixes_ref(const Constants& k, const at::Tensor& x, const at::Tensor& fn) {
  at::Tensor flat = unweighted_rms_norm(at_least_fp32(x.flatten(-2)), k.rms_eps);
  return at::linear(flat, at_least_fp32(fn));
}

TensorMap pre_gates_ref(const Constants& k, const TensorMap& in) {
  const at::Tensor& mixes = in.at("mixes");
  const int64_t h = k.hc;
  auto w = mixes.split_with_sizes({h, h, h * h}, -1);
  auto b = in.at("base").split_with_sizes({h, h, h * h});
  const at::Tensor& scale = in.at("scale");
  at::Tensor pre = at::sigmoid(w[0] * scale[0] + b[0]) + k.hc_eps;
  at::Tensor post = k.post_mult * at::sigmoid(w[1] * scale[1] + b[1]);
  std::vector<int64_t> comb_shape(w[2].sizes().begin(), w[2].sizes().end() - 1);
  comb_shape.push_back(h);
  comb_shape.push_back(h);
  at::Tensor comb = sinkhorn(w[2].view(comb_shape) * scale[2] + b[2].view({h, h}), k);
  return {{"pre", pre}, {"post", post}, {"comb", comb}};
}

TensorMap head_gates_ref(const Constants& k, const TensorMap& in) {
  return {{"pre", at::sigmoid(in.at("mixes") * at_least_fp32(in.at("scale")) + at_least_fp32(in.at("base"))) +
                      k.hc_eps}};
}

}  // namespace

TensorMap hc_pre_ref(const Constants& k, const TensorMap& in) {
  TensorMap out{{"mixes", mixes_ref(k, in.at("x"), in.at("fn"))}};
  TensorMap gates = pre_gates_ref(k, {{"mixes", out["mixes"]}, {"base", in.at("base")}, {"scale", in.at("scale")}});
  out.insert(gates.begin(), gates.end());
  out["collapsed"] = collapse(out["pre"], in.at("x"));
  return out;
}

TensorMap hc_post_ref(const Constants& k, const TensorMap& in) {
  const at::Tensor& residual = in.at("residual");
  const auto dtype = residual.scalar_type();
  at::Tensor out = in.at("post").to(dtype).unsqueeze(-1) * in.at("x").unsqueeze(-2) +
                   at::matmul(in.at("comb").to(dtype).transpose(-1, -2), residual);
  return {{"out", out}};
}

TensorMap hc_head_ref(const Constants& k, const TensorMap& in) {
  at::Tensor mixes = mixes_ref(k, in.at("x"), in.at("fn"));
  at::Tensor pre = head_gates_ref(k, {{"mixes", mixes}, {"base", in.at("base")}, {"scale", in.at("scale")}}).at("pre");
  return {{"mixes", mixes}, {"pre", pre}, {"out", collapse(pre, in.at("x"))}};
}

namespace {

// Seeded inputs follow the golden recipe (hf-deepseek-v4.md section 13): streams N(0,1), fn N(0, 1/fan_in),
// base N(0,1), scale 1 + 0.3 N, so sigmoids and the Sinkhorn see non-degenerate logits.
struct Gen {
  at::Generator gen;
  at::Device device;
  at::Tensor normal(at::IntArrayRef shape, double std = 1.0, double mean = 0.0) {
    return at::normal(mean, std, shape, gen, at::TensorOptions().device(device).dtype(at::kFloat));
  }
};

Gen make_gen(uint64_t seed, at::Device device) {
  at::Generator g = device.is_cuda() ? at::globalContext().defaultGenerator(device).clone()
                                     : at::make_generator<at::CPUGeneratorImpl>(seed);
  g.set_current_seed(seed);
  return {g, device};
}

TensorMap mix_params(Gen& g, int64_t rows, int64_t h, int64_t d, int64_t n_scale) {
  return {{"fn", g.normal({rows, h * d}, 1.0 / std::sqrt(double(h * d)))},
          {"base", g.normal({rows})},
          {"scale", g.normal({n_scale}, 0.3, 1.0)}};
}

std::vector<int64_t> stream_shape(const OpContext& ctx, const Constants& k) {
  return {ctx.dim(kTokens), k.hc, k.hidden};
}

Cost hc_pre_cost(const OpContext& ctx, bool backward) {
  const Constants k = constants(ctx);
  const double t = ctx.dim(kTokens), hd = double(k.hc * k.hidden), e = at::elementSize(ctx.dtype);
  const double m = (2 + k.hc) * k.hc;
  const double small = t * (m + 2 * k.hc + k.hc * k.hc) * 4;  // mixes, pre, post, comb
  const double params = m * hd * 4;
  if (!backward)
    return {t * hd * e + params + small + t * k.hidden * e, t * (2 * m * hd + 4 * hd), 0};
  // reads x, params, saved small tensors, upstream grads; writes grad_x and grad_fn
  return {2 * t * hd * e + 2 * params + 2 * small + t * k.hidden * e, t * (4 * m * hd + 8 * hd), 0};
}

Cost hc_post_cost(const OpContext& ctx, bool backward) {
  const Constants k = constants(ctx);
  const double t = ctx.dim(kTokens), h = k.hc, d = k.hidden, e = at::elementSize(ctx.dtype);
  const double small = t * (h + h * h) * 4;
  if (!backward) return {t * d * e + 2 * t * h * d * e + small, t * h * d * (2 + 2 * h), 0};
  // reads grad_out, x, residual, post, comb; writes grad_x, grad_residual, grad_post, grad_comb
  return {2 * t * h * d * e + 2 * t * d * e + t * h * d * e + 2 * small, t * h * d * (4 + 4 * h), 0};
}

Cost hc_head_cost(const OpContext& ctx, bool backward) {
  const Constants k = constants(ctx);
  const double t = ctx.dim(kTokens), hd = double(k.hc * k.hidden), e = at::elementSize(ctx.dtype);
  const double params = k.hc * hd * 4, small = t * 2 * k.hc * 4;
  if (!backward) return {t * hd * e + params + small + t * k.hidden * e, t * (2 * k.hc * hd + 4 * hd), 0};
  return {2 * t * hd * e + 2 * params + small + t * k.hidden * e, t * (4 * k.hc * hd + 8 * hd), 0};
}

// Stages shared by hc_pre and hc_head; `gates` is the op's own gate math, `collapsed` its collapse output name.
std::vector<Stage> projection_stages(TensorMap (*gates)(const Constants&, const TensorMap&),
                                     std::vector<std::string> gate_outputs, const std::string& collapsed) {
  return {
      {"mixes", {"x", "fn"}, {"mixes"},
       [](const OpContext& ctx, const TensorMap& in) {
         return TensorMap{{"mixes", mixes_ref(constants(ctx), in.at("x"), in.at("fn"))}};
       }},
      {"gates", {"mixes", "base", "scale"}, std::move(gate_outputs),
       [gates](const OpContext& ctx, const TensorMap& in) { return gates(constants(ctx), in); }},
      {"collapse", {"pre", "x"}, {collapsed},
       [collapsed](const OpContext&, const TensorMap& in) {
         return TensorMap{{collapsed, collapse(in.at("pre"), in.at("x"))}};
       }},
  };
}

Op make_op(std::string name, std::vector<std::string> inputs, std::vector<std::string> outputs,
           std::vector<std::string> grad_outputs, TensorMap (*ref)(const Constants&, const TensorMap&)) {
  Op op;
  op.name = std::move(name);
  op.family = "hc";
  op.provenance = "transformers 5.17.0 DeepseekV4HyperConnection / HyperHead / DecoderLayer (hf-deepseek-v4.md s8)";
  op.inputs = inputs;
  op.grad_inputs = std::move(inputs);
  op.outputs = std::move(outputs);
  op.grad_outputs = std::move(grad_outputs);
  op.dims = {kTokens, kHc, kHidden};
  op.constants = {kSinkhornIters, kHcEps, kRmsEps, kPostMult};
  op.reference = [ref](const OpContext& ctx, const TensorMap& in) { return ref(constants(ctx), in); };
  return op;
}

}  // namespace

void register_hc_reference(Registry& reg) {
  Op pre = make_op("hc_pre", {"x", "fn", "base", "scale"}, {"mixes", "pre", "post", "comb", "collapsed"},
                   {"post", "comb", "collapsed"}, hc_pre_ref);
  pre.make_inputs = [](const OpContext& ctx, uint64_t seed, at::Device dev) {
    const Constants k = constants(ctx);
    Gen g = make_gen(seed, dev);
    TensorMap in = mix_params(g, (2 + k.hc) * k.hc, k.hc, k.hidden, 3);
    in["x"] = g.normal(stream_shape(ctx, k)).to(ctx.dtype);
    return in;
  };
  pre.output_specs = [](const OpContext& ctx, const TensorMap& in) {
    const Constants k = constants(ctx);
    std::vector<int64_t> lead(in.at("x").sizes().begin(), in.at("x").sizes().end() - 2);
    auto with = [&](std::vector<int64_t> tail) {
      std::vector<int64_t> s = lead;
      s.insert(s.end(), tail.begin(), tail.end());
      return s;
    };
    return std::vector<TensorSpec>{{"mixes", with({(2 + k.hc) * k.hc}), at::kFloat},
                                   {"pre", with({k.hc}), at::kFloat},
                                   {"post", with({k.hc}), at::kFloat},
                                   {"comb", with({k.hc, k.hc}), at::kFloat},
                                   {"collapsed", with({k.hidden}), in.at("x").scalar_type()}};
  };
  pre.cost = hc_pre_cost;
  pre.stages = projection_stages(pre_gates_ref, {"pre", "post", "comb"}, "collapsed");
  reg.add(std::move(pre));

  Op post = make_op("hc_post", {"x", "residual", "post", "comb"}, {"out"}, {"out"}, hc_post_ref);
  post.make_inputs = [](const OpContext& ctx, uint64_t seed, at::Device dev) {
    const Constants k = constants(ctx);
    Gen g = make_gen(seed, dev);
    const int64_t t = ctx.dim(kTokens);
    // post in (0, 2) and a row-stochastic, non-symmetric comb, as hc_pre produces them.
    return TensorMap{{"x", g.normal({t, k.hidden}).to(ctx.dtype)},
                     {"residual", g.normal(stream_shape(ctx, k)).to(ctx.dtype)},
                     {"post", k.post_mult * at::sigmoid(g.normal({t, k.hc}))},
                     {"comb", at::softmax(g.normal({t, k.hc, k.hc}, 2.0), -1)}};
  };
  post.output_specs = [](const OpContext&, const TensorMap& in) {
    const at::Tensor& r = in.at("residual");
    return std::vector<TensorSpec>{{"out", r.sizes().vec(), r.scalar_type()}};
  };
  post.cost = hc_post_cost;
  post.stages = {{"mix", post.inputs, {"out"}, post.reference}};
  reg.add(std::move(post));

  Op head = make_op("hc_head", {"x", "fn", "base", "scale"}, {"mixes", "pre", "out"}, {"out"}, hc_head_ref);
  head.make_inputs = [](const OpContext& ctx, uint64_t seed, at::Device dev) {
    const Constants k = constants(ctx);
    Gen g = make_gen(seed, dev);
    TensorMap in = mix_params(g, k.hc, k.hc, k.hidden, 1);
    in["x"] = g.normal(stream_shape(ctx, k)).to(ctx.dtype);
    return in;
  };
  head.output_specs = [](const OpContext& ctx, const TensorMap& in) {
    const Constants k = constants(ctx);
    const at::Tensor& x = in.at("x");
    std::vector<int64_t> lead(x.sizes().begin(), x.sizes().end() - 2);
    auto with = [&](int64_t last) {
      std::vector<int64_t> s = lead;
      s.push_back(last);
      return s;
    };
    return std::vector<TensorSpec>{
        {"mixes", with(k.hc), at::kFloat}, {"pre", with(k.hc), at::kFloat}, {"out", with(k.hidden), x.scalar_type()}};
  };
  head.cost = hc_head_cost;
  head.stages = projection_stages(head_gates_ref, {"pre"}, "out");
  reg.add(std::move(head));
}

}  // namespace parity::hc
