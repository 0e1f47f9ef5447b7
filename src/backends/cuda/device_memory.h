// The CUDA backend's device memory for the runtime (engine::DeviceMemory):
// tensors in device memory from a pool that keeps freed blocks for reuse (a
// call that allocates the same sizes each time allocates nothing after the
// first), and copies between host and device memory.
#pragma once

#include "engine/backend.h"

namespace kiln::cuda {

// The process's one CUDA device memory (the current device).
const engine::DeviceMemory& cuda_device_memory();

}  // namespace kiln::cuda
