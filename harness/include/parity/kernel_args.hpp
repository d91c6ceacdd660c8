// The checks a fast path's LibTorch bridge makes before its kernels take raw pointers: each named tensor present,
// on the path's device, of the agreed dtype and size, and preallocated outputs contiguous. The CPU and CUDA paths of
// every family share them, so a contract violation reads the same whichever path caught it. Every failure is an
// InputError naming `where` (the variant) and the tensor.
#pragma once
#include <parity/op.hpp>

#include <initializer_list>
#include <string>

namespace parity::args {

// The tensor `name` of `m`, on a device of type `device`.
const at::Tensor& need(const TensorMap& m, const std::string& name, at::DeviceType device, const std::string& where);

// An input of `dtype` with `numel` elements (any count when numel < 0), as a contiguous view: no copy when it already
// is one. Inputs are never written.
at::Tensor input(const TensorMap& m, const std::string& name, at::ScalarType dtype, int64_t numel,
                 at::DeviceType device, const std::string& where);

// A preallocated output or gradient: contiguous, of `dtype` and `numel` elements, on `device`.
at::Tensor& output(TensorMap& m, const std::string& name, at::ScalarType dtype, int64_t numel, at::Device device,
                   const std::string& where);

// Tokens: the product of the dims before the trailing `tail` dims (0 for an empty tensor).
int64_t tokens(const at::Tensor& t, std::initializer_list<int64_t> tail, const std::string& name,
               const std::string& where);

}  // namespace parity::args
