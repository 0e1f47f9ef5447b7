// The engine layer IR: what a converter emits and an engine builder consumes.
//
// A Network is one engine segment's layers as an SSA graph. Its graph inputs
// are, in order, the engine's inputs (bound by position on every call) and
// then its constants (bound once, when the engine is loaded, from the
// program's weights by name: constants never become engine inputs). Its graph
// outputs are the engine's outputs in binding order.
//
// Layers are graph nodes. Most carry an ATen-level op and its attributes as
// the converter emitted them; the builder adds fused layers (e.g.
// kiln.fused_elementwise, whose attribute `program` is an ElementwiseProgram
// in text form) and records, per layer, which kernel implements it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/pass_context.h"
#include "kiln/status.h"

namespace kiln::engine {

struct Network {
  ir::Graph graph;
  size_t num_inputs = 0;                    // graph.inputs()[0, num_inputs) are engine inputs
  std::vector<std::string> constant_names;  // graph.inputs()[num_inputs + i] is weight constant_names[i]
  std::vector<std::string> kernels;         // per node (graph.nodes() order): the chosen implementation

  size_t num_constants() const { return constant_names.size(); }
  // Checks the invariants above (counts, SSA, one kernel entry per node once chosen).
  Status verify() const;
  // Text form: the layer graph, then the constants and kernels, for inspect and tests.
  std::string to_text() const;
};

// A pass a backend runs over an engine's network before it emits layers
// (folds into a layer's epilogue, elementwise fusion): named, so that
// `--print-after NAME` shows what it did, and listed in the target's order.
struct NetworkPass {
  std::string name;
  Status (*run)(Network&);
  std::string description;
};

// Runs `passes` over `net` in order, skipping those `context` disables; an
// error names the pass. After each pass the context shows, its dump receives
// the network's graph text, under the pass's name followed by `label` (the
// shape a range plan is emitting) when there is one.
Status run_network_passes(Network& net, const std::vector<NetworkPass>& passes, const ir::PassContext& context = {},
                          const std::string& label = "");

}  // namespace kiln::engine
