#include "program/engine_cache.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/section_file.h"
#include "kiln/settings.h"
#include "program/cache_files.h"

namespace kiln::program {

namespace {

constexpr std::string_view kMagic = "KILNCACH";
constexpr uint32_t kVersion = 1;

uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

}  // namespace

std::string cache_key_hash(std::string_view key_material) {
  // Two independent 64-bit lanes: FNV-1a, and a multiply-xorshift over 8-byte words.
  uint64_t a = 0xcbf29ce484222325ULL;
  for (unsigned char c : key_material) a = (a ^ c) * 0x100000001b3ULL;
  uint64_t b = 0x9e3779b97f4a7c15ULL ^ key_material.size();
  for (size_t i = 0; i < key_material.size(); i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, key_material.data() + i, std::min<size_t>(8, key_material.size() - i));
    b = mix64(b ^ w) + 0x9e3779b97f4a7c15ULL;
  }
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(mix64(a)),
                static_cast<unsigned long long>(b));
  return buf;
}

EngineCache::EngineCache(CacheOptions options) : options_(std::move(options)) {}

void EngineCache::count(const char* what) {
  if (!options_.dir.empty()) count_event(options_.dir, what);
}

void EngineCache::remember(const std::string& key_material, std::vector<uint8_t> plan) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (plan.size() > options_.max_memory_bytes) return;
  memory_bytes_ += plan.size();
  memory_.emplace_front(key_material, std::move(plan));
  while (memory_bytes_ > options_.max_memory_bytes && !memory_.empty()) {
    memory_bytes_ -= memory_.back().second.size();
    memory_.pop_back();
  }
}

Expected<std::vector<uint8_t>> parse_cache_entry(std::span<const uint8_t> bytes, std::string_view key_material,
                                                 std::string_view what) {
  KILN_ASSIGN_OR_RETURN(SectionFile file, SectionFile::parse(bytes, kMagic, kVersion, what));
  auto key = file.section("key");
  auto plan = file.section("plan");
  if (!key || !plan) return format_error(FileFault::kDanglingReference, std::string(what) + ": missing key or plan section");
  if (key->size() != key_material.size() || !std::equal(key->begin(), key->end(), key_material.begin()))
    return format_error(std::string(what) + ": its key differs from this segment's (a hash collision)");
  return std::vector<uint8_t>(plan->begin(), plan->end());
}

Expected<std::vector<uint8_t>> EngineCache::read_entry(const std::string& hash, const std::string& key_material,
                                                       const std::function<void(const std::string&)>& progress) {
  const std::string path = options_.dir + "/" + hash + kEngineEntrySuffix;
  auto bytes = read_whole_file(path);
  if (!bytes) return not_found("no entry");
  auto discard = [&](const std::string& why) -> Status {
    if (progress) progress("discarding cache entry " + hash + ": " + why);
    std::remove(path.c_str());
    count("discarded");
    return not_found("discarded");
  };
  auto parsed = parse_cache_entry(*bytes, key_material, path);
  if (!parsed) return discard(parsed.status().message());
  std::vector<uint8_t> out = std::move(*parsed);
  record_use(options_.dir, hash);
  count("hits");
  return out;
}

Status EngineCache::write_entry(const std::string& hash, const std::string& key_material,
                                const std::vector<uint8_t>& plan) {
  SectionFileWriter w(kMagic, kVersion);
  KILN_TRY(w.add("key", std::vector<uint8_t>(key_material.begin(), key_material.end())));
  KILN_TRY(w.add("plan", plan));
  KILN_TRY(w.write(options_.dir + "/" + hash + kEngineEntrySuffix));
  record_new(options_.dir, hash);
  return Status::ok();
}

void evict_cache_dir(const std::string& dir, uint64_t max_bytes) {
  // A writer killed an hour ago is not coming back for its temporary files.
  sweep_leftovers(dir, int64_t{3600} * 1000);
  auto stats = EngineCache::inspect(dir);
  if (!stats) return;
  uint64_t total = stats->bytes;
  // Least recently used last in the list.
  for (auto it = stats->entries.rbegin(); it != stats->entries.rend() && total > max_bytes; ++it) {
    remove_entry(dir, it->key, it->kind == "program");
    total -= it->bytes;
  }
}

Expected<std::vector<uint8_t>> EngineCache::get_or_build(const std::string& key_material,
                                                         const std::function<Expected<std::vector<uint8_t>>()>& build,
                                                         const std::function<void(const std::string&)>& progress,
                                                         bool* from_cache) {
  *from_cache = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = memory_.begin(); it != memory_.end(); ++it)
      if (it->first == key_material) {
        memory_.splice(memory_.begin(), memory_, it);
        *from_cache = true;
        return memory_.front().second;
      }
  }
  Status dir_ok = options_.dir.empty() ? Status::ok() : make_dirs(options_.dir);
  if (options_.dir.empty() || !dir_ok) {
    // A cache that cannot be used never stops a build: say so and build.
    if (!dir_ok && progress) progress("engine cache not used: " + dir_ok.message());
    KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> plan, build());
    remember(key_material, plan);
    return plan;
  }
  const std::string hash = cache_key_hash(key_material);
  std::vector<uint8_t> plan;
  {
    // One builder per key across processes: the others wait here and then read its entry.
    FileLock lock(options_.dir + "/" + hash + ".lock");
    auto cached = read_entry(hash, key_material, progress);
    if (cached) {
      *from_cache = true;
      plan = std::move(*cached);
    } else {
      KILN_ASSIGN_OR_RETURN(plan, build());
      count("misses");
      if (Status s = write_entry(hash, key_material, plan); !s && progress)
        progress("engine cache: could not store the plan: " + s.message());
    }
  }
  if (!*from_cache) evict_cache_dir(options_.dir, options_.max_disk_bytes);
  remember(key_material, plan);
  return plan;
}

Expected<CacheDirStats> EngineCache::inspect(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return not_found("no cache directory '" + dir + "': " + std::strerror(errno));
  CacheDirStats out;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const std::string& n : names) {
    const bool engine = n.size() == 32 + std::strlen(kEngineEntrySuffix) && n.substr(32) == kEngineEntrySuffix;
    const bool program = n.size() == 32 + std::strlen(kProgramEntrySuffix) && n.substr(32) == kProgramEntrySuffix;
    if (!(engine || program) || !is_hash_name(n.substr(0, 32))) continue;
    CacheEntryInfo e;
    e.key = n.substr(0, 32);
    e.kind = engine ? "engine" : "program";
    struct stat st {};
    if (::stat((dir + "/" + n).c_str(), &st) != 0) continue;
    e.bytes = static_cast<uint64_t>(st.st_size);
    const nlohmann::json use = read_json(dir + "/" + e.key + kUseSuffix);
    e.created = json_int(use, "created");
    e.last_use = use.contains("last_use") ? json_int(use, "last_use") : static_cast<int64_t>(st.st_mtime) * 1000;
    e.hits = json_int(use, "hits");
    if (program) {
      // The program itself is a plain .kiln file; its key is beside it.
      const nlohmann::json meta = read_json(dir + "/" + e.key + kProgramMetaSuffix);
      auto key = meta.find("key_hex");
      e.summary = "(no key record: unusable)";
      if (key != meta.end() && key->is_string()) {
        // The key's first line, from its hex record.
        const std::string& h = key->get_ref<const std::string&>();
        std::string text;
        auto nibble = [](char c) {
          return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        };
        for (size_t i = 0; i + 1 < h.size(); i += 2) {
          const int hi = nibble(h[i]), lo = nibble(h[i + 1]);
          if (hi < 0 || lo < 0 || hi * 16 + lo == '\n') break;
          text += static_cast<char>(hi * 16 + lo);
        }
        e.summary = text;
      }
    } else if (auto bytes = read_whole_file(dir + "/" + n)) {
      if (auto f = SectionFile::parse(*bytes, kMagic, kVersion, n)) {
        if (auto key = f->section("key")) {
          std::string text(key->begin(), key->end());
          e.summary = text.substr(0, text.find('\n'));
        }
      } else {
        e.summary = "(damaged: " + f.status().message() + ")";
      }
    }
    out.bytes += e.bytes;
    out.entries.push_back(std::move(e));
  }
  std::sort(out.entries.begin(), out.entries.end(), [](const CacheEntryInfo& a, const CacheEntryInfo& b) {
    return a.last_use != b.last_use ? a.last_use > b.last_use : a.key < b.key;
  });
  const nlohmann::json stats = read_json(dir + "/stats.json");
  out.hits = json_int(stats, "hits");
  out.misses = json_int(stats, "misses");
  out.discarded = json_int(stats, "discarded");
  out.program_hits = json_int(stats, "program_hits");
  out.program_misses = json_int(stats, "program_misses");
  return out;
}

std::shared_ptr<EngineCache> engine_cache_for(const std::string& dir) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<EngineCache>>* caches =
      new std::map<std::string, std::shared_ptr<EngineCache>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& c = (*caches)[dir];
  if (!c) {
    CacheOptions o;
    o.dir = dir;
    c = std::make_shared<EngineCache>(o);
  }
  return c;
}

}  // namespace kiln::program

namespace kiln {

std::string default_cache_dir() { return settings().cache_dir; }

Expected<CacheDirStats> inspect_cache(const std::string& dir) { return program::EngineCache::inspect(dir); }

}  // namespace kiln
