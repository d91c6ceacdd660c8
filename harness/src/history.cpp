// The history store (JSONL per op), records drawn from results documents, and the verdicts and step detection
// drawn from them (harness-practice.md s1 nvbench-robust, s2 asv, s7 google/benchmark's U test).
#include <parity/error.hpp>
#include <parity/history.hpp>
#include <parity/op.hpp>
#include <parity/sha256.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <queue>
#include <sstream>
#include <tuple>

namespace parity {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kHistorySchema = "parity.history/1";

// ---- Records ------------------------------------------------------------------------------------------------

std::string op_of(const std::string& case_id) { return case_id.substr(0, case_id.find('/')); }

// JSON has no NaN or infinity: nlohmann writes them as null, so null reads back as NaN (a non-finite metric).
double number(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end()) return 0;
  return it->is_null() ? std::numeric_limits<double>::quiet_NaN() : it->get<double>();
}

std::vector<std::string> source_files(const std::string& path, const std::string& family) {
  const std::string backend = path.substr(0, path.find(':'));
  if (backend == "cpu") return {"kernels/cpu/" + family + ".cpp"};
  if (backend == "cuda") return {"kernels/cuda/" + family + ".cu", "kernels/cuda/" + family + ".cpp"};
  if (backend == "eager" || backend == "ref") return {"references/" + family + ".cpp"};
  if (backend == "planted") return {"harness/src/planted.cpp", "kernels/cpu/" + family + ".cpp"};
  return {};
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The device a case's paths were timed on; without perf, the environment's GPU ("name, driver" from nvidia-smi), and
// without a GPU the CPU platform (results.hpp cpu_platform; "none" in documents written before it was recorded).
std::pair<std::string, std::string> device_of(const json& case_j, const json& env) {
  if (const auto perf = case_j.find("perf"); perf != case_j.end() && perf->contains("ceilings")) {
    const json& c = perf->at("ceilings");
    return {c.value("device", ""), c.value("driver", "")};
  }
  const std::string gpu = env.value("gpu", "");
  if (gpu == "none" && env.contains("cpu")) return {env.at("cpu").get<std::string>(), ""};
  const size_t comma = gpu.find(", ");
  if (comma == std::string::npos) return {gpu, ""};
  return {gpu.substr(0, comma), gpu.substr(comma + 2)};
}

// The platform a document's numerics ran on: device_of without perf.
std::string platform_of(const json& env) { return device_of(json::object(), env).first; }

// The commit a results document was made at; a dirty tree is marked, since that commit alone does not reproduce it.
std::string commit_of(const json& env) {
  std::string commit = env.value("commit", "");
  if (env.value("dirty", false)) commit += "-dirty";
  return commit;
}

void set_timing(HistoryRecord& r, const json& t) {
  r.mode = t.value("mode", "");
  r.method = t.value("timing_method", 1);
  r.median_ms = number(t, "median_ms");
  r.q1_ms = number(t, "q1_ms");
  r.q3_ms = number(t, "q3_ms");
  r.min_ms = number(t, "min_ms");
  r.rel_noise = number(t, "rel_noise");
  r.sm_clock_mhz = number(t, "sm_clock_mhz");
  r.host_probe_us = number(t, "host_probe_us");  // 0 (no check) in records written before the probe
  r.n = t.value("n", 0);
  r.dropped_throttled = t.value("dropped_throttled", 0);
  r.samples_ms = t.value("samples_ms", std::vector<double>{});
  r.threshold = number(t, "threshold");  // 0 where the case set none, and in records written before it could
}

NumericRecord numeric_from(const json& m) {
  return {m.value("max_ulp", int64_t{0}), number(m, "max_abs"), number(m, "mean_abs")};
}

json numeric_json(const NumericRecord& n) {
  return {{"max_ulp", n.max_ulp}, {"max_abs", n.max_abs}, {"mean_abs", n.mean_abs}};
}

// ---- Statistics ---------------------------------------------------------------------------------------------

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t h = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + h, v.end());
  if (v.size() % 2) return v[h];
  return 0.5 * (v[h] + *std::max_element(v.begin(), v.begin() + h));
}

// P(U <= u) for sample sizes m and n without ties. The largest of the m+n values belongs to the first sample with
// probability m/(m+n), and then it beats all n values of the second: P_{m,n}(u) = m/(m+n) P_{m-1,n}(u-n) +
// n/(m+n) P_{m,n-1}(u). Probabilities, not counts, so nothing overflows; only u' <= u is ever needed.
double exact_u_cdf(int m, int n, int u) {
  if (n > m) std::swap(m, n);  // U's distribution is symmetric in the two sizes; the tables grow with n
  // prev[j][w] = P_{i-1,j}(U = w), cur[j][w] = P_{i,j}(U = w), for w <= u.
  std::vector<std::vector<double>> prev(n + 1, std::vector<double>(u + 1, 0.0)), cur = prev;
  for (int j = 0; j <= n; ++j) prev[j][0] = 1;  // P_{0,j}: U = 0 surely
  for (int i = 1; i <= m; ++i) {
    std::fill(cur[0].begin(), cur[0].end(), 0.0);
    cur[0][0] = 1;  // P_{i,0}
    for (int j = 1; j <= n; ++j) {
      const double a = double(i) / (i + j), b = double(j) / (i + j);
      for (int w = 0; w <= u; ++w) cur[j][w] = (w >= j ? a * prev[j][w - j] : 0.0) + b * cur[j - 1][w];
    }
    std::swap(prev, cur);
  }
  double p = 0;
  for (int w = 0; w <= u; ++w) p += prev[n][w];
  return p;
}

// The recursion costs about n1 * n2 * U operations (~3M at 50 x 50); larger samples are what the normal
// approximation is for.
constexpr double kExactPairs = 2500;

// ---- Step detection -----------------------------------------------------------------------------------------

// Running median and L1 cost (sum of |y - median|) of a growing set: a max-heap of the lower half and a min-heap
// of the upper half, with their sums.
class RunningL1 {
 public:
  void add(double y) {
    if (lower_.empty() || y <= lower_.top()) {
      lower_.push(y);
      lower_sum_ += y;
    } else {
      upper_.push(y);
      upper_sum_ += y;
    }
    if (lower_.size() > upper_.size() + 1) move(lower_, lower_sum_, upper_, upper_sum_);
    if (upper_.size() > lower_.size()) move(upper_, upper_sum_, lower_, lower_sum_);
  }
  double cost() const {
    const double m = lower_.top();
    return (m * double(lower_.size()) - lower_sum_) + (upper_sum_ - m * double(upper_.size()));
  }

 private:
  template <typename From, typename To>
  static void move(From& from, double& from_sum, To& to, double& to_sum) {
    const double y = from.top();
    from.pop();
    from_sum -= y;
    to.push(y);
    to_sum += y;
  }
  std::priority_queue<double> lower_;
  std::priority_queue<double, std::vector<double>, std::greater<>> upper_;
  double lower_sum_ = 0, upper_sum_ = 0;
};

// Starts of the levels (after the first) of the piecewise-constant fit minimizing sum |y - level| + gamma per
// level: Bellman recursion over the end of the last level, exact, O(n^2 log n) time and O(n) memory.
std::vector<size_t> l1_level_starts(const std::vector<double>& y, double gamma) {
  const size_t n = y.size();
  std::vector<double> best(n + 1, 0);  // best[r]: cost of y[0, r)
  std::vector<size_t> start(n + 1, 0);  // start of the last level of that fit
  for (size_t r = 1; r <= n; ++r) {
    RunningL1 level;
    best[r] = std::numeric_limits<double>::infinity();
    for (size_t l = r; l-- > 0;) {  // the last level is y[l, r)
      level.add(y[l]);
      const double c = best[l] + gamma + level.cost();
      if (c < best[r]) {
        best[r] = c;
        start[r] = l;
      }
    }
  }
  std::vector<size_t> starts;
  for (size_t r = n; start[r] > 0; r = start[r]) starts.push_back(start[r]);
  std::reverse(starts.begin(), starts.end());
  return starts;
}

// Noise of the points about their levels: the MAD of successive differences, centred so that a steady drift
// (creep) does not count as noise, scaled to a normal standard deviation (differences have twice the variance).
double difference_noise(const std::vector<double>& y) {
  std::vector<double> d;
  for (size_t i = 1; i < y.size(); ++i) d.push_back(y[i] - y[i - 1]);
  const double center = median_of(d);
  for (double& x : d) x = std::abs(x - center);
  return 1.4826 * median_of(d) / std::sqrt(2.0);
}

// BIC-like: each level costs ln(n) noise units; kPenalty is calibrated on simulated series (a false step in at
// most 1% of pure-noise series of 20..100 points, Gaussian or t(3); a 10% step over the last 3 of 20 points at
// 2% Gaussian noise is found). asv's beta = 4 ln(n)/n on the mean absolute residual is about the same (3.2 ln(n) sigma).
constexpr double kPenalty = 3.0;
// Below ~10 points the noise estimate is itself too noisy to trust, so short series are penalized as 10 points.
constexpr double kMinEffectivePoints = 10;
// asv's measurement-accuracy floor: without it a noise-free series would split at every last-digit change.
constexpr double kRelativeNoiseFloor = 1e-3;

std::string pct(double x) { return fmt::format("{:.1f}%", 100 * x); }

// What a changed source hash says about a verdict: whose doing the movement is.
std::string attribution(const HistoryRecord& b, const HistoryRecord& c) {
  if (b.source_hash.empty() || c.source_hash.empty()) return "";
  if (b.source_hash != c.source_hash)
    return fmt::format("; the path's source changed ({} -> {})", b.source_hash.substr(0, 8), c.source_hash.substr(0, 8));
  return "; the path's source is unchanged (look at the environment: compiler, LibTorch, harness, machine)";
}

// Too little evidence to decide anything, with what to do about it.
struct Weakness {
  std::string reason, next;
};
std::optional<Weakness> weak_evidence(const HistoryRecord& b, const HistoryRecord& c, const VerdictOptions& o) {
  const std::pair<const char*, const HistoryRecord*> sides[] = {{"baseline", &b}, {"candidate", &c}};
  for (const auto& [side, r] : sides) {
    if (r->n < o.min_samples)
      return Weakness{fmt::format("{} has {} samples (< {})", side, r->n, o.min_samples),
                      "re-run with --time-cap 30 to collect more samples"};
    if (!(r->median_ms > 0))
      return Weakness{fmt::format("{} has a median of {} ms", side, r->median_ms), "re-run the measurement"};
  }
  // A throttled GPU is a fault to fix; a CPU on a shared host runs slow in stretches as a matter of course, and its
  // probe drops those samples (at most half, timing.cpp) so that the kept ones are the evidence: on the 2-core VM
  // 13-26% of a 2.3 ms region's samples went, and a 10% rule left a 3x slowdown AMBIGUOUS.
  for (const auto& [side, r] : sides)
    if (r->mode != "cpu" && r->dropped_throttled > 0.1 * (r->n + r->dropped_throttled))
      return Weakness{fmt::format("{} dropped {} of {} samples taken while the machine ran slow (> 10%)", side,
                                  r->dropped_throttled, r->n + r->dropped_throttled),
                      "pin clocks (nvidia-smi -lgc) / check throttling (cooling, other jobs on the device or host), "
                      "then re-run"};
  return std::nullopt;
}

}  // namespace

// ---- Records ------------------------------------------------------------------------------------------------

std::string HistoryRecord::key() const { return case_id + "|" + path + "|" + direction; }

void set_timing(HistoryRecord& r, const Timing& t) {
  r.mode = t.mode;
  r.method = t.method;
  r.median_ms = t.median_ms;
  r.q1_ms = t.q1_ms;
  r.q3_ms = t.q3_ms;
  r.min_ms = t.min_ms;
  r.rel_noise = t.rel_noise;
  r.sm_clock_mhz = t.sm_clock_mhz;
  r.host_probe_us = t.host_probe_us;
  r.n = t.n;
  r.dropped_throttled = t.dropped_throttled;
  r.samples_ms = t.samples_ms;
}

json to_json(const HistoryRecord& r) {
  json j{{"schema", kHistorySchema}, {"case", r.case_id},     {"path", r.path},
         {"direction", r.direction}, {"device", r.device},    {"driver", r.driver},
         {"commit", r.commit},       {"build_type", r.build_type}, {"source_hash", r.source_hash},
         {"date", r.date}};
  if (!r.platform.empty() && r.platform != r.device) j["platform"] = r.platform;  // absent: read back as the device
  if (r.n > 0)
    j["timing"] = {{"mode", r.mode},         {"timing_method", r.method},      {"median_ms", r.median_ms},
                   {"q1_ms", r.q1_ms},       {"q3_ms", r.q3_ms},               {"min_ms", r.min_ms},  {"n", r.n},
                   {"rel_noise", r.rel_noise}, {"sm_clock_mhz", r.sm_clock_mhz}, {"host_probe_us", r.host_probe_us},
                   {"dropped_throttled", r.dropped_throttled}, {"samples_ms", r.samples_ms}};
  if (r.n > 0 && r.threshold > 0) j["timing"]["threshold"] = r.threshold;
  if (!r.numerics.empty()) {
    json& n = j["numerics"];
    for (const auto& [name, m] : r.numerics) n[name] = numeric_json(m);
  }
  return j;
}

HistoryRecord history_record_from_json(const json& j, const std::string& where) {
  try {
    if (!j.is_object()) throw InputError("a record must be a JSON object");
    if (const std::string schema = j.value("schema", ""); schema != kHistorySchema)
      throw InputError(fmt::format("schema is '{}', expected '{}'", schema, kHistorySchema));
    HistoryRecord r;
    r.case_id = j.at("case").get<std::string>();
    r.path = j.at("path").get<std::string>();
    r.direction = j.at("direction").get<std::string>();
    for (auto [field, key] : {std::pair{&r.device, "device"}, {&r.driver, "driver"}, {&r.commit, "commit"},
                              {&r.build_type, "build_type"}, {&r.source_hash, "source_hash"}, {&r.date, "date"},
                              {&r.platform, "platform"}})
      *field = j.value(key, "");
    if (r.platform.empty()) r.platform = r.device;
    if (const auto t = j.find("timing"); t != j.end()) set_timing(r, *t);
    if (const auto n = j.find("numerics"); n != j.end())
      for (const auto& [name, m] : n->items()) r.numerics[name] = numeric_from(m);
    return r;
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", where, e.what()));
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: {}", where, e.what()));
  }
}

std::string source_hash(const std::string& path, const std::string& family, const fs::path& source_dir) {
  Sha256 h;
  for (const auto& rel : source_files(path, family)) {
    const fs::path file = source_dir / rel;
    const bool present = fs::is_regular_file(file);
    // Name and length prefix every file, so contents cannot run into each other and absent differs from empty.
    const std::string content = present ? read_file(file) : "";
    const std::string header = fmt::format("{}\n{}\n", rel, present ? std::to_string(content.size()) : "absent");
    h.update(header.data(), header.size());
    h.update(content.data(), content.size());
  }
  return h.hex_digest();
}

std::vector<HistoryRecord> records_from_results(const json& doc) {
  const json env = doc.value("environment", json::object());
  const Registry& reg = Registry::global();
  std::vector<HistoryRecord> records;
  const json cases = doc.value("cases", json::array());
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    try {
      const std::string case_id = c.value("case", ""), op = c.value("op", op_of(case_id));
      const std::string family = reg.has_op(op) ? reg.op(op).family : op;
      const auto [device, driver] = device_of(c, env);
      const json hashes = c.value("source_hashes", json::object());
      std::map<std::string, size_t> index;  // "path|direction" -> position in `records`
      auto record = [&](const std::string& path, const std::string& direction) -> HistoryRecord& {
        const auto [it, added] = index.emplace(path + "|" + direction, records.size());
        if (added) {
          HistoryRecord r;
          r.case_id = case_id;
          r.path = path;
          r.direction = direction;
          r.device = device;
          r.driver = driver;
          r.platform = platform_of(env);
          r.commit = commit_of(env);
          r.build_type = env.value("build_type", "");
          r.date = env.value("date", "");
          r.source_hash = hashes.contains(path) ? hashes.at(path).get<std::string>() : source_hash(path, family);
          records.push_back(std::move(r));
        }
        return records[it->second];
      };
      if (const auto perf = c.find("perf"); perf != c.end())
        for (const auto& e : perf->value("entries", json::array()))
          if (e.value("n", 0) > 0) set_timing(record(e.value("path", ""), e.value("direction", "")), e);
      for (const auto& check : c.value("checks", json::array()))
        if (const auto m = check.find("metrics"); m != check.end() && !check.value("variant", "").empty())
          record(check.value("variant", ""), "fwd")
              .numerics[check.value("tensor", "") + " vs " + check.value("against", "")] = numeric_from(*m);
    } catch (const json::exception& e) {
      throw DocumentError(fmt::format("cases[{}]: {}", i, e.what()));
    }
  }
  return records;
}

void append_history(const fs::path& dir, const std::vector<HistoryRecord>& records) {
  fs::create_directories(dir);
  std::map<std::string, std::string> lines;  // op -> text to append
  for (const auto& r : records) {
    const std::string op = op_of(r.case_id);
    if (op.empty() || r.case_id.find('/') == std::string::npos)
      throw InputError(fmt::format("record '{}': case id is not '<op>/<name>'", r.key()));
    lines[op] += to_json(r).dump() + "\n";
  }
  for (const auto& [op, text] : lines) {
    const fs::path file = dir / (op + ".jsonl");
    std::ofstream out(file, std::ios::app);
    out << text;
    if (!out.flush()) throw InputError(fmt::format("{}: cannot append", file.string()));
  }
}

std::vector<HistoryRecord> load_history(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw InputError(fmt::format("{}: no such history directory", dir.string()));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".jsonl") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<HistoryRecord> records;
  for (const auto& file : files) {
    std::ifstream in(file);
    std::string line;
    for (int line_no = 1; std::getline(in, line); ++line_no) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = fmt::format("{}:{}", file.string(), line_no);
      json j;
      try {
        j = json::parse(line);
      } catch (const json::exception& e) {
        throw InputError(fmt::format("{}: not JSON: {}", where, e.what()));
      }
      records.push_back(history_record_from_json(j, where));
    }
  }
  return records;
}

// ---- Verdicts -----------------------------------------------------------------------------------------------

std::string verdict_name(Verdict v) {
  switch (v) {
    case Verdict::faster: return "FASTER";
    case Verdict::slower: return "SLOWER";
    case Verdict::same: return "SAME";
    case Verdict::ambiguous: return "AMBIGUOUS";
    case Verdict::not_comparable: return "NOT-COMPARABLE";
  }
  return "?";
}

double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n1 = a.size(), n2 = b.size(), n = n1 + n2;
  if (n1 == 0 || n2 == 0) return 1;
  std::vector<std::pair<double, bool>> all;  // value, from a
  for (double x : a) all.emplace_back(x, true);
  for (double x : b) all.emplace_back(x, false);
  std::sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  double rank_sum_a = 0, tie_term = 0;  // tie_term: sum of t^3 - t over groups of t equal values
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && all[j].first == all[i].first) ++j;
    const double t = double(j - i), mid_rank = 0.5 * double(i + 1 + j);
    for (size_t k = i; k < j; ++k)
      if (all[k].second) rank_sum_a += mid_rank;
    tie_term += t * t * t - t;
    i = j;
  }
  const double pairs = double(n1) * double(n2);
  const double u1 = rank_sum_a - double(n1) * double(n1 + 1) / 2, u_min = std::min(u1, pairs - u1);
  if (tie_term == 0 && pairs <= kExactPairs)
    return std::min(1.0, 2 * exact_u_cdf(int(n1), int(n2), int(std::llround(u_min))));
  const double sigma = std::sqrt(pairs / 12 * (double(n + 1) - tie_term / (double(n) * double(n - 1))));
  if (sigma == 0) return 1;  // every value equal
  const double z = (pairs - u_min - pairs / 2 - 0.5) / sigma;  // continuity-corrected, larger U
  return std::clamp(std::erfc(z / std::sqrt(2.0)), 0.0, 1.0);
}

namespace {

// What was measured on, and how: device, driver, build type, timing mode and method.
std::string setup_change(const HistoryRecord& b, const HistoryRecord& c) {
  for (auto [what, x, y] : {std::tuple{"device", &b.device, &c.device}, {"driver", &b.driver, &c.driver},
                            {"build type", &b.build_type, &c.build_type}, {"timing mode", &b.mode, &c.mode}})
    if (*x != *y) return fmt::format("{} changed: '{}' -> '{}'", what, *x, *y);
  if (b.method != c.method) return fmt::format("timing method changed: {} -> {} (perf.hpp)", b.method, c.method);
  return "";
}

// Both host probes known and more than `factor` apart (a ratio).
bool probes_apart(const HistoryRecord& b, const HistoryRecord& c, double factor) {
  return b.host_probe_us > 0 && c.host_probe_us > 0 &&
         std::max(b.host_probe_us, c.host_probe_us) > factor * std::min(b.host_probe_us, c.host_probe_us);
}

// How fast the machine ran while it was measured: the median SM clock, the median host probe.
std::string speed_change(const HistoryRecord& b, const HistoryRecord& c) {
  if (b.sm_clock_mhz > 0 && c.sm_clock_mhz > 0 &&
      std::abs(c.sm_clock_mhz - b.sm_clock_mhz) > 0.05 * std::max(b.sm_clock_mhz, c.sm_clock_mhz))
    return fmt::format("SM clocks {:.0f} -> {:.0f} MHz (more than 5% apart)", b.sm_clock_mhz, c.sm_clock_mhz);
  // The probe's own speed depends on where its buffers landed (physical pages, cache sets): on a quiet 2-core VM
  // its median ranged 7.0-8.1 us over 14 processes while the kernel it accompanied moved 4%. A slow stretch of the
  // host takes it to 1.6-1.9x.
  if (probes_apart(b, c, kHostProbeApart))
    return fmt::format("host probe {:.1f} -> {:.1f} us (more than x{} apart): the CPU ran at another speed",
                       b.host_probe_us, c.host_probe_us, kHostProbeApart);
  return "";
}

// The record with its host probe unknown: compare_perf then neither refuses nor rescales on it.
HistoryRecord without_probe(HistoryRecord r) {
  r.host_probe_us = 0;
  return r;
}

// The record's timings times `scale`: what it would have measured on a machine that much slower.
HistoryRecord at_speed(HistoryRecord r, double scale) {
  for (double* t : {&r.median_ms, &r.q1_ms, &r.q3_ms, &r.min_ms}) *t *= scale;
  for (double& t : r.samples_ms) t *= scale;
  return r;
}

}  // namespace

std::string incomparability(const HistoryRecord& b, const HistoryRecord& c) {
  const std::string setup = setup_change(b, c);
  return setup.empty() ? speed_change(b, c) : setup;
}

double threshold_for(const VerdictOptions& o, const HistoryRecord& candidate) {
  if (o.threshold > 0) return o.threshold;
  if (candidate.threshold > 0) return candidate.threshold;
  return candidate.mode == "cpu" ? kCpuThreshold : kGpuThreshold;
}

PerfVerdict compare_perf(const HistoryRecord& b, const HistoryRecord& c, const VerdictOptions& o) {
  PerfVerdict v;
  v.ratio = b.median_ms > 0 ? c.median_ms / b.median_ms : 0;
  v.p_value = mann_whitney_p(b.samples_ms, c.samples_ms);
  // A setup change first; then too little evidence, since the clock or probe median of a handful of samples says
  // nothing; then the machine's speed.
  if (const std::string why = setup_change(b, c); !why.empty()) {
    v.verdict = Verdict::not_comparable;
    v.reason = why;
    v.next = fmt::format("re-measure the baseline (commit {}) on this setup, or compare against a record of it",
                         b.commit.empty() ? "?" : b.commit);
    return v;
  }
  if (const auto weak = weak_evidence(b, c, o)) {
    v.reason = weak->reason;
    v.next = weak->next;
    return v;
  }
  if (const std::string why = speed_change(b, c); !why.empty()) {
    v.verdict = Verdict::not_comparable;
    v.reason = why;
    v.next = why.starts_with("SM clocks") ? "pin clocks (nvidia-smi -lgc) and check throttling, then re-measure"
                                          : "re-measure both when the machine is quiet (other jobs, frequency "
                                            "scaling, a shared VM host)";
    return v;
  }
  const double threshold = threshold_for(o, c);
  // Within kHostProbeApart the host's speed still moves the region (on the 2-core VM a stretch with the probe 1.29x
  // slower ran the same code 1.45x slower), but not always as the probe did (on an H200 host's CPU the probe 1.29x
  // faster, the same code as fast as before). So the candidate is judged both as measured and at the baseline's host
  // speed, and SAME, SLOWER or FASTER stand only where both agree; where they do not, the probe's correction would
  // decide alone, and the verdict is AMBIGUOUS. Probes within kHostProbeNoise correct nothing: their own noise
  // between processes would only blur the verdict (same code, x1.000 as measured, AMBIGUOUS after a x0.94 correction).
  const double host = probes_apart(b, c, kHostProbeNoise) ? b.host_probe_us / c.host_probe_us : 1;
  struct Spread {
    double gap, shift;  // [q1,q3] gap over the baseline median (< 0: the intervals overlap); |median ratio - 1|
    int sign;           // +1 slower, -1 faster
    bool same(double t) const { return gap < 0 && shift <= t; }
    bool apart(double t) const { return gap > t; }
  };
  const auto spread = [&](double scale) {
    return Spread{std::max(c.q1_ms * scale - b.q3_ms, b.q1_ms - c.q3_ms * scale) / b.median_ms,
                  std::abs(c.median_ms * scale / b.median_ms - 1), c.median_ms * scale > b.median_ms ? 1 : -1};
  };
  const Spread at_host = spread(host), raw = spread(1);
  const double gap = at_host.gap, shift = at_host.shift;
  const std::string scaled = host == 1 ? "" : fmt::format(" (candidate at the baseline's host speed: x{:.3f})", host);
  const auto disagree = [&](const char* scaled_says) {
    v.reason = fmt::format("at the baseline's host speed (host probes {:.1f} -> {:.1f} us, x{:.3f}) {}, as measured "
                           "x{:.3f}: the probe's correction alone would decide",
                           b.host_probe_us, c.host_probe_us, host, scaled_says, c.median_ms / b.median_ms);
    v.next = "re-measure both when the machine is quiet (other jobs, frequency scaling, a shared VM host)";
    return v;
  };
  if (at_host.same(threshold)) {
    if (!raw.same(threshold)) return disagree("the same");
    v.verdict = Verdict::same;
    v.reason = fmt::format("[q1,q3] intervals overlap, medians within {} ({}){}", pct(threshold), pct(shift), scaled);
    return v;
  }
  if (gap < 0) {
    v.reason = fmt::format("[q1,q3] intervals overlap but the medians differ by {} (> {}){}: too noisy to decide",
                           pct(shift), pct(threshold), scaled);
    v.next = "reduce the noise (pin clocks, stop other jobs) and re-run with --time-cap 30";
    return v;
  }
  if (gap <= threshold) {
    v.reason = fmt::format("[q1,q3] intervals apart by {} of the baseline median (<= {}){}, p={:.2g}: a shift too "
                           "small to act on",
                           pct(gap), pct(threshold), scaled, v.p_value);
    v.next = "nothing now; if it persists, `parity history check` shows the creep against the first level";
    return v;
  }
  if (v.p_value >= o.alpha) {
    v.reason = fmt::format("[q1,q3] intervals apart by {}{} but the U test p={:.2g} does not reach {}", pct(gap),
                           scaled, v.p_value, o.alpha);
    v.next = "re-run with --time-cap 30 to collect more samples";
    return v;
  }
  if (!raw.apart(threshold) || raw.sign != at_host.sign)
    return disagree(at_host.sign > 0 ? "slower" : "faster");
  v.verdict = at_host.sign > 0 ? Verdict::slower : Verdict::faster;
  v.reason = fmt::format("[q1,q3] intervals apart by {} of the baseline median (> {}){}, U test p={:.2g} < {}{}",
                         pct(gap), pct(threshold), scaled, v.p_value, o.alpha, attribution(b, c));
  return v;
}

PerfVerdict compare_perf_controlled(const HistoryRecord& b, const HistoryRecord& c, const Controls& b_eager,
                                    const Controls& c_eager, const VerdictOptions& o) {
  // Eager is judged on its samples alone: its probes are the ones that mislead (see the header).
  const auto judge = [&](const HistoryRecord* be, const HistoryRecord* ce,
                         const VerdictOptions& with) -> std::optional<PerfVerdict> {
    if (!be || !ce || be->n == 0 || ce->n == 0 || be->source_hash != ce->source_hash) return std::nullopt;
    PerfVerdict v = compare_perf(without_probe(*be), without_probe(*ce), with);
    if (v.verdict == Verdict::ambiguous || v.verdict == Verdict::not_comparable) return std::nullopt;
    return v;
  };
  const HistoryRecord *be = nullptr, *ce = nullptr;
  std::string eager;
  const auto find_control = [&](const VerdictOptions& with) {
    std::optional<PerfVerdict> v = judge(b_eager.same, c_eager.same, with);
    if (v) be = b_eager.same, ce = c_eager.same, eager = "eager";
    else if ((v = judge(b_eager.other, c_eager.other, with)))
      be = b_eager.other, ce = c_eager.other, eager = "eager " + c_eager.other->direction;
    return v;
  };
  std::optional<PerfVerdict> control = find_control(o);
  if (!control) {
    const PerfVerdict alone = compare_perf(b, c, o);
    if (alone.verdict != Verdict::slower && alone.verdict != Verdict::faster) return alone;
    // Eager that moved by less than the threshold (no verdict of its own) still timed the machine where its
    // [q1,q3] intervals are apart and the U test agrees: a SLOWER or FASTER path is then judged against that shift
    // as below (run27 on an H100 host's CPU under ctest -j 8: the same code x1.37 beside eager x1.21, host probes
    // x1.15, was SLOWER).
    VerdictOptions any_shift = o;
    any_shift.threshold = std::numeric_limits<double>::min();
    if (!(control = find_control(any_shift))) return alone;
  }
  const bool moved = control->verdict != Verdict::same;
  // Eager the same or moved: the path is judged on its samples alone, eager standing in for the host probes.
  PerfVerdict v = compare_perf(without_probe(b), without_probe(c), o);
  if (!moved) {
    // Eager's samples too noisy to call its shift a change can still carry most of the path's: a SLOWER or FASTER
    // path must be one at eager's speed too (the CI VM under ctest -j 2: an unchanged path x1.41, SLOWER, beside
    // eager x1.24 with 24-32% noise, SAME; x1.14 at eager's speed).
    if ((v.verdict == Verdict::slower || v.verdict == Verdict::faster) &&
        compare_perf(without_probe(b), without_probe(at_speed(c, 1 / control->ratio)), o).verdict != v.verdict) {
      v.verdict = Verdict::not_comparable;
      v.reason = fmt::format("x{:.3f} as measured, not at the speed of {} beside it (the same code in both, SAME "
                             "x{:.3f}: median {:.4g} -> {:.4g} ms)",
                             v.ratio, eager, control->ratio, be->median_ms, ce->median_ms);
      v.next = "time both again when the machine is quiet";
      return v;
    }
    if (probes_apart(b, c, kHostProbeNoise))  // named only where they would have counted
      v.reason += fmt::format(" (host speed from {} beside it, the same x{:.3f}; host probes {:.1f} -> {:.1f} us "
                              "not used)",
                              eager, control->ratio, b.host_probe_us, c.host_probe_us);
    return v;
  }
  // Eager moved. A change of the path's own shows beyond what the machine did to eager, or against it (slower where
  // eager ran faster: the machine's speed cannot explain that, and at eager's speed the change is larger still):
  // judged on its samples as measured and at eager's speed, both agreeing, and, moving with eager, more than
  // kBeyondControl times eager's shift (in log).
  const bool against = (v.ratio > 1) != (control->ratio > 1);
  if ((v.verdict == Verdict::slower || v.verdict == Verdict::faster) &&
      (against || std::abs(std::log(v.ratio)) > kBeyondControl * std::abs(std::log(control->ratio))) &&
      compare_perf(without_probe(b), without_probe(at_speed(c, 1 / control->ratio)), o).verdict == v.verdict) {
    v.reason += fmt::format("; {} the machine's own change ({}, the same code in both, {} x{:.3f}): x{:.3f} at "
                            "eager's speed",
                            against ? "against" : "beyond", eager, verdict_name(control->verdict), control->ratio,
                            v.ratio / control->ratio);
    return v;
  }
  v.verdict = Verdict::not_comparable;
  v.reason = fmt::format("the machine ran at another speed: {}, the same code in both, {} x{:.3f} (median {:.4g} "
                         "-> {:.4g} ms)",
                         eager, verdict_name(control->verdict), control->ratio, be->median_ms, ce->median_ms);
  v.next = "time both again when the machine is quiet";
  return v;
}

Controls controls_of(const HistoryRecord& r, const std::vector<HistoryRecord>& records) {
  Controls out;
  if (r.path == "eager") return out;  // eager is the control, not controlled
  for (const auto& e : records)
    if (e.path == "eager" && e.case_id == r.case_id && e.commit == r.commit && e.date == r.date)
      (e.direction == r.direction ? out.same : out.other) = &e;
  return out;
}

bool same_numerics_setup(const HistoryRecord& a, const HistoryRecord& b) {
  const auto platform = [](const HistoryRecord& r) -> const std::string& { return r.platform.empty() ? r.device : r.platform; };
  return platform(a) == platform(b) && a.build_type == b.build_type;
}

std::vector<NumericRegression> compare_numerics(const HistoryRecord& b, const HistoryRecord& c) {
  std::vector<NumericRegression> out;
  for (const auto& [name, cm] : c.numerics) {
    const auto it = b.numerics.find(name);
    if (it == b.numerics.end()) continue;
    const NumericRecord& bm = it->second;
    if (cm.max_ulp > bm.max_ulp) out.push_back({name, "max_ulp", double(bm.max_ulp), double(cm.max_ulp)});
    const bool became_nonfinite = !std::isfinite(cm.max_abs) && std::isfinite(bm.max_abs);
    if (became_nonfinite || cm.max_abs > bm.max_abs * 1.01) out.push_back({name, "max_abs", bm.max_abs, cm.max_abs});
  }
  return out;
}

std::vector<Step> detect_steps(const std::vector<double>& series, const std::vector<double>& noise) {
  const size_t n = series.size();
  if (n < 2) return {};
  std::vector<double> magnitude;
  for (double y : series) magnitude.push_back(std::abs(y));
  const double sigma =
      std::max({difference_noise(series), median_of(noise), kRelativeNoiseFloor * median_of(magnitude)});
  if (sigma == 0) return {};  // an all-zero series has no steps
  const double gamma = kPenalty * std::log(std::max(double(n), kMinEffectivePoints)) * sigma;
  const std::vector<size_t> starts = l1_level_starts(series, gamma);
  std::vector<Step> steps;
  for (size_t k = 0; k < starts.size(); ++k) {
    const size_t begin = k == 0 ? 0 : starts[k - 1], end = k + 1 < starts.size() ? starts[k + 1] : n;
    const auto level = [&](size_t from, size_t to) {
      return median_of(std::vector<double>(series.begin() + long(from), series.begin() + long(to)));
    };
    steps.push_back({starts[k], level(begin, starts[k]), level(starts[k], end)});
  }
  return steps;
}

}  // namespace parity
