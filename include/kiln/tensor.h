// A strided, typed view of a shared byte storage: the tensor of kiln's
// reference runtime. Views share storage; kernels ask for contiguous().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/status.h"

namespace kiln {

// Where a storage's bytes lie: host memory, or the memory of a device with
// its index (CUDA device 0 is "cuda:0").
enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };
struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  static constexpr Device cpu() { return {}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool operator==(const Device&) const = default;
  std::string to_string() const;  // "cpu", "cuda:0"
};

// Bytes owned by kiln (64-byte aligned, host memory) or borrowed from
// something a keeper keeps alive (a mapped file, a device allocation, a
// framework's tensor).
class Storage {
 public:
  // Zero-filled, 64-byte aligned host memory.
  static std::shared_ptr<Storage> allocate(size_t nbytes);
  // Borrows [data, data + nbytes) on `device`; `keeper` owns the memory.
  static std::shared_ptr<Storage> borrow(uint8_t* data, size_t nbytes, std::shared_ptr<void> keeper,
                                         Device device = Device::cpu());

  uint8_t* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  uint8_t* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::shared_ptr<void> keeper_;
};

using Shape = std::vector<int64_t>;

// Product of sizes, or an error if it overflows int64 or a size is negative.
Expected<int64_t> checked_numel(std::span<const int64_t> sizes);
Shape contiguous_strides(std::span<const int64_t> sizes);
std::string shape_to_string(std::span<const int64_t> sizes);

class Tensor {
 public:
  Tensor() = default;  // undefined tensor

  // New zero-filled contiguous tensor. `sizes` must be valid (non-negative,
  // element count within int64); kiln stops on an invalid shape here.
  static Tensor zeros(DType dtype, Shape sizes);
  static Tensor empty(DType dtype, Shape sizes) { return zeros(dtype, std::move(sizes)); }
  // 0-d tensors holding one value (converted to dtype).
  static Tensor scalar(DType dtype, double value);
  // A view of `storage`; checks that every element lies inside it.
  static Expected<Tensor> from_storage(std::shared_ptr<Storage> storage, DType dtype, Shape sizes,
                                       Shape strides, int64_t storage_offset);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& sizes() const { return sizes_; }
  const Shape& strides() const { return strides_; }
  int64_t storage_offset() const { return offset_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t size(int64_t d) const { return sizes_[static_cast<size_t>(d < 0 ? d + dim() : d)]; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Where the elements lie. Everything below that reads or writes elements
  // (copies, conversions, value_at) works on host tensors only: a device
  // tensor crosses to the host through its backend (kiln::copy_tensor in
  // kiln.h), and reaching one of them with device memory is a bug that stops
  // kiln naming it.
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  bool is_cpu() const { return device().is_cpu(); }

  bool is_contiguous() const;
  // Same dtype, sizes and element bytes (the same memory viewed alike is
  // answered without reading it).
  bool same_bytes(const Tensor& other) const;
  // This tensor if contiguous, else a contiguous copy.
  Tensor contiguous() const;
  // Always a fresh contiguous copy.
  Tensor clone() const;
  // Elementwise conversion into a new contiguous tensor; returns this tensor
  // itself (sharing storage) when it already has `dtype`.
  Tensor to(DType dtype) const;
  // A view sharing storage. The caller guarantees that every element lies
  // inside the storage (from_storage is the checked way to build a view).
  Tensor as_strided(Shape sizes, Shape strides, int64_t storage_offset) const;
  // A view when the layout allows it, otherwise a copy. `sizes` must hold numel() elements.
  Tensor reshape(Shape sizes) const;
  // Copies src (same shape; any dtype, converted) into this tensor's elements.
  void copy_from(const Tensor& src);

  // Pointer to the first element (storage + offset).
  void* raw_data() const { return storage_->data() + static_cast<size_t>(offset_) * dtype_size(dtype_); }
  template <typename T>
  T* data() const { return reinterpret_cast<T*>(raw_data()); }

  // Element `i` in logical row-major order, converted to double / int64.
  double value_at(int64_t i) const;
  int64_t int_at(int64_t i) const;
  // First element as double / int64 (for 0-d and 1-element tensors).
  double item() const { return value_at(0); }
  int64_t item_int() const { return int_at(0); }

  // "float32[2, 3]"; device tensors add their device ("float32[2, 3] on cuda:0").
  std::string type_string() const;

 private:
  // Stops kiln, naming `what`, when the elements lie on a device.
  void require_host(const char* what) const;

  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::Float32;
  Shape sizes_;
  Shape strides_;
  int64_t offset_ = 0;
};

}  // namespace kiln
