// Performance of a case: each path (a variant, or the naive LibTorch "eager" composition) timed in the same run
// on the same inputs, against the device's measured ceilings and the op's cost model.
//
// JSON (inside a case of the results document, key "perf"):
//   { "ceilings": {device, driver, copy_gbps, bf16_tflops, fp32_tflops, measured, method}, "upstream": {...},
//     "entries": [ {path, direction, mode, median_ms, min_ms, q1_ms, q3_ms, rel_noise, n, samples_ms: [...],
//                   sm_clock_mhz, host_probe_us, dropped_throttled, stop, bytes, flops_fp32, flops_tensor,
//                   achieved_gbps, achieved_tflops, pct_copy_bw, pct_flops, speedup_vs_eager, peak_extra_bytes,
//                   target_pct_copy, error} ] }
//
// Every path of a case is timed on one device, the one run_case works on (the GPU unless --cpu or none is
// there), so speedups and percentages compare like with like; variants of other devices are not timed.
#pragma once
#include <parity/case.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace parity {

struct RunOptions;     // runner.hpp (which includes this header for CaseResult::perf)
struct TimingOptions;  // timing.hpp

// How timing.cpp measures in a mode, numbered: timings of different methods are not compared (history.hpp). Every
// mode is at 1 but cold, at 2 since fd484fd: its GPU batches too wait behind a spin kernel that covers their enqueue
// (before, a region whose host side outlasted the L2 flush and its kernels was timed at the host's pace: on an H100
// the tiny cases' eager 3-4x slower than the GPU ran it).
constexpr int timing_method(std::string_view mode) { return mode == "cold" ? 2 : 1; }

// Statistics of one timed region: never a single number.
struct Timing {
  std::string mode;  // "cold" (L2 flushed before each sample), "hot" (back-to-back), "graph" (CUDA-graph replay), "cpu"
  int method = 1;  // timing_method(mode)
  std::vector<double> samples_ms;
  double median_ms = 0, min_ms = 0, q1_ms = 0, q3_ms = 0;
  double rel_noise = 0;  // (q3 - q1) / median
  int n = 0;
  double sm_clock_mhz = 0;    // median SM clock over kept samples (0 when not readable)
  double host_probe_us = 0;   // CPU: median host probe over kept samples (timing.cpp; 0 on a GPU)
  int dropped_throttled = 0;  // samples taken while the GPU clock or the host probe said the machine ran slow
  std::string stop;           // why sampling stopped: "noise", "stable", "max_samples", "time_cap"
};

struct PerfEntry {
  std::string path;       // "cuda:v1", "cpu:v1", "eager" (the naive LibTorch composition, what a user has without Parity)
  std::string direction;  // "fwd" or "bwd"
  Timing timing;
  double bytes = 0, flops_fp32 = 0, flops_tensor = 0;  // from Op::cost
  double achieved_gbps = 0, achieved_tflops = 0;
  // Percent of the device's measured ceilings: achieved bytes/s over the copy rate; the compute floor
  // (flops_fp32 at the fp32 rate + flops_tensor at the bf16 rate) over the measured time.
  double pct_copy_bw = 0, pct_flops = 0;
  double speedup_vs_eager = 0;            // eager median / this median (0 when no eager entry)
  // Caching-allocator peak during one call above what was allocated before it (-1: CPU). Every path allocates
  // what it returns inside the call, as it would in a training step.
  int64_t peak_extra_bytes = -1;
  double target_pct_copy = 0;  // the case's floor on pct_copy_bw for this path and direction (0: none)
  std::string error;  // the path could not be timed (e.g. its graph capture failed); the timing is then empty
};

// Timed, with a floor, and under it.
inline bool below_target(const PerfEntry& e) {
  return e.target_pct_copy > 0 && e.error.empty() && e.pct_copy_bw < e.target_pct_copy;
}

struct DeviceCeilings {
  std::string device, driver;
  double copy_gbps = 0;    // device-to-device copy, bytes read + written
  double bf16_tflops = 0;  // large bf16 matmul through LibTorch
  double fp32_tflops = 0;  // large fp32 matmul with TF32 off
  std::string measured;    // ISO date
  std::string method;      // what was timed, for the report
};

struct PerfResult {
  DeviceCeilings ceilings;
  std::vector<PerfEntry> entries;
  std::map<std::string, std::string> upstream;  // reference speeds from upstream named by the case (notes)
  double threshold = 0;  // the case's perf_threshold (0: none), carried with every entry into the history
};

nlohmann::json to_json(const PerfResult& p);
nlohmann::json to_json(const DeviceCeilings& c);

// Times the naive LibTorch composition ("eager": Op::reference at the inputs' own dtypes, its autograd
// backward timed alone) and every variant run_case would run on this device, forward and (when the case runs
// backward) backward, on the inputs run_case uses. A path that fails is an entry with `error`. On a GPU the paths are
// timed one after another; on the CPU together in rounds (time_cpu_regions), so that eager sees the host they saw.
PerfResult run_perf(const Case& c, const Registry& reg, const RunOptions& opts, const TimingOptions& t);

// Ceilings of the device run_perf times on (the GPU, or the CPU when none is there or force_cpu): GPU: a
// device-to-device copy of max(1 GiB, 4x L2), a bf16 8192^3 and an fp32 4096^3 (TF32 off) matmul through
// LibTorch; CPU: a 256 MiB copy and an fp32 2048^3 matmul. Medians of time_region samples, cached as JSON per
// device and driver under $PARITY_HOME/device/ (default ~/.cache/parity/device/); `remeasure` ignores the cache.
DeviceCeilings device_ceilings(bool remeasure, bool force_cpu = false);
std::filesystem::path ceilings_file(const DeviceCeilings& c);

}  // namespace parity
