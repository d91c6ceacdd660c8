// The case runner: inputs (golden or seeded) -> reference (fp32, autograd backward) -> every variant, with
// guards -> checks under the case's policies. Results are data; the CLI picks exit codes.
#pragma once
#include <parity/case.hpp>
#include <parity/golden.hpp>
#include <parity/perf.hpp>
#include <parity/policy.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace parity {

enum class Status { pass, fail, skip, error };
std::string status_name(Status s);

// One comparison of one tensor, e.g. "cuda:v1 out vs ref" or "ref grad/x vs golden".
struct Check {
  std::string variant;   // a variant id, or "ref:hf" (the reference at the golden's dtypes) for HF-parity checks
  std::string tensor;    // output name or "grad/<input>"
  std::string against;   // "ref:fp64", "ref:fp32", "ref:hf" or "golden"
  std::string policy;    // policy text
  CheckResult result;
};

// A guard is a property every optimized run must have regardless of tolerance.
struct Guard {
  std::string variant;
  std::string name;  // "outputs written", "inputs unchanged", "deterministic"
  bool pass = true;
  std::string message;
};

struct VariantRun {
  std::string variant;
  Status status = Status::pass;
  std::string skip_reason;  // or error message
};

struct CaseResult {
  std::string case_id;
  std::string op;
  std::string covers;
  Status status = Status::pass;
  std::string error;  // Status::error: what went wrong (harness or input)
  std::vector<Check> checks;
  std::vector<Guard> guards;
  std::vector<VariantRun> variants;
  double seconds = 0;
  std::optional<PerfResult> perf;  // parity run --perf
};

struct RunOptions {
  std::vector<std::filesystem::path> golden_dirs;  // searched in order for a case's golden file
  std::optional<std::string> only_variant;         // run just this variant
  bool force_cpu = false;                          // treat CUDA as unavailable
  int first_n = 8;
};

// Finds, verifies (manifest sha256) and reads a case's golden file. Throws InputError.
GoldenFile find_golden(const Case& c, const RunOptions& opts);

// Inputs (and upstream gradients) of a case: from its golden file or its seed, on the CPU.
struct CaseInputs {
  TensorMap inputs;
  TensorMap grad_outputs;
  std::optional<GoldenFile> golden;
};
CaseInputs prepare_inputs(const Case& c, const Registry& reg, const RunOptions& opts);

// Never throws for parity problems; InputError and other exceptions become Status::error with the message.
CaseResult run_case(const Case& c, const Registry& reg, const RunOptions& opts);

}  // namespace parity
