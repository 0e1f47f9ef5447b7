// The per-op conformance suite on the CUDA backend against the reference
// interpreter, at each engine precision, with sizes compiled into the
// generated kernels or passed at run time, and over the range of each case's
// dynamic size from one build, from the plan as built and from its serialized
// bytes read back (GPU only: the tests carry the gpu label and skip elsewhere).
#include "support/conformance.h"

#include <tuple>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_support.h"

namespace kiln {
namespace {

class CudaConformance
    : public ::testing::TestWithParam<std::tuple<testing::ConformanceCase, std::string, bool>> {};

TEST_P(CudaConformance, MatchesTheReference) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto backend = cuda::make_cuda_backend({.sizes_at_run_time = std::get<2>(GetParam())});
  testing::run_conformance_case(*backend, std::get<0>(GetParam()), std::get<1>(GetParam()));
}

// Every case with its kernels' sizes compiled in, and again with every size
// a generated kernel reads passed at run time (the form of kernels that serve
// a range of shapes).
INSTANTIATE_TEST_SUITE_P(CudaOps, CudaConformance,
                         ::testing::Combine(::testing::ValuesIn(testing::conformance_cases()),
                                            ::testing::Values("fp32", "fp16", "bf16"), ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" + std::get<1>(info.param) +
                                  (std::get<2>(info.param) ? "_sizes_at_run_time" : "");
                         });

class CudaConformanceRange : public ::testing::TestWithParam<std::tuple<testing::ConformanceCase, std::string>> {};

TEST_P(CudaConformanceRange, MatchesTheReferenceOverItsRangeFromOneBuild) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto backend = cuda::make_cuda_backend();
  testing::run_conformance_range_case(*backend, std::get<0>(GetParam()), std::get<1>(GetParam()));
}

// Every case with a dynamic size, built once for its range and run at min,
// opt, max and an odd size between.
INSTANTIATE_TEST_SUITE_P(CudaOps, CudaConformanceRange,
                         ::testing::Combine(::testing::ValuesIn(testing::conformance_cases()),
                                            ::testing::Values("fp32", "fp16", "bf16")),
                         [](const auto& info) { return std::get<0>(info.param).name + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace kiln
