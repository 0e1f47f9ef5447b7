// CUDA engines built once for a range of sizes: every size in the range runs
// on the one engine and gives the reference interpreter's results for the
// network specialized to that size, from the plan as built and from its
// serialized bytes; sizes outside the range are refused by name. GPU only
// (the tests carry the gpu label and skip elsewhere).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_support.h"
#include "kiln/settings.h"
#include "runtime/interpreter.h"
#include "support/conformance.h"
#include "support/network_text.h"

namespace kiln {
namespace {

// A transformer block over a dynamic sequence s0: an embedding plus a slice
// of a position table as long as the sequence, a norm, one fused QKV
// projection cut into heads through views sized by the sequence, causal
// attention, the output projection with a residual, a GELU MLP, and the
// sequence length itself given back.
constexpr const char* kBlock =
    R"(graph(%ids: int64[1, s0], %emb: float32[100, 64], %pos: float32[80, 64], %g: float32[64], %bb: float32[64], %wqkv: float32[64, 192], %bqkv: float32[192], %wo: float32[64, 64], %w1: float32[64, 128], %w2: float32[128, 64]) {
  %n: symint = aten.sym_size.int(self=%ids, dim=1)
  %e: float32[1, s0, 64] = aten.embedding.default(weight=%emb, indices=%ids)
  %p: float32[s0, 64] = aten.slice.Tensor(self=%pos, dim=0, start=0, end=%n)
  %x: float32[1, s0, 64] = aten.add.Tensor(self=%e, other=%p)
  %l: float32[1, s0, 64] = aten.layer_norm.default(input=%x, normalized_shape=[64], weight=%g, bias=%bb, eps=1e-05)
  %qkv: float32[1, s0, 192] = aten.matmul.default(self=%l, other=%wqkv)
  %qkvb: float32[1, s0, 192] = aten.add.Tensor(self=%qkv, other=%bqkv)
  %q0: float32[1, s0, 64] = aten.slice.Tensor(self=%qkvb, dim=2, start=0, end=64)
  %k0: float32[1, s0, 64] = aten.slice.Tensor(self=%qkvb, dim=2, start=64, end=128)
  %v0: float32[1, s0, 64] = aten.slice.Tensor(self=%qkvb, dim=2, start=128, end=192)
  %q1: float32[1, s0, 4, 16] = aten.view.default(self=%q0, size=[1, %n, 4, 16])
  %k1: float32[1, s0, 4, 16] = aten.view.default(self=%k0, size=[1, %n, 4, 16])
  %v1: float32[1, s0, 4, 16] = aten.view.default(self=%v0, size=[1, %n, 4, 16])
  %q: float32[1, 4, s0, 16] = aten.transpose.int(self=%q1, dim0=1, dim1=2)
  %k: float32[1, 4, s0, 16] = aten.transpose.int(self=%k1, dim0=1, dim1=2)
  %v: float32[1, 4, s0, 16] = aten.transpose.int(self=%v1, dim0=1, dim1=2)
  %o: float32[1, 4, s0, 16] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, is_causal=true)
  %t: float32[1, s0, 4, 16] = aten.transpose.int(self=%o, dim0=1, dim1=2)
  %r: float32[1, s0, 64] = aten.reshape.default(self=%t, shape=[1, %n, 64])
  %y: float32[1, s0, 64] = aten.matmul.default(self=%r, other=%wo)
  %z: float32[1, s0, 64] = aten.add.Tensor(self=%y, other=%x)
  %h: float32[1, s0, 128] = aten.matmul.default(self=%z, other=%w1)
  %a: float32[1, s0, 128] = aten.gelu.default(self=%h)
  %f: float32[1, s0, 64] = aten.matmul.default(self=%a, other=%w2)
  %s: float32[1, s0, 64] = aten.softmax.int(self=%f, dim=-1)
  return (%s, %n)
}
)";

engine::Network block_network() {
  return testing::network_from(kBlock, 1, {"emb", "pos", "g", "bb", "wqkv", "bqkv", "wo", "w1", "w2"});
}

std::map<std::string, Tensor> block_weights(const engine::Network& net) {
  // Uniform in [-1, 1]; matrices scaled by 1/8 so that activations stay
  // near 1 and the closing softmax is not ruled by 16-bit rounding of large logits.
  std::map<std::string, Tensor> w;
  for (size_t i = net.num_inputs; i < net.graph.inputs().size(); ++i) {
    const ir::Value& v = *net.graph.inputs()[i];
    Tensor t = testing::conformance_input(v, 0, static_cast<uint32_t>(100 + i));
    if (v.type.sizes.size() == 2 && v.name.rfind("w", 0) == 0) {
      Tensor d = t.to(DType::Float64);
      for (int64_t k = 0; k < d.numel(); ++k) d.data<double>()[k] *= 0.125;
      t = d.to(v.type.dtype);
    }
    w[v.name] = t;
  }
  return w;
}

Tensor ids_of_length(int64_t n) {
  Tensor t = Tensor::zeros(DType::Int64, {1, n});
  for (int64_t j = 0; j < n; ++j) t.data<int64_t>()[j] = (j * 37 + 11) % 100;
  return t;
}

// The reference: the network specialized to the call's length, on the CPU kernels.
std::vector<cpu::RtValue> reference(const engine::Network& net, const std::map<std::string, Tensor>& weights,
                                    const Tensor& ids) {
  ir::Graph g = net.graph.clone();
  EXPECT_TRUE(ir::specialize(g, {{"s0", ids.sizes()[1]}}).is_ok());
  std::vector<cpu::RtValue> ins{ids};
  for (size_t i = net.num_inputs; i < g.inputs().size(); ++i) ins.emplace_back(weights.at(g.inputs()[i]->name));
  auto out = runtime::interpret(g, ins, cpu::cpu_kernels());
  EXPECT_TRUE(out.has_value()) << out.status().message();
  return out.has_value() ? *out : std::vector<cpu::RtValue>{};
}

engine::BuildOptions range_options(const std::string& precision, int64_t min, int64_t opt, int64_t max) {
  engine::BuildOptions o;
  o.precision = *parse_precision(precision);
  o.symbols["s0"] = {min, max, opt};
  return o;
}

// Runs `engine` at `length` and checks both outputs against the reference.
void expect_length(const engine::Engine& engine, const engine::Network& net,
                   const std::map<std::string, Tensor>& weights, int64_t length, double tol, const std::string& run) {
  const Tensor ids = ids_of_length(length);
  std::vector<Tensor> got;
  Status s = engine.execute(std::vector<Tensor>{ids}, got);
  ASSERT_TRUE(s.is_ok()) << run << " at length " << length << ": " << s.message();
  ASSERT_EQ(got.size(), 2u);
  const std::vector<cpu::RtValue> want = reference(net, weights, ids);
  ASSERT_EQ(want.size(), 2u);
  const Tensor w = cpu::rt_value_to_tensor(want[0]).to(DType::Float64);
  const Tensor o = got[0].to(DType::Float64);
  ASSERT_EQ(o.sizes(), w.sizes()) << run << " at length " << length;
  for (int64_t i = 0; i < w.numel(); ++i)
    ASSERT_LE(std::fabs(o.data<double>()[i] - w.data<double>()[i]), tol * (1 + std::fabs(w.data<double>()[i])))
        << run << " at length " << length << ": element " << i;
  // The length given back: an int64 0-d tensor.
  ASSERT_EQ(got[1].dtype(), DType::Int64);
  ASSERT_EQ(got[1].numel(), 1);
  EXPECT_EQ(got[1].data<int64_t>()[0], length) << run;
}

class CudaRange : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaRange, EveryLengthOfTheRangeRunsOnOneEngineFromOneBuild) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const std::string precision = GetParam();
  const double tol = precision == "fp32" ? 2e-4 : 3e-2;
  auto backend = cuda::make_cuda_backend();
  const engine::Network net = block_network();
  const std::map<std::string, Tensor> weights = block_weights(net);
  const engine::WeightLookup lookup = testing::conformance_weights(weights);
  auto plan = backend->build(block_network(), range_options(precision, 1, 32, 80));
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  auto handle = backend->load(*plan, lookup, "block");
  ASSERT_TRUE(handle.has_value()) << handle.status().message();
  engine::Engine engine(backend.get(), *handle);
  // min, opt, max, odd sizes between, a length seen before, one that changes every kernel's grid.
  for (int64_t length : {32, 1, 80, 7, 33, 32, 64, 1, 17})
    ASSERT_NO_FATAL_FAILURE(expect_length(engine, net, weights, length, tol, "as built"));

  // Outside the range, or an input of another rank: refused, naming why.
  std::vector<Tensor> got;
  Status s = engine.execute(std::vector<Tensor>{ids_of_length(81)}, got);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside the range"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[1, 80]"), std::string::npos) << s.message();
  got.clear();
  s = engine.execute(std::vector<Tensor>{Tensor::zeros(DType::Int64, {5})}, got);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("must be int64[1, s0]"), std::string::npos) << s.message();
  // And the engine goes on.
  ASSERT_NO_FATAL_FAILURE(expect_length(engine, net, weights, 9, tol, "after refusals"));

  // The serialized plan read back: the same lengths from a new engine.
  const std::vector<uint8_t> stored(plan->begin(), plan->end());
  auto again = backend->load(stored, lookup, "block (stored)");
  ASSERT_TRUE(again.has_value()) << again.status().message();
  engine::Engine loaded(backend.get(), *again);
  for (int64_t length : {5, 80, 32})
    ASSERT_NO_FATAL_FAILURE(expect_length(loaded, net, weights, length, tol, "loaded from its serialized plan"));
}

// A server's stream: a seeded draw of lengths across the whole range, each
// against the reference and each run a second time with the same bits. The
// build planned every length into the plan's table, compiled every kernel and
// chose every algorithm: serving plans, compiles and chooses nothing (the
// counters say so). By default the engine keeps every length of its table,
// each prepared with its graph at load, so the stream prepares and captures
// nothing either; with 16 kept, a length's first two calls launch its steps
// directly, the second asking for its graph (captured on the context's
// capturer thread), and later calls replay it, with the same bits.
TEST_P(CudaRange, ASeededStreamOfRandomLengthsComputesRightWithoutCompilingAnything) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const std::string precision = GetParam();
  const double tol = precision == "fp32" ? 2e-4 : 3e-2;
  for (size_t kept : {0u, 16u}) {
    SCOPED_TRACE(kept ? "16 shapes kept" : "every shape kept");
    auto backend = cuda::make_cuda_backend({.shapes_kept = kept});
    const engine::Network net = block_network();
    const std::map<std::string, Tensor> weights = block_weights(net);
    // Before the load: the load prepares opt, and (to load the libraries'
    // kernels) any length whose GEMMs no earlier engine of the process used.
    const cuda::RunTimeWork before_load = cuda::run_time_work();
    auto plan = backend->build(block_network(), range_options(precision, 1, 32, 80));
    ASSERT_TRUE(plan.has_value()) << plan.status().message();
    auto handle = backend->load(*plan, testing::conformance_weights(weights), "block");
    ASSERT_TRUE(handle.has_value()) << handle.status().message();
    engine::Engine engine(backend.get(), *handle);
    std::mt19937 rng(20261204);
    std::uniform_int_distribution<int64_t> length(1, 80);
    const cuda::RunTimeWork before = cuda::run_time_work();
    std::set<int64_t> seen;
    for (int i = 0; i < 24; ++i) {
      const int64_t n = length(rng);
      const bool fresh = seen.insert(n).second;
      std::vector<Tensor> first, again;
      ASSERT_TRUE(engine.execute(std::vector<Tensor>{ids_of_length(n)}, first).is_ok());
      ASSERT_TRUE(engine.execute(std::vector<Tensor>{ids_of_length(n)}, again).is_ok());
      EXPECT_TRUE(first[0].same_bytes(again[0])) << "length " << n << ": a replayed graph changed the result";
      if (fresh) {
        ASSERT_NO_FATAL_FAILURE(expect_length(engine, net, weights, n, tol, "stream"));
      }
    }
    // Graphs are captured on the context's capturer thread: waited for.
    ASSERT_TRUE(backend->synchronize(*handle).is_ok());
    const cuda::RunTimeWork after = cuda::run_time_work();
    EXPECT_EQ(after.kernels_compiled, before.kernels_compiled) << "kernels compiled while serving";
    EXPECT_EQ(after.shapes_planned, before.shapes_planned) << "lengths planned while serving";
    EXPECT_EQ(after.algorithms_chosen, before.algorithms_chosen) << "algorithms chosen while serving";
    if (kept == 0) {
      EXPECT_EQ(after.shapes_prepared, before.shapes_prepared) << "every length was prepared at load";
      EXPECT_EQ(after.graphs_captured, before.graphs_captured) << "every length's graph was captured at load";
    } else {
      // Every length met was prepared, at load or while serving (opt perhaps
      // when the context opened, which the counter does not see).
      EXPECT_GE(after.shapes_prepared - before_load.shapes_prepared, seen.size() - 1);
      EXPECT_GT(after.graphs_captured, before.graphs_captured);
    }
  }
}

// A range past KILN_CUDA_SHAPE_TABLE shapes (here 0) gets no table: its
// lengths are planned from the layer graph when first called, and compute
// the same.
TEST_P(CudaRange, WithoutATableEachNewLengthIsPlannedWhenFirstCalled) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const std::string precision = GetParam();
  const double tol = precision == "fp32" ? 2e-4 : 3e-2;
  auto backend = cuda::make_cuda_backend();
  const engine::Network net = block_network();
  const std::map<std::string, Tensor> weights = block_weights(net);
  const Settings before_build = settings();
  Settings no_table = before_build;
  no_table.cuda.shape_table = "0";
  set_settings(no_table);
  auto plan = backend->build(block_network(), range_options(precision, 1, 32, 80));
  set_settings(before_build);
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  auto handle = backend->load(*plan, testing::conformance_weights(weights), "block");
  ASSERT_TRUE(handle.has_value()) << handle.status().message();
  engine::Engine engine(backend.get(), *handle);
  const cuda::RunTimeWork before = cuda::run_time_work();
  for (int64_t n : {1, 7, 33, 80, 64})
    ASSERT_NO_FATAL_FAILURE(expect_length(engine, net, weights, n, tol, "planned when called"));
  EXPECT_EQ(cuda::run_time_work().shapes_planned - before.shapes_planned, 5u);
}

INSTANTIATE_TEST_SUITE_P(CudaRanges, CudaRange, ::testing::Values("fp32", "fp16", "bf16"),
                         [](const auto& info) { return info.param; });

// With room for one or two shapes, lengths that come back after others were
// dropped are made again from the plan (no build) and give the same results.
TEST(CudaRangeShapes, LengthsDroppedFromAFewKeptShapesComeBackRight) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const engine::Network net = block_network();
  const std::map<std::string, Tensor> weights = block_weights(net);
  const engine::WeightLookup lookup = testing::conformance_weights(weights);
  for (size_t kept : {1u, 2u}) {
    auto backend = cuda::make_cuda_backend({.shapes_kept = kept});
    auto plan = backend->build(block_network(), range_options("fp16", 1, 32, 80));
    ASSERT_TRUE(plan.has_value()) << plan.status().message();
    auto handle = backend->load(*plan, lookup, "block");
    ASSERT_TRUE(handle.has_value()) << handle.status().message();
    engine::Engine engine(backend.get(), *handle);
    for (int64_t length : {32, 5, 32, 70, 5, 32, 70, 70, 5})
      ASSERT_NO_FATAL_FAILURE(
          expect_length(engine, net, weights, length, 3e-2, std::to_string(kept) + " shape(s) kept"));
  }
}

// Calls of one engine on eight threads run side by side, each on a context of
// its own (memory, stream, prepared lengths) over the engine's one copy of
// its weights: every result has the bits of the same call made alone, and
// the device holds no second copy of a weight. With one context allowed the
// calls take turns and give the same bits.
TEST(CudaRangeContexts, CallsOnEightThreadsGiveTheBitsOfSerialCallsOverOneCopyOfTheWeights) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const engine::Network net = block_network();
  const std::map<std::string, Tensor> weights = block_weights(net);
  const std::vector<int64_t> lengths = {32, 5, 80, 17, 1, 64, 33, 9, 48, 71};
  for (size_t contexts : {8u, 1u}) {
    SCOPED_TRACE(std::to_string(contexts) + " context(s)");
    auto backend = cuda::make_cuda_backend({.contexts = contexts});
    auto plan = backend->build(block_network(), range_options("fp16", 1, 32, 80));
    ASSERT_TRUE(plan.has_value()) << plan.status().message();
    auto handle = backend->load(*plan, testing::conformance_weights(weights), "block");
    ASSERT_TRUE(handle.has_value()) << handle.status().message();
    engine::Engine engine(backend.get(), *handle);
    std::vector<Tensor> want;
    for (int64_t n : lengths) {
      std::vector<Tensor> got;
      ASSERT_TRUE(engine.execute(std::vector<Tensor>{ids_of_length(n)}, got).is_ok());
      want.push_back(got[0]);
    }
    const auto copies = cuda::device_weight_copies();
    constexpr int kThreads = 8;
    std::vector<std::string> errors(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        for (int round = 0; round < 4; ++round)
          for (size_t k = 0; k < lengths.size(); ++k) {
            const size_t i = (k + static_cast<size_t>(t)) % lengths.size();
            std::vector<Tensor> got;
            if (Status s = engine.execute(std::vector<Tensor>{ids_of_length(lengths[i])}, got); !s) {
              errors[t] = s.message();
              return;
            }
            if (!got[0].same_bytes(want[i])) {
              errors[t] = "length " + std::to_string(lengths[i]) + " differs from the serial call's bits";
              return;
            }
          }
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
    EXPECT_EQ(cuda::device_weight_copies(), copies) << "a context copied the weights";
    EXPECT_TRUE(backend->synchronize(engine.handle()).is_ok());
  }
}

// KILN_CUDA_SHAPES says how many shapes a range engine keeps when the
// backend's options do not; a value that is not a count is refused at load, by name.
TEST(CudaRangeShapes, AKeptShapeCountFromTheEnvironmentIsCheckedAtLoad) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto backend = cuda::make_cuda_backend();
  auto plan = backend->build(block_network(), range_options("fp16", 1, 32, 80));
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  const engine::Network net = block_network();
  const std::map<std::string, Tensor> weights = block_weights(net);
  const engine::WeightLookup lookup = testing::conformance_weights(weights);
  const Settings before = settings();
  auto with_shapes = [&](const char* v) {
    Settings s = before;
    s.cuda.shapes = v;
    set_settings(s);
  };
  for (const char* bad : {"0", "-3", "many", "12x"}) {
    with_shapes(bad);
    auto handle = backend->load(*plan, lookup, "block");
    set_settings(before);
    ASSERT_FALSE(handle.has_value()) << bad;
    EXPECT_EQ(handle.status().code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(handle.status().message().find("KILN_CUDA_SHAPES"), std::string::npos) << handle.status().message();
  }
  with_shapes("3");
  auto handle = backend->load(*plan, lookup, "block");
  set_settings(before);
  ASSERT_TRUE(handle.has_value()) << handle.status().message();
  engine::Engine engine(backend.get(), *handle);
  for (int64_t length : {1, 2, 3, 4, 1, 80})
    ASSERT_NO_FATAL_FAILURE(expect_length(engine, net, weights, length, 3e-2, "3 shapes kept"));
}

TEST(CudaRangeBuild, ASizeWithoutAFiniteRangeIsRefusedByName) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto backend = cuda::make_cuda_backend();
  engine::BuildOptions o;
  auto plan = backend->build(block_network(), o);
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(plan.status().message().find("s0"), std::string::npos) << plan.status().message();
}

}  // namespace
}  // namespace kiln
