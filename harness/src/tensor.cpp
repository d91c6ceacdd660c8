#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <parity/error.hpp>
#include <parity/tensor.hpp>
#include <span>
#include <string_view>

namespace parity {
namespace {

struct DtypeName {
  std::string_view name;
  at::ScalarType type;
};

constexpr DtypeName kCanonicalNames[] = {
    {"bf16", at::kBFloat16}, {"fp16", at::kHalf},  {"fp32", at::kFloat}, {"fp64", at::kDouble},
    {"int32", at::kInt},     {"int64", at::kLong}, {"uint8", at::kByte},
};
// PyTorch's spellings, so that a case file may say what a PyTorch user would write.
constexpr DtypeName kAliases[] = {
    {"bfloat16", at::kBFloat16}, {"float16", at::kHalf},   {"half", at::kHalf},     {"float32", at::kFloat},
    {"float", at::kFloat},       {"float64", at::kDouble}, {"double", at::kDouble},
};

std::optional<at::ScalarType> lookup(std::span<const DtypeName> table, std::string_view name) {
  for (const auto& entry : table) {
    if (entry.name == name) return entry.type;
  }
  return std::nullopt;
}

std::string canonical_names() {
  std::string out;
  for (const auto& entry : kCanonicalNames) out += fmt::format("{}{}", out.empty() ? "" : ", ", entry.name);
  return out;
}

// Integer words of the element's width, so that equality of words is equality of bits. Elements wider than
// one word (complex128) become rows of words.
at::Tensor bit_words(const at::Tensor& t) {
  const int64_t size = t.element_size();
  const at::ScalarType word = size == 1 ? at::kByte : size == 2 ? at::kShort : size == 4 ? at::kInt : at::kLong;
  const int64_t words_per_element = std::max<int64_t>(1, size / 8);
  return t.contiguous().reshape({-1}).view(word).reshape({t.numel(), words_per_element});
}

void require_same_layout(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) {
    throw InputError(
        fmt::format("bitwise comparison needs the same shape and dtype: got {} and {}", describe(a), describe(b)));
  }
}

}  // namespace

at::ScalarType parse_dtype(const std::string& name, const std::string& where) {
  if (auto type = lookup(kCanonicalNames, name)) return *type;
  if (auto type = lookup(kAliases, name)) return *type;
  throw InputError(fmt::format("{}: unknown dtype '{}' (expected {})", where, name, canonical_names()));
}

std::string dtype_name(at::ScalarType t) {
  for (const auto& entry : kCanonicalNames) {
    if (entry.type == t) return std::string(entry.name);
  }
  // Types without a Parity name (fp8, int16, ...) still need to read well in error messages.
  return c10::toString(t);
}

void poison(at::Tensor& t) {
  const at::ScalarType type = t.scalar_type();
  if (at::isFloatingType(type)) {
    t.fill_(std::numeric_limits<double>::quiet_NaN());
  } else if (at::isIntegralType(type, /*includeBool=*/false)) {
    AT_DISPATCH_INTEGRAL_TYPES(type, "poison", [&] { t.fill_(std::numeric_limits<scalar_t>::lowest()); });
  } else {
    throw InputError(fmt::format("cannot poison a {} tensor (floating or integer dtypes only)", dtype_name(type)));
  }
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  return bitwise_diff_count(a, b) == 0;
}

int64_t bitwise_diff_count(const at::Tensor& a, const at::Tensor& b) {
  require_same_layout(a, b);
  const at::Tensor words_a = bit_words(a);
  const at::Tensor words_b = bit_words(b.to(a.device()));
  return words_a.ne(words_b).any(/*dim=*/1).sum().item<int64_t>();
}

std::string describe(const at::Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  return fmt::format("[{}] {}", fmt::join(t.sizes(), ", "), dtype_name(t.scalar_type()));
}

}  // namespace parity
