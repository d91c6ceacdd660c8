// parity history append <results.json> | check: the history store (reports/history/<op>.jsonl, history.hpp) and
// the verdicts drawn from it. For every key (case|path|direction): the newest record against the newest earlier
// comparable one (perf verdict and numeric growth), then the steps over the key's medians, so that creep made of
// many within-noise commits shows against the first level (harness-practice.md s9.5).
// Exit 1 on a SLOWER verdict or a numeric regression; AMBIGUOUS only under --fail-on-ambiguous; creep and
// NOT-COMPARABLE are reported, never fatal.
#include "harness/cli/command.hpp"

#include <parity/error.hpp>
#include <parity/results.hpp>
#include <parity/history.hpp>

#include <fmt/format.h>

#include <fstream>
#include <iostream>

namespace parity::cli {

namespace fs = std::filesystem;

namespace {

using Records = std::vector<const HistoryRecord*>;  // one key's records, oldest first

int append(const std::string& results, const fs::path& dir) {
  const std::vector<HistoryRecord> records = with_results(results, records_from_results);
  append_history(dir, records);
  int timed = 0, numeric = 0;
  for (const auto& r : records) {
    timed += r.n > 0;
    numeric += !r.numerics.empty();
  }
  std::cout << fmt::format("history: appended {} records ({} timed, {} with numerics) from {} to {}\n",
                           records.size(), timed, numeric, results, dir.string());
  return 0;
}

struct Tally {
  std::map<Verdict, int> verdicts;
  // eager's: the naive composition times the machine beside each path (the control), and is never gated itself, as
  // in the gate: a slower eager beside an unchanged kernel is a slower host
  std::map<Verdict, int> eager;
  int numeric_regressions = 0, creeping = 0, first_records = 0;
};

std::string ms(double x) { return fmt::format("{:.4g} ms", x); }
std::string at(const HistoryRecord& r) { return fmt::format("{} {}", r.commit.empty() ? "?" : r.commit, r.date); }

// The newest earlier timed record comparable with `newest`; failing that the newest earlier timed one, whose
// NOT-COMPARABLE verdict then says what changed.
const HistoryRecord* perf_baseline(const Records& recs) {
  const HistoryRecord& newest = *recs.back();
  const HistoryRecord* fallback = nullptr;
  for (size_t i = recs.size() - 1; i-- > 0;) {
    if (recs[i]->n == 0) continue;
    if (incomparability(*recs[i], newest).empty()) return recs[i];
    if (!fallback) fallback = recs[i];
  }
  return fallback;
}

// Numerics may differ legitimately across devices and build types, so only those of the same setup are compared.
const HistoryRecord* numeric_baseline(const Records& recs) {
  const HistoryRecord& newest = *recs.back();
  for (size_t i = recs.size() - 1; i-- > 0;)
    if (!recs[i]->numerics.empty() && same_numerics_setup(*recs[i], newest))
      return recs[i];
  return nullptr;
}

void check_perf(const Records& recs, const std::vector<HistoryRecord>& all, const VerdictOptions& o, Tally& t) {
  const HistoryRecord& newest = *recs.back();
  if (newest.n == 0) return;
  const HistoryRecord* base = perf_baseline(recs);
  if (!base) {
    std::cout << "  perf    first timed record\n";
    ++t.first_records;
    return;
  }
  const PerfVerdict v = compare_perf_controlled(*base, newest, controls_of(*base, all), controls_of(newest, all), o);
  ++(newest.path == "eager" ? t.eager : t.verdicts)[v.verdict];
  std::cout << fmt::format("  perf    {:<14} x{:.3f}  p={:.2g}  {} ({}) vs baseline {} ({})\n", verdict_name(v.verdict), v.ratio,
                           v.p_value, ms(newest.median_ms), at(newest), ms(base->median_ms), at(*base));
  std::cout << fmt::format("          {}\n", v.reason);
  if (!v.next.empty()) std::cout << fmt::format("          next: {}\n", v.next);
}

void check_numerics(const Records& recs, Tally& t) {
  const HistoryRecord& newest = *recs.back();
  if (newest.numerics.empty()) return;
  const HistoryRecord* base = numeric_baseline(recs);
  if (!base) return;
  for (const auto& r : compare_numerics(*base, newest)) {
    ++t.numeric_regressions;
    std::cout << fmt::format("  NUMERIC {} {} grew {:.6g} -> {:.6g} (since {})\n", r.tensor, r.metric, r.baseline,
                             r.candidate, at(*base));
  }
}

// Steps over the medians of the records comparable with the newest; creep: the last level against the first.
void check_steps(const Records& recs, const VerdictOptions& o, Tally& t) {
  const HistoryRecord& newest = *recs.back();
  if (newest.n == 0) return;
  const double threshold = threshold_for(o, newest);
  Records series;
  std::vector<double> medians, noise;
  for (const HistoryRecord* r : recs)
    if (r->n > 0 && incomparability(*r, newest).empty()) {
      series.push_back(r);
      medians.push_back(r->median_ms);
      noise.push_back((r->q3_ms - r->q1_ms) / 2);  // asv's error of a median: half the interquartile range
    }
  const std::vector<Step> steps = detect_steps(medians, noise);
  for (const Step& s : steps)
    std::cout << fmt::format("  step    at {}: {} -> {} (x{:.3f})\n", at(*series[s.index]), ms(s.before), ms(s.after),
                             s.after / s.before);
  if (steps.empty()) return;
  const double first = steps.front().before, last = steps.back().after;
  if (last > first * (1 + threshold)) {
    ++t.creeping;
    std::cout << fmt::format("  CREEP   x{:.3f} over {} records: first level {} -> last level {}\n", last / first,
                             series.size(), ms(first), ms(last));
  }
}

int check(const fs::path& dir, const std::string& case_id, const VerdictOptions& o, bool fail_on_ambiguous) {
  const std::vector<HistoryRecord> all = load_history(dir);
  std::map<std::string, Records> by_key;
  for (const auto& r : all)
    if (case_id.empty() || r.case_id == case_id) by_key[r.key()].push_back(&r);
  if (by_key.empty())
    throw InputError(case_id.empty() ? fmt::format("{}: the history is empty", dir.string())
                                     : fmt::format("{}: no history for case '{}'", dir.string(), case_id));
  Tally t;
  for (const auto& [key, recs] : by_key) {
    const HistoryRecord& newest = *recs.back();
    std::cout << fmt::format("{} {} {}  ({} records, newest {})\n", newest.case_id, newest.path, newest.direction,
                             recs.size(), at(newest));
    check_perf(recs, all, o, t);
    check_numerics(recs, t);
    check_steps(recs, o, t);
  }
  std::string verdicts;
  for (Verdict v : {Verdict::slower, Verdict::faster, Verdict::same, Verdict::ambiguous, Verdict::not_comparable})
    verdicts += fmt::format("{} {}, ", t.verdicts[v], verdict_name(v));
  std::cout << fmt::format("\nhistory: {} keys: {}{} first timed; {} numeric regressions; {} creeping\n", by_key.size(),
                           verdicts, t.first_records, t.numeric_regressions, t.creeping);
  if (!t.eager.empty()) {
    std::string eager;
    for (const auto& [v, n] : t.eager) eager += fmt::format("{}{} {}", eager.empty() ? "" : ", ", n, verdict_name(v));
    std::cout << fmt::format("eager (the control, not gated): {}\n", eager);
  }
  const bool fail = t.verdicts[Verdict::slower] > 0 || t.numeric_regressions > 0 ||
                    (fail_on_ambiguous && t.verdicts[Verdict::ambiguous] > 0);
  return fail ? 1 : 0;
}

}  // namespace

Command add_history(CLI::App& app) {
  struct State {
    std::string results, dir = (fs::path(PARITY_SOURCE_DIR) / "reports/history").string(), case_id;
    VerdictOptions verdict;
    bool fail_on_ambiguous = false;
  };
  auto st = std::make_shared<State>();
  CLI::App* history = app.add_subcommand("history", "the history store: append results, check the newest records");
  history->require_subcommand(1);
  CLI::App* add = history->add_subcommand("append", "append the records of a results document to <dir>/<op>.jsonl");
  add->add_option("results", st->results, "results document (parity run --json)")->required();
  add->add_option("--dir", st->dir, "history store directory")->capture_default_str();
  CLI::App* chk = history->add_subcommand("check", "each key's newest record against the newest earlier comparable one");
  chk->add_option("--dir", st->dir, "history store directory")->capture_default_str();
  chk->add_option("--case", st->case_id, "only this case id");
  chk->add_option("--threshold", st->verdict.threshold,
                  "relative gap between the [q1,q3] intervals needed for SLOWER/FASTER; also the creep limit "
                  "(default: the case's perf_threshold, else 0.05 for GPU timings, 0.25 for CPU)")
      ->check(CLI::PositiveNumber);
  chk->add_flag("--fail-on-ambiguous", st->fail_on_ambiguous, "exit 1 on an AMBIGUOUS verdict too");
  return {history, [st, add] {
            if (*add) return append(st->results, st->dir);
            return check(st->dir, st->case_id, st->verdict, st->fail_on_ambiguous);
          }};
}

}  // namespace parity::cli
