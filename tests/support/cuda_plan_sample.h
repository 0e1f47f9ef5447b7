// A small CUDA engine plan written without a GPU (a GEMM, a relu kernel, a
// channels-last filter with padded channels and a 1-d bias among its
// constants): the seed of the CUDA plan fuzz target and the starting point of
// the plan reader's tests. Its CUDA sections agree with its layer graph, so
// read_cuda_engine_plan accepts it as written.
#pragma once

#include <string>
#include <vector>

#include "backends/cuda/cuda_plan.h"
#include "engine/memory_plan.h"
#include "engine/plan.h"
#include "ir/printer.h"

namespace kiln::testing {

inline cuda::CudaPlan sample_cuda_plan() {
  using namespace kiln::cuda;
  CudaPlan p;
  p.device_name = "NVIDIA H200";
  p.arch = "sm_90";
  p.sm_count = 132;
  p.precision = Precision::kFp16;
  p.arena_bytes = 4096;
  p.error_offset = 0;
  p.error_layers = {"embedding"};
  p.constants.push_back({"w", DType::Float16, {8, 16}, false});
  p.constants.push_back({"stem", DType::Float16, {64, 3, 7, 7}, true, false, 8});  // channels padded to 8
  p.constants.push_back({"stem.bias", DType::Float16, {64}});
  p.inputs.push_back({"x", DType::Float16, {4, 8}, 256});
  p.outputs.push_back({"y", DType::Float16, {4, 16}, 512});
  p.kernel_names = {"kiln_k0"};
  Step k;
  k.layer = "relu";
  k.kernel.kernel = 0;
  k.kernel.grid = {1, 1, 1};
  k.kernel.block = {256, 1, 1};
  k.kernel.args = {{kArenaRegion, 512}, {kArenaRegion, 256}};
  p.steps.push_back(k);
  Step g;
  g.kind = Step::Kind::kGemm;
  g.layer = "mm";
  g.gemm.shape.dtype = DType::Float16;
  g.gemm.shape.m = 4, g.gemm.shape.n = 16, g.gemm.shape.k = 8;
  g.gemm.shape.lda = 8, g.gemm.shape.ldb = 16, g.gemm.shape.ldc = 16;
  g.gemm.a = {kArenaRegion, 256};
  g.gemm.b = {0, 0};
  g.gemm.c = {kArenaRegion, 512};
  g.gemm.algo.data[3] = 0xdeadbeefULL;
  p.steps.push_back(g);
  return p;
}

// sample_cuda_plan() over rows s0 = 1..4 of x (opt 4), with every shape in
// its table: the slots, the kernel's grid and the GEMM's m follow s0.
inline cuda::CudaPlan sample_range_cuda_plan() {
  using namespace kiln::cuda;
  CudaPlan p = sample_cuda_plan();
  p.symbols = {{"s0", 1, 4, 4}};
  p.kernel_keys = {"0123456789abcdef"};
  auto table = std::make_shared<ShapeTable>();
  for (int64_t s0 = 1; s0 <= 4; ++s0) {
    CudaPlan at = sample_cuda_plan();
    at.inputs[0].sizes = {s0, 8};
    at.outputs[0].sizes = {s0, 16};
    at.steps[0].kernel.grid = {static_cast<uint32_t>(s0), 1, 1};
    at.steps[1].gemm.shape.m = s0;
    table->add(std::move(at));
  }
  table->finish();
  table->gemm_algos[p.steps[1].gemm.shape.to_string()] = p.steps[1].gemm.algo;
  p.table = std::move(table);
  return p;
}

// The layer graph sample_cuda_plan()'s slots and constants describe.
inline constexpr const char* kSampleCudaGraph =
    R"(graph(%x: float16[4, 8], %w: float16[8, 16], %stem: float16[64, 3, 7, 7], %sb: float16[64]) {
  %m: float16[4, 16] = aten.mm.default(self=%x, mat2=%w)
  %y: float16[4, 16] = aten.relu.default(self=%m)
  return (%y)
}
)";
// The same over rows s0 (sample_range_cuda_plan()).
inline constexpr const char* kSampleRangeCudaGraph =
    R"(graph(%x: float16[s0, 8], %w: float16[8, 16], %stem: float16[64, 3, 7, 7], %sb: float16[64]) {
  %m: float16[s0, 16] = aten.mm.default(self=%x, mat2=%w)
  %y: float16[s0, 16] = aten.relu.default(self=%m)
  return (%y)
}
)";

// The whole engine plan around `cuda` (sample_cuda_plan() by default): the
// layer graph `graph` (one engine input, then the constants w, stem and
// stem.bias), and its two CUDA sections.
inline std::vector<uint8_t> sample_cuda_engine_plan(const cuda::CudaPlan& cuda = sample_cuda_plan(),
                                                    const char* graph = kSampleCudaGraph) {
  engine::EnginePlan plan;
  plan.backend = "cuda";
  auto g = ir::parse_graph(graph);
  if (!g) return {};
  plan.network.graph = std::move(*g);
  plan.network.num_inputs = 1;
  plan.network.constant_names = {"w", "stem", "stem.bias"};
  plan.network.kernels.assign(plan.network.graph.nodes().size(), "cuda");
  plan.memory = engine::plan_memory(plan.network, [](const ir::Node&) { return false; });
  const std::string json = cuda.to_json();
  plan.extra.emplace_back(cuda::kPlanSection, std::vector<uint8_t>(json.begin(), json.end()));
  plan.extra.emplace_back(cuda::kCubinSection, std::vector<uint8_t>{0x7f, 'E', 'L', 'F'});
  if (cuda.table) plan.extra.emplace_back(cuda::kShapesSection, cuda.table->records);
  return engine::serialize_plan(plan);
}

}  // namespace kiln::testing
