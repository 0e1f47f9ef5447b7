#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/kernel.h"
#include "ir/printer.h"
#include "lowering/pass.h"
#include "runtime/interpreter.h"

namespace kiln::lowering {
namespace {

using ir::InputSpec;

// The write pattern PT2.md records for
//   self.cache[:, :, 3] = k; self.state.copy_(k[0]); self.steps.add_(1); return cache.sum() + state
constexpr const char* kBefore = R"(graph(%b_cache: float32[2, 2, 4], %b_state: float32[2], %b_steps: int64[], %k: float32[2, 2]) {
  %select: float32[2, 2] = aten.select.int(self=%b_cache, dim=2, index=3)
  %copy_: float32[2, 2] = aten.copy_.default(self=%select, src=%k)
  %select_1: float32[2] = aten.select.int(self=%k, dim=0, index=0)
  %copy__1: float32[2] = aten.copy_.default(self=%b_state, src=%select_1)
  %add_: int64[] = aten.add_.Tensor(self=%b_steps, other=1)
  %sum: float32[] = aten.sum.default(self=%b_cache)
  %out: float32[2] = aten.add.Tensor(self=%b_state, other=%sum)
  return (%out)
}
)";

constexpr const char* kAfter = R"(graph(%b_cache: float32[2, 2, 4], %b_state: float32[2], %b_steps: int64[], %k: float32[2, 2]) {
  %select: float32[2, 2] = aten.select.int(self=%b_cache, dim=2, index=3)
  %copy_: float32[2, 2] = aten.copy.default(self=%select, src=%k)
  %select_scatter: float32[2, 2, 4] = aten.select_scatter.default(self=%b_cache, src=%copy_, dim=2, index=3)
  %select_1: float32[2] = aten.select.int(self=%k, dim=0, index=0)
  %copy__1: float32[2] = aten.copy.default(self=%b_state, src=%select_1)
  %add_: int64[] = aten.add.Tensor(self=%b_steps, other=1)
  %sum: float32[] = aten.sum.default(self=%select_scatter)
  %out: float32[2] = aten.add.Tensor(self=%copy__1, other=%sum)
  return (%select_scatter, %copy__1, %add_, %out)
}
)";

ir::Module make_module(const char* text) {
  auto g = ir::parse_graph(text);
  EXPECT_TRUE(g.has_value()) << g.status().message();
  ir::Module m;
  m.graph = std::move(*g);
  m.input_specs = {{InputSpec::Kind::kBuffer, "cache", true},
                   {InputSpec::Kind::kBuffer, "state", true},
                   {InputSpec::Kind::kBuffer, "steps", true},
                   {InputSpec::Kind::kUserInput, "", true}};
  m.output_specs = {{ir::OutputSpec::Kind::kUserOutput, ""}};
  return m;
}

TEST(Functionalize, WritesThroughViewsBecomeScattersAndBufferOutputs) {
  ir::Module m = make_module(kBefore);
  ASSERT_TRUE(functionalize(m).is_ok());
  ASSERT_TRUE(eliminate_dead_code(m).is_ok());
  auto want = ir::parse_graph(kAfter);
  ASSERT_TRUE(want.has_value()) << want.status().message();
  std::string why;
  EXPECT_TRUE(ir::graphs_equal(m.graph, *want, &why)) << why << "\nactual:\n" << ir::print_graph(m.graph);
  ASSERT_EQ(m.output_specs.size(), 4u);
  EXPECT_EQ(m.output_specs[0].kind, ir::OutputSpec::Kind::kBufferMutation);
  EXPECT_EQ(m.output_specs[0].target, "cache");
  EXPECT_EQ(m.output_specs[1].target, "state");
  EXPECT_EQ(m.output_specs[2].target, "steps");
  EXPECT_EQ(m.output_specs[3].kind, ir::OutputSpec::Kind::kUserOutput);
}

TEST(Functionalize, ResultMatchesEagerSemantics) {
  ir::Module m = make_module(kBefore);
  ASSERT_TRUE(functionalize(m).is_ok());
  // cache = 0..15, state = [100, 200], steps = 7, k = [[1, 2], [3, 4]].
  Tensor cache = Tensor::zeros(DType::Float32, {2, 2, 4});
  for (int i = 0; i < 16; ++i) cache.data<float>()[i] = static_cast<float>(i);
  Tensor state = Tensor::zeros(DType::Float32, {2});
  state.data<float>()[0] = 100;
  state.data<float>()[1] = 200;
  Tensor steps = Tensor::scalar(DType::Int64, 7);
  Tensor k = Tensor::zeros(DType::Float32, {2, 2});
  for (int i = 0; i < 4; ++i) k.data<float>()[i] = static_cast<float>(i + 1);
  auto out = runtime::interpret(m.graph, {cache, state, steps, k}, cpu::cpu_kernels());
  ASSERT_TRUE(out.has_value()) << out.status().message();
  // Eager: cache[a][b][3] = k[a][b]; elements 3, 7, 11, 15 become 1, 2, 3, 4.
  const Tensor& new_cache = std::get<Tensor>((*out)[0]);
  std::vector<float> want_cache;
  for (int i = 0; i < 16; ++i) want_cache.push_back(i % 4 == 3 ? static_cast<float>(i / 4 + 1) : static_cast<float>(i));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(new_cache.value_at(i), want_cache[i]) << i;
  const Tensor& new_state = std::get<Tensor>((*out)[1]);
  EXPECT_EQ(new_state.value_at(0), 1);
  EXPECT_EQ(new_state.value_at(1), 2);
  EXPECT_EQ(std::get<Tensor>((*out)[2]).item_int(), 8);
  // sum of the new cache = (0..15 sum = 120) - (3 + 7 + 11 + 15) + (1 + 2 + 3 + 4) = 94.
  const Tensor& result = std::get<Tensor>((*out)[3]);
  EXPECT_EQ(result.value_at(0), 1 + 94);
  EXPECT_EQ(result.value_at(1), 2 + 94);
}

TEST(Functionalize, InPlaceOnIntermediatesAndStaleViews) {
  // v = x.view(4); v.relu_(); y = x + 1 reads x after the write through its view.
  constexpr const char* before = R"(graph(%x: float32[2, 2]) {
  %c: float32[2, 2] = aten.clone.default(self=%x)
  %v: float32[4] = aten.view.default(self=%c, size=[4])
  %r: float32[4] = aten.relu_.default(self=%v)
  %t: float32[2, 2] = aten.transpose.int(self=%c, dim0=0, dim1=1)
  %m: float32[2, 2] = aten.mul_.Tensor(self=%t, other=2)
  %y: float32[2, 2] = aten.add.Tensor(self=%c, other=1)
  return (%y, %r)
}
)";
  auto g = ir::parse_graph(before);
  ASSERT_TRUE(g.has_value()) << g.status().message();
  ir::Module m;
  m.graph = std::move(*g);
  m.input_specs = {{InputSpec::Kind::kUserInput, "", true}};
  m.output_specs = {{ir::OutputSpec::Kind::kUserOutput, ""}, {ir::OutputSpec::Kind::kUserOutput, ""}};
  ASSERT_TRUE(functionalize(m).is_ok());
  for (const auto& n : m.graph.nodes()) EXPECT_NE(ir::op_category(n->op), ir::OpCategory::kInplace) << n->describe();
  Tensor x = Tensor::zeros(DType::Float32, {2, 2});
  const float xs[] = {-1, 2, -3, 4};
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = xs[i];
  auto out = runtime::interpret(m.graph, {x}, cpu::cpu_kernels());
  ASSERT_TRUE(out.has_value()) << out.status().message();
  // relu -> [0, 2, 0, 4]; *2 through the transpose doubles every element -> [0, 4, 0, 8]; +1.
  const Tensor& y = std::get<Tensor>((*out)[0]);
  const float want_y[] = {1, 5, 1, 9};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.value_at(i), want_y[i]) << i;
  // r aliases c: read after the later write it shows the doubled values.
  const Tensor& r = std::get<Tensor>((*out)[1]);
  const float want_r[] = {0, 4, 0, 8};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.value_at(i), want_r[i]) << i;
  // The caller's x is untouched (the graph cloned it).
  EXPECT_EQ(x.value_at(0), -1);
}

TEST(Functionalize, WritingIntoAParameterIsRefused) {
  auto g = ir::parse_graph(R"(graph(%p_w: float32[2]) {
  %a: float32[2] = aten.add_.Tensor(self=%p_w, other=1)
  return (%a)
}
)");
  ASSERT_TRUE(g.has_value());
  ir::Module m;
  m.graph = std::move(*g);
  m.input_specs = {{InputSpec::Kind::kParameter, "w", true}};
  m.output_specs = {{ir::OutputSpec::Kind::kUserOutput, ""}};
  Status s = functionalize(m);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("parameter 'w'"), std::string::npos) << s.message();
}

// Non-strict export lifts a static KV cache as a tensor constant and writes
// it in place: the constant becomes a non-persistent buffer with a mutation
// output, so the write persists across calls as in PyTorch's runner.
TEST(Functionalize, AWrittenTensorConstantBecomesABuffer) {
  auto g = ir::parse_graph(R"(graph(%c_cache: float32[1, 4, 2], %c_scale: float32[2], %pos: int64[1], %x: float32[1, 1, 2]) {
  %w: float32[1, 4, 2] = aten.index_copy_.default(self=%c_cache, dim=1, index=%pos, source=%x)
  %m: float32[1, 4, 2] = aten.mul.Tensor(self=%c_cache, other=%c_scale)
  return (%m)
}
)");
  ASSERT_TRUE(g.has_value()) << g.status().message();
  ir::Module m;
  m.graph = std::move(*g);
  m.input_specs = {{InputSpec::Kind::kConstant, "lifted_tensor_0", true},
                   {InputSpec::Kind::kConstant, "scale", true},
                   {InputSpec::Kind::kUserInput, "", true},
                   {InputSpec::Kind::kUserInput, "", true}};
  m.output_specs = {{ir::OutputSpec::Kind::kUserOutput, ""}};
  ASSERT_TRUE(functionalize(m).is_ok());
  EXPECT_EQ(m.input_specs[0].kind, InputSpec::Kind::kBuffer);
  EXPECT_FALSE(m.input_specs[0].persistent);
  EXPECT_EQ(m.input_specs[1].kind, InputSpec::Kind::kConstant);  // read only: stays a constant
  ASSERT_EQ(m.output_specs.size(), 2u);
  EXPECT_EQ(m.output_specs[0].kind, ir::OutputSpec::Kind::kBufferMutation);
  EXPECT_EQ(m.output_specs[0].target, "lifted_tensor_0");
  // The product reads the written cache, as eager does.
  const ir::Node* mul = m.graph.outputs()[1]->producer;
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(mul->operands()[0], m.graph.outputs()[0]);
}

}  // namespace
}  // namespace kiln::lowering

namespace kiln::lowering {
namespace {

// transformers' static cache does `c = counter.to(int64); c.add_(1)`: a same-dtype
// .to() returns its input, so the write reaches the buffer. A real conversion
// copies, so a write to its result does not.
TEST(Functionalize, SameDtypeToAliasesItsInput) {
  constexpr const char* text = R"(graph(%b_n: int64[], %b_f: int64[]) {
  %t: int64[] = aten.to.dtype_layout(self=%b_n, dtype=dtype.int64, layout=7)
  %a: int64[] = aten.add_.Tensor(self=%t, other=1)
  %g: float32[] = aten.to.dtype(self=%b_f, dtype=dtype.float32)
  %h: float32[] = aten.add_.Tensor(self=%g, other=1)
  %o: int64[] = aten.add.Tensor(self=%b_n, other=%b_f)
  return (%o)
}
)";
  auto g = ir::parse_graph(text);
  ASSERT_TRUE(g.has_value()) << g.status().message();
  ir::Module m;
  m.graph = std::move(*g);
  m.input_specs = {{InputSpec::Kind::kBuffer, "n", true}, {InputSpec::Kind::kBuffer, "f", true}};
  m.output_specs = {{ir::OutputSpec::Kind::kUserOutput, ""}};
  ASSERT_TRUE(functionalize(m).is_ok());
  ASSERT_EQ(m.output_specs.size(), 2u);  // only buffer n is written
  EXPECT_EQ(m.output_specs[0].target, "n");
  auto out = runtime::interpret(m.graph, {Tensor::scalar(DType::Int64, 5), Tensor::scalar(DType::Int64, 10)},
                                cpu::cpu_kernels());
  ASSERT_TRUE(out.has_value()) << out.status().message();
  EXPECT_EQ(std::get<Tensor>((*out)[0]).item_int(), 6);   // n after the call
  EXPECT_EQ(std::get<Tensor>((*out)[1]).item_int(), 16);  // reads n after the write, f unchanged
}

}  // namespace
}  // namespace kiln::lowering

namespace kiln::lowering {
namespace {

// Training-mode batch norm writes its running statistics into arguments 3 and
// 4: the functional form's extra outputs become buffer mutations, and the
// values follow PyTorch's update (momentum toward the batch mean and the
// unbiased batch variance).
TEST(Functionalize, BatchNormTrainingWritesItsRunningStatisticsBack) {
  constexpr const char* text = R"(graph(%b_rm: float32[2], %b_rv: float32[2], %x: float32[2, 2, 2]) {
  %bn: float32[2, 2, 2], %mean: float32[2], %rstd: float32[2] = aten._native_batch_norm_legit.default(input=%x, weight=None, bias=None, running_mean=%b_rm, running_var=%b_rv, training=true, momentum=0.25, eps=0.0)
  return (%bn)
}
)";
  auto g = ir::parse_graph(text);
  ASSERT_TRUE(g.has_value()) << g.status().message();
  ir::Module m;
  m.graph = std::move(*g);
  m.input_specs = {{InputSpec::Kind::kBuffer, "rm", true},
                   {InputSpec::Kind::kBuffer, "rv", true},
                   {InputSpec::Kind::kUserInput, "", true}};
  m.output_specs = {{ir::OutputSpec::Kind::kUserOutput, ""}};
  ASSERT_TRUE(functionalize(m).is_ok());
  ASSERT_EQ(m.output_specs.size(), 3u);
  EXPECT_EQ(m.output_specs[0].target, "rm");
  EXPECT_EQ(m.output_specs[1].target, "rv");
  bool functional = false;
  for (const auto& n : m.graph.nodes()) functional |= n->op == ir::OpKind::kNativeBatchNormLegitFunctional;
  EXPECT_TRUE(functional) << ir::print_graph(m.graph);

  // x[n, c, i]: channel 0 holds 1, 3, 5, 7 (mean 4, biased var 5, unbiased 20/3), channel 1 holds 2 everywhere.
  Tensor x = Tensor::zeros(DType::Float32, {2, 2, 2});
  const float xs[8] = {1, 3, 2, 2, 5, 7, 2, 2};
  std::copy(xs, xs + 8, x.data<float>());
  Tensor rm = Tensor::zeros(DType::Float32, {2}), rv = Tensor::zeros(DType::Float32, {2});
  rm.data<float>()[0] = 8;
  rv.data<float>()[0] = rv.data<float>()[1] = 1;
  auto out = runtime::interpret(m.graph, {rm, rv, x}, cpu::cpu_kernels());
  ASSERT_TRUE(out.has_value()) << out.status().message();
  const Tensor& new_rm = std::get<Tensor>((*out)[0]);
  const Tensor& new_rv = std::get<Tensor>((*out)[1]);
  EXPECT_FLOAT_EQ(new_rm.value_at(0), 0.75f * 8 + 0.25f * 4);
  EXPECT_FLOAT_EQ(new_rm.value_at(1), 0.25f * 2);
  EXPECT_FLOAT_EQ(new_rv.value_at(0), 0.75f + 0.25f * 20.0f / 3.0f);
  EXPECT_FLOAT_EQ(new_rv.value_at(1), 0.75f);
  const Tensor& y = std::get<Tensor>((*out)[2]);
  EXPECT_FLOAT_EQ(y.value_at(0), static_cast<float>((1 - 4) / std::sqrt(5.0)));
  EXPECT_FLOAT_EQ(y.value_at(5), static_cast<float>((7 - 4) / std::sqrt(5.0)));
}

}  // namespace
}  // namespace kiln::lowering
