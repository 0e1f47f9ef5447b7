#include "engine/network.h"

#include "ir/printer.h"

namespace kiln::engine {

Status Network::verify() const {
  if (num_inputs + constant_names.size() != graph.inputs().size())
    return internal_error("engine network: " + std::to_string(graph.inputs().size()) + " graph inputs but " +
                          std::to_string(num_inputs) + " inputs and " + std::to_string(constant_names.size()) +
                          " constants");
  if (!kernels.empty() && kernels.size() != graph.nodes().size())
    return internal_error("engine network: " + std::to_string(kernels.size()) + " kernel choices for " +
                          std::to_string(graph.nodes().size()) + " layers");
  for (size_t i = num_inputs; i < graph.inputs().size(); ++i)
    if (graph.inputs()[i]->kind != ir::ValueKind::kTensor)
      return internal_error("engine network: constant '" + constant_names[i - num_inputs] + "' is not a tensor");
  return graph.verify();
}

std::string Network::to_text() const {
  std::string s = print_graph(graph);
  s += "inputs: " + std::to_string(num_inputs) + "\n";
  for (size_t i = 0; i < constant_names.size(); ++i)
    s += "constant %" + graph.inputs()[num_inputs + i]->name + " = weight '" + constant_names[i] + "'\n";
  for (size_t i = 0; i < kernels.size() && i < graph.nodes().size(); ++i)
    s += "kernel " + graph.nodes()[i]->name + ": " + kernels[i] + "\n";
  return s;
}

Status run_network_passes(Network& net, const std::vector<NetworkPass>& passes, const ir::PassContext& context,
                          const std::string& label) {
  for (const NetworkPass& p : passes)
    if (!context.disables(p.name))
      KILN_TRY(context.run_pass(
          p.name, [&] { return p.run(net); }, net.graph, label));
  return Status::ok();
}

}  // namespace kiln::engine
