#include "backends/cuda/device_memory.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "backends/cuda/cuda_support.h"
#include "backends/cuda/runtime_kernels.h"

namespace kiln::cuda {

namespace {

class CudaFence final : public engine::Fence {
 public:
  CudaFence(cudaEvent_t e, bool timed) : event_(e), timed_(timed) {}
  ~CudaFence() override { cudaEventDestroy(event_); }
  Status wait() override { return cuda_status(cudaEventSynchronize(event_), "cudaEventSynchronize"); }
  Expected<double> ms_since(const engine::Fence& earlier) const override {
    const auto* e = dynamic_cast<const CudaFence*>(&earlier);
    if (!timed_ || !e || !e->timed_) return invalid_argument("ms_since needs two fences from timed_fence()");
    KILN_CUDA_TRY(cudaEventSynchronize(event_));
    float ms = 0;
    KILN_CUDA_TRY(cudaEventElapsedTime(&ms, e->event_, event_));
    return static_cast<double>(ms);
  }

 private:
  cudaEvent_t event_;
  bool timed_;
};

// Device memory from CUDA's stream-ordered allocator (cudaMallocAsync), its
// pool keeping up to kKeptBytes of freed memory for reuse: a call that
// allocates the same sizes each time allocates nothing new after the first,
// and memory freed on a stream is reused in that stream's order only.
class CudaDeviceMemory final : public engine::DeviceMemory {
 public:
  static constexpr uint64_t kKeptBytes = uint64_t{1} << 30;

  Device device() const override {
    int ordinal = 0;
    if (cudaGetDevice(&ordinal) != cudaSuccess) (void)cudaGetLastError();
    return Device::cuda(ordinal);
  }

  std::shared_ptr<void> new_stream() const override {
    (void)default_stream();  // the device and its pool set up first
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return std::shared_ptr<void>(s, [](void* p) {
      cudaStreamSynchronize(static_cast<cudaStream_t>(p));
      cudaStreamDestroy(static_cast<cudaStream_t>(p));
    });
  }

  void* default_stream() const override {
    std::call_once(init_, [this] {
      if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess) {
        (void)cudaGetLastError();
        stream_ = cudaStreamLegacy;  // no device: calls fail with CUDA's own message
      }
      int ordinal = 0;
      cudaMemPool_t pool = nullptr;
      if (cudaGetDevice(&ordinal) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, ordinal) == cudaSuccess) {
        uint64_t keep = kKeptBytes;
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
        pool_ = pool;
      }
      (void)cudaGetLastError();
    });
    return stream_;
  }

  Expected<Tensor> empty(DType dtype, const Shape& sizes, void* stream_arg) const override {
    KILN_ASSIGN_OR_RETURN(const int64_t n, checked_numel(sizes));
    (void)default_stream();  // the pool's settings
    cudaStream_t stream = stream_arg ? static_cast<cudaStream_t>(stream_arg) : stream_of(nullptr);
    // 256-byte granules: every tensor starts as aligned as cudaMalloc's.
    const size_t nbytes = std::max<size_t>((static_cast<size_t>(n) * dtype_size(dtype) + 255) / 256 * 256, 256);
    void* p = nullptr;
    if (cudaError_t e = cudaMallocAsync(&p, nbytes, stream); e != cudaSuccess) {
      (void)cudaGetLastError();  // out of memory is not sticky; leave no error behind
      // Cached blocks go back to the device first, then one more try.
      if (pool_) {
        cudaStreamSynchronize(stream);
        cudaMemPoolTrimTo(pool_, 0);
      }
      if (cudaMallocAsync(&p, nbytes, stream) != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_bytes = 0, total = 0;
        (void)cudaMemGetInfo(&free_bytes, &total);
        return Status(ErrorCode::kInternal, "CUDA device memory: cannot allocate " + std::to_string(nbytes) +
                                                " bytes (" + cudaGetErrorString(e) + "): out of device memory, " +
                                                std::to_string(free_bytes) + " bytes free of " + std::to_string(total));
      }
    }
    if (reinterpret_cast<uintptr_t>(p) % 256 != 0) {
      cudaFreeAsync(p, stream);
      return internal_error("CUDA device memory: an allocation is not 256-byte aligned");
    }
    // Without a stream of the caller's, ready for any stream once returned.
    if (!stream_arg) KILN_CUDA_TRY(cudaStreamSynchronize(stream));
    std::shared_ptr<void> keeper(p, [stream](void* q) {
      if (cudaFreeAsync(q, stream) != cudaSuccess) (void)cudaGetLastError();  // the context may be gone at exit
    });
    auto storage = Storage::borrow(static_cast<uint8_t*>(p), nbytes, std::move(keeper), device());
    return Tensor::from_storage(std::move(storage), dtype, sizes, contiguous_strides(sizes), 0);
  }

  Expected<Tensor> empty_pinned(DType dtype, const Shape& sizes) const override {
    KILN_ASSIGN_OR_RETURN(const int64_t n, checked_numel(sizes));
    const size_t nbytes = std::max<size_t>(static_cast<size_t>(n) * dtype_size(dtype), 1);
    void* p = nullptr;
    // Mapped into the device's address space: copy_to_host_async writes it
    // from a kernel, with no copy-engine transfer in the stream.
    KILN_CUDA_TRY(cudaHostAlloc(&p, nbytes, cudaHostAllocMapped));
    std::shared_ptr<void> keeper(p, [](void* q) { cudaFreeHost(q); });
    auto storage = Storage::borrow(static_cast<uint8_t*>(p), nbytes, std::move(keeper), Device::cpu());
    return Tensor::from_storage(std::move(storage), dtype, sizes, contiguous_strides(sizes), 0);
  }

  Status copy_all(std::span<const Tensor> dsts, std::span<const Tensor> srcs, void* stream_arg) const override {
    if (dsts.size() != srcs.size()) return invalid_argument("copy_all: unequal lists");
    bool host_side = false;
    for (size_t i = 0; i < dsts.size(); ++i) {
      KILN_TRY(check(dsts[i], srcs[i]));
      host_side = host_side || dsts[i].is_cpu() || srcs[i].is_cpu();
    }
    cudaStream_t stream = stream_of(stream_arg);
    std::vector<CopyRegion> device_copies;
    for (size_t i = 0; i < dsts.size(); ++i) {
      if (dsts[i].nbytes() == 0) continue;
      if (!dsts[i].is_cpu() && !srcs[i].is_cpu()) {
        device_copies.push_back({dsts[i].raw_data(), srcs[i].raw_data(), dsts[i].nbytes()});
        continue;
      }
      KILN_CUDA_TRY(
          cudaMemcpyAsync(dsts[i].raw_data(), srcs[i].raw_data(), dsts[i].nbytes(), cudaMemcpyDefault, stream));
    }
    KILN_TRY(copy_regions(device_copies, stream));
    if (!stream_arg || host_side) KILN_CUDA_TRY(cudaStreamSynchronize(stream));
    return Status::ok();
  }

  Status copy_to_host_async(const Tensor& dst, const Tensor& src, void* stream) const override {
    KILN_TRY(check(dst, src));
    if (!dst.is_cpu() || src.is_cpu()) return invalid_argument("copy_to_host_async: from device to host memory");
    if (dst.nbytes() == 0) return Status::ok();
    void* mapped = nullptr;
    if (cudaHostGetDevicePointer(&mapped, dst.raw_data(), 0) != cudaSuccess) {  // not from empty_pinned
      (void)cudaGetLastError();
      KILN_CUDA_TRY(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDeviceToHost,
                                    stream_of(stream)));
      return Status::ok();
    }
    const CopyRegion r{mapped, src.raw_data(), dst.nbytes()};
    return copy_regions({&r, 1}, stream_of(stream));
  }

  Expected<std::unique_ptr<engine::Fence>> fence(void* stream) const override { return make_fence(stream, false); }
  Expected<std::unique_ptr<engine::Fence>> timed_fence(void* stream) const override {
    return make_fence(stream, true);
  }

  Status synchronize(void* stream) const override {
    return cuda_status(cudaStreamSynchronize(stream_of(stream)), "cudaStreamSynchronize");
  }

  Status argmax_rows(const Tensor& x, const Tensor& out, void* stream) const override {
    if (!x.defined() || x.is_cpu() || x.dim() < 1 || !x.is_contiguous())
      return invalid_argument("argmax on the device needs a contiguous device tensor of rank >= 1, got " +
                              (x.defined() ? x.type_string() : std::string("nothing")));
    const int64_t n = x.size(-1), rows = n > 0 ? x.numel() / n : 0;
    if (!out.defined() || out.is_cpu() || out.dtype() != DType::Int64 || out.numel() != rows || !out.is_contiguous())
      return invalid_argument("argmax on the device writes " + std::to_string(rows) +
                              " int64 values into contiguous device memory, got " +
                              (out.defined() ? out.type_string() : std::string("nothing")));
    return cuda::argmax_rows(x.raw_data(), x.dtype(), rows, n, static_cast<int64_t*>(out.raw_data()),
                             stream_of(stream));
  }

  Expected<Tensor> nonzero(const Tensor& x, void* stream) const override {
    if (!x.defined() || x.is_cpu() || !x.is_contiguous())
      return invalid_argument("nonzero on the device needs a contiguous device tensor, got " +
                              (x.defined() ? x.type_string() : std::string("nothing")));
    Tensor out;
    const int64_t rank = x.dim();
    KILN_TRY(cuda::nonzero(
        x.raw_data(), x.dtype(), x.sizes(),
        [&](int64_t count) -> Expected<int64_t*> {
          KILN_ASSIGN_OR_RETURN(out, empty(DType::Int64, Shape{count, rank}, stream));
          return static_cast<int64_t*>(out.raw_data());
        },
        stream_of(stream)));
    return out;
  }

  Expected<Tensor> masked_rows(const Tensor& x, const Tensor& mask, void* stream) const override {
    if (!x.defined() || x.is_cpu() || !x.is_contiguous() || !mask.defined() || mask.is_cpu() ||
        !mask.is_contiguous() || mask.dim() < 1 || mask.dim() > x.dim() ||
        !std::equal(mask.sizes().begin(), mask.sizes().end(), x.sizes().begin()))
      return invalid_argument(
          "boolean-mask indexing on the device needs contiguous device tensors, the mask of the tensor's leading "
          "sizes, got " +
          (x.defined() ? x.type_string() : std::string("nothing")) + " and " +
          (mask.defined() ? mask.type_string() : std::string("nothing")));
    Shape rest(x.sizes().begin() + mask.dim(), x.sizes().end());
    int64_t row = 1;
    for (int64_t s : rest) row *= s;
    Tensor out;
    KILN_TRY(cuda::masked_rows(
        mask.raw_data(), mask.dtype(), mask.numel(), x.raw_data(), row * static_cast<int64_t>(dtype_size(x.dtype())),
        [&](int64_t count) -> Expected<void*> {
          Shape sizes{count};
          sizes.insert(sizes.end(), rest.begin(), rest.end());
          KILN_ASSIGN_OR_RETURN(out, empty(x.dtype(), sizes, stream));
          return out.raw_data();
        },
        stream_of(stream)));
    return out;
  }

  Expected<std::vector<Tensor>> unique(const Tensor& x, bool sorted, bool inverse, bool counts,
                                       void* stream) const override {
    if (!x.defined() || x.is_cpu() || !x.is_contiguous())
      return invalid_argument("unique on the device needs a contiguous device tensor, got " +
                              (x.defined() ? x.type_string() : std::string("nothing")));
    std::vector<Tensor> out(3);
    KILN_TRY(cuda::unique(
        x.raw_data(), x.dtype(), x.numel(), sorted,
        [&](int64_t groups) -> Expected<cuda::UniqueOutputs> {
          cuda::UniqueOutputs o;
          KILN_ASSIGN_OR_RETURN(out[0], empty(x.dtype(), Shape{groups}, stream));
          o.values = out[0].raw_data();
          if (inverse) {
            KILN_ASSIGN_OR_RETURN(out[1], empty(DType::Int64, x.sizes(), stream));
            o.inverse = static_cast<int64_t*>(out[1].raw_data());
          }
          if (counts) {
            KILN_ASSIGN_OR_RETURN(out[2], empty(DType::Int64, Shape{groups}, stream));
            o.counts = static_cast<int64_t*>(out[2].raw_data());
          }
          return o;
        },
        stream_of(stream)));
    return out;
  }

 private:
  Expected<std::unique_ptr<engine::Fence>> make_fence(void* stream, bool timed) const {
    cudaEvent_t e = nullptr;
    KILN_CUDA_TRY(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault : cudaEventDisableTiming));
    auto f = std::make_unique<CudaFence>(e, timed);
    KILN_CUDA_TRY(cudaEventRecord(e, stream_of(stream)));
    return std::unique_ptr<engine::Fence>(std::move(f));
  }

  cudaStream_t stream_of(void* stream) const {
    return stream ? static_cast<cudaStream_t>(stream) : static_cast<cudaStream_t>(default_stream());
  }

  static Status check(const Tensor& dst, const Tensor& src) {
    if (!dst.defined() || !src.defined() || dst.dtype() != src.dtype() || dst.sizes() != src.sizes())
      return invalid_argument("a device copy into " + (dst.defined() ? dst.type_string() : std::string("nothing")) +
                              " from " + (src.defined() ? src.type_string() : std::string("nothing")));
    if (!dst.is_contiguous() || !src.is_contiguous())
      return invalid_argument("a device copy between " + dst.type_string() + " and " + src.type_string() +
                              " needs contiguous tensors");
    for (const Tensor* t : {&dst, &src})
      if (!t->is_cpu() && t->device().type != DeviceType::kCUDA)
        return invalid_argument("a CUDA copy of " + t->type_string());
    return Status::ok();
  }

  mutable std::once_flag init_;
  mutable cudaStream_t stream_ = nullptr;
  mutable cudaMemPool_t pool_ = nullptr;
};

}  // namespace

const engine::DeviceMemory& cuda_device_memory() {
  // Never destroyed: device tensors may outlive any static.
  static const auto* memory = new CudaDeviceMemory();
  return *memory;
}

}  // namespace kiln::cuda
