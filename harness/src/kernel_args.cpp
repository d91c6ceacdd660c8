#include <parity/error.hpp>
#include <parity/kernel_args.hpp>
#include <parity/tensor.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

namespace parity::args {

const at::Tensor& need(const TensorMap& m, const std::string& name, at::DeviceType device, const std::string& where) {
  auto it = m.find(name);
  if (it == m.end()) throw InputError(fmt::format("{}: missing tensor '{}'", where, name));
  if (it->second.device().type() != device)
    throw InputError(fmt::format("{}: '{}' is on {}, the variant needs it on {}", where, name,
                                 it->second.device().str(), at::Device(device).str()));
  return it->second;
}

at::Tensor input(const TensorMap& m, const std::string& name, at::ScalarType dtype, int64_t numel,
                 at::DeviceType device, const std::string& where) {
  const at::Tensor& t = need(m, name, device, where);
  if (t.scalar_type() != dtype)
    throw InputError(
        fmt::format("{}: '{}' is {}, expected {}", where, name, dtype_name(t.scalar_type()), dtype_name(dtype)));
  if (numel >= 0 && t.numel() != numel)
    throw InputError(fmt::format("{}: '{}' has {} elements, expected {}", where, name, t.numel(), numel));
  return t.contiguous();
}

at::Tensor& output(TensorMap& m, const std::string& name, at::ScalarType dtype, int64_t numel, at::Device device,
                   const std::string& where) {
  auto it = m.find(name);
  if (it == m.end()) throw InputError(fmt::format("{}: output '{}' was not allocated", where, name));
  at::Tensor& t = it->second;
  if (t.scalar_type() != dtype || !t.is_contiguous() || t.numel() != numel || t.device() != device)
    throw InputError(fmt::format("{}: output '{}' must be a contiguous {} tensor of {} elements on {}, got {} on {}",
                                 where, name, dtype_name(dtype), numel, device.str(), describe(t), t.device().str()));
  return t;
}

int64_t tokens(const at::Tensor& t, std::initializer_list<int64_t> tail, const std::string& name,
               const std::string& where) {
  const auto n = static_cast<int64_t>(tail.size());
  bool ok = t.dim() >= n;
  int64_t i = t.dim() - n, per_token = 1;
  for (int64_t want : tail) {
    ok = ok && t.size(i++) == want;
    per_token *= want;
  }
  if (!ok)
    throw InputError(fmt::format("{}: '{}' has shape {}, which does not end in {}", where, name, describe(t),
                                 fmt::join(tail, "x")));
  return per_token == 0 ? 0 : t.numel() / per_token;
}

}  // namespace parity::args
