// Runs a functional graph node by node on the CPU reference kernels.
#pragma once

#include <vector>

#include "backends/cpu/kernel.h"
#include "ir/graph.h"

namespace kiln::runtime {

// Runs one node: reads its operands from `env` (indexed by Value::id) and
// stores its outputs there. Errors name the node.
Status run_node(const ir::Node& n, std::vector<engine::RtValue>& env, const cpu::KernelRegistry& kernels);

// `inputs` are parallel to g.inputs(); returns the values of g.outputs().
// Intermediate values are released after their last use. Errors name the
// node that failed.
Expected<std::vector<engine::RtValue>> interpret(const ir::Graph& g, std::vector<engine::RtValue> inputs,
                                                 const cpu::KernelRegistry& kernels);

}  // namespace kiln::runtime
