// What every part of the CUDA backend shares: turning CUDA, cuBLASLt, cuDNN
// and NVRTC status codes into kiln Status values, owning device memory, and
// the facts about the current device that plans are checked against.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nvrtc.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/status.h"

namespace kiln::cuda {

// kUnsupported for "no device / no driver" (a machine without a GPU), kInternal otherwise.
Status cuda_status(cudaError_t e, const char* what);
Status cublas_status(cublasStatus_t s, const char* what);
Status cudnn_status(cudnnStatus_t s, const char* what);
Status nvrtc_status(nvrtcResult r, const char* what);

#define KILN_CUDA_TRY(expr) KILN_TRY(::kiln::cuda::cuda_status((expr), #expr))
#define KILN_CUBLAS_TRY(expr) KILN_TRY(::kiln::cuda::cublas_status((expr), #expr))
#define KILN_CUDNN_TRY(expr) KILN_TRY(::kiln::cuda::cudnn_status((expr), #expr))

// The device a plan is built for and checked against when it is loaded.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;          // "NVIDIA H200"
  int major = 0, minor = 0;  // compute capability
  int sm_count = 0;
  size_t global_memory = 0;
  std::string arch() const { return "sm_" + std::to_string(major * 10 + minor); }
};

// The current device, or kUnsupported when this machine has no usable CUDA
// device (no driver, no GPU) — the message says which.
Expected<DeviceInfo> current_device();

// Whether a CUDA device can be used here (cheap; caches the answer).
bool cuda_available();

// KILN_CUDA_TRACE is 1 or 2: builds print each GEMM and convolution shape's
// tuning, timed, on stderr.
bool tuning_traced();

// cuBLASLt is opened on first use (cublaslt_loader.cc): ok once it is,
// kUnsupported naming the library and the loader's reason when it cannot be.
Status cublaslt_loaded();
// The file cuBLASLt is (or would be) opened from, found without opening it:
// $KILN_CUBLASLT, else the first directory holding libcublasLt.so.MAJOR
// among LD_LIBRARY_PATH, the loaded NVRTC's and cuDNN's directories and the
// directory kiln was built against; empty when none does.
std::string cublaslt_path();

// The backend's identity found without starting the CUDA runtime (through
// NVML and file facts; quick_identity.cc), or empty when that cannot be told
// for sure. It changes whenever the device model, compute capability, core
// count, driver or any library the engines use does.
std::string quick_identity();

// Device memory owned by one object.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Expected<DeviceBuffer> allocate(size_t nbytes);
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), nbytes_(std::exchange(o.nbytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      nbytes_ = std::exchange(o.nbytes_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { reset(); }
  void reset();
  void* get() const { return ptr_; }
  uint8_t* bytes() const { return static_cast<uint8_t*>(ptr_); }
  size_t nbytes() const { return nbytes_; }

 private:
  void* ptr_ = nullptr;
  size_t nbytes_ = 0;
};

// A CUDA event pair timing work on a stream (tactic timing, benchmarks).
// The milliseconds of each of `reps` runs of `fn` (a Status-returning
// enqueue) after `warmup` untimed runs.
template <typename Fn>
Expected<std::vector<float>> time_each_on_stream(cudaStream_t stream, int warmup, int reps, Fn&& fn);
// Their median.
template <typename Fn>
Expected<float> time_on_stream(cudaStream_t stream, int warmup, int reps, Fn&& fn);

// cudaDataType_t for a floating dtype kiln computes in on the GPU.
Expected<cudaDataType_t> cuda_data_type(DType dtype);

}  // namespace kiln::cuda

#include "backends/cuda/cuda_support_inl.h"
