// The engine cache: built engine plans kept on disk and in memory, keyed by
// everything that changes a plan, so that compiling the same segment again
// (in this process or another) loads the plan instead of building it.
//
// Key: the caller's key material, a text holding the canonical segment
// network (layers, edges, attributes, constant names, shapes and dtypes),
// the backend and its device identity, the plan format version and every
// build setting. Its 128-bit hash names the entry; the entry stores the
// whole key material and a hit requires it to match byte for byte, so a
// hash collision can cost a rebuild but never give a wrong engine.
//
// Weights are not part of the key: plans never contain weights (constants
// are bound by name when a plan is loaded), so every plan is refittable and
// a model with new weights and the same structure reuses its plans.
//
// Levels: a disk cache (one checksummed section file per entry, written to
// a temporary file and renamed into place; a per-key lock file so that two
// processes building the same key build it once; a size cap with eviction of
// the least recently *used* entries) and an in-process cache of plan bytes
// (a size cap, least recently used first).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kiln/cache.h"
#include "kiln/status.h"

namespace kiln::program {

struct CacheOptions {
  std::string dir;                              // disk level; empty: memory only
  uint64_t max_disk_bytes = uint64_t{4} << 30;  // evict least recently used entries beyond this
  uint64_t max_memory_bytes = uint64_t{512} << 20;
};

// The 128-bit hash naming a key, as 32 hex digits.
std::string cache_key_hash(std::string_view key_material);

// The plan stored in a cache entry's bytes, when the entry is whole (section
// file checks, checksums) and holds exactly `key_material`; kFormat naming
// `what` otherwise.
Expected<std::vector<uint8_t>> parse_cache_entry(std::span<const uint8_t> bytes, std::string_view key_material,
                                                 std::string_view what);

class EngineCache {
 public:
  explicit EngineCache(CacheOptions options);

  // The plan for `key_material`: from memory, else from disk, else built by
  // `build` and stored in both. `progress` (may be empty) hears about
  // discarded entries. `*from_cache` says whether the plan was not built.
  Expected<std::vector<uint8_t>> get_or_build(const std::string& key_material,
                                              const std::function<Expected<std::vector<uint8_t>>()>& build,
                                              const std::function<void(const std::string&)>& progress,
                                              bool* from_cache);

  // Every disk entry (engine plans and whole programs) with its size, last
  // use and hits, and the directory's totals.
  static Expected<CacheDirStats> inspect(const std::string& dir);

 private:
  Expected<std::vector<uint8_t>> read_entry(const std::string& hash, const std::string& key_material,
                                            const std::function<void(const std::string&)>& progress);
  Status write_entry(const std::string& hash, const std::string& key_material, const std::vector<uint8_t>& plan);
  void remember(const std::string& key_material, std::vector<uint8_t> plan);
  void count(const char* what);

  CacheOptions options_;
  std::mutex mutex_;
  std::list<std::pair<std::string, std::vector<uint8_t>>> memory_;  // most recently used first
  uint64_t memory_bytes_ = 0;
};

// Removes the least recently used entries of `dir` (both kinds) until the
// rest take at most `max_bytes`.
void evict_cache_dir(const std::string& dir, uint64_t max_bytes);

// The process-wide cache for `dir` (one per directory, so that compiles in one
// process share its memory level).
std::shared_ptr<EngineCache> engine_cache_for(const std::string& dir);

}  // namespace kiln::program
