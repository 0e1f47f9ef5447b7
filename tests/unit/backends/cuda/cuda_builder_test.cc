// The CUDA builder's graph-level decisions, which need no GPU: epilogue
// folding, per-node capability answers, and the plan's JSON form.
#include "backends/cuda/cuda_builder.h"

#include <gtest/gtest.h>

#include <set>

#include "ir/printer.h"
#include "support/conformance.h"
#include "support/cuda_plan_sample.h"
#include "support/network_text.h"

namespace kiln::cuda {
namespace {

using kiln::testing::network_from;

const ir::Node* only_node(const engine::Network& net, ir::OpKind op) {
  const ir::Node* found = nullptr;
  int count = 0;
  for (const auto& n : net.graph.nodes())
    if (n->op == op) {
      found = n.get();
      ++count;
    }
  return count == 1 ? found : nullptr;
}

TEST(FoldEpilogues, GemmTakesABiasVectorAndReluAndKeepsTheOutputValue) {
  engine::Network net = network_from(R"(graph(%x: float16[4, 8], %w: float16[8, 16], %b: float16[16]) {
  %mm: float16[4, 16] = aten.matmul.default(self=%x, other=%w)
  %a: float16[4, 16] = aten.add.Tensor(self=%mm, other=%b)
  %r: float16[4, 16] = aten.relu.default(self=%a)
  return (%r)
}
)",
                                     1, {"w", "b"});
  const ir::Value* out = net.graph.outputs()[0];
  ASSERT_TRUE(fold_epilogues(net).is_ok());
  ASSERT_EQ(net.graph.nodes().size(), 1u) << ir::print_graph(net.graph);
  const ir::Node* mm = only_node(net, ir::OpKind::kMatmul);
  ASSERT_NE(mm, nullptr);
  EXPECT_NE(mm->find("kiln_bias"), nullptr);
  const ir::Arg* act = mm->find("kiln_act");
  ASSERT_NE(act, nullptr);
  EXPECT_EQ(std::get<std::string>(*act), "relu");
  EXPECT_EQ(mm->outputs[0], out);  // the engine output is still the same value
}

TEST(FoldEpilogues, TheTargetsPassesFoldThenFuseAndShowTheNetworkAfterEach) {
  std::vector<std::string> names;
  for (const engine::NetworkPass& p : cuda_network_passes()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"fold-epilogues", "fuse-elementwise"}));
  engine::Network net = network_from(R"(graph(%x: float32[4, 8], %w: float32[8, 16], %b: float32[16]) {
  %mm: float32[4, 16] = aten.mm.default(self=%x, mat2=%w)
  %a: float32[4, 16] = aten.add.Tensor(self=%mm, other=%b)
  %e: float32[4, 16] = aten.exp.default(self=%a)
  %n: float32[4, 16] = aten.neg.default(self=%e)
  return (%n)
}
)",
                                     1, {"w", "b"});
  std::vector<std::pair<std::string, std::string>> dumps;
  auto dump = [&](const std::string& pass, const std::string& text) { dumps.emplace_back(pass, text); };
  ir::PassContext all;
  all.print_after = {"all"};
  all.dump = dump;
  const std::string text = ir::print_graph(net.graph);
  ASSERT_TRUE(engine::run_network_passes(net, cuda_network_passes(), all, "s0=4").is_ok());
  ASSERT_EQ(dumps.size(), 2u);
  // After the folds: the bias is in the product, the exp and neg are not yet one layer.
  EXPECT_EQ(dumps[0].first, "fold-epilogues (s0=4)");
  EXPECT_NE(dumps[0].second.find("kiln_bias="), std::string::npos) << dumps[0].second;
  EXPECT_EQ(dumps[0].second.find("aten.add.Tensor"), std::string::npos) << dumps[0].second;
  EXPECT_NE(dumps[0].second.find("aten.exp.default(self="), std::string::npos) << dumps[0].second;
  // After fusion: the two elementwise layers are one program.
  EXPECT_EQ(dumps[1].first, "fuse-elementwise (s0=4)");
  EXPECT_NE(dumps[1].second.find("kiln.fused_elementwise"), std::string::npos) << dumps[1].second;
  EXPECT_EQ(dumps[1].second.find("aten.exp.default(self="), std::string::npos) << dumps[1].second;
  EXPECT_EQ(dumps[1].second, ir::print_graph(net.graph));

  // Only the passes named are shown, and a disabled pass does not run.
  engine::Network again = network_from(text, 1, {"w", "b"});
  dumps.clear();
  ir::PassContext some;
  some.print_after = {"fuse-elementwise", "fold-epilogues"};
  some.dump = dump;
  some.disabled = {"fold-epilogues"};
  ASSERT_TRUE(engine::run_network_passes(again, cuda_network_passes(), some).is_ok());
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(dumps[0].first, "fuse-elementwise");
  EXPECT_EQ(dumps[0].second.find("kiln_bias="), std::string::npos) << dumps[0].second;
}

TEST(FoldEpilogues, RmsNormBetweenCastsTakesTheWeight) {
  // transformers' LlamaRMSNorm in bfloat16: float32 statistics, rounded back, times the weight.
  engine::Network net = network_from(R"(graph(%x: bfloat16[2, 3, 64], %w: bfloat16[64]) {
  %up: float32[2, 3, 64] = aten.to.dtype(self=%x, dtype=dtype.float32)
  %n: float32[2, 3, 64] = aten.rms_norm.default(input=%up, normalized_shape=[64])
  %down: bfloat16[2, 3, 64] = aten.to.dtype(self=%n, dtype=dtype.bfloat16)
  %y: bfloat16[2, 3, 64] = aten.mul.Tensor(self=%w, other=%down)
  return (%y)
}
)",
                                     1, {"w"});
  const ir::Value* out = net.graph.outputs()[0];
  ASSERT_TRUE(fold_epilogues(net).is_ok());
  ASSERT_EQ(net.graph.nodes().size(), 1u) << ir::print_graph(net.graph);
  const ir::Node* n = only_node(net, ir::OpKind::kRmsNorm);
  ASSERT_NE(n, nullptr);
  EXPECT_NE(n->find("kiln_cast_weight"), nullptr);
  EXPECT_EQ(std::get<ir::Value*>(*n->find("input")), net.graph.inputs()[0]);
  EXPECT_NE(n->find("eps"), nullptr);  // float32's epsilon, made explicit
  EXPECT_EQ(n->outputs[0], out);

  // The float32 norm is also an engine output, or the weight is an engine input: nothing folds.
  const char* kNormIsAnOutput = R"(graph(%x: bfloat16[2, 64], %w: bfloat16[64]) {
  %up: float32[2, 64] = aten.to.dtype(self=%x, dtype=dtype.float32)
  %n: float32[2, 64] = aten.rms_norm.default(input=%up, normalized_shape=[64])
  %down: bfloat16[2, 64] = aten.to.dtype(self=%n, dtype=dtype.bfloat16)
  %y: bfloat16[2, 64] = aten.mul.Tensor(self=%w, other=%down)
  return (%y, %n)
}
)";
  const char* kNormOnly = R"(graph(%x: bfloat16[2, 64], %w: bfloat16[64]) {
  %up: float32[2, 64] = aten.to.dtype(self=%x, dtype=dtype.float32)
  %n: float32[2, 64] = aten.rms_norm.default(input=%up, normalized_shape=[64])
  %down: bfloat16[2, 64] = aten.to.dtype(self=%n, dtype=dtype.bfloat16)
  %y: bfloat16[2, 64] = aten.mul.Tensor(self=%w, other=%down)
  return (%y)
}
)";
  for (bool weight_is_input : {false, true}) {
    engine::Network keep =
        weight_is_input ? network_from(kNormOnly, 2, {}) : network_from(kNormIsAnOutput, 1, {"w"});
    const size_t before = keep.graph.nodes().size();
    ASSERT_TRUE(fold_epilogues(keep).is_ok());
    EXPECT_EQ(keep.graph.nodes().size(), before) << ir::print_graph(keep.graph);
  }
}

TEST(FoldEpilogues, RotaryEmbeddingBecomesOneLayer) {
  const char* kRotary = R"(graph(%q: float16[1, 1, 4, 8], %cos: float16[1, 1, 8], %sin: float16[1, 1, 8]) {
  %qt: float16[1, 4, 1, 8] = aten.transpose.int(self=%q, dim0=1, dim1=2)
  %c: float16[1, 1, 1, 8] = aten.unsqueeze.default(self=%cos, dim=1)
  %s: float16[1, 1, 1, 8] = aten.unsqueeze.default(self=%sin, dim=1)
  %m1: float16[1, 4, 1, 8] = aten.mul.Tensor(self=%qt, other=%c)
  %x1: float16[1, 4, 1, 4] = aten.slice.Tensor(self=%qt, dim=3, start=0, end=4)
  %x2: float16[1, 4, 1, 4] = aten.slice.Tensor(self=%qt, dim=3, start=4, end=9223372036854775807)
  %n: float16[1, 4, 1, 4] = aten.neg.default(self=%x2)
  %cat: float16[1, 4, 1, 8] = aten.cat.default(tensors=[%n, %x1], dim=-1)
  %m2: float16[1, 4, 1, 8] = aten.mul.Tensor(self=%cat, other=%s)
  %o: float16[1, 4, 1, 8] = aten.add.Tensor(self=%m1, other=%m2)
  return (%o)
}
)";
  engine::Network net = network_from(kRotary, 3, {});
  const ir::Value* out = net.graph.outputs()[0];
  ASSERT_TRUE(fold_epilogues(net).is_ok());
  const ir::Node* r = only_node(net, ir::OpKind::kRotary);
  ASSERT_NE(r, nullptr) << ir::print_graph(net.graph);
  EXPECT_EQ(r->outputs[0], out);
  EXPECT_EQ(net.graph.nodes().size(), 4u) << ir::print_graph(net.graph);  // the transpose, two unsqueezes, rotary
  for (ir::OpKind gone : {ir::OpKind::kCat, ir::OpKind::kNeg, ir::OpKind::kMulTensor, ir::OpKind::kSliceTensor})
    for (const auto& n : net.graph.nodes()) EXPECT_NE(n->op, gone) << ir::print_graph(net.graph);

  // The halves swapped the other way round (cat(x1, -x2)) is not a rotary embedding: nothing folds.
  std::string other = kRotary;
  other.replace(other.find("tensors=[%n, %x1]"), 17, "tensors=[%x1, %n]");
  engine::Network keep = network_from(other, 3, {});
  const size_t before = keep.graph.nodes().size();
  ASSERT_TRUE(fold_epilogues(keep).is_ok());
  EXPECT_EQ(keep.graph.nodes().size(), before) << ir::print_graph(keep.graph);
}

TEST(FoldEpilogues, AGatedMlpsSiluTimesUpIsDoneByTheProductOfBothHalves) {
  // Lowering made gate and up one product x @ [Wg Wu]; silu(gate) * up reads its halves.
  const char* kGated = R"(graph(%x: bfloat16[1, 1, 64], %w: bfloat16[64, 96]) {
  %gu: bfloat16[1, 1, 96] = aten.matmul.default(self=%x, other=%w)
  %g: bfloat16[1, 1, 48] = aten.slice.Tensor(self=%gu, dim=2, start=0, end=48)
  %u: bfloat16[1, 1, 48] = aten.slice.Tensor(self=%gu, dim=-1, start=48, end=9223372036854775807)
  %s: bfloat16[1, 1, 48] = kiln.silu_mul(a=%g, b=%u)
  return (%s)
}
)";
  engine::Network net = network_from(kGated, 1, {"w"});
  const ir::Value* out = net.graph.outputs()[0];
  ASSERT_TRUE(fold_epilogues(net).is_ok());
  ASSERT_EQ(net.graph.nodes().size(), 1u) << ir::print_graph(net.graph);
  const ir::Node* mm = only_node(net, ir::OpKind::kMatmul);
  ASSERT_NE(mm, nullptr);
  const ir::Arg* halves = mm->find("kiln_gate_up");
  ASSERT_NE(halves, nullptr);
  EXPECT_EQ(std::get<std::vector<int64_t>>(*halves), (std::vector<int64_t>{0, 48}));
  EXPECT_EQ(mm->outputs[0], out);

  // Up first in the product (operands named the other way round) folds with the starts swapped.
  std::string swapped = kGated;
  swapped.replace(swapped.find("a=%g, b=%u"), 10, "a=%u, b=%g");
  engine::Network other = network_from(swapped, 1, {"w"});
  ASSERT_TRUE(fold_epilogues(other).is_ok());
  const ir::Node* mm2 = only_node(other, ir::OpKind::kMatmul);
  ASSERT_NE(mm2, nullptr) << ir::print_graph(other.graph);
  ASSERT_NE(mm2->find("kiln_gate_up"), nullptr) << ir::print_graph(other.graph);
  EXPECT_EQ(std::get<std::vector<int64_t>>(*mm2->find("kiln_gate_up")), (std::vector<int64_t>{48, 0}));

  // Nothing folds when the product is also an engine output, when a half is
  // read by something else, or when the halves differ in width.
  std::string product_out = kGated;
  product_out.replace(product_out.find("return (%s)"), 11, "return (%s, %gu)");
  std::string half_read = kGated;
  half_read.replace(half_read.find("return (%s)"), 11, "return (%s, %g)");
  std::string uneven = kGated;
  uneven.replace(uneven.find("%g: bfloat16[1, 1, 48] = aten.slice.Tensor(self=%gu, dim=2, start=0, end=48)"), 76,
                 "%g: bfloat16[1, 1, 48] = aten.slice.Tensor(self=%gu, dim=2, start=0, end=47)");
  for (const std::string& text : {product_out, half_read, uneven}) {
    engine::Network keep = network_from(text, 1, {"w"});
    const size_t before = keep.graph.nodes().size();
    ASSERT_TRUE(fold_epilogues(keep).is_ok());
    EXPECT_EQ(keep.graph.nodes().size(), before) << ir::print_graph(keep.graph);
  }
}

TEST(FoldEpilogues, AResidualAddFeedingANormIsDoneByTheNorm) {
  // Post-norm (BERT): the sum's only user is the norm, which takes both operands.
  {
    engine::Network net = network_from(R"(graph(%x: float16[4, 64], %y: float16[4, 64], %w: float16[64], %b: float16[64]) {
  %a: float16[4, 64] = aten.add.Tensor(self=%x, other=%y)
  %n: float16[4, 64] = aten.layer_norm.default(input=%a, normalized_shape=[64], weight=%w, bias=%b, eps=1e-12)
  return (%n)
}
)",
                                       2, {"w", "b"});
    const ir::Value* out = net.graph.outputs()[0];
    ASSERT_TRUE(fold_epilogues(net).is_ok());
    ASSERT_EQ(net.graph.nodes().size(), 1u) << ir::print_graph(net.graph);
    const ir::Node* n = only_node(net, ir::OpKind::kLayerNorm);
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(std::get<ir::Value*>(*n->find("input")), net.graph.inputs()[0]);
    EXPECT_EQ(std::get<ir::Value*>(*n->find("kiln_residual")), net.graph.inputs()[1]);
    EXPECT_EQ(n->outputs.size(), 1u);
    EXPECT_EQ(n->outputs[0], out);
  }
  // Pre-norm (ViT, Llama): the sum is the residual stream, used again after
  // the norm and returned; the norm writes it as its second output.
  {
    engine::Network net = network_from(R"(graph(%x: float32[4, 64], %y: float32[4, 64]) {
  %a: float32[4, 64] = aten.add.Tensor(self=%x, other=%y)
  %n: float32[4, 64] = aten.rms_norm.default(input=%a, normalized_shape=[64], eps=1e-06)
  %m: float32[4, 64] = aten.mul.Tensor(self=%n, other=%a)
  return (%m, %a)
}
)",
                                       2, {});
    const ir::Value* sum = net.graph.outputs()[1];
    ASSERT_TRUE(fold_epilogues(net).is_ok());
    ASSERT_EQ(net.graph.nodes().size(), 2u) << ir::print_graph(net.graph);
    const ir::Node* n = only_node(net, ir::OpKind::kRmsNorm);
    ASSERT_NE(n, nullptr);
    ASSERT_EQ(n->outputs.size(), 2u);
    EXPECT_EQ(n->outputs[1], sum);
    EXPECT_EQ(sum->producer, n);
    EXPECT_EQ(only_node(net, ir::OpKind::kAddTensor), nullptr);
  }
  // Nothing folds when the sum is used before the norm, broadcasts an
  // operand, or scales it (alpha).
  for (const char* text : {R"(graph(%x: float32[4, 64], %y: float32[4, 64]) {
  %a: float32[4, 64] = aten.add.Tensor(self=%x, other=%y)
  %m: float32[4, 64] = aten.mul.Tensor(self=%a, other=%a)
  %n: float32[4, 64] = aten.layer_norm.default(input=%a, normalized_shape=[64])
  return (%n, %m)
}
)",
                           R"(graph(%x: float32[4, 64], %y: float32[64]) {
  %a: float32[4, 64] = aten.add.Tensor(self=%x, other=%y)
  %n: float32[4, 64] = aten.layer_norm.default(input=%a, normalized_shape=[64])
  return (%n)
}
)",
                           R"(graph(%x: float32[4, 64], %y: float32[4, 64]) {
  %a: float32[4, 64] = aten.add.Tensor(self=%x, other=%y, alpha=2)
  %n: float32[4, 64] = aten.layer_norm.default(input=%a, normalized_shape=[64])
  return (%n)
}
)"}) {
    engine::Network net = network_from(text, 2, {});
    ASSERT_TRUE(fold_epilogues(net).is_ok());
    EXPECT_NE(only_node(net, ir::OpKind::kAddTensor), nullptr) << text;
  }
}

TEST(FoldEpilogues, AResidualNormBetweenCastsKeepsItsResidual) {
  // A float32 residual stream: rms_norm(float(x) + r), rounded to bfloat16 and
  // weighted. The residual folds into the norm; the cast fold, which reads
  // the norm's input as x itself, must not fire on top of it.
  engine::Network net = network_from(R"(graph(%x: bfloat16[2, 64], %r: float32[2, 64], %w: bfloat16[64]) {
  %up: float32[2, 64] = aten.to.dtype(self=%x, dtype=dtype.float32)
  %a: float32[2, 64] = aten.add.Tensor(self=%up, other=%r)
  %n: float32[2, 64] = aten.rms_norm.default(input=%a, normalized_shape=[64])
  %down: bfloat16[2, 64] = aten.to.dtype(self=%n, dtype=dtype.bfloat16)
  %y: bfloat16[2, 64] = aten.mul.Tensor(self=%w, other=%down)
  return (%y)
}
)",
                                     2, {"w"});
  ASSERT_TRUE(fold_epilogues(net).is_ok());
  const ir::Node* n = only_node(net, ir::OpKind::kRmsNorm);
  ASSERT_NE(n, nullptr) << ir::print_graph(net.graph);
  EXPECT_NE(n->find("kiln_residual"), nullptr);
  EXPECT_EQ(n->find("kiln_cast_weight"), nullptr) << ir::print_graph(net.graph);
  EXPECT_NE(only_node(net, ir::OpKind::kMulTensor), nullptr);
}

TEST(FoldEpilogues, AddsThatAreNotABiasStay) {
  // The added operand is an engine input (not a constant), has the wrong length, or the
  // product has a second user: nothing folds.
  for (const char* text : {R"(graph(%x: float32[4, 8], %y: float32[16], %w: float32[8, 16]) {
  %mm: float32[4, 16] = aten.matmul.default(self=%x, other=%w)
  %a: float32[4, 16] = aten.add.Tensor(self=%mm, other=%y)
  return (%a)
}
)",
                           R"(graph(%x: float32[4, 8], %y: float32[16], %w: float32[8, 16]) {
  %mm: float32[4, 16] = aten.matmul.default(self=%x, other=%w)
  %a: float32[4, 16] = aten.add.Tensor(self=%mm, other=%mm)
  return (%a)
}
)",
                           R"(graph(%x: float32[4, 8], %y: float32[16], %w: float32[8, 16]) {
  %mm: float32[4, 16] = aten.matmul.default(self=%x, other=%w)
  %a: float32[4, 16] = aten.add.Tensor(self=%mm, other=%y)
  return (%a, %mm)
}
)"}) {
    engine::Network net = network_from(text, 2, {"w"});
    const size_t before = net.graph.nodes().size();
    ASSERT_TRUE(fold_epilogues(net).is_ok());
    EXPECT_EQ(net.graph.nodes().size(), before) << text;
  }
}

TEST(FoldEpilogues, ConvolutionTakesAResidualDefinedBeforeIt) {
  engine::Network net = network_from(R"(graph(%x: float32[1, 4, 6, 6], %w: float32[4, 4, 3, 3], %b: float32[4]) {
  %c1: float32[1, 4, 6, 6] = aten.conv2d.default(input=%x, weight=%w, bias=%b, padding=[1, 1])
  %c2: float32[1, 4, 6, 6] = aten.conv2d.default(input=%c1, weight=%w, bias=%b, padding=[1, 1])
  %a: float32[1, 4, 6, 6] = aten.add.Tensor(self=%c2, other=%x)
  %r: float32[1, 4, 6, 6] = aten.relu.default(self=%a)
  return (%r)
}
)",
                                     1, {"w", "b"});
  ASSERT_TRUE(fold_epilogues(net).is_ok());
  ASSERT_EQ(net.graph.nodes().size(), 2u) << ir::print_graph(net.graph);
  const ir::Node& last = *net.graph.nodes().back();
  EXPECT_NE(last.find("kiln_residual"), nullptr);
  EXPECT_NE(last.find("kiln_act"), nullptr);
  EXPECT_EQ(last.outputs[0], net.graph.outputs()[0]);
}

TEST(FoldEpilogues, AResidualComputedAfterTheConvolutionFoldsIntoTheOtherOne) {
  // add(c1, c2) where c2 comes after c1: c1 cannot read c2, c2 can read c1.
  engine::Network net = network_from(R"(graph(%x: float32[1, 4, 6, 6], %w: float32[4, 4, 1, 1]) {
  %c1: float32[1, 4, 6, 6] = aten.conv2d.default(input=%x, weight=%w)
  %c2: float32[1, 4, 6, 6] = aten.conv2d.default(input=%x, weight=%w)
  %a: float32[1, 4, 6, 6] = aten.add.Tensor(self=%c1, other=%c2)
  return (%a)
}
)",
                                     1, {"w"});
  ASSERT_TRUE(fold_epilogues(net).is_ok());
  ASSERT_EQ(net.graph.nodes().size(), 2u);
  EXPECT_EQ(net.graph.nodes()[0]->find("kiln_residual"), nullptr);
  EXPECT_NE(net.graph.nodes()[1]->find("kiln_residual"), nullptr);
}

std::string refusal_of(const char* text) {
  auto g = ir::parse_graph(text);
  EXPECT_TRUE(g.has_value()) << g.status().message();
  if (!g.has_value() || g->nodes().empty()) return "unparsed";
  return cuda_refusal(*g->nodes().back());
}

TEST(NodeRefusal, NamesWhatTheBuilderCannotTake) {
  // Softmax over any dim is taken; over a dim the tensor lacks, refused by name.
  EXPECT_EQ(refusal_of(R"(graph(%x: float32[4, 8]) {
  %s: float32[4, 8] = aten.softmax.int(self=%x, dim=0)
  return (%s)
}
)"),
            "");
  EXPECT_NE(refusal_of(R"(graph(%x: float32[4, 8]) {
  %s: float32[4, 8] = aten.softmax.int(self=%x, dim=2)
  return (%s)
}
)")
                .find("lacks"),
            std::string::npos);
  EXPECT_NE(refusal_of(R"(graph(%x: float32[4, 8]) {
  %d: float32[4, 8] = aten.dropout.default(input=%x, p=0.5, train=true)
  return (%d)
}
)")
                .find("training"),
            std::string::npos);
  // Integer arithmetic is taken (positions, counters; the pointwise layer for the rest).
  EXPECT_EQ(refusal_of(R"(graph(%x: int64[4, 8]) {
  %y: int64[4, 8] = aten.add.Tensor(self=%x, other=%x)
  return (%y)
}
)"),
            "");
  EXPECT_EQ(refusal_of(R"(graph(%x: int64[4, 8]) {
  %y: int64[4, 8] = aten.neg.default(self=%x)
  return (%y)
}
)"),
            "");
  // any/all over an explicit empty list of dims reduce nothing: refused, not reduced whole.
  EXPECT_NE(refusal_of(R"(graph(%x: bool[4, 8]) {
  %y: bool[4, 8] = aten.any.dims(self=%x, dim=[])
  return (%y)
}
)")
                .find("empty list"),
            std::string::npos);
  // Ops not defined on a dtype are refused naming it.
  EXPECT_NE(refusal_of(R"(graph(%x: float32[4, 8]) {
  %y: float32[4, 8] = aten.bitwise_not.default(self=%x)
  return (%y)
}
)")
                .find("floating"),
            std::string::npos);
  EXPECT_NE(refusal_of(R"(graph(%x: float64[4, 8], %w: float64[8, 4]) {
  %y: float64[4, 4] = aten.mm.default(self=%x, mat2=%w)
  return (%y)
}
)")
                .find("float64"),
            std::string::npos);
  EXPECT_NE(refusal_of(R"(graph(%x: float32[8], %w: float32[8, 4]) {
  %y: float32[4] = aten.matmul.default(self=%x, other=%w)
  return (%y)
}
)")
                .find("1-D"),
            std::string::npos);
}

TEST(NodeRefusal, ConvolutionsWithDefaultPaddingAreTaken) {
  // The exporter leaves out arguments at their defaults (padding, stride, dilation).
  EXPECT_EQ(refusal_of(R"(graph(%x: float16[1, 4, 6, 6], %w: float16[8, 4, 1, 1]) {
  %y: float16[1, 8, 6, 6] = aten.conv2d.default(input=%x, weight=%w)
  return (%y)
}
)"),
            "");
  EXPECT_EQ(refusal_of(R"(graph(%x: float16[1, 4, 6, 6], %w: float16[8, 4, 3, 3], %b: float16[8]) {
  %y: float16[1, 8, 3, 3] = kiln.conv_act(input=%x, weight=%w, bias=%b, stride=[2, 2], padding=[1, 1], activation="relu")
  return (%y)
}
)"),
            "");
}

CudaPlan small_plan() { return kiln::testing::sample_cuda_plan(); }

TEST(PlanJson, RoundTripsThroughJson) {
  const CudaPlan p = small_plan();
  const std::vector<uint8_t> cubin = {1, 2, 3};
  auto back = CudaPlan::from_json(p.to_json(), cubin);
  ASSERT_TRUE(back.has_value()) << back.status().message();
  EXPECT_EQ(back->to_json(), p.to_json());
  EXPECT_EQ(back->cubin, cubin);
  EXPECT_EQ(back->steps[1].gemm.algo.data[3], 0xdeadbeefULL);
  EXPECT_EQ(back->constants[1].padded_channels, 8);
  EXPECT_EQ(back->constants[1].nbytes(), 64 * 8 * 7 * 7 * 2);

  // An FP8-rows constant (--precision fp8w) keeps its form; its bytes are the
  // e4m3 rows padded to 16, then a float32 scale per row.
  CudaPlan q = small_plan();
  q.constants.push_back({"wq", DType::UInt8, {100, 30}, false, true, 0, true});
  auto qb = CudaPlan::from_json(q.to_json(), cubin);
  ASSERT_TRUE(qb.has_value()) << qb.status().message();
  EXPECT_EQ(qb->to_json(), q.to_json());
  EXPECT_TRUE(qb->constants.back().fp8_rows);
  EXPECT_EQ(qb->constants.back().fp8_scales_offset(), 3008);
  EXPECT_EQ(qb->constants.back().nbytes(), 3008 + 4 * 30);
  q.constants.back().transposed = false;  // FP8 rows are a transposed matrix's
  EXPECT_FALSE(CudaPlan::from_json(q.to_json(), cubin).has_value());
}

TEST(PlanJson, BadReferencesAreRefusedNamingTheLayer) {
  struct Case {
    const char* what;
    void (*damage)(CudaPlan&);
    const char* expect;
  };
  const Case cases[] = {
      {"arena offset past the end", [](CudaPlan& p) { p.steps[0].kernel.args[0].offset = 1 << 20; }, "relu"},
      {"unknown kernel", [](CudaPlan& p) { p.steps[0].kernel.kernel = 7; }, "kernel index"},
      {"unknown constant", [](CudaPlan& p) { p.steps[1].gemm.b.region = 3; }, "constant 3"},
      {"slot outside the arena", [](CudaPlan& p) { p.outputs[0].offset = 4000; }, "slot 'y'"},
      {"error word outside the arena", [](CudaPlan& p) { p.error_offset = 4094; }, "error word"},
      {"a GEMM that does not fit its shape", [](CudaPlan& p) { p.steps[1].gemm.shape.ldc = 2; }, "ldc"},
      {"fewer padded channels than the filter has", [](CudaPlan& p) { p.constants[1].padded_channels = 2; },
       "constant 'stem' pads its 3 channels to 2"},
      {"padded channels on a matrix", [](CudaPlan& p) { p.constants[0].padded_channels = 16; }, "constant 'w' pads"},
  };
  for (const Case& c : cases) {
    CudaPlan p = small_plan();
    c.damage(p);
    auto back = CudaPlan::from_json(p.to_json(), {});
    ASSERT_FALSE(back.has_value()) << c.what;
    EXPECT_NE(back.status().message().find(c.expect), std::string::npos) << c.what << ": " << back.status().message();
  }
  auto bad = CudaPlan::from_json("{\"device\": 3}", {});
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), ErrorCode::kFormat);
}

}  // namespace
// A range plan's kernels read at run time only the sizes that move with the
// symbols, found by planning a neighbouring shape too. There a layer may be
// planned another way: rows 8 of a matrix product are a GEMV kernel, rows 9
// a library GEMM. The other kernels still pair with theirs: the norm after it
// keeps its row length compiled in (host only: nothing runs).
// A build configuration for an H100-like device (sm_90, 132 multiprocessors)
// whose plans are made on the host, with s0's range.
cuda::BuildConfig host_config(ir::SymbolRange s0) {
  cuda::BuildConfig config;
  config.device.name = "planned on the host";
  config.device.major = 9;
  config.device.sm_count = 132;
  config.symbols["s0"] = s0;
  return config;
}

// A gated MLP planned on the host at a few rows and at many: with few, one
// SwiGLU GEMV writes silu(gate) * up and no silu_mul step is left; with many,
// the library GEMM and then the silu_mul kernel. With --precision fp8w the
// few-row product reads FP8 rows (a uint8 constant with a scale per row).
TEST(RangePlan, AGatedMlpIsOneMatrixVectorKernelAtFewRowsAndAProductThenSiluMulAtMany) {
  const char* kGated = R"(graph(%x: bfloat16[s0, 64], %w: bfloat16[64, 96], %d: bfloat16[48, 64]) {
  %gu: bfloat16[s0, 96] = aten.mm.default(self=%x, mat2=%w)
  %g: bfloat16[s0, 48] = aten.slice.Tensor(self=%gu, dim=1, start=0, end=48)
  %u: bfloat16[s0, 48] = aten.slice.Tensor(self=%gu, dim=1, start=48, end=96)
  %s: bfloat16[s0, 48] = kiln.silu_mul(a=%g, b=%u)
  %y: bfloat16[s0, 64] = aten.mm.default(self=%s, mat2=%d)
  return (%y)
}
)";
  for (const char* precision : {"fp32", "fp8w"}) {
    engine::Network net = testing::network_from(kGated, 1, {"w", "d"});
    cuda::BuildConfig config = host_config({1, 64, 4});
    config.precision = *parse_precision(precision);
    const bool fp8 = std::string(precision) == "fp8w";
    for (int64_t rows : {4, 32}) {
      auto shape = cuda::plan_for_shape(net, {{"s0", rows}}, config);
      ASSERT_TRUE(shape.has_value()) << precision << " " << rows << ": " << shape.status().message();
      int gemv = 0, gemm = 0, silu = 0, swiglu = 0, fp8_gemv = 0;
      for (const cuda::Step& st : shape->plan.steps) {
        if (st.kind == cuda::Step::Kind::kGemm) ++gemm;
        if (st.kind != cuda::Step::Kind::kKernel) continue;
        const GeneratedKernel& k = shape->kernels[static_cast<size_t>(st.kernel.kernel)].first;
        silu += st.layer.find("silu_mul") != std::string::npos;
        if (st.layer.find("gemv") == std::string::npos) continue;
        ++gemv;
        fp8_gemv += k.templ.find("gemv_fp8") != std::string::npos;
        swiglu += k.targs.size() > 3 && k.targs[3] == "3";
      }
      int fp8_constants = 0;
      for (const cuda::DeviceConstant& c : shape->plan.constants) fp8_constants += c.fp8_rows;
      if (rows == 4) {
        EXPECT_EQ(gemv, 2) << precision;  // gate/up with SwiGLU, then down
        EXPECT_EQ(swiglu, 1) << precision;
        EXPECT_EQ(silu, 0) << precision;
        EXPECT_EQ(gemm, 0) << precision;
        EXPECT_EQ(fp8_gemv, fp8 ? 2 : 0) << precision;
        EXPECT_EQ(fp8_constants, fp8 ? 2 : 0) << precision;
      } else {
        EXPECT_EQ(gemv, 0) << precision;
        EXPECT_EQ(gemm, 2) << precision;
        EXPECT_EQ(silu, 1) << precision;
        EXPECT_EQ(fp8_constants, 0) << precision;  // many rows keep the exported weights
      }
    }
  }
}

// argmax, cumsum (floating and integer) and softmax over a non-last dim are
// planned on the host as their kernels: no refusal, the kernels they name.
TEST(RangePlan, ArgmaxCumsumAndSoftmaxOverAnotherDimArePlannedAsTheirKernels) {
  engine::Network net = testing::network_from(R"(graph(%x: float16[s0, 12], %i: int32[s0, 7]) {
  %a: int64[s0] = aten.argmax.default(self=%x, dim=1)
  %c: float16[s0, 12] = aten.cumsum.default(self=%x, dim=1)
  %k: int64[s0, 7] = aten.cumsum.default(self=%i, dim=0)
  %s: float16[s0, 12] = aten._softmax.default(self=%x, dim=0, half_to_float=false)
  return (%a, %c, %k, %s)
}
)",
                                              2, {});
  for (const auto& n : net.graph.nodes()) EXPECT_EQ(cuda::cuda_refusal(*n), "") << n->describe();
  const cuda::BuildConfig config = host_config({1, 40, 5});
  auto shape = cuda::plan_for_shape(net, {{"s0", 5}}, config);
  ASSERT_TRUE(shape.has_value()) << shape.status().message();
  std::multiset<std::string> templates;
  for (const cuda::KernelChoice& k : shape->kernels) templates.insert(k.first.templ);
  EXPECT_EQ(templates.count("kiln::arg_reduce"), 1u);
  EXPECT_EQ(templates.count("kiln::cumsum"), 2u);
  // softmax over dim 0: the input with that dim moved last, and the result (a
  // permuted view of the rows) copied into its engine output.
  EXPECT_EQ(templates.count("kiln::copy"), 2u);
}

// The pointwise layer's conformance cases (integers, bools, narrow integers,
// mixed dtypes, float64, math and special functions), the diagonal views
// case, the reduction cases (one past a single grid's outputs among them), index_put, the scatter family and pad modes
// are taken whole by the CUDA builder, planned on the host, and every kernel
// they need compiles for sm_90; the GPU runs them against the reference
// (CudaConformance).
TEST(RangePlan, PointwiseReductionScatterAndPadCasesArePlannedWholeAndTheirKernelsCompile) {
  int cases = 0;
  for (const testing::ConformanceCase& c : testing::conformance_cases()) {
    static const std::set<std::string> others = {"diagonal_views",
                                                 "reductions",
                                                 "integer_reductions",
                                                 "reductions_past_one_grid",
                                                 "argmax_argmin_cumsum",
                                                 "index_put_general",
                                                 "scatter_family",
                                                 "var_and_var_mean",
                                                 "pad_modes",
                                                 "softmaxes",
                                                 "conv_transposed",
                                                 "pools_with_indices_and_3d",
                                                 "insertion_points_histc_isin",
                                                 "grid_sampling",
                                                 "segment_reductions",
                                                 "products",
                                                 "orderings",
                                                 "empty_products"};
    if (c.name.rfind("pointwise_", 0) != 0 && !others.contains(c.name)) continue;
    ++cases;
    engine::Network net = network_from(c.ir);
    for (const auto& n : net.graph.nodes()) EXPECT_EQ(cuda_refusal(*n), "") << c.name << ": " << n->describe();
    for (const char* precision : {"fp32", "fp16"}) {
      cuda::BuildConfig config = host_config(c.s0);
      config.precision = *parse_precision(precision);
      auto shape = cuda::plan_for_shape(net, {{"s0", 3}}, config);
      ASSERT_TRUE(shape.has_value()) << c.name << " " << precision << ": " << shape.status().message();
      std::vector<const KernelChoice*> all;
      std::vector<std::string> names;
      for (const KernelChoice& k : shape->kernels) {
        all.push_back(&k);
        names.push_back("k" + std::to_string(names.size()));
      }
      ASSERT_GE(all.size(), net.graph.nodes().size() / 2) << c.name;
      auto m = compile_kernels(all, names, "sm_90");
      ASSERT_TRUE(m.has_value()) << c.name << " " << precision << ": " << m.status().message();
    }
  }
  EXPECT_EQ(cases, 20);
}

TEST(RangePlan, ALayerPlannedAnotherWayAtTheNeighbouringShapeLeavesTheOtherKernelsAlone) {
  engine::Network net = testing::network_from(R"(graph(%x: float32[s0, 64], %w: float32[64, 64], %g: float32[64]) {
  %t: float32[64, 64] = aten.t.default(self=%w)
  %y: float32[s0, 64] = aten.mm.default(self=%x, mat2=%t)
  %r: float32[s0, 64] = aten.relu.default(self=%y)
  %l: float32[s0, 64] = aten.layer_norm.default(input=%r, normalized_shape=[64], weight=%g, eps=1e-05)
  return (%l)
}
)",
                                              1, {"w", "g"});
  const cuda::BuildConfig config = host_config({1, 16, 8});
  auto at8 = cuda::plan_for_shape(net, {{"s0", 8}}, config);
  ASSERT_TRUE(at8.has_value()) << at8.status().message();
  bool gemv = false, norm = false;
  for (const cuda::Step& st : at8->plan.steps) {
    if (st.kind != cuda::Step::Kind::kKernel) continue;
    gemv = gemv || st.layer.find("gemv") != std::string::npos;
    if (st.layer.find('l') != 0) continue;
    norm = true;
    const cuda::KernelChoice& k = at8->kernels[static_cast<size_t>(st.kernel.kernel)];
    int compiled_in = 0;
    for (bool runtime : k.second) compiled_in += runtime ? 0 : 1;
    EXPECT_GT(compiled_in, 0) << "every size of the norm's kernel is read at run time";
  }
  EXPECT_TRUE(gemv) << "8 rows should be a GEMV kernel";
  EXPECT_TRUE(norm);
  auto at9 = cuda::plan_for_shape(net, {{"s0", 9}}, config);
  ASSERT_TRUE(at9.has_value()) << at9.status().message();
  for (const cuda::Step& st : at9->plan.steps)
    EXPECT_EQ(st.layer.find("gemv"), std::string::npos) << "9 rows should be a library GEMM";
}

// A matrix product whose operand is a view at an offset that is no multiple
// of 16 bytes (columns 1..8 of 13 at fp16: 2 bytes in) gets a copy of that
// view into an aligned slot, so that cuBLASLt (asked for 16-byte alignment)
// and the matrix-vector kernel (16-byte loads) get aligned operands; at any
// row count, and the aligned operand (the weight) is read where it lies.
TEST(RangePlan, AMatrixProductOfAViewAtAnOddOffsetReadsAnAlignedCopy) {
  for (const char* dtype : {"float16", "float32"}) {
    const std::string text = std::string("graph(%x: ") + dtype + "[s0, 13], %w: " + dtype + "[8, 16]) {\n" +
                             "  %v: " + dtype + "[s0, 8] = aten.slice.Tensor(self=%x, dim=1, start=1, end=9)\n" +
                             "  %y: " + dtype + "[s0, 16] = aten.mm.default(self=%v, mat2=%w)\n" + "  return (%y)\n}\n";
    engine::Network net = testing::network_from(text, 1, {"w"});
    const cuda::BuildConfig config = host_config({1, 64, 4});
    for (int64_t rows : {2, 64}) {
      auto shape = cuda::plan_for_shape(net, {{"s0", rows}}, config);
      ASSERT_TRUE(shape.has_value()) << dtype << " " << rows << ": " << shape.status().message();
      int copies = 0, products = 0;
      for (const cuda::Step& st : shape->plan.steps) {
        copies += st.layer.find(" align") != std::string::npos;
        if (st.kind == cuda::Step::Kind::kGemm) {
          ++products;
          EXPECT_EQ(st.gemm.a.offset % 16, 0) << dtype << " " << rows;
          EXPECT_EQ(st.gemm.b.offset % 16, 0) << dtype << " " << rows;
        } else if (st.layer.find("gemv") != std::string::npos) {
          ++products;
          for (const cuda::BufferRef& r : st.kernel.args) EXPECT_EQ(r.offset % 16, 0) << dtype << " " << rows;
        }
      }
      EXPECT_EQ(products, 1) << dtype << " " << rows;
      EXPECT_EQ(copies, 1) << dtype << " " << rows << ": the view at 2 or 4 bytes in is copied once";
    }
  }
}

}  // namespace kiln::cuda

namespace kiln::cuda {
namespace {

// What a kernel step launches: its kernel's identity and every size it is
// given, compiled in or passed at run time.
std::pair<std::string, std::vector<int64_t>> launched(const Step& st, const std::vector<KernelChoice>& kernels) {
  const KernelChoice& k = kernels.at(static_cast<size_t>(st.kernel.kernel));
  std::vector<int64_t> sizes = k.first.dims;
  for (size_t d = 0; d < sizes.size() && d < k.second.size(); ++d)
    if (k.second[d]) sizes[d] = st.kernel.dims.at(d);
  return {k.first.identity(), sizes};
}

// A table's index and a shape's symbol values map one to the other, the
// last symbol fastest, over every shape of the ranges.
TEST(RangePlan, TableIndexAndSymbolValuesAreInverses) {
  const std::vector<PlanSymbol> symbols{{"a", 2, 3, 4}, {"b", 1, 1, 5}};
  ASSERT_EQ(ShapeTable::count(symbols), 15u);
  size_t at = 0;
  for (int64_t a = 2; a <= 4; ++a)
    for (int64_t b = 1; b <= 5; ++b, ++at) {
      const std::vector<int64_t> want{a, b};
      EXPECT_EQ(ShapeTable::index(symbols, want), at);
      EXPECT_EQ(ShapeTable::values(symbols, at), want) << at;
    }
}

// A range small enough is planned at every shape at build, into the plan's
// table: each shape read back from it (through JSON and the shapes
// section, as a .kiln holds it) launches what planning that shape alone
// launches, though the kernels are chosen across the whole range. Rows 1..8
// of the product are a GEMV kernel, one instance for 1, 2, 3-4 and 5-8 rows
// (the count a size), 9..16 a library GEMM: five variants.
TEST(RangePlan, EveryShapeOfASmallRangeIsPlannedAtBuildAsPlanningItAloneWould) {
  engine::Network net = testing::network_from(R"(graph(%x: float32[s0, 64], %w: float32[64, 64], %g: float32[64]) {
  %t: float32[64, 64] = aten.t.default(self=%w)
  %y: float32[s0, 64] = aten.mm.default(self=%x, mat2=%t)
  %r: float32[s0, 64] = aten.relu.default(self=%y)
  %l: float32[s0, 64] = aten.layer_norm.default(input=%r, normalized_shape=[64], weight=%g, eps=1e-05)
  return (%l)
}
)",
                                              1, {"w", "g"});
  const BuildConfig config = host_config({1, 16, 8});
  auto built = plan_range(net, config);
  ASSERT_TRUE(built.has_value()) << built.status().message();
  ASSERT_TRUE(built->plan.table);
  EXPECT_EQ(built->plan.table->variants.size(), 5u);
  for (size_t k = 0; k < built->kernels.size(); ++k) built->plan.kernel_names.push_back("k" + std::to_string(k));
  const std::string json = built->plan.to_json();
  auto read = CudaPlan::from_json(json, {}, built->plan.table->records);
  ASSERT_TRUE(read.has_value()) << read.status().message();
  ASSERT_TRUE(read->table);
  for (int64_t s0 = 1; s0 <= 16; ++s0) {
    SCOPED_TRACE("s0 = " + std::to_string(s0));
    auto alone = plan_for_shape(net, {{"s0", s0}}, config);
    ASSERT_TRUE(alone.has_value()) << alone.status().message();
    const std::vector<int64_t> values{s0};
    auto table = read->table->shape_plan(*read, ShapeTable::index(read->symbols, values));
    ASSERT_TRUE(table.has_value()) << table.status().message();
    EXPECT_EQ(table->arena_bytes, alone->plan.arena_bytes);
    ASSERT_EQ(table->outputs.size(), 1u);
    EXPECT_EQ(table->outputs[0].sizes, (std::vector<int64_t>{s0, 64}));
    EXPECT_EQ(table->inputs[0].offset, alone->plan.inputs[0].offset);
    EXPECT_EQ(table->outputs[0].offset, alone->plan.outputs[0].offset);
    ASSERT_EQ(table->steps.size(), alone->plan.steps.size());
    for (size_t i = 0; i < table->steps.size(); ++i) {
      const Step& a = table->steps[i];
      const Step& b = alone->plan.steps[i];
      ASSERT_EQ(a.kind, b.kind);
      EXPECT_EQ(a.layer, b.layer);
      if (a.kind == Step::Kind::kGemm) {
        EXPECT_EQ(a.gemm.shape.to_string(), b.gemm.shape.to_string());
        EXPECT_EQ(a.gemm.a, b.gemm.a);
        EXPECT_EQ(a.gemm.c, b.gemm.c);
      } else if (a.kind == Step::Kind::kKernel) {
        EXPECT_EQ(launched(a, built->kernels), launched(b, alone->kernels));
        EXPECT_EQ(a.kernel.grid, b.kernel.grid);
        EXPECT_EQ(a.kernel.block, b.kernel.block);
        EXPECT_EQ(a.kernel.args, b.kernel.args);
      }
    }
  }
  // A record cut short, or naming a variant the table lacks, is refused.
  std::vector<uint8_t> cut(built->plan.table->records.begin(), built->plan.table->records.end() - 1);
  auto short_read = CudaPlan::from_json(json, {}, cut);
  ASSERT_FALSE(short_read.has_value());
  EXPECT_EQ(short_read.status().code(), ErrorCode::kFormat);
  std::vector<uint8_t> bad = built->plan.table->records;
  bad[0] = 0x7f;
  auto bad_read = CudaPlan::from_json(json, {}, bad);
  ASSERT_FALSE(bad_read.has_value());
  EXPECT_EQ(bad_read.status().code(), ErrorCode::kFormat);
}

}  // namespace
}  // namespace kiln::cuda
