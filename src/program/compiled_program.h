// A compiled program: the lowered module, cut into segments in execution
// order, each an engine (a plan built by a backend) or fallback nodes run by
// the reference interpreter. Saved as a .kiln file (kiln_file.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/backend.h"
#include "ir/graph.h"
#include "partition/partition.h"
#include "program/engine_cache.h"

namespace kiln::program {

struct SegmentRecord {
  partition::SegmentKind kind = partition::SegmentKind::kFallback;
  std::string backend;               // engine segments: the backend that built `plan`
  std::vector<uint8_t> plan;         // engine segments: the engine plan
  std::vector<int> nodes;            // indices into module.graph.nodes(); fallback segments run these
  std::vector<int> inputs;           // value ids in module.graph, bound by position to the engine's inputs
  std::vector<int> outputs;          // value ids in module.graph, bound by position to the engine's outputs
  std::vector<std::string> reasons;  // fallback segments: per node, why it is not in an engine
  bool from_cache = false;           // engine segments: the plan came from the engine cache (not saved in .kiln)
};

// A method compiled for one size of a dynamic leading dimension (a padded
// batch bucket, for backends that build static shapes only): a call with
// fewer rows, inside [min, max], has its inputs padded to `size` rows and its
// outputs cut back (runtime/session.cc). Only programs whose output rows
// depend on the same input rows alone get buckets (lowering::check_batch_separable).
struct PaddedBatch {
  std::string symbol;
  int64_t size = 0, min = 0, max = 0;
  std::vector<int> inputs;              // user inputs (call order) whose dimension 0 the symbol sizes
  std::vector<int64_t> output_factors;  // per graph output: c where its leading size is symbol * c; 0: kept whole
};

struct CompiledProgram {
  ir::Module module;  // lowered; graph value ids are dense (canonical) so segments can name them
  std::string device;
  std::vector<SegmentRecord> segments;
  std::optional<PaddedBatch> padded;
};

// The method that holds shape profile k of method `name`: `name` itself for
// profile 0, else "name@k" (see CompileOptions::shapes).
inline std::string profile_method_name(std::string_view name, size_t k) {
  return k == 0 ? std::string(name) : std::string(name) + "@" + std::to_string(k);
}

// One named entry point of a program: "forward" for a single exported
// program; prefill and decode for a decoder compiled from two exports.
struct CompiledMethod {
  std::string name;
  CompiledProgram program;
};

// How one mutated buffer gets its new value (invariant 3 of the design).
struct BufferWrite {
  std::string buffer;     // fqn
  int output = 0;         // index of its buffer_mutation among the graph outputs
  int segment = -1;       // the segment computing the new value (-1: the buffer is returned unchanged)
  bool in_place = false;  // an engine writes it into the buffer's memory (plan alias); else copied back
};

// Every buffer mutation of `p`, in output order, classified from the engines'
// alias maps. kFormat (naming `what` and the segment) when an engine writes
// in place into something that is not that buffer, or a new value is computed
// by no segment: nothing is silently dropped.
Expected<std::vector<BufferWrite>> classify_buffer_writes(const CompiledProgram& p, std::string_view what);

// Backends built into this kiln: "cpu", "null" (and "cuda" where built).
const engine::BackendRegistry& builtin_backends();

}  // namespace kiln::program
