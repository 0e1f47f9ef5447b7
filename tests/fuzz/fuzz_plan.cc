// An engine plan: section file, meta JSON, layer graph, alias map, memory
// plan; then the CPU backend's load (kernels, fused programs, constants).
#include "backends/cpu/cpu_backend.h"
#include "engine/plan.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto backend = kiln::cpu::make_cpu_backend();
  auto plan = kiln::engine::deserialize_plan({data, size}, "cpu", "fuzz plan");
  if (!plan) return 0;
  // Constants the plan names: zeros of the declared type, so load() gets past them.
  kiln::engine::WeightLookup weights = [&](const std::string& name) -> kiln::Expected<kiln::Tensor> {
    const auto& g = plan->network.graph;
    for (size_t i = 0; i < plan->network.constant_names.size(); ++i)
      if (plan->network.constant_names[i] == name) {
        const kiln::ir::Value* v = g.inputs()[plan->network.num_inputs + i];
        kiln::Shape sizes;
        int64_t n = 1;
        for (const auto& d : v->type.sizes) {
          if (!d.is_static() || d.value > 4096) return kiln::not_found("too large for the fuzzer");
          sizes.push_back(d.value);
          n *= d.value;
        }
        if (n > (1 << 20)) return kiln::not_found("too large for the fuzzer");
        return kiln::Tensor::zeros(v->type.dtype, sizes);
      }
    return kiln::not_found("no weight '" + name + "'");
  };
  auto h = backend->load({data, size}, weights, "fuzz plan");
  if (h) backend->destroy(*h);
  return 0;
}
