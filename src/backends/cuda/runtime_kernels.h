// The kernels the CUDA runtime launches around engines (kernels/runtime_kernels.cuh):
// batched small copies in and out of an engine's memory, and the argmax of
// rows for greedy decoding on the device. Compiled with NVRTC for the current
// device on first use, once per process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "backends/cuda/cuda_support.h"
#include "kiln/dtype.h"
#include "kiln/status.h"

namespace kiln::cuda {

struct CopyRegion {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

// Regions at most this large go through the batched copy kernel (one launch
// for up to kCopyBatch of them, each split into kCopyChunk-byte blocks);
// larger ones are cudaMemcpyAsync calls.
constexpr size_t kBatchedCopyMaxBytes = size_t{4} << 20;
constexpr size_t kCopyBatch = 32;
constexpr size_t kCopyChunk = 16384;

// Compiles and loads the kernels now, where they were not yet: an engine's
// load calls it, so that its first call does not wait for NVRTC.
Status load_runtime_kernels();

// Enqueues every copy on `stream`, device memory to device memory (or
// host memory mapped into the device's address space).
Status copy_regions(std::span<const CopyRegion> regions, cudaStream_t stream);

// out[r] = the argmax of row r of x [rows, n] (float32, float16 or bfloat16):
// the first of equal maxima, a NaN above any number. Enqueued on `stream`.
Status argmax_rows(const void* x, DType dtype, int64_t rows, int64_t n, int64_t* out, cudaStream_t stream);

// torch.nonzero of the contiguous tensor at `x` (`dtype`, `sizes`, on the
// device): counts the nonzero elements on `stream`, waits for that count
// alone, calls `allocate(count)` for device memory of [count, rank] int64
// (enqueued on `stream`), and enqueues the writing of the index tuples into
// it in row-major order. -0.0 is zero and NaN is not, as in torch.
constexpr size_t kNonzeroMaxDims = 8;      // KILN_NZ_MAX_DIMS
constexpr long long kNonzeroChunk = 4096;  // KILN_NZ_CHUNK
Status nonzero(const void* x, DType dtype, std::span<const int64_t> sizes,
               const std::function<Expected<int64_t*>(int64_t count)>& allocate, cudaStream_t stream);

// x[mask] where `mask` (bool or uint8, n elements, contiguous on the device)
// covers x's leading dims: x's elements under each mask element form a row of
// `row_bytes` at `src` (contiguous). Counts the true elements on `stream`,
// waits for that count alone, calls `allocate(count)` for count rows of
// device memory and enqueues the copy of the selected rows, in order.
Status masked_rows(const void* mask, DType mask_dtype, int64_t n, const void* src, int64_t row_bytes,
                   const std::function<Expected<void*>(int64_t count)>& allocate, cudaStream_t stream);

// torch.unique (`sorted`: ascending, as _unique2 gives it) or
// unique_consecutive (in place) of the n contiguous elements at `x`
// (`dtype`, on the device), as the reference kernels give them: -0.0 equals
// 0.0, every NaN is a value of its own, after every number. Sorts on
// `stream` (a bitonic network), counts the groups and waits for that count
// alone, calls `allocate(groups)` for the outputs, and enqueues their
// writing: values [groups] of `dtype`, inverse [n] (each element's group;
// may be null) and counts [groups] (may be null).
struct UniqueOutputs {
  void* values = nullptr;
  int64_t* inverse = nullptr;
  int64_t* counts = nullptr;
};
Status unique(const void* x, DType dtype, int64_t n, bool sorted,
              const std::function<Expected<UniqueOutputs>(int64_t groups)>& allocate, cudaStream_t stream);

// The embedded source (for the test that compiles it without a GPU).
const std::string& runtime_kernels_source();

}  // namespace kiln::cuda
