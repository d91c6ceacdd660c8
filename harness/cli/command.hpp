// One file per `parity` subcommand: each adds its CLI11 subcommand and returns the handler main() calls when
// that subcommand was chosen. Handlers return the exit code (0 pass, 1 parity failure, 2 error) and may throw
// InputError (main maps it to 2).
#pragma once
#include <parity/case.hpp>

#include <CLI/CLI.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace parity::cli {

struct Command {
  CLI::App* sub = nullptr;
  std::function<int()> run;
};

// --cases-dir / --golden-dir: private directories searched after the repository's cases/ and golden/.
struct Dirs {
  std::vector<std::string> cases, golden;
  void add_to(CLI::App* app);
  std::vector<std::filesystem::path> case_dirs() const;
  std::vector<std::filesystem::path> golden_dirs() const;
};

// Cases of a suite, or the named ids (InputError for an unknown id).
std::vector<Case> select_cases(const std::vector<Case>& all, const std::string& suite,
                               const std::vector<std::string>& ids);

Command add_list(CLI::App& app);
Command add_run(CLI::App& app);
Command add_golden(CLI::App& app);
Command add_bisect(CLI::App& app);
Command add_device(CLI::App& app);
Command add_report(CLI::App& app);
Command add_gate(CLI::App& app);
Command add_baseline(CLI::App& app);
Command add_compare(CLI::App& app);
Command add_history(CLI::App& app);

}  // namespace parity::cli
