// parity bisect stages | commits: which stage of a kernel first diverges; which commit broke a case.
#include "harness/cli/command.hpp"

#include <parity/bisect.hpp>
#include <parity/error.hpp>
#include <parity/results.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <iostream>

namespace parity::cli {

namespace {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// How each bisect step builds Parity in its worktree: the same LibTorch and CUDA setting as this build, with
// ccache shared, tests and benchmarks off (only the CLI is needed).
std::string default_build() {
  const char* prefix = std::getenv("PARITY_TORCH_PREFIX");
#ifdef PARITY_WITH_CUDA
  const std::string cuda = "ON";
#else
  const std::string cuda = "OFF";
#endif
  return fmt::format(
      "cmake -S . -B .parity-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPARITY_TESTS=OFF -DPARITY_BENCH=OFF "
      "-DPARITY_CUDA={} -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc "
      "-DCMAKE_PREFIX_PATH={} && cmake --build .parity-build --target parity",
      cuda, shell_quote(prefix ? prefix : PARITY_TORCH_PREFIX_DEFAULT));
}

}  // namespace

Command add_bisect(CLI::App& app) {
  struct State {
    Dirs dirs;
    std::string case_id, variant, good, bad, build, run, repo = PARITY_SOURCE_DIR;
    std::string path, baseline, candidate;
    double threshold = 0;  // by the timing's mode (threshold_for)
    int attempts = CommitBisectOptions{}.judge_attempts;
    bool cpu_only = false, perf = false;
  };
  auto st = std::make_shared<State>();
  CLI::App* bisect = app.add_subcommand("bisect", "find the stage or the commit where a case goes wrong");
  bisect->require_subcommand(1);

  CLI::App* stages = bisect->add_subcommand("stages", "walk a kernel's stages: propagated and isolated error");
  stages->add_option("--case", st->case_id, "case id")->required();
  stages->add_option("--variant", st->variant, "fast path to bisect (default: every variant of the case that runs here)");
  stages->add_flag("--cpu", st->cpu_only, "treat CUDA as unavailable");
  st->dirs.add_to(stages);

  CLI::App* commits = bisect->add_subcommand("commits", "git bisect a case between two revisions in a worktree");
  commits->add_option("--good", st->good, "a revision where the case passes")->required();
  commits->add_option("--bad", st->bad, "a revision where it fails")->required();
  commits->add_option("--case", st->case_id, "case id (runs `parity run --case` at each step)");
  commits->add_option("--build", st->build, "build command in the worktree (default: configure and build parity)");
  commits->add_option("--run", st->run, "test command in the worktree: exit 0 good, 1 bad, else skip");
  commits->add_option("--repo", st->repo, "repository to bisect (default: this source tree)");
  commits->add_flag("--perf", st->perf,
                    "bisect a slowdown: time the case at each step against the good revision's timing; SLOWER is "
                    "bad, AMBIGUOUS skips (with --run: the command writes its results to $PARITY_BISECT_RESULTS)");
  commits->add_option("--path", st->path, "with --perf: judge only this path, e.g. cpu:v1 (default: every variant)");
  commits->add_option("--threshold", st->threshold,
                      "with --perf: relative gap for a SLOWER verdict (default: 0.05 for GPU timings, 0.25 for CPU)")
      ->check(CLI::PositiveNumber);
  commits->add_option("--attempts", st->attempts,
                      "with --perf: runs of a step before an AMBIGUOUS or NOT-COMPARABLE verdict skips it")
      ->check(CLI::Range(1, 20))
      ->capture_default_str();

  // What each step of a perf bisection calls, in this binary: the verdict logic stays that of the build that
  // bisects, whatever the bisected commits' harness knew.
  CLI::App* verdict = bisect->add_subcommand(
      "verdict", "one perf-bisection step: a results document against a baseline one; exit 0 SAME/FASTER, "
                 "1 SLOWER, 125 AMBIGUOUS/NOT-COMPARABLE (git bisect's skip)");
  verdict->add_option("--baseline", st->baseline, "results document of the good revision")->required();
  verdict->add_option("--candidate", st->candidate, "results document of the step")->required();
  verdict->add_option("--path", st->path, "judge only this path");
  verdict->add_option("--threshold", st->threshold,
                      "relative gap for FASTER/SLOWER (default: 0.05 for GPU timings, 0.25 for CPU)")
      ->check(CLI::PositiveNumber);

  return {bisect, [st, stages, verdict] {
            if (*stages) {
              const Registry& reg = Registry::global();
              const auto cases = select_cases(load_cases(st->dirs.case_dirs(), reg), "all", {st->case_id});
              const Case& c = cases.front();
              RunOptions opts;
              opts.golden_dirs = st->dirs.golden_dirs();
              opts.force_cpu = st->cpu_only;
              // Every variant that runs here unless one is named: a case fails on any of them.
              std::vector<std::string> vids;
              if (!st->variant.empty()) vids.push_back(st->variant);
              else
                for (const auto& id : c.variants)
                  if (id.rfind("cuda:", 0) != 0 || (cuda_available() && !opts.force_cpu)) vids.push_back(id);
              if (vids.empty()) throw InputError(fmt::format("case '{}' has no variant that runs here", c.id));
              int diverged = 0;
              for (size_t i = 0; i < vids.size(); ++i) {
                const StageBisection b = bisect_stages(c, reg, vids[i], opts);
                std::cout << (i ? "\n" : "") << format_stage_bisection(b);
                diverged += b.diverged();
              }
              if (vids.size() > 1) std::cout << fmt::format("\n{} of {} variants diverge\n", diverged, vids.size());
              return diverged ? 1 : 0;
            }
            if (*verdict) {
              const PerfStepVerdict v = judge_perf_step(with_results(st->baseline, records_from_results),
                                                        with_results(st->candidate, records_from_results), st->path,
                                                        {.threshold = st->threshold});
              std::cout << v.text;
              return v.exit_code;
            }
            if (st->run.empty() && st->case_id.empty()) throw InputError("bisect commits needs --case or --run");
            CommitBisectOptions o{st->repo, st->good, st->bad, st->build, st->run, "", st->attempts};
            if (o.run.empty()) {
              o.build = o.build.empty() ? default_build() : o.build;
              o.run = fmt::format("./.parity-build/parity run --case {} --no-color", shell_quote(st->case_id));
              if (st->perf) o.run += " --perf --json \"$PARITY_BISECT_RESULTS\"";
            }
            if (st->perf)
              o.judge = fmt::format("{} bisect verdict{}{}",
                                    shell_quote(std::filesystem::read_symlink("/proc/self/exe").string()),
                                    st->threshold > 0 ? fmt::format(" --threshold {}", st->threshold) : "",
                                    st->path.empty() ? "" : " --path " + shell_quote(st->path));
            const CommitBisection r = bisect_commits(o);
            std::cout << r.log << "\n";
            if (!r.found) {
              std::cout << "no first bad commit found: " << r.summary << "\n";
              return 2;
            }
            std::cout << fmt::format("first bad commit: {}\n  {}\n{}\n", r.first_bad, r.summary, r.first_bad_log);
            return 0;
          }};
}

}  // namespace parity::cli
