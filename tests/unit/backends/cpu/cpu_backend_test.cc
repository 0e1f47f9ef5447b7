#include "backends/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "backends/cpu/kernel.h"
#include "base/section_file.h"
#include "engine/plan.h"
#include "ir/printer.h"
#include "runtime/interpreter.h"
#include "support/network_text.h"
#include "unit/backends/cpu/run_op.h"

namespace kiln::cpu {
namespace {

using engine::Network;
using testing::random_tensor;

Network network_from(std::string_view text, size_t num_inputs, std::vector<std::string> constants = {}) {
  Network net = kiln::testing::network_from(text, num_inputs, std::move(constants));
  EXPECT_TRUE(net.verify().is_ok());
  return net;
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// Byte-for-byte equality of two tensors' elements.
bool same_bits(const Tensor& got, const Tensor& want, std::string* why = nullptr) {
  if (got.dtype() != want.dtype() || got.sizes() != want.sizes()) {
    if (why) *why = "got " + got.type_string() + ", want " + want.type_string();
    return false;
  }
  const Tensor a = got.contiguous(), b = want.contiguous();
  if (std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0) return true;
  if (why) *why = "values differ";
  return false;
}

void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  std::string why;
  EXPECT_TRUE(same_bits(got, want, &why)) << what << ": " << why;
}

// The unfused network's outputs by the reference interpreter.
std::vector<Tensor> reference(const ir::Graph& g, const std::vector<RtValue>& inputs) {
  auto r = runtime::interpret(g, inputs, cpu_kernels());
  EXPECT_TRUE(r.has_value()) << r.status().message();
  std::vector<Tensor> out;
  if (!r.has_value()) return out;
  for (const RtValue& v : *r) out.push_back(rt_value_to_tensor(v));
  return out;
}

Expected<Tensor> no_weights(const std::string& name) { return not_found("no weight '" + name + "'"); }

struct Built {
  std::unique_ptr<engine::Backend> backend = make_cpu_backend();
  std::vector<uint8_t> plan;
  std::unique_ptr<engine::Engine> engine;
};

// Builds and loads `net` (a copy is consumed by build).
void build_and_load(const Network& net, Built& b, const engine::WeightLookup& weights = no_weights) {
  Network copy;
  copy.graph = net.graph.clone();
  copy.num_inputs = net.num_inputs;
  copy.constant_names = net.constant_names;
  auto plan = b.backend->build(std::move(copy), {});
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  b.plan = std::move(*plan);
  auto handle = b.backend->load(b.plan, weights, "test engine");
  ASSERT_TRUE(handle.has_value()) << handle.status().message();
  b.engine = std::make_unique<engine::Engine>(b.backend.get(), *handle);
}

// mm + bias and elementwise ops that fuse into a layer read by a second mm,
// whose result goes through two more fusible ops into a reduction. {R} rows,
// {I} inputs, {H} hidden and {O} output features.
constexpr std::string_view kMlpTemplate =
    R"(graph(%x: float32[{R}, {I}], %w: float32[{I}, {H}], %b: float32[{H}], %w2: float32[{H}, {O}]) {
  %mm: float32[{R}, {H}] = aten.mm.default(self=%x, mat2=%w)
  %a: float32[{R}, {H}] = aten.add.Tensor(self=%mm, other=%b)
  %m: float32[{R}, {H}] = aten.mul.Tensor(self=%a, other=0.5)
  %s: float32[{R}, {H}] = aten.sigmoid.default(self=%m)
  %r: float32[{R}, {H}] = aten.mul.Tensor(self=%s, other=%a)
  %t: float32[{R}, {H}] = aten.tanh.default(self=%r)
  %mm2: float32[{R}, {O}] = aten.mm.default(self=%t, mat2=%w2)
  %e: float32[{R}, {O}] = aten.exp.default(self=%mm2)
  %n: float32[{R}, {O}] = aten.neg.default(self=%e)
  %sum: float32[{R}] = aten.sum.dim_IntList(self=%n, dim=[1])
  return (%sum, %mm2)
}
)";

std::string mlp_text(int rows, int in, int hidden, int out) {
  std::string s(kMlpTemplate);
  const std::pair<std::string_view, int> subs[] = {{"{R}", rows}, {"{I}", in}, {"{H}", hidden}, {"{O}", out}};
  for (const auto& [key, v] : subs)
    for (size_t at; (at = s.find(key)) != std::string::npos;) s.replace(at, 3, std::to_string(v));
  return s;
}

std::string small_mlp() { return mlp_text(6, 8, 16, 4); }

std::vector<Tensor> mlp_inputs(uint32_t seed, int rows = 6, int in = 8, int hidden = 16, int out = 4) {
  return {random_tensor(DType::Float32, {rows, in}, seed, 1, 2.0), random_tensor(DType::Float32, {in, hidden}, seed, 2),
          random_tensor(DType::Float32, {hidden}, seed, 3), random_tensor(DType::Float32, {hidden, out}, seed, 4)};
}

std::vector<RtValue> values_of(const std::vector<Tensor>& ts) { return {ts.begin(), ts.end()}; }

TEST(CpuBackend, FusedEngineMatchesTheInterpreterBitForBit) {
  const Network net = network_from(small_mlp(), 4);
  Built b;
  ASSERT_NO_FATAL_FAILURE(build_and_load(net, b));

  // The plan fused the elementwise chains and placed their results in an arena.
  auto plan = engine::deserialize_plan(b.plan, "cpu", "mlp");
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  int fused = 0;
  for (size_t i = 0; i < plan->network.graph.nodes().size(); ++i) {
    const ir::Node& n = *plan->network.graph.nodes()[i];
    if (n.op != ir::OpKind::kFusedElementwise) continue;
    ++fused;
    EXPECT_EQ(plan->network.kernels[i], "cpu.fused_elementwise");
    EXPECT_GE(plan->memory.offset[n.outputs[0]->id], 0) << n.describe() << " is not in the arena";
  }
  EXPECT_EQ(fused, 2) << plan->network.to_text();
  EXPECT_EQ(plan->network.graph.nodes().size(), 5u) << plan->network.to_text();
  EXPECT_GT(plan->memory.arena_bytes, 0);

  for (uint32_t seed : {1u, 2u, 3u}) {
    const std::vector<Tensor> in = mlp_inputs(seed);
    const std::vector<Tensor> want = reference(net.graph, values_of(in));
    std::vector<Tensor> out;
    Status s = b.engine->execute(in, out);
    ASSERT_TRUE(s.is_ok()) << s.message();
    ASSERT_EQ(out.size(), 2u);
    expect_same_bits(out[0], want[0], "sum, seed " + std::to_string(seed));
    expect_same_bits(out[1], want[1], "mm2, seed " + std::to_string(seed));
  }
}

constexpr const char* kSymbolicBatch = R"(graph(%x: float32[s0, 8], %w: float32[8, 4], %b: float32[4]) {
  %mm: float32[s0, 4] = aten.mm.default(self=%x, mat2=%w)
  %a: float32[s0, 4] = aten.add.Tensor(self=%mm, other=%b)
  %r: float32[s0, 4] = aten.relu.default(self=%a)
  %m: float32[s0, 4] = aten.mul.Tensor(self=%r, other=%a)
  %s: float32[s0] = aten.sum.dim_IntList(self=%m, dim=[1])
  return (%s, %a)
}
)";

TEST(CpuBackend, SymbolicBatchRunsAtEverySize) {
  const Network net = network_from(kSymbolicBatch, 3);
  Built b;
  ASSERT_NO_FATAL_FAILURE(build_and_load(net, b));
  auto plan = engine::deserialize_plan(b.plan, "cpu", "batch");
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  int fused = 0;
  for (const auto& n : plan->network.graph.nodes()) fused += n->op == ir::OpKind::kFusedElementwise;
  EXPECT_GE(fused, 1) << plan->network.to_text();

  for (int64_t batch : {1, 3, 7, 3}) {
    const std::vector<Tensor> in = {random_tensor(DType::Float32, {batch, 8}, 5, 1, 2.0),
                                    random_tensor(DType::Float32, {8, 4}, 5, 2),
                                    random_tensor(DType::Float32, {4}, 5, 3)};
    const std::vector<Tensor> want = reference(net.graph, values_of(in));
    std::vector<Tensor> out;
    Status s = b.engine->execute(in, out);
    ASSERT_TRUE(s.is_ok()) << s.message();
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].sizes(), (Shape{batch}));
    expect_same_bits(out[0], want[0], "s, batch " + std::to_string(batch));
    expect_same_bits(out[1], want[1], "a, batch " + std::to_string(batch));
  }
}

constexpr const char* kWithConstants = R"(graph(%x: float32[3, 8], %w: float32[8, 4], %b: float32[4]) {
  %mm: float32[3, 4] = aten.mm.default(self=%x, mat2=%w)
  %a: float32[3, 4] = aten.add.Tensor(self=%mm, other=%b)
  %r: float32[3, 4] = aten.relu.default(self=%a)
  %y: float32[3, 4] = aten.mul.Tensor(self=%r, other=2)
  return (%y)
}
)";

engine::WeightLookup lookup(std::map<std::string, Tensor> weights) {
  return [weights = std::move(weights)](const std::string& name) -> Expected<Tensor> {
    auto it = weights.find(name);
    if (it == weights.end()) return not_found("no weight '" + name + "'");
    return it->second;
  };
}

TEST(CpuBackend, ConstantsAreBoundByNameAtLoad) {
  const Network net = network_from(kWithConstants, 1, {"fc.weight", "fc.bias"});
  const Tensor w = random_tensor(DType::Float32, {8, 4}, 9, 1);
  const Tensor bias = random_tensor(DType::Float32, {4}, 9, 2);
  Built b;
  ASSERT_NO_FATAL_FAILURE(build_and_load(net, b, lookup({{"fc.weight", w}, {"fc.bias", bias}})));
  for (uint32_t seed : {1u, 2u}) {
    const Tensor x = random_tensor(DType::Float32, {3, 8}, seed, 7);
    const std::vector<Tensor> want = reference(net.graph, {x, w, bias});
    std::vector<Tensor> out;
    const std::vector<Tensor> in = {x};
    Status s = b.engine->execute(in, out);
    ASSERT_TRUE(s.is_ok()) << s.message();
    ASSERT_EQ(out.size(), 1u);
    expect_same_bits(out[0], want[0], "y");
  }
}

TEST(CpuBackend, MissingOrMisshapenWeightIsRefusedAtLoad) {
  const Network net = network_from(kWithConstants, 1, {"fc.weight", "fc.bias"});
  Built b;
  ASSERT_NO_FATAL_FAILURE(build_and_load(
      net, b,
      lookup({{"fc.weight", Tensor::zeros(DType::Float32, {8, 4})}, {"fc.bias", Tensor::zeros(DType::Float32, {4})}})));
  struct Case {
    const char* what;
    std::map<std::string, Tensor> weights;
    const char* names;
  };
  const Case cases[] = {
      {"missing bias", {{"fc.weight", Tensor::zeros(DType::Float32, {8, 4})}}, "fc.bias"},
      {"weight transposed",
       {{"fc.weight", Tensor::zeros(DType::Float32, {4, 8})}, {"fc.bias", Tensor::zeros(DType::Float32, {4})}},
       "fc.weight"},
      {"bias of another rank",
       {{"fc.weight", Tensor::zeros(DType::Float32, {8, 4})}, {"fc.bias", Tensor::zeros(DType::Float32, {1, 4})}},
       "fc.bias"},
      {"weight of another dtype",
       {{"fc.weight", Tensor::zeros(DType::Float64, {8, 4})}, {"fc.bias", Tensor::zeros(DType::Float32, {4})}},
       "fc.weight"},
  };
  for (const Case& c : cases) {
    auto h = b.backend->load(b.plan, lookup(c.weights), "engine 3");
    ASSERT_FALSE(h.has_value()) << c.what;
    EXPECT_TRUE(contains(h.status().message(), std::string("'") + c.names + "'") &&
                contains(h.status().message(), "engine 3"))
        << c.what << ": " << h.status().message();
  }
}

TEST(CpuBackend, ExecuteChecksInputsAndNamesThem) {
  const Network net = network_from(kWithConstants, 1, {"fc.weight", "fc.bias"});
  Built b;
  ASSERT_NO_FATAL_FAILURE(build_and_load(
      net, b,
      lookup({{"fc.weight", Tensor::zeros(DType::Float32, {8, 4})}, {"fc.bias", Tensor::zeros(DType::Float32, {4})}})));
  auto expect_invalid = [&](const std::vector<Tensor>& in, std::vector<std::string_view> mentions, const char* what) {
    std::vector<Tensor> out = {Tensor::zeros(DType::Float32, {1})};
    Status s = b.engine->execute(in, out);
    ASSERT_FALSE(s.is_ok()) << what;
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << what << ": " << s.to_string();
    for (std::string_view m : mentions) EXPECT_TRUE(contains(s.message(), m)) << what << ": " << s.message();
  };
  const Tensor x = Tensor::zeros(DType::Float32, {3, 8});
  expect_invalid({}, {"1 inputs", "got 0"}, "no input");
  expect_invalid({x, x}, {"1 inputs", "got 2"}, "two inputs");
  expect_invalid({Tensor::zeros(DType::Float64, {3, 8})}, {"input 0", "'x'", "float64"}, "wrong dtype");
  expect_invalid({Tensor::zeros(DType::Float32, {3, 9})}, {"input 0", "'x'"}, "wrong static size");
  expect_invalid({Tensor::zeros(DType::Float32, {24})}, {"input 0", "'x'"}, "wrong rank");
  expect_invalid({Tensor()}, {"input 0", "'x'"}, "undefined tensor");

  // The symbolic dimension takes any size; the static one still must match.
  const Network batch = network_from(kSymbolicBatch, 3);
  Built sb;
  ASSERT_NO_FATAL_FAILURE(build_and_load(batch, sb));
  std::vector<Tensor> out;
  const Tensor w = Tensor::zeros(DType::Float32, {8, 4}), bias = Tensor::zeros(DType::Float32, {4});
  const std::vector<Tensor> good = {Tensor::zeros(DType::Float32, {5, 8}), w, bias};
  EXPECT_TRUE(sb.engine->execute(good, out).is_ok());
  const std::vector<Tensor> bad = {Tensor::zeros(DType::Float32, {5, 9}), w, bias};
  Status s = sb.engine->execute(bad, out);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "'x'")) << s.message();
  const std::vector<Tensor> bad_bias = {Tensor::zeros(DType::Float32, {5, 8}), w, Tensor::zeros(DType::Float32, {5})};
  s = sb.engine->execute(bad_bias, out);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "input 2") && contains(s.message(), "'b'")) << s.message();
}

TEST(CpuBackend, ConcurrentCallsOnOneEngineKeepTheirOwnResults) {
  // Layers large enough that calls overlap in time.
  const Network net = network_from(mlp_text(64, 16, 1024, 16), 4);
  Built b;
  ASSERT_NO_FATAL_FAILURE(build_and_load(net, b));
  auto plan = engine::deserialize_plan(b.plan, "cpu", "mlp");
  ASSERT_TRUE(plan.has_value());
  ASSERT_GT(plan->memory.arena_bytes, 0);
  constexpr int kThreads = 8, kCalls = 50;
  // Two input sets per thread, alternated, each with its reference result.
  std::vector<std::vector<std::vector<Tensor>>> inputs(kThreads), wants(kThreads);
  for (int t = 0; t < kThreads; ++t)
    for (int k = 0; k < 2; ++k) {
      inputs[t].push_back(mlp_inputs(static_cast<uint32_t>(100 + 2 * t + k), 64, 16, 1024, 16));
      wants[t].push_back(reference(net.graph, values_of(inputs[t].back())));
    }
  std::atomic<int> ready{0}, failures{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      ++ready;
      while (ready.load() < kThreads) std::this_thread::yield();
      for (int c = 0; c < kCalls; ++c) {
        const int k = (c + t) % 2;
        std::vector<Tensor> out;
        if (!b.engine->execute(inputs[t][k], out).is_ok() || out.size() != 2) {
          ++failures;
          continue;
        }
        if (!same_bits(out[0], wants[t][k][0]) || !same_bits(out[1], wants[t][k][1])) ++wrong;
      }
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  // The reference results differ between threads, so a mix-up would show.
  EXPECT_FALSE(same_bits(wants[0][0][0], wants[1][0][0]));
  EXPECT_FALSE(same_bits(wants[0][0][0], wants[0][1][0]));
}

// A padded call (a padded batch bucket called with fewer rows): the engine
// pads the caller's rows with its last and cuts the outputs to the caller's
// rows, into new tensors or the caller's memory; rows past the engine's are refused.
TEST(CpuBackend, PadsAndCutsARowPaddedCall) {
  const Network net = network_from(small_mlp(), 4);
  Built b;
  ASSERT_NO_FATAL_FAILURE(build_and_load(net, b));
  const std::vector<Tensor> full = mlp_inputs(21);
  // The caller's 4 rows, and the same with rows 4 and 5 repeating row 3.
  std::vector<Tensor> caller = full, padded = full;
  caller[0] = full[0].as_strided({4, 8}, full[0].strides(), 0).clone();
  padded[0] = full[0].clone();
  for (int64_t r = 4; r < 6; ++r)
    for (int64_t j = 0; j < 8; ++j) padded[0].data<float>()[r * 8 + j] = full[0].data<float>()[3 * 8 + j];
  const std::vector<Tensor> want = reference(net.graph, values_of(padded));
  for (int64_t factor : {0, 1}) {
    SCOPED_TRACE("factor " + std::to_string(factor));
    const engine::RowPadding padding{4, {true, false, false, false}, {factor, factor}};
    std::vector<Tensor> out;
    Status s = b.engine->execute(caller, out, nullptr, &padding);
    ASSERT_TRUE(s.is_ok()) << s.message();
    ASSERT_EQ(out.size(), 2u);
    const int64_t rows = factor ? 4 : 6;
    EXPECT_EQ(out[0].sizes(), (Shape{rows}));
    EXPECT_EQ(out[1].sizes(), (Shape{rows, 4}));
    expect_same_bits(out[1], want[1].as_strided({rows, 4}, want[1].strides(), 0).clone(), "mm2");
    // Into the caller's memory of the cut sizes.
    std::vector<Tensor> into = {Tensor::zeros(DType::Float32, {rows}), Tensor::zeros(DType::Float32, {rows, 4})};
    const void* at = into[1].raw_data();
    ASSERT_TRUE(b.engine->execute(caller, into, nullptr, &padding).is_ok());
    EXPECT_EQ(into[1].raw_data(), at);
    expect_same_bits(into[0], want[0].as_strided({rows}, want[0].strides(), 0).clone(), "sum");
  }
  const engine::RowPadding seven{7, {true, false, false, false}, {1, 1}};
  std::vector<Tensor> out;
  EXPECT_EQ(b.engine->execute(mlp_inputs(22, 7), out, nullptr, &seven).code(), ErrorCode::kInvalidArgument);
  const engine::RowPadding wrong{4, {true}, {1, 1}};
  EXPECT_FALSE(b.engine->execute(caller, out, nullptr, &wrong).is_ok());
}

TEST(CpuBackend, OutputsOutliveLaterCalls) {
  // Results handed out must not share memory that a later call reuses.
  const Network net = network_from(small_mlp(), 4);
  Built b;
  ASSERT_NO_FATAL_FAILURE(build_and_load(net, b));
  const std::vector<Tensor> in1 = mlp_inputs(11), in2 = mlp_inputs(12);
  const std::vector<Tensor> want1 = reference(net.graph, values_of(in1));
  std::vector<Tensor> out1, out2;
  ASSERT_TRUE(b.engine->execute(in1, out1).is_ok());
  const std::vector<Tensor> kept = out1;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b.engine->execute(in2, out2).is_ok());
  expect_same_bits(kept[0], want1[0], "first call's sum");
  expect_same_bits(kept[1], want1[1], "first call's mm2");
}

TEST(CpuBackend, SymbolicScalarsCrossTheBoundaryAsZeroDimTensors) {
  const Network net = network_from(R"(graph(%x: float32[s0, 4], %n: symint) {
  %v: float32[s0, 2, 2] = aten.view.default(self=%x, size=[%n, 2, 2])
  %y: float32[s0, 2, 2] = aten.mul.Tensor(self=%v, other=3)
  %k: symint = aten.sym_size.int(self=%x, dim=0)
  return (%y, %k)
}
)",
                                   2);
  Built b;
  ASSERT_NO_FATAL_FAILURE(build_and_load(net, b));
  const Tensor x = random_tensor(DType::Float32, {3, 4}, 4, 1);
  Tensor n = Tensor::zeros(DType::Int64, {});
  n.data<int64_t>()[0] = 3;
  const std::vector<Tensor> want = reference(net.graph, {x, int64_t{3}});
  std::vector<Tensor> out;
  const std::vector<Tensor> in = {x, n};
  Status s = b.engine->execute(in, out);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].sizes(), (Shape{3, 2, 2}));
  expect_same_bits(out[0], want[0], "y");
  EXPECT_EQ(out[1].dim(), 0);
  EXPECT_EQ(out[1].dtype(), DType::Int64);
  EXPECT_EQ(out[1].int_at(0), 3);

  // The scalar must come as a 0-d tensor.
  const std::vector<Tensor> vector_n = {x, Tensor::zeros(DType::Int64, {1})};
  Status bad = b.engine->execute(vector_n, out);
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument) << bad.to_string();
  EXPECT_TRUE(contains(bad.message(), "'n'")) << bad.message();
}

TEST(CpuBackend, BuildRefusesLayersWithoutAKernel) {
  Network net = network_from(R"(graph(%x: float32[4]) {
  %y: float32[4] = aten.add_.Tensor(self=%x, other=%x)
  return (%y)
}
)",
                             1);
  auto plan = make_cpu_backend()->build(std::move(net), {});
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.status().code(), ErrorCode::kUnsupported);
  EXPECT_TRUE(contains(plan.status().message(), "aten.add_.Tensor")) << plan.status().message();
}

TEST(CpuBackend, LoadRefusesBadPlans) {
  const Network net = network_from(small_mlp(), 4);
  Built b;
  ASSERT_NO_FATAL_FAILURE(build_and_load(net, b));
  std::vector<uint8_t> cut(b.plan.begin(), b.plan.begin() + static_cast<std::ptrdiff_t>(b.plan.size() / 2));
  auto h = b.backend->load(cut, no_weights, "half plan");
  ASSERT_FALSE(h.has_value());
  EXPECT_EQ(h.status().code(), ErrorCode::kFormat);
  EXPECT_TRUE(contains(h.status().message(), "half plan")) << h.status().message();
}

// Seeded random damage behind valid checksums (in the layer text and the meta
// and memory JSON): each plan is refused at load, or loads and then either
// runs or refuses the call with an error; nothing crashes.
TEST(CpuBackend, RandomDamageBehindValidChecksumsNeverCrashes) {
  const Network net = network_from(small_mlp(), 4);
  Built b;
  ASSERT_NO_FATAL_FAILURE(build_and_load(net, b));
  auto good = SectionFile::parse(b.plan, engine::kPlanMagic, engine::kPlanVersion, "plan");
  ASSERT_TRUE(good.has_value());
  const std::vector<Tensor> inputs = mlp_inputs(3);
  const char* const sections[] = {"layers", "meta", "memory"};
  std::mt19937 rng(1129);
  int refused = 0;
  for (int round = 0; round < 300; ++round) {
    const std::string target = sections[round % 3];
    SectionFileWriter w(engine::kPlanMagic, engine::kPlanVersion);
    for (const std::string& name : good->names()) {
      auto bytes = good->section(name);
      std::string text(bytes->begin(), bytes->end());
      if (name == target)
        for (int e = 1 + static_cast<int>(rng() % 3); e > 0 && !text.empty(); --e) {
          const size_t pos = rng() % text.size();
          if (rng() % 2)
            text[pos] = static_cast<char>("0123456789-,%[]{}:\" x"[rng() % 22]);
          else
            text.erase(pos, 1 + rng() % 6);
        }
      ASSERT_TRUE(w.add(name, std::vector<uint8_t>(text.begin(), text.end())).is_ok());
    }
    const std::vector<uint8_t> plan = w.finish();
    auto h = b.backend->load(plan, no_weights, "damaged plan");
    if (!h) {
      ++refused;
      EXPECT_TRUE(contains(h.status().message(), "damaged plan")) << h.status().message();
      continue;
    }
    engine::Engine e(b.backend.get(), *h);
    std::vector<Tensor> out;
    if (!e.execute(inputs, out).is_ok()) ++refused;
  }
  EXPECT_GT(refused, 0);
}

TEST(NullBackend, RefusesToBuildLoadOrRun) {
  auto null_backend = engine::make_null_backend();
  EXPECT_EQ(null_backend->name(), "null");
  auto plan = null_backend->build(network_from(kWithConstants, 1, {"fc.weight", "fc.bias"}), {});
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.status().code(), ErrorCode::kUnsupported);

  // Not even a plan another backend built.
  Built b;
  ASSERT_NO_FATAL_FAILURE(build_and_load(network_from(small_mlp(), 4), b));
  auto h = null_backend->load(b.plan, no_weights, "segment 1");
  ASSERT_FALSE(h.has_value());
  EXPECT_EQ(h.status().code(), ErrorCode::kUnsupported);
  EXPECT_TRUE(contains(h.status().message(), "segment 1")) << h.status().message();

  std::vector<Tensor> out;
  EXPECT_FALSE(null_backend->execute({}, nullptr, {}, out).is_ok());
  null_backend->destroy(nullptr);
}

}  // namespace
}  // namespace kiln::cpu
