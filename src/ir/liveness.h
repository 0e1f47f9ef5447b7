// Liveness of a graph's values: the last node that reads each one. The one
// analysis behind the interpreter's releases, the engines' memory plans and
// the CPU engine's releases.
#pragma once

#include <climits>
#include <vector>

#include "ir/graph.h"

namespace kiln::ir {

struct Liveness {
  static constexpr int kNeverUsed = -1;
  static constexpr int kLiveToEnd = INT_MAX;
  // Per value id: the index of the last node that reads it; kLiveToEnd for
  // graph outputs; kNeverUsed when nothing reads it.
  std::vector<int> last_use;

  // Per node index: the value ids whose last use it is (what a runtime may
  // release once the node has run).
  std::vector<std::vector<int>> release_after(size_t num_nodes) const;
};

Liveness liveness(const Graph& g);

}  // namespace kiln::ir
