// Tolerance policies, declared per output in case files:
//   "bitwise"                         every element identical (+0/-0 differ here: bits are bits)
//   "bitwise(max_fraction=F)"         bitwise except at most F * numel elements (TransformerEngine's mismatch
//                                     budget), for paths whose only freedom is a library's summation order
//   "ulp<=N"                          ULP distance in the output dtype at most N
//   "allclose(atol=A, rtol=R)"        |a-e| <= A + R|e| elementwise; both A and R must be given
//   "naive_relative(k=K, floor=F)"    max and mean |opt-ref| <= K * the same error of the naive low-precision
//                                     LibTorch composition, + F rounding steps of the output dtype at max|ref|
//                                     (flash-attention's rule with the floor its later tests added)
// NaN never passes unless the case sets nan = "expected" for that output, and then only where the
// expected tensor is NaN too.
#pragma once
#include <parity/compare.hpp>

#include <optional>
#include <string>
#include <variant>

namespace parity {

struct Bitwise {
  double max_fraction = 0;  // share of elements allowed to differ
};
struct Ulp { int64_t max_ulp = 0; };
struct AllClose { double atol = 0, rtol = 0; };
struct NaiveRelative { double k = 2.0; double floor_ulps = 1.0; };
using PolicyKind = std::variant<Bitwise, Ulp, AllClose, NaiveRelative>;

struct Policy {
  PolicyKind kind;
  bool nan_expected = false;
  std::string text;  // as written in the case file, for messages
};

// Parses the syntax above; throws InputError naming `where` (file and field) on bad input.
Policy parse_policy(const std::string& text, const std::string& where);
bool needs_naive(const Policy& p);

// Result of checking one tensor under one policy: a bool plus a message (gtest AssertionResult style).
struct CheckResult {
  bool pass = false;
  std::string summary;  // one line: "max ulp 3 (<= 4 allowed)"
  std::string detail;   // multi-line mismatch report (empty on pass)
  Metrics metrics;
  std::optional<Metrics> naive_metrics;  // naive_relative: the naive composition against the same expected
  double bound_max = 0, bound_mean = 0;  // naive_relative: the bounds that applied
};

// `naive` is required for NaiveRelative (InputError otherwise) and ignored by the other policies. Its error is
// measured against `naive_expected` when given (a golden that is itself the naive composition would otherwise
// make that error zero), else against `expected`.
CheckResult evaluate(const Policy& policy, const at::Tensor& actual, const at::Tensor& expected,
                     const at::Tensor* naive = nullptr, int first_n = 8, const at::Tensor* naive_expected = nullptr);

// The policy a variant meets against a golden, given the one it meets against the reference: the same, except
// that naive_relative takes k+1 with the naive error measured against the reference, since
// |opt - golden| <= |opt - ref| + |ref - golden| and HF's golden is the naive composition's result.
Policy against_golden(const Policy& p);

}  // namespace parity
