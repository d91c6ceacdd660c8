// Stage and commit bisection (bisect.hpp).
#include <parity/bisect.hpp>
#include <parity/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace parity {

namespace {

TensorMap as_numerics(const TensorMap& m, Numerics n) {
  if (n == Numerics::hf) return m;
  TensorMap out;
  const auto to = n == Numerics::fp64 ? at::kDouble : at::kFloat;
  for (const auto& [k, v] : m) out[k] = at::isFloatingType(v.scalar_type()) ? v.to(to) : v;
  return out;
}

// Every tensor a stage chain produces, starting from the op's inputs.
TensorMap run_stages(const Op& op, const OpContext& ctx, const TensorMap& inputs) {
  TensorMap env = inputs;
  for (const auto& s : op.stages) {
    TensorMap in;
    for (const auto& name : s.inputs) in[name] = env.at(name);
    for (auto& [k, v] : s.reference(ctx, in)) env[k] = v;
  }
  return env;
}

TensorMap pick(const TensorMap& env, const std::vector<std::string>& names) {
  TensorMap m;
  for (const auto& n : names) m[n] = env.at(n);
  return m;
}

}  // namespace

StageBisection bisect_stages(const Case& c, const Registry& reg, const std::string& vid, const RunOptions& opts) {
  const Op& op = reg.op(c.op);
  if (op.stages.empty()) throw InputError(fmt::format("kernel '{}' declares no stages", op.name));
  const Variant& v = reg.variant(c.op, vid);
  if (v.device == at::kCUDA && (!cuda_available() || opts.force_cpu))
    throw InputError(fmt::format("variant '{}' needs a CUDA device", vid));
  const at::Device dev(v.device);
  CaseInputs ci = prepare_inputs(c, reg, opts);
  TensorMap in, given;  // what the variant gets, and a copy of it as given
  for (const auto& [k, t] : ci.inputs) {
    in[k] = t.to(dev, t.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    given[k] = in[k].clone();
  }

  TensorMap out;
  for (const auto& s : op.output_specs(c.ctx, in)) out[s.name] = at::empty(s.shape, at::TensorOptions().dtype(s.dtype).device(dev));
  for (auto& [_, t] : out) poison(t);
  v.forward(c.ctx, in, out);
  StageBisection b{c.id, vid, {}, std::nullopt, {}};
  for (const auto& [k, t] : given)
    if (const int64_t n = bitwise_diff_count(t, in.at(k)))
      b.modified_inputs.push_back(fmt::format("'{}' {} of {} elements", k, n, t.numel()));
  in = given;

  const TensorMap ref_env = run_stages(op, c.ctx, as_numerics(in, c.reference));
  const TensorMap naive_env = run_stages(op, c.ctx, in);
  TensorMap fast_env = in;  // the fast path's tensors: its inputs and everything it wrote
  for (const auto& [k, t] : out) fast_env[k] = t;

  for (const auto& s : op.stages) {
    const TensorMap stage_in = pick(fast_env, s.inputs);
    const TensorMap iso_ref = s.reference(c.ctx, as_numerics(stage_in, c.reference));
    const TensorMap iso_naive = s.reference(c.ctx, stage_in);
    bool stage_failed = false;
    for (const auto& name : s.outputs) {
      auto p = c.policy.find(name);
      if (p == c.policy.end() || !out.count(name)) continue;  // an intermediate the fast path does not expose
      StageCheck sc{s.name, name,
                    evaluate(p->second, out.at(name), ref_env.at(name), &naive_env.at(name), opts.first_n),
                    evaluate(p->second, out.at(name), iso_ref.at(name), &iso_naive.at(name), opts.first_n)};
      stage_failed |= !sc.isolated.pass;
      b.checks.push_back(std::move(sc));
    }
    if (stage_failed && !b.first_divergent) b.first_divergent = s.name;
  }
  return b;
}

std::string format_stage_bisection(const StageBisection& b) {
  std::ostringstream os;
  os << fmt::format("stage bisection of {} ({}): each stage's error under its policy, propagated (full run) and\n"
                    "isolated (the reference stage fed this path's own inputs to the stage)\n\n",
                    b.case_id, b.variant);
  os << fmt::format("{:<10} {:<10} {:<7} {:<44} {:<7} {}\n", "stage", "tensor", "", "propagated", "", "isolated");
  for (const auto& c : b.checks)
    os << fmt::format("{:<10} {:<10} {:<7} {:<44} {:<7} {}\n", c.stage, c.tensor, c.propagated.pass ? "[OK]" : "[DIFF]",
                      fmt::format("max abs {:.2e}, max ulp {}", c.propagated.metrics.max_abs, c.propagated.metrics.max_ulp),
                      c.isolated.pass ? "[OK]" : "[DIFF]",
                      fmt::format("max abs {:.2e}, max ulp {}", c.isolated.metrics.max_abs, c.isolated.metrics.max_ulp));
  if (!b.modified_inputs.empty())
    os << fmt::format("\n{} modified its inputs in place: {} (stages judged on the inputs as given; parity run's "
                      "guard fails it)\n",
                      b.variant, fmt::join(b.modified_inputs, "; "));
  if (b.first_divergent) {
    os << fmt::format("\nfirst divergent stage: {}\n", *b.first_divergent);
    for (const auto& c : b.checks)
      if (c.stage == *b.first_divergent && !c.isolated.pass)
        os << fmt::format("  {}: {}\n{}", c.tensor, c.isolated.summary, c.isolated.detail);
  } else {
    os << "\nno stage diverges on its own\n";
  }
  return os.str();
}

namespace {

struct Shell {
  int code = 0;
  std::string out;
};

Shell sh(const std::string& cmd) {
  Shell r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) throw std::runtime_error("cannot run: " + cmd);
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 255;
  return r;
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string must(const std::string& cmd, const std::string& what) {
  Shell r = sh(cmd);
  if (r.code != 0) throw InputError(fmt::format("{}: `{}` failed: {}", what, cmd, trim(r.out)));
  return trim(r.out);
}

// The step script maps the outcome of one commit to git bisect's codes: build failures and undecidable runs skip
// (125) instead of misleading the search. Each commit's output goes to the log under "=== <hash>", ending with a
// "--> good | bad | skip" line. In a perf bisection, `step.sh baseline` builds and runs the good revision in a
// worktree of its own (`good_tree`), and every step runs it again right after its own run, so that the judge
// compares two runs a few seconds apart: on the H200 host's CPU the same code timed 1.6x apart in runs minutes apart,
// with eager and the host probe unmoved. A perf step the judge cannot decide (AMBIGUOUS, NOT-COMPARABLE) is timed
// again, both revisions, up to `judge_attempts` times in all, before it is skipped: a skipped commit leaves git
// bisect with a list of candidates.
std::string step_script(const CommitBisectOptions& o, const std::filesystem::path& worktree,
                        const std::filesystem::path& good_tree, const std::filesystem::path& tmp) {
  const std::string judge =
      o.judge.empty()
          ? "case $rc in 0) echo '--> good' >>\"$log\"; exit 0;; 1) echo '--> bad' >>\"$log\"; exit 1;; esac\n"
            "echo \"--> skip: run exit $rc\" >>\"$log\"; exit 125\n"
          : fmt::format(
                "for attempt in $(seq {attempts}); do\n"
                "  [ $rc = 0 ] || {{ echo \"--> skip: run exit $rc (a parity failure or an error: no speed to judge)\" "
                ">>\"$log\"; exit 125; }}\n"
                "  echo '--- the good revision again, beside it' >>\"$log\"\n"
                "  ( cd {good_tree} && PARITY_BISECT_RESULTS={baseline} && step_run ) || "
                "{{ echo '--> skip: the good revision did not run again' >>\"$log\"; exit 125; }}\n"
                "  {judge} --baseline {baseline} --candidate \"$PARITY_BISECT_RESULTS\" >>\"$log\" 2>&1\n"
                "  jc=$?\n"
                "  case $jc in 0) echo '--> good' >>\"$log\"; exit 0;; 1) echo '--> bad' >>\"$log\"; exit 1;; 125) ;; "
                "*) break;; esac\n"
                "  [ $attempt = {attempts} ] && break\n"
                "  echo \"--> undecided: timing again (run $((attempt + 1)) of {attempts})\" >>\"$log\"\n"
                "  step_run; rc=$?\n"
                "done\n"
                "echo \"--> skip: no decisive verdict (judge exit $jc)\" >>\"$log\"; exit 125\n",
                fmt::arg("judge", o.judge), fmt::arg("baseline", quote((tmp / "baseline.json").string())),
                fmt::arg("attempts", o.judge_attempts), fmt::arg("good_tree", quote(good_tree.string())));
  return fmt::format(
      "#!/usr/bin/env bash\n"
      "log={log}\n"
      "wt={wt}\n"
      "[ \"${{1:-}}\" = baseline ] && wt={good_tree}\n"
      "cd \"$wt\" || exit 125\n"
      "echo \"=== $(git rev-parse HEAD)\" >>\"$log\"\n"
      "( {build} ) >>\"$log\" 2>&1 || {{ echo '--> skip: build failed' >>\"$log\"; exit 125; }}\n"
      "export PARITY_BISECT_RESULTS={results}\n"
      "[ \"${{1:-}}\" = baseline ] && PARITY_BISECT_RESULTS={baseline}\n"
      "step_run() {{ rm -f \"$PARITY_BISECT_RESULTS\"; ( {run} ) >>\"$log\" 2>&1; }}\n"
      "step_run; rc=$?\n"
      "[ \"${{1:-}}\" = baseline ] && {{ echo \"--> baseline: run exit $rc\" >>\"$log\"; exit $rc; }}\n"
      "{judge}",
      fmt::arg("log", quote((tmp / "steps.log").string())), fmt::arg("wt", quote(worktree.string())),
      fmt::arg("good_tree", quote(good_tree.string())),
      fmt::arg("build", o.build.empty() ? "true" : o.build), fmt::arg("run", o.run),
      fmt::arg("results", quote((tmp / "step.json").string())),
      fmt::arg("baseline", quote((tmp / "baseline.json").string())), fmt::arg("judge", judge));
}

// The "=== <hash>" blocks of the steps log that belong to `hash` (a commit can be run twice: as an end, then by
// git bisect), the last one.
std::string step_block(const std::string& log, const std::string& hash) {
  const std::string header = "=== " + hash + "\n";
  const auto at = log.rfind(header);
  if (at == std::string::npos) return "";
  const auto next = log.find("\n=== ", at + header.size() - 1);
  return trim(log.substr(at, next == std::string::npos ? std::string::npos : next + 1 - at));
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

CommitBisection bisect_commits(const CommitBisectOptions& o) {
  const std::string git = "git -C " + quote(o.repo.string());
  const std::string good = must(git + " rev-parse --verify " + quote(o.good + "^{commit}"), "--good");
  const std::string bad = must(git + " rev-parse --verify " + quote(o.bad + "^{commit}"), "--bad");
  const auto tmp = std::filesystem::temp_directory_path() / fmt::format("parity-bisect-{}", ::getpid());
  const auto worktree = tmp / "worktree", good_tree = tmp / "good";
  std::filesystem::create_directories(tmp);
  const auto step = tmp / "step.sh";
  {
    std::ofstream f(step);
    f << step_script(o, worktree, good_tree, tmp);
    if (!f.flush()) throw std::runtime_error("cannot write " + step.string());
  }
  CommitBisection res;
  const bool perf = !o.judge.empty();
  const std::string wgit = "git -C " + quote(worktree.string());
  // The perf baseline runs in its own worktree, already at the good revision.
  const auto run_at = [&](const std::string& rev, const std::string& arg) {
    if (arg.empty()) must(wgit + " checkout -q --detach " + rev, "git checkout");
    return sh("bash " + quote(step.string()) + arg).code;
  };
  const auto cleanup = [&] {
    sh(wgit + " bisect reset");
    sh(git + " worktree remove --force " + quote(worktree.string()));
    if (perf) sh(git + " worktree remove --force " + quote(good_tree.string()));
  };
  try {
    must(git + " worktree add --detach " + quote(worktree.string()) + " " + bad, "git worktree add");
    if (perf) must(git + " worktree add --detach " + quote(good_tree.string()) + " " + good, "git worktree add");
    const int at_good = run_at(good, perf ? " baseline" : "");
    const int at_bad = at_good == 0 ? run_at(bad, "") : -1;
    if (at_good != 0) {
      res.summary = o.judge.empty() ? fmt::format("the good revision {} does not pass (step exit {})", o.good, at_good)
                                    : fmt::format("the good revision {} could not be built and timed", o.good);
    } else if (at_bad != 1) {
      res.summary = fmt::format("the bad revision {} is not bad ({})", o.bad,
                                at_bad == 0 ? "it passes" : "undecidable: build failed, or no decisive verdict");
    } else {
      must(wgit + " bisect start " + bad + " " + good, "git bisect start");
      Shell run = sh(wgit + " bisect run bash " + quote(step.string()));
      res.log = sh(wgit + " bisect log").out;
      const auto pos = run.out.find(" is the first bad commit");
      if (pos != std::string::npos) {
        const auto start = run.out.rfind('\n', pos);
        const auto from = start == std::string::npos ? 0 : start + 1;
        res.first_bad = trim(run.out.substr(from, pos - from));
        res.found = true;
        res.summary = trim(sh(git + " log -1 --format='%h %s' " + res.first_bad).out);
      } else {
        res.summary = trim(run.out);
      }
    }
  } catch (...) {
    cleanup();
    std::error_code ec;  // the scratch directory too, and no second error over the first
    std::filesystem::remove_all(tmp, ec);
    throw;
  }
  cleanup();
  const std::string steps = read_text(tmp / "steps.log");
  if (res.found) res.first_bad_log = step_block(steps, res.first_bad);
  res.log += "\n" + steps;
  std::filesystem::remove_all(tmp);
  return res;
}

PerfStepVerdict judge_perf_step(const std::vector<HistoryRecord>& base_records,
                                const std::vector<HistoryRecord>& candidates, const std::string& path,
                                const VerdictOptions& o) {
  std::map<std::string, const HistoryRecord*> base;
  for (const auto& r : base_records)
    if (r.n > 0 && r.path != "eager") base.emplace(r.key(), &r);
  PerfStepVerdict out;
  bool slower = false, undecided = false, compared = false;
  for (const auto& r : candidates) {
    if (r.n == 0 || r.path == "eager" || (!path.empty() && r.path != path)) continue;
    const auto b = base.find(r.key());
    if (b == base.end()) {
      out.text += fmt::format("{} {} {}: no baseline timing\n", r.case_id, r.path, r.direction);
      undecided = true;
      continue;
    }
    const HistoryRecord& bl = *b->second;
    const PerfVerdict v = compare_perf_controlled(bl, r, controls_of(bl, base_records), controls_of(r, candidates), o);
    compared = true;
    slower |= v.verdict == Verdict::slower;
    undecided |= v.verdict == Verdict::ambiguous || v.verdict == Verdict::not_comparable;
    out.text += fmt::format("{} {} {}: {} x{:.3f} (median {:.4g} -> {:.4g} ms, p={:.2g}) {}{}\n", r.case_id, r.path,
                            r.direction, verdict_name(v.verdict), v.ratio, bl.median_ms, r.median_ms, v.p_value,
                            v.reason, v.next.empty() ? "" : "; " + v.next);
  }
  if (!compared) out.text += "nothing to compare: no timed path of the candidate has a baseline timing\n";
  out.exit_code = slower ? 1 : (undecided || !compared) ? 125 : 0;
  return out;
}

}  // namespace parity
