// The program cache: whole compiled programs kept on disk, so that compiling
// the same .pt2 files again with the same options for the same device takes
// the stored .kiln instead of reading, lowering, building and saving.
//
// Key: kiln's version and the file it runs from (size, modification time:
// another build of kiln is another key), the program file format, the
// backend's identity told without starting its device (quick_identity(); the
// full identity() where that is empty), every compile setting, and each
// source's method name and content digest (SHA-256, content_digest). A hit
// requires the stored key to match byte for byte, and the stored program's
// bytes to match the digest recorded when it was stored: a cached program
// that changed since (even into another valid program) is discarded and
// rebuilt, never used.
//
// Entries live in the engine cache's directory (cache_files.h lists the
// files), under its size cap and least-recently-used eviction. The program is
// placed at the output as a hard link to the entry where the file system
// allows it (no copy of a 100 MB file), else as a copy; kiln writes files
// by rename, so writing the output again never writes into the entry.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "kiln/status.h"
#include "program/engine_cache.h"

namespace kiln::program {

// One source of a program: a method name and the .pt2 file it is compiled from.
struct ProgramSource {
  std::string method;
  std::string path;
};

// The key material (see above) of compiling `sources` with `settings` (every
// compile setting as text, in a fixed order) for `backend`. Reads and
// digests every source; kNotFound / kIo naming a source that cannot be read.
Expected<std::string> program_cache_key(const std::vector<ProgramSource>& sources, const std::string& settings,
                                        const engine::Backend& backend);

class ProgramCache {
 public:
  // `options.dir` names the directory (created when missing); its size cap applies.
  explicit ProgramCache(CacheOptions options) : options_(std::move(options)) {}

  // Puts the program for `key_material` at `out`: the cached one when the
  // entry is whole, else the one `compile` writes (to a private name beside
  // `out`, which is stored and then renamed to `out`, so that nothing another
  // process writes to `out` meanwhile can be stored under this key). One
  // process compiles a key at a time: another waits for it and takes its
  // entry. `out` gets the current time either way (a placed link shares the
  // entry's file). `progress` (may be empty) hears about hits and discarded
  // entries; a cache that cannot store never fails the compile.
  //   compile: writes the program to the path it is given; its summary
  //   from_cache: set to whether `out` came from the cache
  // Returns the program's summary, or `compile`'s error.
  using Compile = std::function<Expected<ProgramSummary>(const std::string& path)>;
  Expected<ProgramSummary> place(const std::string& key_material, const std::string& out, const Compile& compile,
                                 const std::function<void(const std::string&)>& progress, bool* from_cache);

 private:
  Expected<ProgramSummary> fetch(const std::string& hash, const std::string& key_material, const std::string& out,
                                 const std::function<void(const std::string&)>& progress);
  Status store(const std::string& hash, const std::string& key_material, const std::string& written,
               const ProgramSummary& summary);

  CacheOptions options_;
};

}  // namespace kiln::program
