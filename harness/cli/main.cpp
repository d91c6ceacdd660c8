// parity: the command-line front. Exit codes: 0 all pass, 1 a parity failure, 2 bad input or harness error.
#include "harness/cli/command.hpp"

#include <parity/error.hpp>

#include <iostream>

int main(int argc, char** argv) {
  using namespace parity;
  CLI::App app{"parity: numerical parity and speed of LLM-training kernels against fp64 references and HF goldens"};
  app.require_subcommand(1);
  const std::vector<cli::Command> commands = {cli::add_list(app), cli::add_run(app), cli::add_golden(app),
                                               cli::add_report(app), cli::add_device(app),
                                               cli::add_gate(app), cli::add_baseline(app), cli::add_compare(app),
                                               cli::add_history(app), cli::add_bisect(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    for (const auto& c : commands)
      if (*c.sub) return c.run();
  } catch (const InputError& e) {
    std::cerr << "parity: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "parity: harness error: " << error_message(e) << "\n";
    return 2;
  }
  return 2;
}
