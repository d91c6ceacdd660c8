// The text of a case file holding one hc_post case, for the tests of the case parser, the gate's baseline overrides,
// the perf runner and the case runner: the hc family's constants, one [[case]] with `fields` (its keys, and any
// tables after them), then `policies`.
#pragma once
#include <string>

namespace parity::test {

inline constexpr const char* kHcConstants = R"toml(family = "hc"
[constants]
hc_eps = 1e-6
rms_eps = 1e-6
sinkhorn_iters = 20
post_mult = 2.0
)toml";

// hc_post's output and gradients under the policies of its committed cases.
inline constexpr const char* kHcPostPolicies = R"toml([case.policy]
out = "ulp<=1"
"grad/x" = "naive_relative(k=2, floor=1)"
"grad/residual" = "naive_relative(k=2, floor=1)"
"grad/post" = "naive_relative(k=2, floor=1)"
"grad/comb" = "naive_relative(k=2, floor=1)"
)toml";

inline std::string hc_post_case_text(const std::string& fields, const std::string& policies = kHcPostPolicies) {
  return std::string(kHcConstants) + "[[case]]\n" + fields + "\n" + policies;
}

}  // namespace parity::test
