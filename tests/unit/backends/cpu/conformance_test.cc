// The per-op conformance suite on the CPU backend (fused, memory-planned
// engines) against the reference interpreter, at fixed sizes and over the
// range of each case's dynamic size from one build.
#include "support/conformance.h"

#include "backends/cpu/cpu_backend.h"

namespace kiln {
namespace {

class CpuConformance : public ::testing::TestWithParam<testing::ConformanceCase> {};

TEST_P(CpuConformance, MatchesTheReference) {
  auto backend = cpu::make_cpu_backend();
  testing::run_conformance_case(*backend, GetParam());
}

TEST_P(CpuConformance, MatchesTheReferenceOverItsRangeFromOneBuild) {
  auto backend = cpu::make_cpu_backend();
  testing::run_conformance_range_case(*backend, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Ops, CpuConformance, ::testing::ValuesIn(testing::conformance_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kiln
