// Random graphs with random capability answers: whatever the partitioner
// chooses, the result must be a well-formed, acyclic, fully wired partition.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "partition/partition.h"

namespace kiln::partition {
namespace {

using ir::InputSpec;
using ir::Node;
using ir::OpKind;
using ir::Value;

struct RandomCase {
  ir::Module m;
  std::map<const Node*, Capability> answers;
  PartitionOptions options;
};

// Builds a random DAG: user inputs, buffers, parameters and constants; unary,
// binary, list, multi-output, view, symbolic and check nodes. Names repeat on
// purpose (only a handful of distinct ones), so anything keyed by name breaks.
RandomCase random_case(uint32_t seed) {
  std::mt19937 rng(seed);
  auto below = [&](uint32_t n) { return static_cast<int>(rng() % n); };
  auto name = [&] { return "n" + std::to_string(below(4)); };
  RandomCase c;
  ir::Graph& g = c.m.graph;
  const ir::TensorType t{DType::Float32, {ir::Dim::of(4)}};
  std::vector<Value*> pool;
  int num_inputs = 1 + below(5);
  for (int i = 0; i < num_inputs; ++i) {
    pool.push_back(g.add_input(name(), ir::ValueKind::kTensor, t));
    InputSpec s;
    s.kind = static_cast<InputSpec::Kind>(below(4));
    c.m.input_specs.push_back(s);
  }
  // Mostly recent values, so that chains form, sometimes any value.
  auto pick = [&]() -> Value* {
    size_t n = pool.size();
    if (below(3) == 0) return pool[rng() % n];
    return pool[n - 1 - rng() % std::min<size_t>(n, 3)];
  };
  double supported_share = 0.3 + 0.1 * below(7);
  std::bernoulli_distribution supported(supported_share);
  int num_nodes = 1 + below(40);
  for (int i = 0; i < num_nodes; ++i) {
    Node* n = nullptr;
    switch (below(8)) {
      case 0: n = g.add_node(OpKind::kRelu, name(), {{"self", pick()}}, {{name(), t}}); break;
      case 1: n = g.add_node(OpKind::kAddTensor, name(), {{"self", pick()}, {"other", pick()}}, {{name(), t}}); break;
      case 2: n = g.add_node(OpKind::kMulTensor, name(), {{"self", pick()}, {"other", pick()}}, {{name(), t}}); break;
      case 3:
        n = g.add_node(OpKind::kCat, name(),
                       {{"tensors", std::vector<Value*>{pick(), pick(), pick()}}, {"dim", int64_t{0}}}, {{name(), t}});
        break;
      case 4:
        n = g.add_node(OpKind::kNativeLayerNorm, name(), {{"input", pick()}, {"weight", pick()}},
                       {{name(), t}, {name(), t}, {name(), t}});
        break;
      case 5:
        n = g.add_node(OpKind::kView, name(), {{"self", pick()}, {"size", std::vector<int64_t>{4}}}, {{name(), t}});
        break;
      case 6:
        n = g.add_node(OpKind::kSymSize, name(), {{"self", pick()}, {"dim", int64_t{0}}}, {{name(), {}}},
                       ir::ValueKind::kSymInt);
        break;
      default: n = g.add_node(OpKind::kAssertScalar, name(), {{"self", pick()}}, {}); break;
    }
    for (Value* v : n->outputs) pool.push_back(v);
    c.answers[n] = supported(rng) ? Capability::yes() : Capability::no("refused " + std::to_string(i));
  }
  int num_outputs = 1 + below(3);
  for (int i = 0; i < num_outputs; ++i) {
    g.outputs().push_back(pick());
    c.m.output_specs.emplace_back();
  }
  c.options.min_block_size = below(4);
  if (below(4) == 0) c.options.fallback_ops = {below(2) ? "relu" : "aten.cat.default"};
  c.options.require_full_compilation = below(8) == 0;
  return c;
}

bool is_weight(const ir::Module& m, const Value* v) {
  for (size_t i = 0; i < m.graph.inputs().size(); ++i)
    if (m.graph.inputs()[i] == v)
      return m.input_specs[i].kind == InputSpec::Kind::kParameter ||
             m.input_specs[i].kind == InputSpec::Kind::kConstant;
  return false;
}

bool forced(const PartitionOptions& o, const Node* n) {
  for (const std::string& e : o.fallback_ops)
    if ((e == "relu" && n->op == OpKind::kRelu) || (e == "aten.cat.default" && n->op == OpKind::kCat)) return true;
  return false;
}

template <typename T>
bool unique(const std::vector<T>& l) {
  return std::set<T>(l.begin(), l.end()).size() == l.size();
}

// Checks one partition of c.m against everything the contract promises.
void check_partition(const RandomCase& c, const Partition& p) {
  const ir::Graph& g = c.m.graph;
  std::unordered_map<const Node*, size_t> segment_of;
  std::unordered_map<const Node*, size_t> position;  // in the concatenated execution order
  for (size_t s = 0; s < p.segments.size(); ++s) {
    for (const Node* n : p.segments[s].nodes) {
      ASSERT_TRUE(segment_of.emplace(n, s).second) << n->describe() << " is in two segments";
      position[n] = position.size();
    }
  }
  ASSERT_EQ(segment_of.size(), g.nodes().size()) << "every node is in exactly one segment";

  // The concatenated order is an execution order.
  for (const auto& n : g.nodes())
    for (const Value* v : n->operands())
      if (v->producer) {
        ASSERT_LT(position.at(v->producer), position.at(n.get())) << n->describe();
      }

  // Values a segment must export: read by a later segment or a graph output.
  std::set<const Value*> needed;
  for (const auto& n : g.nodes())
    for (const Value* v : n->operands())
      if (v->producer && segment_of.at(v->producer) != segment_of.at(n.get())) needed.insert(v);
  for (const Value* v : g.outputs())
    if (v->producer) needed.insert(v);

  std::set<const Value*> exported;
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const Segment& seg = p.segments[s];
    SCOPED_TRACE("segment " + std::to_string(s));
    ASSERT_FALSE(seg.nodes.empty());
    if (s > 0) {
      EXPECT_NE(seg.kind, p.segments[s - 1].kind) << "neighbours of one kind would be one segment";
    }

    // Inputs and constants: exactly the outside values read, in first-use order.
    std::vector<const Value*> want_inputs, want_constants;
    for (const Node* n : seg.nodes) {
      for (const Value* v : n->operands()) {
        if (v->producer && segment_of.at(v->producer) == s) continue;
        auto& l = is_weight(c.m, v) ? want_constants : want_inputs;
        if (std::find(l.begin(), l.end(), v) == l.end()) l.push_back(v);
      }
    }
    EXPECT_EQ(seg.inputs, want_inputs);
    EXPECT_EQ(seg.constants, want_constants);
    EXPECT_TRUE(unique(seg.inputs));
    EXPECT_TRUE(unique(seg.constants));
    for (const Value* v : seg.inputs) {
      EXPECT_FALSE(is_weight(c.m, v)) << "constant '" << v->name << "' is an input";
      if (v->producer) {
        EXPECT_LT(segment_of.at(v->producer), s) << "input '" << v->name << "' is defined later";
        EXPECT_TRUE(exported.count(v)) << "input '" << v->name << "' is not an earlier segment's output";
      }
    }

    // Outputs: exactly the needed values defined here, in definition order.
    std::vector<const Value*> want_outputs;
    for (const Node* n : seg.nodes)
      for (const Value* v : n->outputs)
        if (needed.count(v)) want_outputs.push_back(v);
    EXPECT_EQ(seg.outputs, want_outputs);
    exported.insert(seg.outputs.begin(), seg.outputs.end());

    if (seg.kind == SegmentKind::kFallback) {
      ASSERT_EQ(seg.reasons.size(), seg.nodes.size());
      for (size_t i = 0; i < seg.nodes.size(); ++i) {
        const Node* n = seg.nodes[i];
        EXPECT_FALSE(seg.reasons[i].empty()) << n->describe();
        const Capability& a = c.answers.at(n);
        if (forced(c.options, n)) {
          EXPECT_EQ(seg.reasons[i].rfind("forced to fallback by fallback_ops", 0), 0u);
        } else if (!a.supported) {
          EXPECT_EQ(seg.reasons[i], a.reason);
        } else {
          EXPECT_NE(seg.reasons[i].find("is below min_block_size"), std::string::npos) << seg.reasons[i];
        }
      }
    } else {
      EXPECT_TRUE(seg.reasons.empty());
      int compute = 0;
      for (const Node* n : seg.nodes) {
        EXPECT_TRUE(c.answers.at(n).supported && !forced(c.options, n)) << n->describe() << " is in an engine";
        compute += ir::op_category(n->op) == ir::OpCategory::kCompute ? 1 : 0;
      }
      if (!c.options.require_full_compilation) {
        EXPECT_GE(compute, c.options.min_block_size);
      }
    }
  }
  for (const Value* v : g.outputs())
    if (v->producer) {
      EXPECT_TRUE(exported.count(v)) << "graph output '" << v->name << "' is not exported";
    }
}

TEST(PartitionProperty, RandomGraphsGiveWellFormedPartitions) {
  int errors = 0;
  for (uint32_t seed = 1; seed <= 400; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomCase c = random_case(seed);
    ASSERT_TRUE(c.m.graph.verify().is_ok());
    CapabilityFn capable = [&](const Node& n) { return c.answers.at(&n); };
    auto p = partition_by_capability(c.m, capable, c.options);

    bool any_refused = false;
    for (const auto& n : c.m.graph.nodes())
      any_refused |= !c.answers.at(n.get()).supported || forced(c.options, n.get());
    if (c.options.require_full_compilation && any_refused) {
      ASSERT_FALSE(p.has_value());
      EXPECT_EQ(p.status().code(), ErrorCode::kUnsupported);
      for (const auto& n : c.m.graph.nodes()) {
        if (!c.answers.at(n.get()).supported && !forced(c.options, n.get())) {
          EXPECT_NE(p.status().message().find(c.answers.at(n.get()).reason), std::string::npos);
        }
      }
      ++errors;
      continue;
    }
    ASSERT_TRUE(p.has_value()) << p.status().message();
    check_partition(c, *p);
    if (c.options.require_full_compilation) {
      EXPECT_LE(p->segments.size(), 1u);
    }

    // Deterministic: the same inputs give the same partition.
    auto again = partition_by_capability(c.m, capable, c.options);
    ASSERT_TRUE(again.has_value());
    ASSERT_EQ(again->segments.size(), p->segments.size());
    for (size_t s = 0; s < p->segments.size(); ++s) {
      EXPECT_EQ(again->segments[s].kind, p->segments[s].kind);
      EXPECT_EQ(again->segments[s].nodes, p->segments[s].nodes);
      EXPECT_EQ(again->segments[s].inputs, p->segments[s].inputs);
      EXPECT_EQ(again->segments[s].outputs, p->segments[s].outputs);
      EXPECT_EQ(again->segments[s].reasons, p->segments[s].reasons);
    }

    // With no minimum size, regrouping never does worse than cutting the
    // graph's own order into runs.
    if (c.options.min_block_size == 0 && !c.options.require_full_compilation) {
      size_t runs = 0;
      int last = -1;
      for (const auto& n : c.m.graph.nodes()) {
        int engine = c.answers.at(n.get()).supported && !forced(c.options, n.get()) ? 1 : 0;
        runs += engine != last ? 1 : 0;
        last = engine;
      }
      EXPECT_LE(p->segments.size(), runs);
    }
  }
  EXPECT_GT(errors, 0) << "some cases exercise require_full_compilation errors";
}

}  // namespace
}  // namespace kiln::partition
