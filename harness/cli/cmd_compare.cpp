// parity compare: bring-your-own outputs (candidate.hpp). Exports a case's inputs for a kernel outside Parity and
// checks what it wrote, with the table, messages and exit codes of `parity run`.
#include "harness/cli/command.hpp"

#include <parity/candidate.hpp>
#include <parity/error.hpp>
#include <parity/results.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <unistd.h>

namespace parity::cli {

namespace {

struct CompareArgs {
  Dirs dirs;
  std::string id, candidate, export_path, json_path;
  bool cpu_only = false, no_color = false;
};

void export_inputs(const Case& c, const RunOptions& opts, const std::string& path) {
  const GoldenFile g = exported_inputs(c, Registry::global(), opts);
  write_golden(g, path);
  std::vector<std::string> written;
  for (const auto& [group, tensors] : g.groups)
    for (const auto& [name, t] : tensors) written.push_back(fmt::format("/{}/{} {}", group, name, describe(t)));
  std::cout << fmt::format("wrote {} ({}): {}\n", path, c.id, fmt::join(written, ", "));
  std::cout << fmt::format("the candidate must hold: {}\n", g.attrs.at("outputs_json"));
}

int check(const Case& c, const RunOptions& opts, const CompareArgs& a) {
  const CandidateResult cr = compare_candidate(c, Registry::global(), opts, a.candidate);
  if (!cr.backward_checked && c.backward)
    std::cout << fmt::format("note: {} has no /grads: only the forward is checked\n", a.candidate);
  const std::vector<CaseResult> results{cr.result};
  print_table(std::cout, results, !a.no_color && isatty(STDOUT_FILENO));
  if (!a.json_path.empty()) write_json(results_document(results), a.json_path);
  std::cout << fmt::format("\nparity compare: {} {}\n", status_name(cr.result.status), c.id);
  return exit_code(results);
}

}  // namespace

Command add_compare(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* sub = app.add_subcommand("compare", "check outputs computed outside Parity against a case's reference");
  sub->add_option("--case", a->id, "case id")->required();
  sub->add_option("--candidate", a->candidate, "HDF5 file with /outputs/<name> (and optionally /grads/<input>)");
  sub->add_option("--export-inputs", a->export_path, "write the case's /inputs and /grad_outputs to this HDF5 file");
  sub->add_option("--json", a->json_path, "write the results document here");
  sub->add_flag("--cpu", a->cpu_only, "treat CUDA as unavailable (seeded inputs are then made on the CPU)");
  sub->add_flag("--no-color", a->no_color, "plain table");
  a->dirs.add_to(sub);
  return {sub, [a] {
            if (a->candidate.empty() && a->export_path.empty())
              throw InputError("compare: give --export-inputs FILE, --candidate FILE, or both");
            const auto cases = select_cases(load_cases(a->dirs.case_dirs(), Registry::global()), "all", {a->id});
            RunOptions opts;
            opts.golden_dirs = a->dirs.golden_dirs();
            opts.force_cpu = a->cpu_only;
            if (!a->export_path.empty()) export_inputs(cases.front(), opts, a->export_path);
            return a->candidate.empty() ? 0 : check(cases.front(), opts, *a);
          }};
}

}  // namespace parity::cli
