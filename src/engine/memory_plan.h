// The memory plan of an engine: which intermediate tensors share bytes of one
// arena, decided from their lifetimes so that buffers are reused.
#pragma once

#include <climits>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/network.h"
#include "ir/liveness.h"
#include "kiln/status.h"

namespace kiln::engine {

struct MemoryPlan {
  static constexpr int kNeverUsed = ir::Liveness::kNeverUsed;
  static constexpr int kLiveToEnd = ir::Liveness::kLiveToEnd;

  // Per value id: byte offset in the arena, or -1 when the value is not placed
  // there (inputs, constants, outputs and whatever aliases them, symbolic
  // scalars, sizes known only at run time, and outputs of layers whose kernel
  // allocates for itself).
  std::vector<int64_t> offset;
  // Per value id: index of the last layer that reads the value or any view of
  // it; kLiveToEnd for engine outputs (and what they alias); kNeverUsed when
  // nothing reads it. A runtime may release a value after that layer.
  std::vector<int> last_use;
  int64_t arena_bytes = 0;
  // Sum of the placed tensors' sizes: what the arena would take with no reuse.
  int64_t unshared_bytes = 0;

  Status validate(const Network& net) const;  // counts and bounds, for plans read from files
};

constexpr int64_t kArenaAlignment = 64;

// A tensor to place in an arena: its size and the steps it is live over, both
// ends included. `offset` is its place: given (>= 0, it stays there) or chosen.
struct ArenaBlock {
  int64_t bytes = 0;
  int first = 0, last = 0;
  int64_t offset = -1;
};

// The one arena planner, under engines' memory plans and the CUDA builder.
// Blocks given an offset stay there; the others, largest first, each take the
// lowest offset (a multiple of `alignment`) whose bytes no block live at any
// of its steps holds. Returns the arena's size: the furthest block end, each
// block's size rounded up to `alignment`.
int64_t place_in_arena(std::vector<ArenaBlock>& blocks, int64_t alignment);

// Plans `net`. `placeable(node)` says whether a layer's outputs may be placed
// in the arena (its kernel writes into memory it is given).
MemoryPlan plan_memory(const Network& net, const std::function<bool(const ir::Node&)>& placeable);

}  // namespace kiln::engine
