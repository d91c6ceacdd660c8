// History of results and the verdicts drawn from it.
//
// Store: reports/history/<op>.jsonl, one JSON object per line, appended, never rewritten (diff-friendly):
//   {"schema": "parity.history/1", "case", "path", "direction", "device", "driver", "commit", "build_type",
//    "source_hash" (sha256 of the path's source files), "date", "timing": {median_ms, q1_ms, q3_ms, min_ms, n,
//    rel_noise, sm_clock_mhz, dropped_throttled, samples_ms}, "numerics": {"<tensor> vs <against>": {max_ulp,
//    max_abs, mean_abs}}}
// A record's key is (case, path, direction); device, driver, build_type and source_hash decide comparability.
#pragma once
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
  double median_ms = 0, q1_ms = 0, q3_ms = 0, min_ms = 0, rel_noise = 0, sm_clock_mhz = 0;
  int n = 0, dropped_throttled = 0;
  std::vector<double> samples_ms;
  std::map<std::string, NumericRecord> numerics;  // "<tensor> vs <against>"
  std::string key() const;                        // "case|path|direction"
};

nlohmann::json to_json(const HistoryRecord& r);
HistoryRecord history_record_from_json(const nlohmann::json& j, const std::string& where);  // InputError naming where

// Records of a results document (those with perf and/or numerics), stamped with its environment.
std::vector<HistoryRecord> records_from_results(const nlohmann::json& results_doc);
void append_history(const std::filesystem::path& dir, const std::vector<HistoryRecord>& records);
std::vector<HistoryRecord> load_history(const std::filesystem::path& dir);  // every file, in append order

enum class Verdict { faster, slower, same, ambiguous, not_comparable };
std::string verdict_name(Verdict v);  // "FASTER", "SLOWER", "SAME", "AMBIGUOUS", "NOT-COMPARABLE"

struct VerdictOptions {
  double threshold = 0.05;  // relative gap between the intervals needed for FASTER/SLOWER (per case overridable)
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

// SLOWER/FASTER only when [q1,q3] intervals are apart by more than threshold AND the U test agrees (p < alpha);
// AMBIGUOUS when evidence is insufficient (too few samples, overlap, throttled samples); NOT-COMPARABLE when
// device, driver, build type, clock (>5% apart) or source hash differ.
PerfVerdict compare_perf(const HistoryRecord& baseline, const HistoryRecord& candidate, const VerdictOptions& o = {});

// Two-sided Mann-Whitney U test p-value (normal approximation with tie correction; exact for small samples).
double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b);

// A numeric regression: a metric that grew between baseline and candidate, even inside tolerance.
struct NumericRegression {
  std::string tensor;  // "<tensor> vs <against>"
  std::string metric;  // "max_ulp" or "max_abs"
  double baseline = 0, candidate = 0;
};
std::vector<NumericRegression> compare_numerics(const HistoryRecord& baseline, const HistoryRecord& candidate);

// Step detection over a series (asv-style piecewise-constant fit, L1 cost with a BIC-like penalty): the indices
// where a new level starts, so slow creep over many small commits shows as a step against the first level.
struct Step {
  size_t index = 0;  // first element of the new level
  double before = 0, after = 0;  // level medians
};
std::vector<Step> detect_steps(const std::vector<double>& series, const std::vector<double>& noise = {});

}  // namespace parity
