#include "runtime/interpreter.h"

#include "ir/liveness.h"

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

  // Each value released after the last node that reads it; graph outputs live to the end.
  const size_t n_nodes = g.nodes().size();
  const std::vector<std::vector<int>> release_after = ir::liveness(g).release_after(n_nodes);
  for (size_t i = 0; i < n_nodes; ++i) {
    KILN_TRY(run_node(*g.nodes()[i], env, kernels));
    for (int v : release_after[i]) env[static_cast<size_t>(v)] = std::monostate{};
  }
  std::vector<engine::RtValue> out;
  out.reserve(g.outputs().size());
  for (const ir::Value* v : g.outputs()) out.push_back(env[static_cast<size_t>(v->id)]);
  return out;
}

}  // namespace kiln::runtime
