// Composite ops of the default dialect written in core ops: the graph after
// the pass holds only core ops, and running it gives what each op's
// definition gives, computed here in double on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "backends/cpu/kernel.h"
#include "ir/printer.h"
#include "lowering/pass.h"
#include "runtime/interpreter.h"

namespace kiln::lowering {
namespace {

// The module of `text` (every graph input a user input) after the pass, and
// its op histogram.
ir::Module decomposed(const std::string& text, std::map<std::string, int>* ops) {
  auto g = ir::parse_graph(text);
  EXPECT_TRUE(g.has_value()) << g.status().message();
  ir::Module m;
  if (!g) return m;
  m.graph = std::move(*g);
  for (size_t i = 0; i < m.graph.inputs().size(); ++i) m.input_specs.push_back({ir::InputSpec::Kind::kUserInput, "", true});
  for (size_t i = 0; i < m.graph.outputs().size(); ++i) m.output_specs.push_back({ir::OutputSpec::Kind::kUserOutput, ""});
  Status s = decompose_composites(m);
  EXPECT_TRUE(s.is_ok()) << s.message();
  for (const auto& n : m.graph.nodes()) ++(*ops)[std::string(ir::op_target(n->op))];
  return m;
}

// Runs `m`'s outputs (nodes nothing returns are dropped first).
std::vector<Tensor> run(ir::Module& m, const std::vector<Tensor>& inputs) {
  Status s = eliminate_dead_code(m);
  EXPECT_TRUE(s.is_ok()) << s.message();
  std::vector<cpu::RtValue> in(inputs.begin(), inputs.end());
  auto out = runtime::interpret(m.graph, in, cpu::cpu_kernels());
  EXPECT_TRUE(out.has_value()) << out.status().message();
  std::vector<Tensor> t;
  if (out)
    for (auto& v : *out) t.push_back(std::get<Tensor>(v));
  return t;
}

Tensor matrix(int64_t rows, int64_t cols, const std::vector<double>& v) {
  Tensor t = Tensor::zeros(DType::Float64, {rows, cols});
  for (size_t i = 0; i < v.size(); ++i) t.data<double>()[i] = v[i];
  return t.to(DType::Float32);
}

TEST(Decompose, SquareIsAProductAndConstantPadIsConstantPadNd) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[2, 3]) {
  %s: float32[2, 3] = aten.square.default(self=%x)
  %p: float32[2, 6] = aten.pad.default(self=%x, pad=[1, 2], mode="constant", value=7.0)
  %r: float32[2, 5] = aten.pad.default(self=%x, pad=[1, 1], mode="reflect")
  return (%s, %p, %r)
}
)",
                           &ops);
  EXPECT_EQ(ops["aten.square.default"], 0);
  EXPECT_EQ(ops["aten.mul.Tensor"], 1);
  EXPECT_EQ(ops["aten.constant_pad_nd.default"], 1);
  EXPECT_EQ(ops["aten.pad.default"], 1);  // reflect is not decomposed here: it stays, named
  m.graph.outputs().pop_back();  // (and has no kernel to run)
  m.output_specs.pop_back();
  const Tensor x = matrix(2, 3, {1, -2, 3, 0.5, 4, -6});
  auto out = run(m, {x});
  ASSERT_EQ(out.size(), 2u);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(out[0].value_at(i), x.value_at(i) * x.value_at(i));
  ASSERT_EQ(out[1].sizes(), (Shape{2, 6}));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 6; ++c)
      EXPECT_EQ(out[1].value_at(r * 6 + c), c >= 1 && c < 4 ? x.value_at(r * 3 + c - 1) : 7.0) << r << "," << c;
}

TEST(Decompose, LogsumexpIsStableAndKeepsInfinities) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[4, 3]) {
  %a: float32[4] = aten.logsumexp.default(self=%x, dim=[1])
  %b: float32[1, 3] = aten.logsumexp.default(self=%x, dim=[0], keepdim=true)
  return (%a, %b)
}
)",
                           &ops);
  EXPECT_EQ(ops["aten.logsumexp.default"], 0);
  const double inf = std::numeric_limits<double>::infinity();
  // Large values (exp overflows in float32 without the shift), -inf rows, an inf.
  const Tensor x = matrix(4, 3, {100, 101, 99, -inf, -inf, -inf, 1, inf, 2, -3, 0.5, 2});
  auto out = run(m, {x});
  ASSERT_EQ(out.size(), 2u);
  auto lse = [](std::vector<double> v) {
    double m = -std::numeric_limits<double>::infinity();
    for (double e : v) m = std::max(m, e);
    if (std::isinf(m)) return m;
    double s = 0;
    for (double e : v) s += std::exp(e - m);
    return m + std::log(s);
  };
  for (int64_t r = 0; r < 4; ++r) {
    const double want = lse({x.value_at(r * 3), x.value_at(r * 3 + 1), x.value_at(r * 3 + 2)});
    if (std::isinf(want))
      EXPECT_EQ(out[0].value_at(r), want) << r;
    else
      EXPECT_NEAR(out[0].value_at(r), want, 1e-4 * std::abs(want)) << r;
  }
  ASSERT_EQ(out[1].sizes(), (Shape{1, 3}));
  for (int64_t c = 0; c < 3; ++c) {
    const double want = lse({x.value_at(c), x.value_at(3 + c), x.value_at(6 + c), x.value_at(9 + c)});
    if (std::isinf(want))
      EXPECT_EQ(out[1].value_at(c), want) << c;
    else
      EXPECT_NEAR(out[1].value_at(c), want, 1e-4 * std::abs(want)) << c;
  }
}

TEST(Decompose, VectorNormsOfEachOrder) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[2, 3]) {
  %two: float32[2] = aten.linalg_vector_norm.default(self=%x, dim=[1])
  %one: float32[2, 1] = aten.linalg_vector_norm.default(self=%x, ord=1, dim=[1], keepdim=true)
  %big: float32[3] = aten.linalg_vector_norm.default(self=%x, ord=inf, dim=[0])
  %small: float32[3] = aten.linalg_vector_norm.default(self=%x, ord=-inf, dim=[0])
  %three: float32[] = aten.linalg_vector_norm.default(self=%x, ord=3.0)
  %zero: float32[] = aten.linalg_vector_norm.default(self=%x, ord=0)
  return (%two, %one, %big, %small, %three, %zero)
}
)",
                           &ops);
  EXPECT_EQ(ops["aten.linalg_vector_norm.default"], 1);  // ord 0 (a count) is left alone
  m.graph.outputs().pop_back();                          // (and has no kernel to run)
  m.output_specs.pop_back();
  const Tensor x = matrix(2, 3, {3, -4, 0, 1, 2, -2});
  auto out = run(m, {x});
  ASSERT_EQ(out.size(), 5u);
  EXPECT_NEAR(out[0].value_at(0), 5.0, 1e-6);
  EXPECT_NEAR(out[0].value_at(1), 3.0, 1e-6);
  ASSERT_EQ(out[1].sizes(), (Shape{2, 1}));
  EXPECT_EQ(out[1].value_at(0), 7.0);
  EXPECT_EQ(out[1].value_at(1), 5.0);
  const double big[] = {3, 4, 2}, small[] = {1, 2, 0};
  for (int64_t c = 0; c < 3; ++c) {
    EXPECT_EQ(out[2].value_at(c), big[c]);
    EXPECT_EQ(out[3].value_at(c), small[c]);
  }
  EXPECT_NEAR(out[4].value_at(0), std::cbrt(27.0 + 64 + 0 + 1 + 8 + 8), 1e-5);
}

}  // namespace
}  // namespace kiln::lowering
