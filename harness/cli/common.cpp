// Options and selection shared by the subcommands.
#include "harness/cli/command.hpp"

#include <parity/error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace parity::cli {

void Dirs::add_to(CLI::App* app) {
  app->add_option("--cases-dir", cases, "extra case directory (repeatable; searched after cases/)");
  app->add_option("--golden-dir", golden, "extra golden directory (repeatable; searched after golden/)");
}

std::vector<std::filesystem::path> Dirs::case_dirs() const {
  std::vector<std::filesystem::path> d{std::filesystem::path(PARITY_SOURCE_DIR) / "cases"};
  d.insert(d.end(), cases.begin(), cases.end());
  return d;
}

std::vector<std::filesystem::path> Dirs::golden_dirs() const {
  std::vector<std::filesystem::path> d{std::filesystem::path(PARITY_SOURCE_DIR) / "golden"};
  d.insert(d.end(), golden.begin(), golden.end());
  return d;
}

std::vector<Case> select_cases(const std::vector<Case>& all, const std::string& suite,
                               const std::vector<std::string>& ids) {
  for (const auto& id : ids)
    if (std::none_of(all.begin(), all.end(), [&](const Case& c) { return c.id == id; }))
      throw InputError(fmt::format("no case '{}' (try `parity list --suite all`)", id));
  std::vector<Case> out;
  for (const auto& c : all)
    if (ids.empty() ? in_suite(c, suite) : std::find(ids.begin(), ids.end(), c.id) != ids.end()) out.push_back(c);
  if (out.empty()) throw InputError(fmt::format("suite '{}' selects no case", suite));
  return out;
}

}  // namespace parity::cli
