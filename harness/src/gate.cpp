// The CI gate: run, compare with baselines, decide, and report the decision three ways (JUnit, Markdown, JSON)
// from one model of the outcome, so the three never disagree.
#include <parity/error.hpp>
#include <parity/gate.hpp>
#include <parity/perf.hpp>
#include <parity/results.hpp>
#include <parity/timing.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace parity {

namespace {

std::string op_of(const std::string& case_id) { return case_id.substr(0, case_id.find('/')); }

// --- the outcome of every path ---------------------------------------------------------------------------------

// One testcase of the reports: a case and a path (a variant, "ref:hf", or a path only perf timed, like "eager").
// A case that errored before any variant ran is one row with an empty path.
struct PathRow {
  const CaseResult* result = nullptr;
  std::string path;
  Status status = Status::pass;  // of the parity run
  std::string reason;            // skip reason or error message
  std::vector<const Check*> failed_checks;
  std::vector<const Guard*> failed_guards;
  std::vector<const BaselineComparison*> comparisons;
  bool regressed = false;
  std::string name() const { return path.empty() ? result->case_id : fmt::format("{} [{}]", result->case_id, path); }
  // What the gate makes of it: a regression fails a path that passed its parity checks.
  Status outcome() const { return status == Status::pass && regressed ? Status::fail : status; }
};

bool has_case_level_error(const CaseResult& r) {
  return r.status == Status::error &&
         std::none_of(r.variants.begin(), r.variants.end(), [](const VariantRun& v) { return v.status == Status::error; });
}

std::vector<std::string> paths_of(const CaseResult& r, const std::vector<BaselineComparison>& comparisons) {
  std::vector<std::string> paths;
  auto add = [&](const std::string& p) {
    if (std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(p);
  };
  for (const auto& c : r.checks)
    if (c.variant == "ref:hf") add(c.variant);
  for (const auto& v : r.variants) add(v.variant);
  for (const auto& c : comparisons)
    if (c.case_id == r.case_id) add(c.path);
  return paths;
}

PathRow make_row(const GateReport& g, const CaseResult& r, const std::string& path) {
  PathRow row;
  row.result = &r;
  row.path = path;
  for (const auto& v : r.variants)
    if (v.variant == path) {
      row.status = v.status;
      row.reason = v.skip_reason;
    }
  for (const auto& c : r.checks)
    if (c.variant == path && !c.result.pass) row.failed_checks.push_back(&c);
  for (const auto& gd : r.guards)
    if (gd.variant == path && !gd.pass) row.failed_guards.push_back(&gd);
  if (row.status == Status::pass && (!row.failed_checks.empty() || !row.failed_guards.empty())) row.status = Status::fail;
  for (const auto& c : g.comparisons)
    if (c.case_id == r.case_id && c.path == path) {
      row.comparisons.push_back(&c);
      row.regressed |= is_regression(c, g.ambiguous);
    }
  return row;
}

std::vector<PathRow> path_rows(const GateReport& g) {
  std::vector<PathRow> rows;
  for (const auto& r : g.results) {
    if (has_case_level_error(r)) {
      PathRow& row = rows.emplace_back();
      row.result = &r;
      row.status = Status::error;
      row.reason = r.error;
      continue;
    }
    for (const auto& p : paths_of(r, g.comparisons)) rows.push_back(make_row(g, r, p));
  }
  return rows;
}

struct Counts {
  int paths = 0, passed = 0, failed = 0, skipped = 0, errors = 0;
  int numeric_regressions = 0, slower = 0, ambiguous = 0, faster = 0, not_comparable = 0, no_baseline = 0;
  int numerics_not_comparable = 0;
};

Counts count_paths(const GateReport& g, const std::vector<PathRow>& rows) {
  Counts n;
  for (const auto& row : rows) {
    ++n.paths;
    switch (row.outcome()) {
      case Status::pass: ++n.passed; break;
      case Status::fail: ++n.failed; break;
      case Status::skip: ++n.skipped; break;
      case Status::error: ++n.errors; break;
    }
  }
  for (const auto& c : g.comparisons) {
    n.numeric_regressions += int(c.regressions.size());
    n.no_baseline += !c.has_baseline;
    n.numerics_not_comparable += !c.numerics_not_comparable.empty();
    if (!c.perf) continue;
    n.slower += c.perf->verdict == Verdict::slower;
    n.ambiguous += c.perf->verdict == Verdict::ambiguous;
    n.faster += c.perf->verdict == Verdict::faster;
    n.not_comparable += c.perf->verdict == Verdict::not_comparable;
  }
  return n;
}

std::string verdict_word(int exit_code) { return exit_code == 0 ? "PASS" : exit_code == 1 ? "FAIL" : "ERROR"; }

// --- shared wording ----------------------------------------------------------------------------------------------

std::string check_line(const Check& c) { return fmt::format("{} vs {}: {}", c.tensor, c.against, c.result.summary); }

std::string guard_line(const Guard& g) { return fmt::format("guard '{}': {}", g.name, g.message); }

std::string regression_line(const BaselineComparison& c, const NumericRegression& n) {
  return fmt::format("numeric regression {} {} {}: {:.6g} -> {:.6g} (baseline {})", c.direction, n.tensor, n.metric,
                     n.baseline, n.candidate, c.numerics_commit.empty() ? "?" : c.numerics_commit);
}

std::string perf_line(const BaselineComparison& c) {
  const PerfVerdict& p = *c.perf;
  std::string s = fmt::format("{} {}: x{:.3f} of baseline median (p={:.3g}); {}", verdict_name(p.verdict), c.direction,
                              p.ratio, p.p_value, p.reason);
  if (!p.next.empty()) s += "; next: " + p.next;
  return s;
}

bool perf_is(const BaselineComparison& c, Verdict v) { return c.perf && c.perf->verdict == v; }

// The naive LibTorch composition is the yardstick, not Parity's code: its timing moving says the machine or LibTorch
// moved (harness-practice.md s9.6), which the reports show next to the variants' verdicts without failing the gate.
constexpr const char* kEagerPath = "eager";

bool perf_regressed(const BaselineComparison& c, AmbiguousMode mode) {
  return c.path != kEagerPath &&
         (perf_is(c, Verdict::slower) || (perf_is(c, Verdict::ambiguous) && mode == AmbiguousMode::fail));
}

// Baseline reasons a path fails, one line each: numeric regressions, SLOWER, AMBIGUOUS under --ambiguous fail.
std::vector<std::string> regression_lines(const PathRow& row, AmbiguousMode mode) {
  std::vector<std::string> lines;
  for (const BaselineComparison* c : row.comparisons) {
    for (const auto& n : c->regressions) lines.push_back(regression_line(*c, n));
    if (perf_regressed(*c, mode)) lines.push_back(perf_line(*c));
  }
  return lines;
}

// Every reason a path fails, one line each: the failure message of JUnit and the reasons of the JSON.
std::vector<std::string> failure_lines(const PathRow& row, AmbiguousMode mode) {
  std::vector<std::string> lines;
  for (const Check* c : row.failed_checks) lines.push_back(check_line(*c));
  for (const Guard* g : row.failed_guards) lines.push_back(guard_line(*g));
  for (auto& l : regression_lines(row, mode)) lines.push_back(std::move(l));
  return lines;
}

// The body of a JUnit failure: the same reasons, each failing check with its mismatch report.
std::string failure_body(const PathRow& row, AmbiguousMode mode) {
  std::string body;
  for (const Check* c : row.failed_checks)
    body += fmt::format("{} vs {}  policy {}\n  {}\n{}\n", c->tensor, c->against, c->policy, c->result.summary,
                        c->result.detail);
  for (const Guard* g : row.failed_guards) body += guard_line(*g) + "\n";
  for (const auto& l : regression_lines(row, mode)) body += l + "\n";
  return body;
}

// Lines the reports show but that decide nothing: warnings, improvements, applied overrides.
std::vector<std::string> note_lines(const GateReport& g, const PathRow& row) {
  std::vector<std::string> lines;
  for (const BaselineComparison* c : row.comparisons) {
    if (!c->has_baseline) lines.push_back(fmt::format("{}: no baseline yet", c->direction));
    if (!c->numerics_not_comparable.empty())
      lines.push_back(fmt::format("{}: numerics not compared: {}", c->direction, c->numerics_not_comparable));
    if (!c->perf || perf_regressed(*c, g.ambiguous)) continue;
    if (!perf_is(*c, Verdict::ambiguous))
      lines.push_back(perf_line(*c));
    else if (g.ambiguous != AmbiguousMode::ignore)
      lines.push_back("warning: " + perf_line(*c));
  }
  for (const auto& o : g.overrides)
    if (o.case_id == row.result->case_id && !row.path.empty() && row.path != "ref:hf")
      lines.push_back(fmt::format("override {}: {} policy '{}' instead of '{}' ({}; worst observed {}{})", o.arch,
                                  o.tensor, o.with.policy, o.case_policy, o.with.reason, o.with.worst_observed,
                                  o.with.issue.empty() ? "" : "; " + o.with.issue));
  return lines;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : sep) + p;
  return s;
}

// --- JUnit -------------------------------------------------------------------------------------------------------

std::string attr(const std::string& s) { return xml_escape(s, true); }

std::string junit_testcase(const GateReport& g, const PathRow& row) {
  std::string x = fmt::format(R"(    <testcase classname="{}" name="{}">)", attr(row.result->op), attr(row.name())) + "\n";
  switch (row.outcome()) {
    case Status::error:
      x += fmt::format(R"(      <error message="{}" type="harness">{}</error>)", attr(row.reason),
                       xml_escape(row.reason)) +
           "\n";
      break;
    case Status::fail: {
      const bool parity = !row.failed_checks.empty() || !row.failed_guards.empty();
      const std::string type = parity && row.regressed ? "parity, regression" : parity ? "parity" : "regression";
      x += fmt::format(R"(      <failure message="{}" type="{}">{}</failure>)",
                       attr(join(failure_lines(row, g.ambiguous), "; ")), type,
                       xml_escape(failure_body(row, g.ambiguous))) +
           "\n";
      break;
    }
    case Status::skip:
      x += fmt::format(R"(      <skipped message="{}"/>)", attr(row.reason)) + "\n";
      break;
    case Status::pass:
      break;
  }
  if (const auto notes = note_lines(g, row); !notes.empty())
    x += fmt::format("      <system-out>{}</system-out>\n", xml_escape(join(notes, "\n")));
  return x + "    </testcase>\n";
}

// gate_errors: the gate's own errors, one testcase of their own (counted in the document's totals too).
std::string junit_suite_attrs(const std::string& name, const std::vector<const PathRow*>& rows, double seconds,
                              int gate_errors = 0) {
  int failures = 0, errors = gate_errors, skipped = 0;
  for (const PathRow* r : rows) {
    failures += r->outcome() == Status::fail;
    errors += r->outcome() == Status::error;
    skipped += r->outcome() == Status::skip;
  }
  return fmt::format(R"(name="{}" tests="{}" failures="{}" errors="{}" skipped="{}" time="{:.3f}")", attr(name),
                     rows.size() + gate_errors, failures, errors, skipped, seconds);
}

// --- Markdown ----------------------------------------------------------------------------------------------------

// Table cells: no line breaks, no pipes, no raw HTML.
std::string cell(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '|': o += "\\|"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '\n': o += "<br>"; break;
      case '\r': break;
      default: o += c;
    }
  }
  return o;
}

std::string code(const std::string& s) {
  std::string o = s;
  std::replace(o.begin(), o.end(), '`', '\'');
  return fmt::format("`{}`", cell(o));
}

// GitHub refuses comments over 65536 characters: mismatch reports stop well before.
constexpr size_t kDetailChars = 4000, kDetailsBudget = 40000;

std::string fenced(std::string text) {
  if (text.size() > kDetailChars) text = text.substr(0, kDetailChars) + "\n... (cut; the JUnit and JSON reports hold it all)";
  for (size_t at = 0; (at = text.find("```", at)) != std::string::npos;) text.replace(at, 3, "'''");
  return "```text\n" + text + "\n```\n";
}

struct TableRow {
  std::string what, path, check, numbers;
};

std::vector<TableRow> table_rows(const GateReport& g, const PathRow& row) {
  std::vector<TableRow> out;
  const std::string path = row.path.empty() ? "-" : row.path;
  if (row.outcome() == Status::error) out.push_back({"💥 ERROR", path, "", row.reason});
  for (const Check* c : row.failed_checks)
    out.push_back({"❌ FAIL", path, fmt::format("{} vs {} · {}", c->tensor, c->against, c->policy), c->result.summary});
  for (const Guard* gd : row.failed_guards) out.push_back({"❌ FAIL", path, "guard: " + gd->name, gd->message});
  for (const BaselineComparison* c : row.comparisons) {
    for (const auto& n : c->regressions)
      out.push_back({"📉 REGRESSION", path, fmt::format("{} {} {}", c->direction, n.tensor, n.metric),
                     fmt::format("{:.6g} → {:.6g} (baseline {})", n.baseline, n.candidate, c->numerics_commit)});
    if (!c->perf) continue;
    const PerfVerdict& p = *c->perf;
    const std::string numbers = fmt::format("×{:.3f}, p={:.3g}: {}", p.ratio, p.p_value, p.reason);
    const std::string gated = perf_regressed(*c, g.ambiguous) ? "" : " (not gated)";
    if (p.verdict == Verdict::slower) out.push_back({"🐢 SLOWER" + gated, path, c->direction + " time", numbers});
    if (p.verdict == Verdict::ambiguous && g.ambiguous != AmbiguousMode::ignore)
      out.push_back({"❓ AMBIGUOUS" + gated, path, c->direction + " time",
                     p.next.empty() ? numbers : numbers + "; next: " + p.next});
  }
  return out;
}

std::string markdown_overrides(const GateReport& g) {
  if (g.overrides.empty()) return "";
  std::string md = "\n### Per-arch overrides applied\n\n| arch | case | tensor | policy (case → override) | reason | "
                   "worst observed | issue |\n|---|---|---|---|---|---|---|\n";
  for (const auto& o : g.overrides)
    md += fmt::format("| {} | {} | {} | {} → {} | {} | {} | {} |\n", code(o.arch), code(o.case_id), code(o.tensor),
                      code(o.case_policy), code(o.with.policy), cell(o.with.reason), cell(o.with.worst_observed),
                      cell(o.with.issue));
  return md;
}

std::string markdown_details(const std::vector<PathRow>& rows) {
  std::string md;
  size_t omitted = 0;
  for (const auto& row : rows)
    for (const Check* c : row.failed_checks) {
      if (md.size() > kDetailsBudget) {
        ++omitted;
        continue;
      }
      md += fmt::format("\n<details><summary>{} · {} vs {} · {}</summary>\n\n{}\n</details>\n", cell(row.name()),
                        cell(c->tensor), cell(c->against), cell(c->result.summary),
                        fenced(fmt::format("policy {}\n{}\n{}", c->policy, c->result.summary, c->result.detail)));
    }
  if (omitted) md += fmt::format("\n{} more mismatch reports are in the JUnit and JSON reports.\n", omitted);
  return md;
}

nlohmann::json to_json(const BaselineComparison& c, AmbiguousMode mode) {
  nlohmann::json j{{"case", c.case_id}, {"path", c.path}, {"direction", c.direction}, {"regression", is_regression(c, mode)}};
  j["baseline"] = c.has_baseline ? nlohmann::json{{"commit", c.baseline_commit}, {"date", c.baseline_date}}
                                 : nlohmann::json(nullptr);
  j["perf"] = c.perf ? nlohmann::json{{"verdict", verdict_name(c.perf->verdict)}, {"ratio", c.perf->ratio},
                                      {"p_value", c.perf->p_value}, {"reason", c.perf->reason}, {"next", c.perf->next}}
                     : nlohmann::json(nullptr);
  j["numerics_not_comparable"] = c.numerics_not_comparable;
  j["numeric_regressions"] = nlohmann::json::array();
  for (const auto& n : c.regressions)
    j["numeric_regressions"].push_back(
        {{"tensor", n.tensor}, {"metric", n.metric}, {"baseline", n.baseline}, {"candidate", n.candidate}});
  return j;
}

// r's baseline: the record of its key taken on its device, else one taken on another (which the comparison then
// reports as not comparable), else none.
const HistoryRecord* baseline_record(const std::map<std::string, Baseline>& baselines, const HistoryRecord& r) {
  const auto b = baselines.find(op_of(r.case_id));
  if (b == baselines.end()) return nullptr;
  const auto& records = b->second.records;
  if (const auto it = records.find(baseline_key(r)); it != records.end()) return &it->second;
  const std::string key = r.key();
  const auto it = records.lower_bound(key);
  return it != records.end() && it->second.key() == key ? &it->second : nullptr;
}

// r's numeric baseline: the record of its key from the same platform and build type, wherever it was timed (a CPU
// run with --perf is stamped with the CPU model, one without with its platform).
const HistoryRecord* numeric_baseline_record(const std::map<std::string, Baseline>& baselines, const HistoryRecord& r) {
  const auto b = baselines.find(op_of(r.case_id));
  if (b == baselines.end()) return nullptr;
  const std::string key = r.key() + "|";
  for (auto it = b->second.records.lower_bound(key); it != b->second.records.end() && it->first.starts_with(key); ++it)
    if (same_numerics_setup(it->second, r)) return &it->second;
  return nullptr;
}

// A path that could not be timed leaves the gate without the evidence it was asked for: a harness error.
void time_case(GateReport& g, CaseResult& r, const Case& c, const Registry& reg, const RunOptions& opts) {
  try {
    r.perf = run_perf(c, reg, opts, TimingOptions{});
  } catch (const std::exception& e) {
    g.errors.push_back(fmt::format("{}: perf: {}", c.id, error_message(e)));
    return;
  }
  for (const auto& e : r.perf->entries)
    if (!e.error.empty()) g.errors.push_back(fmt::format("{} [{}] {}: perf: {}", c.id, e.path, e.direction, e.error));
}

}  // namespace

AmbiguousMode parse_ambiguous_mode(const std::string& s) {
  if (s == "ignore") return AmbiguousMode::ignore;
  if (s == "warn") return AmbiguousMode::warn;
  if (s == "fail") return AmbiguousMode::fail;
  throw InputError(fmt::format("--ambiguous: '{}' is not ignore, warn or fail", s));
}

std::string ambiguous_mode_name(AmbiguousMode m) {
  switch (m) {
    case AmbiguousMode::ignore: return "ignore";
    case AmbiguousMode::warn: return "warn";
    case AmbiguousMode::fail: return "fail";
  }
  return "?";
}

std::vector<AppliedOverride> apply_overrides(std::vector<Case>& cases, const std::map<std::string, Baseline>& baselines,
                                             const std::string& arch) {
  std::vector<AppliedOverride> applied;
  for (const auto& [op, b] : baselines) {
    const auto entries = b.overrides.find(arch);
    if (entries == b.overrides.end()) continue;
    for (const auto& [key, o] : entries->second) {
      const std::string case_id = key.substr(0, key.find('|')), tensor = key.substr(key.find('|') + 1);
      auto c = std::find_if(cases.begin(), cases.end(), [&](const Case& x) { return x.id == case_id; });
      if (c == cases.end()) continue;  // a case this run does not select
      const std::string where = fmt::format("{}: overrides.{}.{}", b.path.string(), arch, key);
      const auto policy = c->policy.find(tensor);
      if (policy == c->policy.end()) {
        std::vector<std::string> names;
        for (const auto& [name, _] : c->policy) names.push_back(name);
        throw InputError(fmt::format("{}: case '{}' has no policy for '{}' (it has: {})", where, case_id, tensor,
                                     join(names, ", ")));
      }
      applied.push_back({arch, case_id, tensor, policy->second.text, o, b.path});
      policy->second = parse_policy(o.policy, where + ".policy");
    }
  }
  return applied;
}

std::vector<BaselineComparison> compare_with_baselines(const nlohmann::json& results_doc,
                                                       const std::map<std::string, Baseline>& baselines) {
  std::vector<BaselineComparison> out;
  const auto records = records_from_results(results_doc);
  for (const auto& cand : records) {
    BaselineComparison& c = out.emplace_back();
    c.case_id = cand.case_id;
    c.path = cand.path;
    c.direction = cand.direction;
    if (const HistoryRecord* base = baseline_record(baselines, cand)) {
      c.has_baseline = true;
      c.baseline_commit = base->commit;
      c.baseline_date = base->date;
      if (base->n == 0 && cand.n > 0) {
        c.perf = PerfVerdict{.verdict = Verdict::not_comparable,
                             .reason = fmt::format("the baseline (commit {}) has no timing of this path", base->commit),
                             .next = "record one: parity baseline update --from the results of a --perf run"};
      } else if (base->n > 0 && cand.n > 0) {
        const Controls cand_eager = controls_of(cand, records);
        const auto in_baseline = [&](const HistoryRecord* e) { return e ? baseline_record(baselines, *e) : nullptr; };
        c.perf = compare_perf_controlled(*base, cand, {in_baseline(cand_eager.same), in_baseline(cand_eager.other)},
                                         cand_eager, {});
      }
      if (const HistoryRecord* numbers = numeric_baseline_record(baselines, cand)) {
        c.numerics_commit = numbers->commit;
        c.regressions = compare_numerics(*numbers, cand);
      } else
        c.numerics_not_comparable =
            fmt::format("no baseline numbers from platform '{}' ({} build); the baseline's are from '{}' ({})",
                        cand.platform, cand.build_type, base->platform, base->build_type);
    }
  }
  return out;
}

std::optional<std::string> gpu_suite_without_gpu(const std::vector<CaseResult>& results, bool gpu) {
  if (gpu || results.empty()) return std::nullopt;
  for (const auto& r : results) {
    if (r.status != Status::skip) return std::nullopt;
    for (const auto& v : r.variants)
      if (v.variant.rfind("cuda:", 0) != 0) return std::nullopt;
  }
  return fmt::format("no GPU for a GPU-only suite: all {} selected cases run only CUDA variants and this machine has "
                     "no usable CUDA device (run it on a GPU runner, or pick a CPU suite such as ci)",
                     results.size());
}

GateReport run_gate(std::vector<Case> cases, const Registry& reg, const GateOptions& o, const std::string& suite) {
  GateReport g;
  g.arch = current_arch(o.run.force_cpu);
  g.suite = suite;
  g.ambiguous = o.ambiguous;
  const auto baselines = load_baselines(o.baseline_dir);
  g.overrides = apply_overrides(cases, baselines, g.arch);
  for (const auto& c : cases) {
    CaseResult r = run_case(c, reg, o.run);
    if (o.perf && r.status == Status::pass) time_case(g, r, c, reg, o.run);  // a failing path's speed is moot
    g.results.push_back(std::move(r));
    if (o.progress) o.progress(g.results.back());
  }
  g.results_doc = results_document(g.results);
  if (auto e = gpu_suite_without_gpu(g.results, cuda_available() && !o.run.force_cpu)) g.errors.push_back(*e);
  g.comparisons = compare_with_baselines(g.results_doc, baselines);
  return g;
}

bool is_regression(const BaselineComparison& c, AmbiguousMode mode) {
  return !c.regressions.empty() || perf_regressed(c, mode);
}

int gate_exit_code(const GateReport& r) {
  if (!r.errors.empty()) return 2;
  const int parity = exit_code(r.results);
  if (parity != 0) return parity;
  const bool regressed =
      std::any_of(r.comparisons.begin(), r.comparisons.end(), [&](const auto& c) { return is_regression(c, r.ambiguous); });
  return regressed ? 1 : 0;
}

// The length of the UTF-8 sequence starting at s[i], or 0 where it is not one (a lone continuation byte, a lead byte
// without its continuations, an overlong or surrogate form): messages quote bytes of the user's files as they are.
size_t utf8_sequence(const std::string& s, size_t i) {
  const auto at = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const unsigned c = at(i);
  const size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((at(i + k) & 0xC0) != 0x80) return 0;
  const unsigned c1 = at(i + 1);
  if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))
    return 0;
  return n;
}

std::string xml_escape(const std::string& s, bool attribute) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80) {  // well-formed UTF-8 as it is; any other byte as U+FFFD, which a parser accepts
      const size_t n = utf8_sequence(s, i);
      o += n ? s.substr(i, n) : std::string("\xEF\xBF\xBD");
      i += n ? n - 1 : 0;
      continue;
    }
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      // A parser turns a raw \r into \n everywhere, and raw line breaks and tabs in an attribute into spaces.
      case '\r': o += "&#13;"; break;
      case '\n': o += attribute ? "&#10;" : "\n"; break;
      case '\t': o += attribute ? "&#9;" : "\t"; break;
      default: o += c < 0x20 ? std::string("\xEF\xBF\xBD") : std::string(1, ch);
    }
  }
  return o;
}

std::string junit_xml(const GateReport& g) {
  const auto rows = path_rows(g);
  std::map<std::string, std::vector<const PathRow*>> by_op;
  std::map<std::string, double> seconds;
  for (const auto& row : rows) by_op[row.result->op].push_back(&row);
  for (const auto& r : g.results) seconds[r.op] += r.seconds;
  std::vector<const PathRow*> all;
  double total = 0;
  for (const auto& row : rows) all.push_back(&row);
  for (const auto& [_, s] : seconds) total += s;

  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += fmt::format("<testsuites {}>\n", junit_suite_attrs("parity gate", all, total, g.errors.empty() ? 0 : 1));
  if (!g.errors.empty()) {
    x += "  <testsuite name=\"gate\" tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\" time=\"0\">\n";
    x += fmt::format("    <testcase classname=\"gate\" name=\"gate\">\n      <error message=\"{}\" type=\"harness\">{}"
                     "</error>\n    </testcase>\n  </testsuite>\n",
                     attr(join(g.errors, "; ")), xml_escape(join(g.errors, "\n")));
  }
  for (const auto& [op, op_rows] : by_op) {
    x += fmt::format("  <testsuite {}>\n", junit_suite_attrs(op, op_rows, seconds[op]));
    x += fmt::format(R"(    <properties><property name="arch" value="{}"/><property name="suite" value="{}"/></properties>)",
                     attr(g.arch), attr(g.suite)) +
         "\n";
    for (const PathRow* row : op_rows) x += junit_testcase(g, *row);
    x += "  </testsuite>\n";
  }
  return x + "</testsuites>\n";
}

std::string markdown_summary(const GateReport& g) {
  const auto rows = path_rows(g);
  const Counts n = count_paths(g, rows);
  const int code_ = gate_exit_code(g);
  const std::string icon = code_ == 0 ? "✅" : code_ == 1 ? "❌" : "💥";
  const nlohmann::json env =
      g.results_doc.is_object() ? g.results_doc.value("environment", nlohmann::json::object()) : nlohmann::json::object();
  std::string md = fmt::format("## {} Parity gate: {} (exit {})\n\n", icon, verdict_word(code_), code_);
  md += fmt::format("suite {} · arch {} · commit {} · {} cases\n\n", code(g.suite), code(g.arch.empty() ? "?" : g.arch),
                    code(env.value("commit", "?") + (env.value("dirty", false) ? "-dirty" : "")), g.results.size());
  md += fmt::format("**{} paths: {} passed, {} failed, {} skipped, {} errors** · {} numeric regressions · {} slower · "
                    "{} ambiguous · {} overrides applied\n",
                    n.paths, n.passed, n.failed, n.skipped, n.errors, n.numeric_regressions, n.slower, n.ambiguous,
                    g.overrides.size());
  for (const auto& e : g.errors) md += "\n> **Error:** " + cell(e) + "\n";

  std::vector<std::pair<const PathRow*, TableRow>> table;
  for (const auto& row : rows)
    for (auto& t : table_rows(g, row)) table.emplace_back(&row, std::move(t));
  if (!table.empty()) {
    md += "\n| | case | path | check | numbers |\n|---|---|---|---|---|\n";
    for (const auto& [row, t] : table)
      md += fmt::format("| {} | {} | {} | {} | {} |\n", t.what, code(row->result->case_id), code(t.path), cell(t.check),
                        cell(t.numbers));
  }
  md += markdown_overrides(g);
  std::vector<std::string> notes;
  if (n.no_baseline)
    notes.push_back(fmt::format("{} paths have no baseline yet: `parity baseline update --from <results.json> --why "
                                "\"...\"` records them",
                                n.no_baseline));
  if (n.faster) notes.push_back(fmt::format("{} paths are FASTER than their baseline", n.faster));
  if (n.not_comparable)
    notes.push_back(fmt::format("{} timings are NOT-COMPARABLE with their baseline (other device, driver, build, "
                                "timing mode, SM clock or host speed; the JSON's perf.reason says which)",
                                n.not_comparable));
  if (n.numerics_not_comparable) {
    // One example of the devices, and how to give this one its own baseline (a new CPU platform's first gate run).
    const auto first = std::find_if(g.comparisons.begin(), g.comparisons.end(),
                                    [](const BaselineComparison& c) { return !c.numerics_not_comparable.empty(); });
    notes.push_back(fmt::format("{} paths' numbers were not compared: their baseline was recorded on another device "
                                "({}); `parity baseline update --from <results.json> --why \"...\"` records this "
                                "device's beside it",
                                n.numerics_not_comparable, first->numerics_not_comparable));
  }
  std::vector<std::string> below;
  for (const auto& r : g.results)
    if (r.perf)
      for (const auto& e : r.perf->entries)
        if (below_target(e))
          below.push_back(fmt::format("`{}` `{}` {} {:.1f}% < {:g}%", r.case_id, e.path, e.direction, e.pct_copy_bw,
                                      e.target_pct_copy));
  if (!below.empty())
    notes.push_back(fmt::format("{} paths below their copy-rate target (a goal, not a failure): {}", below.size(),
                                join(below, ", ")));
  if (!notes.empty()) md += "\n- " + join(notes, "\n- ") + "\n";
  return md + markdown_details(rows);
}

nlohmann::json gate_document(const GateReport& g) {
  const auto rows = path_rows(g);
  const Counts n = count_paths(g, rows);
  nlohmann::json doc = g.results_doc;
  nlohmann::json& gate = doc["gate"];
  gate = {{"exit_code", gate_exit_code(g)}, {"verdict", verdict_word(gate_exit_code(g))},
          {"arch", g.arch},                 {"suite", g.suite},
          {"ambiguous", ambiguous_mode_name(g.ambiguous)}, {"errors", g.errors}};
  gate["counts"] = {{"paths", n.paths},
                    {"passed", n.passed},
                    {"failed", n.failed},
                    {"skipped", n.skipped},
                    {"errors", n.errors},
                    {"numeric_regressions", n.numeric_regressions},
                    {"slower", n.slower},
                    {"ambiguous", n.ambiguous},
                    {"faster", n.faster},
                    {"not_comparable", n.not_comparable},
                    {"no_baseline", n.no_baseline},
                    {"numerics_not_comparable", n.numerics_not_comparable}};
  gate["paths"] = nlohmann::json::array();
  for (const auto& row : rows)
    gate["paths"].push_back({{"case", row.result->case_id},
                             {"path", row.path},
                             {"outcome", status_name(row.outcome())},
                             {"reasons", failure_lines(row, g.ambiguous)}});
  gate["comparisons"] = nlohmann::json::array();
  for (const auto& c : g.comparisons) gate["comparisons"].push_back(to_json(c, g.ambiguous));
  gate["overrides"] = nlohmann::json::array();
  for (const auto& o : g.overrides)
    gate["overrides"].push_back({{"arch", o.arch},
                                 {"case", o.case_id},
                                 {"tensor", o.tensor},
                                 {"case_policy", o.case_policy},
                                 {"policy", o.with.policy},
                                 {"reason", o.with.reason},
                                 {"worst_observed", o.with.worst_observed},
                                 {"issue", o.with.issue},
                                 {"file", o.file.string()}});
  return doc;
}

}  // namespace parity
