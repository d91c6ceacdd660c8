// parity run: run cases, print the table, write JSON and HTML; with --perf, time each case's paths after its
// parity checks.
#include "harness/cli/command.hpp"

#include <parity/error.hpp>
#include <parity/report.hpp>
#include <parity/results.hpp>
#include <parity/runner.hpp>
#include <parity/timing.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <iostream>
#include <map>
#include <set>
#include <unistd.h>

namespace parity::cli {

namespace {

// Timing a case whose checks ran; a harness failure while timing makes the case an error, never a silent gap.
void time_case(CaseResult& r, const Case& c, const Registry& reg, const RunOptions& opts, const TimingOptions& t) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    r.perf = run_perf(c, reg, opts, t);
  } catch (const std::exception& e) {
    r.status = Status::error;
    r.error += (r.error.empty() ? "perf: " : "; perf: ") + error_message(e);
  }
  std::cerr << fmt::format("[perf] {} ({:.1f} s)\n", c.id,
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

Command add_run(CLI::App& app) {
  struct State {
    Dirs dirs;
    std::string suite = "ci", json_path, html_path, variant;
    std::vector<std::string> ids;
    bool cpu_only = false, no_color = false, perf = false;
    TimingOptions timing;
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
  sub->add_flag("--perf", st->perf, "after the checks, time eager and every variant (fwd and bwd) on this device");
  sub->add_option("--perf-mode", st->timing.mode, "GPU timing: cold (L2 flushed per sample), hot, graph")
      ->check(CLI::IsMember({"cold", "hot", "graph"}))
      ->capture_default_str();
  sub->add_option("--time-cap", st->timing.time_cap_s, "seconds of sampling per timed path, at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  st->dirs.add_to(sub);
  return {sub, [st] {
            const Registry& reg = Registry::global();
            const auto cases = select_cases(load_cases(st->dirs.case_dirs(), reg), st->suite, st->ids);
            RunOptions opts;
            opts.golden_dirs = st->dirs.golden_dirs();
            opts.force_cpu = st->cpu_only;
            if (!st->variant.empty()) {
              // A variant no selected case runs (a typo, or a case without it) would skip everything and exit 0.
              std::set<std::string> listed;
              for (const auto& c : cases) listed.insert(c.variants.begin(), c.variants.end());
              if (!listed.count(st->variant))
                throw InputError(fmt::format("--variant {}: no selected case runs it ({} selected; they run {})",
                                             st->variant, cases.size(), fmt::join(listed, ", ")));
              opts.only_variant = st->variant;
            }
            std::vector<CaseResult> results;
            for (const auto& c : cases) {
              results.push_back(run_case(c, reg, opts));
              CaseResult& r = results.back();
              std::cerr << fmt::format("[{}] {} ({:.1f} s)\n", status_name(r.status), c.id, r.seconds);
              if (st->perf && (r.status == Status::pass || r.status == Status::fail))
                time_case(r, c, reg, opts, st->timing);
            }
            print_table(std::cout, results, !st->no_color && isatty(STDOUT_FILENO));
            const auto doc = results_document(results);
            if (!st->json_path.empty()) write_json(doc, st->json_path);
            if (!st->html_path.empty()) write_html_report(doc, st->html_path);
            int counts[4] = {0, 0, 0, 0};
            for (const auto& r : results) counts[int(r.status)]++;
            std::cout << fmt::format("\nparity: {} passed, {} failed, {} skipped, {} errors\n", counts[0], counts[1],
                                     counts[2], counts[3]);
            // A case passes on its variants that ran: say which did not, so that a CPU machine's "passed" is not
            // read as covering CUDA.
            std::map<std::string, int> skipped;
            for (const auto& r : results)
              for (const auto& v : r.variants)
                if (v.status == Status::skip) ++skipped[v.skip_reason];
            for (const auto& [reason, n] : skipped)
              std::cout << fmt::format("parity: {} variant run{} skipped ({})\n", n, n == 1 ? "" : "s", reason);
            return exit_code(results);
          }};
}

}  // namespace parity::cli
