#include "program/cache_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace kiln::program {

FileLock::FileLock(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ >= 0) {
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

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

Expected<std::vector<uint8_t>> read_whole_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("no file '" + path + "'");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return io_error("cannot read '" + path + "'");
  return bytes;
}

std::string temporary_name(const std::string& path) {
  static std::atomic<int> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = temporary_name(path);
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
  auto bytes = read_whole_file(path);
  if (!bytes) return nlohmann::json::object();
  auto j = nlohmann::json::parse(bytes->begin(), bytes->end(), nullptr, false);
  return j.is_object() ? j : nlohmann::json::object();
}

int64_t json_int(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool is_hash_name(const std::string& s) {
  return s.size() == 32 &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

void count_event(const std::string& dir, const char* what) {
  FileLock lock(dir + "/stats.lock");
  nlohmann::json j = read_json(dir + "/stats.json");
  j[what] = json_int(j, what) + 1;
  write_atomically(dir + "/stats.json", j.dump());
}

void record_use(const std::string& dir, const std::string& hash) {
  const std::string use_path = dir + "/" + hash + kUseSuffix;
  nlohmann::json use = read_json(use_path);
  use["hits"] = json_int(use, "hits") + 1;
  use["last_use"] = now_ms();
  if (!use.contains("created")) use["created"] = now_ms();
  write_atomically(use_path, use.dump());
}

void record_new(const std::string& dir, const std::string& hash) {
  const int64_t now = now_ms();
  write_atomically(dir + "/" + hash + kUseSuffix,
                   nlohmann::json({{"created", now}, {"last_use", now}, {"hits", 0}}).dump());
}

void sweep_leftovers(const std::string& dir, int64_t age_ms) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  const int64_t now = now_ms();
  auto old = [&](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 &&
           now - (static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000) > age_ms;
  };
  auto exists = [&](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
  };
  for (const std::string& n : names) {
    const std::string path = dir + "/" + n;
    const bool temporary = n.find(".tmp.") != std::string::npos;
    bool orphan = false;
    if (n.size() > 32 && is_hash_name(n.substr(0, 32)) && !temporary) {
      const std::string base = dir + "/" + n.substr(0, 32), suffix = n.substr(32);
      if (suffix == kProgramMetaSuffix) orphan = !exists(base + kProgramEntrySuffix);
      if (suffix == kUseSuffix) orphan = !exists(base + kProgramEntrySuffix) && !exists(base + kEngineEntrySuffix);
    }
    if ((temporary || orphan) && old(path)) std::remove(path.c_str());
  }
}

void remove_entry(const std::string& dir, const std::string& hash, bool program) {
  if (program) {
    std::remove((dir + "/" + hash + kProgramEntrySuffix).c_str());
    std::remove((dir + "/" + hash + kProgramMetaSuffix).c_str());
  } else {
    std::remove((dir + "/" + hash + kEngineEntrySuffix).c_str());
  }
  std::remove((dir + "/" + hash + kUseSuffix).c_str());
}

}  // namespace kiln::program
