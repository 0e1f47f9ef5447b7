#include "runtime/interpreter.h"

namespace kiln::runtime {

Status run_node(const ir::Node& n, std::vector<engine::RtValue>& env, const cpu::KernelRegistry& kernels) {
  cpu::KernelFn fn = kernels.find(n.op);
  if (!fn) return unsupported(n.describe() + ": no CPU kernel for this op");
  cpu::KernelArgs args(n, env);
  KILN_TRY(fn(args));
  if (args.outputs().size() < n.outputs.size())
    return internal_error(n.describe() + ": kernel produced " + std::to_string(args.outputs().size()) +
                          " outputs, the node has " + std::to_string(n.outputs.size()));
  for (size_t o = 0; o < n.outputs.size(); ++o)
    env[static_cast<size_t>(n.outputs[o]->id)] = std::move(args.outputs()[o]);
  return Status::ok();
}

Expected<std::vector<engine::RtValue>> interpret(const ir::Graph& g, std::vector<engine::RtValue> inputs,
                                                 const cpu::KernelRegistry& kernels) {
  if (inputs.size() != g.inputs().size())
    return invalid_argument("the graph takes " + std::to_string(g.inputs().size()) + " inputs, got " +
                            std::to_string(inputs.size()));
  std::vector<engine::RtValue> env(g.num_values());
  for (size_t i = 0; i < inputs.size(); ++i) env[static_cast<size_t>(g.inputs()[i]->id)] = std::move(inputs[i]);

  // Last node index that reads each value; graph outputs live to the end.
  const size_t n_nodes = g.nodes().size();
  std::vector<size_t> last_use(g.num_values(), 0);
  for (size_t i = 0; i < n_nodes; ++i)
    for (const ir::Value* v : g.nodes()[i]->operands()) last_use[static_cast<size_t>(v->id)] = i;
  for (const ir::Value* v : g.outputs()) last_use[static_cast<size_t>(v->id)] = n_nodes;

  for (size_t i = 0; i < n_nodes; ++i) {
    const ir::Node& n = *g.nodes()[i];
    KILN_TRY(run_node(n, env, kernels));
    for (const ir::Value* v : n.operands())
      if (last_use[static_cast<size_t>(v->id)] == i) env[static_cast<size_t>(v->id)] = std::monostate{};
  }
  std::vector<engine::RtValue> out;
  out.reserve(g.outputs().size());
  for (const ir::Value* v : g.outputs()) out.push_back(env[static_cast<size_t>(v->id)]);
  return out;
}

}  // namespace kiln::runtime
