#include "backends/cuda/cuda_support.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "kiln/settings.h"

namespace kiln::cuda {

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  std::string m = std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInitializationError)
    return unsupported("no usable CUDA device: " + m);
  return internal_error(m);
}

Status cublas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) return unsupported(std::string(what) + ": not supported by cuBLASLt");
  return internal_error(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

Status cudnn_status(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return Status::ok();
  std::string m = std::string(what) + ": " + cudnnGetErrorString(s);
  if (s == CUDNN_STATUS_NOT_SUPPORTED) return unsupported(m);
  return internal_error(m);
}

Status nvrtc_status(nvrtcResult r, const char* what) {
  if (r == NVRTC_SUCCESS) return Status::ok();
  return internal_error(std::string(what) + ": " + nvrtcGetErrorString(r));
}

Expected<DeviceInfo> current_device() {
  int count = 0;
  KILN_CUDA_TRY(cudaGetDeviceCount(&count));
  if (count == 0) return unsupported("no CUDA device on this machine");
  DeviceInfo info;
  KILN_CUDA_TRY(cudaGetDevice(&info.ordinal));
  cudaDeviceProp p{};
  KILN_CUDA_TRY(cudaGetDeviceProperties(&p, info.ordinal));
  info.name = p.name;
  info.major = p.major;
  info.minor = p.minor;
  info.sm_count = p.multiProcessorCount;
  info.global_memory = p.totalGlobalMem;
  return info;
}

bool tuning_traced() { return settings().cuda.trace > 0; }

bool cuda_available() {
  static const bool available = [] {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  }();
  return available;
}

Expected<DeviceBuffer> DeviceBuffer::allocate(size_t nbytes) {
  DeviceBuffer b;
  if (nbytes == 0) return b;
  const cudaError_t e = cudaMalloc(&b.ptr_, nbytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: the device goes on serving what fits
    b.ptr_ = nullptr;
    size_t free_bytes = 0, total = 0;
    (void)cudaMemGetInfo(&free_bytes, &total);
    return invalid_argument("out of device memory: " + std::to_string(nbytes) + " bytes needed, " +
                            std::to_string(free_bytes) + " free of " + std::to_string(total));
  }
  KILN_TRY(
      cuda_status(e, "cudaMalloc").with_context("allocating " + std::to_string(nbytes) + " bytes of device memory"));
  b.nbytes_ = nbytes;
  return b;
}

void DeviceBuffer::reset() {
  if (ptr_) cudaFree(ptr_);
  ptr_ = nullptr;
  nbytes_ = 0;
}

Expected<cudaDataType_t> cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return CUDA_R_32F;
    case DType::Float16: return CUDA_R_16F;
    case DType::BFloat16: return CUDA_R_16BF;
    case DType::Float64: return CUDA_R_64F;
    case DType::Int32: return CUDA_R_32I;
    case DType::Int8: return CUDA_R_8I;
    default: return unsupported("dtype " + std::string(dtype_name(dtype)) + " has no CUDA data type here");
  }
}

}  // namespace kiln::cuda
