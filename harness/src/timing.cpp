// Timing regions on the GPU (CUDA events) and the CPU (steady_clock) under one adaptive stopping rule, and the
// NVML readings (SM clock, driver version) loaded at run time.
#include <parity/error.hpp>
#include <parity/op.hpp>
#include <parity/timing.hpp>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <fmt/format.h>

#include <dlfcn.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>

namespace parity {

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kThrottledBelow = 0.9;  // of the median clock or probe speed: a sample taken slower is dropped
constexpr double kThrottledOfRated = 0.75;  // of the GPU's rated SM clock: a batch read below it is dropped
constexpr int kNoiseMinSamples = 5;      // no noise estimate from fewer samples (nvbench's statistics.cuh)
constexpr int kStableWindow = 10;        // samples over which a settled noise estimate moves less than...
constexpr double kStableChange = 0.1;    // ...this fraction of itself
constexpr double kBatchMs = 5.0;         // GPU time per host sync (and per clock reading)
constexpr int kMaxBatch = 16;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Linear interpolation between the closest ranks (numpy's default), on sorted data.
double quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * double(sorted.size() - 1);
  const size_t lo = size_t(pos), hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - double(lo)) * (sorted[hi] - sorted[lo]);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return quantile(v, 0.5);
}

std::vector<double> known(const std::vector<double>& clocks) {
  std::vector<double> k;
  std::copy_if(clocks.begin(), clocks.end(), std::back_inserter(k), [](double c) { return c > 0; });
  return k;
}

}  // namespace

Timing summarize(std::vector<double> samples_ms, const std::string& mode, const std::vector<double>& clocks_mhz,
                 const std::vector<double>& probes_us, const std::vector<bool>& preempted) {
  for (const auto& [what, size] : {std::pair{"clocks", clocks_mhz.size()}, {"probes", probes_us.size()},
                                   {"preempted flags", preempted.size()}})
    if (size != 0 && size != samples_ms.size())
      throw std::invalid_argument(fmt::format("summarize: {} {} for {} samples", size, what, samples_ms.size()));
  Timing t;
  t.mode = mode;
  t.method = timing_method(mode);
  // A sample was taken while the machine ran slow when its SM clock is below kThrottledBelow of the median clock,
  // or its host probe took longer than the median probe over kThrottledBelow: at most half of a measurement goes,
  // and one taken mostly in a slow stretch keeps a slow probe median, which the verdicts then see (history.cpp).
  // Unknown readings (0) condemn nothing.
  const std::vector<double> clocks = known(clocks_mhz), probes = known(probes_us);
  const double clock_floor = clocks.empty() ? 0 : kThrottledBelow * median(clocks);
  const double probe_ceiling =
      probes.empty() ? std::numeric_limits<double>::infinity() : median(probes) / kThrottledBelow;
  std::vector<double> kept, kept_clocks, kept_probes;
  for (size_t i = 0; i < samples_ms.size(); ++i) {
    const double clock = clocks_mhz.empty() ? 0 : clocks_mhz[i], probe = probes_us.empty() ? 0 : probes_us[i];
    if ((clock > 0 && clock < clock_floor) || probe > probe_ceiling || (!preempted.empty() && preempted[i])) {
      ++t.dropped_throttled;
      continue;
    }
    kept.push_back(samples_ms[i]);
    kept_clocks.push_back(clock);
    kept_probes.push_back(probe);
  }
  samples_ms = std::move(kept);
  if (const std::vector<double> k = known(kept_clocks); !k.empty()) t.sm_clock_mhz = median(k);
  if (const std::vector<double> k = known(kept_probes); !k.empty()) t.host_probe_us = median(k);
  t.samples_ms = samples_ms;  // acquisition order: drift and warm-up effects stay visible
  t.n = int(samples_ms.size());
  if (samples_ms.empty()) return t;
  std::sort(samples_ms.begin(), samples_ms.end());
  t.min_ms = samples_ms.front();
  t.q1_ms = quantile(samples_ms, 0.25);
  t.median_ms = quantile(samples_ms, 0.5);
  t.q3_ms = quantile(samples_ms, 0.75);
  t.rel_noise = t.median_ms > 0 ? (t.q3_ms - t.q1_ms) / t.median_ms : 0;
  return t;
}

void Sampler::add(double ms, double clock_mhz, double probe_us, bool preempted) {
  samples_.push_back(ms);
  clocks_.push_back(clock_mhz);
  probes_.push_back(probe_us);
  preempted_.push_back(preempted);
  const Timing t = summarize(samples_, "", clocks_, probes_, preempted_);
  // The estimate moves on with the kept samples only: dropped ones leave it where it was, and a run of them (a
  // throttled batch of GPU samples, preempted CPU ones) read as noise that had stopped changing ("stable" at 8%).
  if (t.n == kept_ && !noise_.empty()) return;
  kept_ = t.n;
  noise_.push_back(kept_ >= kNoiseMinSamples ? t.rel_noise : std::numeric_limits<double>::quiet_NaN());
}

// Counts kept samples: a sample dropped as taken while the machine ran slow is no evidence.
std::string Sampler::stop(double elapsed_s) const {
  if (kept_ >= std::max(o_.min_samples, kNoiseMinSamples)) {
    const double noise = noise_.back();
    if (noise < o_.target_rel_noise) return "noise";
    if (noise_.size() >= size_t(kStableWindow)) {
      const std::vector<double> window(noise_.end() - kStableWindow, noise_.end());
      const bool all_known = std::none_of(window.begin(), window.end(), [](double x) { return std::isnan(x); });
      const auto [lo, hi] = std::minmax_element(window.begin(), window.end());
      if (all_known && *hi - *lo <= kStableChange * noise) return "stable";
    }
  }
  if (size() >= o_.max_samples) return "max_samples";
  // The cap waits for one kept sample: a timing of none says nothing (a one-sample run on a loaded host, its sample
  // preempted, left `parity bisect verdict` nothing to judge where it had to say AMBIGUOUS: cli/bisect_perf, run29).
  // But not past kNoneKeptCaps caps: on a host that preempts every sample it sampled on to max_samples (58 s for a
  // 1 s cap), and the path is then reported as untimed (perf.cpp), not as a timing of nothing.
  if (elapsed_s >= o_.time_cap_s && (kept_ >= 1 || (size() >= 1 && elapsed_s >= kNoneKeptCaps * o_.time_cap_s)))
    return "time_cap";
  return "";
}

// ---------------------------------------------------------------------------------------------------------------
// NVML through dlopen: the GPU machines have the driver's libnvidia-ml, the build machines may not.
// ---------------------------------------------------------------------------------------------------------------

namespace {

class Nvml {
 public:
  static Nvml& get() {
    static Nvml nvml;
    return nvml;
  }

  std::optional<double> sm_clock(int cuda_device) {
    if (!ok_) return std::nullopt;
    std::lock_guard lock(mutex_);
    void* dev = handle(cuda_device);
    unsigned mhz = 0;
    if (!dev || clock_info_(dev, kClockSm, &mhz) != kSuccess) return std::nullopt;
    return double(mhz);
  }

  std::string driver_version() {
    char buf[96] = {};
    return ok_ && driver_(buf, sizeof buf) == kSuccess ? std::string(buf) : std::string();
  }

 private:
  // From nvml.h (not installed everywhere): NVML_SUCCESS, NVML_CLOCK_SM; nvmlDevice_t is an opaque pointer.
  static constexpr int kSuccess = 0, kClockSm = 1;

  Nvml() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);  // kept open for the process
    if (!lib) return;
    auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    by_pci_ = reinterpret_cast<int (*)(const char*, void**)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock_info_ = reinterpret_cast<int (*)(void*, int, unsigned*)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    driver_ = reinterpret_cast<int (*)(char*, unsigned)>(dlsym(lib, "nvmlSystemGetDriverVersion"));
    ok_ = init && by_pci_ && clock_info_ && driver_ && init() == kSuccess;
  }

  // CUDA and NVML number devices differently (CUDA_VISIBLE_DEVICES, ordering): the PCI bus id is shared.
  void* handle(int cuda_device) {
    if (auto it = handles_.find(cuda_device); it != handles_.end()) return it->second;
    char bus[32] = {};
    void* dev = nullptr;
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_device) != cudaSuccess || by_pci_(bus, &dev) != kSuccess)
      dev = nullptr;
    return handles_[cuda_device] = dev;
  }

  bool ok_ = false;
  int (*by_pci_)(const char*, void**) = nullptr;
  int (*clock_info_)(void*, int, unsigned*) = nullptr;
  int (*driver_)(char*, unsigned) = nullptr;
  std::mutex mutex_;
  std::map<int, void*> handles_;
};

}  // namespace

std::optional<double> sm_clock_mhz(int cuda_device) { return Nvml::get().sm_clock(cuda_device); }
std::string nvidia_driver_version() { return Nvml::get().driver_version(); }

// ---------------------------------------------------------------------------------------------------------------
// Timers
// ---------------------------------------------------------------------------------------------------------------

namespace {

// Samples until the rule says stop; `take` adds one batch of samples.
Timing sample_until_done(Sampler& s, const std::string& mode, Clock::time_point t0,
                         const std::function<void(Sampler&)>& take) {
  for (;;) {
    if (std::string why = s.stop(seconds_since(t0)); !why.empty()) {
      Timing t = s.result(mode);
      t.stop = why;
      return t;
    }
    take(s);
  }
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The host's speed right after each CPU sample: a fixed piece of single-core work that reads two 256 KiB buffers
// and writes a third (a cache-resident multiply-add stream, the shape of a memory-bound kernel), ~8 us on a
// current core. One untimed pass first, so that the region's own footprint does not enter it; the fastest of three
// timed passes, so that an interrupt during one does not either. What slows it slows such kernels alike: a
// neighbour on the shared host contending for the core's caches, a frequency change, time stolen by the
// hypervisor. On a 2-core CI-class VM the hc_post cpu:v1 forward timed 0.25 ms or 0.42 ms per call in alternate
// stretches of one process, with no page fault, no other thread and thread CPU time equal to wall time; a probe
// of this shape took 1.6-1.9x longer in the slow stretches, while a pure multiply-add chain did not move. Samples
// taken while the host ran slow are dropped like throttled GPU samples, and two records whose probes are more than
// kHostProbeApart apart are not compared (history.cpp's incomparability).
double host_probe_us() {
  constexpr size_t kFloats = size_t{1} << 16;
  static std::vector<float> a(kFloats, 1.0f), b(kFloats, 0.5f), c(kFloats);
  static volatile float sink = 0;
  const auto pass = [] {
    for (size_t i = 0; i < kFloats; ++i) c[i] = a[i] * 0.999f + b[i];
    sink = sink + c[kFloats - 1];
  };
  pass();  // untimed: brings the buffers back after the region's own data displaced them
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = Clock::now();
    pass();
    best = std::min(best, ms_since(start));
  }
  return 1e3 * best;
}

// The calling thread's involuntary context switches so far: one during a sample means another thread took the core
// for a time slice (a 4 ms region sharing its core with a busy thread here: 7.5 ms when switched, 3.7 when not).
// Time taken by the hypervisor does not show here.
long involuntary_switches() {
  rusage r{};
  getrusage(RUSAGE_THREAD, &r);
  return r.ru_nivcsw;
}

void check_options(const TimingOptions& o) {
  if (o.mode != "cold" && o.mode != "hot" && o.mode != "graph")
    throw InputError(fmt::format("timing mode '{}': expected cold, hot or graph", o.mode));
  if (o.warmup < 0 || o.min_samples < 1 || o.max_samples < o.min_samples || !(o.time_cap_s > 0))
    throw InputError(fmt::format("timing options: need warmup >= 0, 1 <= min_samples <= max_samples, time_cap > 0 "
                                 "(got {}, {}, {}, {})",
                                 o.warmup, o.min_samples, o.max_samples, o.time_cap_s));
}

}  // namespace

std::vector<RegionTiming> time_cpu_regions(const std::vector<std::function<void()>>& fns, const TimingOptions& o) {
  check_options(o);
  const size_t n = fns.size();
  std::vector<RegionTiming> out(n);
  std::vector<Sampler> samplers(n, Sampler(o));
  // Why each region meets the stopping rule, "" while it does not. Asked again every round, not latched: a region
  // that met it goes on sampling while another has not, and its later samples move the medians that decide which
  // earlier ones were taken on a slow host, so its kept count can fall back below min_samples (CpuTimer.
  // RegionsTimedTogetherTakeTurns on run45's H100 host under ctest -j 16: 9 of at least 15 kept).
  std::vector<std::string> stopped(n);
  const auto attempt = [&](size_t i, const std::function<void()>& what) {
    try {
      what();
    } catch (...) {
      out[i].error = std::current_exception();
    }
  };
  const auto t0 = Clock::now();
  for (size_t i = 0; i < n; ++i)
    attempt(i, [&] {
      for (int w = 0; w < o.warmup; ++w) fns[i]();
    });
  for (size_t round = 0;; ++round) {
    // Each region's share of the time so far: the time cap is per region.
    const double share_s = seconds_since(t0) / double(std::max<size_t>(n, 1));
    bool going = false;
    for (size_t i = 0; i < n; ++i) {
      if (out[i].error) continue;
      stopped[i] = samplers[i].stop(share_s);
      going |= stopped[i].empty();
    }
    if (!going) break;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (round + k) % n;
      if (out[i].error || samplers[i].size() >= o.max_samples) continue;
      attempt(i, [&] {
        const long switches = involuntary_switches();
        const auto start = Clock::now();
        fns[i]();
        const double ms = ms_since(start);
        const bool preempted = involuntary_switches() != switches;
        samplers[i].add(ms, 0, host_probe_us(), preempted);
      });
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (out[i].error) continue;
    out[i].timing = samplers[i].result("cpu");
    out[i].timing.stop = stopped[i];
  }
  return out;
}

namespace {

// A buffer of the device's L2 size, written before each cold sample so that the region finds none of its data
// in L2 (nvbench's l2flush). One per device for the process: allocating it per sample would cost more than most
// regions. Deliberately never freed: a static tensor would be destroyed after the CUDA runtime at exit.
const at::Tensor& l2_flush_buffer(int device) {
  static auto* buffers = new std::map<int, at::Tensor>;
  auto it = buffers->find(device);
  if (it == buffers->end()) {
    int bytes = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device));
    const auto opts = at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device);
    it = buffers->emplace(device, at::empty({std::max(bytes, 1)}, opts)).first;
  }
  return it->second;
}

void wait_for(const c10::cuda::CUDAStream& waiter, const c10::cuda::CUDAStream& on) {
  if (waiter == on) return;
  c10::cuda::CUDAEvent e;
  e.record(on);
  e.block(waiter);
}

// Captures fn on `stream` (current, not the legacy default stream). A failed capture is ended at the CUDA
// level so the stream is usable again; the graph's memory pool then stays reserved until exit.
std::unique_ptr<at::cuda::CUDAGraph> capture(const std::function<void()>& fn, const c10::cuda::CUDAStream& stream) {
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  graph->capture_begin();
  try {
    fn();
  } catch (const std::exception& e) {
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(stream, &partial) == cudaSuccess && partial) cudaGraphDestroy(partial);
    (void)cudaGetLastError();  // the capture's own error is the one reported below
    throw std::runtime_error(fmt::format("CUDA graph capture failed: {}", e.what()));
  }
  graph->capture_end();
  return graph;
}

struct EventPair {
  c10::cuda::CUDAEvent start{cudaEventDefault}, stop{cudaEventDefault};
};

// Batches of about kBatchMs of GPU time: one host sync and one clock reading per batch. The first batch is a
// single sample, to learn the region's length.
int batch_size(const Sampler& s, const TimingOptions& o) {
  const int left = std::min(kMaxBatch, o.max_samples - s.size());
  if (s.size() == 0) return 1;
  const double ms = s.result("").median_ms;
  return std::clamp(ms > 0 ? int(kBatchMs / ms) : kMaxBatch, 1, std::max(left, 1));
}

struct GpuRegion {
  std::function<void()> run;      // fn, or a replay of its graph
  const at::Tensor* flush;        // cold mode: the L2 flush buffer
  c10::cuda::CUDAStream stream;
  int device;
  double cycles_per_ms;           // the SM's peak clock: what the lead kernel counts in
};

// Host time to enqueue one sample (event records and the region's launches), as last measured; the first batch
// starts from a guess.
constexpr double kFirstEnqueueMs = 0.1;
// The lead kernel's length is bounded: a region whose launches take longer than this per batch is launch-bound
// anyway, and its samples say so.
constexpr double kMaxLeadMs = 20.0;

// One batch, queued without a host sync, with the GPU kept busy while the host enqueues each timed call, so that
// launch latency stays outside the events: a spin kernel (at::cuda::sleep, nvbench's blocking kernel) long enough for
// the whole batch's enqueue (1.5x the last measured host time, plus 20 us) goes first, in every mode; in hot and graph
// mode one untimed call follows it, so that L2 holds the region's data. Without the spin a region shorter than its own
// launch is timed at the host's launch rate: an 8 MiB copy measured 12.3 us hot but 10.0 us cold on an H100. Cold
// mode once counted on the L2 flush in front of every sample to cover the enqueue, but a region of several launches
// with host work between them (a CUDA path's bridge: checks, workspace tensors) takes longer to enqueue than flush and
// kernels take to run: the tiny hc_head backward read 0.021 or 0.036 ms from one H100 instance to the next, on
// unchanged kernels.
void take_gpu_batch(Sampler& s, const GpuRegion& r, std::vector<EventPair>& events, const TimingOptions& o,
                    double& enqueue_ms) {
  const int k = batch_size(s, o);
  const double lead_ms = std::min(kMaxLeadMs, 1.5 * enqueue_ms * (k + 1) + 0.02);
  at::cuda::sleep(static_cast<int64_t>(lead_ms * r.cycles_per_ms));
  if (!r.flush) r.run();
  const auto enqueue_start = Clock::now();
  for (int i = 0; i < k; ++i) {
    if (r.flush) C10_CUDA_CHECK(cudaMemsetAsync(r.flush->data_ptr(), 0, r.flush->nbytes(), r.stream));
    events[i].start.record(r.stream);
    r.run();
    events[i].stop.record(r.stream);
  }
  enqueue_ms = std::chrono::duration<double, std::milli>(Clock::now() - enqueue_start).count() / k;
  // Read while the batch runs: the clock under the region's own load. Right after the enqueue the GPU is still in the
  // lead kernel (sized to outlast the enqueue), one spinning thread, whose clock is not the one a memory-bound region
  // runs at when power throttles it; from the middle sample's start the batch itself is on the GPU.
  events[k / 2].start.synchronize();
  const double clock = sm_clock_mhz(r.device).value_or(0);
  // Below kThrottledOfRated of the rated clock a batch is throttled whatever the others ran at (nvbench's 75%): the
  // median-relative floor of summarize() alone keeps every sample of a run throttled throughout.
  const bool throttled = clock > 0 && clock < kThrottledOfRated * r.cycles_per_ms / 1000.0;
  events[k - 1].stop.synchronize();
  for (int i = 0; i < k; ++i) s.add(events[i].start.elapsed_time(events[i].stop), clock, 0, throttled);
}

Timing time_gpu(const std::function<void()>& fn, at::Device device, const TimingOptions& o, Clock::time_point t0) {
  const int index = device.has_index() ? device.index() : c10::cuda::current_device();
  const c10::cuda::CUDAGuard device_guard(index);
  const bool graph_mode = o.mode == "graph";
  const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(index);
  const bool side = graph_mode && caller == c10::cuda::getDefaultCUDAStream(index);
  const c10::cuda::CUDAStream stream = side ? c10::cuda::getStreamFromPool(false, index) : caller;
  wait_for(stream, caller);
  Timing t;
  {
    const c10::cuda::CUDAStreamGuard stream_guard(stream);
    for (int i = 0; i < o.warmup; ++i) fn();
    const std::unique_ptr<at::cuda::CUDAGraph> graph = graph_mode ? capture(fn, stream) : nullptr;
    int clock_khz = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index));
    const GpuRegion region{graph ? std::function<void()>([&graph] { graph->replay(); }) : fn,
                           o.mode == "cold" ? &l2_flush_buffer(index) : nullptr, stream, index, double(clock_khz)};
    std::vector<EventPair> events(kMaxBatch);
    Sampler sampler(o);
    double enqueue_ms = kFirstEnqueueMs;
    t = sample_until_done(sampler, o.mode, t0,
                          [&](Sampler& s) { take_gpu_batch(s, region, events, o, enqueue_ms); });
  }
  wait_for(caller, stream);
  return t;
}

}  // namespace

Timing time_region(const std::function<void()>& fn, at::Device device, const TimingOptions& o) {
  if (!device.is_cuda()) {  // time_cpu_regions checks the options
    RegionTiming r = std::move(time_cpu_regions({fn}, o).front());
    if (r.error) std::rethrow_exception(r.error);
    return r.timing;
  }
  check_options(o);
  const auto t0 = Clock::now();
  if (!cuda_available()) throw InputError("time_region: a CUDA device was asked for but none is usable");
  return time_gpu(fn, device, o, t0);
}

}  // namespace parity
