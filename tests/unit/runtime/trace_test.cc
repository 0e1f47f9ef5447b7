// Traced calls: a Chrome trace of the call, its engines and fallback nodes
// and each engine's steps, nested in time, with outputs equal to an
// untraced call's; and the trace's JSON as the Trace Event Format reads it.
#include "kiln/trace.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "base/safetensors.h"
#include "kiln/kiln.h"
#include "support/tensor_diff.h"

namespace kiln {
namespace {

const std::string kFixtures = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";

std::vector<Tensor> fixture_inputs(const std::string& io, size_t n) {
  auto f = read_safetensors(kFixtures + io);
  EXPECT_TRUE(f.has_value()) << f.status().message();
  std::vector<Tensor> inputs;
  for (size_t i = 0; f && i < n; ++i) {
    const Tensor* t = f->find("input." + std::to_string(i));
    EXPECT_NE(t, nullptr) << io << " input " << i;
    if (t) inputs.push_back(*t);
  }
  return inputs;
}

// A traced call of `model`: its outputs (bit-identical to an untraced call's) and its slices.
std::vector<Trace::Event> traced_call(const std::string& model, const std::string& io) {
  auto program = compile(kFixtures + model);
  EXPECT_TRUE(program.has_value()) << program.status().message();
  if (!program) return {};
  const std::vector<Tensor> inputs = fixture_inputs(io, (*program)->inputs().size());
  Session s(*program);
  auto plain = s.run(inputs);
  EXPECT_TRUE(plain.has_value()) << plain.status().message();
  Trace trace;
  RunOptions options;
  options.trace = &trace;
  auto traced = s.run(inputs, options);
  EXPECT_TRUE(traced.has_value()) << traced.status().message();
  if (!plain || !traced) return {};
  EXPECT_EQ(plain->size(), traced->size());
  for (size_t i = 0; i < plain->size() && i < traced->size(); ++i)
    EXPECT_EQ(testing::max_abs_diff((*plain)[i], (*traced)[i]), 0.0) << model << " output " << i;
  return trace.events();
}

bool inside(const Trace::Event& inner, const Trace::Event& outer) {
  return inner.start_us >= outer.start_us && inner.start_us + inner.duration_us <= outer.start_us + outer.duration_us;
}

TEST(Trace, OneEngineCallHasTheCallTheEngineAndItsStepsNested) {
  const std::vector<Trace::Event> events = traced_call("resnet_basic.pt2", "resnet_basic.io.safetensors");
  ASSERT_FALSE(events.empty());
  // The call's slice is added last and holds every other slice.
  const Trace::Event& call = events.back();
  EXPECT_EQ(call.name, "call forward");
  const Trace::Event* engine = nullptr;
  int steps = 0;
  for (const Trace::Event& e : events) {
    EXPECT_EQ(e.track, "host") << e.name;
    EXPECT_GE(e.duration_us, 0) << e.name;
    EXPECT_TRUE(inside(e, call)) << e.name;
    if (e.name == "engine 0") engine = &e;
  }
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->detail.rfind("cpu, ", 0), 0u) << engine->detail;
  for (const Trace::Event& e : events) {
    if (&e == &call || &e == engine) continue;
    ++steps;
    EXPECT_TRUE(inside(e, *engine)) << e.name;
    EXPECT_EQ(e.detail.rfind("node ", 0), 0u) << e.detail;
  }
  EXPECT_GT(steps, 10);  // the CPU engine's nodes (convolutions, pools, the linear layer)
  bool conv = false;
  for (const Trace::Event& e : events) conv = conv || e.name.find("conv") != std::string::npos;
  EXPECT_TRUE(conv);
}

TEST(Trace, FallbackNodesAreSlicesThatSayWhyTheyFellBack) {
  const std::vector<Trace::Event> events = traced_call("nonzero.pt2", "nonzero.io.safetensors");
  ASSERT_FALSE(events.empty());
  bool nonzero = false;
  for (const Trace::Event& e : events) {
    if (&e == &events.back()) continue;  // the call
    EXPECT_EQ(e.detail.rfind("fallback node ", 0), 0u) << e.name << ": " << e.detail;
    if (e.name == "aten.nonzero.default") {
      nonzero = true;
      EXPECT_NE(e.detail.find("depends on tensor data"), std::string::npos) << e.detail;
    }
  }
  EXPECT_TRUE(nonzero);
}

TEST(Trace, ChromeJsonHasOneThreadPerTrackAndOneCompleteEventPerSlice) {
  Trace trace;
  std::thread other([&] { trace.add({"gemm", "cuBLASLt gemm", "cuda", 5, 2}); });
  trace.add({"call forward", "1 inputs", "host", 0, 10});
  other.join();
  trace.add({"engine 0", "cuda, 3 nodes", "host", 1, 8});
  const nlohmann::json j = nlohmann::json::parse(trace.chrome_json());
  ASSERT_TRUE(j.contains("traceEvents"));
  std::map<int, std::string> threads;
  std::vector<nlohmann::json> slices;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") threads[e["tid"].get<int>()] = e["args"]["name"];
    if (e["ph"] == "X") slices.push_back(e);
  }
  EXPECT_EQ(threads, (std::map<int, std::string>{{1, "host"}, {2, "cuda"}}));
  ASSERT_EQ(slices.size(), 3u);
  for (const auto& e : slices) {
    EXPECT_EQ(e["pid"], 1);
    EXPECT_EQ(threads.at(e["tid"].get<int>()), e["cat"]);
    if (e["name"] == "gemm") {
      EXPECT_EQ(e["ts"].get<double>(), 5);
      EXPECT_EQ(e["dur"].get<double>(), 2);
      EXPECT_EQ(e["args"]["detail"], "cuBLASLt gemm");
    }
  }
  EXPECT_FALSE(trace.write("/nonexistent-dir/t.json").is_ok());
}

}  // namespace
}  // namespace kiln
