// parity run: run cases, print the table, write JSON and HTML.
#include "harness/cli/command.hpp"

#include <parity/report.hpp>
#include <parity/results.hpp>
#include <parity/runner.hpp>

#include <fmt/format.h>

#include <iostream>
#include <unistd.h>

namespace parity::cli {

Command add_run(CLI::App& app) {
  struct State {
    Dirs dirs;
    std::string suite = "ci", json_path, html_path, variant;
    std::vector<std::string> ids;
    bool cpu_only = false, no_color = false;
  };
  auto st = std::make_shared<State>();
  CLI::App* sub = app.add_subcommand("run", "run cases and compare fast paths with the reference and the golden");
  sub->add_option("--suite", st->suite, "suite to run (all, smoke, ci, full, perf)")->capture_default_str();
  sub->add_option("--case", st->ids, "run these case ids instead of a suite (repeatable)");
  sub->add_option("--variant", st->variant, "run only this variant, e.g. cuda:v1");
  sub->add_flag("--cpu", st->cpu_only, "treat CUDA as unavailable (CUDA variants skip)");
  sub->add_option("--json", st->json_path, "write the results document here");
  sub->add_option("--html", st->html_path, "write the HTML report here");
  sub->add_flag("--no-color", st->no_color, "plain table");
  st->dirs.add_to(sub);
  return {sub, [st] {
            const Registry& reg = Registry::global();
            const auto cases = select_cases(load_cases(st->dirs.case_dirs(), reg), st->suite, st->ids);
            RunOptions opts;
            opts.golden_dirs = st->dirs.golden_dirs();
            opts.force_cpu = st->cpu_only;
            if (!st->variant.empty()) opts.only_variant = st->variant;
            std::vector<CaseResult> results;
            for (const auto& c : cases) {
              results.push_back(run_case(c, reg, opts));
              std::cerr << fmt::format("[{}] {} ({:.1f} s)\n", status_name(results.back().status), c.id,
                                       results.back().seconds);
            }
            print_table(std::cout, results, !st->no_color && isatty(STDOUT_FILENO));
            const auto doc = results_document(results);
            if (!st->json_path.empty()) write_json(doc, st->json_path);
            if (!st->html_path.empty()) write_html_report(doc, st->html_path);
            int counts[4] = {0, 0, 0, 0};
            for (const auto& r : results) counts[int(r.status)]++;
            std::cout << fmt::format("\nparity: {} passed, {} failed, {} skipped, {} errors\n", counts[0], counts[1],
                                     counts[2], counts[3]);
            return exit_code(results);
          }};
}

}  // namespace parity::cli
