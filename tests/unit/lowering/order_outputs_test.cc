// Invariant 4: one canonical output order (buffer mutations first, in buffer
// order, then user outputs) for the program's results, each engine's outputs
// and the runtime, which refuses a program out of that order.
#include <gtest/gtest.h>

#include "lowering/pass.h"
#include "partition/partition.h"
#include "compiler/compiler.h"
#include "program/compiled_program.h"
#include "runtime/executable.h"
#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

// Two buffers written (b before a in the export's outputs, a before b in buffer
// order) around a user output that comes first.
constexpr const char* kProgram = R"(graph(%b_a: float32[4], %b_b: float32[4], %x: float32[4]) {
  %y: float32[4] = aten.mul.Tensor(self=%x, other=%b_a)
  %nb: float32[4] = aten.add.Tensor(self=%b_b, other=%x)
  %na: float32[4] = aten.sub.Tensor(self=%b_a, other=%x)
  return (%y, %nb, %na)
}
)";

ir::Module program() {
  ir::Module m = testing::module_from(kProgram);
  m.output_specs = {{ir::OutputSpec::Kind::kUserOutput, ""},
                    {ir::OutputSpec::Kind::kBufferMutation, "b"},
                    {ir::OutputSpec::Kind::kBufferMutation, "a"}};
  return m;
}

TEST(OrderOutputs, BufferMutationsInBufferOrderThenUserOutputs) {
  ir::Module m = program();
  EXPECT_FALSE(ir::OutputOrder(m).program_outputs_ordered());
  ASSERT_TRUE(order_outputs(m).is_ok());
  ASSERT_EQ(m.graph.outputs().size(), 3u);
  EXPECT_EQ(m.graph.outputs()[0]->name, "na");
  EXPECT_EQ(m.graph.outputs()[1]->name, "nb");
  EXPECT_EQ(m.graph.outputs()[2]->name, "y");
  EXPECT_EQ(m.output_specs[0].target, "a");
  EXPECT_EQ(m.output_specs[1].target, "b");
  EXPECT_EQ(m.output_specs[2].kind, ir::OutputSpec::Kind::kUserOutput);
  EXPECT_TRUE(ir::OutputOrder(m).program_outputs_ordered());
}

TEST(OrderOutputs, EnginesBindTheirOutputsInTheSameOrder) {
  ir::Module m = program();
  ASSERT_TRUE(order_outputs(m).is_ok());
  // One segment holding every node: its outputs are the program's, in the program's order.
  partition::PartitionOptions o;
  o.min_block_size = 1;
  auto p = partition::partition_by_capability(m, [](const ir::Node&) { return partition::Capability::yes(); }, o);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_EQ(p->segments.size(), 1u);
  const auto& outs = p->segments[0].outputs;
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[0]->name, "na");
  EXPECT_EQ(outs[1]->name, "nb");
  EXPECT_EQ(outs[2]->name, "y");
}

TEST(OrderOutputs, TheRuntimeRefusesAProgramOutOfOrderAndRunsOneInOrder) {
  ir::Module m = program();
  ASSERT_TRUE(order_outputs(m).is_ok());
  compiler::CompileSettings cs;
  cs.partition.min_block_size = 1;
  auto good = compiler::compile_module(testing::clone_module(m), cs);
  ASSERT_TRUE(good.has_value()) << good.status().message();
  auto loaded = runtime::Executable::load(std::move(*good), "ordered");
  ASSERT_TRUE(loaded.has_value()) << loaded.status().message();
  // The same program with its results swapped back into the export's order.
  auto cp = compiler::compile_module(testing::clone_module(m), cs);
  ASSERT_TRUE(cp.has_value()) << cp.status().message();
  program::CompiledProgram bad = std::move(*cp);
  std::swap(bad.module.graph.outputs()[0], bad.module.graph.outputs()[2]);
  std::swap(bad.module.output_specs[0], bad.module.output_specs[2]);
  auto e = runtime::Executable::load(std::move(bad), "swapped");
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.status().code(), ErrorCode::kFormat);
  EXPECT_NE(e.status().message().find("not in kiln's order"), std::string::npos) << e.status().message();
}

}  // namespace
}  // namespace kiln::lowering
