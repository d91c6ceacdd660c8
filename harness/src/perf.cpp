// Performance of a case: the naive LibTorch composition ("eager") and every variant timed on the same inputs and
// device, against the op's cost model and the device's measured ceilings (cached per device and driver).
#include <parity/error.hpp>
#include <parity/files.hpp>
#include <parity/perf.hpp>
#include <parity/results.hpp>
#include <parity/runner.hpp>
#include <parity/timing.hpp>

#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ctime>
#include <fstream>

namespace parity {

namespace {

at::Device work_device(bool force_cpu) {
  return cuda_available() && !force_cpu ? at::Device(at::kCUDA, c10::cuda::current_device()) : at::Device(at::kCPU);
}

// ---------------------------------------------------------------------------------------------------------------
// Device ceilings
// ---------------------------------------------------------------------------------------------------------------

constexpr int64_t kGiB = int64_t(1) << 30;
constexpr int64_t kCpuCopyBytes = int64_t(256) << 20;
constexpr int64_t kGpuBf16N = 8192, kGpuFp32N = 4096, kCpuFp32N = 2048;

std::filesystem::path parity_home() {
  if (const char* h = std::getenv("PARITY_HOME")) return h;
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home ? home : "/root") / ".cache/parity";
}

// Name and driver: what makes two measurements comparable, and the cache key.
DeviceCeilings identify(at::Device dev) {
  DeviceCeilings c;
  if (!dev.is_cuda()) {
    // The CPU paths and the ceilings scale with LibTorch's thread count: it is part of the device.
    c.device = fmt::format("{} ({} threads)", cpuinfo_field("model name", "unknown CPU"), at::get_num_threads());
    return c;
  }
  c.device = at::cuda::getDeviceProperties(dev.index())->name;
  c.driver = nvidia_driver_version();
  if (c.driver.empty()) {
    int v = 0;
    C10_CUDA_CHECK(cudaDriverGetVersion(&v));
    c.driver = fmt::format("CUDA driver API {}", v);
  }
  return c;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Ceiling measurements run back to back ("hot"): their working sets are far larger than any cache.
TimingOptions ceiling_timing() {
  TimingOptions t;
  t.mode = "hot";
  t.time_cap_s = 5.0;
  return t;
}

// t, if it kept a sample: a ceiling of none would be infinite, and cached.
const Timing& kept(const Timing& t, const std::string& what) {
  if (t.n == 0 || !(t.median_ms > 0))
    throw std::runtime_error(fmt::format("{}: no sample kept of {} taken (each preempted or throttled): the machine is too "
                                   "busy to measure it; measure again when it is quiet (parity device --remeasure)",
                                   what, t.dropped_throttled));
  return t;
}

// Bytes read plus bytes written per second of a copy of `bytes` (random data, never zeros).
double copy_gbps(at::Device dev, int64_t bytes) {
  const at::Tensor src = at::randn({bytes / 4}, at::TensorOptions().dtype(at::kFloat).device(dev));
  at::Tensor dst = at::empty_like(src);
  const Timing t = kept(time_region([&] { dst.copy_(src); }, dev, ceiling_timing()), "the copy ceiling");
  return 2.0 * double(src.nbytes()) / (t.median_ms * 1e-3) / 1e9;
}

double matmul_tflops(at::Device dev, at::ScalarType dtype, int64_t n) {
  const auto opts = at::TensorOptions().dtype(dtype).device(dev);
  const at::Tensor a = at::randn({n, n}, opts), b = at::randn({n, n}, opts);
  at::Tensor c = at::empty({n, n}, opts);
  const Timing t = kept(time_region([&] { at::mm_out(c, a, b); }, dev, ceiling_timing()), "the matmul ceiling");
  return 2.0 * double(n) * double(n) * double(n) / (t.median_ms * 1e-3) / 1e12;
}

// The fp32 ceiling is the CUDA-core rate: TF32 would use the tensor cores. Restores the caller's setting.
class Tf32Off {
 public:
  Tf32Off() : was_(at::globalContext().allowTF32CuBLAS()) { at::globalContext().setAllowTF32CuBLAS(false); }
  ~Tf32Off() { at::globalContext().setAllowTF32CuBLAS(was_); }
  Tf32Off(const Tf32Off&) = delete;
  Tf32Off& operator=(const Tf32Off&) = delete;

 private:
  bool was_;
};

void measure_ceilings(DeviceCeilings& c, at::Device dev) {
  if (dev.is_cuda()) {
    int l2 = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev.index()));
    const int64_t bytes = std::max(kGiB, 4 * int64_t(l2));
    const Tf32Off tf32_off;
    c.copy_gbps = copy_gbps(dev, bytes);
    c.bf16_tflops = matmul_tflops(dev, at::kBFloat16, kGpuBf16N);
    c.fp32_tflops = matmul_tflops(dev, at::kFloat, kGpuFp32N);
    c.method = fmt::format("copy {} MiB device-to-device (bytes read + written); bf16 mm {}^3; fp32 mm {}^3 with "
                           "TF32 off; LibTorch, median of hot CUDA-event samples",
                           bytes >> 20, kGpuBf16N, kGpuFp32N);
  } else {
    c.copy_gbps = copy_gbps(dev, kCpuCopyBytes);
    c.fp32_tflops = matmul_tflops(dev, at::kFloat, kCpuFp32N);
    c.method = fmt::format("copy {} MiB (bytes read + written); fp32 mm {}^3; LibTorch on {} threads, median of "
                           "steady_clock samples",
                           kCpuCopyBytes >> 20, kCpuFp32N, at::get_num_threads());
  }
  c.measured = utc_now();
}

std::optional<DeviceCeilings> read_cached(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    DeviceCeilings c;
    c.device = j.at("device").get<std::string>();
    c.driver = j.at("driver").get<std::string>();
    c.copy_gbps = j.at("copy_gbps").get<double>();
    c.bf16_tflops = j.at("bf16_tflops").get<double>();
    c.fp32_tflops = j.at("fp32_tflops").get<double>();
    c.measured = j.at("measured").get<std::string>();
    c.method = j.at("method").get<std::string>();
    return c;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // an unreadable cache entry is measured again and overwritten
  }
}

std::string file_stem(const std::string& s) {
  std::string out = s;
  for (char& ch : out)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '-') ch = '_';
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------------------------------------------

// A timed path: `setup` does the untimed preparation (saved tensors, the autograd graph) and returns the call to
// time. The call allocates what it returns, as it would inside a training step (the caching allocator makes that
// nearly free on the GPU; on the CPU every path pays it alike).
struct Path {
  std::string name, direction;
  std::function<std::function<void()>()> setup;
};

TensorMap allocate(const std::vector<TensorSpec>& specs, at::Device dev) {
  TensorMap m;
  for (const auto& s : specs) m[s.name] = at::empty(s.shape, at::TensorOptions().dtype(s.dtype).device(dev));
  return m;
}

std::vector<TensorSpec> grad_specs(const Op& op, const TensorMap& in) {
  std::vector<TensorSpec> specs;
  for (const auto& name : op.grad_inputs) specs.push_back({name, in.at(name).sizes().vec(), in.at(name).scalar_type()});
  return specs;
}

// The inputs as autograd leaves: those that get a gradient require one (fresh copies, so nothing is shared
// between paths); the others pass through.
TensorMap autograd_leaves(const Op& op, const TensorMap& in) {
  TensorMap leaves = in;
  for (const auto& name : op.grad_inputs) leaves[name] = in.at(name).detach().clone().requires_grad_(true);
  return leaves;
}

// Eager: Op::reference at the inputs' own dtypes. Its forward records the autograd graph when the case runs
// backward, as in training; its backward differentiates one recorded graph (kept with retain_graph, so every
// sample does the same work) with the case's upstream gradients.
std::vector<Path> eager_paths(const Op& op, const Case& c, const TensorMap& in, const TensorMap& grad_out) {
  const Op* o = &op;
  const OpContext ctx = c.ctx;
  const bool records_graph = c.backward;
  std::vector<Path> paths;
  paths.push_back({"eager", "fwd", [=] {
                     const TensorMap args = records_graph ? autograd_leaves(*o, in) : in;
                     return std::function<void()>([=] { (void)o->reference(ctx, args); });
                   }});
  if (!c.backward) return paths;
  paths.push_back({"eager", "bwd", [=] {
                     const TensorMap leaves = autograd_leaves(*o, in);
                     const TensorMap out = o->reference(ctx, leaves);
                     std::vector<at::Tensor> roots, seeds, wrt;
                     for (const auto& name : o->grad_outputs) {
                       roots.push_back(out.at(name));
                       seeds.push_back(grad_out.at(name).to(out.at(name).scalar_type()));
                     }
                     for (const auto& name : o->grad_inputs) wrt.push_back(leaves.at(name));
                     return std::function<void()>([=] {
                       (void)torch::autograd::grad(roots, wrt, seeds, /*retain_graph=*/true, /*create_graph=*/false,
                                                   /*allow_unused=*/true);
                     });
                   }});
  return paths;
}

std::vector<Path> variant_paths(const Op& op, const Case& c, const Variant& v, const TensorMap& in,
                                const TensorMap& grad_out, at::Device dev) {
  const Variant* var = &v;
  const OpContext ctx = c.ctx;
  const std::vector<TensorSpec> specs = op.output_specs(ctx, in);
  std::vector<Path> paths;
  paths.push_back({v.id, "fwd", [=] {
                     return std::function<void()>([=] {
                       TensorMap out = allocate(specs, dev);
                       var->forward(ctx, in, out);
                     });
                   }});
  if (!c.backward) return paths;
  const std::vector<TensorSpec> gspecs = grad_specs(op, in);
  paths.push_back({v.id, "bwd", [=] {
                     if (!var->backward) throw InputError("the case runs backward but this variant has no backward");
                     TensorMap saved = allocate(specs, dev);  // the forward's outputs, saved for the backward
                     var->forward(ctx, in, saved);
                     return std::function<void()>([=] {
                       TensorMap grads = allocate(gspecs, dev);
                       var->backward(ctx, in, saved, grad_out, grads);
                     });
                   }});
  return paths;
}

// The variants run_case runs (runner.cpp: not skipped by the case, not filtered out by --variant, registered in
// this build), on the device the perf run times.
std::vector<const Variant*> timed_variants(const Case& c, const Registry& reg, const RunOptions& opts,
                                           at::Device dev) {
  std::vector<const Variant*> out;
  for (const auto& vid : c.variants) {
    if ((opts.only_variant && *opts.only_variant != vid) || c.skip.count(vid)) continue;
    for (const Variant* v : reg.variants(c.op))
      if (v->id == vid && v->device == dev.type()) out.push_back(v);
  }
  return out;
}

// Caching-allocator peak during one call, above what was allocated just before it.
int64_t peak_extra_bytes(const std::function<void()>& call, at::Device dev) {
  if (!dev.is_cuda()) return -1;
  namespace alloc = c10::cuda::CUDACachingAllocator;
  constexpr auto kAll = size_t(c10::CachingAllocator::StatType::AGGREGATE);
  c10::cuda::device_synchronize();
  alloc::resetPeakStats(dev.index());
  const int64_t before = alloc::getDeviceStats(dev.index()).allocated_bytes[kAll].current;
  call();
  c10::cuda::device_synchronize();
  return alloc::getDeviceStats(dev.index()).allocated_bytes[kAll].peak - before;
}

// Compute floor: fp32 FLOPs at the fp32 rate plus tensor FLOPs at the bf16 rate; 0 (unknown) when a unit the
// path uses has no measured ceiling (the CPU has no bf16 one).
double compute_floor_s(const PerfEntry& e, const DeviceCeilings& c) {
  if ((e.flops_fp32 > 0 && c.fp32_tflops <= 0) || (e.flops_tensor > 0 && c.bf16_tflops <= 0)) return 0;
  return (e.flops_fp32 > 0 ? e.flops_fp32 / (c.fp32_tflops * 1e12) : 0) +
         (e.flops_tensor > 0 ? e.flops_tensor / (c.bf16_tflops * 1e12) : 0);
}

void fill_rates(PerfEntry& e, const DeviceCeilings& c) {
  const double s = e.timing.median_ms * 1e-3;
  if (s <= 0) return;
  e.achieved_gbps = e.bytes / s / 1e9;
  e.achieved_tflops = (e.flops_fp32 + e.flops_tensor) / s / 1e12;
  if (c.copy_gbps > 0) e.pct_copy_bw = 100 * e.achieved_gbps / c.copy_gbps;
  e.pct_flops = 100 * compute_floor_s(e, c) / s;
}

// The entry of a path before it is timed: what it must move and compute.
PerfEntry costed(const Path& p, const Op& op, const Case& c, at::Device dev, const TimingOptions& t) {
  PerfEntry e;
  e.path = p.name;
  e.direction = p.direction;
  e.timing.mode = dev.is_cuda() ? t.mode : "cpu";
  const Cost cost = op.cost(c.ctx, p.direction == "bwd");
  e.bytes = cost.bytes;
  e.flops_fp32 = cost.flops_fp32;
  e.flops_tensor = cost.flops_tensor;
  if (const auto it = c.copy_targets.find(p.name + "/" + p.direction); it != c.copy_targets.end())
    e.target_pct_copy = it->second;
  return e;
}

// On the GPU each path in turn: set up, timed (its SM clock watches the device), its peak memory taken.
void time_on_gpu(const std::vector<Path>& paths, std::vector<PerfEntry>& entries, at::Device dev,
                 const TimingOptions& t) {
  for (size_t i = 0; i < paths.size(); ++i) {
    try {
      const std::function<void()> call = paths[i].setup();
      entries[i].timing = time_region(call, dev, t);
      // After the timing: one-time allocations (cuBLAS workspaces) are then behind it, not in its peak.
      entries[i].peak_extra_bytes = peak_extra_bytes(call, dev);
    } catch (const std::exception& ex) {
      entries[i].error = error_message(ex);
    }
  }
}

// On the CPU all paths set up first, then timed together in rounds (time_cpu_regions): eager then saw the host the
// paths saw, which is what makes it their control.
void time_on_cpu(const std::vector<Path>& paths, std::vector<PerfEntry>& entries, const TimingOptions& t) {
  std::vector<std::function<void()>> calls;
  std::vector<size_t> entry_of;
  for (size_t i = 0; i < paths.size(); ++i) {
    try {
      calls.push_back(paths[i].setup());
      entry_of.push_back(i);
    } catch (const std::exception& ex) {
      entries[i].error = error_message(ex);
    }
  }
  std::vector<RegionTiming> timed = time_cpu_regions(calls, t);
  for (size_t k = 0; k < timed.size(); ++k) {
    PerfEntry& e = entries[entry_of[k]];
    if (!timed[k].error) {
      e.timing = std::move(timed[k].timing);  // peak memory stays unknown: the CPU allocator keeps no statistics
      if (e.timing.n == 0)
        e.error = fmt::format("no sample kept of {} taken (each preempted: the host is too busy to time it)",
                              e.timing.dropped_throttled);
      continue;
    }
    try {
      std::rethrow_exception(timed[k].error);
    } catch (const std::exception& ex) {
      e.error = error_message(ex);
    }
  }
}

void fill_speedups(std::vector<PerfEntry>& entries) {
  for (auto& e : entries) {
    auto eager = std::find_if(entries.begin(), entries.end(), [&](const PerfEntry& x) {
      return x.path == "eager" && x.direction == e.direction && x.error.empty();
    });
    if (eager != entries.end() && e.error.empty() && e.timing.median_ms > 0)
      e.speedup_vs_eager = eager->timing.median_ms / e.timing.median_ms;
  }
}

TensorMap on_device(const TensorMap& m, at::Device d) {
  TensorMap out;
  for (const auto& [k, v] : m) out[k] = v.to(d);
  return out;
}

std::vector<PerfEntry> time_paths(const Case& c, const Registry& reg, const RunOptions& opts,
                                  const TimingOptions& t, const DeviceCeilings& ceil, at::Device dev) {
  const Op& op = reg.op(c.op);
  const CaseInputs ci = prepare_inputs(c, reg, opts);
  const TensorMap in = on_device(ci.inputs, dev), grad_out = on_device(ci.grad_outputs, dev);
  std::vector<Path> paths = eager_paths(op, c, in, grad_out);
  for (const Variant* v : timed_variants(c, reg, opts, dev))
    for (Path& p : variant_paths(op, c, *v, in, grad_out, dev)) paths.push_back(std::move(p));
  std::vector<PerfEntry> entries;
  for (const Path& p : paths) entries.push_back(costed(p, op, c, dev, t));
  if (dev.is_cuda())
    time_on_gpu(paths, entries, dev, t);
  else
    time_on_cpu(paths, entries, t);
  for (PerfEntry& e : entries)
    if (e.error.empty()) fill_rates(e, ceil);
  return entries;
}

}  // namespace

std::filesystem::path ceilings_file(const DeviceCeilings& c) {
  const std::string driver = c.driver.empty() ? "" : "__" + file_stem(c.driver);
  return parity_home() / "device" / (file_stem(c.device) + driver + ".json");
}

DeviceCeilings device_ceilings(bool remeasure, bool force_cpu) {
  const at::Device dev = work_device(force_cpu);
  DeviceCeilings c = identify(dev);
  const std::filesystem::path file = ceilings_file(c);
  if (!remeasure)
    if (auto cached = read_cached(file)) return *cached;
  measure_ceilings(c, dev);
  try {
    write_text_file(file, to_json(c).dump(1) + "\n");
  } catch (const InputError& e) {
    throw InputError(fmt::format("{} (set PARITY_HOME to a writable directory)", e.what()));
  }
  return c;
}

PerfResult run_perf(const Case& c, const Registry& reg, const RunOptions& opts, const TimingOptions& t) {
  const at::Device dev = work_device(opts.force_cpu);
  PerfResult r;
  r.ceilings = device_ceilings(false, opts.force_cpu);
  r.upstream = c.notes;
  r.threshold = c.perf_threshold;
  if (dev.is_cuda()) {
    // Every GPU path runs on one side stream: graph mode captures on it, and an eager backward runs its kernels
    // on the stream its forward ran on, which must be the stream the timing events bracket.
    c10::cuda::device_synchronize();
    const c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool(false, dev.index()));
    r.entries = time_paths(c, reg, opts, t, r.ceilings, dev);
    c10::cuda::device_synchronize();
  } else {
    r.entries = time_paths(c, reg, opts, t, r.ceilings, dev);
  }
  fill_speedups(r.entries);
  return r;
}

nlohmann::json to_json(const DeviceCeilings& c) {
  return {{"device", c.device},           {"driver", c.driver},           {"copy_gbps", c.copy_gbps},
          {"bf16_tflops", c.bf16_tflops}, {"fp32_tflops", c.fp32_tflops}, {"measured", c.measured},
          {"method", c.method}};
}

nlohmann::json to_json(const PerfResult& p) {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& e : p.entries) {
    const Timing& t = e.timing;
    entries.push_back({{"path", e.path},
                       {"threshold", p.threshold},
                       {"direction", e.direction},
                       {"mode", t.mode},
                       {"timing_method", t.method},
                       {"median_ms", t.median_ms},
                       {"min_ms", t.min_ms},
                       {"q1_ms", t.q1_ms},
                       {"q3_ms", t.q3_ms},
                       {"rel_noise", t.rel_noise},
                       {"n", t.n},
                       {"samples_ms", t.samples_ms},
                       {"sm_clock_mhz", t.sm_clock_mhz},
                       {"host_probe_us", t.host_probe_us},
                       {"dropped_throttled", t.dropped_throttled},
                       {"stop", t.stop},
                       {"bytes", e.bytes},
                       {"flops_fp32", e.flops_fp32},
                       {"flops_tensor", e.flops_tensor},
                       {"achieved_gbps", e.achieved_gbps},
                       {"achieved_tflops", e.achieved_tflops},
                       {"pct_copy_bw", e.pct_copy_bw},
                       {"pct_flops", e.pct_flops},
                       {"speedup_vs_eager", e.speedup_vs_eager},
                       {"peak_extra_bytes", e.peak_extra_bytes},
                       {"target_pct_copy", e.target_pct_copy},
                       {"error", e.error}});
  }
  return {{"ceilings", to_json(p.ceilings)}, {"upstream", p.upstream}, {"entries", entries}};
}

}  // namespace parity
