// Bisection: which stage of an op first diverges, and which commit broke a case.
#pragma once
#include <parity/case.hpp>
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
};

// Throws InputError for a case whose op has no stages or a variant that cannot run here.
StageBisection bisect_stages(const Case& c, const Registry& reg, const std::string& variant, const RunOptions& opts);
std::string format_stage_bisection(const StageBisection& b);

// git bisect between two revisions in a separate worktree, building and running a case at each step.
struct CommitBisectOptions {
  std::filesystem::path repo;  // the repository to bisect (left as found)
  std::string good, bad;
  std::string build;           // shell command run in the worktree; non-zero -> commit skipped (125)
  std::string run;             // shell command run in the worktree: 0 good, 1 bad, anything else skipped
};

struct CommitBisection {
  bool found = false;
  std::string first_bad;  // full hash
  std::string summary;    // the first bad commit's subject line and git bisect's report
  std::string log;        // git bisect log
};

CommitBisection bisect_commits(const CommitBisectOptions& o);

}  // namespace parity
