// Timing one region of work, GPU or CPU, as the best harnesses do it (harness-practice.md s1, nvbench):
// warm-up first; GPU samples bracketed by CUDA events; "cold" flushes L2 (a write over a buffer of the device's
// L2 size) before each sample, "hot" runs back to back, "graph" replays a captured CUDA graph (for regions
// short enough that launch overhead matters); adaptive sample count (at least min_samples; stop when the
// relative noise is under target_rel_noise, or the noise estimate has stopped changing, or time_cap_s is spent);
// the SM clock read per sample where the driver reports it, samples taken while throttled dropped.
#pragma once
#include <parity/perf.hpp>

#include <ATen/ATen.h>

#include <functional>

namespace parity {

struct TimingOptions {
  std::string mode = "cold";  // "cold", "hot", "graph" (GPU); the CPU always times "cpu"
  int warmup = 3;
  int min_samples = 10;
  int max_samples = 300;
  double target_rel_noise = 0.005;
  double time_cap_s = 10.0;
};

// Runs `fn` repeatedly on `device` and returns its statistics. `fn` must be safe to call many times.
Timing time_region(const std::function<void()>& fn, at::Device device, const TimingOptions& o = {});

// Median, quartiles, noise of raw samples (shared by GPU and CPU timers and by tests).
Timing summarize(std::vector<double> samples_ms, const std::string& mode);

}  // namespace parity
