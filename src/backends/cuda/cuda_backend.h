// The CUDA engine backend (NVIDIA GPUs, sm_80 and newer; tuned for sm_90).
#pragma once

#include <memory>

#include "engine/backend.h"

namespace kiln::cuda {

// The backend; building needs a GPU (kernel choice is timed on it), as does
// loading and running. On a machine without one, build/load answer
// kUnsupported saying so.
std::unique_ptr<engine::Backend> make_cuda_backend();

}  // namespace kiln::cuda
