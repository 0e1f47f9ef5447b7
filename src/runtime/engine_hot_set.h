// The hot set: deserialized engines kept loaded across programs in this
// process, the last level of the engine cache (after the disk and memory
// levels of plan bytes, engine_cache.h).
//
// Loading a program whose engine is already loaded (an earlier load of the
// same .kiln, the same model compiled again by kiln.compile, another method
// sharing the segment) reuses that engine: no second copy of its weights on
// the device, no second round of cuDNN plans, kernel modules and graph
// captures. An engine is reused only for the same backend, the same plan
// bytes (SHA-256) and, under every weight name its load asked for, a weight of
// the same dtype, sizes and bytes (the same memory, or compared byte for
// byte): new weights under the same structure load a new engine.
//
// Only backends whose engines hold a device copy of their weights take part
// (Backend::loads_onto_device); the CPU backend borrows weights in place, so
// its loads cost little. Engines loaded under other load settings
// (Backend::load_settings: KILN_CUDA_GRAPHS and the like) are not reused.
//
// Capacity: KILN_HOT_ENGINES engines (default 8; 0 turns the hot set off) and
// KILN_HOT_ENGINE_MB megabytes of their weights (default 4096; an engine with
// more is never kept), least recently used out first. An engine that leaves
// the hot set lives on while a program still uses it; one that no program
// uses any more holds its device memory until it leaves.
//
// Programs that share an engine run one call at a time on it (an engine has
// one arena). A server that loads one program several times to run them
// side by side wants separate engines: KILN_HOT_ENGINES=0.
//
// Loads go one at a time through the hot set (so that two threads loading one
// program load it once).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/backend.h"

namespace kiln::runtime {

class EngineHotSet {
 public:
  // The process-wide hot set (capacity from KILN_HOT_ENGINES).
  static EngineHotSet& instance();
  explicit EngineHotSet(size_t capacity, uint64_t max_weight_bytes = uint64_t{4096} << 20)
      : capacity_(capacity), max_bytes_(max_weight_bytes) {}

  // An engine for `plan` with `weights`: a kept one when backend, plan and
  // weights match, else a new one from backend.load(plan, weights, what),
  // which is then kept (for backends that load onto a device, when the
  // capacity is not 0). `*reused` says which.
  Expected<std::shared_ptr<engine::Engine>> load(const engine::Backend& backend, std::span<const uint8_t> plan,
                                                 const engine::WeightLookup& weights, std::string_view what,
                                                 bool* reused);

  void set_capacity(size_t capacity, uint64_t max_weight_bytes = uint64_t{4096} << 20);
  struct Stats {
    int64_t reused = 0, loaded = 0;
    size_t kept = 0;
    uint64_t kept_bytes = 0;  // weights of the kept engines
  };
  Stats stats() const;

 private:
  struct Entry {
    std::string backend, settings, plan_digest;
    uint64_t bytes = 0;  // of its weights
    std::vector<std::pair<std::string, Tensor>> weights;  // every weight the load asked for
    std::shared_ptr<engine::Engine> engine;
  };
  void trim();

  mutable std::mutex mutex_;
  size_t capacity_;
  uint64_t max_bytes_;
  std::list<Entry> entries_;  // most recently loaded or reused first
  Stats stats_;
};

}  // namespace kiln::runtime
