#include "backends/cpu/broadcast.h"

#include <algorithm>

namespace kiln::cpu {

std::optional<int64_t> wrap_dim(int64_t dim, int64_t rank) {
  const int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r) return std::nullopt;
  return dim < 0 ? dim + r : dim;
}

std::string dim_out_of_range(int64_t dim, int64_t rank) {
  const int64_t r = std::max<int64_t>(rank, 1);
  return "dimension " + std::to_string(dim) + " is out of range for a tensor of rank " + std::to_string(rank) +
         " (expected a dim in [" + std::to_string(-r) + ", " + std::to_string(r - 1) + "])";
}

std::optional<Shape> broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    // Align from the right; a missing dim acts as size 1.
    const int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (sa == sb || sb == 1) {
      out[i] = sa;
    } else if (sa == 1) {
      out[i] = sb;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

bool can_expand(std::span<const int64_t> from, std::span<const int64_t> to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != to[lead + i] && from[i] != 1) return false;
  return true;
}

Tensor expand_to(const Tensor& t, std::span<const int64_t> to) {
  const size_t lead = to.size() - t.sizes().size();
  Shape strides(to.size(), 0);
  for (size_t i = 0; i < t.sizes().size(); ++i) strides[lead + i] = (t.sizes()[i] == to[lead + i]) ? t.strides()[i] : 0;
  return t.as_strided(Shape(to.begin(), to.end()), std::move(strides), t.storage_offset());
}

Tensor select_view(const Tensor& t, int64_t dim, int64_t index) {
  Shape sizes = t.sizes(), strides = t.strides();
  const int64_t offset = t.storage_offset() + index * strides[dim];
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  return t.as_strided(std::move(sizes), std::move(strides), offset);
}

Tensor slice_view(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Shape sizes = t.sizes(), strides = t.strides();
  sizes[dim] = end > start ? (end - start + step - 1) / step : 0;
  strides[dim] *= step;
  return t.as_strided(std::move(sizes), std::move(strides), t.storage_offset() + start * t.strides()[dim]);
}

std::pair<int64_t, int64_t> clamp_slice(std::optional<int64_t> start, std::optional<int64_t> end, int64_t size) {
  auto clamp_bound = [size](int64_t v) {
    if (v < 0) v += size;  // cannot overflow: size >= 0
    return std::clamp<int64_t>(v, 0, size);
  };
  const int64_t s = clamp_bound(start.value_or(0));
  const int64_t e = std::max(s, clamp_bound(end.value_or(size)));
  return {s, e};
}

std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(t.numel()));
  for_each_offsets<1>(t.sizes(), {t.strides()}, [&](const std::array<int64_t, 1>& o) { out.push_back(o[0]); });
  return out;
}

void copy_into(const Tensor& dst, const Tensor& src) {
  visit_dtype(dst.dtype(), [&](auto dst_tag) {
    using D = decltype(dst_tag);
    visit_dtype(src.dtype(), [&](auto src_tag) {
      using S = decltype(src_tag);
      D* dp = dst.data<D>();
      const S* sp = src.data<S>();
      for_each_offsets<2>(dst.sizes(), {dst.strides(), src.strides()},
                          [&](const std::array<int64_t, 2>& o) { dp[o[0]] = convert<D>(sp[o[1]]); });
    });
  });
}

Tensor cast_copy(const Tensor& t, DType dtype) {
  Tensor out = Tensor::zeros(dtype, t.sizes());
  copy_into(out, t);
  return out;
}

Tensor cast_to(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : cast_copy(t, dtype); }

DType scalar_dtype(const Scalar& s) {
  switch (s.kind) {
    case Scalar::Kind::kInt: return DType::Int64;
    case Scalar::Kind::kFloat: return DType::Float64;
    case Scalar::Kind::kBool: return DType::Bool;
  }
  return DType::Float64;
}

Expected<Tensor> scalar_to_dtype(const Scalar& s, DType dtype) {
  auto overflows = [&](auto tag) -> bool {
    using T = decltype(tag);
    if (s.kind == Scalar::Kind::kBool || std::is_same_v<T, bool>) return false;
    double lowest, highest;
    if constexpr (std::is_same_v<T, Half>) {
      lowest = -65504.0;
      highest = 65504.0;
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      lowest = -3.3895313892515355e38;
      highest = 3.3895313892515355e38;
    } else {
      lowest = static_cast<double>(std::numeric_limits<T>::lowest());
      highest = static_cast<double>(std::numeric_limits<T>::max());
    }
    if (s.kind == Scalar::Kind::kInt) {
      if constexpr (std::is_integral_v<T>) {
        // Compare in integers: int64's max does not survive a trip through double.
        constexpr uint64_t max = static_cast<uint64_t>(std::numeric_limits<T>::max());
        if constexpr (std::is_unsigned_v<T>) {
          const uint64_t magnitude = s.i < 0 ? uint64_t{0} - static_cast<uint64_t>(s.i) : static_cast<uint64_t>(s.i);
          return magnitude > max;
        } else {
          constexpr int64_t min = static_cast<int64_t>(std::numeric_limits<T>::lowest());
          return s.i < min || (s.i > 0 && static_cast<uint64_t>(s.i) > max);
        }
      }
      return static_cast<double>(s.i) < lowest || static_cast<double>(s.i) > highest;
    }
    if (std::isinf(s.f)) return !is_float_v<T>;
    if (std::isnan(s.f)) return !is_float_v<T>;
    // A float into an integer type truncates: anything below max + 1 fits.
    if constexpr (std::is_integral_v<T>) return s.f < lowest || s.f >= highest + 1;
    return s.f < lowest || s.f > highest;
  };
  if (visit_dtype(dtype, overflows)) {
    const std::string v = s.kind == Scalar::Kind::kInt ? std::to_string(s.i) : std::to_string(s.f);
    return invalid_argument("value " + v + " cannot be converted to type " + std::string(dtype_name(dtype)) +
                            " without overflow");
  }
  return cast_to(scalar_to_tensor(s), dtype);
}

Tensor scalar_to_tensor(const Scalar& s) {
  Tensor t = Tensor::zeros(scalar_dtype(s), {});
  switch (s.kind) {
    case Scalar::Kind::kInt: *t.data<int64_t>() = s.i; break;
    case Scalar::Kind::kFloat: *t.data<double>() = s.f; break;
    case Scalar::Kind::kBool: *t.data<bool>() = s.i != 0; break;
  }
  return t;
}

}  // namespace kiln::cpu
