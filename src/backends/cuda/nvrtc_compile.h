// Compiling generated CUDA C++ to a cubin with NVRTC, at engine build time.
// Needs no GPU: the target architecture is given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/status.h"

namespace kiln::cuda {

struct CompiledModule {
  std::vector<uint8_t> cubin;
  // Per name expression given to compile_cuda_source (a kernel template's
  // instance, "kiln::gemv<float, 1, ...>"): its kernel's name in the cubin.
  std::vector<std::string> lowered_names;
  std::string log;  // NVRTC's messages (warnings)
  double seconds = 0;
};

// Compiles `source` for `arch` ("sm_90"), with kiln's kernel headers
// (kernel_headers.h) available to #include as "kiln/<file>.cuh", and
// instantiates each of `name_expressions` (kernel template instances; their
// names in the cubin are returned in order). kInternal with NVRTC's log and
// the numbered source lines around the first error when compilation fails.
Expected<CompiledModule> compile_cuda_source(const std::string& source, const std::string& arch,
                                             const std::string& name = "kiln_engine.cu",
                                             const std::vector<std::string>& name_expressions = {});

// NVRTC's version as "major.minor" (part of an engine's identity).
std::string nvrtc_version();

}  // namespace kiln::cuda
