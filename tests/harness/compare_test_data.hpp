// Test data shared by the comparator tests (test_compare.cpp, test_compare_cuda.cpp).
#pragma once
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdint>
#include <utility>

namespace parity::test {

// An expected tensor and an actual one off it by a relative error whose scale changes every 3000 elements (from 1e-2
// to 1e-9: stretches of elements 0, a few or thousands of ULPs apart), with exact matches, zeros on both sides (no
// relative error there), and, with sign_flips, one in a thousand actual values negated (distances across zero: in
// fp64 they pass 2^63 and saturate), in fp64 before the casts.
inline std::pair<at::Tensor, at::Tensor> noisy_pair(int64_t n, at::ScalarType actual_type,
                                                    at::ScalarType expected_type, uint64_t seed,
                                                    bool sign_flips = false) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto fp64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor expected = at::normal(0.0, 1.0, {n}, gen, fp64);
  const at::Tensor scale = at::pow(10.0, -(at::arange(n, fp64).div(3000).floor().remainder(8) + 2));
  at::Tensor actual = expected * (1 + scale * at::normal(0.0, 1.0, {n}, gen, fp64));
  actual = at::where(at::rand({n}, gen, fp64) < 0.2, expected, actual);
  const at::Tensor zero = at::rand({n}, gen, fp64) < 0.01;
  expected = at::where(zero, 0.0, expected);
  actual = at::where(at::rand({n}, gen, fp64) < 0.5, at::where(zero, 0.0, actual), actual);
  if (sign_flips) actual = at::where(at::rand({n}, gen, fp64) < 0.001, -actual, actual);
  return {actual.to(actual_type), expected.to(expected_type)};
}

}  // namespace parity::test
