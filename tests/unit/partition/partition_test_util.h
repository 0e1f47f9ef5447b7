// Helpers shared by the partitioner tests: modules from IR text, capability
// answers as lambdas, and names of what a segment holds.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ir/printer.h"
#include "partition/partition.h"

namespace kiln::partition::testing {

// A module whose graph is `text`; input i gets kinds[i] (user input when
// kinds is shorter), outputs are user outputs.
inline ir::Module parse_module(std::string_view text, const std::vector<ir::InputSpec::Kind>& kinds = {}) {
  ir::Module m;
  auto g = ir::parse_graph(text);
  EXPECT_TRUE(g.has_value()) << g.status().message();
  if (!g.has_value()) return m;
  m.graph = std::move(*g);
  for (size_t i = 0; i < m.graph.inputs().size(); ++i) {
    ir::InputSpec s;
    s.kind = i < kinds.size() ? kinds[i] : ir::InputSpec::Kind::kUserInput;
    if (s.kind != ir::InputSpec::Kind::kUserInput) s.target = m.graph.inputs()[i]->name;
    m.input_specs.push_back(s);
  }
  m.output_specs.resize(m.graph.outputs().size());
  return m;
}

// The value named `name` (graphs parsed from text have unique names).
inline const ir::Value* value_named(const ir::Module& m, std::string_view name) {
  for (size_t i = 0; i < m.graph.num_values(); ++i)
    if (m.graph.value(i)->name == name) return m.graph.value(i);
  ADD_FAILURE() << "no value named " << name;
  return nullptr;
}

inline CapabilityFn all_supported() {
  return [](const ir::Node&) { return Capability::yes(); };
}

// Refuses the nodes named in `refused` (node name -> reason).
inline CapabilityFn refuse_nodes(std::map<std::string, std::string> refused) {
  return [refused = std::move(refused)](const ir::Node& n) {
    auto it = refused.find(n.name);
    return it == refused.end() ? Capability::yes() : Capability::no(it->second);
  };
}

// Refuses every node of op `op`.
inline CapabilityFn refuse_op(ir::OpKind op, std::string reason) {
  return [op, reason = std::move(reason)](const ir::Node& n) {
    return n.op == op ? Capability::no(reason) : Capability::yes();
  };
}

inline std::vector<std::string> node_names(const Segment& s) {
  std::vector<std::string> out;
  for (const ir::Node* n : s.nodes) out.push_back(n->name);
  return out;
}

inline std::vector<std::string> value_names(const std::vector<const ir::Value*>& values) {
  std::vector<std::string> out;
  for (const ir::Value* v : values) out.push_back(v->name);
  return out;
}

inline std::vector<SegmentKind> kinds_of(const Partition& p) {
  std::vector<SegmentKind> out;
  for (const Segment& s : p.segments) out.push_back(s.kind);
  return out;
}

}  // namespace kiln::partition::testing
