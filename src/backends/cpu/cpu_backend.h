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

}  // namespace kiln::cpu
