// The CUDA engine plan reader (read_cuda_engine_plan): everything load()
// checks on the host before it touches the device. No GPU needed.
#include "backends/cuda/cuda_plan.h"

#include <gtest/gtest.h>

#include <optional>

#include "backends/cuda/cuda_backend.h"
#include "support/cuda_plan_sample.h"

namespace kiln::cuda {
namespace {

using kiln::testing::kSampleRangeCudaGraph;
using kiln::testing::sample_cuda_engine_plan;
using kiln::testing::sample_cuda_plan;
using kiln::testing::sample_range_cuda_plan;

// The device memory an engine made from a plan holds, read from the plan
// without a GPU: the arena as planned, the workspace, and the weights in
// their device forms (float16; the stem filter's 3 channels padded to 8).
TEST(PlanReader, DeviceMemoryOfAPlanIsItsArenaWorkspaceAndDeviceWeights) {
  CudaPlan p = sample_cuda_plan();
  p.workspace_bytes = size_t{1} << 20;
  auto backend = make_cuda_backend();
  auto m = backend->plan_memory(sample_cuda_engine_plan(p));
  ASSERT_TRUE(m.has_value()) << m.status().message();
  EXPECT_EQ(m->arena_bytes, 4096);
  EXPECT_EQ(m->workspace_bytes, int64_t{1} << 20);
  EXPECT_EQ(m->weight_bytes, 2 * (8 * 16 + 64 * 8 * 7 * 7 + 64));
  auto bad = backend->plan_memory(std::vector<uint8_t>{1, 2, 3});
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), ErrorCode::kFormat);
}

TEST(PlanReader, ReadsAPlanWhoseSectionsAgree) {
  const std::vector<uint8_t> bytes = sample_cuda_engine_plan();
  ASSERT_FALSE(bytes.empty());
  auto read = read_cuda_engine_plan(bytes, "sample");
  ASSERT_TRUE(read.has_value()) << read.status().message();
  EXPECT_EQ(read->plan.to_json(), sample_cuda_plan().to_json());
  EXPECT_EQ(read->alias_input, std::vector<int>{-1});
  EXPECT_EQ(read->common.network.constant_names.size(), 3u);
}

// A plan whose CUDA sections disagree with its own layer graph (a slot of
// another dtype or size, one slot too many) is refused naming the slot, as is
// a CUDA plan that asks for a device form its constant cannot have.
TEST(PlanReader, SectionsThatDisagreeAreRefused) {
  struct Case {
    const char* what;
    void (*damage)(CudaPlan&);
    const char* expect;
  };
  const Case cases[] = {
      {"an input slot of another dtype", [](CudaPlan& p) { p.inputs[0].dtype = DType::Float32; }, "input slot 'x'"},
      {"an output slot of other sizes",
       [](CudaPlan& p) {
         p.outputs[0].sizes = {4, 8};
       },
       "output slot 'y'"},
      {"an output slot of another rank", [](CudaPlan& p) { p.outputs[0].sizes = {64}; }, "output slot 'y'"},
      {"one input slot too many",
       [](CudaPlan& p) {
         p.inputs.push_back({"z", DType::Float16, {4}, 1024});
       },
       "2 input and 1 output slots"},
      {"padded channels on the bias", [](CudaPlan& p) { p.constants[2].padded_channels = 72; }, "stem.bias"},
      {"a block whose sizes wrap in 32 bits",
       [](CudaPlan& p) {
         p.steps[0].kernel.block = {65536, 65536, 1};
       },
       "bad block size"},
      {"a grid too tall",
       [](CudaPlan& p) {
         p.steps[0].kernel.grid = {1, 70000, 1};
       },
       "grid"},
      {"a slot whose bytes overflow",
       [](CudaPlan& p) {
         p.outputs[0].sizes = {int64_t{1} << 40, int64_t{1} << 40};
       },
       "larger than a plan can hold"},
  };
  for (const Case& c : cases) {
    CudaPlan p = sample_cuda_plan();
    c.damage(p);
    auto read = read_cuda_engine_plan(sample_cuda_engine_plan(p), "sample");
    ASSERT_FALSE(read.has_value()) << c.what;
    EXPECT_EQ(read.status().code(), ErrorCode::kFormat) << c.what;
    EXPECT_NE(read.status().message().find(c.expect), std::string::npos) << c.what << ": " << read.status().message();
    EXPECT_NE(read.status().message().find("sample"), std::string::npos) << c.what << ": " << read.status().message();
  }
}

// The sample's layer graph with the rows of its input and result a symbol.
constexpr const char* kRangeGraph =
    R"(graph(%x: float16[s0, 8], %w: float16[8, 16], %stem: float16[64, 3, 7, 7], %sb: float16[64]) {
  %n: symint[s0] = aten.sym_size.int(self=%x, dim=0)
  %m: float16[s0, 16] = aten.mm.default(self=%x, mat2=%w)
  %y: float16[s0, 16] = aten.relu.default(self=%m)
  return (%y)
}
)";

std::vector<uint8_t> range_engine_plan(const CudaPlan& cuda) { return sample_cuda_engine_plan(cuda, kRangeGraph); }

CudaPlan range_plan() {
  CudaPlan p = sample_cuda_plan();
  p.symbols = {{"s0", 1, 4, 16}};
  p.kernel_keys = {std::string(64, 'a')};
  return p;
}

// A plan for a range of shapes: the layer graph's sizes are symbolic, the
// plan's slots those of the shape at every symbol's opt, and each kernel has a
// key; its symbols and keys round-trip, and a range or key list that does not
// hold is refused.
TEST(PlanReader, ARangePlanKeepsItsSymbolsAndKernelKeys) {
  auto read = read_cuda_engine_plan(range_engine_plan(range_plan()), "range");
  ASSERT_TRUE(read.has_value()) << read.status().message();
  ASSERT_EQ(read->plan.symbols.size(), 1u);
  EXPECT_EQ(read->plan.symbols[0], (PlanSymbol{"s0", 1, 4, 16}));
  EXPECT_EQ(read->plan.kernel_keys, range_plan().kernel_keys);
  EXPECT_EQ(read->plan.to_json(), range_plan().to_json());
  EXPECT_EQ(opt_bindings(read->plan), (ir::SymBindings{{"s0", 4}}));
  // The layer graph keeps what the symbolic scalar is.
  const ir::Value* n = read->common.network.graph.nodes()[0]->outputs[0];
  ASSERT_TRUE(n->sym);
  EXPECT_EQ(n->sym->to_string(), "s0");

  struct Case {
    const char* what;
    void (*damage)(CudaPlan&);
    const char* expect;
  };
  const Case cases[] = {
      {"a key missing", [](CudaPlan& p) { p.kernel_keys.clear(); }, "kernel keys"},
      {"opt below min", [](CudaPlan& p) { p.symbols[0].opt = 0; }, "symbol 's0'"},
      {"max below opt", [](CudaPlan& p) { p.symbols[0].max = 3; }, "symbol 's0'"},
      {"slots of another shape than opt", [](CudaPlan& p) { p.symbols[0].opt = 5; }, "input slot 'x'"},
  };
  for (const Case& c : cases) {
    CudaPlan p = range_plan();
    c.damage(p);
    auto bad = read_cuda_engine_plan(range_engine_plan(p), "range");
    ASSERT_FALSE(bad.has_value()) << c.what;
    EXPECT_EQ(bad.status().code(), ErrorCode::kFormat) << c.what;
    EXPECT_NE(bad.status().message().find(c.expect), std::string::npos) << c.what << ": " << bad.status().message();
  }
}

// A range plan with every shape in its table: the table round-trips through
// the plan's JSON and its shapes section, each shape reads back with its own
// slots, grid and GEMM rows (the numbers that vary) over the rest of the
// plan, and a table that does not hold is refused naming what is wrong.
TEST(PlanReader, ARangePlanWithATableGivesEachShapeItsNumbers) {
  const CudaPlan sample = sample_range_cuda_plan();
  auto read = read_cuda_engine_plan(sample_cuda_engine_plan(sample, kSampleRangeCudaGraph), "table");
  ASSERT_TRUE(read.has_value()) << read.status().message();
  ASSERT_TRUE(read->plan.table);
  const ShapeTable& t = *read->plan.table;
  EXPECT_EQ(read->plan.to_json(), sample.to_json());
  ASSERT_EQ(t.variants.size(), 1u);
  EXPECT_EQ(t.varying[0].size(), 4u);  // x's rows, y's rows, the grid, the GEMM's m
  EXPECT_TRUE(t.constants_fixed(0));
  for (int64_t s0 = 1; s0 <= 4; ++s0) {
    const std::vector<int64_t> values{s0};
    const size_t at = ShapeTable::index(read->plan.symbols, values);
    EXPECT_EQ(at, static_cast<size_t>(s0 - 1));
    auto p = t.shape_plan(read->plan, at);
    ASSERT_TRUE(p.has_value()) << p.status().message();
    EXPECT_EQ(p->inputs[0].sizes, (std::vector<int64_t>{s0, 8}));
    EXPECT_EQ(p->outputs[0].sizes, (std::vector<int64_t>{s0, 16}));
    EXPECT_EQ(p->steps[0].kernel.grid[0], static_cast<uint32_t>(s0));
    EXPECT_EQ(p->steps[1].gemm.shape.m, s0);
    EXPECT_EQ(p->steps[1].gemm.shape.n, 16);
    EXPECT_EQ(p->kernel_names, read->plan.kernel_names);
    EXPECT_EQ(p->precision, Precision::kFp16);
  }

  // Without its shapes section, with a record cut short, or with a varying
  // position past the variant's numbers: refused.
  auto engine_plan = [&](const CudaPlan& c, std::optional<std::vector<uint8_t>> records) {
    engine::EnginePlan plan;
    auto bytes = sample_cuda_engine_plan(c, kSampleRangeCudaGraph);
    auto common = engine::deserialize_plan(bytes, "cuda", "table");
    plan = std::move(*common);
    std::erase_if(plan.extra, [](const auto& e) { return e.first == kShapesSection; });
    if (records) plan.extra.emplace_back(kShapesSection, *records);
    return engine::serialize_plan(plan);
  };
  auto expect_refused = [&](const std::vector<uint8_t>& bytes, const char* expect) {
    auto bad = read_cuda_engine_plan(bytes, "table");
    ASSERT_FALSE(bad.has_value()) << expect;
    EXPECT_EQ(bad.status().code(), ErrorCode::kFormat);
    EXPECT_NE(bad.status().message().find(expect), std::string::npos) << bad.status().message();
  };
  expect_refused(engine_plan(sample, std::nullopt), "the shape table holds 0 shapes");
  std::vector<uint8_t> cut = sample.table->records;
  cut.pop_back();
  expect_refused(engine_plan(sample, cut), "cut short");
  CudaPlan past = sample;
  auto wide = std::make_shared<ShapeTable>(*sample.table);
  wide->varying[0].back() = 100000;
  past.table = wide;
  expect_refused(engine_plan(past, sample.table->records), "varies number 100000");
}

TEST(PlanReader, APlanOfAnotherBackendOrWithoutItsSectionsIsRefused) {
  std::vector<uint8_t> bytes = sample_cuda_engine_plan();
  // Every byte kept but one flipped in the middle: the checksum catches it.
  bytes[bytes.size() / 2] ^= 0x40;
  EXPECT_FALSE(read_cuda_engine_plan(bytes, "flipped").has_value());
  EXPECT_FALSE(read_cuda_engine_plan({}, "empty").has_value());
  auto truncated = sample_cuda_engine_plan();
  truncated.resize(truncated.size() / 3);
  EXPECT_FALSE(read_cuda_engine_plan(truncated, "truncated").has_value());
}

}  // namespace
}  // namespace kiln::cuda
