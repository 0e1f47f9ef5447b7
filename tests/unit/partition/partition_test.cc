#include "partition/partition.h"

#include <gtest/gtest.h>

#include "unit/partition/partition_test_util.h"

namespace kiln::partition {
namespace {

using ir::InputSpec;
using ir::OpKind;
using testing::all_supported;
using testing::kinds_of;
using testing::node_names;
using testing::parse_module;
using testing::refuse_nodes;
using testing::refuse_op;
using testing::value_named;
using testing::value_names;
using Names = std::vector<std::string>;
using Values = std::vector<const ir::Value*>;

constexpr SegmentKind kEngine = SegmentKind::kEngine;
constexpr SegmentKind kFallback = SegmentKind::kFallback;
constexpr const char* kDataDependent = "output shape depends on tensor data";

PartitionOptions min_block(int n) {
  PartitionOptions o;
  o.min_block_size = n;
  return o;
}

// engine {a, b} -> fallback {nz} -> engine {c, d}; the second engine reads
// the fallback's output, the graph input w and b from the first engine.
constexpr const char* kSandwich = R"(graph(%x: float32[8], %w: float32[8]) {
  %a: float32[8] = aten.relu.default(self=%x)
  %b: float32[8] = aten.neg.default(self=%a)
  %nz: int64[8, 1] = aten.nonzero.default(self=%b)
  %c: float32[8] = aten.mul.Tensor(self=%nz, other=%w)
  %d: float32[8] = aten.add.Tensor(self=%c, other=%b)
  return (%d)
}
)";

TEST(Partition, WiringIsByValueNotByName) {
  ir::Module m = parse_module(kSandwich);
  const ir::Value* w = value_named(m, "w");
  const ir::Value* b = value_named(m, "b");
  const ir::Value* nz = value_named(m, "nz");
  const ir::Value* d = value_named(m, "d");
  auto before = partition_by_capability(m, refuse_op(OpKind::kNonzero, kDataDependent), min_block(1));
  ASSERT_TRUE(before.has_value()) << before.status().message();

  // The graph input w now shares its name with the fallback node and its
  // output; b shares its name with d, a node of the segment that reads it.
  m.graph.inputs()[1]->name = "nz";
  m.graph.value(b->id)->name = "d";
  auto p = partition_by_capability(m, refuse_op(OpKind::kNonzero, kDataDependent), min_block(1));
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_EQ(kinds_of(*p), (std::vector{kEngine, kFallback, kEngine}));
  EXPECT_EQ(p->segments[0].outputs, (Values{b}));
  EXPECT_EQ(p->segments[1].inputs, (Values{b}));
  EXPECT_EQ(p->segments[1].outputs, (Values{nz}));
  // Three inputs, two of them named "nz" and one named like the segment's own
  // node d: each is the value itself.
  EXPECT_EQ(p->segments[2].inputs, (Values{nz, w, b}));
  EXPECT_EQ(p->segments[2].outputs, (Values{d}));

  // Names play no part at all: naming every value and node alike changes nothing.
  for (size_t i = 0; i < m.graph.num_values(); ++i) m.graph.value(i)->name = "t";
  for (auto& n : m.graph.nodes()) n->name = "t";
  auto same = partition_by_capability(m, refuse_op(OpKind::kNonzero, kDataDependent), min_block(1));
  ASSERT_TRUE(same.has_value()) << same.status().message();
  ASSERT_EQ(same->segments.size(), before->segments.size());
  for (size_t s = 0; s < same->segments.size(); ++s) {
    EXPECT_EQ(same->segments[s].nodes, before->segments[s].nodes);
    EXPECT_EQ(same->segments[s].inputs, before->segments[s].inputs);
    EXPECT_EQ(same->segments[s].outputs, before->segments[s].outputs);
  }
}

TEST(Partition, EveryOutputOfAMultiOutputSegmentIsKept) {
  // The first engine defines ln, mean and rstd (one node) and r; each is read
  // by a different consumer: the graph outputs, the second engine, the second
  // fallback and the first fallback.
  ir::Module m = parse_module(R"(graph(%x: float32[2, 8], %w: float32[8], %bias: float32[8]) {
  %ln: float32[2, 8], %mean: float32[2, 1], %rstd: float32[2, 1] = aten.native_layer_norm.default(input=%x, normalized_shape=[8], weight=%w, bias=%bias, eps=1e-05)
  %q: float32[2, 1] = aten.sigmoid.default(self=%rstd)
  %r: float32[2, 8] = aten.mul.Tensor(self=%ln, other=%q)
  %nz: int64[16, 2] = aten.nonzero.default(self=%r)
  %y: float32[2, 1] = aten.add.Tensor(self=%mean, other=%nz)
  %cs: float32[2, 1] = aten.add.Tensor(self=%y, other=%rstd)
  %z: float32[2, 1] = aten.add.Tensor(self=%y, other=%cs)
  return (%ln, %z)
}
)");
  auto p = partition_by_capability(m, refuse_nodes({{"nz", kDataDependent}, {"cs", "no kernel"}}), min_block(1));
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_EQ(kinds_of(*p), (std::vector{kEngine, kFallback, kEngine, kFallback, kEngine}));
  const auto& s = p->segments;
  EXPECT_EQ(node_names(s[0]), (Names{"ln", "q", "r"}));
  EXPECT_EQ(value_names(s[0].outputs), (Names{"ln", "mean", "rstd", "r"}));  // definition order; q stays inside
  EXPECT_EQ(value_names(s[1].inputs), (Names{"r"}));
  EXPECT_EQ(value_names(s[2].inputs), (Names{"mean", "nz"}));
  EXPECT_EQ(value_names(s[2].outputs), (Names{"y"}));  // read by two later segments, listed once
  EXPECT_EQ(value_names(s[3].inputs), (Names{"y", "rstd"}));
  EXPECT_EQ(value_names(s[4].inputs), (Names{"y", "cs"}));
  EXPECT_EQ(value_names(s[4].outputs), (Names{"z"}));
}

TEST(Partition, OnlyConsumedOutputsOfAMultiOutputNodeAreExported) {
  // max_pool2d_with_indices: only the indices leave the engine.
  ir::Module m = parse_module(R"(graph(%x: float32[1, 1, 4, 4]) {
  %r: float32[1, 1, 4, 4] = aten.relu.default(self=%x)
  %mp: float32[1, 1, 2, 2], %idx: int64[1, 1, 2, 2] = aten.max_pool2d_with_indices.default(self=%r, kernel_size=[2, 2])
  %s: float32[1, 1, 2, 2] = aten.sigmoid.default(self=%mp)
  %nz: int64[4, 4] = aten.nonzero.default(self=%idx)
  return (%nz, %x)
}
)");
  auto p = partition_by_capability(m, refuse_op(OpKind::kNonzero, kDataDependent), min_block(1));
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_EQ(kinds_of(*p), (std::vector{kEngine, kFallback}));
  EXPECT_EQ(value_names(p->segments[0].outputs), (Names{"idx"}));
  // %x is returned directly: no segment needs to produce it.
  EXPECT_EQ(value_names(p->segments[1].outputs), (Names{"nz"}));
}

// Two engine runs of five compute nodes around a data-dependent op; views
// ride along without counting.
constexpr const char* kFiveFallbackFive = R"(graph(%x: float32[8]) {
  %a1: float32[8] = aten.relu.default(self=%x)
  %v1: float32[2, 4] = aten.view.default(self=%a1, size=[2, 4])
  %a2: float32[2, 4] = aten.neg.default(self=%v1)
  %a3: float32[2, 4] = aten.exp.default(self=%a2)
  %a4: float32[2, 4] = aten.sin.default(self=%a3)
  %a5: float32[2, 4] = aten.cos.default(self=%a4)
  %nz: int64[8, 2] = aten.nonzero.default(self=%a5)
  %b1: float32[8, 2] = aten.relu.default(self=%nz)
  %b2: float32[8, 2] = aten.neg.default(self=%b1)
  %b3: float32[8, 2] = aten.exp.default(self=%b2)
  %b4: float32[8, 2] = aten.sin.default(self=%b3)
  %v2: float32[16] = aten.view.default(self=%b4, size=[16])
  %b5: float32[16] = aten.cos.default(self=%v2)
  return (%b5)
}
)";

TEST(Partition, FallbackOpBetweenTwoEngines) {
  ir::Module m = parse_module(kFiveFallbackFive);
  auto p = partition_by_capability(m, refuse_op(OpKind::kNonzero, kDataDependent), min_block(5));
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_EQ(kinds_of(*p), (std::vector{kEngine, kFallback, kEngine}));
  EXPECT_EQ(node_names(p->segments[0]), (Names{"a1", "v1", "a2", "a3", "a4", "a5"}));
  EXPECT_EQ(node_names(p->segments[1]), (Names{"nz"}));
  EXPECT_EQ(p->segments[1].reasons, (Names{kDataDependent}));
  EXPECT_EQ(node_names(p->segments[2]), (Names{"b1", "b2", "b3", "b4", "v2", "b5"}));
  EXPECT_TRUE(p->segments[0].reasons.empty());
  EXPECT_EQ(value_names(p->segments[0].outputs), (Names{"a5"}));
  EXPECT_EQ(value_names(p->segments[2].inputs), (Names{"nz"}));

  // One more than either run holds: everything falls back, as one segment.
  auto q = partition_by_capability(m, refuse_op(OpKind::kNonzero, kDataDependent), min_block(6));
  ASSERT_TRUE(q.has_value()) << q.status().message();
  ASSERT_EQ(kinds_of(*q), (std::vector{kFallback}));
  EXPECT_EQ(q->segments[0].nodes.size(), m.graph.nodes().size());
  EXPECT_EQ(q->segments[0].reasons[0], "engine segment of 5 compute nodes is below min_block_size 6");
  EXPECT_EQ(q->segments[0].reasons[6], kDataDependent);
  EXPECT_EQ(q->segments[0].reasons[12], "engine segment of 5 compute nodes is below min_block_size 6");
  EXPECT_EQ(value_names(q->segments[0].inputs), (Names{"x"}));
  EXPECT_EQ(value_names(q->segments[0].outputs), (Names{"b5"}));
}

TEST(Partition, ShortEngineRunsAreDemotedAndMergedWithNeighbours) {
  ir::Module m = parse_module(R"(graph(%x: float32[8]) {
  %f1: float32[8] = aten.cumsum.default(self=%x, dim=0)
  %e1: float32[8] = aten.relu.default(self=%f1)
  %e2: float32[8] = aten.neg.default(self=%e1)
  %f2: float32[8] = aten.cumsum.default(self=%e2, dim=0)
  %g1: float32[8] = aten.relu.default(self=%f2)
  %g2: float32[8] = aten.neg.default(self=%g1)
  %g3: float32[8] = aten.exp.default(self=%g2)
  return (%g3)
}
)");
  auto p = partition_by_capability(m, refuse_op(OpKind::kCumsum, "no kernel for cumsum"), min_block(3));
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_EQ(kinds_of(*p), (std::vector{kFallback, kEngine}));
  EXPECT_EQ(node_names(p->segments[0]), (Names{"f1", "e1", "e2", "f2"}));
  const std::string demoted = "engine segment of 2 compute nodes is below min_block_size 3";
  EXPECT_EQ(p->segments[0].reasons, (Names{"no kernel for cumsum", demoted, demoted, "no kernel for cumsum"}));
  EXPECT_EQ(value_names(p->segments[0].outputs), (Names{"f2"}));
  EXPECT_EQ(node_names(p->segments[1]), (Names{"g1", "g2", "g3"}));

  // min_block_size 0 keeps every engine run.
  auto all = partition_by_capability(m, refuse_op(OpKind::kCumsum, "no kernel for cumsum"), min_block(0));
  ASSERT_TRUE(all.has_value()) << all.status().message();
  EXPECT_EQ(kinds_of(*all), (std::vector{kFallback, kEngine, kFallback, kEngine}));
}

// On a device backend (fallback_on_device) a short engine run stays an
// engine when it reads from or feeds an engine node or a fallback node the
// device runs (nonzero, boolean-mask indexing): in fallback its values would
// cross to the host and back. Between host fallback nodes it is still
// demoted.
TEST(Partition, ShortRunsNextToDeviceWorkStayEnginesOnADeviceBackend) {
  ir::Module m = parse_module(R"(graph(%x: float32[8]) {
  %f1: float32[8] = aten.cumsum.default(self=%x, dim=0)
  %e1: float32[8] = aten.relu.default(self=%f1)
  %f2: float32[8] = aten.cumsum.default(self=%e1, dim=0)
  %g1: bool[8] = aten.gt.Scalar(self=%f2, other=0.5)
  %nz: int64[u0, 1] = aten.nonzero.default(self=%g1)
  %n: symint = aten.sym_size.int(self=%nz, dim=0)
  %h1: float32[8] = aten.mul.Tensor(self=%f2, other=%f2)
  %h2: float32[8] = aten.exp.default(self=%h1)
  %h3: float32[8] = aten.neg.default(self=%h2)
  %h4: float32[8] = aten.abs.default(self=%h3)
  %h5: float32[8] = aten.sin.default(self=%h4)
  %c: float32[8] = aten.cumsum.default(self=%h5, dim=0)
  %k1: float32[8] = aten.cos.default(self=%c)
  return (%nz, %n, %k1)
}
)");
  auto refuse = refuse_nodes({{"f1", "no kernel for cumsum"},
                              {"f2", "no kernel for cumsum"},
                              {"nz", kDataDependent},
                              {"c", "no kernel for cumsum"}});
  PartitionOptions device = min_block(5);
  device.fallback_on_device = true;
  auto p = partition_by_capability(m, refuse, device);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  std::vector<std::string> engine_nodes, fallback_nodes;
  for (const Segment& s : p->segments)
    for (const ir::Node* n : s.nodes) (s.kind == kEngine ? engine_nodes : fallback_nodes).push_back(n->name);
  // e1 sits between two host cumsums: demoted. g1 feeds nonzero, which the
  // device runs: kept. h1..h5 is five nodes; k1 reads only the host cumsum
  // and is the graph's output: demoted.
  EXPECT_NE(std::find(fallback_nodes.begin(), fallback_nodes.end(), "e1"), fallback_nodes.end());
  EXPECT_NE(std::find(engine_nodes.begin(), engine_nodes.end(), "g1"), engine_nodes.end());
  EXPECT_NE(std::find(engine_nodes.begin(), engine_nodes.end(), "h5"), engine_nodes.end());
  EXPECT_NE(std::find(fallback_nodes.begin(), fallback_nodes.end(), "k1"), fallback_nodes.end());

  // Without a device backend g1 is demoted as before.
  auto host = partition_by_capability(m, refuse, min_block(5));
  ASSERT_TRUE(host.has_value()) << host.status().message();
  for (const Segment& s : host->segments)
    for (const ir::Node* n : s.nodes)
      if (n->name == "g1") EXPECT_EQ(s.kind, kFallback);
}

TEST(Partition, RunsOfViewsAloneCountAsEmpty) {
  ir::Module m = parse_module(R"(graph(%x: float32[8]) {
  %f1: float32[8] = aten.cumsum.default(self=%x, dim=0)
  %v: float32[2, 4] = aten.view.default(self=%f1, size=[2, 4])
  %n: symint = aten.sym_size.int(self=%v, dim=0)
  %f2: float32[2, 4] = aten.cumsum.default(self=%v, dim=0)
  return (%f2, %n)
}
)");
  auto p = partition_by_capability(m, refuse_op(OpKind::kCumsum, "no kernel for cumsum"), min_block(1));
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_EQ(kinds_of(*p), (std::vector{kFallback}));
  EXPECT_EQ(p->segments[0].reasons[1], "engine segment of 0 compute nodes is below min_block_size 1");
  EXPECT_EQ(value_names(p->segments[0].outputs), (Names{"n", "f2"}));
}

constexpr const char* kAddsAndRelus = R"(graph(%x: float32[8]) {
  %r1: float32[8] = aten.relu.default(self=%x)
  %a1: float32[8] = aten.add.Tensor(self=%r1, other=%x)
  %a2: float32[8] = aten.add.Scalar(self=%a1, other=1)
  %r2: float32[8] = aten.relu.default(self=%a2)
  %n1: float32[8] = aten.neg.default(self=%r2)
  return (%n1)
}
)";

TEST(Partition, FallbackOpsAcceptEveryNameForm) {
  ir::Module m = parse_module(kAddsAndRelus);
  for (const char* entry : {"aten.relu.default", "aten.relu", "relu", "torch.ops.aten.relu.default"}) {
    SCOPED_TRACE(entry);
    PartitionOptions o = min_block(1);
    o.fallback_ops = {entry};
    auto p = partition_by_capability(m, all_supported(), o);
    ASSERT_TRUE(p.has_value()) << p.status().message();
    ASSERT_EQ(kinds_of(*p), (std::vector{kFallback, kEngine, kFallback, kEngine}));
    EXPECT_EQ(node_names(p->segments[0]), (Names{"r1"}));
    EXPECT_EQ(node_names(p->segments[2]), (Names{"r2"}));
    const std::string why = std::string("forced to fallback by fallback_ops (") + entry + ")";
    EXPECT_EQ(p->segments[0].reasons, (Names{why}));
    EXPECT_EQ(p->segments[2].reasons, (Names{why}));
  }
  // A full target names one overload; the shorter forms name all of them.
  struct Case {
    const char* entry;
    Names forced;
  };
  for (const Case& c : {Case{"aten.add.Tensor", {"a1"}}, Case{"aten.add", {"a1", "a2"}}, Case{"add", {"a1", "a2"}},
                        Case{"aten.neg.default", {"n1"}}}) {
    SCOPED_TRACE(c.entry);
    PartitionOptions o = min_block(0);
    o.fallback_ops = {c.entry};
    auto p = partition_by_capability(m, all_supported(), o);
    ASSERT_TRUE(p.has_value()) << p.status().message();
    Names forced;
    for (const Segment& s : p->segments)
      if (s.kind == kFallback)
        for (const ir::Node* n : s.nodes) forced.push_back(n->name);
    EXPECT_EQ(forced, c.forced);
  }
}

TEST(Partition, FallbackOpsThatNameNoOpAreRejected) {
  ir::Module m = parse_module(kAddsAndRelus);
  for (const char* entry : {"relux", "aten.relu.nosuch", "prims.relu", "aten.", ""}) {
    SCOPED_TRACE(entry);
    PartitionOptions o;
    o.fallback_ops = {entry};
    auto p = partition_by_capability(m, all_supported(), o);
    ASSERT_FALSE(p.has_value());
    EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("fallback_ops entry '" + std::string(entry) + "'"), std::string::npos)
        << p.status().message();
  }
  PartitionOptions negative;
  negative.min_block_size = -1;
  auto p = partition_by_capability(m, all_supported(), negative);
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument);
}

TEST(Partition, RequireFullCompilationListsEveryRefusedNode) {
  ir::Module m = parse_module(kFiveFallbackFive);
  PartitionOptions o;
  o.require_full_compilation = true;
  o.fallback_ops = {"aten.sin"};
  auto p = partition_by_capability(m, refuse_op(OpKind::kNonzero, kDataDependent), o);
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.status().code(), ErrorCode::kUnsupported);
  const std::string& msg = p.status().message();
  EXPECT_NE(msg.find("3 nodes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("node 'nz' (aten.nonzero.default): output shape depends on tensor data"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("node 'a4' (aten.sin.default): forced to fallback by fallback_ops (aten.sin)"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("node 'b4' (aten.sin.default)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("'a3'"), std::string::npos) << msg;
}

TEST(Partition, RequireFullCompilationKeepsSmallRunsInEngines) {
  ir::Module m = parse_module(R"(graph(%x: float32[8]) {
  %a: float32[8] = aten.relu.default(self=%x)
  %b: float32[8] = aten.neg.default(self=%a)
  return (%b)
}
)");
  PartitionOptions o;  // min_block_size 5 is ignored
  o.require_full_compilation = true;
  auto p = partition_by_capability(m, all_supported(), o);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_EQ(kinds_of(*p), (std::vector{kEngine}));
  EXPECT_EQ(node_names(p->segments[0]), (Names{"a", "b"}));
  // Without it, the same run is too small.
  auto q = partition_by_capability(m, all_supported());
  ASSERT_TRUE(q.has_value());
  ASSERT_EQ(kinds_of(*q), (std::vector{kFallback}));
  EXPECT_EQ(q->segments[0].reasons[0], "engine segment of 2 compute nodes is below min_block_size 5");
}

TEST(Partition, ConstantsNeverBecomeInputs) {
  // p_w is a parameter and c_k a constant, read on both sides of the
  // fallback; b_s is a buffer and x a user input: those two are inputs.
  ir::Module m = parse_module(R"(graph(%p_w: float32[8], %c_k: float32[8], %b_s: float32[8], %x: float32[8]) {
  %a: float32[8] = aten.mul.Tensor(self=%x, other=%p_w)
  %b: float32[8] = aten.add.Tensor(self=%a, other=%b_s)
  %c: float32[8] = aten.add.Tensor(self=%b, other=%c_k)
  %nz: int64[8, 1] = aten.nonzero.default(self=%c)
  %d: float32[8] = aten.mul.Tensor(self=%nz, other=%c_k)
  %e: float32[8] = aten.add.Tensor(self=%d, other=%p_w)
  %f: float32[8] = aten.add.Tensor(self=%e, other=%x)
  return (%f)
}
)",
                              {InputSpec::Kind::kParameter, InputSpec::Kind::kConstant, InputSpec::Kind::kBuffer});
  auto p = partition_by_capability(m, refuse_op(OpKind::kNonzero, kDataDependent), min_block(1));
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_EQ(kinds_of(*p), (std::vector{kEngine, kFallback, kEngine}));
  const auto& s = p->segments;
  EXPECT_EQ(value_names(s[0].inputs), (Names{"x", "b_s"}));
  EXPECT_EQ(value_names(s[0].constants), (Names{"p_w", "c_k"}));
  EXPECT_TRUE(s[1].constants.empty());
  EXPECT_EQ(value_names(s[2].inputs), (Names{"nz", "x"}));
  EXPECT_EQ(value_names(s[2].constants), (Names{"c_k", "p_w"}));

  // With no signature at all, every graph input is a run-time input.
  m.input_specs.clear();
  auto q = partition_by_capability(m, refuse_op(OpKind::kNonzero, kDataDependent), min_block(1));
  ASSERT_TRUE(q.has_value()) << q.status().message();
  EXPECT_EQ(value_names(q->segments[0].inputs), (Names{"x", "p_w", "b_s", "c_k"}));
  EXPECT_TRUE(q->segments[0].constants.empty());

  // A signature that does not match the graph is an error, not a guess.
  m.input_specs.resize(2);
  auto bad = partition_by_capability(m, all_supported());
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
}

TEST(Partition, IndependentNodesAreGroupedByKind) {
  // u reads only the graph input: the engine can take a and b together.
  ir::Module m = parse_module(R"(graph(%x: float32[8]) {
  %a: float32[8] = aten.relu.default(self=%x)
  %u: int64[8, 1] = aten.nonzero.default(self=%x)
  %b: float32[8] = aten.neg.default(self=%a)
  return (%b, %u)
}
)");
  auto p = partition_by_capability(m, refuse_op(OpKind::kNonzero, kDataDependent), min_block(2));
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_EQ(p->segments.size(), 2u);
  for (const Segment& s : p->segments) {
    if (s.kind == kEngine) {
      EXPECT_EQ(node_names(s), (Names{"a", "b"}));
      EXPECT_EQ(value_names(s.outputs), (Names{"b"}));
    } else {
      EXPECT_EQ(node_names(s), (Names{"u"}));
    }
  }
}

TEST(Partition, InterleavedIndependentChainsGiveTwoSegments) {
  ir::Module m = parse_module(R"(graph(%x: float32[8]) {
  %e1: float32[8] = aten.relu.default(self=%x)
  %u1: float32[8] = aten.cumsum.default(self=%x, dim=0)
  %e2: float32[8] = aten.neg.default(self=%e1)
  %u2: float32[8] = aten.cumsum.default(self=%u1, dim=0)
  %e3: float32[8] = aten.exp.default(self=%e2)
  %u3: float32[8] = aten.cumsum.default(self=%u2, dim=0)
  %out: float32[8] = aten.cumsum.default(self=%e3, dim=0)
  return (%out, %u3)
}
)");
  auto p = partition_by_capability(m, refuse_op(OpKind::kCumsum, "no kernel for cumsum"), min_block(3));
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_EQ(kinds_of(*p), (std::vector{kEngine, kFallback}));
  EXPECT_EQ(node_names(p->segments[0]), (Names{"e1", "e2", "e3"}));
  EXPECT_EQ(node_names(p->segments[1]), (Names{"u1", "u2", "u3", "out"}));
  EXPECT_EQ(value_names(p->segments[1].inputs), (Names{"x", "e3"}));
}

TEST(Partition, DependentNodesAreNeverReorderedIntoACycle) {
  // a -> u -> b: no order puts a and b together.
  ir::Module m = parse_module(R"(graph(%x: float32[8]) {
  %a: float32[8] = aten.relu.default(self=%x)
  %u: int64[8, 1] = aten.nonzero.default(self=%a)
  %b: float32[8] = aten.neg.default(self=%u)
  return (%b)
}
)");
  auto p = partition_by_capability(m, refuse_op(OpKind::kNonzero, kDataDependent), min_block(1));
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_EQ(kinds_of(*p), (std::vector{kEngine, kFallback, kEngine}));
  EXPECT_EQ(node_names(p->segments[0]), (Names{"a"}));
  EXPECT_EQ(node_names(p->segments[2]), (Names{"b"}));
}

TEST(Partition, ChecksAndEmptyGraphs) {
  ir::Module empty = parse_module("graph(%x: float32[2]) {\n  return (%x)\n}\n");
  auto e = partition_by_capability(empty, all_supported());
  ASSERT_TRUE(e.has_value()) << e.status().message();
  EXPECT_TRUE(e->segments.empty());

  // A check node has no outputs; it still reads its operand across segments.
  ir::Module m = parse_module(R"(graph(%x: float32[8]) {
  %n: symint = aten.sym_size.int(self=%x, dim=0)
  %a: float32[8] = aten.relu.default(self=%x)
  aten._assert_scalar.default(self=%n, assert_msg="n")
  return (%a)
}
)");
  auto p = partition_by_capability(m, refuse_op(OpKind::kAssertScalar, "checks run on the host"), min_block(1));
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_EQ(kinds_of(*p), (std::vector{kEngine, kFallback}));
  EXPECT_EQ(value_names(p->segments[0].outputs), (Names{"n", "a"}));
  EXPECT_EQ(value_names(p->segments[1].inputs), (Names{"n"}));
  EXPECT_TRUE(p->segments[1].outputs.empty());

  // A capability that refuses without a reason still leaves one.
  auto q = partition_by_capability(m, [](const ir::Node&) { return Capability::no(""); });
  ASSERT_TRUE(q.has_value());
  for (const std::string& r : q->segments[0].reasons) EXPECT_FALSE(r.empty());
}

TEST(Partition, DescribeExplainsEveryFallbackNode) {
  ir::Module m = parse_module(R"(graph(%p_w: float32[8], %x: float32[8]) {
  %f1: float32[8] = aten.cumsum.default(self=%x, dim=0)
  %e1: float32[8] = aten.relu.default(self=%f1)
  %e2: float32[8] = aten.mul.Tensor(self=%e1, other=%p_w)
  %e3: float32[8] = aten.relu.default(self=%e2)
  %nz: int64[8, 1] = aten.nonzero.default(self=%e3)
  %s: float32[8] = aten.sigmoid.default(self=%nz)
  return (%s)
}
)",
                              {InputSpec::Kind::kParameter});
  PartitionOptions o = min_block(2);
  o.fallback_ops = {"sigmoid"};
  auto p = partition_by_capability(m, refuse_nodes({{"f1", "no kernel for cumsum"}, {"nz", kDataDependent}}), o);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_EQ(kinds_of(*p), (std::vector{kFallback, kEngine, kFallback}));
  std::string text = describe_partition(m, *p);
  for (const Segment& s : p->segments) {
    if (s.kind != kFallback) continue;
    for (size_t i = 0; i < s.nodes.size(); ++i) {
      std::string line = s.nodes[i]->name + " (" + std::string(ir::op_target(s.nodes[i]->op)) + "): " + s.reasons[i];
      EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
    }
  }
  EXPECT_NE(text.find("nz (aten.nonzero.default): output shape depends on tensor data"), std::string::npos) << text;
  EXPECT_NE(text.find("s (aten.sigmoid.default): forced to fallback by fallback_ops (sigmoid)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("segment 1: engine, 3 nodes"), std::string::npos) << text;
  EXPECT_NE(text.find("aten.relu.default x2, aten.mul.Tensor x1"), std::string::npos) << text;
  EXPECT_NE(text.find("constants: %p_w"), std::string::npos) << text;
  EXPECT_NE(text.find("inputs: %f1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("outputs: %e3\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace kiln::partition
