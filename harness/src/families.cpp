// Every kernel family registers here: its reference (the Op) and its CPU and CUDA variants.
#include <parity/op.hpp>

#include "references/hc.hpp"

namespace parity {

void register_planted(Registry& reg);  // harness/src/planted.cpp

void register_families(Registry& reg) {
  hc::register_hc_reference(reg);
  hc::register_hc_cpu(reg);
#ifdef PARITY_WITH_CUDA
  hc::register_hc_cuda(reg);
#endif
  register_planted(reg);  // after every family: planted faults wrap their cpu:v1 variants
}

}  // namespace parity
