// The CUDA backend's identity without starting the CUDA runtime.
//
// Starting the runtime (cuInit) takes about 180 ms on an H200 host even with
// persistence mode on; NVML, the driver's management library, answers the
// same questions about the device in about 10 ms. A cache of whole compiled
// programs keys on this so that a hit costs less than starting the runtime.
//
// It must change whenever CudaBackend::identity() would. Where that cannot be
// told cheaply it is empty and the caller falls back to identity():
//   - NVML is missing or fails;
//   - CUDA_VISIBLE_DEVICES is set (which device CUDA picks is its business);
//   - the devices differ among themselves (which one CUDA would pick is not
//     known here), or one is in MIG mode (a slice of it is not the GPU NVML names);
//   - cuBLASLt's file cannot be named (its version needs it loaded, so the
//     file's size, modification time and inode stand for the version).
#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "backends/cuda/cuda_support.h"
#include "backends/cuda/nvrtc_compile.h"
#include "base/file_fingerprint.h"
#include "kiln/settings.h"

namespace kiln::cuda {

namespace {

// NVML's C interface, as its documentation gives it; only what is used here.
using NvmlDevice = struct NvmlDeviceOpaque*;
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*count)(unsigned*) = nullptr;
  NvmlReturn (*handle)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*capability)(NvmlDevice, int*, int*) = nullptr;
  NvmlReturn (*cores)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*mig_mode)(NvmlDevice, unsigned*, unsigned*) = nullptr;
  NvmlReturn (*driver)(char*, unsigned) = nullptr;
};

template <typename F>
bool resolve(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  return fn != nullptr;
}

// "NVIDIA H200 sm_90, 16896 CUDA cores, 1 device(s), driver 580.159", or empty.
std::string nvml_devices() {
  if (settings().cuda.visible_devices_set) return "";
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return "";
  Nvml n;
  std::string out;
  if (resolve(lib, "nvmlInit_v2", n.init) && resolve(lib, "nvmlShutdown", n.shutdown) &&
      resolve(lib, "nvmlDeviceGetCount_v2", n.count) && resolve(lib, "nvmlDeviceGetHandleByIndex_v2", n.handle) &&
      resolve(lib, "nvmlDeviceGetName", n.name) && resolve(lib, "nvmlDeviceGetCudaComputeCapability", n.capability) &&
      resolve(lib, "nvmlDeviceGetNumGpuCores", n.cores) && resolve(lib, "nvmlDeviceGetMigMode", n.mig_mode) &&
      resolve(lib, "nvmlSystemGetDriverVersion", n.driver) && n.init() == kNvmlSuccess) {
    unsigned count = 0;
    std::string first;
    bool alike = n.count(&count) == kNvmlSuccess && count > 0;
    for (unsigned i = 0; alike && i < count; ++i) {
      NvmlDevice d = nullptr;
      char name[96] = {};
      int major = 0, minor = 0;
      unsigned cores = 0, mig = 0, pending = 0;
      if (n.handle(i, &d) != kNvmlSuccess || n.name(d, name, sizeof name) != kNvmlSuccess ||
          n.capability(d, &major, &minor) != kNvmlSuccess || n.cores(d, &cores) != kNvmlSuccess) {
        alike = false;
        break;
      }
      // Devices without MIG answer "not supported"; one with MIG on is not described by its name.
      if (n.mig_mode(d, &mig, &pending) == kNvmlSuccess && mig != 0) alike = false;
      const std::string self = std::string(name) + " sm_" + std::to_string(major * 10 + minor) + ", " +
                               std::to_string(cores) + " CUDA cores";
      if (i == 0) first = self;
      alike = alike && self == first;
    }
    char driver[96] = {};
    if (alike && n.driver(driver, sizeof driver) == kNvmlSuccess)
      out = first + ", " + std::to_string(count) + " device(s) alike, driver " + driver;
    n.shutdown();
  }
  ::dlclose(lib);
  return out;
}

}  // namespace

std::string quick_identity() {
  const std::string devices = nvml_devices();
  const std::string cublaslt = file_fingerprint(cublaslt_path());
  if (devices.empty() || cublaslt.empty()) return "";
  return "cuda " + devices + "; cuBLASLt " + cublaslt + ", cuDNN " + std::to_string(cudnnGetVersion()) + ", NVRTC " +
         nvrtc_version();
}

}  // namespace kiln::cuda
