#include "backends/cpu/cpu_backend.h"
#ifdef KILN_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif
#include "program/compiled_program.h"

namespace kiln::program {

const engine::BackendRegistry& builtin_backends() {
  static const engine::BackendRegistry* registry = [] {
    auto* r = new engine::BackendRegistry();
    r->add(cpu::make_cpu_backend());
    r->add(engine::make_null_backend());
#ifdef KILN_HAVE_CUDA
    r->add(cuda::make_cuda_backend());
#endif
    return r;
  }();
  return *registry;
}

}  // namespace kiln::program
