// The CUDA engine backend (NVIDIA GPUs, sm_80 and newer; tuned for sm_90).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "engine/backend.h"

namespace kiln::cuda {

struct CudaBackendOptions {
  // Generated kernels take every size they read at run time instead of
  // compiled in (BuildConfig::sizes_at_run_time), for tests of that form.
  bool sizes_at_run_time = false;
  // How many shapes an engine built for a range keeps ready to run (the
  // active one included): each with its steps, GEMM and convolution
  // descriptors and captured CUDA graphs, least recently used dropped first.
  // A shape not kept is made again from the engine's plan when it next comes
  // (no build: its kernels and algorithms are remembered). 0: the
  // environment's KILN_CUDA_SHAPES, or 16 without it.
  size_t shapes_kept = 0;
};

// The backend; building needs a GPU (kernel choice is timed on it), as does
// loading and running. On a machine without one, build/load answer
// kUnsupported saying so.
std::unique_ptr<engine::Backend> make_cuda_backend(const CudaBackendOptions& options = {});

// The device copies of weights alive in this process (engines made from one
// host weight in one device form share one copy), and their bytes.
std::pair<size_t, uint64_t> device_weight_copies();

}  // namespace kiln::cuda
