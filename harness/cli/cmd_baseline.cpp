// parity baseline update | override: the two ways the gate's committed baselines (baseline.hpp) change, each
// leaving an update entry that says who, what and why.
#include "harness/cli/command.hpp"

#include <parity/baseline.hpp>
#include <parity/error.hpp>
#include <parity/results.hpp>

#include <fmt/format.h>

#include <fstream>
#include <iostream>

namespace parity::cli {

namespace fs = std::filesystem;

namespace {

struct BaselineArgs {
  Dirs dirs;
  std::string baseline_dir = std::string(PARITY_SOURCE_DIR) + "/baselines";
  std::string who, from, why;                                      // update
  std::string arch, case_id, tensor, policy, reason, worst, issue;  // override
};

std::string author(const BaselineArgs& a) {
  if (!a.who.empty()) return a.who;
  const std::string name = git_user_name();
  if (name.empty()) throw InputError("--who: git has no user.name here; say who makes this change");
  return name;
}

int update(const BaselineArgs& a) {
  const std::string who = author(a);
  const UpdateSummary s = with_results(
      a.from, [&](const nlohmann::json& doc) { return update_baselines(a.baseline_dir, doc, who, a.why); });
  for (const auto& id : s.skipped) std::cout << fmt::format("left out {}: only passing cases make a baseline\n", id);
  if (s.keys.empty()) throw InputError(fmt::format("{}: no record to take (no passing case with numbers)", a.from));
  for (const auto& key : s.keys) std::cout << "recorded " << key << "\n";
  for (const auto& key : s.kept_timings)
    std::cout << "kept the timing of " << key << ": this document has none (a run without --perf)\n";
  for (const auto& f : s.files) std::cout << "wrote " << f.string() << "\n";
  return 0;
}

// The override must name a case, a tensor it checks and a policy that parses: a typo would otherwise be an override
// that never applies.
int add(const BaselineArgs& a) {
  const auto cases = select_cases(load_cases(a.dirs.case_dirs(), Registry::global()), "all", {a.case_id});
  const Case& c = cases.front();
  if (!c.policy.count(a.tensor)) {
    std::string names;
    for (const auto& [name, _] : c.policy) names += (names.empty() ? "" : ", ") + name;
    throw InputError(fmt::format("--tensor: case '{}' has no policy for '{}' (it has: {})", c.id, a.tensor, names));
  }
  parse_policy(a.policy, "--policy");
  const fs::path file =
      add_override(a.baseline_dir, a.arch, c.id, a.tensor, {a.policy, a.reason, a.worst, a.issue}, author(a));
  std::cout << fmt::format("override {} {}|{}: policy '{}' instead of '{}', recorded in {}\n", a.arch, c.id, a.tensor,
                           a.policy, c.policy.at(a.tensor).text, file.string());
  return 0;
}

}  // namespace

Command add_baseline(CLI::App& app) {
  auto a = std::make_shared<BaselineArgs>();
  CLI::App* baseline = app.add_subcommand("baseline", "the CI gate's committed baselines (baselines/<op>.json)");
  baseline->require_subcommand(1);
  baseline->add_option("--baseline-dir", a->baseline_dir, "baselines directory")->capture_default_str();

  CLI::App* upd = baseline->add_subcommand("update", "take a run's records as the new baseline for their keys");
  upd->add_option("--from", a->from, "results document (parity run/gate --json)")->required();
  upd->add_option("--why", a->why, "why the baseline changes (kept in the file's updates)")->required();
  upd->add_option("--who", a->who, "who changes it (default: git config user.name)");

  CLI::App* ovr = baseline->add_subcommand("override", "use another policy for one case's tensor on one arch");
  ovr->add_option("--arch", a->arch, "cpu or sm_<compute capability>, e.g. sm_90")->required();
  ovr->add_option("--case", a->case_id, "case id")->required();
  ovr->add_option("--tensor", a->tensor, "output or grad/<input>")->required();
  ovr->add_option("--policy", a->policy, "policy to apply instead of the case's")->required();
  ovr->add_option("--reason", a->reason, "why this arch needs it")->required();
  ovr->add_option("--worst", a->worst, "worst value observed on this arch")->required();
  ovr->add_option("--issue", a->issue, "tracking issue");
  ovr->add_option("--who", a->who, "who adds it (default: git config user.name)");
  a->dirs.add_to(ovr);
  return {baseline, [a, upd] { return *upd ? update(*a) : add(*a); }};
}

}  // namespace parity::cli
