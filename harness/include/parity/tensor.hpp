// Named tensors and dtype names shared by references, kernels, golden files and messages.
#pragma once
#include <ATen/ATen.h>

#include <map>
#include <string>

namespace parity {

// Ordered so that every listing (messages, JSON, HDF5) is stable.
using TensorMap = std::map<std::string, at::Tensor>;

// "bf16", "fp16", "fp32", "fp64", "int32", "int64", "uint8" (aliases "bfloat16", "float32", ...).
// Throws InputError naming `where` for an unknown name.
at::ScalarType parse_dtype(const std::string& name, const std::string& where);
std::string dtype_name(at::ScalarType t);

// Fills a floating tensor with NaN (bit pattern of a quiet NaN in its own dtype), or an integer tensor with
// its minimum value: the poison an optimized path must overwrite.
void poison(at::Tensor& t);

// Element-for-element bitwise equality (NaN payloads included), for any dtype and device.
bool bitwise_equal(const at::Tensor& a, const at::Tensor& b);
// Number of elements whose bits differ (a and b must have the same shape and dtype).
int64_t bitwise_diff_count(const at::Tensor& a, const at::Tensor& b);

// "[4096, 4, 4096] bf16"
std::string describe(const at::Tensor& t);

}  // namespace parity
