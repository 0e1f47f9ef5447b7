#include <string_view>
#include <utility>

#include "partition/partition.h"

namespace kiln::partition {

namespace {

std::string value_name(const ir::Value* v) { return "%" + (v->name.empty() ? "v" + std::to_string(v->id) : v->name); }

std::string value_list(const std::vector<const ir::Value*>& values) {
  if (values.empty()) return "(none)";
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + value_name(values[i]);
  return s;
}

std::string plural(size_t count, const char* word) {
  return std::to_string(count) + " " + word + (count == 1 ? "" : "s");
}

}  // namespace

std::string describe_partition(const ir::Module& m, const Partition& p) {
  size_t engines = 0;
  size_t engine_nodes = 0;
  size_t fallback_nodes = 0;
  for (const Segment& seg : p.segments) {
    bool engine = seg.kind == SegmentKind::kEngine;
    engines += engine ? 1 : 0;
    (engine ? engine_nodes : fallback_nodes) += seg.nodes.size();
  }
  std::string s = "partition of " + plural(m.graph.nodes().size(), "node") + ": " +
                  plural(p.segments.size(), "segment") + " (" + std::to_string(engines) + " engine, " +
                  std::to_string(p.segments.size() - engines) + " fallback); " + std::to_string(engine_nodes) +
                  " in engines, " + std::to_string(fallback_nodes) + " in fallback\n";
  for (size_t i = 0; i < p.segments.size(); ++i) {
    const Segment& seg = p.segments[i];
    bool engine = seg.kind == SegmentKind::kEngine;
    size_t compute = 0;
    // Ops in order of first appearance, with counts.
    std::vector<std::pair<std::string_view, size_t>> ops;
    for (const ir::Node* n : seg.nodes) {
      compute += ir::op_category(n->op) == ir::OpCategory::kCompute ? 1 : 0;
      std::string_view target = ir::op_target(n->op);
      auto it = ops.begin();
      while (it != ops.end() && it->first != target) ++it;
      if (it == ops.end())
        ops.emplace_back(target, 1);
      else
        ++it->second;
    }
    s += "segment " + std::to_string(i) + ": " + (engine ? "engine" : "fallback") + ", " +
         plural(seg.nodes.size(), "node") + " (" + std::to_string(compute) + " compute)\n";
    s += "  ops:";
    for (size_t k = 0; k < ops.size(); ++k)
      s += (k ? ", " : " ") + std::string(ops[k].first) + " x" + std::to_string(ops[k].second);
    s += "\n  inputs: " + value_list(seg.inputs) + "\n";
    if (!seg.constants.empty()) s += "  constants: " + value_list(seg.constants) + "\n";
    s += "  outputs: " + value_list(seg.outputs) + "\n";
    if (engine) continue;
    s += "  fallback nodes:\n";
    for (size_t k = 0; k < seg.nodes.size(); ++k) {
      const ir::Node* n = seg.nodes[k];
      s += "    " + n->name + " (" + std::string(ir::op_target(n->op)) +
           "): " + (k < seg.reasons.size() ? seg.reasons[k] : std::string("no reason recorded")) + "\n";
    }
  }
  return s;
}

}  // namespace kiln::partition
