#include "environment.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace kiln {

namespace {

std::string text(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool is(const char* name, const char* value) { return text(name) == value; }

// A non-negative whole number, else `fallback`.
uint64_t count(const char* name, uint64_t fallback) {
  const std::string v = text(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  return *end == '\0' && n >= 0 ? static_cast<uint64_t>(n) : fallback;
}

}  // namespace

Settings settings_from_environment() {
  Settings s;
  if (std::string d = text("KILN_CACHE_DIR"); !d.empty()) {
    s.cache_dir = d;
  } else if (std::string x = text("XDG_CACHE_HOME"); !x.empty()) {
    s.cache_dir = x + "/kiln";
  } else if (std::string h = text("HOME"); !h.empty()) {
    s.cache_dir = h + "/.cache/kiln";
  }
  if (std::string v = text("KILN_SEED"); !v.empty()) s.seed = std::strtoull(v.c_str(), nullptr, 0);
  s.hot_engines = count("KILN_HOT_ENGINES", s.hot_engines);
  s.hot_engine_mb = count("KILN_HOT_ENGINE_MB", s.hot_engine_mb);
  Settings::Cuda& c = s.cuda;
  c.graphs = !is("KILN_CUDA_GRAPHS", "0");
  c.staging = !is("KILN_CUDA_STAGING", "0");
  c.early_launch = is("KILN_CUDA_PDL", "1");
  c.debug = is("KILN_CUDA_DEBUG", "1");
  c.profile = is("KILN_CUDA_PROFILE", "all") ? 2 : is("KILN_CUDA_PROFILE", "1") ? 1 : 0;
  c.trace = is("KILN_CUDA_TRACE", "2") ? 2 : is("KILN_CUDA_TRACE", "1") ? 1 : 0;
  c.shapes = text("KILN_CUDA_SHAPES");
  c.contexts = text("KILN_CUDA_CONTEXTS");
  c.shape_table = text("KILN_CUDA_SHAPE_TABLE");
  c.cublaslt = text("KILN_CUBLASLT");
  c.library_path = text("LD_LIBRARY_PATH");
  c.visible_devices_set = std::getenv("CUDA_VISIBLE_DEVICES") != nullptr;
  return s;
}

}  // namespace kiln
