// GPU comparator throughput: compare() on two bf16 CUDA tensors of 2^26 and 2^30 elements (an output a few ULPs off
// its reference), next to a kernel that only reads both (compare_cuda::launch_read_both: 16-byte loads, one word
// written per block). Both are timed with CUDA events on the current stream (manual time), the read in every
// iteration beside the compare, so that the x_read counter (compare time / read time) sees the same clocks.
// compare() is timed whole: the scan, the merge of the blocks' totals, the first mismatches, the copy to the host
// (all but the kernels: 20-40 us a call on an H100, so 1.5% at 2^30 and a quarter at 2^26;
// reports/gpu/2026-11-28-h100-compare-call-parts.log).
// The requirement: x_read <= 2 at 2^30 (all metrics and the ULP histogram in one pass within twice a read of both).
// Registered only where a CUDA device is present.
#include "harness/cuda/compare.cuh"

#include <parity/compare.hpp>
#include <parity/op.hpp>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <benchmark/benchmark.h>

#include <iostream>
#include <map>
#include <memory>

namespace parity {
namespace {

struct DeviceTensors {
  at::Tensor expected, actual;
  explicit DeviceTensors(int64_t numel) {
    const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
    at::manual_seed(42);
    expected = at::randn({numel}, bf16);
    actual = expected + expected * at::randn_like(expected).mul_(1e-2);
  }
  int64_t bytes_read() const { return actual.nbytes() + expected.nbytes(); }
};

const DeviceTensors& device_tensors(int log2_numel) {
  static std::map<int, std::unique_ptr<const DeviceTensors>> cache;
  auto& t = cache[log2_numel];
  if (!t) t = std::make_unique<const DeviceTensors>(int64_t{1} << log2_numel);
  return *t;
}

// Seconds between two events on the current stream around what f enqueues (and, for compare(), does on the host).
template <typename F>
double gpu_seconds(F&& f) {
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
  const at::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream();
  start.record(stream);
  f();
  stop.record(stream);
  stop.synchronize();
  return start.elapsed_time(stop) / 1e3;
}

void BM_CompareCuda(benchmark::State& state) {
  const DeviceTensors& t = device_tensors(static_cast<int>(state.range(0)));
  const at::Tensor words = at::empty({compare_cuda::read_both_blocks()}, t.actual.options().dtype(at::kInt));
  const auto read_both = [&] {
    compare_cuda::launch_read_both(t.actual.const_data_ptr(), t.actual.nbytes(), t.expected.const_data_ptr(),
                                   t.expected.nbytes(), static_cast<unsigned*>(words.mutable_data_ptr()),
                                   at::cuda::getCurrentCUDAStream());
  };
  double compare_s = 0, read_s = 0;
  for (auto _ : state) {
    read_s += gpu_seconds(read_both);
    const double s = gpu_seconds([&] { benchmark::DoNotOptimize(compare(t.actual, t.expected)); });
    compare_s += s;
    state.SetIterationTime(s);
  }
  const double bytes = static_cast<double>(state.iterations() * t.bytes_read());
  state.SetBytesProcessed(state.iterations() * t.bytes_read());
  state.counters["read_bytes_per_second"] =
      benchmark::Counter(bytes / read_s, benchmark::Counter::kDefaults, benchmark::Counter::OneK::kIs1024);
  state.counters["x_read"] = compare_s / read_s;
}

const bool kRegistered = [] {
  if (!cuda_available()) {
    std::cerr << "parity_bench: no CUDA device, BM_CompareCuda skipped\n";
    return false;
  }
  benchmark::RegisterBenchmark("BM_CompareCuda/bf16_vs_bf16", BM_CompareCuda)
      ->ArgName("log2")
      ->Arg(26)
      ->Arg(30)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  return true;
}();

}  // namespace
}  // namespace parity
