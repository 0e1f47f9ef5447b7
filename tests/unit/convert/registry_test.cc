#include "convert/registry.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernel.h"
#include "ir/printer.h"
#include "runtime/interpreter.h"
#include "unit/backends/cpu/run_op.h"

namespace kiln::convert {
namespace {

using ir::InputSpec;
using ir::OpKind;

// Graphs parsed from text, kept alive for the nodes the tests look at.
ir::Graph parse(std::string_view text) {
  auto g = ir::parse_graph(text);
  EXPECT_TRUE(g.has_value()) << g.status().message();
  return g.has_value() ? std::move(*g) : ir::Graph();
}

const ir::Node& node_named(const ir::Graph& g, std::string_view name) {
  for (const auto& n : g.nodes())
    if (n->name == name) return *n;
  ADD_FAILURE() << "no node named " << name;
  static const ir::Node kNone;
  return kNone;
}

const ir::Value* value_named(const ir::Graph& g, std::string_view name) {
  for (size_t i = 0; i < g.num_values(); ++i)
    if (g.value(i)->name == name) return g.value(i);
  ADD_FAILURE() << "no value named " << name;
  return nullptr;
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

const engine::TargetInfo& cpu_target() {
  static const auto backend = cpu::make_cpu_backend();
  return backend->target();
}

// A target that takes every op and only float32, with static shapes unless told.
engine::TargetInfo float32_target(bool symbolic_dims) {
  engine::TargetInfo t;
  t.backend = "f32only";
  t.dtypes = {DType::Float32};
  t.symbolic_dims = symbolic_dims;
  t.implements = [](OpKind) { return true; };
  return t;
}

constexpr const char* kOrdinary = R"(graph(%x: float32[s0, 4], %w: float32[4, 4], %i: int64[3]) {
  %mm: float32[s0, 4] = aten.mm.default(self=%x, mat2=%w)
  %a: float32[s0, 4] = aten.add.Tensor(self=%mm, other=%x)
  %r: float32[s0, 4] = aten.relu.default(self=%a)
  %s: float32[s0] = aten.sum.dim_IntList(self=%r, dim=[1])
  %n: symint = aten.sym_size.int(self=%x, dim=0)
  %v: float32[s0, 2, 2] = aten.view.default(self=%r, size=[%n, 2, 2])
  %mx: float32[s0], %ix: int64[s0] = aten.max.dim(self=%r, dim=1)
  %d: float32[s0, 4] = aten.dropout.default(input=%r, p=0.5, train=false)
  %det: float32[s0, 4] = aten.detach.default(self=%d)
  %g: float32[3, 4] = aten.index.Tensor(self=%w, indices=?[%i])
  return (%s, %v, %mx, %ix, %det, %g)
}
)";

TEST(ConverterCheck, OrdinaryOpsGoIntoCpuEngines) {
  ir::Graph g = parse(kOrdinary);
  ASSERT_EQ(g.nodes().size(), 10u);
  for (const auto& n : g.nodes()) {
    Capability c = builtin_converters().check(*n, cpu_target());
    EXPECT_TRUE(c.supported) << n->describe() << ": " << c.reason;
    EXPECT_TRUE(c.reason.empty()) << n->describe();
  }
}

constexpr const char* kRefused = R"(graph(%x: float32[8], %m: bool[8], %b: uint8[8], %t: int64[], %k: float32[u0]) {
  %nz: int64[8, 1] = aten.nonzero.default(self=%x)
  %nzu: int64[u0, 1] = aten.nonzero.default(self=%x)
  %bm: float32[5] = aten.index.Tensor(self=%x, indices=?[%m])
  %um: float32[5] = aten.index.Tensor(self=%x, indices=?[%b])
  %dt: float32[8] = aten.dropout.default(input=%x, p=0.5, train=true)
  %z: float32[u1] = aten.relu.default(self=%x)
  %kk: float32[u0] = aten.relu.default(self=%k)
  %it: symint = aten._local_scalar_dense.default(self=%t)
  %ip: float32[8] = aten.add_.Tensor(self=%x, other=%x)
  return (%nz, %nzu, %bm, %um, %dt, %z, %kk, %it, %ip)
}
)";

TEST(ConverterCheck, RefusalsSayWhy) {
  ir::Graph g = parse(kRefused);
  const ConverterRegistry& r = builtin_converters();
  struct Case {
    const char* node;
    std::vector<const char*> reason_mentions;
  };
  const Case cases[] = {
      {"nz", {"nonzero", "tensor data"}},
      {"nzu", {"u0", "'nzu'", "tensor data"}},
      {"bm", {"boolean", "tensor data"}},
      {"um", {"boolean"}},
      {"dt", {"train"}},
      {"z", {"u1", "'z'", "tensor data"}},
      {"it", {".item()"}},
      // In-place ops never reach a backend: functionalization removes them.
      {"ip", {"aten.add_.Tensor", "in-place"}},
  };
  for (const Case& c : cases) {
    Capability cap = r.check(node_named(g, c.node), cpu_target());
    EXPECT_FALSE(cap.supported) << c.node;
    for (const char* want : c.reason_mentions)
      EXPECT_TRUE(contains(cap.reason, want)) << c.node << ": '" << cap.reason << "' should mention " << want;
  }
  // A data-dependent size that an operand already carries was decided before this node.
  Capability kk = r.check(node_named(g, "kk"), cpu_target());
  EXPECT_TRUE(kk.supported) << kk.reason;
}

TEST(ConverterCheck, InplaceOpIsRefusedEvenWhereTheBackendHasTheLayer) {
  ir::Graph g = parse(kRefused);
  Capability c = builtin_converters().check(node_named(g, "ip"), float32_target(/*symbolic_dims=*/true));
  EXPECT_FALSE(c.supported);
  EXPECT_TRUE(contains(c.reason, "in-place")) << c.reason;
}

TEST(ConverterCheck, DropoutInInferenceAndIntegerIndicesAreAccepted) {
  ir::Graph g = parse(R"(graph(%x: float32[8], %i: int64[3], %j: int32[3]) {
  %d: float32[8] = aten.dropout.default(input=%x, p=0.5, train=false)
  %dd: float32[8] = aten.dropout.default(input=%x, p=0.5)
  %a: float32[3] = aten.index.Tensor(self=%x, indices=?[%i])
  %b: float32[3] = aten.index.Tensor(self=%x, indices=?[%j])
  return (%d, %dd, %a, %b)
}
)");
  for (const auto& n : g.nodes()) {
    Capability c = builtin_converters().check(*n, cpu_target());
    EXPECT_TRUE(c.supported) << n->describe() << ": " << c.reason;
  }
}

TEST(ConverterCheck, DtypeOutsideTheTargetIsNamed) {
  ir::Graph g = parse(R"(graph(%x: float32[4], %i: int64[4]) {
  %a: float32[4] = aten.mul.Tensor(self=%x, other=%i)
  %b: bool[4] = aten.gt.Scalar(self=%x, other=0)
  %c: float32[4] = aten.relu.default(self=%x)
  return (%a, %b, %c)
}
)");
  const engine::TargetInfo t = float32_target(false);
  Capability a = builtin_converters().check(node_named(g, "a"), t);
  EXPECT_FALSE(a.supported);
  EXPECT_TRUE(contains(a.reason, "int64") && contains(a.reason, "'i'") && contains(a.reason, "f32only")) << a.reason;
  Capability b = builtin_converters().check(node_named(g, "b"), t);
  EXPECT_FALSE(b.supported);
  EXPECT_TRUE(contains(b.reason, "bool") && contains(b.reason, "'b'")) << b.reason;
  EXPECT_TRUE(builtin_converters().check(node_named(g, "c"), t).supported);
}

TEST(ConverterCheck, StaticOnlyTargetRefusesSymbolicSizesAndSizeComputations) {
  ir::Graph g = parse(R"(graph(%x: float32[s0, 4], %y: float32[2, 4]) {
  %r: float32[s0, 4] = aten.relu.default(self=%x)
  %n: symint = aten.sym_size.int(self=%y, dim=0)
  %ry: float32[2, 4] = aten.relu.default(self=%y)
  return (%r, %n, %ry)
}
)");
  const engine::TargetInfo static_only = float32_target(false);
  Capability r = builtin_converters().check(node_named(g, "r"), static_only);
  EXPECT_FALSE(r.supported);
  EXPECT_TRUE(contains(r.reason, "s0") && contains(r.reason, "'x'")) << r.reason;
  Capability n = builtin_converters().check(node_named(g, "n"), static_only);
  EXPECT_FALSE(n.supported);
  EXPECT_TRUE(contains(n.reason, "size at run time") && contains(n.reason, "f32only")) << n.reason;
  EXPECT_TRUE(builtin_converters().check(node_named(g, "ry"), static_only).supported);

  // The same nodes pass when the target takes symbolic sizes.
  const engine::TargetInfo symbolic = float32_target(true);
  for (const auto& node : g.nodes())
    EXPECT_TRUE(builtin_converters().check(*node, symbolic).supported) << node->describe();
}

TEST(ConverterCheck, OpTheBackendLacksNamesTheBackend) {
  ir::Graph g = parse(R"(graph(%x: float32[4]) {
  %r: float32[4] = aten.relu.default(self=%x)
  %e: float32[4] = aten.exp.default(self=%r)
  return (%e)
}
)");
  engine::TargetInfo t = float32_target(true);
  t.backend = "partial";
  t.implements = [](OpKind op) { return op != OpKind::kExp; };
  EXPECT_TRUE(builtin_converters().check(node_named(g, "r"), t).supported);
  Capability e = builtin_converters().check(node_named(g, "e"), t);
  EXPECT_FALSE(e.supported);
  EXPECT_TRUE(contains(e.reason, "'partial'") && contains(e.reason, "aten.exp.default")) << e.reason;
}

TEST(ConverterCheck, NullBackendRefusesEverything) {
  auto null_backend = engine::make_null_backend();
  ir::Graph g = parse(kOrdinary);
  for (const auto& n : g.nodes()) {
    Capability c = builtin_converters().check(*n, null_backend->target());
    EXPECT_FALSE(c.supported) << n->describe();
    EXPECT_TRUE(contains(c.reason, "'null'")) << c.reason;
  }
}

// ---- convert_segment

std::vector<cpu::RtValue> tensors_to_values(const std::vector<Tensor>& ts) { return {ts.begin(), ts.end()}; }

void expect_same_bits(const cpu::RtValue& got, const cpu::RtValue& want, const std::string& what) {
  ASSERT_TRUE(std::holds_alternative<Tensor>(got)) << what;
  ASSERT_TRUE(std::holds_alternative<Tensor>(want)) << what;
  const Tensor a = std::get<Tensor>(got).contiguous(), b = std::get<Tensor>(want).contiguous();
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << what;
}

// A parameter w (fqn "layer.weight"), user inputs x and z; max.dim and
// var_mean each give two outputs.
constexpr const char* kSegmentModule = R"(graph(%p_w: float32[4, 3], %x: float32[2, 3], %z: float32[2, 4]) {
  %t: float32[3, 4] = aten.t.default(self=%p_w)
  %mm: float32[2, 4] = aten.mm.default(self=%x, mat2=%t)
  %d: float32[2, 4] = aten.dropout.default(input=%mm, p=0.5, train=false)
  %a: float32[2, 4] = aten.add.Tensor(self=%d, other=%z)
  %mx: float32[2], %ix: int64[2] = aten.max.dim(self=%a, dim=1)
  %v: float32[2], %m: float32[2] = aten.var_mean.correction(self=%a, dim=[1], correction=1)
  %y: float32[2] = aten.add.Tensor(self=%mx, other=%v)
  return (%y, %mx, %ix, %m)
}
)";

ir::Module segment_module() {
  ir::Module m;
  m.graph = parse(kSegmentModule);
  m.input_specs = {{InputSpec::Kind::kParameter, "layer.weight", true},
                   {InputSpec::Kind::kUserInput, "", true},
                   {InputSpec::Kind::kUserInput, "", true}};
  m.output_specs.resize(m.graph.outputs().size());
  return m;
}

partition::Segment whole_graph_segment(const ir::Module& m, std::vector<std::string_view> inputs,
                                       std::vector<std::string_view> constants, std::vector<std::string_view> outputs) {
  partition::Segment s;
  s.kind = partition::SegmentKind::kEngine;
  for (const auto& n : m.graph.nodes()) s.nodes.push_back(n.get());
  for (auto name : inputs) s.inputs.push_back(value_named(m.graph, name));
  for (auto name : constants) s.constants.push_back(value_named(m.graph, name));
  for (auto name : outputs) s.outputs.push_back(value_named(m.graph, name));
  return s;
}

TEST(ConvertSegment, BindingOrderConstantsAndMultiOutputNodes) {
  ir::Module m = segment_module();
  // Inputs deliberately not in graph order; outputs mix both results of
  // max.dim (in reverse) with var_mean's mean.
  partition::Segment seg = whole_graph_segment(m, {"z", "x"}, {"p_w"}, {"ix", "mx", "m", "y"});
  auto net = convert_segment(m, seg, builtin_converters(), cpu_target());
  ASSERT_TRUE(net.has_value()) << net.status().message();
  ASSERT_TRUE(net->verify().is_ok());

  ASSERT_EQ(net->num_inputs, 2u);
  ASSERT_EQ(net->graph.inputs().size(), 3u);
  EXPECT_EQ(net->graph.inputs()[0]->type.to_string(), value_named(m.graph, "z")->type.to_string());
  EXPECT_EQ(net->graph.inputs()[1]->type.to_string(), value_named(m.graph, "x")->type.to_string());
  EXPECT_EQ(net->graph.inputs()[2]->type.to_string(), value_named(m.graph, "p_w")->type.to_string());
  EXPECT_EQ(net->constant_names, std::vector<std::string>{"layer.weight"});

  // Dropout in inference became no layer; every other node one layer.
  std::vector<OpKind> ops;
  for (const auto& n : net->graph.nodes()) ops.push_back(n->op);
  EXPECT_EQ(ops, (std::vector<OpKind>{OpKind::kT, OpKind::kMm, OpKind::kAddTensor, OpKind::kMaxDim,
                                      OpKind::kVarMeanCorrection, OpKind::kAddTensor}));

  // Both outputs of the max.dim layer, in the segment's order.
  ASSERT_EQ(net->graph.outputs().size(), 4u);
  const ir::Node* max_layer = net->graph.nodes()[3].get();
  EXPECT_EQ(net->graph.outputs()[0], max_layer->outputs[1]);
  EXPECT_EQ(net->graph.outputs()[1], max_layer->outputs[0]);
  EXPECT_EQ(net->graph.outputs()[2], net->graph.nodes()[4]->outputs[1]);
  EXPECT_EQ(net->graph.outputs()[0]->type.dtype, DType::Int64);

  // The network computes what the module computes.
  Tensor w = cpu::testing::random_tensor(DType::Float32, {4, 3}, 7, 1);
  Tensor x = cpu::testing::random_tensor(DType::Float32, {2, 3}, 7, 2);
  Tensor z = cpu::testing::random_tensor(DType::Float32, {2, 4}, 7, 3);
  auto want = runtime::interpret(m.graph, tensors_to_values({w, x, z}), cpu::cpu_kernels());
  ASSERT_TRUE(want.has_value()) << want.status().message();
  auto got = runtime::interpret(net->graph, tensors_to_values({z, x, w}), cpu::cpu_kernels());
  ASSERT_TRUE(got.has_value()) << got.status().message();
  ASSERT_EQ(got->size(), 4u);
  // Module outputs: (y, mx, ix, m); segment outputs: (ix, mx, m, y).
  expect_same_bits((*got)[0], (*want)[2], "ix");
  expect_same_bits((*got)[1], (*want)[1], "mx");
  expect_same_bits((*got)[2], (*want)[3], "m");
  expect_same_bits((*got)[3], (*want)[0], "y");
}

TEST(ConvertSegment, SegmentInputsWireByPositionNotByName) {
  // Segment {b, c} of a graph whose first node a runs elsewhere.
  ir::Module m;
  m.graph = parse(R"(graph(%x: float32[4], %w: float32[4]) {
  %a: float32[4] = aten.relu.default(self=%x)
  %b: float32[4] = aten.neg.default(self=%w)
  %c: float32[4] = aten.sub.Tensor(self=%a, other=%b)
  %e: float32[4] = aten.mul.Tensor(self=%c, other=%a)
  return (%e)
}
)");
  m.input_specs.resize(2);
  m.output_specs.resize(1);
  Tensor x = cpu::testing::random_tensor(DType::Float32, {4}, 3, 1);
  Tensor w = cpu::testing::random_tensor(DType::Float32, {4}, 3, 2);
  auto want = runtime::interpret(m.graph, tensors_to_values({x, w}), cpu::cpu_kernels());
  ASSERT_TRUE(want.has_value()) << want.status().message();
  // The value of a, computed where it would run: outside the segment.
  ir::Graph first = parse("graph(%x: float32[4]) {\n  %a: float32[4] = aten.relu.default(self=%x)\n  return (%a)\n}\n");
  auto a = runtime::interpret(first, tensors_to_values({x}), cpu::cpu_kernels());
  ASSERT_TRUE(a.has_value()) << a.status().message();

  partition::Segment seg;
  seg.kind = partition::SegmentKind::kEngine;
  seg.nodes = {&node_named(m.graph, "b"), &node_named(m.graph, "c"), &node_named(m.graph, "e")};
  seg.inputs = {value_named(m.graph, "w"), value_named(m.graph, "a")};
  seg.outputs = {value_named(m.graph, "e")};
  // The segment's inputs now share names with values its own layers define:
  // w is called "c" and a is called "b".
  m.graph.value(value_named(m.graph, "w")->id)->name = "c";
  m.graph.value(value_named(m.graph, "a")->id)->name = "b";

  auto net = convert_segment(m, seg, builtin_converters(), cpu_target());
  ASSERT_TRUE(net.has_value()) << net.status().message();
  ASSERT_EQ(net->num_inputs, 2u);
  // The network itself now holds two values named "c" and two named "b".
  EXPECT_EQ(net->graph.inputs()[0]->name, "c");
  EXPECT_EQ(net->graph.inputs()[1]->name, "b");
  EXPECT_EQ(net->graph.nodes()[0]->outputs[0]->name, "b");
  EXPECT_EQ(net->graph.nodes()[1]->outputs[0]->name, "c");
  auto got = runtime::interpret(net->graph, {w, std::get<Tensor>((*a)[0])}, cpu::cpu_kernels());
  ASSERT_TRUE(got.has_value()) << got.status().message();
  expect_same_bits((*got)[0], (*want)[0], "e");

  // The same through a CPU engine, whose plan stores the layers as text.
  auto backend = cpu::make_cpu_backend();
  auto plan = backend->build(std::move(*net), {});
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  auto handle = backend->load(
      *plan, [](const std::string& n) -> Expected<Tensor> { return not_found(n); }, "seg");
  ASSERT_TRUE(handle.has_value()) << handle.status().message();
  engine::Engine engine(backend.get(), *handle);
  std::vector<Tensor> in = {w, std::get<Tensor>((*a)[0])}, out;
  ASSERT_TRUE(engine.execute(in, out).is_ok());
  ASSERT_EQ(out.size(), 1u);
  expect_same_bits(out[0], (*want)[0], "e through the engine");
}

TEST(ConvertSegment, DropoutOfAnInputIsTheInputItself) {
  ir::Module m;
  m.graph = parse(R"(graph(%x: float32[4]) {
  %d: float32[4] = aten.dropout.default(input=%x, p=0.1, train=false)
  return (%d)
}
)");
  m.input_specs.resize(1);
  m.output_specs.resize(1);
  partition::Segment seg = whole_graph_segment(m, {"x"}, {}, {"d"});
  auto net = convert_segment(m, seg, builtin_converters(), cpu_target());
  ASSERT_TRUE(net.has_value()) << net.status().message();
  EXPECT_TRUE(net->graph.nodes().empty());
  ASSERT_EQ(net->graph.outputs().size(), 1u);
  EXPECT_EQ(net->graph.outputs()[0], net->graph.inputs()[0]);
}

TEST(ConvertSegment, RefusesWhatCannotBeAnEngine) {
  ir::Module m = segment_module();
  partition::Segment fallback = whole_graph_segment(m, {"x", "z"}, {"p_w"}, {"y"});
  fallback.kind = partition::SegmentKind::kFallback;
  EXPECT_FALSE(convert_segment(m, fallback, builtin_converters(), cpu_target()).has_value());

  // A node the target refuses: the error names the node and the reason.
  partition::Segment seg = whole_graph_segment(m, {"x", "z"}, {"p_w"}, {"y"});
  engine::TargetInfo t = float32_target(true);
  auto refused = convert_segment(m, seg, builtin_converters(), t);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.status().code(), ErrorCode::kUnsupported);
  EXPECT_TRUE(contains(refused.status().message(), "'ix'") && contains(refused.status().message(), "int64"))
      << refused.status().message();

  // An operand that is neither a segment input nor computed inside.
  partition::Segment missing = whole_graph_segment(m, {"x"}, {"p_w"}, {"y"});
  auto unmapped = convert_segment(m, missing, builtin_converters(), cpu_target());
  ASSERT_FALSE(unmapped.has_value());
  EXPECT_TRUE(contains(unmapped.status().message(), "'z'")) << unmapped.status().message();

  // A constant that is not a graph input.
  partition::Segment bad_constant = whole_graph_segment(m, {"x", "z"}, {"t"}, {"y"});
  EXPECT_FALSE(convert_segment(m, bad_constant, builtin_converters(), cpu_target()).has_value());

  // An output the segment does not define.
  partition::Segment bad_output = whole_graph_segment(m, {"x", "z"}, {"p_w"}, {"y"});
  bad_output.nodes.pop_back();
  auto no_output = convert_segment(m, bad_output, builtin_converters(), cpu_target());
  ASSERT_FALSE(no_output.has_value());
  EXPECT_TRUE(contains(no_output.status().message(), "'y'")) << no_output.status().message();
}

}  // namespace
}  // namespace kiln::convert
