// Bisection: which stage of an op first diverges, and which commit broke a case.
#pragma once
#include <parity/case.hpp>
#include <parity/history.hpp>
#include <parity/runner.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace parity {

// One tensor of one stage of one variant, judged two ways under the case's policy for that tensor:
// propagated: the variant's full run against the full reference (errors of every earlier stage included);
// isolated:   the variant's output against the reference stage fed the variant's own inputs to that stage
//             (what this stage adds on its own). Fused kernels have no stage entry points to call with the
//             reference's inputs, so isolation runs the other way round: the reference stage takes the fast
//             path's stage inputs; either way the difference is the error the stage itself introduces.
struct StageCheck {
  std::string stage, tensor;
  CheckResult propagated, isolated;
};

struct StageBisection {
  std::string case_id, variant;
  std::vector<StageCheck> checks;
  std::optional<std::string> first_divergent;  // the first stage with an isolated failure
  // Inputs the variant wrote into ("'x' 3 of 64 elements"): the stages are judged on the inputs as they were given,
  // so such a variant's outputs are not blamed on a stage, and the bisection fails on this alone.
  std::vector<std::string> modified_inputs;
  bool diverged() const { return first_divergent || !modified_inputs.empty(); }
};

// Throws InputError for a case whose op has no stages or a variant that cannot run here.
StageBisection bisect_stages(const Case& c, const Registry& reg, const std::string& variant, const RunOptions& opts);
std::string format_stage_bisection(const StageBisection& b);

// git bisect between two revisions in a separate worktree, building and running a case at each step. Both ends are
// checked before the search (git bisect takes them on trust): a --good that fails or a --bad that passes would
// otherwise name a wrong commit.
struct CommitBisectOptions {
  std::filesystem::path repo;  // the repository to bisect (left as found)
  std::string good, bad;
  std::string build;           // shell command run in the worktree; non-zero -> commit skipped (125)
  // Shell command run in the worktree. Without `judge`: exit 0 good, 1 bad, anything else skipped. With `judge`
  // (perf bisection): it writes a results document to $PARITY_BISECT_RESULTS and exits 0; the good revision's
  // document is the baseline, and `judge --baseline BASELINE --candidate STEP` decides each step: 0 good, 1 bad,
  // anything else skipped (AMBIGUOUS verdicts, a run that failed or could not be timed).
  std::string run;
  std::string judge;
  int judge_attempts = 3;      // runs of a perf step before an undecided verdict skips it (at least 1)
};

struct CommitBisection {
  bool found = false;
  std::string first_bad;      // full hash
  std::string summary;        // the first bad commit's subject line, or why nothing was found
  std::string first_bad_log;  // what building, running and judging the first bad commit printed: its numbers
  std::string log;            // git bisect log and every step's outcome
};

CommitBisection bisect_commits(const CommitBisectOptions& o);

// One step of a perf bisection (`parity bisect verdict`): every timed path of `candidate` (a results document's
// records) against the same case, path and direction of `baseline`, the naive "eager" path aside: it times the
// machine, not the commit, and where its code is unchanged and it came out SLOWER or FASTER, the paths of its case and
// direction are NOT-COMPARABLE. `path`, when given, narrows to that path. exit_code: 1 when any path is SLOWER, else
// 125 (skip) when any is AMBIGUOUS or NOT-COMPARABLE or nothing could be compared, else 0. `text` has a line per key.
struct PerfStepVerdict {
  int exit_code = 125;
  std::string text;
};
PerfStepVerdict judge_perf_step(const std::vector<HistoryRecord>& baseline, const std::vector<HistoryRecord>& candidate,
                                const std::string& path = "", const VerdictOptions& o = {});

}  // namespace parity
