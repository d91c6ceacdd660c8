// The CI gate (harness-practice.md s9): runs a suite, compares it with the committed baselines (baseline.hpp) and
// decides, with the reason of a failure kept apart from infrastructure errors:
//   exit 2  a harness or input error: a case ERROR (missing golden, corrupt file), an unknown case, a corrupt
//           baseline, or a GPU-only suite on a machine without a GPU (every case a CUDA-only skip)
//   exit 1  a parity failure, or a confirmed regression: a SLOWER perf verdict of a variant, or a numeric regression
//           (max_ulp or max_abs grew against the baseline, even inside tolerance); AMBIGUOUS only under --ambiguous
//           fail. The naive "eager" path's verdicts are shown, never gated: it measures the machine, not Parity's code
//   exit 0  otherwise; skips, FASTER, NOT-COMPARABLE, keys without a baseline and AMBIGUOUS are reported, not fatal
// Reports: JUnit XML (one testcase per case and path), a Markdown summary for a PR comment or a GitHub step
// summary, and the results document with a "gate" section.
#pragma once
#include <parity/baseline.hpp>
#include <parity/history.hpp>
#include <parity/runner.hpp>

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace parity {

enum class AmbiguousMode { ignore, warn, fail };
AmbiguousMode parse_ambiguous_mode(const std::string& s);  // InputError for anything but ignore|warn|fail
std::string ambiguous_mode_name(AmbiguousMode m);

// A per-arch override the gate put in place of a case's policy.
struct AppliedOverride {
  std::string arch, case_id, tensor;
  std::string case_policy;  // what the case file declares
  PolicyOverride with;
  std::filesystem::path file;  // the baseline file it came from
};

// One result key (case|path|direction) against its committed baseline.
struct BaselineComparison {
  std::string case_id, path, direction;
  bool has_baseline = false;
  std::string baseline_commit, baseline_date;
  std::optional<PerfVerdict> perf;  // when both sides were timed
  // Numbers are compared only between runs on the same platform (HistoryRecord::platform) and build type: the
  // reference itself runs on the GPU when there is one, so a CPU path's error can move by a rounding step between
  // machines without any code change. Their baseline can be another record of the key than the timing's.
  std::string numerics_commit;          // the commit of the numbers compared
  std::string numerics_not_comparable;  // why, when not compared
  std::vector<NumericRegression> regressions;
  std::string key() const { return case_id + "|" + path + "|" + direction; }
};

struct GateOptions {
  RunOptions run;
  bool perf = false;
  AmbiguousMode ambiguous = AmbiguousMode::warn;
  std::filesystem::path baseline_dir;
  std::function<void(const CaseResult&)> progress;  // called after each case
};

struct GateReport {
  std::string arch;  // "cpu", "sm_90"
  std::string suite;
  AmbiguousMode ambiguous = AmbiguousMode::warn;
  std::vector<CaseResult> results;
  nlohmann::json results_doc;  // results_document(results), with each case's "perf" under --perf
  std::vector<AppliedOverride> overrides;
  std::vector<BaselineComparison> comparisons;
  std::vector<std::string> errors;  // gate-level errors beyond the cases' own (exit 2)
};

// Puts every override of `arch` that names a case of `cases` in place of that case's policy. InputError when an
// override names a tensor the case has no policy for, or carries a policy that does not parse (a stale override
// must not silently stop applying).
std::vector<AppliedOverride> apply_overrides(std::vector<Case>& cases, const std::map<std::string, Baseline>& baselines,
                                             const std::string& arch);

// The records of a results document against the baselines' records of the same key.
std::vector<BaselineComparison> compare_with_baselines(const nlohmann::json& results_doc,
                                                       const std::map<std::string, Baseline>& baselines);

// "no GPU for a GPU-only suite" when `gpu` is false and every case skipped with only CUDA variants.
std::optional<std::string> gpu_suite_without_gpu(const std::vector<CaseResult>& results, bool gpu);

// Runs `cases` (overrides of this machine's arch applied), times them under o.perf, compares with the baselines.
GateReport run_gate(std::vector<Case> cases, const Registry& reg, const GateOptions& o, const std::string& suite);

int gate_exit_code(const GateReport& r);
bool is_regression(const BaselineComparison& c, AmbiguousMode mode);

std::string junit_xml(const GateReport& r);
std::string markdown_summary(const GateReport& r);
nlohmann::json gate_document(const GateReport& r);  // results_doc plus "gate": verdicts, overrides, exit code

// XML 1.0 escaping of text, or of an attribute value (line breaks and tabs then encoded, so they survive parsing);
// characters XML 1.0 cannot hold become U+FFFD.
std::string xml_escape(const std::string& s, bool attribute = false);

}  // namespace parity
