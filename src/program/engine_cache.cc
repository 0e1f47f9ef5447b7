#include "program/engine_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/section_file.h"

namespace kiln::program {

namespace {

constexpr std::string_view kMagic = "KILNCACH";
constexpr uint32_t kVersion = 1;
constexpr const char* kEntrySuffix = ".kce";
constexpr const char* kUseSuffix = ".use";

// Holds an exclusive flock on a file for its lifetime (nothing when the file cannot be opened).
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }

 private:
  int fd_ = -1;
};

Status make_dirs(const std::string& dir) {
  std::string path;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || (dir[i] == '/' && i > 0)) {
      path = dir.substr(0, i);
      if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST)
        return io_error("cannot create cache directory '" + path + "': " + std::strerror(errno));
    }
  }
  return Status::ok();
}

Expected<std::vector<uint8_t>> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("no file '" + path + "'");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return io_error("cannot read '" + path + "'");
  return bytes;
}

// Writes `text` to `path` through a temporary file and a rename.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f) {
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
}

nlohmann::json read_json(const std::string& path) {
  auto bytes = read_file(path);
  if (!bytes) return nlohmann::json::object();
  auto j = nlohmann::json::parse(bytes->begin(), bytes->end(), nullptr, false);
  return j.is_object() ? j : nlohmann::json::object();
}

int64_t json_int(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Milliseconds since the epoch: last use is ordered finer than seconds.
int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool is_hash_name(const std::string& s) {
  return s.size() == 32 &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
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

std::string EngineCache::default_dir() {
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/kiln";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/kiln";
  return "";
}

EngineCache::EngineCache(CacheOptions options) : options_(std::move(options)) {}

void EngineCache::count(const char* what) {
  if (options_.dir.empty()) return;
  FileLock lock(options_.dir + "/stats.lock");
  nlohmann::json j = read_json(options_.dir + "/stats.json");
  j[what] = json_int(j, what) + 1;
  write_atomically(options_.dir + "/stats.json", j.dump());
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
  const std::string path = options_.dir + "/" + hash + kEntrySuffix;
  auto bytes = read_file(path);
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
  const std::string use_path = options_.dir + "/" + hash + kUseSuffix;
  nlohmann::json use = read_json(use_path);
  use["hits"] = json_int(use, "hits") + 1;
  use["last_use"] = now_ms();
  if (!use.contains("created")) use["created"] = now_ms();
  write_atomically(use_path, use.dump());
  count("hits");
  return out;
}

Status EngineCache::write_entry(const std::string& hash, const std::string& key_material,
                                const std::vector<uint8_t>& plan) {
  SectionFileWriter w(kMagic, kVersion);
  KILN_TRY(w.add("key", std::vector<uint8_t>(key_material.begin(), key_material.end())));
  KILN_TRY(w.add("plan", plan));
  KILN_TRY(w.write(options_.dir + "/" + hash + kEntrySuffix));
  const int64_t now = now_ms();
  write_atomically(options_.dir + "/" + hash + kUseSuffix,
                   nlohmann::json({{"created", now}, {"last_use", now}, {"hits", 0}}).dump());
  return Status::ok();
}

void EngineCache::evict_disk() {
  auto stats = inspect(options_.dir);
  if (!stats) return;
  uint64_t total = stats->bytes;
  // Least recently used last in the list.
  for (auto it = stats->entries.rbegin(); it != stats->entries.rend() && total > options_.max_disk_bytes; ++it) {
    std::remove((options_.dir + "/" + it->key + kEntrySuffix).c_str());
    std::remove((options_.dir + "/" + it->key + kUseSuffix).c_str());
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
  if (!*from_cache) evict_disk();
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
    if (n.size() != 32 + std::strlen(kEntrySuffix) || n.substr(32) != kEntrySuffix || !is_hash_name(n.substr(0, 32)))
      continue;
    CacheEntryInfo e;
    e.key = n.substr(0, 32);
    struct stat st {};
    if (::stat((dir + "/" + n).c_str(), &st) != 0) continue;
    e.bytes = static_cast<uint64_t>(st.st_size);
    const nlohmann::json use = read_json(dir + "/" + e.key + kUseSuffix);
    e.created = json_int(use, "created");
    e.last_use = use.contains("last_use") ? json_int(use, "last_use") : static_cast<int64_t>(st.st_mtime) * 1000;
    e.hits = json_int(use, "hits");
    if (auto bytes = read_file(dir + "/" + n)) {
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
