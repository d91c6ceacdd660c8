// History of results and the verdicts drawn from it.
//
// Store: reports/history/<op>.jsonl, one JSON object per line, appended, never rewritten (diff-friendly):
//   {"schema": "parity.history/1", "case", "path", "direction", "device", "driver", "platform" (where not the device), "commit",
//    "build_type",
//    "source_hash" (sha256 of the path's source files), "date", "timing": {mode, median_ms, q1_ms, q3_ms, min_ms,
//    n, rel_noise, sm_clock_mhz, host_probe_us, dropped_throttled, samples_ms, threshold (the case's
//    perf_threshold, where it sets one)}, "numerics": {"<tensor> vs
//    <against>": {max_ulp, max_abs, mean_abs}}}
// ("timing" only for a timed path, "numerics" only where checks ran; the file is named by the op of the case id
// "<op>/<name>".) A record's key is (case, path, direction). Device, driver, build type, timing mode, SM clock and
// host probe (the CPU's speed while it was timed) decide whether two timings are comparable. The source hash does
// not: a kernel edit is exactly what the history must judge, so a changed hash only attributes the movement to the
// path's own code (asv's "x" is about the benchmark's definition, which here is the case, fixed by its key).
#pragma once
#include <parity/perf.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace parity {

struct NumericRecord {
  int64_t max_ulp = 0;
  double max_abs = 0, mean_abs = 0;
};

struct HistoryRecord {
  std::string case_id, path, direction;  // the key
  std::string device, driver, commit, build_type, source_hash, date;
  // What its numerics depend on: the environment's GPU, or without one the CPU platform (results.hpp cpu_platform),
  // whether or not the run was timed (a CPU timing's device is the CPU model and thread count). Records written
  // before it was recorded read it as their device.
  std::string platform;
  std::string mode;  // timing mode: "cold", "hot", "graph", "cpu"
  int method = 1;    // timing_method() of perf.hpp; 1 in records written before it was recorded
  double median_ms = 0, q1_ms = 0, q3_ms = 0, min_ms = 0, rel_noise = 0, sm_clock_mhz = 0, host_probe_us = 0;
  double threshold = 0;  // the case's perf_threshold when it was timed; 0: by the timing's mode
  int n = 0, dropped_throttled = 0;
  std::vector<double> samples_ms;
  std::map<std::string, NumericRecord> numerics;  // "<tensor> vs <against>"
  std::string key() const;                        // "case|path|direction"
};

// Copies a measurement's statistics (mode, median, quartiles, noise, samples) into a record.
void set_timing(HistoryRecord& r, const Timing& t);

nlohmann::json to_json(const HistoryRecord& r);
HistoryRecord history_record_from_json(const nlohmann::json& j, const std::string& where);  // InputError naming where

// Records of a results document (those with perf and/or numerics), stamped with its environment: device and
// driver from the case's perf ceilings (the device the paths were timed on), else from the environment's GPU, else
// (no GPU) its CPU platform (results.hpp cpu_platform).
// The source hash of a path is the one the document carries (each case's "source_hashes", written by the build
// that ran), else that of the sources in this checkout (PARITY_SOURCE_DIR), for documents written before it did.
std::vector<HistoryRecord> records_from_results(const nlohmann::json& results_doc);
// sha256 over the files of a path, by convention: "cpu:*" kernels/cpu/<family>.cpp, "cuda:*" kernels/cuda/
// <family>.cu and .cpp, "eager" and "ref:*" references/<family>.cpp, "planted:*" harness/src/planted.cpp and
// kernels/cpu/<family>.cpp. A missing file hashes as absent, so creating or deleting one changes the hash.
std::string source_hash(const std::string& path, const std::string& family,
                        const std::filesystem::path& source_dir = PARITY_SOURCE_DIR);
void append_history(const std::filesystem::path& dir, const std::vector<HistoryRecord>& records);  // <dir>/<op>.jsonl
// Every *.jsonl of `dir` (by name), each in append order. InputError for a missing directory or a bad line
// ("<file>:<line>: ...").
std::vector<HistoryRecord> load_history(const std::filesystem::path& dir);

enum class Verdict { faster, slower, same, ambiguous, not_comparable };
std::string verdict_name(Verdict v);  // "FASTER", "SLOWER", "SAME", "AMBIGUOUS", "NOT-COMPARABLE"

// The default gap a verdict needs, by where the timing ran. A GPU timing's [q1,q3] moves by well under 5% between
// runs. A CPU timing on a shared machine moves more, with the host probe unchanged: the same hc_post cpu:v1
// forward, measured five times in one process with fresh inputs each time, came out up to x1.17 apart in 1 of 30
// such A/A runs on a 2-core VM (tests/harness/test_selfcheck.cpp); 25% stays clear of that, and a planted 2x
// slowdown far beyond it. Below the threshold a shift is AMBIGUOUS, never SLOWER.
constexpr double kGpuThreshold = 0.05, kCpuThreshold = 0.25;

struct VerdictOptions {
  double threshold = 0;     // relative gap between the intervals needed for FASTER/SLOWER; 0: the candidate's case's
                            // (HistoryRecord::threshold), else by the timing's mode
  double alpha = 0.002;     // Mann-Whitney U two-sided p-value needed
  int min_samples = 10;
};

struct PerfVerdict {
  Verdict verdict = Verdict::ambiguous;
  double ratio = 0;    // candidate median / baseline median
  double p_value = 1;  // Mann-Whitney U, two-sided
  std::string reason;  // why this verdict ("intervals [q1,q3] overlap", "driver changed 580.1 -> 580.2", ...)
  std::string next;    // what to do next for AMBIGUOUS / NOT-COMPARABLE
};

// How far apart two records' host probes may be (a ratio) and still be compared: history.cpp says what it rests on.
constexpr double kHostProbeApart = 1.3;
// Host probes closer than this say nothing of the host's speed: on a quiet 2-core VM one probe's median ranged
// 7.0-8.1 us over 14 processes (timing.cpp), so within 1.16x the candidate is judged as measured.
constexpr double kHostProbeNoise = 1.16;
// How far beyond eager's shift (a factor on |log ratio|) a path must move to be judged while eager moved: the host's
// change reached an unchanged path at up to ~1.5x eager's log shift (x1.58 beside x1.36).
constexpr double kBeyondControl = 2.0;

// Why two timings cannot be compared (device, driver, build type, timing mode or method changed, SM clocks more than 5%
// apart or host probes more than kHostProbeApart, where both are known); empty when they can.
std::string incomparability(const HistoryRecord& baseline, const HistoryRecord& candidate);

// Starts at AMBIGUOUS and upgrades only on evidence (nvbench-robust), in this order:
//   NOT-COMPARABLE  device, driver, build type, timing mode or timing method (perf.hpp) changed
//   AMBIGUOUS       either side under min_samples kept, or (GPU timings) more than 10% of its samples dropped as
//                   taken while throttled
//   NOT-COMPARABLE  SM clocks or host probes apart (judged only on enough samples: a handful says nothing)
//   (with both host probes known and more than kHostProbeNoise apart, the candidate is judged both as measured and
//   at the baseline's host speed from here on: SAME, SLOWER and FASTER stand only where the two agree, else AMBIGUOUS)
//   SAME            [q1,q3] intervals overlap and the medians are within threshold
//   AMBIGUOUS       intervals overlap but the medians are not within threshold (too noisy), or the intervals are
//                   apart by no more than threshold (a real shift too small to act on), or the U test does not
//                   reach p < alpha
//   SLOWER/FASTER   intervals apart by more than threshold of the baseline median AND p < alpha
// `reason` gives the numbers; `next` what to do about AMBIGUOUS/NOT-COMPARABLE.
PerfVerdict compare_perf(const HistoryRecord& baseline, const HistoryRecord& candidate, const VerdictOptions& o = {});
// compare_perf with the run's control: eager, the naive LibTorch composition timed beside each path in the same run,
// times the machine, not the kernel. Where both records of eager (same case and direction) are given and carry the
// same source hash, eager is judged first, on its samples alone:
//   SLOWER/FASTER  the host ran at another speed between the two runs: the path is NOT-COMPARABLE (seen on a GPU
//                  host's CPU: an unchanged path x1.58 with eager x1.36 beside it, the host probes 1.1x apart),
//                  unless it moved beyond the machine: SLOWER/FASTER on its samples alone, the same at eager's speed
//                  (its timings divided by eager's ratio), and more than kBeyondControl times eager's shift in log
//                  (hc_pre bwd x0.586 with its dx_dfn on the tensor cores, eager x0.928 beside it: H100 instances),
//                  or against it (slower where eager ran faster, or the reverse: the first two conditions alone);
//   SAME           the host ran at the same speed: the path is judged on its samples alone too, its host probes
//                  neither refusing nor rescaling it; but a SLOWER or FASTER path that is not one at eager's speed
//                  too is NOT-COMPARABLE (eager's noise can hide a shift that explains the path's). The probe (8 us,
//                  cache-resident) moves between processes on its own: on the 2-core VM 4.8 us in some processes
//                  and 7.2 in others, 4 gates of 10 refused as NOT-COMPARABLE (probes 1.3-1.8x apart) with eager
//                  x0.96-1.10 beside the path;
//   otherwise      compare_perf's verdict, probes included; but a SLOWER or FASTER one is judged as under
//                  SLOWER/FASTER above against any shift of eager that its [q1,q3] intervals and the U test show,
//                  however small (run27 on an H100 host under ctest -j 8: the same code x1.37, SLOWER, beside eager
//                  x1.21, AMBIGUOUS under the CPU threshold of 25%).
// The control is eager in the path's own direction; where that one cannot say (a record missing, eager's code
// changed, or its verdict AMBIGUOUS or NOT-COMPARABLE: backward eager on a tiny case is the noisiest timing of a run),
// eager in the other direction of the same runs, which ran in the same processes on the same machines (run12 on an
// H100: a launch-bound tiny backward at x1.604 on unchanged kernels, eager bwd beside it AMBIGUOUS x0.855, eager fwd
// SLOWER x1.281). Neither able to say leaves compare_perf's verdict.
struct Controls {
  const HistoryRecord* same = nullptr;   // eager, the path's direction
  const HistoryRecord* other = nullptr;  // eager, the other direction
};
PerfVerdict compare_perf_controlled(const HistoryRecord& baseline, const HistoryRecord& candidate,
                                    const Controls& baseline_eager, const Controls& candidate_eager,
                                    const VerdictOptions& o = {});
// The eager records of the run `r` came from (same case, commit and date) among `records`, where there: the
// controls compare_perf_controlled takes.
Controls controls_of(const HistoryRecord& r, const std::vector<HistoryRecord>& records);
// o.threshold when set, else the candidate's case's (HistoryRecord::threshold), else kCpuThreshold for mode "cpu" and
// kGpuThreshold for the GPU modes.
double threshold_for(const VerdictOptions& o, const HistoryRecord& candidate);

// Two-sided Mann-Whitney U test p-value: exact (the U distribution by recursion) without ties when
// n1*n2 <= 2500, else the normal approximation with tie and continuity correction (scipy's "asymptotic").
double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b);

// A numeric regression: a metric that grew between baseline and candidate, even inside tolerance: max_ulp at all,
// max_abs by more than 1% (printed values round) or turning non-finite. Keys of only one side are skipped.
struct NumericRegression {
  std::string tensor;  // "<tensor> vs <against>"
  std::string metric;  // "max_ulp" or "max_abs"
  double baseline = 0, candidate = 0;
};
std::vector<NumericRegression> compare_numerics(const HistoryRecord& baseline, const HistoryRecord& candidate);
// Whether two records' numerics can be compared: the same platform and build type (LibTorch's CPU kernels sum in
// the order of their ISA; a debug build may contract differently).
bool same_numerics_setup(const HistoryRecord& a, const HistoryRecord& b);

// Step detection over a series (asv-style piecewise-constant fit, L1 cost with a BIC-like penalty): the indices
// where a new level starts. Slow creep over many small commits shows as several steps: compare the first step's
// `before` with the last step's `after` (the first level against the last).
// The penalty per level is 3 ln(max(n, 10)) sigma, sigma the larger of the noise of the data (MAD of successive
// differences, drift removed) and the median of `noise` (per-point noise, e.g. half the IQR of each point's
// samples), floored at 0.1% of the series' median magnitude.
struct Step {
  size_t index = 0;  // first element of the new level
  double before = 0, after = 0;  // medians of the level before and of the new level
};
std::vector<Step> detect_steps(const std::vector<double>& series, const std::vector<double>& noise = {});

}  // namespace parity
