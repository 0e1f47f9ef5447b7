#include <gtest/gtest.h>

#include <map>

#include "backends/cpu/kernel.h"
#include "ir/printer.h"
#include "lowering/pass.h"
#include "runtime/interpreter.h"

namespace kiln::lowering {
namespace {

using ir::InputSpec;

// y = x @ w.t() + (b * 2) + steps: w.t() and b * 2 depend only on weights and
// fold; the buffer read stays a run-time input.
constexpr const char* kBefore = R"(graph(%p_w: float32[3, 2], %c_b: float32[3], %b_steps: float32[], %x: float32[1, 2]) {
  %t: float32[2, 3] = aten.t.default(self=%p_w)
  %b2: float32[3] = aten.mul.Tensor(self=%c_b, other=2)
  %mm: float32[1, 3] = aten.mm.default(self=%x, mat2=%t)
  %y: float32[1, 3] = aten.add.Tensor(self=%mm, other=%b2)
  %z: float32[1, 3] = aten.add.Tensor(self=%y, other=%b_steps)
  return (%z)
}
)";

constexpr const char* kAfter = R"(graph(%p_w: float32[3, 2], %c_b: float32[3], %b_steps: float32[], %x: float32[1, 2], %_folded.t: float32[2, 3], %_folded.b2: float32[3]) {
  %mm: float32[1, 3] = aten.mm.default(self=%x, mat2=%_folded.t)
  %y: float32[1, 3] = aten.add.Tensor(self=%mm, other=%_folded.b2)
  %z: float32[1, 3] = aten.add.Tensor(self=%y, other=%b_steps)
  return (%z)
}
)";

TEST(FoldConstants, WeightOnlySubgraphsBecomeConstants) {
  auto g = ir::parse_graph(kBefore);
  ASSERT_TRUE(g.has_value()) << g.status().message();
  ir::Module m;
  m.graph = std::move(*g);
  m.input_specs = {{InputSpec::Kind::kParameter, "w", true},
                   {InputSpec::Kind::kConstant, "b", true},
                   {InputSpec::Kind::kBuffer, "steps", true},
                   {InputSpec::Kind::kUserInput, "", true}};
  m.output_specs = {{ir::OutputSpec::Kind::kUserOutput, ""}};
  Tensor w = Tensor::zeros(DType::Float32, {3, 2});
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = static_cast<float>(i + 1);  // [[1,2],[3,4],[5,6]]
  Tensor b = Tensor::zeros(DType::Float32, {3});
  for (int i = 0; i < 3; ++i) b.data<float>()[i] = static_cast<float>(10 * (i + 1));
  m.weights = {{"w", w}, {"b", b}, {"steps", Tensor::scalar(DType::Float32, 0.5)}};

  ASSERT_TRUE(fold_constants(m).is_ok());
  auto want = ir::parse_graph(kAfter);
  ASSERT_TRUE(want.has_value()) << want.status().message();
  std::string why;
  EXPECT_TRUE(ir::graphs_equal(m.graph, *want, &why)) << why;
  ASSERT_EQ(m.input_specs.size(), 6u);
  EXPECT_EQ(m.input_specs[4].kind, InputSpec::Kind::kConstant);
  EXPECT_EQ(m.input_specs[4].target, "_folded.t");
  // The folded transpose holds w's columns as rows.
  const Tensor& t = m.weights.at("_folded.t");
  const float want_t[] = {1, 3, 5, 2, 4, 6};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.value_at(i), want_t[i]);

  // x = [1, 1]: x @ w.t() = [3, 7, 11]; + 2b = [23, 47, 71]; + 0.5.
  Tensor x = Tensor::zeros(DType::Float32, {1, 2});
  x.data<float>()[0] = x.data<float>()[1] = 1;
  std::vector<cpu::RtValue> inputs = {w, b, m.weights.at("steps"), x, t, m.weights.at("_folded.b2")};
  auto out = runtime::interpret(m.graph, inputs, cpu::cpu_kernels());
  ASSERT_TRUE(out.has_value()) << out.status().message();
  const Tensor& z = std::get<Tensor>((*out)[0]);
  const float want_z[] = {23.5, 47.5, 71.5};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(z.value_at(i), want_z[i]);
}

TEST(FoldConstants, BuffersAndUserInputsAreNeverFolded) {
  auto g = ir::parse_graph(R"(graph(%b_s: float32[2], %x: float32[2]) {
  %a: float32[2] = aten.mul.Tensor(self=%b_s, other=3)
  %y: float32[2] = aten.add.Tensor(self=%a, other=%x)
  return (%y)
}
)");
  ASSERT_TRUE(g.has_value());
  ir::Module m;
  m.graph = std::move(*g);
  m.input_specs = {{InputSpec::Kind::kBuffer, "s", true}, {InputSpec::Kind::kUserInput, "", true}};
  m.output_specs = {{ir::OutputSpec::Kind::kUserOutput, ""}};
  m.weights = {{"s", Tensor::zeros(DType::Float32, {2})}};
  std::string before = ir::print_graph(m.graph);
  ASSERT_TRUE(fold_constants(m).is_ok());
  EXPECT_EQ(ir::print_graph(m.graph), before);
  EXPECT_EQ(m.input_specs.size(), 2u);
}

// new_ones / zeros_like of a user input (BERT's attention-mask code does
// this) give values that depend only on their static sizes: they fold into
// constants even though their operand is an input; one of symbolic size does not.
TEST(FoldConstants, ResultsOfStaticSizeThatIgnoreTheirOperandsValuesFold) {
  auto g = ir::parse_graph(R"(graph(%x: int64[2, s0], %m: bool[2, s0]) {
  %one: bool[] = aten.new_ones.default(self=%x, size=[], dtype=dtype.bool, pin_memory=false)
  %zero: float32[3] = aten.new_zeros.default(self=%x, size=[3], dtype=dtype.float32)
  %like: int64[2, s0] = aten.ones_like.default(self=%x)
  %a: bool[2, s0] = aten.__and__.Tensor(self=%one, other=%m)
  return (%a, %zero, %like)
}
)");
  ASSERT_TRUE(g.has_value()) << g.status().message();
  ir::Module m;
  m.graph = std::move(*g);
  m.input_specs = {{InputSpec::Kind::kUserInput, "", true}, {InputSpec::Kind::kUserInput, "", true}};
  m.output_specs = {{ir::OutputSpec::Kind::kUserOutput, ""},
                    {ir::OutputSpec::Kind::kUserOutput, ""},
                    {ir::OutputSpec::Kind::kUserOutput, ""}};
  ASSERT_TRUE(fold_constants(m).is_ok());
  std::map<std::string, int> ops;
  for (const auto& n : m.graph.nodes()) ++ops[std::string(ir::op_target(n->op))];
  EXPECT_EQ(ops.count("aten.new_ones.default"), 0u);
  EXPECT_EQ(ops.count("aten.new_zeros.default"), 0u);
  EXPECT_EQ(ops["aten.ones_like.default"], 1);  // its size is symbolic
  EXPECT_EQ(ops["aten.__and__.Tensor"], 1);
  ASSERT_EQ(m.weights.count("_folded.one"), 1u);
  const Tensor& one = m.weights.at("_folded.one");
  EXPECT_EQ(one.dtype(), DType::Bool);
  EXPECT_EQ(one.numel(), 1);
  EXPECT_EQ(one.value_at(0), 1.0);
  const Tensor& zero = m.weights.at("_folded.zero");
  EXPECT_EQ(zero.dtype(), DType::Float32);
  ASSERT_EQ(zero.numel(), 3);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(zero.value_at(i), 0.0);
}

}  // namespace
}  // namespace kiln::lowering
