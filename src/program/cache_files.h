// The files of a cache directory, shared by the engine cache (one entry per
// engine plan) and the program cache (one entry per compiled program):
// per-key locks, atomic writes, use records, counters and eviction.
//
// Every entry is named by 32 hex digits (its key's hash) and a suffix:
//   HASH.kce         an engine plan entry (engine_cache.h)
//   HASH.kcp         a compiled program, byte for byte the .kiln file
//   HASH.kcm         the program entry's key, digest and summary (JSON)
//   HASH.use         last use (milliseconds since the epoch), creation and hits
//   HASH.lock        held while the key is read or built
//   stats.json       hits, misses and discarded entries of both kinds
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/status.h"

namespace kiln::program {

inline constexpr const char* kEngineEntrySuffix = ".kce";
inline constexpr const char* kProgramEntrySuffix = ".kcp";
inline constexpr const char* kProgramMetaSuffix = ".kcm";
inline constexpr const char* kUseSuffix = ".use";

// Holds an exclusive flock on a file for its lifetime (nothing when the file cannot be opened).
class FileLock {
 public:
  explicit FileLock(const std::string& path);
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

 private:
  int fd_ = -1;
};

// A name for a temporary file beside `path` (PATH.tmp.PID.N), unique in this
// process and among processes; sweep_leftovers knows the pattern.
std::string temporary_name(const std::string& path);

// Creates `dir` and its parents.
Status make_dirs(const std::string& dir);
Expected<std::vector<uint8_t>> read_whole_file(const std::string& path);
// Writes `text` to `path` through a temporary file and a rename (silently
// nothing when it cannot: these records only order eviction and count).
void write_atomically(const std::string& path, const std::string& text);
// The JSON object in `path`; an empty object when it is missing or damaged.
nlohmann::json read_json(const std::string& path);
int64_t json_int(const nlohmann::json& j, const char* key);
// Milliseconds since the epoch.
int64_t now_ms();
bool is_hash_name(const std::string& s);

// Adds one to counter `what` in DIR/stats.json.
void count_event(const std::string& dir, const char* what);
// Records a use of entry `hash` (a hit): last use now, one more hit.
void record_use(const std::string& dir, const std::string& hash);
// Records a new entry `hash`: created and last used now, no hits.
void record_new(const std::string& dir, const std::string& hash);
// Removes what writers killed mid-way leave in `dir` once it is older than
// `age_ms`: temporary files (NAME.tmp.PID.N), and key and use records whose
// entry is gone.
void sweep_leftovers(const std::string& dir, int64_t age_ms);

// Removes the files of entry `hash` of one kind, and its use record.
void remove_entry(const std::string& dir, const std::string& hash, bool program);

}  // namespace kiln::program
