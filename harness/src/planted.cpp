// Planted faults: variants that wrap a correct one and break exactly one property the gate must defend.
// Generic faults wrap the op's most exact CPU variant (cpu:hf where it exists: bitwise to the HF composition, so
// a one-ULP fault is visible under a bitwise policy; else cpu:v1); math faults of a family wrap its cpu:v1. They are registered like any variant but never selected by default (case.cpp); only the cases
// under tests/data/planted name them, and each must fail with a message naming the fault.
#include <parity/op.hpp>

#include <atomic>

namespace parity {

namespace {

using Forward = std::function<void(const OpContext&, const TensorMap&, TensorMap&)>;

at::Tensor first_flat(TensorMap& out) { return out.begin()->second.view({-1}); }

// Moves one element one ULP away from zero: integer view of the same width, +1 on the bit pattern.
void bump_one_ulp(at::Tensor flat) {
  const auto int_type = flat.element_size() == 2 ? at::kShort : flat.element_size() == 4 ? at::kInt : at::kLong;
  flat.view(int_type).narrow(0, 0, 1).add_(1);
}

Variant wrap(const Variant& base, std::string id, std::string what, Forward fwd) {
  Variant v = base;
  v.id = std::move(id);
  v.description = std::move(what);
  v.forward = std::move(fwd);
  return v;
}

// `base` by value: adding variants reallocates the registry's list it came from.
void add_generic(Registry& reg, const Variant base) {
  const Forward b = base.forward;
  reg.add(wrap(base, "planted:ulp", "one output element off by one ULP",
               [b](const OpContext& c, const TensorMap& in, TensorMap& out) {
                 b(c, in, out);
                 bump_one_ulp(first_flat(out));
               }));
  reg.add(wrap(base, "planted:nan", "a NaN in an output",
               [b](const OpContext& c, const TensorMap& in, TensorMap& out) {
                 b(c, in, out);
                 first_flat(out).narrow(0, 0, 1).fill_(std::numeric_limits<double>::quiet_NaN());
               }));
  reg.add(wrap(base, "planted:mutate_input", "an input modified in place",
               [b](const OpContext& c, const TensorMap& in, TensorMap& out) {
                 b(c, in, out);
                 in.begin()->second.view({-1}).narrow(0, 0, 1).add_(1.0);
               }));
  reg.add(wrap(base, "planted:unwritten", "an output element never written",
               [b](const OpContext& c, const TensorMap& in, TensorMap& out) {
                 const at::Tensor poison = first_flat(out).narrow(0, 0, 1).clone();
                 b(c, in, out);
                 first_flat(out).narrow(0, 0, 1).copy_(poison);
               }));
  auto calls = std::make_shared<std::atomic<int>>(0);
  reg.add(wrap(base, "planted:nondeterministic", "every other run differs by one ULP",
               [b, calls](const OpContext& c, const TensorMap& in, TensorMap& out) {
                 b(c, in, out);
                 if ((*calls)++ % 2) bump_one_ulp(first_flat(out));
               }));
  // The repeat count is a case constant so that a test can time the same path key before (1) and after (2) the
  // regression: perf verdicts compare records of one case, path and direction.
  Variant slow = wrap(base, "planted:slow", "does its work planted_repeats times (default 2: a 2x slowdown)",
                      [b](const OpContext& c, const TensorMap& in, TensorMap& out) {
                        const auto it = c.constants.find("planted_repeats");
                        const int repeats = it == c.constants.end() ? 2 : static_cast<int>(it->second);
                        for (int i = 0; i < repeats; ++i) b(c, in, out);
                      });
  slow.constants = {"planted_repeats"};
  reg.add(std::move(slow));
}

// Math faults of the hyper-connection family: the bugs the upstream ports actually had.
void add_hc(Registry& reg) {
  const Variant post = reg.variant("hc_post", "cpu:v1");  // a copy, see add_generic
  const Forward bp = post.forward;
  reg.add(wrap(post, "planted:comb_untransposed", "hc_post mixing with comb instead of comb^T",
               [bp](const OpContext& c, const TensorMap& in, TensorMap& out) {
                 TensorMap swapped = in;
                 swapped["comb"] = in.at("comb").transpose(-1, -2).contiguous();
                 bp(c, swapped, out);
               }));
  reg.add(wrap(post, "planted:extra_bf16_round", "hc_post rounding post and comb to bf16 before mixing",
               [bp](const OpContext& c, const TensorMap& in, TensorMap& out) {
                 TensorMap rounded = in;
                 rounded["post"] = in.at("post").to(at::kBFloat16).to(at::kFloat);
                 rounded["comb"] = in.at("comb").to(at::kBFloat16).to(at::kFloat);
                 bp(c, rounded, out);
               }));
}

bool has_variant(const Registry& reg, const std::string& op, const std::string& id) {
  for (const Variant* v : reg.variants(op))
    if (v->id == id) return true;
  return false;
}

// A fault inside one stage of a multi-stage op, for stage bisection: hc_pre's gate stage rounds pre to bf16, and the
// collapse consumes the rounded pre correctly, so only the gates stage is wrong on its own.
void add_staged(Registry& reg) {
  const Variant pre = reg.variant("hc_pre", "cpu:v1");  // a copy, see add_generic
  const Forward bp = pre.forward;
  reg.add(wrap(pre, "planted:pre_rounded", "hc_pre gates: pre rounded to bf16 (collapse then uses it correctly)",
               [bp](const OpContext& c, const TensorMap& in, TensorMap& out) {
                 bp(c, in, out);
                 const at::Tensor rounded = out.at("pre").to(at::kBFloat16).to(at::kFloat);
                 out.at("pre").copy_(rounded);
                 const at::Tensor& x = in.at("x");
                 out.at("collapsed").copy_((rounded.unsqueeze(-1) * x.to(at::kFloat)).sum(-2).to(x.scalar_type()));
               }));
}

}  // namespace

void register_planted(Registry& reg) {
  for (const auto& name : reg.op_names())
    for (const char* base : {"cpu:hf", "cpu:v1"})
      if (has_variant(reg, name, base)) {
        add_generic(reg, reg.variant(name, base));
        break;
      }
  add_hc(reg);
  add_staged(reg);
}

}  // namespace parity
