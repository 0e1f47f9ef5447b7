#include "engine/fuse_elementwise.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "ir/printer.h"
#include "runtime/interpreter.h"
#include "support/network_text.h"
#include "unit/backends/cpu/run_op.h"

namespace kiln::engine {
namespace {

using testing::network_from;

void expect_graph(const Network& net, const std::string& want_text) {
  auto want = ir::parse_graph(want_text);
  ASSERT_TRUE(want.has_value()) << want.status().message();
  std::string why;
  EXPECT_TRUE(ir::graphs_equal(net.graph, *want, &why)) << why << "\n" << ir::print_graph(net.graph);
  EXPECT_EQ(ir::print_graph(net.graph), want_text);
}

// Random inputs for `g` (symbolic sizes are 5), the same for the same seed.
std::vector<cpu::RtValue> random_inputs(const ir::Graph& g, uint32_t seed) {
  const ir::SymBindings sizes = {{"s0", 5}, {"s1", 5}};
  std::vector<cpu::RtValue> inputs;
  uint32_t stream = 0;
  for (const ir::Value* v : g.inputs()) {
    Shape shape;
    for (const ir::Dim& d : v->type.sizes) shape.push_back(d.is_static() ? d.value : *d.expr->eval(sizes));
    inputs.push_back(cpu::testing::random_tensor(v->type.dtype, shape, seed, ++stream, 3.0));
  }
  return inputs;
}

void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const Tensor a = got.contiguous(), b = want.contiguous();
  for (int64_t i = 0; i < a.numel(); ++i) {
    const size_t w = dtype_size(a.dtype());
    const auto* pa = static_cast<const uint8_t*>(a.raw_data()) + static_cast<size_t>(i) * w;
    const auto* pb = static_cast<const uint8_t*>(b.raw_data()) + static_cast<size_t>(i) * w;
    ASSERT_EQ(std::memcmp(pa, pb, w), 0) << what << ": element " << i << " is " << a.value_at(i) << ", want "
                                         << b.value_at(i);
  }
}

// Fuses `text`'s network and checks that the graph before and after give the
// same bits on random inputs. Returns the fused network.
Network fuse_and_compare(const std::string& text, uint32_t seed = 1) {
  Network net = network_from(text);
  ir::Graph before = net.graph.clone();
  Status s = fuse_elementwise(net);
  EXPECT_TRUE(s.is_ok()) << s.message();
  for (uint32_t run = 0; run < 3; ++run) {
    auto want = runtime::interpret(before, random_inputs(before, seed + run), cpu::cpu_kernels());
    auto got = runtime::interpret(net.graph, random_inputs(net.graph, seed + run), cpu::cpu_kernels());
    EXPECT_TRUE(want.has_value()) << want.status().message();
    EXPECT_TRUE(got.has_value()) << got.status().message();
    if (!want.has_value() || !got.has_value()) break;
    EXPECT_EQ(got->size(), want->size());
    for (size_t i = 0; i < got->size() && i < want->size(); ++i)
      expect_same_bits(std::get<Tensor>((*got)[i]), std::get<Tensor>((*want)[i]), "output " + std::to_string(i));
  }
  return net;
}

size_t count_fused(const Network& net) {
  size_t n = 0;
  for (const auto& node : net.graph.nodes()) n += node->op == ir::OpKind::kFusedElementwise;
  return n;
}

TEST(FuseElementwise, ChainWithBroadcastBias) {
  Network net = fuse_and_compare(R"IR(graph(%x: float32[4, 8], %b: float32[8]) {
  %m: float32[4, 8] = aten.mul.Tensor(self=%x, other=2)
  %a: float32[4, 8] = aten.add.Tensor(self=%m, other=%b)
  %s: float32[4, 8] = aten.sigmoid.default(self=%a)
  %y: float32[4, 8] = aten.mul.Tensor(self=%s, other=%x)
  return (%y)
}
)IR");
  expect_graph(net, R"IR(graph(%x: float32[4, 8], %b: float32[8]) {
  %y: float32[4, 8] = kiln.fused_elementwise(inputs=[%x, %b], program="inputs 2; %2 = aten.mul.Scalar(%0, 2); %3 = aten.add.Tensor(%2, %1, 1); %4 = aten.sigmoid.default(%3); %5 = aten.mul.Tensor(%4, %0)")
  return (%y)
}
)IR");
}

TEST(FuseElementwise, DagReadsItsInputOnce) {
  Network net = fuse_and_compare(R"IR(graph(%x: bfloat16[3, 5]) {
  %s: bfloat16[3, 5] = aten.sigmoid.default(self=%x)
  %y: bfloat16[3, 5] = aten.mul.Tensor(self=%x, other=%s)
  return (%y)
}
)IR");
  expect_graph(net, R"IR(graph(%x: bfloat16[3, 5]) {
  %y: bfloat16[3, 5] = kiln.fused_elementwise(inputs=[%x], program="inputs 1; %1 = aten.sigmoid.default(%0); %2 = aten.mul.Tensor(%0, %1)")
  return (%y)
}
)IR");
}

TEST(FuseElementwise, DiamondJoinsOnceBothBranchesAreIn) {
  Network net = fuse_and_compare(R"IR(graph(%x: float16[6], %w: float16[2, 6]) {
  %p: float16[6] = aten.exp.default(self=%x)
  %a: float16[6] = aten.sin.default(self=%p)
  %b: float16[2, 6] = aten.mul.Tensor(self=%p, other=%w)
  %y: float16[2, 6] = aten.sub.Tensor(self=%a, other=%b, alpha=2)
  return (%y)
}
)IR");
  expect_graph(net, R"IR(graph(%x: float16[6], %w: float16[2, 6]) {
  %y: float16[2, 6] = kiln.fused_elementwise(inputs=[%x, %w], program="inputs 2; %2 = aten.exp.default(%0); %3 = aten.sin.default(%2); %4 = aten.mul.Tensor(%2, %1); %5 = aten.sub.Tensor(%3, %4, 2)")
  return (%y)
}
)IR");
}

TEST(FuseElementwise, IntermediateWithOutsideUserSplitsTheGroup) {
  // %b is read by the matmul: it ends one group, and the rest fuses after the matmul.
  Network net = fuse_and_compare(R"IR(graph(%x: float32[4, 4]) {
  %a: float32[4, 4] = aten.mul.Tensor(self=%x, other=3)
  %b: float32[4, 4] = aten.exp.default(self=%a)
  %m: float32[4, 4] = aten.mm.default(self=%b, mat2=%x)
  %c: float32[4, 4] = aten.add.Tensor(self=%b, other=1)
  %d: float32[4, 4] = aten.tanh.default(self=%c)
  %e: float32[4, 4] = aten.add.Tensor(self=%d, other=%m)
  return (%e)
}
)IR");
  expect_graph(net, R"IR(graph(%x: float32[4, 4]) {
  %b: float32[4, 4] = kiln.fused_elementwise(inputs=[%x], program="inputs 1; %1 = aten.mul.Scalar(%0, 3); %2 = aten.exp.default(%1)")
  %m: float32[4, 4] = aten.mm.default(self=%b, mat2=%x)
  %e: float32[4, 4] = kiln.fused_elementwise(inputs=[%b, %m], program="inputs 2; %2 = aten.add.Scalar(%0, 1, 1); %3 = aten.tanh.default(%2); %4 = aten.add.Tensor(%3, %1, 1)")
  return (%e)
}
)IR");
}

TEST(FuseElementwise, EngineOutputSplitsTheGroup) {
  Network net = fuse_and_compare(R"IR(graph(%x: float64[7]) {
  %a: float64[7] = aten.neg.default(self=%x)
  %b: float64[7] = aten.abs.default(self=%a)
  %c: float64[7] = aten.sqrt.default(self=%b)
  %d: float64[7] = aten.reciprocal.default(self=%c)
  return (%d, %b)
}
)IR");
  expect_graph(net, R"IR(graph(%x: float64[7]) {
  %b: float64[7] = kiln.fused_elementwise(inputs=[%x], program="inputs 1; %1 = aten.neg.default(%0); %2 = aten.abs.default(%1)")
  %d: float64[7] = kiln.fused_elementwise(inputs=[%b], program="inputs 1; %1 = aten.sqrt.default(%0); %2 = aten.reciprocal.default(%1)")
  return (%d, %b)
}
)IR");
}

TEST(FuseElementwise, DtypeChangeSplitsTheGroup) {
  Network net = fuse_and_compare(R"IR(graph(%x: float32[2, 3]) {
  %a: float32[2, 3] = aten.exp.default(self=%x)
  %s: float32[2, 3] = aten.sigmoid.default(self=%a)
  %h: float16[2, 3] = aten._to_copy.default(self=%s, dtype=dtype.float16)
  %n: float16[2, 3] = aten.neg.default(self=%h)
  %t: float16[2, 3] = aten.tanh.default(self=%n)
  return (%t)
}
)IR");
  expect_graph(net, R"IR(graph(%x: float32[2, 3]) {
  %s: float32[2, 3] = kiln.fused_elementwise(inputs=[%x], program="inputs 1; %1 = aten.exp.default(%0); %2 = aten.sigmoid.default(%1)")
  %h: float16[2, 3] = aten._to_copy.default(self=%s, dtype=dtype.float16)
  %t: float16[2, 3] = kiln.fused_elementwise(inputs=[%h], program="inputs 1; %1 = aten.neg.default(%0); %2 = aten.tanh.default(%1)")
  return (%t)
}
)IR");
}

TEST(FuseElementwise, SiluMulJoinsTheGroup) {
  Network net = fuse_and_compare(R"IR(graph(%g: float16[4, 6], %u: float16[4, 6], %b: float16[6]) {
  %s: float16[4, 6] = kiln.silu_mul(a=%g, b=%u)
  %y: float16[4, 6] = aten.add.Tensor(self=%s, other=%b)
  %z: float16[4, 6] = aten.mul.Tensor(self=%y, other=0.5)
  return (%z)
}
)IR");
  expect_graph(net, R"IR(graph(%g: float16[4, 6], %u: float16[4, 6], %b: float16[6]) {
  %z: float16[4, 6] = kiln.fused_elementwise(inputs=[%g, %u, %b], program="inputs 3; %3 = kiln.silu_mul(%0, %1); %4 = aten.add.Tensor(%3, %2, 1); %5 = aten.mul.Scalar(%4, 0.5)")
  return (%z)
}
)IR");
}

TEST(FuseElementwise, MixedDtypesAreNotFused) {
  const std::string text = R"IR(graph(%x: float32[3], %h: float16[3]) {
  %a: float32[3] = aten.mul.Tensor(self=%x, other=%h)
  %b: float32[3] = aten.relu.default(self=%a)
  return (%b)
}
)IR";
  Network net = fuse_and_compare(text);
  expect_graph(net, text);
}

TEST(FuseElementwise, MatmulBetweenAndSingleNodesStayUnfused) {
  const std::string text = R"IR(graph(%x: float32[2, 3], %w: float32[3, 4]) {
  %r: float32[2, 3] = aten.relu.default(self=%x)
  %m: float32[2, 4] = aten.mm.default(self=%r, mat2=%w)
  %y: float32[2, 4] = aten.sigmoid.default(self=%m)
  return (%y)
}
)IR";
  Network net = fuse_and_compare(text);
  expect_graph(net, text);
}

TEST(FuseElementwise, SymbolicShapesFuseWhenTheyMatch) {
  Network net = fuse_and_compare(R"IR(graph(%x: float32[s0, 8], %b: float32[8], %g: float32[s0, 1]) {
  %a: float32[s0, 8] = aten.add.Tensor(self=%x, other=%b)
  %m: float32[s0, 8] = aten.mul.Tensor(self=%a, other=%g)
  %y: float32[s0, 8] = aten.gelu.default(self=%m, approximate="tanh")
  return (%y)
}
)IR");
  expect_graph(net, R"IR(graph(%x: float32[s0, 8], %b: float32[8], %g: float32[s0, 1]) {
  %y: float32[s0, 8] = kiln.fused_elementwise(inputs=[%x, %b, %g], program="inputs 3; %3 = aten.add.Tensor(%0, %1, 1); %4 = aten.mul.Tensor(%3, %2); %5 = aten.gelu.default(%4, 'tanh')")
  return (%y)
}
)IR");
}

TEST(FuseElementwise, UnprovableShapesStayUnfused) {
  // s0 and s1 may be equal at run time, but nothing here proves it.
  const std::string text = R"IR(graph(%x: float32[s0], %y: float32[s1]) {
  %a: float32[s0] = aten.add.Tensor(self=%x, other=%y)
  %b: float32[s0] = aten.relu.default(self=%a)
  return (%b)
}
)IR";
  Network net = fuse_and_compare(text);
  expect_graph(net, text);
}

TEST(FuseElementwise, OutputKeepsItsValueAndKernelsAreCleared) {
  Network net = network_from(R"IR(graph(%x: float32[2, 2], %c_b: float32[2]) {
  %a: float32[2, 2] = aten.add.Tensor(self=%x, other=%c_b)
  %r: float32[2, 2] = aten.relu.default(self=%a)
  %s: float32[] = aten.sum.default(self=%r)
  return (%r, %s)
}
)IR");
  net.num_inputs = 1;
  net.constant_names = {"b"};
  net.kernels = {"add", "relu", "sum"};
  ASSERT_TRUE(net.verify().is_ok());
  ir::Value* r = net.graph.outputs()[0];
  ASSERT_TRUE(fuse_elementwise(net).is_ok());
  EXPECT_TRUE(net.kernels.empty());
  ASSERT_EQ(net.graph.nodes().size(), 2u);
  const ir::Node& fused = *net.graph.nodes()[0];
  EXPECT_EQ(fused.op, ir::OpKind::kFusedElementwise);
  ASSERT_EQ(fused.outputs.size(), 1u);
  EXPECT_EQ(fused.outputs[0], r);
  EXPECT_EQ(r->producer, &fused);
  EXPECT_EQ(r->name, "r");
  EXPECT_EQ(net.graph.outputs()[0], r);
  EXPECT_EQ(net.graph.nodes()[1]->operands(), std::vector<ir::Value*>{r});
  EXPECT_TRUE(net.verify().is_ok());
}

TEST(FuseElementwise, EveryOpInOneLayerIsBitIdentical) {
  // Every op a program knows, in each floating dtype.
  const std::string text = R"IR(graph(%x: DT[3, 4, 5], %b: DT[5], %c: DT[4, 1]) {
  %a0: DT[3, 4, 5] = aten.mul.Tensor(self=%x, other=%b)
  %a1: DT[3, 4, 5] = aten.add.Tensor(self=%a0, other=%c, alpha=0.3)
  %a2: DT[3, 4, 5] = aten.sub.Tensor(self=%a1, other=%x)
  %a3: DT[3, 4, 5] = aten.add.Scalar(self=%a2, other=0.1)
  %a4: DT[3, 4, 5] = aten.sub.Tensor(self=%a3, other=0.7, alpha=2)
  %a5: DT[3, 4, 5] = aten.rsub.Scalar(self=%a4, other=1.5)
  %a6: DT[3, 4, 5] = aten.mul.Scalar(self=%a5, other=0.3)
  %a7: DT[3, 4, 5] = aten.div.Tensor(self=%a6, other=1.7)
  %a8: DT[3, 4, 5] = aten.div.Tensor(self=%a7, other=%a6)
  %a9: DT[3, 4, 5] = aten.abs.default(self=%a6)
  %l: DT[3, 4, 5] = aten.log.default(self=%a9)
  %q: DT[3, 4, 5] = aten.sqrt.default(self=%a9)
  %rq: DT[3, 4, 5] = aten.rsqrt.default(self=%a9)
  %rc: DT[3, 4, 5] = aten.reciprocal.default(self=%q)
  %e: DT[3, 4, 5] = aten.exp.default(self=%a6)
  %sn: DT[3, 4, 5] = aten.sin.default(self=%l)
  %cs: DT[3, 4, 5] = aten.cos.default(self=%rq)
  %th: DT[3, 4, 5] = aten.tanh.default(self=%rc)
  %ef: DT[3, 4, 5] = aten.erf.default(self=%a5)
  %sg: DT[3, 4, 5] = aten.sigmoid.default(self=%a5)
  %rl: DT[3, 4, 5] = aten.relu.default(self=%a5)
  %g0: DT[3, 4, 5] = aten.gelu.default(self=%a5)
  %g1: DT[3, 4, 5] = aten.gelu.default(self=%a5, approximate="tanh")
  %sl: DT[3, 4, 5] = aten.silu.default(self=%a5)
  %ht: DT[3, 4, 5] = aten.hardtanh.default(self=%a5, min_val=-0.5, max_val=2)
  %hw: DT[3, 4, 5] = aten.hardswish.default(self=%a5)
  %hs: DT[3, 4, 5] = aten.hardsigmoid.default(self=%a5)
  %c0: DT[3, 4, 5] = aten.clamp.default(self=%a5, min=-1)
  %c1: DT[3, 4, 5] = aten.clamp.default(self=%a5, max=0.25)
  %c2: DT[3, 4, 5] = aten.clamp_min.default(self=%a5, min=0.1)
  %p0: DT[3, 4, 5] = aten.pow.Tensor_Scalar(self=%q, exponent=2)
  %p1: DT[3, 4, 5] = aten.pow.Tensor_Scalar(self=%q, exponent=-0.5)
  %p2: DT[3, 4, 5] = aten.pow.Tensor_Scalar(self=%q, exponent=1.3)
  %sm: DT[3, 4, 5] = kiln.silu_mul(a=%a5, b=%c)
  %ng: DT[3, 4, 5] = aten.neg.default(self=%a8)
  %s0: DT[3, 4, 5] = aten.add.Tensor(self=%ng, other=%e)
  %s1: DT[3, 4, 5] = aten.add.Tensor(self=%s0, other=%sn)
  %s2: DT[3, 4, 5] = aten.add.Tensor(self=%s1, other=%cs)
  %s3: DT[3, 4, 5] = aten.add.Tensor(self=%s2, other=%th)
  %s4: DT[3, 4, 5] = aten.add.Tensor(self=%s3, other=%ef)
  %s5: DT[3, 4, 5] = aten.add.Tensor(self=%s4, other=%sg)
  %s6: DT[3, 4, 5] = aten.add.Tensor(self=%s5, other=%rl)
  %s7: DT[3, 4, 5] = aten.add.Tensor(self=%s6, other=%g0)
  %s8: DT[3, 4, 5] = aten.add.Tensor(self=%s7, other=%g1)
  %s9: DT[3, 4, 5] = aten.add.Tensor(self=%s8, other=%sl)
  %t0: DT[3, 4, 5] = aten.add.Tensor(self=%s9, other=%ht)
  %t1: DT[3, 4, 5] = aten.add.Tensor(self=%t0, other=%hw)
  %t2: DT[3, 4, 5] = aten.add.Tensor(self=%t1, other=%hs)
  %t3: DT[3, 4, 5] = aten.add.Tensor(self=%t2, other=%c0)
  %t4: DT[3, 4, 5] = aten.add.Tensor(self=%t3, other=%c1)
  %t5: DT[3, 4, 5] = aten.add.Tensor(self=%t4, other=%c2)
  %t6: DT[3, 4, 5] = aten.add.Tensor(self=%t5, other=%p0)
  %t7: DT[3, 4, 5] = aten.add.Tensor(self=%t6, other=%p1)
  %t8: DT[3, 4, 5] = aten.add.Tensor(self=%t7, other=%p2)
  %y: DT[3, 4, 5] = aten.add.Tensor(self=%t8, other=%sm)
  return (%y)
}
)IR";
  for (const char* dtype : {"float32", "float64", "float16", "bfloat16"}) {
    SCOPED_TRACE(dtype);
    std::string t = text;
    for (size_t at; (at = t.find("DT")) != std::string::npos;) t.replace(at, 2, dtype);
    Network net = fuse_and_compare(t, 7);
    EXPECT_EQ(net.graph.nodes().size(), 1u);
    EXPECT_EQ(count_fused(net), 1u);
  }
}

TEST(FuseElementwise, IsDeterministic) {
  const std::string text = R"IR(graph(%x: float32[1, 8], %w: float32[8, 8]) {
  %a: float32[1, 8] = aten.silu.default(self=%x)
  %b: float32[1, 8] = aten.mul.Tensor(self=%a, other=%x)
  %m: float32[1, 8] = aten.mm.default(self=%b, mat2=%w)
  %c: float32[1, 8] = aten.hardswish.default(self=%m)
  %d: float32[1, 8] = aten.add.Tensor(self=%c, other=%b)
  return (%d)
}
)IR";
  Network first = network_from(text);
  Network second = network_from(text);
  ASSERT_TRUE(fuse_elementwise(first).is_ok());
  ASSERT_TRUE(fuse_elementwise(second).is_ok());
  EXPECT_EQ(ir::print_graph(first.graph), ir::print_graph(second.graph));
  EXPECT_EQ(count_fused(first), 2u);
  // A second run finds nothing more to fuse.
  const std::string once = ir::print_graph(first.graph);
  ASSERT_TRUE(fuse_elementwise(first).is_ok());
  EXPECT_EQ(ir::print_graph(first.graph), once);
}

}  // namespace
}  // namespace kiln::engine
