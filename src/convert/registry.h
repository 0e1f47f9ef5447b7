// The converter registry: for every op, the one place that says whether a node
// can go into an engine (with the reason when it cannot) and how it becomes
// engine layers. The partitioner asks check(); nothing else decides.
#pragma once

#include <map>
#include <vector>

#include "engine/backend.h"
#include "engine/network.h"
#include "ir/graph.h"
#include "partition/partition.h"

namespace kiln::convert {

using partition::Capability;

// State while one segment is converted: maps the program graph's values to the
// network's, positionally (never by name).
class ConversionContext {
 public:
  // `module`: the program the segment comes from (its signature says which
  // graph inputs are buffers and which outputs are their new values).
  ConversionContext(engine::Network& net, const ir::Module& module) : net_(net), module_(module) {}
  engine::Network& network() { return net_; }
  const ir::Module& module() const { return module_; }
  // Whether program value `v` is one of the engine's inputs (bound per call,
  // not a constant and not computed inside the engine).
  bool is_engine_input(const ir::Value* v) const;
  // How many nodes of the program read `v`, plus one if it is a program output.
  int readers(const ir::Value* v) const;
  // The network value standing for program value `v` (null when unmapped).
  ir::Value* value(const ir::Value* v) const;
  void map(const ir::Value* from, ir::Value* to) { map_[from] = to; }
  // `node`'s arguments with every operand replaced by its network value; an
  // error names the node and operand when one is unmapped.
  Expected<std::vector<ir::NamedArg>> map_args(const ir::Node& node) const;
  // Adds a layer for `op` with `args`; outputs take `like`'s names and types
  // and are mapped to `like`'s outputs.
  Expected<ir::Node*> add_layer(ir::OpKind op, std::vector<ir::NamedArg> args, const ir::Node& like);

 private:
  engine::Network& net_;
  const ir::Module& module_;
  std::map<const ir::Value*, ir::Value*> map_;
  mutable std::map<const ir::Value*, int> readers_;  // filled on first use
};

// Why `node`, which writes new rows into the 4-d cache `cache` along `dim`
// (index_copy and the like), cannot become an in-place kiln.cache_write, or
// an empty string when it can: the cache must be a mutable buffer of the
// program [batch, heads, max_seq, head_dim] with static batch and max_seq,
// written along dim 2, a direct input of the engine, read by nothing but this
// node, and the node's result must be the buffer's new value.
std::string in_place_write_refusal(const ir::Node& node, const ir::Value* cache, int64_t dim,
                                   const ConversionContext& ctx);

using CapabilityCheck = Capability (*)(const ir::Node& node, const engine::TargetInfo& target);
using ConvertFn = Status (*)(const ir::Node& node, ConversionContext& ctx);

struct Converter {
  ir::OpKind op = ir::OpKind::kUnknown;
  CapabilityCheck check = nullptr;  // op-specific attribute checks; null: none beyond the common ones
  ConvertFn convert = nullptr;
};

class ConverterRegistry {
 public:
  void add(Converter c);
  const Converter* find(ir::OpKind op) const;
  // Whether `node` can go into an engine for `target`, with the reason when
  // not: the op has a converter, the backend implements it, every tensor's
  // dtype is one the backend takes, sizes are static unless the backend takes
  // symbolic ones, no output size depends on tensor data, and the
  // converter's own check passes.
  Capability check(const ir::Node& node, const engine::TargetInfo& target) const;

 private:
  std::vector<Converter> table_;  // indexed by OpKind
};

// Registers kiln's converters: one per op of ops.def (one call per family).
void register_builtin_converters(ConverterRegistry& r);
// The process-wide registry with every built-in converter.
const ConverterRegistry& builtin_converters();

// Converts one engine segment of `m` into a network: the segment's inputs
// become the network's inputs (in order), its constants become constants
// bound by weight name, its outputs the network's outputs (in order).
Expected<engine::Network> convert_segment(const ir::Module& m, const partition::Segment& segment,
                                          const ConverterRegistry& registry, const engine::TargetInfo& target);

}  // namespace kiln::convert
