// cuBLASLt, loaded when the CUDA backend first uses it rather than when the
// process starts.
//
// libcublasLt's static initializers take 60-80 ms of every process that
// links it, GPU or not (measured on the development machine and on an H200
// host): more than a warm `kiln compile` should take in all. kiln therefore
// does not link it. The functions the backend calls are defined here with the
// header's own declarations and forward to the library, opened with dlopen on
// the first call. A machine without the library gets
// CUBLAS_STATUS_NOT_INITIALIZED from every call, and cublaslt_loaded() says
// why in words.
//
// Which file is opened is decided here before the dynamic loader's search is
// asked, so that cublaslt_path() can name it without loading it (a cache key
// made without starting anything must still change when the library does;
// where only the loader's search finds it, that key is not made quickly).
#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/cuda_support.h"
#include "kiln/settings.h"

namespace kiln::cuda {

namespace {

const std::string& soname() {
  static const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  return name;
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The directory of the loaded library whose file name starts with `prefix`.
std::string loaded_library_dir(const char* prefix) {
  struct Search {
    const char* prefix;
    std::string dir;
  } search{prefix, {}};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        const std::string path = info->dlpi_name ? info->dlpi_name : "";
        const size_t slash = path.rfind('/');
        if (slash == std::string::npos || path.compare(slash + 1, std::strlen(s->prefix), s->prefix) != 0) return 0;
        s->dir = path.substr(0, slash);
        return 1;
      },
      &search);
  return search.dir;
}

struct Library {
  void* handle = nullptr;
  std::string error;
};

const Library& library() {
  static const Library lib = [] {
    Library l;
    // Where cublaslt_path() finds no file, the dynamic loader's own search
    // (its cache, the default directories) may still.
    std::string path = cublaslt_path();
    if (path.empty()) path = soname();
    l.handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!l.handle) {
      const char* e = ::dlerror();
      l.error = "cannot load " + path + (e ? std::string(": ") + e : std::string()) +
                " (looked in LD_LIBRARY_PATH, beside the loaded NVRTC and cuDNN, where kiln was built and the "
                "loader's search path; set KILN_CUBLASLT to the library's file)";
    }
    return l;
  }();
  return lib;
}

void* symbol(const char* name) {
  const Library& l = library();
  return l.handle ? ::dlsym(l.handle, name) : nullptr;
}

}  // namespace

std::string cublaslt_path() {
  const Settings::Cuda c = settings().cuda;
  if (!c.cublaslt.empty()) return c.cublaslt;
  std::vector<std::string> dirs;
  if (!c.library_path.empty())
    for (std::string rest = c.library_path; !rest.empty();) {
      const size_t colon = rest.find(':');
      if (colon > 0) dirs.push_back(rest.substr(0, colon));
      rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
    }
  // The toolkit that kiln's NVRTC and cuDNN come from holds the matching cuBLASLt.
  for (const char* prefix : {"libnvrtc.so", "libcudnn.so"})
    if (std::string d = loaded_library_dir(prefix); !d.empty()) dirs.push_back(d);
#ifdef KILN_CUBLASLT_DIR
  dirs.push_back(KILN_CUBLASLT_DIR);
#endif
  for (const std::string& d : dirs)
    if (is_file(d + "/" + soname())) return d + "/" + soname();
  return "";
}

Status cublaslt_loaded() {
  const Library& l = library();
  if (l.handle) return Status::ok();
  return unsupported("cuBLASLt is not usable here: " + l.error);
}

}  // namespace kiln::cuda

// Each forwarder resolves its function once.
#define KILN_CUBLASLT_FORWARD(name, params, args)                                                       \
  cublasStatus_t CUBLASWINAPI name params {                                                             \
    static const auto fn = reinterpret_cast<decltype(&name)>(::kiln::cuda::symbol(#name));           \
    return fn ? fn args : CUBLAS_STATUS_NOT_INITIALIZED;                                                \
  }

extern "C" {

size_t CUBLASWINAPI cublasLtGetVersion(void) {
  static const auto fn = reinterpret_cast<decltype(&cublasLtGetVersion)>(::kiln::cuda::symbol("cublasLtGetVersion"));
  return fn ? fn() : 0;
}

KILN_CUBLASLT_FORWARD(cublasLtCreate, (cublasLtHandle_t * handle), (handle))
KILN_CUBLASLT_FORWARD(cublasLtDestroy, (cublasLtHandle_t handle), (handle))
KILN_CUBLASLT_FORWARD(cublasLtMatmul,
                      (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                       cublasLtMatrixLayout_t a_desc, const void* b, cublasLtMatrixLayout_t b_desc, const void* beta,
                       const void* c, cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                       const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes, cudaStream_t stream),
                      (handle, desc, alpha, a, a_desc, b, b_desc, beta, c, c_desc, d, d_desc, algo, workspace,
                       workspace_bytes, stream))
KILN_CUBLASLT_FORWARD(cublasLtMatrixLayoutCreate,
                      (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),
                      (layout, type, rows, cols, ld))
KILN_CUBLASLT_FORWARD(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))
KILN_CUBLASLT_FORWARD(cublasLtMatrixLayoutSetAttribute,
                      (cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                       size_t bytes),
                      (layout, attr, buf, bytes))
KILN_CUBLASLT_FORWARD(cublasLtMatmulDescCreate,
                      (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale),
                      (desc, compute, scale))
KILN_CUBLASLT_FORWARD(cublasLtMatmulDescInit_internal,
                      (cublasLtMatmulDesc_t desc, size_t size, cublasComputeType_t compute, cudaDataType_t scale),
                      (desc, size, compute, scale))
KILN_CUBLASLT_FORWARD(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
KILN_CUBLASLT_FORWARD(cublasLtMatmulDescSetAttribute,
                      (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t bytes),
                      (desc, attr, buf, bytes))
KILN_CUBLASLT_FORWARD(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))
KILN_CUBLASLT_FORWARD(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
KILN_CUBLASLT_FORWARD(cublasLtMatmulPreferenceSetAttribute,
                      (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                       size_t bytes),
                      (pref, attr, buf, bytes))
KILN_CUBLASLT_FORWARD(cublasLtMatmulAlgoGetHeuristic,
                      (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_desc,
                       cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
                       cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
                       int* returned),
                      (handle, desc, a_desc, b_desc, c_desc, d_desc, pref, requested, results, returned))
KILN_CUBLASLT_FORWARD(cublasLtMatmulAlgoCheck,
                      (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_desc,
                       cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
                       const cublasLtMatmulAlgo_t* algo, cublasLtMatmulHeuristicResult_t* result),
                      (handle, desc, a_desc, b_desc, c_desc, d_desc, algo, result))

}  // extern "C"
