// Timing one region of work, GPU or CPU, as the best harnesses do it (harness-practice.md s1, nvbench):
// warm-up first; GPU samples bracketed by CUDA events; "cold" flushes L2 (a write over a buffer of the device's
// L2 size) before each sample, "hot" runs back to back, "graph" replays a captured CUDA graph (for regions
// short enough that launch overhead matters); in hot and graph mode a spin kernel holds the GPU while the host
// enqueues a batch, so launch latency stays outside the events (nvbench's blocking kernel); adaptive sample count (at least min_samples; stop when the
// relative noise is under target_rel_noise, or the noise estimate has stopped changing, or time_cap_s is spent);
// the SM clock read per sample where the driver reports it, samples taken while throttled dropped; on the CPU a
// fixed probe timed after each sample plays the clock's part (samples taken while the host ran slow dropped), and
// a sample during which the thread was preempted (an involuntary context switch) is dropped too.
//
// GPU regions must do their work on the current stream (ATen ops and Parity's launchers do). An autograd
// backward runs on the stream its forward ran on: build the graph under the stream the region is timed on.
// Graph mode captures on the current stream, or on a side stream when the current one is the legacy default
// stream (which cannot capture); then warm-up and replays run on that side stream too.
#pragma once
#include <parity/perf.hpp>

#include <ATen/ATen.h>

#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace parity {

struct TimingOptions {
  std::string mode = "cold";  // "cold", "hot", "graph" (GPU); the CPU always times "cpu"
  int warmup = 3;
  int min_samples = 10;
  int max_samples = 300;
  double target_rel_noise = 0.005;
  double time_cap_s = 10.0;  // wall clock of the whole call, warm-up included; at least one sample is taken
};

// Runs `fn` repeatedly on `device` and returns its statistics. `fn` must be safe to call many times.
// Throws InputError for an unknown mode or a CUDA device when none is usable.
Timing time_region(const std::function<void()>& fn, at::Device device, const TimingOptions& o = {});

// One region's result from time_cpu_regions: its timing, or what it threw (then the timing is empty).
struct RegionTiming {
  Timing timing;
  std::exception_ptr error;
};

// CPU regions timed together in rounds, one sample of each in turn with the order rotated every round (asv's rounds,
// Google Benchmark's random interleaving: harness-practice.md), so that a stretch of slow host falls on all of them
// alike and eager, the verdicts' control (history.hpp), sees the host the paths saw. Rounds go on for all until every
// region meets the stopping rule in the same round (each judged on all its own samples and its share of the time so
// far, the time cap being per region). A region that throws leaves the rotation with its exception; the others go on.
// Throws InputError for bad options.
std::vector<RegionTiming> time_cpu_regions(const std::vector<std::function<void()>>& fns, const TimingOptions& o = {});

// Median, quartiles and noise of raw samples (shared by GPU and CPU timers and by tests). Readings of how fast the
// machine ran, one per sample where given (0 = unknown): with SM clocks (MHz), samples taken below 90% of the
// median clock are dropped; with host probes (us), samples whose probe took longer than the median probe / 0.9;
// with `preempted` flags, the samples during which the timing thread gave its core to another thread (an
// involuntary context switch: its time then holds another thread's slice), or (GPU) whose SM clock was below 75% of
// the rated clock. All count in dropped_throttled.
Timing summarize(std::vector<double> samples_ms, const std::string& mode, const std::vector<double>& clocks_mhz = {},
                 const std::vector<double>& probes_us = {}, const std::vector<bool>& preempted = {});

// How many time caps a timer may go on for while it has kept no sample at all.
constexpr double kNoneKeptCaps = 3;

// The adaptive stopping rule, fed one sample at a time (both timers use it; exposed for tests).
class Sampler {
 public:
  explicit Sampler(TimingOptions o) : o_(std::move(o)) {}
  void add(double ms, double clock_mhz = 0, double probe_us = 0, bool preempted = false);
  // Empty while sampling should go on, else why it stops: "noise" ((q3-q1)/median under target),
  // "stable" (the noise estimate moved less than 10% over the last 10 kept samples), "max_samples", "time_cap".
  // min_samples and the time cap's one sample count the samples kept (not dropped as taken while the machine ran
  // slow or the thread was preempted); max_samples all taken.
  std::string stop(double elapsed_s) const;
  int size() const { return int(samples_.size()); }  // samples taken
  Timing result(const std::string& mode) const { return summarize(samples_, mode, clocks_, probes_, preempted_); }

 private:
  TimingOptions o_;
  std::vector<double> samples_, clocks_, probes_;
  std::vector<bool> preempted_;
  std::vector<double> noise_;  // the noise estimate after each kept sample (from the 5th kept on; NaN before)
  int kept_ = 0;
};

// NVML, loaded at run time (no link dependency): the SM clock of a CUDA device (by PCI bus id, so device
// numbering cannot mismatch) and the driver version. nullopt / "" where NVML is absent (CPU machines).
std::optional<double> sm_clock_mhz(int cuda_device);
std::string nvidia_driver_version();

}  // namespace parity
