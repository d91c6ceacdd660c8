// The kernel interface: an Op (one stem, e.g. hc_post) is defined once by its reference; Variants are the
// optimized paths that must match it. A family registers both from its own files:
//   references/<family>.cpp      register_<family>_reference   (Op: inputs, outputs, reference, cost)
//   kernels/cpu/<family>.cpp     register_<family>_cpu         (Variants "cpu:*")
//   kernels/cuda/<family>.cpp    register_<family>_cuda        (Variants "cuda:*", launching kernels/cuda/<family>.cu)
#pragma once
#include <parity/tensor.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace parity {

// A reference is written once, line for line after the upstream (HF) composition; the numerics it runs at
// depend only on the dtypes it is fed (flash-attention's `upcast` switch):
enum class Numerics {
  fp32,  // floating inputs upcast to fp32: the reference of low-precision cases
  fp64,  // upcast to fp64: the reference of fp32 cases, whose naive composition is the fp32 one
  hf,    // inputs in their own dtype: rounds exactly where HF rounds (the naive low-precision composition)
};
Numerics parse_numerics(const std::string& s, const std::string& where);
std::string numerics_name(Numerics n);

using Dims = std::map<std::string, int64_t>;
using Constants = std::map<std::string, double>;

// Everything a case tells an op besides its tensors.
struct OpContext {
  Dims dims;                // e.g. tokens, hc, hidden
  Constants constants;      // e.g. hc_eps, rms_eps, sinkhorn_iters, post_mult
  at::ScalarType dtype = at::kBFloat16;  // activation dtype
  int64_t dim(const std::string& name) const;          // throws InputError naming the field
  double constant(const std::string& name) const;      // throws InputError naming the field
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  at::ScalarType dtype;
};

// Work an op must do, for the roofline: each input read once, each output written once.
struct Cost {
  double bytes = 0;
  double flops_fp32 = 0;    // CUDA-core fp32 FLOPs
  double flops_tensor = 0;  // tensor-core FLOPs
};

// A named step of an op's math, for stage bisection: which tensors it reads (op inputs or earlier stages'
// outputs), which it writes, and its reference composition on exactly those.
struct Stage {
  std::string name;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::function<TensorMap(const OpContext&, const TensorMap& inputs)> reference;
};

struct Op {
  std::string name;        // stem: "hc_post"
  std::string family;      // "hc"
  std::string provenance;  // the upstream math it mirrors
  std::vector<std::string> inputs;        // activations and parameters
  std::vector<std::string> outputs;       // forward outputs, in stage order (stage bisection walks them)
  std::vector<std::string> grad_outputs;  // outputs that receive an upstream gradient in the backward
  std::vector<std::string> grad_inputs;   // inputs that get a gradient (empty: forward-only op)
  std::vector<std::string> dims;          // the dims a case gives, every one (a name not listed is a typo)
  std::vector<std::string> constants;     // the constants it reads (a case or case file setting another: a typo)
  // Seeded inputs following the golden recipe's distributions, generated on `device` (large perf shapes are
  // generated where they run).
  std::function<TensorMap(const OpContext&, uint64_t seed, at::Device device)> make_inputs;
  std::function<std::vector<TensorSpec>(const OpContext&, const TensorMap& inputs)> output_specs;
  // Differentiable LibTorch composition; its autograd backward is the reference backward.
  std::function<TensorMap(const OpContext&, const TensorMap& inputs)> reference;
  // The same composition cut into stages, in order; every op output is some stage's output.
  std::vector<Stage> stages;
  std::function<Cost(const OpContext&, bool backward)> cost;
};

struct Variant {
  std::string id;  // "backend:version", e.g. "cuda:v1", "cpu:hf"
  std::string op;  // stem it implements
  at::DeviceType device = at::kCPU;
  std::string description;
  bool deterministic = true;
  std::vector<std::string> constants;  // case constants it reads beyond its op's
  // Writes every element of the preallocated, NaN-poisoned `out`; must leave `in` untouched.
  std::function<void(const OpContext&, const TensorMap& in, TensorMap& out)> forward;
  // `fwd_out` holds the forward outputs (tensors saved for backward); writes every element of `grads`
  // (one per Op::grad_inputs, each with its input's shape and dtype). Empty when not implemented.
  std::function<void(const OpContext&, const TensorMap& in, const TensorMap& fwd_out, const TensorMap& grad_out,
                     TensorMap& grads)>
      backward;
};

class Registry {
 public:
  static Registry& global();  // filled once with every family (harness/src/families.cpp)
  void add(Op op);
  void add(Variant v);
  const Op& op(const std::string& name) const;  // throws InputError: unknown kernel
  bool has_op(const std::string& name) const;
  std::vector<const Variant*> variants(const std::string& op) const;
  const Variant& variant(const std::string& op, const std::string& id) const;  // throws InputError
  std::vector<std::string> op_names() const;

 private:
  std::map<std::string, Op> ops_;
  std::map<std::string, std::vector<Variant>> variants_;
};

// True when a CUDA device is usable in this process.
bool cuda_available();

}  // namespace parity
