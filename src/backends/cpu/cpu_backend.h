// The CPU engine backend: builds plans from networks (elementwise fusion,
// kernel choice, memory plan) and runs them with the reference kernels, fused
// layers writing into one arena per call. The reference every other backend
// is checked against.
#pragma once

#include <memory>

#include "backends/cpu/kernel.h"
#include "engine/backend.h"

namespace kiln::cpu {

std::unique_ptr<engine::Backend> make_cpu_backend();

// Converts a 0-d tensor carrying a symbolic scalar across an engine boundary
// and back (engine inputs and outputs are tensors).
Tensor scalar_to_boundary_tensor(const RtValue& v);

}  // namespace kiln::cpu
