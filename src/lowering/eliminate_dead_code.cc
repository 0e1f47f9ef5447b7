// Dead-code elimination: drops nodes none of whose results are used by a
// later node or a graph output. Run-time checks stay (they guard inputs).
#include <set>

#include "lowering/pass.h"

namespace kiln::lowering {

Status eliminate_dead_code(ir::Module& m) {
  auto& nodes = m.graph.nodes();
  std::set<const ir::Value*> live(m.graph.outputs().begin(), m.graph.outputs().end());
  std::vector<bool> keep(nodes.size(), false);
  for (size_t i = nodes.size(); i-- > 0;) {
    const ir::Node& n = *nodes[i];
    bool used = ir::op_category(n.op) == ir::OpCategory::kCheck;
    for (const ir::Value* v : n.outputs) used = used || live.count(v);
    if (!used) continue;
    keep[i] = true;
    for (const ir::Value* v : n.operands()) live.insert(v);
  }
  std::vector<std::unique_ptr<ir::Node>> kept;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (keep[i]) kept.push_back(std::move(nodes[i]));
  nodes = std::move(kept);
  return m.graph.verify();
}

}  // namespace kiln::lowering
