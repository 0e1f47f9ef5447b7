#include "program/program_cache.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>

#include "base/file_fingerprint.h"
#include "base/sha256.h"
#include "engine/plan.h"
#include "program/cache_files.h"
#include "program/kiln_file.h"

namespace kiln::program {

namespace {

// The file this kiln runs from (the executable, or the Python extension),
// told apart by its fingerprint: a rebuilt kiln of the same version
// must not take programs an earlier build lowered.
std::string own_file_fingerprint() {
  Dl_info info{};
  std::string path;
  if (::dladdr(reinterpret_cast<void*>(&own_file_fingerprint), &info) != 0 && info.dli_fname) {
    char real[PATH_MAX];
    if (::realpath(info.dli_fname, real)) path = real;
  }
  if (path.empty()) {
    char exe[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) path.assign(exe, static_cast<size_t>(n));
  }
  const std::string fingerprint = file_fingerprint(path);
  return fingerprint.empty() ? "unknown" : fingerprint;
}

// Copies the whole of file `in` to file `out`; false (errno set) on failure.
bool copy_fd(int in, int out) {
  for (;;) {
    ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, size_t{1} << 30, 0);
    if (n == 0) return true;
    if (n > 0) continue;
    if (errno == EINTR) continue;
    if (errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP) return false;
    // No in-kernel copy between these files: read and write.
    char buf[1 << 16];
    n = ::read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    for (ssize_t w = 0; w < n;) {
      const ssize_t k = ::write(out, buf + w, static_cast<size_t>(n - w));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        if (k == 0) errno = EIO;
        return false;
      }
      w += k;
    }
  }
}

// Makes `to` a name of the file `from` (a hard link), else a copy of it;
// either way through a temporary name and a rename, so `to` is never half written.
Status link_or_copy(const std::string& from, const std::string& to) {
  const std::string tmp = temporary_name(to);
  if (::link(from.c_str(), tmp.c_str()) != 0) {
    const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) return io_error("cannot read '" + from + "': " + std::strerror(errno));
    const int o = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (o < 0) {
      const int err = errno;
      ::close(in);
      return io_error("cannot write '" + to + "': cannot create '" + tmp + "': " + std::strerror(err));
    }
    bool ok = copy_fd(in, o);
    const int err = errno;
    ::close(in);
    if (::close(o) != 0) ok = false;
    if (!ok) {
      ::unlink(tmp.c_str());
      return io_error("copying '" + from + "' to '" + to + "' failed: " + std::strerror(err));
    }
  }
  if (::rename(tmp.c_str(), to.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return io_error("cannot write '" + to + "': renaming '" + tmp + "' to it failed: " + std::strerror(err));
  }
  // When `to` already was a name of the same file, rename did nothing and the temporary name stays.
  ::unlink(tmp.c_str());
  return Status::ok();
}

// The key material as the .kcm records it: hex, since it may hold bytes that
// are not UTF-8 (paths), which JSON strings cannot.
std::string key_record(const std::string& key_material) {
  return hex({reinterpret_cast<const uint8_t*>(key_material.data()), key_material.size()});
}

nlohmann::json summary_json(const ProgramSummary& s) {
  return {{"methods", s.methods},
          {"segments", s.segments},
          {"engines", s.engines},
          {"plan_bytes", s.plan_bytes},
          {"fallback_nodes", s.fallback_nodes}};
}

bool summary_from_json(const nlohmann::json& j, ProgramSummary& s) {
  if (!j.is_object()) return false;
  auto methods = j.find("methods");
  if (methods == j.end() || !methods->is_array()) return false;
  for (const auto& m : *methods) {
    if (!m.is_string()) return false;
    s.methods.push_back(m.get<std::string>());
  }
  for (auto [name, field] : {std::pair{"segments", &s.segments}, std::pair{"engines", &s.engines},
                             std::pair{"plan_bytes", &s.plan_bytes}, std::pair{"fallback_nodes", &s.fallback_nodes}}) {
    auto it = j.find(name);
    if (it == j.end() || !it->is_number_integer()) return false;
    *field = it->get<int64_t>();
  }
  return true;
}

}  // namespace

Expected<std::string> program_cache_key(const std::vector<ProgramSource>& sources, const std::string& settings,
                                        const engine::Backend& backend) {
  // The device is named while the sources are read (each takes about 10 ms for resnet50 on an H200 host).
  auto naming = std::async(std::launch::async, [&backend] {
    std::string identity = backend.quick_identity();
    return identity.empty() ? backend.identity() : identity;
  });
  std::vector<std::string> digests;
  for (const ProgramSource& s : sources) {
    auto digest = file_content_digest(s.path);
    if (!digest) {
      naming.wait();
      return std::move(digest).status();
    }
    digests.push_back(std::move(*digest));
  }
  const std::string identity = naming.get();
  std::string key = "kiln " + std::string(KILN_VERSION_STRING) + " program, backend " + identity +
                    ", program format " + std::to_string(kProgramVersion) + ", plan format " +
                    std::to_string(engine::kPlanVersion) + "\nkiln file " + own_file_fingerprint() + "\n" + settings;
  if (!key.empty() && key.back() != '\n') key += '\n';
  for (size_t i = 0; i < sources.size(); ++i) key += "method " + sources[i].method + " from sha256 " + digests[i] + "\n";
  return key;
}

Expected<ProgramSummary> ProgramCache::fetch(const std::string& hash, const std::string& key_material,
                                             const std::string& out,
                                             const std::function<void(const std::string&)>& progress) {
  const std::string& dir = options_.dir;
  const std::string entry = dir + "/" + hash + kProgramEntrySuffix;
  struct stat st {};
  if (::stat(entry.c_str(), &st) != 0) return not_found("no entry");
  auto discard = [&](const std::string& why) -> Status {
    if (progress) progress("discarding cached program " + hash + ": " + why);
    remove_entry(dir, hash, true);
    count_event(dir, "discarded");
    return not_found("discarded");
  };
  const nlohmann::json meta = read_json(dir + "/" + hash + kProgramMetaSuffix);
  auto key = meta.find("key_hex");
  auto digest = meta.find("digest");
  ProgramSummary summary;
  if (key == meta.end() || !key->is_string() || digest == meta.end() || !digest->is_string() ||
      !summary_from_json(meta.value("summary", nlohmann::json()), summary))
    return discard("its key record is missing or damaged");
  if (key->get_ref<const std::string&>() != key_record(key_material))
    return discard("its key differs from this compile's (a hash collision)");
  auto actual = file_content_digest(entry);
  if (!actual) return discard(actual.status().message());
  if (*actual != digest->get_ref<const std::string&>())
    return discard("its bytes changed since it was stored (SHA-256 " + actual->substr(0, 16) + "..., stored " +
                   digest->get<std::string>().substr(0, 16) + "...)");
  if (Status s = link_or_copy(entry, out); !s) {
    if (::stat(entry.c_str(), &st) != 0) return not_found("evicted while it was read");
    return s;
  }
  // The output is new now, whatever its file's first compile was (build tools order files by time).
  ::utimes(out.c_str(), nullptr);
  record_use(dir, hash);
  count_event(dir, "program_hits");
  return summary;
}

Status ProgramCache::store(const std::string& hash, const std::string& key_material, const std::string& written,
                           const ProgramSummary& summary) {
  const std::string& dir = options_.dir;
  const std::string entry = dir + "/" + hash + kProgramEntrySuffix;
  // `written` is this compile's own file (no other process writes that name):
  // its digest is taken before it is linked anywhere.
  KILN_ASSIGN_OR_RETURN(std::string digest, file_content_digest(written));
  KILN_TRY(link_or_copy(written, entry));
  nlohmann::json meta = {
      {"key_hex", key_record(key_material)}, {"digest", digest}, {"summary", summary_json(summary)}};
  // Method names come from the command line and may not be UTF-8: they are only shown.
  write_atomically(dir + "/" + hash + kProgramMetaSuffix,
                   meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  record_new(dir, hash);
  return Status::ok();
}

Expected<ProgramSummary> ProgramCache::place(const std::string& key_material, const std::string& out,
                                             const Compile& compile,
                                             const std::function<void(const std::string&)>& progress,
                                             bool* from_cache) {
  *from_cache = false;
  if (Status s = make_dirs(options_.dir); !s) {
    if (progress) progress("program cache not used: " + s.message());
    return compile(out);
  }
  const std::string hash = cache_key_hash(key_material);
  ProgramSummary summary;
  {
    FileLock lock(options_.dir + "/" + hash + ".lock");
    const auto start = std::chrono::steady_clock::now();
    auto cached = fetch(hash, key_material, out, progress);
    if (cached) {
      *from_cache = true;
      if (progress)
        progress("the compiled program from the cache in " +
                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::steady_clock::now() - start)
                                    .count()) +
                 " ms (entry " + hash + ")");
      return cached;
    }
    if (cached.status().code() != ErrorCode::kNotFound) return cached.status();  // the output could not be written
    const std::string written = temporary_name(out);
    auto compiled = compile(written);
    if (!compiled) {
      ::unlink(written.c_str());
      return compiled;
    }
    summary = std::move(*compiled);
    count_event(options_.dir, "program_misses");
    if (Status s = store(hash, key_material, written, summary); !s && progress)
      progress("program cache: could not store the program: " + s.message());
    if (::rename(written.c_str(), out.c_str()) != 0) {
      const int err = errno;
      ::unlink(written.c_str());
      return io_error("cannot write '" + out + "': renaming '" + written + "' to it failed: " + std::strerror(err));
    }
  }
  evict_cache_dir(options_.dir, options_.max_disk_bytes);
  return summary;
}

}  // namespace kiln::program
