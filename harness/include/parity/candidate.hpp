// Bring-your-own outputs: a kernel outside Parity (Triton, a Python prototype) is checked like a variant.
//
//   parity compare --case C --export-inputs in.h5    the case's inputs and upstream gradients, golden schema
//   (the user's code reads in.h5, runs its kernel, writes out.h5; tools/parity_h5.py has the helpers)
//   parity compare --case C --candidate out.h5       checked against the reference (and the golden, if the case has
//                                                    one) under the case's policies, as `parity run` checks a variant
//
// Exported file: /inputs/<name>, /grad_outputs/<name> (each with attr dtype, bf16 as uint16 bits), and root attrs
//   schema_version, op, case, seed or golden, config_json, generator, created, plus outputs_json ([{name, shape, dtype}]: what
//   the candidate must hold) and grad_inputs_json (the inputs whose gradients it may hold).
// Candidate file: /outputs/<name> for every output of the op, each with the exported shape and dtype; /grads/<input>
//   for every gradient input, or no /grads at all (then only the forward is checked); /inputs, when present, must
//   equal the exported inputs bitwise (outputs computed from other inputs would be compared with the wrong numbers).
#pragma once
#include <parity/golden.hpp>
#include <parity/runner.hpp>

#include <filesystem>

namespace parity {

// The variant id a candidate's checks carry in messages and results.
inline constexpr const char* kCandidateVariant = "candidate";

GoldenFile exported_inputs(const Case& c, const Registry& reg, const RunOptions& opts);

struct CandidateResult {
  CaseResult result;
  bool backward_checked = false;  // the candidate held /grads and the case runs backward
};

// Throws InputError naming the file and dataset for a candidate that cannot be checked (missing output, wrong
// shape or dtype, partial grads, inputs that differ); parity failures are the result's, as with run_case.
CandidateResult compare_candidate(const Case& c, const Registry& reg, const RunOptions& opts,
                                  const std::filesystem::path& candidate);

}  // namespace parity
