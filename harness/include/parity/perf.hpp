// Performance of a case: each path (a variant, or the naive LibTorch "eager" composition) timed in the same run
// on the same inputs, against the device's measured ceilings and the op's cost model.
//
// JSON (inside a case of the results document, key "perf"):
//   { "ceilings": {device, driver, copy_gbps, bf16_tflops, fp32_tflops, measured}, "upstream": {...},
//     "entries": [ {path, direction, mode, median_ms, min_ms, q1_ms, q3_ms, rel_noise, n, samples_ms: [...],
//                   sm_clock_mhz, dropped_throttled, bytes, flops_fp32, flops_tensor, achieved_gbps,
//                   achieved_tflops, pct_copy_bw, pct_flops, speedup_vs_eager, peak_extra_bytes} ] }
#pragma once
#include <parity/case.hpp>
#include <parity/runner.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace parity {

// Statistics of one timed region: never a single number.
struct Timing {
  std::string mode;  // "cold" (L2 flushed before each sample), "hot" (back-to-back), "graph" (CUDA-graph replay), "cpu"
  std::vector<double> samples_ms;
  double median_ms = 0, min_ms = 0, q1_ms = 0, q3_ms = 0;
  double rel_noise = 0;  // (q3 - q1) / median
  int n = 0;
  double sm_clock_mhz = 0;    // median SM clock over kept samples (0 when not readable)
  int dropped_throttled = 0;  // samples taken below 90% of the median clock, discarded
};

struct PerfEntry {
  std::string path;       // "cuda:v1", "cpu:v1", "eager" (the naive LibTorch composition, what a user has without Parity)
  std::string direction;  // "fwd" or "bwd"
  Timing timing;
  double bytes = 0, flops_fp32 = 0, flops_tensor = 0;  // from Op::cost
  double achieved_gbps = 0, achieved_tflops = 0;
  double pct_copy_bw = 0, pct_flops = 0;  // percent of the device's measured ceilings
  double speedup_vs_eager = 0;            // eager median / this median (0 when no eager entry)
  int64_t peak_extra_bytes = -1;          // caching-allocator peak above the inputs during the call (-1: CPU)
};

struct DeviceCeilings {
  std::string device, driver;
  double copy_gbps = 0;    // device-to-device copy, bytes read + written
  double bf16_tflops = 0;  // large bf16 matmul through LibTorch
  double fp32_tflops = 0;  // large fp32 matmul with TF32 off
  std::string measured;    // ISO date
};

struct PerfResult {
  DeviceCeilings ceilings;
  std::vector<PerfEntry> entries;
  std::map<std::string, std::string> upstream;  // reference speeds from upstream named by the case (notes)
};

nlohmann::json to_json(const PerfResult& p);

}  // namespace parity
