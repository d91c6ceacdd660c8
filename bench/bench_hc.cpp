// hc CPU paths (cpu:v1, forward and backward) at the shapes of the seeded ci cases of cases/hc.toml, inputs from
// each op's make_inputs with the case's seed, outputs preallocated (the kernel alone). Bytes and FLOPs per call
// come from Op::cost, so the rates read against the roofline. The cases are read at run time, hence this main;
// bench_compare.cpp's benchmarks register statically.
#include <parity/case.hpp>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <iostream>

namespace parity {
namespace {

constexpr const char* kVariant = "cpu:v1";

TensorMap allocate(const std::vector<TensorSpec>& specs) {
  TensorMap m;
  for (const auto& s : specs) m[s.name] = at::empty(s.shape, at::TensorOptions().dtype(s.dtype));
  return m;
}

// Random upstream gradients in each output's dtype, as the runner draws them.
TensorMap upstream_grads(const Op& op, const std::vector<TensorSpec>& specs, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  TensorMap g;
  for (const auto& s : specs)
    if (std::count(op.grad_outputs.begin(), op.grad_outputs.end(), s.name))
      g[s.name] = at::normal(0.0, 1.0, s.shape, gen, at::TensorOptions().dtype(at::kFloat)).to(s.dtype);
  return g;
}

void run(benchmark::State& state, const Case& c, const Op& op, const Variant& v, bool backward) {
  const TensorMap in = op.make_inputs(c.ctx, *c.seed, at::kCPU);
  const auto specs = op.output_specs(c.ctx, in);
  TensorMap out = allocate(specs);
  v.forward(c.ctx, in, out);
  if (backward) {
    const TensorMap grad_out = upstream_grads(op, specs, *c.seed + 1);
    std::vector<TensorSpec> grad_specs;
    for (const auto& name : op.grad_inputs)
      grad_specs.push_back({name, in.at(name).sizes().vec(), in.at(name).scalar_type()});
    TensorMap grads = allocate(grad_specs);
    for (auto _ : state) v.backward(c.ctx, in, out, grad_out, grads);
  } else {
    for (auto _ : state) v.forward(c.ctx, in, out);
  }
  const Cost cost = op.cost(c.ctx, backward);
  state.SetBytesProcessed(int64_t(double(state.iterations()) * cost.bytes));
  const double flops = cost.flops_fp32 + cost.flops_tensor;
  state.counters["FLOP/s"] = benchmark::Counter(double(state.iterations()) * flops, benchmark::Counter::kIsRate);
}

void register_hc_benchmarks() {
  const Registry& reg = Registry::global();
  for (const Case& c : load_cases({std::filesystem::path(PARITY_SOURCE_DIR) / "cases"}, reg)) {
    const bool listed = std::count(c.variants.begin(), c.variants.end(), kVariant) > 0;
    if (reg.op(c.op).family != "hc" || !in_suite(c, "ci") || !c.seed || !listed) continue;
    const Op& op = reg.op(c.op);
    const Variant& v = reg.variant(c.op, kVariant);
    for (const bool bwd : {false, true}) {
      if (bwd && !c.backward) continue;
      benchmark::RegisterBenchmark(fmt::format("{}/{}/{}", c.id, kVariant, bwd ? "bwd" : "fwd").c_str(),
                                   [c, &op, &v, bwd](benchmark::State& s) { run(s, c, op, v, bwd); })
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace
}  // namespace parity

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  try {
    parity::register_hc_benchmarks();
  } catch (const std::exception& e) {
    std::cerr << "parity_bench: " << e.what() << "\n";
    return 2;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
