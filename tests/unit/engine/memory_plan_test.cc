#include "engine/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "ir/printer.h"
#include "support/network_text.h"

namespace kiln::engine {
namespace {

using testing::network_from;

// Every computing layer writes into memory it is given (views never do).
bool computes(const ir::Node& n) { return ir::op_category(n.op) == ir::OpCategory::kCompute; }

const ir::Value& value_named(const Network& net, std::string_view name) {
  for (size_t i = 0; i < net.graph.num_values(); ++i)
    if (net.graph.value(i)->name == name) return *net.graph.value(i);
  ADD_FAILURE() << "no value named " << name;
  return *net.graph.value(0);
}

int64_t bytes_of(const ir::Value& v) {
  int64_t n = static_cast<int64_t>(dtype_size(v.type.dtype));
  for (const ir::Dim& d : v.type.sizes) n *= d.value;
  return n;
}

bool is_static_tensor(const ir::Value& v) {
  if (v.kind != ir::ValueKind::kTensor) return false;
  for (const ir::Dim& d : v.type.sizes)
    if (!d.is_static()) return false;
  return true;
}

// Lifetimes computed from the graph alone, for checking a plan.
struct Lifetimes {
  std::vector<int> def;       // producing layer, -1 for graph inputs
  std::vector<int> root;      // storage owner: views share their operand's
  std::vector<int> own_last;  // last layer reading the value or a view made from it (transitively)
  std::vector<int> root_end;  // per root: last layer reading any value of its storage; INT_MAX if an output
  std::vector<bool> escapes;  // per root: an input or an output lives in this storage
};

Lifetimes lifetimes_of(const Network& net) {
  const ir::Graph& g = net.graph;
  const size_t nv = g.num_values();
  Lifetimes l;
  l.def.assign(nv, -1);
  l.root.resize(nv);
  l.own_last.assign(nv, -1);
  l.root_end.assign(nv, -1);
  l.escapes.assign(nv, false);
  std::vector<int> parent(nv, -1);  // the value a view was made from
  for (size_t v = 0; v < nv; ++v) l.root[v] = static_cast<int>(v);
  const auto& nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    for (const ir::Value* o : n.outputs) l.def[o->id] = static_cast<int>(i);
    if (ir::op_category(n.op) == ir::OpCategory::kView) {
      const ir::Value* self = std::get<ir::Value*>(*n.find("self"));
      for (const ir::Value* o : n.outputs) {
        parent[o->id] = self->id;
        l.root[o->id] = l.root[self->id];
      }
    }
  }
  auto read_at = [&](int v, int layer) {
    for (int u = v; u >= 0; u = parent[u]) l.own_last[u] = std::max(l.own_last[u], layer);
    l.root_end[l.root[v]] = std::max(l.root_end[l.root[v]], layer);
  };
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const ir::Value* in : nodes[i]->operands()) read_at(in->id, static_cast<int>(i));
  for (const ir::Value* out : g.outputs()) {
    read_at(out->id, INT_MAX);
    l.escapes[l.root[out->id]] = true;
  }
  for (const ir::Value* in : g.inputs()) l.escapes[l.root[in->id]] = true;
  return l;
}

// Checks `plan` against the graph: placement only where allowed, alignment,
// bounds, and no two values alive at once sharing a byte.
void check_plan(const Network& net, const MemoryPlan& plan, const std::string& what) {
  const ir::Graph& g = net.graph;
  const size_t nv = g.num_values();
  ASSERT_EQ(plan.offset.size(), nv) << what;
  ASSERT_EQ(plan.last_use.size(), nv) << what;
  EXPECT_TRUE(plan.validate(net).is_ok()) << what;
  const Lifetimes l = lifetimes_of(net);

  int64_t placed_bytes = 0;
  std::vector<int> placed;
  for (size_t v = 0; v < nv; ++v) {
    const ir::Value& value = *g.value(v);
    // A value lives at least until it, or a view made from it, is last read.
    if (l.own_last[v] == INT_MAX)
      EXPECT_EQ(plan.last_use[v], MemoryPlan::kLiveToEnd) << what << ": " << value.name;
    else
      EXPECT_GE(plan.last_use[v], l.own_last[v]) << what << ": " << value.name;
    if (plan.offset[v] == -1) continue;
    const std::string where = what + ": placed value " + value.name;
    placed.push_back(static_cast<int>(v));
    EXPECT_GE(l.def[v], 0) << where << " is a graph input";
    EXPECT_EQ(l.root[v], static_cast<int>(v)) << where << " is a view";
    EXPECT_FALSE(l.escapes[l.root[v]]) << where << " is or is viewed by an input or output";
    ASSERT_TRUE(is_static_tensor(value)) << where << " has no static size";
    EXPECT_TRUE(computes(*value.producer)) << where << " comes from a layer that allocates for itself";
    EXPECT_GE(plan.offset[v], 0) << where;
    EXPECT_EQ(plan.offset[v] % kArenaAlignment, 0) << where;
    EXPECT_LE(plan.offset[v] + bytes_of(value), plan.arena_bytes) << where;
    placed_bytes += (bytes_of(value) + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  }
  EXPECT_EQ(plan.unshared_bytes, placed_bytes) << what;
  EXPECT_LE(plan.arena_bytes, plan.unshared_bytes) << what;

  for (size_t i = 0; i < placed.size(); ++i)
    for (size_t j = i + 1; j < placed.size(); ++j) {
      const int a = placed[i], b = placed[j];
      const bool alive_together = l.def[a] <= l.root_end[b] && l.def[b] <= l.root_end[a];
      if (!alive_together) continue;
      const int64_t a0 = plan.offset[a], a1 = a0 + bytes_of(*g.value(a));
      const int64_t b0 = plan.offset[b], b1 = b0 + bytes_of(*g.value(b));
      EXPECT_TRUE(a1 <= b0 || b1 <= a0) << what << ": " << g.value(a)->name << " [" << a0 << ", " << a1 << ") and "
                                        << g.value(b)->name << " [" << b0 << ", " << b1 << ") are alive together";
    }
}

std::string chain_text(int n) {
  std::string s = "graph(%x: float32[4, 16]) {\n";
  std::string prev = "x";
  for (int i = 1; i <= n; ++i) {
    const std::string name = "a" + std::to_string(i);
    s += "  %" + name + ": float32[4, 16] = " + (i % 2 ? "aten.add.Tensor" : "aten.mul.Tensor") + "(self=%" + prev +
         ", other=%x)\n";
    prev = name;
  }
  return s + "  return (%" + prev + ")\n}\n";
}

TEST(MemoryPlan, ChainNeedsTwoSlots) {
  for (int n : {3, 8, 20}) {
    Network net = network_from(chain_text(n));
    MemoryPlan plan = plan_memory(net, computes);
    check_plan(net, plan, "chain of " + std::to_string(n));
    // a1 .. a(n-1) are placed, 256 bytes each; a producer and its consumer
    // are alive together, nothing else is.
    EXPECT_EQ(plan.unshared_bytes, 256 * (n - 1));
    EXPECT_EQ(plan.arena_bytes, 512);
    if (n > 3) EXPECT_LT(plan.arena_bytes, plan.unshared_bytes);
    for (int i = 1; i < n; ++i) {
      const ir::Value& a = value_named(net, "a" + std::to_string(i));
      EXPECT_EQ(plan.last_use[a.id], i) << a.name;  // read by the next layer only
    }
    EXPECT_EQ(plan.offset[value_named(net, "a" + std::to_string(n)).id], -1);
    EXPECT_EQ(plan.last_use[value_named(net, "a" + std::to_string(n)).id], MemoryPlan::kLiveToEnd);
    EXPECT_EQ(plan.offset[value_named(net, "x").id], -1);
  }
}

TEST(MemoryPlan, NothingPlacedWhenNoLayerWritesIntoTheArena) {
  Network net = network_from(chain_text(6));
  MemoryPlan plan = plan_memory(net, [](const ir::Node&) { return false; });
  EXPECT_EQ(plan.arena_bytes, 0);
  EXPECT_EQ(plan.unshared_bytes, 0);
  for (int64_t o : plan.offset) EXPECT_EQ(o, -1);
  check_plan(net, plan, "no placeable layer");
}

TEST(MemoryPlan, OutputsInputsTheirViewsAndSymbolicSizesAreNotPlaced) {
  Network net = network_from(R"(graph(%x: float32[4, 4], %s: float32[s0, 4]) {
  %a: float32[4, 4] = aten.add.Tensor(self=%x, other=%x)
  %b: float32[4, 4] = aten.mul.Tensor(self=%a, other=%x)
  %v: float32[16] = aten.view.default(self=%b, size=[16])
  %xv: float32[16] = aten.view.default(self=%x, size=[16])
  %c: float32[16] = aten.mul.Tensor(self=%xv, other=%v)
  %sa: float32[s0, 4] = aten.add.Tensor(self=%s, other=%s)
  %sb: float32[s0, 4] = aten.relu.default(self=%sa)
  %dead: float32[4, 4] = aten.relu.default(self=%x)
  return (%v, %c, %sb)
}
)");
  MemoryPlan plan = plan_memory(net, computes);
  check_plan(net, plan, "outputs and views");
  auto offset = [&](const char* name) { return plan.offset[value_named(net, name).id]; };
  auto last = [&](const char* name) { return plan.last_use[value_named(net, name).id]; };
  EXPECT_EQ(offset("a"), 0);   // read by b only: the one value placed
  EXPECT_EQ(offset("b"), -1);  // viewed by an output
  EXPECT_EQ(offset("v"), -1);
  EXPECT_EQ(offset("c"), -1);
  EXPECT_EQ(offset("x"), -1);
  EXPECT_EQ(offset("xv"), -1);
  EXPECT_EQ(offset("sa"), -1);  // size known at run time only
  EXPECT_EQ(offset("dead"), -1);
  EXPECT_EQ(plan.arena_bytes, 64);
  EXPECT_EQ(last("a"), 1);
  EXPECT_EQ(last("b"), MemoryPlan::kLiveToEnd);
  EXPECT_EQ(last("v"), MemoryPlan::kLiveToEnd);
  EXPECT_EQ(last("c"), MemoryPlan::kLiveToEnd);
  EXPECT_EQ(last("sb"), MemoryPlan::kLiveToEnd);
  EXPECT_EQ(last("sa"), 6);
  EXPECT_EQ(last("dead"), MemoryPlan::kNeverUsed);
}

TEST(MemoryPlan, ValueStaysLiveUntilItsViewIsRead) {
  // a is read through v at layer 5; b is born at layer 2 and must not take a's bytes.
  Network net = network_from(R"(graph(%x: float32[64]) {
  %a: float32[64] = aten.add.Tensor(self=%x, other=%x)
  %v: float32[8, 8] = aten.view.default(self=%a, size=[8, 8])
  %b: float32[64] = aten.mul.Tensor(self=%x, other=%x)
  %c: float32[64] = aten.relu.default(self=%b)
  %w: float32[8, 8] = aten.view.default(self=%c, size=[8, 8])
  %y: float32[8, 8] = aten.add.Tensor(self=%v, other=%w)
  return (%y)
}
)");
  MemoryPlan plan = plan_memory(net, computes);
  check_plan(net, plan, "view read later");
  const ir::Value& a = value_named(net, "a");
  const ir::Value& b = value_named(net, "b");
  const ir::Value& c = value_named(net, "c");
  EXPECT_EQ(plan.last_use[a.id], 5);
  EXPECT_EQ(plan.last_use[value_named(net, "v").id], 5);
  EXPECT_EQ(plan.last_use[b.id], 3);
  ASSERT_GE(plan.offset[a.id], 0);
  ASSERT_GE(plan.offset[b.id], 0);
  ASSERT_GE(plan.offset[c.id], 0);
  EXPECT_NE(plan.offset[a.id], plan.offset[b.id]);
  EXPECT_NE(plan.offset[a.id], plan.offset[c.id]);
  EXPECT_NE(plan.offset[b.id], plan.offset[c.id]);  // c is written while b is read
  EXPECT_EQ(plan.arena_bytes, 3 * 256);
}

// A random DAG over 1-d tensors: elementwise ops, concatenations, casts,
// slices and views, some outputs (one of them possibly a view), and
// sometimes a branch with a size known only at run time.
std::string random_graph(uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  struct V {
    std::string name;
    int size;  // -1: s0
    std::string dtype;
    bool view;
  };
  std::vector<V> vs;
  std::string header = "graph(";
  const int num_inputs = pick(1, 3);
  for (int i = 0; i < num_inputs; ++i) {
    vs.push_back({"x" + std::to_string(i), pick(1, 48), "float32", false});
    header += (i ? ", %" : "%") + vs.back().name + ": float32[" + std::to_string(vs.back().size) + "]";
  }
  if (pick(0, 2) == 0) {
    vs.push_back({"sx", -1, "float32", false});
    header += ", %sx: float32[s0]";
  }
  auto type_of = [](const V& v) {
    return v.dtype + "[" + (v.size < 0 ? std::string("s0") : std::to_string(v.size)) + "]";
  };
  std::string body;
  const int num_nodes = pick(4, 24);
  for (int i = 0; i < num_nodes; ++i) {
    const V& a = vs[static_cast<size_t>(pick(0, static_cast<int>(vs.size()) - 1))];
    V out{"n" + std::to_string(i), a.size, a.dtype, false};
    std::string call;
    int kind = pick(0, 5);
    if (a.size < 0 && kind >= 2) kind = 0;  // symbolic sizes: elementwise only
    switch (kind) {
      case 0: {
        static const char* const kUnary[] = {"aten.relu.default", "aten.neg.default", "aten.exp.default"};
        call = std::string(kUnary[pick(0, 2)]) + "(self=%" + a.name + ")";
        break;
      }
      case 1: {
        std::vector<const V*> same;
        for (const V& b : vs)
          if (b.size == a.size && b.dtype == a.dtype) same.push_back(&b);
        const V& b = *same[static_cast<size_t>(pick(0, static_cast<int>(same.size()) - 1))];
        call = std::string(pick(0, 1) ? "aten.add.Tensor" : "aten.mul.Tensor") + "(self=%" + a.name + ", other=%" +
               b.name + ")";
        break;
      }
      case 2: {
        std::vector<const V*> same;
        for (const V& b : vs)
          if (b.size >= 0 && b.dtype == a.dtype) same.push_back(&b);
        const V& b = *same[static_cast<size_t>(pick(0, static_cast<int>(same.size()) - 1))];
        out.size = a.size + b.size;
        call = "aten.cat.default(tensors=[%" + a.name + ", %" + b.name + "], dim=0)";
        break;
      }
      case 3:
        out.dtype = a.dtype == "float32" ? "float64" : "float32";
        call = "aten._to_copy.default(self=%" + a.name + ", dtype=dtype." + out.dtype + ")";
        break;
      case 4:
        out.size = pick(1, a.size);
        out.view = true;
        call = "aten.slice.Tensor(self=%" + a.name + ", dim=0, start=0, end=" + std::to_string(out.size) + ")";
        break;
      default:
        out.view = true;
        call = "aten.view.default(self=%" + a.name + ", size=[" + std::to_string(a.size) + "])";
        break;
    }
    body += "  %" + out.name + ": " + type_of(out) + " = " + call + "\n";
    vs.push_back(out);
  }
  // The last value, maybe another one, and maybe the latest view.
  std::vector<std::string> outs = {vs.back().name};
  const std::string extra = vs[static_cast<size_t>(pick(0, static_cast<int>(vs.size()) - 1))].name;
  if (pick(0, 1) && std::find(outs.begin(), outs.end(), extra) == outs.end()) outs.push_back(extra);
  for (auto it = vs.rbegin(); it != vs.rend(); ++it)
    if (it->view) {
      if (pick(0, 1) && std::find(outs.begin(), outs.end(), it->name) == outs.end()) outs.push_back(it->name);
      break;
    }
  std::string ret = "  return (";
  for (size_t i = 0; i < outs.size(); ++i) ret += (i ? ", %" : "%") + outs[i];
  return header + ") {\n" + body + ret + ")\n}\n";
}

TEST(MemoryPlan, RandomGraphsNeverShareBytesWhileBothAreAlive) {
  int graphs_with_reuse = 0, placed_values = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    const std::string text = random_graph(seed);
    Network net = network_from(text);
    ASSERT_TRUE(net.verify().is_ok()) << text;
    MemoryPlan plan = plan_memory(net, computes);
    check_plan(net, plan, "seed " + std::to_string(seed) + "\n" + text);
    if (HasFatalFailure() || HasNonfatalFailure()) return;
    graphs_with_reuse += plan.arena_bytes < plan.unshared_bytes;
    for (int64_t o : plan.offset) placed_values += o >= 0;
  }
  // The generator exercises placement and reuse, not only the trivial plan.
  EXPECT_GT(placed_values, 300);
  EXPECT_GT(graphs_with_reuse, 30);
}

TEST(MemoryPlan, RandomGraphsWithOnlySomeLayersPlaceable) {
  // Only additions write into the arena: others allocate for themselves.
  auto adds = [](const ir::Node& n) { return n.op == ir::OpKind::kAddTensor; };
  for (uint32_t seed = 1000; seed < 1100; ++seed) {
    const std::string text = random_graph(seed);
    Network net = network_from(text);
    MemoryPlan plan = plan_memory(net, adds);
    check_plan(net, plan, "seed " + std::to_string(seed) + "\n" + text);
    for (size_t v = 0; v < net.graph.num_values(); ++v)
      if (plan.offset[v] >= 0) EXPECT_EQ(net.graph.value(v)->producer->op, ir::OpKind::kAddTensor) << text;
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
}

TEST(ArenaPlacement, PinnedBlocksStayLargestGoFirstAndFreedBytesAreReused) {
  std::vector<ArenaBlock> blocks = {
      {4, -1, INT_MAX, 0},  // pinned at 0 for the whole run (the CUDA builder's error word)
      {100, 0, 1},          // A
      {300, 1, 2},          // B: overlaps A and C
      {200, 2, 3},          // C: disjoint from A
      {50, 4, 4},           // D: disjoint from A, B and C
  };
  const int64_t size = place_in_arena(blocks, 64);
  EXPECT_EQ(blocks[0].offset, 0);
  EXPECT_EQ(blocks[2].offset, 64);   // B (largest) first, after the pinned word
  EXPECT_EQ(blocks[3].offset, 384);  // C, after B's 320 aligned bytes
  EXPECT_EQ(blocks[1].offset, 384);  // A: lowest offset free at steps 0..1 (C's bytes are not live then)
  EXPECT_EQ(blocks[4].offset, 64);   // D: only the pinned word is live at step 4
  EXPECT_EQ(size, 384 + 256);
}

TEST(ArenaPlacement, RandomBlocksNeverShareBytesWhileBothAreLive) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<ArenaBlock> blocks;
    const int n = 1 + static_cast<int>(rng() % 40);
    int64_t unshared = 0;
    for (int i = 0; i < n; ++i) {
      ArenaBlock b;
      b.bytes = 1 + static_cast<int64_t>(rng() % 5000);
      b.first = static_cast<int>(rng() % 30);
      b.last = b.first + static_cast<int>(rng() % 10);
      if (rng() % 8 == 0)
        b.offset = 256 * static_cast<int64_t>(rng() % 4) + 1000000 * i;  // pinned, apart from each other
      unshared += (b.bytes + 255) / 256 * 256;
      blocks.push_back(b);
    }
    const std::vector<ArenaBlock> given = blocks;
    const int64_t size = place_in_arena(blocks, 256);
    int64_t pinned_end = 0;
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (given[i].offset >= 0) {
        EXPECT_EQ(blocks[i].offset, given[i].offset);
        pinned_end = std::max(pinned_end, given[i].offset + (given[i].bytes + 255) / 256 * 256);
      } else {
        EXPECT_EQ(blocks[i].offset % 256, 0);
      }
      EXPECT_LE(blocks[i].offset + blocks[i].bytes, size);
      for (size_t j = 0; j < i; ++j) {
        const ArenaBlock &a = blocks[i], &b = blocks[j];
        if (a.first > b.last || b.first > a.last) continue;
        EXPECT_TRUE(a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset)
            << "trial " << trial << ": blocks " << j << " and " << i << " share bytes while both are live";
      }
    }
    EXPECT_LE(size, pinned_end + unshared) << "trial " << trial;
  }
}

TEST(MemoryPlan, ValidateRejectsPlansThatDoNotFit) {
  Network net = network_from(R"(graph(%x: float32[4, 16], %s: float32[s0]) {
  %a: float32[4, 16] = aten.add.Tensor(self=%x, other=%x)
  %b: float32[4, 16] = aten.mul.Tensor(self=%a, other=%x)
  %c: float32[4, 16] = aten.add.Tensor(self=%b, other=%x)
  %n: symint = aten.sym_size.int(self=%s, dim=0)
  return (%c, %n)
}
)");
  const MemoryPlan good = plan_memory(net, computes);
  ASSERT_TRUE(good.validate(net).is_ok());
  const int a = value_named(net, "a").id;
  ASSERT_EQ(good.offset[a], 0);
  ASSERT_EQ(good.arena_bytes, 512);

  auto expect_rejected = [&](const MemoryPlan& p, std::string_view mentions, const char* what) {
    Status s = p.validate(net);
    EXPECT_FALSE(s.is_ok()) << what;
    EXPECT_EQ(s.code(), ErrorCode::kFormat) << what;
    EXPECT_NE(s.message().find(mentions), std::string::npos) << what << ": " << s.message();
  };
  MemoryPlan p = good;
  p.offset[a] = good.arena_bytes;
  expect_rejected(p, "'a'", "offset at the arena's end");
  p = good;
  p.offset[a] = good.arena_bytes - 192;  // 256 bytes from 320 overrun 512
  expect_rejected(p, "'a'", "tensor running past the arena");
  p = good;
  p.offset[a] = INT64_MAX - 8;
  expect_rejected(p, "'a'", "huge offset");
  p = good;
  p.offset[a] = -64;
  expect_rejected(p, "'a'", "negative offset");
  p = good;
  p.offset[a] = 32;
  expect_rejected(p, "'a'", "misaligned offset");
  p = good;
  p.offset[value_named(net, "s").id] = 0;
  expect_rejected(p, "'s'", "symbolic size placed");
  p = good;
  p.offset[value_named(net, "n").id] = 0;
  expect_rejected(p, "'n'", "symbolic scalar placed");
  p = good;
  p.last_use[a] = -5;
  expect_rejected(p, "last use", "bad last use");
  p = good;
  p.arena_bytes = -1;
  expect_rejected(p, "arena", "negative arena");
  p = good;
  p.offset.pop_back();
  expect_rejected(p, "covers", "too few offsets");
  p = good;
  p.last_use.push_back(0);
  expect_rejected(p, "covers", "too many last uses");
}

}  // namespace
}  // namespace kiln::engine
