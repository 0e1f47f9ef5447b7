#include "ir/liveness.h"

#include <algorithm>

namespace kiln::ir {

Liveness liveness(const Graph& g) {
  Liveness l;
  l.last_use.assign(g.num_values(), Liveness::kNeverUsed);
  const auto& nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Value* v : nodes[i]->operands())
      l.last_use[static_cast<size_t>(v->id)] = std::max(l.last_use[static_cast<size_t>(v->id)], static_cast<int>(i));
  for (const Value* v : g.outputs()) l.last_use[static_cast<size_t>(v->id)] = Liveness::kLiveToEnd;
  return l;
}

std::vector<std::vector<int>> Liveness::release_after(size_t num_nodes) const {
  std::vector<std::vector<int>> out(num_nodes);
  for (size_t v = 0; v < last_use.size(); ++v)
    if (last_use[v] >= 0 && static_cast<size_t>(last_use[v]) < num_nodes)
      out[static_cast<size_t>(last_use[v])].push_back(static_cast<int>(v));
  return out;
}

}  // namespace kiln::ir
