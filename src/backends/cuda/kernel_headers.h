// kiln's CUDA kernel sources (src/backends/cuda/kernels/*.cuh), embedded into
// the library at build time. NVRTC sees each as the header "kiln/<file>"
// (compile_cuda_source passes them all), so generated modules include them
// and instantiate their templates by name expression.
#pragma once

#include <string>
#include <vector>

namespace kiln::cuda {

struct KernelHeader {
  const char* name;  // "kiln/<file>.cuh", as kernels include it
  const char* text;
};

// Every embedded kernel header, sorted by name.
const std::vector<KernelHeader>& kernel_headers();

// The text of header `name` ("kiln/prelude.cuh"); empty when there is none.
const std::string& kernel_header(const std::string& name);

}  // namespace kiln::cuda
