// parity gate: the CI gate (gate.hpp). Runs a suite, compares it with baselines/, exits 0, 1 or 2, and writes the
// JUnit, Markdown and JSON reports CI asked for, on every exit: a harness error is reported, not just printed.
#include "harness/cli/command.hpp"

#include <parity/error.hpp>
#include <parity/files.hpp>
#include <parity/gate.hpp>
#include <parity/results.hpp>

#include <fmt/format.h>

#include <iostream>
#include <unistd.h>

namespace parity::cli {

namespace {

struct GateArgs {
  Dirs dirs;
  std::string suite = "ci", ambiguous = "warn", junit, markdown, json;
  std::string baseline_dir = std::string(PARITY_SOURCE_DIR) + "/baselines";
  std::vector<std::string> ids;
  bool perf = false, cpu_only = false, no_color = false;
};

void write_reports(const GateReport& g, const GateArgs& a) {
  if (!a.junit.empty()) write_text_file(a.junit, junit_xml(g));
  if (!a.markdown.empty()) write_text_file(a.markdown, markdown_summary(g));
  if (!a.json.empty()) write_json(gate_document(g), a.json);
}

std::string selection(const GateArgs& a) {
  if (a.ids.empty()) return a.suite;
  std::string s = "cases";
  for (const auto& id : a.ids) s += " " + id;
  return s;
}

GateReport run(const GateArgs& a) {
  const Registry& reg = Registry::global();
  GateOptions o;
  o.run.golden_dirs = a.dirs.golden_dirs();
  o.run.force_cpu = a.cpu_only;
  o.perf = a.perf;
  o.ambiguous = parse_ambiguous_mode(a.ambiguous);
  o.baseline_dir = a.baseline_dir;
  o.progress = [](const CaseResult& r) {
    std::cerr << fmt::format("[{}] {} ({:.1f} s)\n", status_name(r.status), r.case_id, r.seconds);
  };
  return run_gate(select_cases(load_cases(a.dirs.case_dirs(), reg), a.suite, a.ids), reg, o, selection(a));
}

// The terminal gets the run's table, then what the gate added: errors, regressions and the verdict.
void print_verdict(const GateReport& g, const GateArgs& a) {
  print_table(std::cout, g.results, !a.no_color && isatty(STDOUT_FILENO));
  for (const auto& e : g.errors) std::cout << "\nERROR gate\n  " << e << "\n";
  for (const auto& c : g.comparisons) {
    for (const auto& n : c.regressions)
      std::cout << fmt::format("\nREGRESSION {} [{}] {}: {} {} {:.6g} -> {:.6g} (baseline {})\n", c.case_id, c.path,
                               c.direction, n.tensor, n.metric, n.baseline, n.candidate, c.numerics_commit);
    if (c.perf && c.perf->verdict != Verdict::same && c.perf->verdict != Verdict::faster)
      std::cout << fmt::format("\n{} {} [{}] {}: x{:.3f} (p={:.3g}) {}{}\n", verdict_name(c.perf->verdict), c.case_id,
                               c.path, c.direction, c.perf->ratio, c.perf->p_value, c.perf->reason,
                               c.perf->next.empty() ? "" : "; next: " + c.perf->next);
  }
  for (const auto& ov : g.overrides)
    std::cout << fmt::format("\noverride {} {} {}: policy '{}' instead of '{}' ({})\n", ov.arch, ov.case_id, ov.tensor,
                             ov.with.policy, ov.case_policy, ov.with.reason);
  const int code = gate_exit_code(g);
  std::cout << fmt::format("\ngate: {} (exit {}){}\n", code == 0 ? "PASS" : code == 1 ? "FAIL" : "ERROR", code,
                           g.arch.empty() ? "" : " on " + g.arch);
}

}  // namespace

Command add_gate(CLI::App& app) {
  auto a = std::make_shared<GateArgs>();
  CLI::App* sub = app.add_subcommand("gate", "CI gate: run a suite, compare with the committed baselines, exit 0/1/2");
  sub->add_option("--suite", a->suite, "suite to run (smoke, ci, full, perf)")->capture_default_str();
  sub->add_option("--case", a->ids, "run these case ids instead of a suite (repeatable)");
  sub->add_flag("--perf", a->perf, "also time every path and compare with the baselines' timings");
  sub->add_option("--baseline-dir", a->baseline_dir, "committed baselines (<op>.json)")->capture_default_str();
  sub->add_option("--junit", a->junit, "write JUnit XML here");
  sub->add_option("--markdown", a->markdown, "write a Markdown summary here (a PR comment, $GITHUB_STEP_SUMMARY)");
  sub->add_option("--json", a->json, "write the results document with a 'gate' section here");
  sub->add_option("--ambiguous", a->ambiguous, "what an AMBIGUOUS perf verdict does")
      ->check(CLI::IsMember({"ignore", "warn", "fail"}))
      ->capture_default_str();
  sub->add_flag("--cpu", a->cpu_only, "treat CUDA as unavailable (CUDA variants skip)");
  sub->add_flag("--no-color", a->no_color, "plain table");
  a->dirs.add_to(sub);
  return {sub, [a] {
            GateReport g;
            try {
              g = run(*a);
            } catch (const InputError& e) {
              g.errors.push_back(e.what());
              g.suite = selection(*a);
              g.results_doc = results_document({});
              std::cerr << "parity: error: " << e.what() << "\n";
            }
            print_verdict(g, *a);
            write_reports(g, *a);
            return gate_exit_code(g);
          }};
}

}  // namespace parity::cli
