#include "backends/cuda/runtime_kernels.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <vector>

#include "backends/cuda/kernel_headers.h"
#include "backends/cuda/nvrtc_compile.h"

namespace kiln::cuda {

namespace {

// The host image of the kernel's by-value parameter (KilnCopyBatch).
struct CopyBatch {
  int n = 0;
  uint32_t bytes[kCopyBatch] = {};
  const uint8_t* src[kCopyBatch] = {};
  uint8_t* dst[kCopyBatch] = {};
};

// The host image of KilnNonzeroShape.
struct NonzeroShape {
  int ndim = 0;
  int64_t sizes[kNonzeroMaxDims] = {};
};

struct RuntimeKernels {
  cudaLibrary_t library = nullptr;
  cudaKernel_t copy_batch = nullptr, argmax_partial = nullptr, argmax_final = nullptr;
  cudaKernel_t nonzero_count = nullptr, nonzero_scan = nullptr, nonzero_write = nullptr, masked_rows = nullptr;
  cudaKernel_t unique_keys = nullptr, unique_sort_step = nullptr, unique_starts = nullptr, unique_groups = nullptr,
               unique_inverse = nullptr;
};

// Compiled and loaded once per process (for the device current then).
Expected<const RuntimeKernels*> runtime_kernels() {
  static std::once_flag once;
  static RuntimeKernels kernels;
  static Status status;
  std::call_once(once, [] {
    status = [&]() -> Status {
      KILN_ASSIGN_OR_RETURN(DeviceInfo dev, current_device());
      KILN_ASSIGN_OR_RETURN(CompiledModule m,
                            compile_cuda_source(runtime_kernels_source(), dev.arch(), "kiln_runtime_kernels.cu"));
      KILN_CUDA_TRY(cudaLibraryLoadData(&kernels.library, m.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
      KILN_CUDA_TRY(cudaLibraryGetKernel(&kernels.copy_batch, kernels.library, "kiln_copy_batch"));
      KILN_CUDA_TRY(cudaLibraryGetKernel(&kernels.argmax_partial, kernels.library, "kiln_argmax_partial"));
      KILN_CUDA_TRY(cudaLibraryGetKernel(&kernels.argmax_final, kernels.library, "kiln_argmax_final"));
      KILN_CUDA_TRY(cudaLibraryGetKernel(&kernels.nonzero_count, kernels.library, "kiln_nonzero_count"));
      KILN_CUDA_TRY(cudaLibraryGetKernel(&kernels.nonzero_scan, kernels.library, "kiln_nonzero_scan"));
      KILN_CUDA_TRY(cudaLibraryGetKernel(&kernels.nonzero_write, kernels.library, "kiln_nonzero_write"));
      KILN_CUDA_TRY(cudaLibraryGetKernel(&kernels.masked_rows, kernels.library, "kiln_masked_rows"));
      KILN_CUDA_TRY(cudaLibraryGetKernel(&kernels.unique_keys, kernels.library, "kiln_unique_keys"));
      KILN_CUDA_TRY(cudaLibraryGetKernel(&kernels.unique_sort_step, kernels.library, "kiln_unique_sort_step"));
      KILN_CUDA_TRY(cudaLibraryGetKernel(&kernels.unique_starts, kernels.library, "kiln_unique_starts"));
      KILN_CUDA_TRY(cudaLibraryGetKernel(&kernels.unique_groups, kernels.library, "kiln_unique_groups"));
      KILN_CUDA_TRY(cudaLibraryGetKernel(&kernels.unique_inverse, kernels.library, "kiln_unique_inverse"));
      return Status::ok();
    }();
  });
  if (!status) return status.with_context("kiln's CUDA runtime kernels");
  return &kernels;
}

}  // namespace

Status load_runtime_kernels() { return runtime_kernels().status(); }

const std::string& runtime_kernels_source() { return kernel_header("kiln/runtime_kernels.cuh"); }

Status copy_regions(std::span<const CopyRegion> regions, cudaStream_t stream) {
  std::vector<const CopyRegion*> small;
  for (const CopyRegion& r : regions) {
    if (r.bytes == 0) continue;
    if (r.bytes > kBatchedCopyMaxBytes) {
      KILN_CUDA_TRY(cudaMemcpyAsync(r.dst, r.src, r.bytes, cudaMemcpyDefault, stream));
      continue;
    }
    small.push_back(&r);
  }
  if (small.empty()) return Status::ok();
  // A kernel even for one region: in a stream, a kernel that follows a kernel
  // starts sooner than a copy-engine transfer, and it writes page-locked host
  // memory mapped into the device without a transfer of its own.
  KILN_ASSIGN_OR_RETURN(const RuntimeKernels* k, runtime_kernels());
  for (size_t at = 0; at < small.size(); at += kCopyBatch) {
    CopyBatch b;
    b.n = static_cast<int>(std::min(kCopyBatch, small.size() - at));
    size_t most = 0;
    for (int i = 0; i < b.n; ++i) {
      const CopyRegion& r = *small[at + static_cast<size_t>(i)];
      b.bytes[i] = static_cast<uint32_t>(r.bytes);
      b.src[i] = static_cast<const uint8_t*>(r.src);
      b.dst[i] = static_cast<uint8_t*>(r.dst);
      most = std::max(most, r.bytes);
    }
    void* params[] = {&b};
    const dim3 grid(static_cast<unsigned>(b.n), static_cast<unsigned>((most + kCopyChunk - 1) / kCopyChunk));
    KILN_CUDA_TRY(cudaLaunchKernel(reinterpret_cast<const void*>(k->copy_batch), grid, dim3(256), params, 0, stream));
  }
  return Status::ok();
}

Status argmax_rows(const void* x, DType dtype, int64_t rows, int64_t n, int64_t* out, cudaStream_t stream) {
  int code = -1;
  if (dtype == DType::Float32) code = 0;
  if (dtype == DType::Float16) code = 1;
  if (dtype == DType::BFloat16) code = 2;
  if (code < 0)
    return unsupported("argmax on the device takes float32, float16 or bfloat16, got " +
                       std::string(dtype_name(dtype)));
  if (rows < 1 || rows > 65535 || n < 1)
    return invalid_argument("argmax of " + std::to_string(rows) + " rows of " + std::to_string(n) + " elements");
  KILN_ASSIGN_OR_RETURN(const RuntimeKernels* k, runtime_kernels());
  // Blocks of 256 threads, each taking 2048 elements or more (at most 1024 blocks a row).
  long long parts = std::clamp<long long>((n + 2047) / 2048, 1, 1024);
  long long chunk = (n + parts - 1) / parts;
  parts = (n + chunk - 1) / chunk;
  long long nn = n;
  void* scratch = nullptr;
  const size_t pairs = static_cast<size_t>(rows * parts);
  KILN_CUDA_TRY(cudaMallocAsync(&scratch, pairs * (sizeof(float) + sizeof(int64_t)), stream));
  auto* part_index = static_cast<int64_t*>(scratch);
  auto* part_value = reinterpret_cast<float*>(part_index + pairs);
  void* first[] = {&x, &code, &nn, &chunk, &part_value, &part_index};
  const cudaError_t e1 =
      cudaLaunchKernel(reinterpret_cast<const void*>(k->argmax_partial),
                       dim3(static_cast<unsigned>(parts), static_cast<unsigned>(rows)), dim3(256), first, 0, stream);
  void* second[] = {&part_value, &part_index, &parts, &out};
  const cudaError_t e2 = e1 != cudaSuccess ? e1
                                           : cudaLaunchKernel(reinterpret_cast<const void*>(k->argmax_final),
                                                              dim3(static_cast<unsigned>(rows)), dim3(1024), second,
                                                              0, stream);
  cudaFreeAsync(scratch, stream);
  KILN_CUDA_TRY(e2);
  return Status::ok();
}

namespace {

// The bits that make an element of `dtype` nonzero: all of them, but a floating type's sign.
uint64_t nonzero_bits(DType dtype) {
  const size_t elem = dtype_size(dtype);
  uint64_t bits = elem >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * elem)) - 1;
  if (dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float64)
    bits >>= 1;
  return bits;
}

// The nonzero elements of x (n elements of `dtype`, on the device): counted
// per chunk and scanned on `stream`, the total read back (the one wait), then
// `write(kernels, offsets, chunks, count)` enqueues the kernel that places
// each of them (nothing when the count is 0).
Status select_nonzero(const void* x, DType dtype, long long n, const char* what,
                      const std::function<Status(const RuntimeKernels&, int64_t* offsets, long long chunks,
                                                 int64_t count)>& write,
                      cudaStream_t stream) {
  const int elem = static_cast<int>(dtype_size(dtype));
  if (elem != 1 && elem != 2 && elem != 4 && elem != 8)
    return unsupported(std::string(what) + " on the device of " + std::string(dtype_name(dtype)));
  uint64_t mask = nonzero_bits(dtype);
  long long chunks = (n + kNonzeroChunk - 1) / kNonzeroChunk;
  // One block per chunk along the grid's x dimension (up to 2^31 - 1 blocks).
  if (chunks > 0x7fffffffLL)
    return unsupported(std::string(what) + " on the device of " + std::to_string(n) + " elements");
  KILN_ASSIGN_OR_RETURN(const RuntimeKernels* k, runtime_kernels());
  void* scratch = nullptr;
  KILN_CUDA_TRY(cudaMallocAsync(&scratch, static_cast<size_t>(chunks + 1) * sizeof(int64_t), stream));
  auto* counts = static_cast<int64_t*>(scratch);
  int64_t* total = counts + chunks;
  auto run = [&]() -> Status {
    int64_t count = 0;
    if (chunks > 0) {
      void* a[] = {&x, const_cast<int*>(&elem), &mask, &n, &counts};
      KILN_CUDA_TRY(cudaLaunchKernel(reinterpret_cast<const void*>(k->nonzero_count),
                                     dim3(static_cast<unsigned>(chunks)), dim3(256), a, 0, stream));
      void* b[] = {&counts, &chunks, &total};
      KILN_CUDA_TRY(
          cudaLaunchKernel(reinterpret_cast<const void*>(k->nonzero_scan), dim3(1), dim3(1024), b, 0, stream));
      // The one value the host needs: the output's row count.
      KILN_CUDA_TRY(cudaMemcpyAsync(&count, total, sizeof count, cudaMemcpyDeviceToHost, stream));
      KILN_CUDA_TRY(cudaStreamSynchronize(stream));
    }
    return write(*k, counts, chunks, count);
  };
  Status st = run();
  cudaFreeAsync(scratch, stream);
  return st;
}

}  // namespace

Status nonzero(const void* x, DType dtype, std::span<const int64_t> sizes,
               const std::function<Expected<int64_t*>(int64_t count)>& allocate, cudaStream_t stream) {
  if (sizes.size() > kNonzeroMaxDims)
    return unsupported("nonzero on the device of a tensor of rank " + std::to_string(sizes.size()) + " (at most " +
                       std::to_string(kNonzeroMaxDims) + ")");
  NonzeroShape shape;
  shape.ndim = static_cast<int>(sizes.size());
  long long n = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    shape.sizes[d] = sizes[d];
    n *= sizes[d];
  }
  int elem = static_cast<int>(dtype_size(dtype));
  uint64_t mask = nonzero_bits(dtype);
  return select_nonzero(
      x, dtype, n, "nonzero",
      [&](const RuntimeKernels& k, int64_t* offsets, long long chunks, int64_t count) -> Status {
        KILN_ASSIGN_OR_RETURN(int64_t * out, allocate(count));
        if (count == 0 || shape.ndim == 0) return Status::ok();
        void* c[] = {&x, &elem, &mask, &n, &offsets, &shape, &out};
        KILN_CUDA_TRY(cudaLaunchKernel(reinterpret_cast<const void*>(k.nonzero_write),
                                       dim3(static_cast<unsigned>(chunks)), dim3(256), c, 0, stream));
        return Status::ok();
      },
      stream);
}

Status masked_rows(const void* mask, DType mask_dtype, int64_t n, const void* src, int64_t row_bytes,
                   const std::function<Expected<void*>(int64_t count)>& allocate, cudaStream_t stream) {
  if (mask_dtype != DType::Bool && mask_dtype != DType::UInt8)
    return unsupported("a mask of " + std::string(dtype_name(mask_dtype)) + " (bool or uint8 masks)");
  int elem = 1;
  uint64_t bits = nonzero_bits(mask_dtype);
  long long nn = n;
  long long rb = row_bytes;
  return select_nonzero(
      mask, mask_dtype, n, "boolean-mask indexing",
      [&](const RuntimeKernels& k, int64_t* offsets, long long chunks, int64_t count) -> Status {
        KILN_ASSIGN_OR_RETURN(void* out, allocate(count));
        if (count == 0 || row_bytes == 0) return Status::ok();
        void* c[] = {&mask, &elem, &bits, &nn, &offsets, &src, &rb, &out};
        KILN_CUDA_TRY(cudaLaunchKernel(reinterpret_cast<const void*>(k.masked_rows),
                                       dim3(static_cast<unsigned>(chunks)), dim3(256), c, 0, stream));
        return Status::ok();
      },
      stream);
}

Status unique(const void* x, DType dtype, int64_t n, bool sorted,
              const std::function<Expected<UniqueOutputs>(int64_t groups)>& allocate, cudaStream_t stream) {
  int kind = 0;  // KILN_UQ_*
  switch (dtype) {
    case DType::Bool:
    case DType::UInt8: kind = 0; break;
    case DType::Int8:
    case DType::Int16:
    case DType::Int32:
    case DType::Int64: kind = 1; break;
    case DType::Float16: kind = 2; break;
    case DType::BFloat16: kind = 3; break;
    case DType::Float32: kind = 4; break;
    case DType::Float64: kind = 5; break;
    default: return unsupported("unique on the device of " + std::string(dtype_name(dtype)));
  }
  if (n == 0) return allocate(0).status();
  if (n > (int64_t{1} << 36)) return unsupported("unique on the device of " + std::to_string(n) + " elements");
  int elem = static_cast<int>(dtype_size(dtype));
  long long m = 1;  // the sorting network's width
  if (sorted)
    while (m < n) m *= 2;
  else
    m = n;
  long long nn = n;
  KILN_ASSIGN_OR_RETURN(const RuntimeKernels* k, runtime_kernels());
  void* scratch = nullptr;
  const size_t pairs = static_cast<size_t>(m) * (sizeof(uint64_t) + sizeof(int64_t));
  KILN_CUDA_TRY(cudaMallocAsync(&scratch, pairs + static_cast<size_t>(n), stream));
  auto* keys = static_cast<uint64_t*>(scratch);
  auto* index = reinterpret_cast<int64_t*>(keys + m);
  auto* starts = reinterpret_cast<uint8_t*>(index + m);
  void* first = nullptr;
  auto blocks = [](long long count) { return dim3(static_cast<unsigned>((count + 255) / 256)); };
  auto run = [&]() -> Status {
    void* a[] = {&x, &elem, &kind, &nn, &m, &keys, &index};
    KILN_CUDA_TRY(
        cudaLaunchKernel(reinterpret_cast<const void*>(k->unique_keys), blocks(m), dim3(256), a, 0, stream));
    for (long long size = 2; sorted && size <= m; size *= 2)
      for (long long j = size / 2; j > 0; j /= 2) {
        void* b[] = {&keys, &index, &m, &j, &size};
        KILN_CUDA_TRY(cudaLaunchKernel(reinterpret_cast<const void*>(k->unique_sort_step), blocks(m), dim3(256), b,
                                       0, stream));
      }
    void* c[] = {&keys, &elem, &kind, &nn, &starts};
    KILN_CUDA_TRY(
        cudaLaunchKernel(reinterpret_cast<const void*>(k->unique_starts), blocks(n), dim3(256), c, 0, stream));
    return select_nonzero(
        starts, DType::UInt8, n, "unique",
        [&](const RuntimeKernels& rk, int64_t* offsets, long long chunks, int64_t groups) -> Status {
          KILN_ASSIGN_OR_RETURN(UniqueOutputs out, allocate(groups));
          KILN_CUDA_TRY(cudaMallocAsync(&first, static_cast<size_t>(groups) * sizeof(int64_t), stream));
          const void* src = x;
          void* d[] = {&starts, &nn, &offsets, &index, &src, &elem, &first, &out.values};
          KILN_CUDA_TRY(cudaLaunchKernel(reinterpret_cast<const void*>(rk.unique_groups),
                                         dim3(static_cast<unsigned>(chunks)), dim3(256), d, 0, stream));
          if (!out.inverse && !out.counts) return Status::ok();
          long long g = groups;
          void* e[] = {&index, &nn, &first, &g, &out.inverse, &out.counts};
          KILN_CUDA_TRY(cudaLaunchKernel(reinterpret_cast<const void*>(rk.unique_inverse), blocks(n), dim3(256), e,
                                         0, stream));
          return Status::ok();
        },
        stream);
  };
  Status st = run();
  if (first) cudaFreeAsync(first, stream);
  cudaFreeAsync(scratch, stream);
  return st;
}

}  // namespace kiln::cuda
