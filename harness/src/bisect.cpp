// Stage and commit bisection (bisect.hpp).
#include <parity/bisect.hpp>
#include <parity/error.hpp>

#include <fmt/format.h>

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
  TensorMap in;
  for (const auto& [k, t] : ci.inputs) in[k] = t.to(dev);

  TensorMap out;
  for (const auto& s : op.output_specs(c.ctx, in)) out[s.name] = at::empty(s.shape, at::TensorOptions().dtype(s.dtype).device(dev));
  for (auto& [_, t] : out) poison(t);
  v.forward(c.ctx, in, out);

  const TensorMap ref_env = run_stages(op, c.ctx, as_numerics(in, c.reference));
  const TensorMap naive_env = run_stages(op, c.ctx, in);
  TensorMap fast_env = in;  // the fast path's tensors: its inputs and everything it wrote
  for (const auto& [k, t] : out) fast_env[k] = t;

  StageBisection b{c.id, vid, {}, std::nullopt};
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

}  // namespace

CommitBisection bisect_commits(const CommitBisectOptions& o) {
  const std::string git = "git -C " + quote(o.repo.string());
  const std::string good = must(git + " rev-parse --verify " + quote(o.good + "^{commit}"), "--good");
  const std::string bad = must(git + " rev-parse --verify " + quote(o.bad + "^{commit}"), "--bad");
  const auto tmp = std::filesystem::temp_directory_path() / fmt::format("parity-bisect-{}", ::getpid());
  const auto worktree = tmp / "worktree";
  std::filesystem::create_directories(tmp);
  // The step script maps the outcome of one commit to git bisect's codes: build failures and undecidable
  // runs skip (125) instead of misleading the search.
  const auto step = tmp / "step.sh";
  {
    std::FILE* f = std::fopen(step.c_str(), "w");
    if (!f) throw std::runtime_error("cannot write " + step.string());
    const std::string script = fmt::format(
        "#!/usr/bin/env bash\n"
        "cd {wt} || exit 125\n"
        "( {build} ) >>{log} 2>&1 || {{ echo \"build failed at $(git rev-parse --short HEAD): skip\" >>{log}; exit 125; }}\n"
        "( {run} ) >>{log} 2>&1\n"
        "rc=$?\n"
        "echo \"$(git rev-parse --short HEAD): run exit $rc\" >>{log}\n"
        "case $rc in 0) exit 0;; 1) exit 1;; *) exit 125;; esac\n",
        fmt::arg("wt", quote(worktree.string())), fmt::arg("build", o.build.empty() ? "true" : o.build),
        fmt::arg("run", o.run), fmt::arg("log", quote((tmp / "steps.log").string())));
    std::fputs(script.c_str(), f);
    std::fclose(f);
  }
  CommitBisection res;
  must(git + " worktree add --detach " + quote(worktree.string()) + " " + bad, "git worktree add");
  const std::string wgit = "git -C " + quote(worktree.string());
  try {
    must(wgit + " bisect start " + bad + " " + good, "git bisect start");
    Shell run = sh(wgit + " bisect run bash " + quote(step.string()));
    res.log = sh(wgit + " bisect log").out;
    const auto pos = run.out.find(" is the first bad commit");
    if (pos != std::string::npos) {
      const auto start = run.out.rfind('\n', pos);
      res.first_bad = trim(run.out.substr(start == std::string::npos ? 0 : start + 1, pos - (start == std::string::npos ? 0 : start + 1)));
      res.found = true;
      res.summary = trim(sh(git + " log -1 --format='%h %s' " + res.first_bad).out);
    } else {
      res.summary = trim(run.out);
    }
    sh(wgit + " bisect reset");
  } catch (...) {
    sh(wgit + " bisect reset");
    sh(git + " worktree remove --force " + quote(worktree.string()));
    throw;
  }
  sh(git + " worktree remove --force " + quote(worktree.string()));
  std::ifstream steps(tmp / "steps.log");
  std::stringstream ss;
  ss << steps.rdbuf();
  res.log += "\n" + ss.str();
  std::filesystem::remove_all(tmp);
  return res;
}

}  // namespace parity
