#include "engine/fuse_elementwise.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/elementwise_program.h"

namespace kiln::engine {

namespace {

bool same_expr(const ir::SymExpr& a, const ir::SymExpr& b) {
  if (a.kind() != b.kind() || a.value() != b.value() || a.name() != b.name() || a.args().size() != b.args().size())
    return false;
  for (size_t i = 0; i < a.args().size(); ++i)
    if (!same_expr(*a.args()[i], *b.args()[i])) return false;
  return true;
}

bool same_dim(const ir::Dim& a, const ir::Dim& b) {
  if (a.is_static() != b.is_static()) return false;
  return a.is_static() ? a.value == b.value : same_expr(*a.expr, *b.expr);
}

bool is_one(const ir::Dim& d) { return d.is_static() && d.value == 1; }

// NumPy broadcasting over sizes that may be symbolic. nullopt when the result
// cannot be proven (two different symbolic sizes, a symbolic size against a
// static one other than 1) or the shapes do not broadcast.
std::optional<std::vector<ir::Dim>> broadcast_dims(const std::vector<ir::Dim>& a, const std::vector<ir::Dim>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<ir::Dim> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const bool in_a = i < a.size(), in_b = i < b.size();
    const ir::Dim* x = in_a ? &a[a.size() - 1 - i] : nullptr;
    const ir::Dim* y = in_b ? &b[b.size() - 1 - i] : nullptr;
    ir::Dim& d = out[rank - 1 - i];
    if (!x) {
      d = *y;
    } else if (!y || same_dim(*x, *y) || is_one(*y)) {
      d = *x;
    } else if (is_one(*x)) {
      d = *y;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

// True when `out` has exactly the broadcast shape of `inputs`.
bool output_is_broadcast_of_inputs(const ir::Value& out, const std::vector<ir::Value*>& inputs) {
  std::vector<ir::Dim> shape;
  for (const ir::Value* v : inputs) {
    auto s = broadcast_dims(shape, v->type.sizes);
    if (!s) return false;
    shape = std::move(*s);
  }
  if (shape.size() != out.type.sizes.size()) return false;
  for (size_t i = 0; i < shape.size(); ++i)
    if (!same_dim(shape[i], out.type.sizes[i])) return false;
  return true;
}

// What the pass knows about each layer.
struct LayerInfo {
  std::optional<ElementwiseInstr> instr;  // set when the layer is fusible
  std::vector<ir::Value*> reads;          // its tensor operands, indexed by instr->operands
};

constexpr int kUngrouped = -1;  // not (yet) in a group
constexpr int kAlone = -2;      // fusible, but fused with nothing

}  // namespace

Status fuse_elementwise(Network& net) {
  ir::Graph& g = net.graph;
  auto& nodes = g.nodes();
  const size_t n = nodes.size();

  std::unordered_map<const ir::Node*, size_t> index;
  std::vector<LayerInfo> info(n);
  std::vector<std::vector<size_t>> users(g.num_values());
  std::vector<bool> engine_output(g.num_values(), false);
  for (size_t i = 0; i < n; ++i) {
    index[nodes[i].get()] = i;
    info[i].instr = elementwise_instr(*nodes[i], &info[i].reads);
    for (const ir::Value* v : nodes[i]->operands()) users[static_cast<size_t>(v->id)].push_back(i);
  }
  for (const ir::Value* v : g.outputs()) engine_output[static_cast<size_t>(v->id)] = true;

  // Grow groups from the last layer backwards: a fusible producer joins when
  // its result is used only inside the group, so the group's one outside
  // result is its root's. Growing repeats until nothing joins, because a
  // producer read by two members joins only once both are in.
  std::vector<int> group(n, kUngrouped);
  std::vector<std::vector<size_t>> groups;  // members in node order; the last is the root
  std::vector<std::vector<ir::Value*>> group_inputs;
  for (size_t root = n; root-- > 0;) {
    if (!info[root].instr || group[root] != kUngrouped) continue;
    const int id = static_cast<int>(groups.size());
    std::vector<size_t> members = {root};
    group[root] = id;
    for (bool grew = true; grew;) {
      grew = false;
      for (size_t k = 0; k < members.size(); ++k) {
        for (ir::Value* v : info[members[k]].reads) {
          if (v->producer == nullptr || engine_output[static_cast<size_t>(v->id)]) continue;
          const size_t p = index.at(v->producer);
          if (!info[p].instr || group[p] != kUngrouped) continue;
          const auto& us = users[static_cast<size_t>(v->id)];
          if (!std::all_of(us.begin(), us.end(), [&](size_t u) { return group[u] == id; })) continue;
          group[p] = id;
          members.push_back(p);
          grew = true;
        }
      }
    }
    std::sort(members.begin(), members.end());

    std::vector<ir::Value*> inputs;
    for (size_t m : members)
      for (ir::Value* v : info[m].reads) {
        const bool inside = v->producer != nullptr && group[index.at(v->producer)] == id;
        if (!inside && std::find(inputs.begin(), inputs.end(), v) == inputs.end()) inputs.push_back(v);
      }
    if (members.size() < 2 || !output_is_broadcast_of_inputs(*nodes[root]->outputs[0], inputs)) {
      // Left alone; the producers may still form groups of their own.
      for (size_t m : members) group[m] = kUngrouped;
      group[root] = kAlone;
      continue;
    }
    groups.push_back(std::move(members));
    group_inputs.push_back(std::move(inputs));
  }
  if (!net.kernels.empty()) net.kernels.clear();
  if (groups.empty()) return net.verify();

  std::set<std::string> names;
  for (const auto& node : nodes) names.insert(node->name);

  // One fused layer per group, appended for now and moved into its root's place below.
  std::vector<ir::Node*> fused(groups.size());
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const std::vector<size_t>& members = groups[gi];
    const std::vector<ir::Value*>& inputs = group_inputs[gi];
    ElementwiseProgram program;
    program.num_inputs = static_cast<int>(inputs.size());
    std::unordered_map<const ir::Value*, int> reg;
    for (size_t i = 0; i < inputs.size(); ++i) reg[inputs[i]] = static_cast<int>(i);
    for (size_t m : members) {
      ElementwiseInstr in = *info[m].instr;
      for (int& r : in.operands) r = reg.at(info[m].reads[static_cast<size_t>(r)]);
      reg[nodes[m]->outputs[0]] = program.num_inputs + static_cast<int>(program.instrs.size());
      program.instrs.push_back(std::move(in));
    }

    ir::Node* root = nodes[members.back()].get();
    std::string name = "fused_" + root->name;
    while (!names.insert(name).second) name += "_";
    ir::Node* node =
        g.add_node(ir::OpKind::kFusedElementwise, name, {{"inputs", inputs}, {"program", program.to_text()}}, {});
    // The root's result keeps its Value: later layers and engine outputs need no rewiring.
    ir::Value* out = root->outputs[0];
    out->producer = node;
    out->output_index = 0;
    node->outputs.push_back(out);
    node->metadata = root->metadata;
    fused[gi] = node;
  }

  std::vector<std::unique_ptr<ir::Node>> rewritten;
  std::vector<std::unique_ptr<ir::Node>> appended;
  for (size_t i = n; i < nodes.size(); ++i) appended.push_back(std::move(nodes[i]));
  for (size_t i = 0; i < n; ++i) {
    const int id = group[i];
    if (id < 0) {
      rewritten.push_back(std::move(nodes[i]));
      continue;
    }
    if (groups[static_cast<size_t>(id)].back() == i) {
      auto it = std::find_if(appended.begin(), appended.end(),
                             [&](const auto& p) { return p.get() == fused[static_cast<size_t>(id)]; });
      rewritten.push_back(std::move(*it));
    } else {
      for (ir::Value* v : nodes[i]->outputs) v->producer = nullptr;  // the value is gone with its layer
    }
  }
  nodes = std::move(rewritten);
  return net.verify();
}

NetworkPass fuse_elementwise_pass() {
  return {"fuse-elementwise", &fuse_elementwise,
          "chains of elementwise layers become one layer running an elementwise program"};
}

}  // namespace kiln::engine
