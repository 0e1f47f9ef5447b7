// The per-op conformance suite on the CUDA backend against the reference
// interpreter (GPU only: the tests carry the gpu label and skip elsewhere).
#include "support/conformance.h"

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_support.h"

namespace kiln {
namespace {

class CudaConformance : public ::testing::TestWithParam<testing::ConformanceCase> {};

TEST_P(CudaConformance, MatchesTheReference) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto backend = cuda::make_cuda_backend();
  testing::run_conformance_case(*backend, GetParam());
}

INSTANTIATE_TEST_SUITE_P(CudaOps, CudaConformance, ::testing::ValuesIn(testing::conformance_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kiln
