// parity: the command-line front. Exit codes: 0 all pass, 1 a parity failure, 2 bad input or harness error.
#include <parity/case.hpp>
#include <parity/error.hpp>
#include <parity/golden.hpp>
#include <parity/report.hpp>
#include <parity/results.hpp>
#include <parity/runner.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <iostream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace parity;

namespace {

struct Dirs {
  std::vector<std::string> cases, golden;
  void add_to(CLI::App* app) {
    app->add_option("--cases-dir", cases, "extra case directory (repeatable; searched after cases/)");
    app->add_option("--golden-dir", golden, "extra golden directory (repeatable; searched after golden/)");
  }
  std::vector<fs::path> case_dirs() const {
    std::vector<fs::path> d{fs::path(PARITY_SOURCE_DIR) / "cases"};
    d.insert(d.end(), cases.begin(), cases.end());
    return d;
  }
  std::vector<fs::path> golden_dirs() const {
    std::vector<fs::path> d{fs::path(PARITY_SOURCE_DIR) / "golden"};
    d.insert(d.end(), golden.begin(), golden.end());
    return d;
  }
};

std::vector<Case> select(const std::vector<Case>& all, const std::string& suite, const std::vector<std::string>& ids) {
  std::vector<Case> out;
  for (const auto& c : all) {
    const bool by_id = std::find(ids.begin(), ids.end(), c.id) != ids.end();
    if (ids.empty() ? in_suite(c, suite) : by_id) out.push_back(c);
  }
  for (const auto& id : ids)
    if (std::none_of(all.begin(), all.end(), [&](const Case& c) { return c.id == id; }))
      throw InputError(fmt::format("no case '{}' (try `parity list`)", id));
  return out;
}

int cmd_list(const Dirs& dirs, const std::string& suite) {
  const Registry& reg = Registry::global();
  std::cout << "kernels and variants:\n";
  for (const auto& name : reg.op_names()) {
    std::string vs;
    for (const Variant* v : reg.variants(name)) vs += " " + v->id;
    std::cout << fmt::format("  {:<10}{}\n", name, vs);
  }
  std::cout << fmt::format("\ncases ({}):\n", suite);
  for (const auto& c : load_cases(dirs.case_dirs(), reg)) {
    if (!in_suite(c, suite)) continue;
    std::string suites;
    for (const auto& s : c.suites) suites += (suites.empty() ? "" : ",") + s;
    std::cout << fmt::format("  {:<34} [{}] {}\n", c.id, suites, c.covers);
  }
  return 0;
}

int cmd_run(const Dirs& dirs, const std::string& suite, const std::vector<std::string>& ids, const RunOptions& opts,
            const std::string& json_path, const std::string& html_path, bool color) {
  const Registry& reg = Registry::global();
  const auto cases = select(load_cases(dirs.case_dirs(), reg), suite, ids);
  if (cases.empty()) throw InputError(fmt::format("suite '{}' selects no case", suite));
  std::vector<CaseResult> results;
  for (const auto& c : cases) {
    results.push_back(run_case(c, reg, opts));
    std::cerr << fmt::format("[{}] {} ({:.1f} s)\n", status_name(results.back().status), c.id, results.back().seconds);
  }
  print_table(std::cout, results, color);
  const auto doc = results_document(results);
  if (!json_path.empty()) write_json(doc, json_path);
  if (!html_path.empty()) write_html_report(doc, html_path);
  const int code = exit_code(results);
  int counts[4] = {0, 0, 0, 0};
  for (const auto& r : results) counts[int(r.status)]++;
  std::cout << fmt::format("\nparity: {} passed, {} failed, {} skipped, {} errors\n", counts[0], counts[1], counts[2],
                           counts[3]);
  return code;
}

std::string python_for_golden() {
  if (const char* p = std::getenv("PARITY_PYTHON")) return p;
  const char* home = std::getenv("PARITY_HOME");
  const fs::path venv = home ? fs::path(home) / "venv/bin/python"
                             : fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / ".cache/parity/venv/bin/python";
  return fs::exists(venv) ? venv.string() : "python3";
}

// Regenerates every golden file into a scratch directory and compares each dataset bitwise with the committed
// one: drift means the generator, torch or transformers changed the numbers.
int golden_drift(const fs::path& golden_dir) {
  const Manifest committed = read_manifest(golden_dir / "MANIFEST.json");
  const fs::path scratch = fs::temp_directory_path() / fmt::format("parity-golden-{}", ::getpid());
  const std::string cmd = fmt::format("'{}' '{}/golden/generate.py' --out '{}'", python_for_golden(), PARITY_SOURCE_DIR,
                                      scratch.string());
  std::cout << "regenerating: " << cmd << "\n";
  if (std::system(cmd.c_str()) != 0) throw InputError("golden generator failed: " + cmd);
  const Manifest fresh = read_manifest(scratch / "MANIFEST.json");
  int drift = 0;
  for (const auto& [rel, _] : committed.files) {
    if (!fresh.files.count(rel)) {
      std::cout << fmt::format("DRIFT {}: no longer generated\n", rel);
      ++drift;
      continue;
    }
    const GoldenFile a = load_verified(committed, rel), b = read_golden(scratch / rel);
    for (const char* group : kGoldenGroups) {
      for (const auto& [name, t] : a.group(group)) {
        auto it = b.group(group).find(name);
        if (it == b.group(group).end()) {
          std::cout << fmt::format("DRIFT {} /{}/{}: missing in the regenerated file\n", rel, group, name);
          ++drift;
        } else if (t.sizes() != it->second.sizes() || t.scalar_type() != it->second.scalar_type() ||
                   !bitwise_equal(t, it->second)) {
          const bool same_shape = t.sizes() == it->second.sizes() && t.scalar_type() == it->second.scalar_type();
          std::cout << fmt::format("DRIFT {} /{}/{}: {}\n", rel, group, name,
                                   same_shape ? fmt::format("{} of {} elements differ", bitwise_diff_count(t, it->second), t.numel())
                                              : describe(t) + " vs " + describe(it->second));
          ++drift;
        }
      }
    }
  }
  for (const auto& [rel, _] : fresh.files)
    if (!committed.files.count(rel)) std::cout << fmt::format("NEW {}: generated but not committed\n", rel);
  fs::remove_all(scratch);
  std::cout << (drift ? fmt::format("golden: {} datasets drifted\n", drift) : "golden: regenerated bitwise identical\n");
  return drift ? 1 : 0;
}

int cmd_golden_verify(const Dirs& dirs, bool regenerate) {
  for (const auto& dir : dirs.golden_dirs()) {
    const Manifest m = read_manifest(dir / "MANIFEST.json");
    for (const auto& [rel, e] : m.files) {
      const GoldenFile g = load_verified(m, rel);
      size_t n = 0;
      for (const auto& [_, group] : g.groups) n += group.size();
      std::cout << fmt::format("OK {}  sha256 {}  {} datasets\n", (dir / rel).string(), e.sha256.substr(0, 12), n);
    }
  }
  return regenerate ? golden_drift(dirs.golden_dirs().front()) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"parity: numerical parity and speed of LLM-training kernels against fp32 references and HF goldens"};
  app.require_subcommand(1);
  Dirs dirs;
  std::string suite = "ci", json_path, html_path, variant;
  std::vector<std::string> ids;
  bool cpu_only = false, no_color = false, regenerate = false;

  CLI::App* list = app.add_subcommand("list", "list kernels, variants and cases");
  list->add_option("--suite", suite, "suite to list (all, smoke, ci, full, perf)")->capture_default_str();
  dirs.add_to(list);

  CLI::App* run = app.add_subcommand("run", "run cases and compare optimized paths with reference and golden");
  run->add_option("--suite", suite, "suite to run (all, smoke, ci, full, perf)")->capture_default_str();
  run->add_option("--case", ids, "run these case ids instead of a suite (repeatable)");
  run->add_option("--variant", variant, "run only this variant, e.g. cuda:v1");
  run->add_flag("--cpu", cpu_only, "treat CUDA as unavailable (CUDA variants skip)");
  run->add_option("--json", json_path, "write the results document here");
  run->add_option("--html", html_path, "write the HTML report here");
  run->add_flag("--no-color", no_color, "plain table");
  dirs.add_to(run);

  CLI::App* golden = app.add_subcommand("golden", "golden data");
  golden->require_subcommand(1);
  CLI::App* verify = golden->add_subcommand("verify", "check every golden file against the manifest");
  verify->add_flag("--regenerate", regenerate, "re-run golden/generate.py and report any bitwise drift");
  dirs.add_to(verify);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    if (*list) return cmd_list(dirs, suite);
    if (*run) {
      RunOptions opts;
      opts.golden_dirs = dirs.golden_dirs();
      opts.force_cpu = cpu_only;
      if (!variant.empty()) opts.only_variant = variant;
      const bool color = !no_color && isatty(STDOUT_FILENO);
      return cmd_run(dirs, suite, ids, opts, json_path, html_path, color);
    }
    if (*verify) return cmd_golden_verify(dirs, regenerate);
  } catch (const InputError& e) {
    std::cerr << "parity: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "parity: harness error: " << e.what() << "\n";
    return 2;
  }
  return 2;
}
