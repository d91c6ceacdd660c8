// The case runner. For one case: inputs (golden or seeded) -> reference forward and autograd backward ->
// naive low-precision composition when a policy needs it -> every variant, each run twice under guards
// (outputs poisoned, inputs and saved tensors snapshotted) -> checks under the case's policies.
#include <parity/error.hpp>
#include <parity/runner.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <functional>

namespace parity {

std::string status_name(Status s) {
  switch (s) {
    case Status::pass: return "PASS";
    case Status::fail: return "FAIL";
    case Status::skip: return "SKIP";
    case Status::error: return "ERROR";
  }
  return "?";
}

namespace {

// A second poison, finite and exact in every float dtype: an element that holds NaN after the first run and
// this value after the second was never written.
constexpr double kSecondPoison = -1536.0;

TensorMap to_device(const TensorMap& m, at::Device d) {
  TensorMap out;
  for (const auto& [k, v] : m) out[k] = v.to(d);
  return out;
}

// A variant's inputs: its own copy even where they already sit on its device, so that one that writes into them (a
// guard failure of its own) hands neither the next variant nor a later reference changed inputs.
TensorMap own_copy(const TensorMap& m, at::Device d) {
  TensorMap out;
  for (const auto& [k, v] : m) out[k] = v.to(d, v.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
  return out;
}

TensorMap upcast(const TensorMap& m, at::ScalarType to) {
  TensorMap out;
  for (const auto& [k, v] : m) out[k] = at::isFloatingType(v.scalar_type()) ? v.to(to) : v;
  return out;
}

// The reference's inputs: upcast for fp32/fp64, as they are for hf (the composition then rounds like HF).
TensorMap reference_inputs(const TensorMap& in, Numerics n) {
  switch (n) {
    case Numerics::fp32: return upcast(in, at::kFloat);
    case Numerics::fp64: return upcast(in, at::kDouble);
    case Numerics::hf: return in;
  }
  return in;
}

TensorMap clone_all(const TensorMap& m) {
  TensorMap out;
  for (const auto& [k, v] : m) out[k] = v.clone();
  return out;
}

// Reference or naive composition: forward, and the autograd backward driven by the upstream gradients.
struct Evaluated {
  TensorMap outputs;
  TensorMap grads;  // "grad/<input>"
};

Evaluated evaluate_composition(const Op& op, const Case& c, const TensorMap& inputs, const TensorMap& grad_outputs) {
  Evaluated r;
  if (!c.backward) {
    r.outputs = op.reference(c.ctx, inputs);
    return r;
  }
  TensorMap leaves;
  std::vector<at::Tensor> leaf_list;
  for (const auto& [k, v] : inputs) {
    const bool wants_grad = std::find(op.grad_inputs.begin(), op.grad_inputs.end(), k) != op.grad_inputs.end();
    leaves[k] = wants_grad ? v.detach().clone().requires_grad_(true) : v;
  }
  for (const auto& name : op.grad_inputs) leaf_list.push_back(leaves.at(name));
  TensorMap out = op.reference(c.ctx, leaves);
  std::vector<at::Tensor> roots, seeds;
  for (const auto& name : op.grad_outputs) {
    roots.push_back(out.at(name));
    seeds.push_back(grad_outputs.at(name).to(out.at(name).scalar_type()));
  }
  auto grads = torch::autograd::grad(roots, leaf_list, seeds, /*retain_graph=*/false, /*create_graph=*/false,
                                     /*allow_unused=*/true);
  for (size_t i = 0; i < op.grad_inputs.size(); ++i) {
    const at::Tensor& leaf = leaf_list[i];
    r.grads["grad/" + op.grad_inputs[i]] = grads[i].defined() ? grads[i].detach() : at::zeros_like(leaf).detach();
  }
  for (auto& [k, v] : out) r.outputs[k] = v.detach();
  return r;
}

// Golden tensors by the names checks use: outputs first, then stages; grads under "grad/<input>".
std::optional<at::Tensor> golden_tensor(const GoldenFile& g, const std::string& name) {
  if (name.rfind("grad/", 0) == 0) {
    const auto& grads = g.group("grads");
    if (auto it = grads.find(name.substr(5)); it != grads.end()) return it->second;
    return std::nullopt;
  }
  for (const char* group : {"outputs", "stages"}) {
    const auto& m = g.group(group);
    if (auto it = m.find(name); it != m.end()) return it->second;
  }
  return std::nullopt;
}

// A golden file generated for other constants than the case declares would compare different math.
void check_golden_matches_case(const GoldenFile& g, const Case& c) {
  const std::string where = fmt::format("{} (golden for case '{}')", g.path.string(), c.id);
  auto op_it = g.attrs.find("op");
  if (op_it == g.attrs.end() || op_it->second != c.op)
    throw InputError(fmt::format("{}: attr 'op' is '{}', the case is for '{}'", where,
                                 op_it == g.attrs.end() ? "" : op_it->second, c.op));
  auto cfg_it = g.attrs.find("config_json");
  if (cfg_it == g.attrs.end()) throw InputError(where + ": missing attr 'config_json'");
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(cfg_it->second);
  } catch (const std::exception& e) {
    throw InputError(fmt::format("{}: attr 'config_json' is not JSON: {}", where, e.what()));
  }
  auto expect = [&](const std::string& key, double want, const std::string& case_field) {
    if (!cfg.contains(key)) return;
    const double got = cfg[key].get<double>();
    if (got != want)
      throw InputError(fmt::format("{}: config_json.{} = {} but the case sets {} = {}", where, key, got, case_field, want));
  };
  for (const auto& [k, v] : c.ctx.constants) expect(k, v, "constants." + k);
  for (const auto& [k, v] : c.ctx.dims) expect(k, double(v), "dims." + k);
}

// got is want, or want with its first dim split into several (tokens given as [batch, seq]: the ops flatten
// leading dims).
bool same_shape_up_to_leading(at::IntArrayRef got, at::IntArrayRef want) {
  if (want.empty() || got.size() < want.size()) return got.equals(want);
  const size_t lead = got.size() - want.size() + 1;
  int64_t first = 1;
  for (size_t i = 0; i < lead; ++i) first *= got[i];
  return first == want[0] && got.slice(lead).equals(want.slice(1));
}

// A golden's tensors must be the ones the case describes, or the case would claim coverage it does not have (an fp32
// case run on a bf16 golden) or fail where the input is wrong. The case's dims and dtype give every input's shape and
// dtype (the op's seeded inputs at those dims, made on the CPU: golden cases are small), and those give the outputs',
// upstream gradients' and gradients'.
void check_golden_tensors(const GoldenFile& g, const Case& c, const Op& op) {
  const TensorMap want = op.make_inputs(c.ctx, 0, at::kCPU);
  auto same = [&](const std::string& group, const std::string& name, at::IntArrayRef shape, at::ScalarType dtype) {
    const auto& m = g.group(group);
    const auto it = m.find(name);
    if (it == m.end() || (same_shape_up_to_leading(it->second.sizes(), shape) && it->second.scalar_type() == dtype))
      return;
    throw InputError(fmt::format("{}: dataset '/{}/{}' is {}, but case '{}' ({}: dtype {}, dims {}) needs [{}] {}",
                                 g.path.string(), group, name, describe(it->second), c.id, c.file.string(),
                                 dtype_name(c.ctx.dtype), nlohmann::json(c.ctx.dims).dump(), fmt::join(shape, ", "),
                                 dtype_name(dtype)));
  };
  for (const auto& [name, t] : want) {
    same("inputs", name, t.sizes(), t.scalar_type());
    same("grads", name, t.sizes(), t.scalar_type());
  }
  for (const auto& s : op.output_specs(c.ctx, want))
    for (const char* group : {"outputs", "stages", "grad_outputs"}) same(group, s.name, s.shape, s.dtype);
}

void add_check(CaseResult& res, const std::string& variant, const std::string& tensor, const std::string& against,
               const Policy& p, const at::Tensor& actual, const at::Tensor& expected, const at::Tensor* naive,
               int first_n, const at::Tensor* naive_expected = nullptr) {
  Check chk{variant, tensor, against, p.text, evaluate(p, actual, expected, naive, first_n, naive_expected)};
  res.checks.push_back(std::move(chk));
}

std::string join_counts(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : "; ") + p;
  return s;
}

// Allocates `specs` on `device`, poisoned with NaN (run 1) or the finite second poison (run 2).
TensorMap allocate(const std::vector<TensorSpec>& specs, at::Device device, bool second) {
  TensorMap m;
  for (const auto& s : specs) {
    at::Tensor t = at::empty(s.shape, at::TensorOptions().dtype(s.dtype).device(device));
    if (second && at::isFloatingType(s.dtype))
      t.fill_(kSecondPoison);
    else
      poison(t);
    m[s.name] = t;
  }
  return m;
}

// One phase's two runs (run 1 poisoned with NaN, run 2 with the second poison), each into buffers allocated here. What
// the guards need is gathered after every run, not once after both: a change to a watched tensor that the second run
// undoes (negated, then negated back) is still a change, and a buffer the variant replaced or dropped is not written.
struct TwoRuns {
  TensorMap run1, run2;               // the buffers each run was given: checks read these
  std::vector<std::string> changed;   // watched tensors modified in place, per run
  std::vector<std::string> replaced;  // output buffers not written in place, per run
};

TwoRuns run_twice(const std::vector<TensorSpec>& specs, at::Device dev, const TensorMap& watched,
                  const std::function<void(TensorMap&)>& call) {
  const TensorMap before = clone_all(watched);
  TwoRuns r;
  for (const int run : {1, 2}) {
    const TensorMap given = allocate(specs, dev, run == 2);
    TensorMap out = given;
    call(out);
    for (const auto& [k, t] : given) {
      const auto it = out.find(k);
      if (it == out.end()) r.replaced.push_back(fmt::format("'{}' removed from the outputs (run {})", k, run));
      else if (!it->second.is_same(t)) r.replaced.push_back(fmt::format("'{}' replaced by another tensor (run {})", k, run));
    }
    for (const auto& [k, t] : out)
      if (!given.count(k)) r.replaced.push_back(fmt::format("'{}' added to the outputs (run {})", k, run));
    for (const auto& [k, v] : before) {
      const int64_t n = bitwise_diff_count(v, watched.at(k));
      if (n) r.changed.push_back(fmt::format("'{}' {} of {} elements after run {}", k, n, v.numel(), run));
    }
    (run == 1 ? r.run1 : r.run2) = given;
  }
  return r;
}

// Guards shared by forward and backward: nothing the variant reads may change, every element it owns must be
// written, and (unless declared nondeterministic) two runs agree bitwise.
void guard_runs(CaseResult& res, const Case& c, const std::string& vid, const std::string& phase, const TwoRuns& r) {
  res.guards.push_back({vid, phase + ": inputs unchanged", r.changed.empty(),
                        r.changed.empty() ? "" : "modified in place: " + join_counts(r.changed)});
  std::vector<std::string> unwritten = r.replaced, nondet;
  for (const auto& [k, v1] : r.run1) {
    const at::Tensor& v2 = r.run2.at(k);
    if (at::isFloatingType(v1.scalar_type())) {
      // Still the second poison after run 2, and not that value after run 1: run 2 never wrote it. That is also
      // every element neither run wrote (NaN, then the poison). An element only run 1 left NaN fails the checks,
      // which read run 1; run 2's gaps would go unseen where the case declares the variant nondeterministic.
      const int64_t n = ((v2 == kSecondPoison) & (v1 != kSecondPoison)).sum().item<int64_t>();
      if (n) unwritten.push_back(fmt::format("'{}' {} of {} elements", k, n, v1.numel()));
    }
    if (c.deterministic) {
      const int64_t n = bitwise_diff_count(v1, v2);
      if (n) nondet.push_back(fmt::format("'{}' {} of {} elements differ", k, n, v1.numel()));
    }
  }
  res.guards.push_back({vid, phase + ": every output element written", unwritten.empty(),
                        unwritten.empty() ? "" : "never written (still poison): " + join_counts(unwritten)});
  if (c.deterministic)
    res.guards.push_back({vid, phase + ": deterministic (two runs bitwise equal)", nondet.empty(),
                          nondet.empty() ? "" : "run-to-run: " + join_counts(nondet)});
}

void run_variant(CaseResult& res, const Case& c, const Op& op, const Variant& v, const CaseInputs& ci,
                 const Evaluated& ref, const std::optional<Evaluated>& naive, const RunOptions& opts) {
  const at::Device dev(v.device);
  const TensorMap in = own_copy(ci.inputs, dev);
  const TwoRuns fwd = run_twice(op.output_specs(c.ctx, in), dev, in, [&](TensorMap& out) { v.forward(c.ctx, in, out); });
  guard_runs(res, c, v.id, "forward", fwd);

  auto compare_all = [&](const TensorMap& actual, const TensorMap& expected_ref, const TensorMap* naive_map,
                         const std::string& prefix) {
    for (const auto& [name, t] : actual) {
      const std::string key = prefix + name;
      const Policy& p = c.policy.at(key);
      const at::Tensor* nv = naive_map ? &naive_map->at(key) : nullptr;
      add_check(res, v.id, key, "ref:" + numerics_name(c.reference), p, t, expected_ref.at(key),
                nv, opts.first_n);
      if (ci.golden)
        if (auto g = golden_tensor(*ci.golden, key))
          add_check(res, v.id, key, "golden", against_golden(p), t, *g, nv, opts.first_n, &expected_ref.at(key));
    }
  };
  compare_all(fwd.run1, ref.outputs, naive ? &naive->outputs : nullptr, "");

  if (!c.backward) return;
  if (!v.backward) {
    res.variants.back().status = Status::error;
    res.variants.back().skip_reason = "the case runs backward but this variant has no backward";
    return;
  }
  const TensorMap gout = to_device(ci.grad_outputs, dev);
  const TensorMap& saved = fwd.run1;  // the forward outputs a backward may read (tensors saved for backward)
  TensorMap watched = in;
  for (const auto& [k, t] : saved) watched["saved:" + k] = t;
  for (const auto& [k, t] : gout) watched["grad_out:" + k] = t;
  std::vector<TensorSpec> grad_specs;
  for (const auto& name : op.grad_inputs)
    grad_specs.push_back({name, in.at(name).sizes().vec(), in.at(name).scalar_type()});
  const TwoRuns bwd =
      run_twice(grad_specs, dev, watched, [&](TensorMap& grads) { v.backward(c.ctx, in, saved, gout, grads); });
  guard_runs(res, c, v.id, "backward", bwd);
  TensorMap named;
  for (const auto& [k, t] : bwd.run1) named["grad/" + k] = t;
  compare_all(named, ref.grads, naive ? &naive->grads : nullptr, "");
}

bool any_needs_naive(const Case& c) {
  for (const auto& [_, p] : c.policy)
    if (needs_naive(p)) return true;
  return false;
}

struct References {
  Evaluated ref;
  std::optional<Evaluated> naive;  // the composition at the inputs' own dtypes (HF's rounding)
};

References evaluate_references(const Op& op, const Case& c, const CaseInputs& ci, at::Device d) {
  const TensorMap in = to_device(ci.inputs, d);
  const TensorMap gout = to_device(ci.grad_outputs, d);
  References r;
  r.ref = evaluate_composition(op, c, reference_inputs(in, c.reference), gout);
  if (c.reference == Numerics::hf)
    r.naive = r.ref;
  else if (any_needs_naive(c) || ci.golden)
    r.naive = evaluate_composition(op, c, in, gout);
  return r;
}

}  // namespace

GoldenFile find_golden(const Case& c, const RunOptions& opts) {
  for (const auto& dir : opts.golden_dirs) {
    if (!std::filesystem::exists(dir / *c.golden)) continue;
    const auto manifest = dir / "MANIFEST.json";
    if (!std::filesystem::exists(manifest))
      throw InputError(fmt::format("{}: no MANIFEST.json beside golden file '{}'", dir.string(), *c.golden));
    return load_verified(read_manifest(manifest), *c.golden);
  }
  std::string searched;
  for (const auto& d : opts.golden_dirs) searched += (searched.empty() ? "" : ", ") + d.string();
  throw InputError(fmt::format("{}: case '{}' golden '{}' not found (searched: {})", c.file.string(), c.id, *c.golden,
                               searched));
}

CaseInputs prepare_inputs(const Case& c, const Registry& reg, const RunOptions& opts) {
  const Op& op = reg.op(c.op);
  CaseInputs ci;
  if (c.golden) {
    ci.golden = find_golden(c, opts);
    check_golden_matches_case(*ci.golden, c);
    check_golden_tensors(*ci.golden, c, op);
    for (const auto& name : op.inputs) {
      auto it = ci.golden->group("inputs").find(name);
      if (it == ci.golden->group("inputs").end())
        throw InputError(fmt::format("{}: missing dataset '/inputs/{}'", ci.golden->path.string(), name));
      ci.inputs[name] = it->second;
    }
    if (c.backward)
      for (const auto& name : op.grad_outputs) {
        auto it = ci.golden->group("grad_outputs").find(name);
        if (it == ci.golden->group("grad_outputs").end())
          throw InputError(fmt::format("{}: missing dataset '/grad_outputs/{}'", ci.golden->path.string(), name));
        ci.grad_outputs[name] = it->second;
      }
    return ci;
  }
  const bool on_gpu = cuda_available() && !opts.force_cpu;
  const at::Device dev = on_gpu ? at::Device(at::kCUDA) : at::Device(at::kCPU);
  ci.inputs = op.make_inputs(c.ctx, *c.seed, dev);
  if (c.backward) {
    // Random upstream gradients, never all-ones: symmetric seeds hide transposes and sign errors. Each has its
    // output's dtype, as a training step would hand it over.
    const auto specs = op.output_specs(c.ctx, ci.inputs);
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(*c.seed + 0x9e3779b9ull);
    for (const auto& name : op.grad_outputs) {
      auto spec = std::find_if(specs.begin(), specs.end(), [&](const TensorSpec& s) { return s.name == name; });
      at::Tensor g = at::normal(0.0, 1.0, spec->shape, gen, at::TensorOptions().dtype(at::kFloat));
      ci.grad_outputs[name] = g.to(spec->dtype).to(dev);
    }
  }
  return ci;
}

CaseResult run_case(const Case& c, const Registry& reg, const RunOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  CaseResult res;
  res.case_id = c.id;
  res.op = c.op;
  res.covers = c.covers;
  try {
    const Op& op = reg.op(c.op);
    const bool gpu = cuda_available() && !opts.force_cpu;
    // fp32 references on the GPU must not take the TF32 shortcut.
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);

    // Each variant's fate is settled before any tensor work: a case none of whose variants can run here costs
    // nothing (a production-shape CUDA case on a CPU machine), and is reported as skipped.
    std::vector<const Variant*> runnable;
    for (const auto& vid : c.variants) {
      if (opts.only_variant && *opts.only_variant != vid) {
        res.variants.push_back({vid, Status::skip, "not selected (--variant " + *opts.only_variant + ")"});
        continue;
      }
      if (auto s = c.skip.find(vid); s != c.skip.end()) {
        res.variants.push_back({vid, Status::skip, s->second});
        continue;
      }
      const bool cuda_backend = vid.rfind("cuda:", 0) == 0;
#ifndef PARITY_WITH_CUDA
      if (cuda_backend) {
        res.variants.push_back({vid, Status::skip, "CUDA variants not built (PARITY_CUDA=OFF, or LibTorch's CUDA is not nvcc's)"});
        continue;
      }
#endif
      const Variant& v = reg.variant(c.op, vid);
      if (cuda_backend && !gpu) {
        res.variants.push_back({vid, Status::skip, opts.force_cpu ? "CUDA disabled (--cpu)" : "no CUDA device"});
        continue;
      }
      runnable.push_back(&v);
    }

    if (!runnable.empty() || c.golden) {
      CaseInputs ci = prepare_inputs(c, reg, opts);
      // References are evaluated on the device of the path they judge (once per device): the hf composition's
      // rounding order is the device library's (oneDNN on the CPU, cuBLAS on the GPU), and HF's goldens come
      // from the CPU.
      std::map<at::DeviceType, References> refs;
      auto refs_on = [&](at::Device d) -> const References& {
        if (auto it = refs.find(d.type()); it != refs.end()) return it->second;
        return refs.emplace(d.type(), evaluate_references(op, c, ci, d)).first->second;
      };

      // HF parity of the reference: the composition at the golden's own dtypes against HF's numbers.
      if (ci.golden)
        for (const auto& [name, p] : c.golden_policy) {
          auto g = golden_tensor(*ci.golden, name);
          if (!g) throw InputError(fmt::format("{}: no golden dataset for '{}'", ci.golden->path.string(), name));
          const References& cpu = refs_on(at::kCPU);
          const bool grad = name.rfind("grad/", 0) == 0;
          const at::Tensor& mirror = grad ? cpu.naive->grads.at(name) : cpu.naive->outputs.at(name);
          const at::Tensor& truth = grad ? cpu.ref.grads.at(name) : cpu.ref.outputs.at(name);
          // naive_relative here bounds |mirror - HF| by k times the mirror's own error against the reference:
          // two orderings of the same low-precision sums (another CPU's BLAS) differ by about their errors.
          add_check(res, "ref:hf", name, "golden", p, mirror, *g, &mirror, opts.first_n, &truth);
        }

      for (const Variant* v : runnable) {
        res.variants.push_back({v->id, Status::pass, ""});
        const size_t before = res.checks.size(), guards_before = res.guards.size();
        try {
          const References& r = refs_on(at::Device(v->device));
          run_variant(res, c, op, *v, ci, r.ref, r.naive, opts);
        } catch (const std::exception& e) {
          res.variants.back() = {v->id, Status::error, error_message(e)};
          continue;
        }
        VariantRun& vr = res.variants.back();
        if (vr.status == Status::error) continue;
        for (size_t i = before; i < res.checks.size(); ++i)
          if (!res.checks[i].result.pass) vr.status = Status::fail;
        for (size_t i = guards_before; i < res.guards.size(); ++i)
          if (!res.guards[i].pass) vr.status = Status::fail;
      }
    }

    bool ran = false, failed = false, errored = false;
    for (const auto& vr : res.variants) {
      ran |= vr.status == Status::pass || vr.status == Status::fail;
      failed |= vr.status == Status::fail;
      errored |= vr.status == Status::error;
    }
    for (const auto& chk : res.checks)
      if (chk.variant == "ref:hf" && !chk.result.pass) failed = true;
    res.status = errored ? Status::error : failed ? Status::fail : ran ? Status::pass : Status::skip;
    if (errored)
      for (const auto& vr : res.variants)
        if (vr.status == Status::error) res.error += (res.error.empty() ? "" : "; ") + vr.variant + ": " + vr.skip_reason;
  } catch (const std::exception& e) {
    res.status = Status::error;
    res.error = error_message(e);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace parity
