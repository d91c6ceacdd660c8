// A candidate file becomes a variant whose forward and backward copy the stored tensors: run_case then checks it
// exactly as it checks a built-in variant (reference, golden, guards, messages), so compare cannot drift from run.
#include <parity/candidate.hpp>
#include <parity/error.hpp>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#include <chrono>

namespace parity {

namespace fs = std::filesystem;

namespace {

std::string shape_text(at::IntArrayRef s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

std::string config_json(const Case& c) {
  nlohmann::json cfg{{"dtype", dtype_name(c.ctx.dtype)}, {"reference", numerics_name(c.reference)}};
  for (const auto& [k, v] : c.ctx.dims) cfg[k] = v;
  for (const auto& [k, v] : c.ctx.constants) cfg[k] = v;
  return cfg.dump();
}

std::vector<TensorSpec> grad_specs(const Op& op, const TensorMap& inputs) {
  std::vector<TensorSpec> specs;
  for (const auto& name : op.grad_inputs)
    specs.push_back({name, inputs.at(name).sizes().vec(), inputs.at(name).scalar_type()});
  return specs;
}

// The tensors of one candidate group, exactly those of `specs`, each with its shape and dtype.
TensorMap candidate_group(const GoldenFile& cand, const std::string& group, const std::vector<TensorSpec>& specs,
                          const std::string& op) {
  const TensorMap& stored = cand.group(group);
  TensorMap out;
  for (const auto& s : specs) {
    const std::string where = fmt::format("{}: dataset '/{}/{}'", cand.path.string(), group, s.name);
    const auto it = stored.find(s.name);
    if (it == stored.end()) throw InputError(where + ": missing (the case needs it)");
    const at::Tensor& t = it->second;
    if (t.sizes() != at::IntArrayRef(s.shape) || t.scalar_type() != s.dtype)
      throw InputError(fmt::format("{}: holds {} {}, the case needs {} {}", where, shape_text(t.sizes()),
                                   dtype_name(t.scalar_type()), shape_text(s.shape), dtype_name(s.dtype)));
    out[s.name] = t;
  }
  for (const auto& [name, _] : stored)
    if (!out.count(name))
      throw InputError(fmt::format("{}: dataset '/{}/{}': not {} of {}", cand.path.string(), group, name,
                                   group == "grads" ? "a gradient input" : "an output", op));
  return out;
}

// Outputs computed from other inputs (or upstream gradients) than the case's would be judged against the wrong
// reference: a candidate that hands back /inputs or /grad_outputs must hand back exactly the case's, and nothing more.
void check_same(const GoldenFile& cand, const std::string& group, const TensorMap& mine_by_name) {
  const TensorMap& stored = cand.group(group);
  if (stored.empty()) return;
  for (const auto& [name, t] : mine_by_name) {
    const std::string where = fmt::format("{}: dataset '/{}/{}'", cand.path.string(), group, name);
    const auto it = stored.find(name);
    if (it == stored.end()) throw InputError(fmt::format("{}: missing (a candidate's /{} must hold all of them)", where, group));
    const at::Tensor mine = t.cpu();
    if (it->second.sizes() != mine.sizes() || it->second.scalar_type() != mine.scalar_type() ||
        !bitwise_equal(it->second, mine))
      throw InputError(fmt::format("{}: differs from the case's (export the inputs again with --export-inputs, on a "
                                   "machine of the same kind)",
                                   where));
  }
  for (const auto& [name, _] : stored)
    if (!mine_by_name.count(name))
      throw InputError(fmt::format("{}: dataset '/{}/{}': the case has no such tensor", cand.path.string(), group, name));
}

Variant candidate_variant(const Op& op, TensorMap outputs, TensorMap grads) {
  Variant v;
  v.id = kCandidateVariant;
  v.op = op.name;
  v.device = at::kCPU;
  v.description = "outputs read from a candidate file";
  v.forward = [outputs](const OpContext&, const TensorMap&, TensorMap& out) {
    for (auto& [name, t] : out) t.copy_(outputs.at(name));
  };
  if (!grads.empty())
    v.backward = [grads](const OpContext&, const TensorMap&, const TensorMap&, const TensorMap&, TensorMap& out) {
      for (auto& [name, t] : out) t.copy_(grads.at(name));
    };
  return v;
}

}  // namespace

GoldenFile exported_inputs(const Case& c, const Registry& reg, const RunOptions& opts) {
  const Op& op = reg.op(c.op);
  const CaseInputs ci = prepare_inputs(c, reg, opts);
  nlohmann::json outputs = nlohmann::json::array();
  for (const auto& s : op.output_specs(c.ctx, ci.inputs))
    outputs.push_back({{"name", s.name}, {"shape", s.shape}, {"dtype", dtype_name(s.dtype)}});
  GoldenFile g;
  g.attrs = {{"schema_version", "1"},
             {"op", c.op},
             {"case", c.id},
             {"config_json", config_json(c)},
             {"outputs_json", outputs.dump()},
             {"grad_inputs_json", nlohmann::json(c.backward ? op.grad_inputs : std::vector<std::string>{}).dump()},
             {"generator", "parity compare --export-inputs (LibTorch " TORCH_VERSION ")"},
             {"created", fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", std::chrono::floor<std::chrono::seconds>(
                                                                  std::chrono::system_clock::now()))}};
  if (c.seed) g.attrs["seed"] = std::to_string(*c.seed);
  if (c.golden) g.attrs["golden"] = *c.golden;  // where the inputs came from
  for (const auto& [name, t] : ci.inputs) g.groups["inputs"][name] = t.cpu();
  for (const auto& [name, t] : ci.grad_outputs) g.groups["grad_outputs"][name] = t.cpu();
  return g;
}

CandidateResult compare_candidate(const Case& c, const Registry& reg, const RunOptions& opts, const fs::path& path) {
  const GoldenFile cand = read_golden(path);
  const Op& op = reg.op(c.op);
  const CaseInputs ci = prepare_inputs(c, reg, opts);
  check_same(cand, "inputs", ci.inputs);
  check_same(cand, "grad_outputs", ci.grad_outputs);
  // Stage tensors are checked as the op's outputs (hc_pre's mixes, pre, post and comb are outputs): a /stages group
  // would be read by nothing, and its holder would take that for a check.
  if (!cand.group("stages").empty())
    throw InputError(fmt::format("{}: group '/stages': not read by parity compare (put the op's outputs, stages "
                                 "included, in /outputs)",
                                 path.string()));
  const TensorMap outputs = candidate_group(cand, "outputs", op.output_specs(c.ctx, ci.inputs), c.op);
  const bool has_grads = cand.groups.count("grads") > 0;
  if (has_grads && !c.backward)
    throw InputError(fmt::format("{}: group '/grads': case '{}' checks the forward only (backward = false)",
                                 path.string(), c.id));
  const TensorMap grads = has_grads ? candidate_group(cand, "grads", grad_specs(op, ci.inputs), c.op) : TensorMap{};

  Case checked = c;
  checked.variants = {kCandidateVariant};
  checked.skip.clear();
  checked.backward = has_grads;
  // Without the candidate's gradients there is no backward run, so no reference gradient for HF's to meet.
  if (!has_grads)
    std::erase_if(checked.golden_policy, [](const auto& kv) { return kv.first.rfind("grad/", 0) == 0; });
  Registry with_candidate = reg;
  with_candidate.add(candidate_variant(op, outputs, grads));
  return {run_case(checked, with_candidate, opts), has_grads};
}

}  // namespace parity
