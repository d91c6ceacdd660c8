// parity device [--remeasure] [--cpu]: the ceilings perf percentages are taken against (copy bandwidth, bf16 and
// fp32 matmul rates), measured once per device and driver and cached.
#include "harness/cli/command.hpp"

#include <parity/perf.hpp>

#include <fmt/format.h>

#include <iostream>

namespace parity::cli {

Command add_device(CLI::App& app) {
  struct State {
    bool remeasure = false, cpu_only = false;
  };
  auto st = std::make_shared<State>();
  CLI::App* sub = app.add_subcommand("device", "measure (or show the cached) ceilings of this device");
  sub->add_flag("--remeasure", st->remeasure, "measure again even when the ceilings are cached");
  sub->add_flag("--cpu", st->cpu_only, "the CPU's ceilings, also on a machine with a GPU");
  return {sub, [st] {
            const DeviceCeilings c = device_ceilings(st->remeasure, st->cpu_only);
            std::cout << fmt::format("device    {}\n", c.device)
                      << fmt::format("driver    {}\n", c.driver.empty() ? "-" : c.driver)
                      << fmt::format("copy      {:.1f} GB/s (bytes read + written)\n", c.copy_gbps)
                      // The CPU's ceilings time no bf16 product (its method line says so): 0 there is "not measured".
                      << (c.bf16_tflops > 0 ? fmt::format("bf16 mm   {:.2f} TFLOP/s\n", c.bf16_tflops)
                                            : std::string("bf16 mm   - (not measured on this device)\n"))
                      << fmt::format("fp32 mm   {:.3f} TFLOP/s\n", c.fp32_tflops)
                      << fmt::format("measured  {}\n", c.measured) << fmt::format("method    {}\n", c.method)
                      << fmt::format("cache     {}\n", ceilings_file(c).string());
            return 0;
          }};
}

}  // namespace parity::cli
