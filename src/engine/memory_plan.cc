#include "engine/memory_plan.h"

#include <algorithm>
#include <optional>

#include "ir/liveness.h"

namespace kiln::engine {

namespace {

// Bytes of a tensor whose sizes are all known, or nullopt.
std::optional<int64_t> static_bytes(const ir::Value& v) {
  if (v.kind != ir::ValueKind::kTensor) return std::nullopt;
  int64_t n = 1;
  for (const ir::Dim& d : v.type.sizes) {
    if (!d.is_static() || d.value < 0) return std::nullopt;
    if (d.value != 0 && n > INT64_MAX / 16 / d.value) return std::nullopt;
    n *= d.value;
  }
  return n * static_cast<int64_t>(dtype_size(v.type.dtype));
}

int64_t align_up(int64_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

// Whether a layer's outputs may share memory with its first tensor operand.
bool may_alias_operand(const ir::Node& n) {
  return ir::op_category(n.op) == ir::OpCategory::kView || n.op == ir::OpKind::kPyGetitem ||
         n.op == ir::OpKind::kCacheWrite;  // its result is its cache operand's memory
}

}  // namespace

int64_t place_in_arena(std::vector<ArenaBlock>& blocks, int64_t alignment) {
  auto aligned = [&](int64_t n) { return (n + alignment - 1) / alignment * alignment; };
  std::vector<size_t> placed, order;
  int64_t total = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].offset >= 0) {
      placed.push_back(i);
      total = std::max(total, blocks[i].offset + aligned(blocks[i].bytes));
    } else {
      order.push_back(i);
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return blocks[a].bytes > blocks[b].bytes; });
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (size_t i : order) {
    ArenaBlock& a = blocks[i];
    busy.clear();
    for (size_t j : placed) {
      const ArenaBlock& b = blocks[j];
      if (b.first <= a.last && a.first <= b.last) busy.emplace_back(b.offset, b.offset + aligned(b.bytes));
    }
    std::sort(busy.begin(), busy.end());
    int64_t off = 0;
    for (const auto& [lo, hi] : busy) {
      if (off + aligned(a.bytes) <= lo) break;
      off = std::max(off, hi);
    }
    a.offset = off;
    total = std::max(total, off + aligned(a.bytes));
    placed.push_back(i);
  }
  return total;
}

MemoryPlan plan_memory(const Network& net, const std::function<bool(const ir::Node&)>& placeable) {
  const ir::Graph& g = net.graph;
  const size_t nv = g.num_values();
  MemoryPlan plan;
  plan.offset.assign(nv, -1);
  // Each value's own last use, then extended to its storage root's.
  plan.last_use = ir::liveness(g).last_use;

  // Every value's storage root: views and getitem results share their operand's.
  std::vector<int> root(nv);
  for (size_t i = 0; i < nv; ++i) root[i] = static_cast<int>(i);
  const auto& nodes = g.nodes();
  for (const auto& n : nodes) {
    if (!may_alias_operand(*n)) continue;
    for (const ir::Value* in : n->operands()) {
      if (in->kind != ir::ValueKind::kTensor) continue;
      for (const ir::Value* out : n->outputs) root[out->id] = root[in->id];
      break;
    }
  }
  // Last use per storage root, then per value.
  std::vector<int> root_last(nv, MemoryPlan::kNeverUsed);
  std::vector<bool> escapes(nv, false);
  for (size_t v = 0; v < nv; ++v) root_last[root[v]] = std::max(root_last[root[v]], plan.last_use[v]);
  for (const ir::Value* out : g.outputs()) escapes[root[out->id]] = true;
  for (const ir::Value* in : g.inputs()) escapes[root[in->id]] = true;
  for (size_t v = 0; v < nv; ++v) plan.last_use[v] = std::max(plan.last_use[v], root_last[root[v]]);

  // A layer's output is live from that layer to its last use: it may not
  // share with the layer's own inputs, which are still live then.
  std::vector<ArenaBlock> blocks;
  std::vector<const ir::Value*> placed;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    if (!placeable(n)) continue;
    for (const ir::Value* out : n.outputs) {
      if (escapes[root[out->id]] || root[out->id] != out->id) continue;
      if (plan.last_use[out->id] == MemoryPlan::kNeverUsed) continue;
      auto bytes = static_bytes(*out);
      if (!bytes || *bytes == 0) continue;
      plan.unshared_bytes += align_up(*bytes);
      blocks.push_back({*bytes, static_cast<int>(i), std::max(plan.last_use[out->id], static_cast<int>(i))});
      placed.push_back(out);
    }
  }
  plan.arena_bytes = place_in_arena(blocks, kArenaAlignment);
  for (size_t b = 0; b < blocks.size(); ++b) plan.offset[placed[b]->id] = blocks[b].offset;
  return plan;
}

Status MemoryPlan::validate(const Network& net) const {
  const size_t nv = net.graph.num_values();
  if (offset.size() != nv || last_use.size() != nv)
    return format_error("memory plan covers " + std::to_string(offset.size()) + " values, the network has " +
                        std::to_string(nv));
  if (arena_bytes < 0) return format_error("memory plan: negative arena size");
  int64_t unshared = 0;  // the arena never needs more than every placed value apart
  for (size_t v = 0; v < nv; ++v) {
    if (offset[v] == -1) continue;
    auto bytes = static_bytes(*net.graph.value(v));
    if (bytes && *bytes <= (int64_t{1} << 50)) unshared += align_up(*bytes);
    if (offset[v] < 0 || !bytes || offset[v] > arena_bytes || *bytes > arena_bytes - offset[v] ||
        offset[v] % kArenaAlignment != 0)
      return format_error(FileFault::kOutOfBounds, "memory plan: value '" + net.graph.value(v)->name + "' placed at offset " +
                          std::to_string(offset[v]) + " does not fit an arena of " + std::to_string(arena_bytes) +
                          " bytes");
    if (last_use[v] < MemoryPlan::kNeverUsed) return format_error("memory plan: bad last use");
  }
  if (arena_bytes > unshared)
    return format_error(FileFault::kOutOfBounds, "memory plan: an arena of " + std::to_string(arena_bytes) +
                        " bytes for values that need at most " + std::to_string(unshared));
  return Status::ok();
}

}  // namespace kiln::engine
