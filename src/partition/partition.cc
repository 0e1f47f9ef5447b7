#include "partition/partition.h"

#include <algorithm>
#include <array>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace kiln::partition {

namespace {

using ir::Node;
using ir::Value;

Status check_options(const PartitionOptions& options) {
  if (options.min_block_size < 0)
    return invalid_argument("min_block_size must not be negative (got " + std::to_string(options.min_block_size) + ")");
  for (const std::string& entry : options.fallback_ops) {
    bool known = false;
    for (size_t i = 0; i < ir::op_count() && !known; ++i)
      known = ir::op_matches_entry(entry, ir::op_target(ir::op_at(i)));
    if (!known)
      return invalid_argument("fallback_ops entry '" + entry +
                              "' names no op kiln knows; write a full target (\"aten.relu.default\"), a target "
                              "without its overload (\"aten.relu\") or an op name (\"relu\")");
  }
  return Status::ok();
}

// Where each node goes before segments are formed, and why.
struct Placement {
  bool engine = false;
  bool compute = false;  // counts toward min_block_size
  std::string reason;    // when !engine
};

Placement place(const Node& n, const CapabilityFn& capable, const PartitionOptions& options) {
  Placement p;
  p.compute = ir::op_category(n.op) == ir::OpCategory::kCompute;
  std::string_view target = ir::op_target(n.op);
  for (const std::string& entry : options.fallback_ops) {
    if (ir::op_matches_entry(entry, target)) {
      p.reason = "forced to fallback by fallback_ops (" + entry + ")";
      return p;
    }
  }
  Capability c = capable(n);
  p.engine = c.supported;
  if (!c.supported) p.reason = c.reason.empty() ? "refused by the capability check (no reason given)" : c.reason;
  return p;
}

// Node-level dependency graph, by index in graph order.
struct Deps {
  std::vector<std::vector<int>> preds;  // unique producers of each node's operands
  std::vector<std::vector<int>> succs;  // unique consumers of each node's outputs
};

Deps build_deps(const ir::Graph& g, const std::unordered_map<const Node*, int>& index) {
  size_t n = g.nodes().size();
  Deps d;
  d.preds.resize(n);
  d.succs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<int>& p = d.preds[i];
    for (const Value* v : g.nodes()[i]->operands())
      if (v->producer) p.push_back(index.at(v->producer));
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
    for (int j : p) d.succs[j].push_back(static_cast<int>(i));
  }
  return d;
}

// A topological order that keeps nodes of one kind together: take ready nodes
// of the current kind (lowest graph index first) until none is left, then
// switch kinds (Kahn's algorithm with a preference).
std::vector<int> order_by_kind(const Deps& d, const std::vector<char>& engine, bool start_with_engine) {
  size_t n = d.preds.size();
  std::vector<size_t> waiting(n);
  std::array<std::set<int>, 2> ready;  // [0]: fallback, [1]: engine
  for (size_t i = 0; i < n; ++i) {
    waiting[i] = d.preds[i].size();
    if (waiting[i] == 0) ready[engine[i] ? 1 : 0].insert(static_cast<int>(i));
  }
  std::vector<int> order;
  order.reserve(n);
  int cur = start_with_engine ? 1 : 0;
  while (order.size() < n) {
    if (ready[cur].empty()) cur = 1 - cur;
    // The graph is acyclic (verified), so some node is always ready.
    int i = *ready[cur].begin();
    ready[cur].erase(ready[cur].begin());
    order.push_back(i);
    for (int s : d.succs[i])
      if (--waiting[s] == 0) ready[engine[s] ? 1 : 0].insert(s);
  }
  return order;
}

// A maximal run of one kind in an execution order: [begin, end).
struct Run {
  bool engine = false;
  size_t begin = 0;
  size_t end = 0;
};

std::vector<Run> cut(const std::vector<int>& order, const std::vector<char>& engine) {
  std::vector<Run> runs;
  for (size_t k = 0; k < order.size(); ++k) {
    bool e = engine[order[k]];
    if (runs.empty() || runs.back().engine != e) runs.push_back({e, k, k});
    runs.back().end = k + 1;
  }
  return runs;
}

// Cuts `order` into runs, demotes engine runs with too few compute nodes
// (recording why) and merges the demoted runs with their fallback neighbours.
// The order stays as it is, so the result is still a valid execution order.
struct Layout {
  std::vector<int> order;
  std::vector<char> engine;
  std::vector<std::string> reasons;  // per node (graph index); the demotion reason when demoted
  std::vector<Run> runs;
  size_t fallback_nodes = 0;
};

// Per node, for a device backend: whether it is a fallback node the device
// runs (a data-dependent selection), and whether it reads only sizes.
struct DeviceNodes {
  std::vector<char> on_device, sizes_only;
};

// Whether run `r` of `order` passes data to or from a node that is in an
// engine or is a fallback node the device runs (a node that reads only sizes
// passes none).
bool touches_device(const std::vector<int>& order, const Run& r, const Deps& deps,
                    const std::vector<Placement>& placements, const DeviceNodes& dev) {
  std::unordered_set<int> inside(order.begin() + static_cast<long>(r.begin), order.begin() + static_cast<long>(r.end));
  for (size_t k = r.begin; k < r.end; ++k) {
    const int i = order[k];
    if (dev.sizes_only[static_cast<size_t>(i)]) continue;
    for (const std::vector<int>* next : {&deps.preds[static_cast<size_t>(i)], &deps.succs[static_cast<size_t>(i)]})
      for (int j : *next)
        if (!inside.count(j) && !dev.sizes_only[static_cast<size_t>(j)] &&
            (placements[static_cast<size_t>(j)].engine || dev.on_device[static_cast<size_t>(j)]))
          return true;
  }
  return false;
}

Layout lay_out(std::vector<int> order, const std::vector<Placement>& placements, int min_block_size, const Deps& deps,
               const DeviceNodes& dev) {
  Layout l;
  l.order = std::move(order);
  for (const Placement& p : placements) {
    l.engine.push_back(p.engine ? 1 : 0);
    l.reasons.push_back(p.reason);
  }
  if (min_block_size > 0) {
    for (const Run& r : cut(l.order, l.engine)) {
      if (!r.engine) continue;
      int compute = 0;
      for (size_t k = r.begin; k < r.end; ++k) compute += placements[l.order[k]].compute ? 1 : 0;
      if (compute >= min_block_size) continue;
      // On a device backend a small segment that computes something, next to
      // device work, stays there (PartitionOptions::fallback_on_device); one
      // that only reads sizes is no engine.
      if (compute > 0 && !dev.on_device.empty() && touches_device(l.order, r, deps, placements, dev)) continue;
      std::string why = "engine segment of " + std::to_string(compute) + " compute node" + (compute == 1 ? "" : "s") +
                        " is below min_block_size " + std::to_string(min_block_size);
      for (size_t k = r.begin; k < r.end; ++k) {
        l.engine[l.order[k]] = 0;
        l.reasons[l.order[k]] = why;
      }
    }
  }
  l.runs = cut(l.order, l.engine);
  for (char e : l.engine) l.fallback_nodes += e ? 0 : 1;
  return l;
}

// Which graph inputs are weights (parameters or constants) rather than
// run-time inputs.
Expected<std::unordered_set<const Value*>> weight_inputs(const ir::Module& m) {
  const ir::Graph& g = m.graph;
  std::unordered_set<const Value*> weights;
  if (m.input_specs.empty()) return weights;
  if (m.input_specs.size() != g.inputs().size())
    return invalid_argument("the graph has " + std::to_string(g.inputs().size()) + " inputs but the signature has " +
                            std::to_string(m.input_specs.size()) + " input specs");
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    ir::InputSpec::Kind k = m.input_specs[i].kind;
    if (k == ir::InputSpec::Kind::kParameter || k == ir::InputSpec::Kind::kConstant) weights.insert(g.inputs()[i]);
  }
  return weights;
}

// Fills each segment's inputs, constants and outputs from the wiring.
Status wire(const ir::Graph& g, const std::unordered_set<const Value*>& weights, Partition& p) {
  std::unordered_map<const Node*, size_t> segment_of;
  for (size_t s = 0; s < p.segments.size(); ++s)
    for (const Node* n : p.segments[s].nodes) segment_of[n] = s;
  std::unordered_set<const Value*> needed_outside;  // read by a later segment or a graph output
  for (size_t s = 0; s < p.segments.size(); ++s) {
    Segment& seg = p.segments[s];
    std::unordered_set<const Value*> seen;
    for (const Node* n : seg.nodes) {
      for (const Value* v : n->operands()) {
        if (v->producer) {
          size_t from = segment_of.at(v->producer);
          if (from == s) continue;
          if (from > s)
            return internal_error(n->describe() + " in segment " + std::to_string(s) + " reads '" + v->name +
                                  "' from the later segment " + std::to_string(from));
          needed_outside.insert(v);
        }
        if (!seen.insert(v).second) continue;
        (v->producer == nullptr && weights.count(v) ? seg.constants : seg.inputs).push_back(v);
      }
    }
  }
  for (const Value* v : g.outputs())
    if (v->producer) needed_outside.insert(v);
  for (Segment& seg : p.segments)
    for (const Node* n : seg.nodes)
      for (const Value* v : n->outputs)
        if (needed_outside.count(v)) seg.outputs.push_back(v);
  return Status::ok();
}

// Checks what the construction guarantees: every node in exactly one segment,
// each segment reads only graph inputs, its own earlier nodes and outputs of
// earlier segments, and every value read later is exported.
Status verify_partition(const ir::Graph& g, const std::unordered_set<const Value*>& weights, const Partition& p) {
  std::unordered_set<const Value*> graph_inputs(g.inputs().begin(), g.inputs().end());
  std::unordered_set<const Node*> placed;
  std::unordered_set<const Value*> exported;  // outputs of segments so far
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const Segment& seg = p.segments[s];
    std::string where = "segment " + std::to_string(s);
    if (seg.kind == SegmentKind::kFallback && seg.reasons.size() != seg.nodes.size())
      return internal_error(where + " has " + std::to_string(seg.reasons.size()) + " reasons for " +
                            std::to_string(seg.nodes.size()) + " nodes");
    std::unordered_set<const Value*> in(seg.inputs.begin(), seg.inputs.end());
    std::unordered_set<const Value*> consts(seg.constants.begin(), seg.constants.end());
    for (const Value* v : seg.inputs) {
      bool from_graph = graph_inputs.count(v) && !weights.count(v);
      if (!from_graph && !exported.count(v))
        return internal_error(where + " input '" + v->name + "' is neither a graph input nor an earlier output");
    }
    for (const Value* v : seg.constants)
      if (!weights.count(v)) return internal_error(where + " constant '" + v->name + "' is not a weight input");
    std::unordered_set<const Value*> defined;
    for (const Node* n : seg.nodes) {
      if (!placed.insert(n).second) return internal_error(n->describe() + " is in more than one segment");
      for (const Value* v : n->operands())
        if (!defined.count(v) && !in.count(v) && !consts.count(v))
          return internal_error(where + ": " + n->describe() + " reads '" + v->name + "', which is not available");
      defined.insert(n->outputs.begin(), n->outputs.end());
    }
    for (const Value* v : seg.outputs)
      if (!defined.count(v)) return internal_error(where + " output '" + v->name + "' is not defined there");
    exported.insert(seg.outputs.begin(), seg.outputs.end());
  }
  if (placed.size() != g.nodes().size())
    return internal_error(std::to_string(g.nodes().size() - placed.size()) + " nodes are in no segment");
  for (const Value* v : g.outputs())
    if (v->producer && !exported.count(v))
      return internal_error("graph output '" + v->name + "' is not an output of its segment");
  return Status::ok();
}

}  // namespace

Expected<Partition> partition_by_capability(const ir::Module& m, const CapabilityFn& capable,
                                            const PartitionOptions& options) {
  const ir::Graph& g = m.graph;
  std::string what = m.source.empty() ? "cannot partition the graph" : "cannot partition " + m.source;
  KILN_TRY_CTX(check_options(options), what);
  if (Status s = g.verify(); !s.is_ok()) return invalid_argument(what + ": " + s.message());
  if (!capable) return invalid_argument(what + ": no capability check was given");
  KILN_ASSIGN_OR_RETURN(auto weights, weight_inputs(m));

  const size_t n = g.nodes().size();
  std::unordered_map<const Node*, int> index;
  std::vector<Placement> placements;
  placements.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    index[g.nodes()[i].get()] = static_cast<int>(i);
    placements.push_back(place(*g.nodes()[i], capable, options));
  }

  if (options.require_full_compilation) {
    std::string refused;
    size_t count = 0;
    for (size_t i = 0; i < n; ++i) {
      if (placements[i].engine) continue;
      ++count;
      refused += "\n  " + g.nodes()[i]->describe() + ": " + placements[i].reason;
    }
    if (count)
      return unsupported(what + ": require_full_compilation is set but " + std::to_string(count) +
                         (count == 1 ? " node cannot" : " nodes cannot") + " go into an engine:" + refused +
                         "\nturn off require_full_compilation to run these nodes in fallback");
  }

  // Candidate execution orders: the graph's own, and the kind-grouping order
  // starting with either kind. The one that keeps the most nodes in engines
  // wins, then the one with the fewest segments, then the earliest candidate.
  std::vector<char> engine(n);
  for (size_t i = 0; i < n; ++i) engine[i] = placements[i].engine ? 1 : 0;
  Deps deps = build_deps(g, index);
  std::vector<int> graph_order(n);
  for (size_t i = 0; i < n; ++i) graph_order[i] = static_cast<int>(i);
  bool first_is_engine = n > 0 && engine[0];
  int min_block = options.require_full_compilation ? 0 : options.min_block_size;
  // Fallback nodes a device backend runs on the device, and size reads (empty: not a device backend).
  DeviceNodes dev;
  if (options.fallback_on_device)
    for (size_t i = 0; i < n; ++i) {
      const DeviceFallback how = device_fallback(*g.nodes()[i]);
      dev.on_device.push_back(!placements[i].engine && how == DeviceFallback::kSelect ? 1 : 0);
      dev.sizes_only.push_back(how == DeviceFallback::kSizes ? 1 : 0);
    }
  std::vector<Layout> candidates;
  candidates.push_back(lay_out(std::move(graph_order), placements, min_block, deps, dev));
  candidates.push_back(lay_out(order_by_kind(deps, engine, first_is_engine), placements, min_block, deps, dev));
  candidates.push_back(lay_out(order_by_kind(deps, engine, !first_is_engine), placements, min_block, deps, dev));
  size_t best = 0;
  for (size_t c = 1; c < candidates.size(); ++c) {
    const Layout& a = candidates[c];
    const Layout& b = candidates[best];
    if (a.fallback_nodes < b.fallback_nodes || (a.fallback_nodes == b.fallback_nodes && a.runs.size() < b.runs.size()))
      best = c;
  }
  const Layout& layout = candidates[best];

  Partition p;
  for (const Run& r : layout.runs) {
    Segment seg;
    seg.kind = r.engine ? SegmentKind::kEngine : SegmentKind::kFallback;
    for (size_t k = r.begin; k < r.end; ++k) {
      int i = layout.order[k];
      seg.nodes.push_back(g.nodes()[i].get());
      if (!r.engine) seg.reasons.push_back(layout.reasons[i]);
    }
    p.segments.push_back(std::move(seg));
  }
  KILN_TRY_CTX(wire(g, weights, p), what);
  // Invariant 4: an engine binds its outputs in the canonical order, as the program's results are.
  const ir::OutputOrder order(m);
  for (Segment& seg : p.segments) order.sort(seg.outputs);
  KILN_TRY_CTX(verify_partition(g, weights, p), what);
  return p;
}

}  // namespace kiln::partition
