// parity list: kernels with their variants, and the cases of a suite.
#include "harness/cli/command.hpp"

#include <fmt/format.h>

#include <iostream>

namespace parity::cli {

Command add_list(CLI::App& app) {
  struct State {
    Dirs dirs;
    std::string suite = "all";
  };
  auto st = std::make_shared<State>();
  CLI::App* sub = app.add_subcommand("list", "list kernels, variants and cases");
  sub->add_option("--suite", st->suite, "suite to list (all, smoke, ci, full, perf)")->capture_default_str();
  st->dirs.add_to(sub);
  return {sub, [st] {
            const Registry& reg = Registry::global();
            // A suite no case belongs to (a typo) is bad input, as for run.
            const auto cases = select_cases(load_cases(st->dirs.case_dirs(), reg), st->suite, {});
            std::cout << "kernels and variants:\n";
            for (const auto& name : reg.op_names()) {
              std::string vs;
              for (const Variant* v : reg.variants(name)) vs += " " + v->id;
              std::cout << fmt::format("  {:<10}{}\n", name, vs);
            }
            std::cout << fmt::format("\ncases ({}):\n", st->suite);
            for (const auto& c : cases) {
              std::string suites;
              for (const auto& s : c.suites) suites += (suites.empty() ? "" : ",") + s;
              std::cout << fmt::format("  {:<34} [{}] {}\n", c.id, suites, c.covers);
            }
            return 0;
          }};
}

}  // namespace parity::cli
