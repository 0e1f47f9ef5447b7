#include "backends/cpu/cpu_backend.h"
#include "program/compiled_program.h"

namespace kiln::program {

const engine::BackendRegistry& builtin_backends() {
  static const engine::BackendRegistry* registry = [] {
    auto* r = new engine::BackendRegistry();
    r->add(cpu::make_cpu_backend());
    r->add(engine::make_null_backend());
    return r;
  }();
  return *registry;
}

}  // namespace kiln::program
