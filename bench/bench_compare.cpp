// Comparator throughput: compare() on a 2^22- and a 2^26-element bf16 output against its fp32 reference (evaluate()
// on the smaller), next to a memcpy of the same bytes (the floor a one-pass comparator could reach). Bytes processed
// = bytes read. The argument is log2 of the element count.
#include <parity/compare.hpp>
#include <parity/policy.hpp>

#include <benchmark/benchmark.h>

#include <cstring>
#include <map>
#include <memory>

namespace parity {
namespace {

// A bf16 output within a few ULPs of its fp32 reference, and the naive composition's (rounded once more).
struct Tensors {
  at::Tensor expected, actual, naive;
  explicit Tensors(int64_t numel) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(42);
    expected = at::normal(0.0, 1.0, {numel}, gen, at::TensorOptions().dtype(at::kFloat));
    actual = (expected + at::normal(0.0, 1e-3, {numel}, gen, at::TensorOptions().dtype(at::kFloat)))
                 .to(at::kBFloat16);
    naive = (expected * 1.001).to(at::kBFloat16);
  }
  int64_t bytes_read() const { return actual.nbytes() + expected.nbytes(); }
};

const Tensors& tensors(int log2_numel) {
  static std::map<int, std::unique_ptr<const Tensors>> cache;
  auto& t = cache[log2_numel];
  if (!t) t = std::make_unique<const Tensors>(int64_t{1} << log2_numel);
  return *t;
}

void BM_Memcpy(benchmark::State& state) {
  const int64_t bytes = tensors(static_cast<int>(state.range(0))).bytes_read();
  std::vector<char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

void BM_Compare(benchmark::State& state) {
  const Tensors& t = tensors(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(compare(t.actual, t.expected));
  state.SetBytesProcessed(state.iterations() * t.bytes_read());
}

void BM_Evaluate(benchmark::State& state, const std::string& policy_text) {
  const Tensors& t = tensors(22);
  const Policy p = parse_policy(policy_text, "bench");
  const bool naive = needs_naive(p);
  for (auto _ : state) benchmark::DoNotOptimize(evaluate(p, t.actual, t.expected, naive ? &t.naive : nullptr));
  state.SetBytesProcessed(state.iterations() * (t.bytes_read() + (naive ? t.naive.nbytes() : 0)));
}

BENCHMARK(BM_Memcpy)->Arg(22)->Arg(26)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Compare)->Arg(22)->Arg(26)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Evaluate, ulp, std::string("ulp<=1"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Evaluate, naive_relative, std::string("naive_relative(k=2, floor=1)"))
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace parity
