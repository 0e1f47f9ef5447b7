#include "kiln/tensor.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <type_traits>
#include <limits>
#include <new>

namespace kiln {

namespace {

struct AlignedFree {
  void operator()(void* p) const { ::operator delete[](p, std::align_val_t(64)); }
};

// Calls f(offset_in_elements) for each element of a strided layout in row-major order.
template <typename F>
void for_each_offset(const Shape& sizes, const Shape& strides, int64_t base, F&& f) {
  const size_t nd = sizes.size();
  for (int64_t s : sizes)
    if (s == 0) return;
  if (nd == 0) {
    f(base);
    return;
  }
  std::vector<int64_t> idx(nd, 0);
  int64_t off = base;
  const int64_t inner = sizes[nd - 1], inner_stride = strides[nd - 1];
  while (true) {
    for (int64_t i = 0; i < inner; ++i) f(off + i * inner_stride);
    size_t d = nd - 1;
    while (true) {
      if (d == 0) return;
      --d;
      off += strides[d];
      if (++idx[d] < sizes[d]) break;
      off -= strides[d] * sizes[d];
      idx[d] = 0;
    }
  }
}

// src's elements (layout sizes/strides from `base`) in row-major order into
// contiguous `dst`, one dtype: straight from src's layout, and in square
// tiles when src walks its last two dims transposed (a weight's t(), which
// lowering folds into a contiguous constant at load: a decoder's whole
// weights go through here).
template <typename T>
void gather_contiguous(T* dst, const T* src, const Shape& sizes, const Shape& strides, int64_t base) {
  const size_t nd = sizes.size();
  if (nd >= 2 && strides[nd - 2] == 1 && strides[nd - 1] != 1 && sizes[nd - 2] > 1) {
    const int64_t rows = sizes[nd - 2], cols = sizes[nd - 1], col_stride = strides[nd - 1];
    const Shape outer(sizes.begin(), sizes.end() - 2), outer_strides(strides.begin(), strides.end() - 2);
    constexpr int64_t kTile = 32;
    T* d = dst;
    for_each_offset(outer, outer_strides, base, [&](int64_t o) {
      for (int64_t i0 = 0; i0 < rows; i0 += kTile)
        for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
          const int64_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
          for (int64_t i = i0; i < i1; ++i)
            for (int64_t j = j0; j < j1; ++j) d[i * cols + j] = src[o + i + j * col_stride];
        }
      d += rows * cols;
    });
    return;
  }
  int64_t k = 0;
  for_each_offset(sizes, strides, base, [&](int64_t o) { dst[k++] = src[o]; });
}

template <typename Dst, typename Src>
Dst convert_value(Src v) {
  if constexpr (std::is_same_v<Dst, Src>) {
    return v;
  } else if constexpr (std::is_same_v<Src, Half> || std::is_same_v<Src, BFloat16>) {
    return convert_value<Dst>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<Dst, bool>) {
    return v != Src(0);
  } else if constexpr (std::is_same_v<Dst, Half> || std::is_same_v<Dst, BFloat16>) {
    return Dst(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<Dst> && std::is_floating_point_v<Src>) {
    // Saturate instead of the undefined behaviour of an out-of-range cast; NaN gives 0.
    if (!(v == v)) return Dst(0);
    if (v >= static_cast<Src>(std::numeric_limits<Dst>::max())) return std::numeric_limits<Dst>::max();
    if (v <= static_cast<Src>(std::numeric_limits<Dst>::lowest())) return std::numeric_limits<Dst>::lowest();
    return static_cast<Dst>(v);
  } else {
    return static_cast<Dst>(v);
  }
}

}  // namespace

std::shared_ptr<Storage> Storage::allocate(size_t nbytes) {
  auto s = std::make_shared<Storage>();
  size_t n = nbytes == 0 ? 64 : (nbytes + 63) / 64 * 64;
  void* p = ::operator new[](n, std::align_val_t(64));
  std::memset(p, 0, n);
  s->keeper_ = std::shared_ptr<void>(p, AlignedFree{});
  s->data_ = static_cast<uint8_t*>(p);
  s->nbytes_ = nbytes;
  return s;
}

std::shared_ptr<Storage> Storage::borrow(uint8_t* data, size_t nbytes, std::shared_ptr<void> keeper, Device device) {
  auto s = std::make_shared<Storage>();
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->device_ = device;
  s->keeper_ = std::move(keeper);
  return s;
}

std::string Device::to_string() const {
  return type == DeviceType::kCPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

void Tensor::require_host(const char* what) const {
  if (is_cpu()) return;
  // Host code reading device memory would fault or read garbage: a broken
  // invariant of the runtime (device values cross through their backend).
  std::fprintf(stderr, "kiln: internal error: Tensor::%s on %s, whose elements lie on %s\n", what,
               type_string().c_str(), device().to_string().c_str());
  std::abort();
}

Expected<int64_t> checked_numel(std::span<const int64_t> sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    if (s < 0) return invalid_argument("negative size " + std::to_string(s) + " in shape " + shape_to_string(sizes));
    if (s != 0 && n > std::numeric_limits<int64_t>::max() / s)
      return invalid_argument("element count of shape " + shape_to_string(sizes) + " overflows int64");
    n *= s;
  }
  return n;
}

Shape contiguous_strides(std::span<const int64_t> sizes) {
  Shape st(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(sizes[i], 1);
  }
  return st;
}

std::string shape_to_string(std::span<const int64_t> sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(sizes[i]);
  }
  return s + "]";
}

Tensor Tensor::zeros(DType dtype, Shape sizes) {
  Tensor t;
  // Callers size tensors from validated shapes; a bad shape here is a bug in
  // kiln, and stopping beats handing out a tensor smaller than its shape.
  auto checked = checked_numel(sizes);
  if (!checked.has_value()) {
    std::fprintf(stderr, "kiln: internal error: Tensor::zeros: %s\n", checked.status().message().c_str());
    std::abort();
  }
  int64_t n = *checked;
  if (static_cast<uint64_t>(n) > std::numeric_limits<size_t>::max() / dtype_size(dtype)) {
    std::fprintf(stderr, "kiln: internal error: Tensor::zeros: %s%s does not fit in memory\n",
                 std::string(dtype_name(dtype)).c_str(), shape_to_string(sizes).c_str());
    std::abort();
  }
  t.storage_ = Storage::allocate(static_cast<size_t>(n) * dtype_size(dtype));
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(sizes);
  t.sizes_ = std::move(sizes);
  return t;
}

Tensor Tensor::scalar(DType dtype, double value) {
  Tensor t = zeros(dtype, {});
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    *t.data<T>() = convert_value<T>(value);
  });
  return t;
}

Expected<Tensor> Tensor::from_storage(std::shared_ptr<Storage> storage, DType dtype, Shape sizes, Shape strides,
                                      int64_t storage_offset) {
  if (sizes.size() != strides.size())
    return invalid_argument("sizes " + shape_to_string(sizes) + " and strides " + shape_to_string(strides) +
                            " have different ranks");
  KILN_ASSIGN_OR_RETURN(int64_t numel, checked_numel(sizes));
  if (storage_offset < 0) return invalid_argument("negative storage offset " + std::to_string(storage_offset));
  const int64_t item = static_cast<int64_t>(dtype_size(dtype));
  const int64_t capacity = static_cast<int64_t>(storage->nbytes()) / item;
  if (numel > 0) {
    // Largest element index reached; every term is checked against overflow.
    int64_t extent = storage_offset;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (strides[i] < 0) return unsupported("negative stride " + std::to_string(strides[i]));
      int64_t span = sizes[i] - 1;
      if (strides[i] != 0 && span > (std::numeric_limits<int64_t>::max() - extent) / strides[i])
        return invalid_argument("strided extent overflows int64");
      extent += span * strides[i];
    }
    if (extent >= capacity)
      return invalid_argument("tensor " + std::string(dtype_name(dtype)) + shape_to_string(sizes) + " with strides " +
                              shape_to_string(strides) + " and offset " + std::to_string(storage_offset) +
                              " reaches element " + std::to_string(extent) + " but its storage holds " +
                              std::to_string(capacity) + " elements (" + std::to_string(storage->nbytes()) +
                              " bytes)");
  }
  Tensor t;
  t.storage_ = std::move(storage);
  t.dtype_ = dtype;
  t.sizes_ = std::move(sizes);
  t.strides_ = std::move(strides);
  t.offset_ = storage_offset;
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes_) n *= s;
  return n;
}

bool Tensor::same_bytes(const Tensor& other) const {
  if (dtype_ != other.dtype_ || sizes_ != other.sizes_) return false;
  if (storage_ == other.storage_ && offset_ == other.offset_ && strides_ == other.strides_) return true;
  require_host("same_bytes");
  other.require_host("same_bytes");
  const Tensor a = contiguous(), b = other.contiguous();
  return a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // as in PyTorch: nothing to lay out
  int64_t expected = 1;
  for (size_t i = sizes_.size(); i-- > 0;) {
    if (sizes_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= sizes_[i];
  }
  return true;
}

Tensor Tensor::contiguous() const {
  if (!defined() || is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  require_host("clone");
  Tensor out = zeros(dtype_, sizes_);
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  require_host("to");
  Tensor out = zeros(dtype, sizes_);
  out.copy_from(*this);
  return out;
}

Tensor Tensor::as_strided(Shape sizes, Shape strides, int64_t storage_offset) const {
  Tensor t;
  t.storage_ = storage_;
  t.dtype_ = dtype_;
  t.sizes_ = std::move(sizes);
  t.strides_ = std::move(strides);
  t.offset_ = storage_offset;
  return t;
}

Tensor Tensor::reshape(Shape sizes) const {
  if (is_contiguous()) {
    Shape st = contiguous_strides(sizes);
    return as_strided(std::move(sizes), std::move(st), offset_);
  }
  Tensor c = clone();
  Shape st = contiguous_strides(sizes);
  return c.as_strided(std::move(sizes), std::move(st), 0);
}

void Tensor::copy_from(const Tensor& src) {
  require_host("copy_from");
  src.require_host("copy_from");
  // Gather src into a contiguous, converted buffer, then scatter into this
  // layout; two contiguous tensors (that do not overlap) convert in one pass.
  visit_dtype(dtype_, [&](auto dst_tag) {
    using D = decltype(dst_tag);
    visit_dtype(src.dtype_, [&](auto src_tag) {
      using S = decltype(src_tag);
      if (is_contiguous() && src.is_contiguous() && src.numel() == numel() && storage_ != src.storage_) {
        const S* sp = src.data<S>();
        D* dp = data<D>();
        for (int64_t i = 0, n = numel(); i < n; ++i) dp[i] = convert_value<D>(sp[i]);
        return;
      }
      if constexpr (std::is_same_v<D, S>) {
        if (src.numel() == numel() && storage_ != src.storage_) {
          if (is_contiguous()) {
            gather_contiguous(data<D>(), reinterpret_cast<const S*>(src.storage_->data()), src.sizes_, src.strides_,
                              src.offset_);
            return;
          }
          if (src.is_contiguous()) {  // into a view (a slice of a concatenation)
            const S* sp = src.data<S>();
            int64_t k = 0;
            for_each_offset(sizes_, strides_, offset_,
                            [&, dp = reinterpret_cast<D*>(storage_->data())](int64_t o) { dp[o] = sp[k++]; });
            return;
          }
        }
      }
      std::vector<D> tmp;
      tmp.reserve(static_cast<size_t>(src.numel()));
      const S* sp = reinterpret_cast<const S*>(src.storage_->data());
      for_each_offset(src.sizes_, src.strides_, src.offset_,
                      [&](int64_t o) { tmp.push_back(convert_value<D>(sp[o])); });
      D* dp = reinterpret_cast<D*>(storage_->data());
      size_t k = 0;
      for_each_offset(sizes_, strides_, offset_, [&](int64_t o) { dp[o] = tmp[k++]; });
    });
  });
}

double Tensor::value_at(int64_t i) const {
  require_host("value_at");
  // Unravel i in row-major order over sizes_.
  int64_t off = offset_;
  for (size_t d = sizes_.size(); d-- > 0;) {
    int64_t s = sizes_[d];
    off += (i % s) * strides_[d];
    i /= s;
  }
  return visit_dtype(dtype_, [&](auto tag) -> double {
    using T = decltype(tag);
    T v = reinterpret_cast<const T*>(storage_->data())[off];
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      return static_cast<double>(static_cast<float>(v));
    else
      return static_cast<double>(v);
  });
}

int64_t Tensor::int_at(int64_t i) const {
  require_host("int_at");
  if (!is_floating(dtype_)) {
    int64_t off = offset_;
    for (size_t d = sizes_.size(); d-- > 0;) {
      int64_t s = sizes_[d];
      off += (i % s) * strides_[d];
      i /= s;
    }
    return visit_dtype(dtype_, [&](auto tag) -> int64_t {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T>)
        return static_cast<int64_t>(reinterpret_cast<const T*>(storage_->data())[off]);
      else
        return 0;
    });
  }
  double v = value_at(i);
  if (!(v == v)) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return static_cast<int64_t>(v);
}

std::string Tensor::type_string() const {
  std::string s = std::string(dtype_name(dtype_)) + shape_to_string(sizes_);
  return is_cpu() ? s : s + " on " + device().to_string();
}

}  // namespace kiln
