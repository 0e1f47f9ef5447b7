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
  // environment's KILN_CUDA_SHAPES, or without it every shape of an engine
  // whose plan holds a table of at most 1024 shapes (each prepared, its
  // graph captured, when a context opens), else 16.
  size_t shapes_kept = 0;
  // How many calls of one engine run side by side at most, each on an
  // execution context of its own (arena, stream, library handles, prepared
  // shapes, graphs) over the engine's one copy of its weights and kernels;
  // contexts open as concurrent calls need them. 0: the environment's
  // KILN_CUDA_CONTEXTS, or 8 without it (opened as concurrent calls need them).
  size_t contexts = 0;
};

// Work done while serving calls, process-wide: what a range engine's new
// shapes cost, and how many CUDA graphs were captured. For tests and benchmarks.
struct RunTimeWork {
  uint64_t shapes_prepared = 0;    // new shapes of range engines made ready
  uint64_t shapes_planned = 0;     // of them, those planned from the layer graph (no shape table in the plan)
  uint64_t kernels_compiled = 0;   // kernels compiled for them (the build planned all others)
  uint64_t algorithms_chosen = 0;  // GEMM and convolution algorithms chosen for them, none timed
  uint64_t graphs_captured = 0;
};
RunTimeWork run_time_work();

// The backend; building needs a GPU (kernel choice is timed on it), as does
// loading and running. On a machine without one, build/load answer
// kUnsupported saying so.
std::unique_ptr<engine::Backend> make_cuda_backend(const CudaBackendOptions& options = {});

// The device copies of weights alive in this process (engines made from one
// host weight in one device form share one copy), and their bytes.
std::pair<size_t, uint64_t> device_weight_copies();

}  // namespace kiln::cuda
