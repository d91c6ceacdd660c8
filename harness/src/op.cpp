// Registry of ops and variants, and the small helpers of op.hpp.
#include <parity/error.hpp>
#include <parity/op.hpp>

#include <fmt/format.h>

namespace parity {

Numerics parse_numerics(const std::string& s, const std::string& where) {
  if (s == "fp32") return Numerics::fp32;
  if (s == "fp64") return Numerics::fp64;
  if (s == "hf") return Numerics::hf;
  throw InputError(fmt::format("{}: unknown reference numerics '{}' (expected fp32, fp64 or hf)", where, s));
}

std::string numerics_name(Numerics n) {
  switch (n) {
    case Numerics::fp32: return "fp32";
    case Numerics::fp64: return "fp64";
    case Numerics::hf: return "hf";
  }
  return "?";
}

int64_t OpContext::dim(const std::string& name) const {
  auto it = dims.find(name);
  if (it == dims.end()) throw InputError(fmt::format("missing dims.{}", name));
  return it->second;
}

double OpContext::constant(const std::string& name) const {
  auto it = constants.find(name);
  if (it == constants.end()) throw InputError(fmt::format("missing constants.{}", name));
  return it->second;
}

void register_families(Registry& reg);  // harness/src/families.cpp

Registry& Registry::global() {
  static Registry reg = [] {
    Registry r;
    register_families(r);
    return r;
  }();
  return reg;
}

void Registry::add(Op op) {
  const std::string name = op.name;
  if (!ops_.emplace(name, std::move(op)).second) throw std::logic_error("op registered twice: " + name);
}

void Registry::add(Variant v) {
  if (!ops_.count(v.op)) throw std::logic_error("variant " + v.id + " for unregistered op " + v.op);
  auto& list = variants_[v.op];
  for (const auto& existing : list)
    if (existing.id == v.id) throw std::logic_error("variant registered twice: " + v.op + " " + v.id);
  list.push_back(std::move(v));
}

bool Registry::has_op(const std::string& name) const { return ops_.count(name) > 0; }

const Op& Registry::op(const std::string& name) const {
  auto it = ops_.find(name);
  if (it == ops_.end()) {
    std::string known;
    for (const auto& [n, _] : ops_) known += (known.empty() ? "" : ", ") + n;
    throw InputError(fmt::format("unknown kernel '{}' (registered: {})", name, known));
  }
  return it->second;
}

std::vector<const Variant*> Registry::variants(const std::string& op) const {
  std::vector<const Variant*> out;
  if (auto it = variants_.find(op); it != variants_.end())
    for (const auto& v : it->second) out.push_back(&v);
  return out;
}

const Variant& Registry::variant(const std::string& op, const std::string& id) const {
  for (const Variant* v : variants(op))
    if (v->id == id) return *v;
  std::string known;
  for (const Variant* v : variants(op)) known += (known.empty() ? "" : ", ") + v->id;
  throw InputError(fmt::format("unknown variant '{}' for kernel '{}' (registered: {})", id, op, known));
}

std::vector<std::string> Registry::op_names() const {
  std::vector<std::string> names;
  for (const auto& [n, _] : ops_) names.push_back(n);
  return names;
}

bool cuda_available() { return at::hasCUDA() && at::getNumGPUs() > 0; }

}  // namespace parity
