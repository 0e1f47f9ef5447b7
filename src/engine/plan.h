// The serialized engine plan: what an engine builder writes and a backend's
// load() reads. A plan is a section file (base/section_file.h) with magic
// "KILNPLAN":
//   meta     JSON: backend, engine inputs count, constant names (weights by
//            name: never copied into the plan), kernel choice per layer, and
//            the aliasing map (engine outputs written in place into inputs)
//   layers   the layer graph as IR text (ir/printer.h)
//   memory   JSON: the memory plan (arena offsets, last uses)
//   <backend>.*  backend-specific sections (e.g. compiled kernels)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/memory_plan.h"
#include "engine/network.h"
#include "kiln/status.h"

namespace kiln::engine {

constexpr std::string_view kPlanMagic = "KILNPLAN";
// 2: CUDA plan constants may pad a filter's channels (padded_channels), which
// a reader of version 1 would not know to do.
constexpr uint32_t kPlanVersion = 2;

struct PlanAlias {
  int output = 0;  // engine output index
  int input = 0;   // engine input index it is written into, in place
  bool operator==(const PlanAlias&) const = default;
};

struct EnginePlan {
  std::string backend;
  Network network;
  MemoryPlan memory;
  std::vector<PlanAlias> aliases;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> extra;  // backend sections, names "<backend>.<what>"
};

// The in-place writes of `net`: every engine output made by a
// kiln.cache_write layer, with the engine input (the caller's cache) it
// writes into. kInternal when a cache_write does not write into an engine
// input or its result is not an engine output (the write would be lost or
// land in the engine's own memory).
Expected<std::vector<PlanAlias>> in_place_aliases(const Network& net);

// Compacts the network's graph (ir::Graph::compact) so that value ids are
// dense and equal to those a loaded plan will have (memory plans index by id).
Status canonicalize(Network& net);

std::vector<uint8_t> serialize_plan(const EnginePlan& plan);

// Parses and validates a plan: section file checks, JSON shapes, the layer
// graph, counts and references. `backend` must match the plan's backend.
// `what` names the plan in messages.
Expected<EnginePlan> deserialize_plan(std::span<const uint8_t> bytes, std::string_view backend, std::string_view what);

}  // namespace kiln::engine
