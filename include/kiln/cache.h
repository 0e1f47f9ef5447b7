// Compiling programs to files through kiln's caches, and the caches on disk.
//
// A disk cache directory holds engine plans (keyed by a segment's IR, its
// weights' fingerprints, the backend's identity and the build settings) and
// whole compiled programs (keyed by the sources' bytes, every compile setting
// and the backend's identity): a hit is always the program or plan a compile
// would build here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/compiler.h"
#include "kiln/status.h"

namespace kiln {

// The default disk cache directory: $KILN_CACHE_DIR, else
// $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln (empty when none is set).
std::string default_cache_dir();

// One entry of a cache directory.
struct CacheEntryInfo {
  std::string key;   // 32 hex digits
  std::string kind;  // "engine" (a plan) or "program" (a whole compiled program)
  uint64_t bytes = 0;
  int64_t created = 0, last_use = 0;  // milliseconds since the epoch
  int64_t hits = 0;
  std::string summary;  // first line of the key material (backend, device)
};

struct CacheDirStats {
  std::vector<CacheEntryInfo> entries;          // most recently used first
  int64_t hits = 0, misses = 0, discarded = 0;  // engine plans (discarded: damaged entries of both kinds)
  int64_t program_hits = 0, program_misses = 0;
  uint64_t bytes = 0;
};

// The entries and counters of the cache in `dir` (kNotFound when it is no
// cache directory).
Expected<CacheDirStats> inspect_cache(const std::string& dir);

// What a compiled program holds; kept with a cached program so that a hit
// reports it without reading the program.
struct ProgramSummary {
  std::vector<std::string> methods;
  int64_t segments = 0, engines = 0, plan_bytes = 0, fallback_nodes = 0;
  bool operator==(const ProgramSummary&) const = default;
};

struct CompileResult {
  ProgramSummary summary;
  int64_t engines_from_cache = 0;   // engine plans the engine cache gave (all, for a whole cached program)
  bool from_program_cache = false;  // the program itself came from the program cache
};

// Compiles `models` with `options` and writes the program to `out`:
//   models: one entry with an empty name (one model: a .pt2, compiled as
//           kiln::compile does, or a .kiln program, written again), or one
//           named method per .pt2 (kiln::compile_methods)
// With options.compile.cache_dir set, .pt2 sources go through the program
// cache there: the same sources compiled with the same settings for the
// same backend place the cached program at `out` without compiling; a miss
// compiles, writes and stores it. `out` is written whole or not at all.
Expected<CompileResult> compile_to_file(const std::vector<MethodFile>& models, const LoadOptions& options,
                                        const std::string& out);

}  // namespace kiln
