// Declarative cases (cases/<family>.toml). One file per family; each [[case]] names an op, its shapes and
// inputs (seeded or golden), the variants to check, the reference numerics, and a policy per output.
//
//   family = "hc"
//   [constants]                      # shared by every case of the file; provenance in comments
//   hc_eps = 1e-6
//   [[case]]
//   id = "hc_post/tiny"              # "<op>/<name>"; the op is the part before '/'
//   covers = "..."                   # which code path it exercises (reaches the report)
//   dims = { tokens = 64, hc = 4, hidden = 64 }
//   dtype = "bf16"
//   seed = 7                         # or: golden = "hc/hc_post_tiny.h5" (relative to a golden dir)
//   reference = "fp64"               # the reference composition in fp64 (default), fp32, or "hf": at the
//                                    # inputs' own dtypes, rounding where HF rounds (the HF-parity mode)
//   variants = ["cpu:v1", "cuda:v1"] # default: every registered variant of the op
//   suites = ["smoke", "ci"]
//   backward = true
//   deterministic = true             # run the optimized path twice, compare bitwise
//   [case.policy]                    # optimized vs reference (and vs golden); one per output and grad
//   out = "naive_relative(k=2, floor=1)"
//   "grad/x" = "naive_relative(k=2, floor=1)"
//   [case.golden_policy]             # reference vs golden
//   out = "ulp<=4"
//   [case.skip]                      # variant -> reason; reaches the report
//   "cuda:hf" = "not implemented yet"
//   [case.copy_target]               # "<variant>/<fwd|bwd>" -> least % of the measured copy rate `--perf` must show
//   "cuda:v1/fwd" = 85
//   perf_threshold = 0.10            # (a key of the case, before its tables) the gap between timings' [q1,q3]
//                                    # intervals a SLOWER/FASTER verdict needs, relative to the baseline median;
//                                    # default by where it is timed (history.hpp: 5% GPU, 25% CPU)
#pragma once
#include <parity/op.hpp>
#include <parity/policy.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace parity {

struct Case {
  std::string id;      // "hc_post/tiny"
  std::string op;      // "hc_post"
  std::string covers;
  std::filesystem::path file;  // the case file it came from
  OpContext ctx;
  std::optional<uint64_t> seed;
  std::optional<std::string> golden;  // relative path under a golden dir
  Numerics reference = Numerics::fp64;
  std::vector<std::string> variants;  // resolved: explicit list or every registered variant
  std::vector<std::string> suites;
  bool backward = true;
  bool deterministic = true;
  std::map<std::string, Policy> policy;         // output or "grad/<input>" -> policy (optimized vs reference)
  std::map<std::string, Policy> golden_policy;  // reference vs golden
  std::map<std::string, std::string> skip;      // variant -> reason
  // Perf: reference speeds from upstream, for the report, and floors on a path's share of the copy rate.
  std::map<std::string, std::string> notes;
  std::map<std::string, double> copy_targets;  // "<variant>/<fwd|bwd>" -> percent
  double perf_threshold = 0;                    // 0: by the timing's mode (history.hpp kGpuThreshold, kCpuThreshold)
};

// Loads every *.toml under each directory. Throws InputError naming
// the file and field for an unknown kernel, a missing field, a bad tolerance or a duplicate id.
std::vector<Case> load_cases(const std::vector<std::filesystem::path>& dirs, const Registry& reg);
// Parses one case file's text; `file` is used in messages and as Case::file.
std::vector<Case> parse_cases(const std::string& toml_text, const std::filesystem::path& file, const Registry& reg);

// Suite selection: a case belongs to a suite if listed in its `suites`; "all" selects every case.
bool in_suite(const Case& c, const std::string& suite);

}  // namespace parity
