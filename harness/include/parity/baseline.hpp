// Committed baselines: baselines/<op>.json holds the numbers the CI gate (gate.hpp) compares a run with, and the
// per-architecture policy overrides it applies (harness-practice.md s9.7: scoped narrowly, with a reason, the
// worst value observed and the tracking issue).
//
//   {"schema": "parity.baseline/1",
//    "records":   [HistoryRecord (history.hpp to_json), ...]   one per key case|path|direction and device, sorted
//    "updates":   [{"who", "what", "why", "date", "commit"}, ...]   appended by every change, never rewritten
//    "overrides": {"sm_90": {"hc_post/v4flash_pack16k|out": {"policy", "reason", "worst_observed", "issue"}}}}
//
// Records and updates are written one per line, so a baseline change reviews as a line diff.
#pragma once
#include <parity/history.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace parity {

inline constexpr const char* kBaselineSchema = "parity.baseline/1";

struct BaselineUpdate {
  std::string who, what, why, date, commit;
};

struct PolicyOverride {
  std::string policy;  // replaces the case's policy for the tensor (policy.hpp syntax)
  std::string reason, worst_observed, issue;
};

// A baseline record's place: its key and its device. Numbers are compared on the device they were taken on only (a
// CPU platform's LibTorch sums in its own order: results.hpp cpu_platform), so a key may have a record per device.
std::string baseline_key(const HistoryRecord& r);  // "case|path|direction|device"

struct Baseline {
  std::filesystem::path path;                    // baselines/<op>.json
  std::map<std::string, HistoryRecord> records;  // by baseline_key()
  std::vector<BaselineUpdate> updates;
  std::map<std::string, std::map<std::string, PolicyOverride>> overrides;  // arch -> "<case>|<tensor>" -> override
};

// Throws InputError naming the file and the field.
Baseline read_baseline(const std::filesystem::path& path);  // an absent file is an empty baseline
void write_baseline(const Baseline& b);
std::string baseline_text(const Baseline& b);
// Every *.json of `dir`, by op (the file's stem); an absent directory has none.
std::map<std::string, Baseline> load_baselines(const std::filesystem::path& dir);

// `parity baseline update`: the records of `results_doc` (a parity.results/1 document) replace those with the same
// key and device in baselines/<op>.json, others are kept; each file written gets an update entry. Records of cases that did
// not pass are left out (a failing run is no baseline) and named in `skipped`. A record without timings (a run
// without --perf) keeps the timing of the record it replaces, and says so (`kept_timings`, and the update entry):
// the gate would otherwise lose the path's timing baseline without a word.
struct UpdateSummary {
  std::vector<std::filesystem::path> files;
  std::vector<std::string> keys;          // records written
  std::vector<std::string> kept_timings;  // "<key> (timed at <commit>)": untimed records that kept the old timing
  std::vector<std::string> skipped;  // case ids not taken, with the reason
};
UpdateSummary update_baselines(const std::filesystem::path& dir, const nlohmann::json& results_doc,
                               const std::string& who, const std::string& why);

// `parity baseline override`: records (or replaces) the override of one case's tensor on one arch. The caller
// checks the case, tensor and policy against the case files.
std::filesystem::path add_override(const std::filesystem::path& dir, const std::string& arch,
                                   const std::string& case_id, const std::string& tensor, const PolicyOverride& o,
                                   const std::string& who);

// "sm_90" for the CUDA device in use (compute capability, as nvidia-smi reports it for the first visible device),
// "cpu" without one or when `force_cpu`.
std::string current_arch(bool force_cpu);
// An arch name overrides may use: "cpu" or "sm_<digits>" (InputError naming `where` otherwise).
void check_arch_name(const std::string& arch, const std::string& where);
// `git config user.name`, empty when unset.
std::string git_user_name();

}  // namespace parity
