#include "backends/cuda/device_memory.h"

#include <map>
#include <mutex>

#include "backends/cuda/cuda_support.h"

namespace kiln::cuda {

namespace {

// Freed device blocks by size, handed out again to requests of that size.
// Blocks beyond kMaxCachedBytes go back to CUDA at once.
class BlockPool {
 public:
  static constexpr size_t kMaxCachedBytes = size_t{1} << 30;

  Expected<void*> take(size_t nbytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto it = free_.find(nbytes); it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_ -= nbytes;
        return p;
      }
    }
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, nbytes); e != cudaSuccess) {
      (void)cudaGetLastError();  // out of memory is not sticky; leave no error behind
      // Cached blocks of other sizes go back first, then one more try.
      release_cached();
      if (cudaMalloc(&p, nbytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return Status(ErrorCode::kInternal, "CUDA device memory: cannot allocate " + std::to_string(nbytes) +
                                                " bytes (" + cudaGetErrorString(e) + ")");
      }
    }
    return p;
  }

  void give_back(void* p, size_t nbytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + nbytes <= kMaxCachedBytes) {
        free_.emplace(nbytes, p);
        cached_ += nbytes;
        return;
      }
    }
    cudaFree(p);
  }

 private:
  void release_cached() {
    std::multimap<size_t, void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks.swap(free_);
      cached_ = 0;
    }
    for (const auto& [n, p] : blocks) cudaFree(p);
  }

  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0;
};

class CudaDeviceMemory final : public engine::DeviceMemory {
 public:
  Device device() const override {
    int ordinal = 0;
    if (cudaGetDevice(&ordinal) != cudaSuccess) (void)cudaGetLastError();
    return Device::cuda(ordinal);
  }

  Expected<Tensor> empty(DType dtype, const Shape& sizes) const override {
    KILN_ASSIGN_OR_RETURN(const int64_t n, checked_numel(sizes));
    // 256-byte granules: every tensor starts as aligned as cudaMalloc's, and
    // near sizes share pooled blocks.
    const size_t nbytes = (static_cast<size_t>(n) * dtype_size(dtype) + 255) / 256 * 256;
    KILN_ASSIGN_OR_RETURN(void* p, pool_->take(std::max<size_t>(nbytes, 256)));
    const size_t held = std::max<size_t>(nbytes, 256);
    std::shared_ptr<void> keeper(p, [pool = pool_, held](void* q) { pool->give_back(q, held); });
    auto storage = Storage::borrow(static_cast<uint8_t*>(p), held, std::move(keeper), device());
    return Tensor::from_storage(std::move(storage), dtype, sizes, contiguous_strides(sizes), 0);
  }

  Status copy(const Tensor& dst, const Tensor& src) const override { return copy_all({&dst, 1}, {&src, 1}); }

  Status copy_all(std::span<const Tensor> dsts, std::span<const Tensor> srcs) const override {
    if (dsts.size() != srcs.size()) return invalid_argument("copy_all: unequal lists");
    for (size_t i = 0; i < dsts.size(); ++i) KILN_TRY(check(dsts[i], srcs[i]));
    // On a stream of its own, waited for once: complete on return, and after
    // every engine call that returned before (those wait for their work).
    cudaStream_t stream = nullptr;
    {
      std::lock_guard<std::mutex> lock(stream_mutex_);
      if (!stream_) KILN_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      stream = stream_;
    }
    for (size_t i = 0; i < dsts.size(); ++i)
      if (dsts[i].nbytes() > 0)
        KILN_CUDA_TRY(
            cudaMemcpyAsync(dsts[i].raw_data(), srcs[i].raw_data(), dsts[i].nbytes(), cudaMemcpyDefault, stream));
    KILN_CUDA_TRY(cudaStreamSynchronize(stream));
    return Status::ok();
  }

 private:
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

  std::shared_ptr<BlockPool> pool_ = std::make_shared<BlockPool>();
  mutable std::mutex stream_mutex_;
  mutable cudaStream_t stream_ = nullptr;
};

}  // namespace

const engine::DeviceMemory& cuda_device_memory() {
  // Never destroyed: device tensors may outlive any static (the pool is held
  // by every block's keeper as well).
  static const auto* memory = new CudaDeviceMemory();
  return *memory;
}

}  // namespace kiln::cuda
