// The compile driver (compiler::compile_module): a lowered module partitioned
// for a backend, each engine segment built, fallback segments with their
// reasons, and the compiled program run by the runtime's Executable giving
// what the reference interpreter gives for the same module. Engine cache
// keys change with everything that changes a plan and nothing else.
#include <gtest/gtest.h>

#include "compiler/compiler.h"
#include "convert/registry.h"
#include "engine/backend.h"
#include "program/compiled_program.h"
#include "program/engine_cache.h"
#include "runtime/executable.h"
#include "support/tensor_diff.h"
#include "unit/lowering/rewrite_test_util.h"

namespace kiln::compiler {
namespace {

using lowering::testing::module_from;
using lowering::testing::random_user_inputs;
using lowering::testing::run_module;

// Two runs of elementwise work with a matrix product between; sin is the op
// the tests force out of engines.
constexpr const char* kProgram = R"(graph(%x: float32[4, 8], %p_w: float32[8, 8]) {
  %a: float32[4, 8] = aten.relu.default(self=%x)
  %b: float32[4, 8] = aten.mm.default(self=%a, mat2=%p_w)
  %c: float32[4, 8] = aten.exp.default(self=%b)
  %d: float32[4, 8] = aten.sin.default(self=%c)
  %e: float32[4, 8] = aten.neg.default(self=%d)
  %f: float32[4, 8] = aten.cos.default(self=%e)
  %g: float32[4, 8] = aten.mul.Tensor(self=%f, other=%x)
  return (%g, %c)
}
)";

CompileSettings cpu_settings() {
  CompileSettings s;
  s.device = "cpu";
  s.partition.min_block_size = 1;
  return s;
}

// The compiled program run by the runtime against the interpreter on the module itself.
void expect_runs_as_the_module(const ir::Module& m, program::CompiledProgram cp) {
  auto exec = runtime::Executable::load(std::move(cp), "test program");
  ASSERT_TRUE(exec.has_value()) << exec.status().message();
  const std::vector<Tensor> user = random_user_inputs(m, 3);
  auto want = run_module(m, user);
  ASSERT_TRUE(want.has_value()) << want.status().message();
  std::vector<engine::RtValue> in{user[0], m.weights.at("w")};
  auto got = (*exec)->run(std::move(in));
  ASSERT_TRUE(got.has_value()) << got.status().message();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < want->size(); ++i)
    EXPECT_LT(testing::max_abs_diff(engine::rt_value_to_tensor((*got)[i]), (*want)[i]), 1e-5) << "output " << i;
}

TEST(CompileModule, OneEngineForAProgramTheBackendTakesWhole) {
  const ir::Module m = module_from(kProgram);
  auto cp = compile_module(ir::clone_module(m), cpu_settings());
  ASSERT_TRUE(cp.has_value()) << cp.status().message();
  ASSERT_EQ(cp->segments.size(), 1u);
  EXPECT_EQ(cp->segments[0].kind, partition::SegmentKind::kEngine);
  EXPECT_EQ(cp->segments[0].backend, "cpu");
  EXPECT_FALSE(cp->segments[0].plan.empty());
  EXPECT_EQ(cp->device, "cpu");
  expect_runs_as_the_module(m, std::move(*cp));
}

TEST(CompileModule, AForcedOutOpFallsBackBetweenTwoEnginesAndSaysWhy) {
  const ir::Module m = module_from(kProgram);
  CompileSettings s = cpu_settings();
  s.partition.fallback_ops = {"aten.sin"};
  auto cp = compile_module(ir::clone_module(m), s);
  ASSERT_TRUE(cp.has_value()) << cp.status().message();
  ASSERT_EQ(cp->segments.size(), 3u);
  EXPECT_EQ(cp->segments[0].kind, partition::SegmentKind::kEngine);
  EXPECT_EQ(cp->segments[1].kind, partition::SegmentKind::kFallback);
  EXPECT_EQ(cp->segments[2].kind, partition::SegmentKind::kEngine);
  ASSERT_EQ(cp->segments[1].nodes.size(), 1u);
  ASSERT_EQ(cp->segments[1].reasons.size(), 1u);
  EXPECT_NE(cp->segments[1].reasons[0].find("sin"), std::string::npos) << cp->segments[1].reasons[0];
  EXPECT_TRUE(cp->segments[1].plan.empty());
  expect_runs_as_the_module(m, std::move(*cp));
}

TEST(CompileModule, PrintAfterShowsEachEnginesNetworkAfterTheBackendsPassAndSkipsTheCache) {
  const ir::Module m = module_from(kProgram);
  CompileSettings s = cpu_settings();
  s.partition.fallback_ops = {"aten.sin"};
  s.cache = program::engine_cache_for(::testing::TempDir() + "/print_after_engine_cache");
  // Filled without dumps: a second compile takes both engines from the cache.
  ASSERT_TRUE(compile_module(ir::clone_module(m), s).has_value());
  auto cached = compile_module(ir::clone_module(m), s);
  ASSERT_TRUE(cached.has_value()) << cached.status().message();
  EXPECT_TRUE(cached->segments[0].from_cache && cached->segments[2].from_cache);
  std::vector<std::pair<std::string, std::string>> dumps;
  s.print_after = {"fuse-elementwise"};
  s.dump = [&](const std::string& pass, const std::string& text) { dumps.emplace_back(pass, text); };
  auto cp = compile_module(ir::clone_module(m), s);
  ASSERT_TRUE(cp.has_value()) << cp.status().message();
  ASSERT_EQ(dumps.size(), 2u);
  EXPECT_EQ(dumps[0].first.rfind("fuse-elementwise in engine 1/2 (segment 0", 0), 0u) << dumps[0].first;
  EXPECT_EQ(dumps[1].first.rfind("fuse-elementwise in engine 2/2 (segment 2", 0), 0u) << dumps[1].first;
  // The second engine's neg, cos and mul are one fused layer.
  EXPECT_NE(dumps[1].second.find("kiln.fused_elementwise"), std::string::npos) << dumps[1].second;
  EXPECT_EQ(dumps[1].second.find("aten.cos.default(self="), std::string::npos) << dumps[1].second;
  for (const auto& seg : cp->segments) EXPECT_FALSE(seg.from_cache);
  expect_runs_as_the_module(m, std::move(*cp));
}

TEST(CompileModule, ADisabledNetworkPassIsSkippedAndKeysTheEngine) {
  const ir::Module m = module_from(kProgram);
  CompileSettings s = cpu_settings();
  std::vector<std::string> passes_run;
  s.print_after = {"all"};
  s.dump = [&](const std::string& pass, const std::string& text) {
    passes_run.push_back(pass.substr(0, pass.find(' ')));
    EXPECT_EQ(text.find("kiln.fused_elementwise"), std::string::npos) << text;
  };
  s.disabled_passes = {"fuse-elementwise"};
  auto cp = compile_module(ir::clone_module(m), s);
  ASSERT_TRUE(cp.has_value()) << cp.status().message();
  EXPECT_TRUE(passes_run.empty());
  expect_runs_as_the_module(m, std::move(*cp));

  const engine::Backend* cpu = program::builtin_backends().find("cpu");
  auto part = partition::partition_by_capability(
      m, [](const ir::Node&) { return partition::Capability::yes(); },
      partition::PartitionOptions{0, {}, false, false});
  ASSERT_TRUE(part.has_value());
  auto net = convert::convert_segment(m, part->segments.at(0), convert::builtin_converters(), cpu->target());
  ASSERT_TRUE(net.has_value()) << net.status().message();
  const std::string plain = engine_cache_key(*cpu, *net, Precision::kFp32);
  EXPECT_NE(engine_cache_key(*cpu, *net, Precision::kFp32, {}, {"fuse-elementwise"}), plain);
  // A lowering pass's name does not change an engine's key: its network shows what the pass did.
  EXPECT_EQ(engine_cache_key(*cpu, *net, Precision::kFp32, {}, {"fuse-gelu"}), plain);
}

TEST(CompileModule, PartitionOnlyBuildsNoPlanAndTheNullDeviceBuildsNoEngine) {
  CompileSettings s = cpu_settings();
  s.build_engines = false;
  auto cp = compile_module(module_from(kProgram), s);
  ASSERT_TRUE(cp.has_value()) << cp.status().message();
  ASSERT_EQ(cp->segments.size(), 1u);
  EXPECT_EQ(cp->segments[0].kind, partition::SegmentKind::kEngine);
  EXPECT_TRUE(cp->segments[0].plan.empty());

  CompileSettings null = cpu_settings();
  null.device = "null";
  auto none = compile_module(module_from(kProgram), null);
  ASSERT_TRUE(none.has_value()) << none.status().message();
  for (const program::SegmentRecord& r : none->segments) {
    EXPECT_EQ(r.kind, partition::SegmentKind::kFallback);
    for (const std::string& why : r.reasons) EXPECT_FALSE(why.empty());
  }

  CompileSettings unknown = cpu_settings();
  unknown.device = "tpu";
  auto bad = compile_module(module_from(kProgram), unknown);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("tpu"), std::string::npos) << bad.status().message();
}

TEST(CompileModule, RequireFullCompilationNamesTheNodeLeftOut) {
  CompileSettings s = cpu_settings();
  s.partition.fallback_ops = {"aten.sin"};
  s.partition.require_full_compilation = true;
  auto cp = compile_module(module_from(kProgram), s);
  ASSERT_FALSE(cp.has_value());
  EXPECT_NE(cp.status().message().find("sin"), std::string::npos) << cp.status().message();
}

// The key of a segment's plan: equal for equal networks and settings, and
// different when the network or the precision differs.
TEST(CompileModule, EngineCacheKeysFollowWhatChangesAPlan) {
  const engine::Backend* cpu = program::builtin_backends().find("cpu");
  ASSERT_NE(cpu, nullptr);
  auto network_of = [&](const char* text) {
    ir::Module m = module_from(text);
    auto part = partition::partition_by_capability(
        m, [](const ir::Node&) { return partition::Capability::yes(); },
        partition::PartitionOptions{0, {}, false, false});
    EXPECT_TRUE(part.has_value());
    auto net = convert::convert_segment(m, part->segments.at(0), convert::builtin_converters(), cpu->target());
    EXPECT_TRUE(net.has_value()) << net.status().message();
    return std::move(*net);
  };
  const engine::Network a = network_of(kProgram), b = network_of(kProgram);
  EXPECT_EQ(engine_cache_key(*cpu, a, Precision::kFp32), engine_cache_key(*cpu, b, Precision::kFp32));
  EXPECT_NE(engine_cache_key(*cpu, a, Precision::kFp32), engine_cache_key(*cpu, a, Precision::kFp16));
  std::string other = kProgram;
  other.replace(other.find("aten.exp.default"), 16, "aten.tanh.default");
  EXPECT_NE(engine_cache_key(*cpu, a, Precision::kFp32),
            engine_cache_key(*cpu, network_of(other.c_str()), Precision::kFp32));
}

}  // namespace
}  // namespace kiln::compiler
