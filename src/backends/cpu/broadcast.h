// Helpers shared by the CPU reference kernels: dim wrapping, broadcasting,
// strided iteration, element conversion and PyTorch's type promotion.
//
// Conventions: element offsets are counted in elements (not bytes) from a
// tensor's first element (Tensor::data<T>()), so a view's storage offset is
// already applied. Output tensors are fresh and contiguous.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cpu/kernel.h"
#include "base/promotion.h"
#include "kiln/dtype.h"
#include "kiln/tensor.h"

namespace kiln::cpu {

// ---- dims

// Wraps `dim` (possibly negative) into [0, rank). As in PyTorch, a 0-d tensor
// accepts dims -1 and 0 (both give 0). nullopt when out of range.
std::optional<int64_t> wrap_dim(int64_t dim, int64_t rank);
// "dimension 3 is out of range for a tensor of rank 2 (expected a dim in [-2, 1])"
std::string dim_out_of_range(int64_t dim, int64_t rank);

// ---- broadcasting

// The shape both `a` and `b` broadcast to (NumPy rules), or nullopt.
std::optional<Shape> broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b);
// True when a tensor of shape `from` can be expanded (broadcast) to `to`.
bool can_expand(std::span<const int64_t> from, std::span<const int64_t> to);
// `t` seen with shape `to` (stride 0 along broadcast dims); shares t's storage.
// Precondition: can_expand(t.sizes(), to).
Tensor expand_to(const Tensor& t, std::span<const int64_t> to);

// ---- strided views (results share t's storage)

// `t` at position `index` (in range) along dim `dim`, which is dropped.
Tensor select_view(const Tensor& t, int64_t dim, int64_t index);
// Elements start, start + step, ... (fewer than `end`) along dim `dim`; the
// bounds are in range and step > 0.
Tensor slice_view(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
// Python slice bounds for a dim of `size`: negative values count from the end,
// then both clamp to [0, size] and end to at least start. None is start 0 / end size.
std::pair<int64_t, int64_t> clamp_slice(std::optional<int64_t> start, std::optional<int64_t> end, int64_t size);

// ---- strided iteration

// Calls f(offsets) for every index of `sizes` in row-major order, where
// offsets[k] = sum_d index[d] * strides[k][d]. Each strides[k] has sizes.size()
// entries. Does nothing when some size is 0; calls f once for a 0-d shape.
template <size_t N, typename F>
void for_each_offsets(std::span<const int64_t> sizes, const std::array<std::span<const int64_t>, N>& strides, F&& f) {
  for (int64_t s : sizes)
    if (s == 0) return;
  std::array<int64_t, N> off{};
  const size_t nd = sizes.size();
  if (nd == 0) {
    f(off);
    return;
  }
  std::vector<int64_t> idx(nd, 0);
  const int64_t inner = sizes[nd - 1];
  std::array<int64_t, N> inner_stride;
  for (size_t k = 0; k < N; ++k) inner_stride[k] = strides[k][nd - 1];
  while (true) {
    std::array<int64_t, N> o = off;
    for (int64_t i = 0; i < inner; ++i) {
      f(o);
      for (size_t k = 0; k < N; ++k) o[k] += inner_stride[k];
    }
    size_t d = nd - 1;
    while (true) {
      if (d == 0) return;
      --d;
      for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
      if (++idx[d] < sizes[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * sizes[d];
      idx[d] = 0;
    }
  }
}

// Calls f(index) for every multi-index of `sizes` in row-major order (`index`
// is a std::vector<int64_t> updated in place). Does nothing when some size is 0;
// calls f once with an empty index for a 0-d shape.
template <typename F>
void for_each_index(std::span<const int64_t> sizes, F&& f) {
  for (int64_t s : sizes)
    if (s == 0) return;
  std::vector<int64_t> idx(sizes.size(), 0);
  while (true) {
    f(static_cast<const std::vector<int64_t>&>(idx));
    size_t d = sizes.size();
    while (true) {
      if (d == 0) return;
      --d;
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
    }
  }
}

// Offsets of every element of `t` in row-major order (see for_each_offsets).
std::vector<int64_t> element_offsets(const Tensor& t);

// ---- element types

template <typename T>
inline constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T>
inline constexpr bool is_float_v = is_reduced_float_v<T> || std::is_floating_point_v<T>;

// The type arithmetic on T happens in: float for Half/BFloat16, else T itself.
template <typename T>
using opmath_t = std::conditional_t<is_reduced_float_v<T>, float, T>;

// Converts one element between storage/compute types the way PyTorch's CPU
// casts do: 16-bit floats go through float, anything to bool is `!= 0` (NaN is
// true), and floats to integers truncate toward zero through int64 (NaN and
// out-of-range values give INT64_MIN, or INT32_MIN for narrower types, before
// narrowing, as x86 does) instead of being undefined behaviour.
template <typename Dst, typename Src>
Dst convert(Src v) {
  if constexpr (std::is_same_v<Dst, Src>) {
    return v;
  } else if constexpr (is_reduced_float_v<Src>) {
    return convert<Dst>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<Dst, bool>) {
    return v != Src(0);
  } else if constexpr (is_reduced_float_v<Dst>) {
    return Dst(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<Dst> && std::is_floating_point_v<Src>) {
    const double d = static_cast<double>(v);
    if constexpr (sizeof(Dst) == 8) {
      constexpr double kLimit = 9223372036854775808.0;  // 2^63
      return static_cast<Dst>((d >= -kLimit && d < kLimit) ? static_cast<int64_t>(d)
                                                           : std::numeric_limits<int64_t>::min());
    } else {
      // Narrower integers convert through int32, as x86's cvttss2si does.
      constexpr double kLimit = 2147483648.0;  // 2^31
      return static_cast<Dst>((d >= -kLimit && d < kLimit) ? static_cast<int32_t>(d)
                                                           : std::numeric_limits<int32_t>::min());
    }
  } else {
    return static_cast<Dst>(v);
  }
}

// Loads a stored element into its compute type.
template <typename T>
opmath_t<T> load(T v) {
  return convert<opmath_t<T>>(v);
}

// Calls f(T{}) with T the storage type of a floating dtype (float for any
// non-floating dtype, which callers rule out first).
template <typename F>
decltype(auto) visit_floating(DType t, F&& f) {
  switch (t) {
    case DType::Float64: return f(double{});
    case DType::Float16: return f(Half{});
    case DType::BFloat16: return f(BFloat16{});
    default: return f(float{});
  }
}

// `t` converted to `dtype` with convert<>() (a fresh contiguous tensor), or
// `t` itself when it already has that dtype.
Tensor cast_to(const Tensor& t, DType dtype);
// A fresh contiguous copy of `t` in `dtype`.
Tensor cast_copy(const Tensor& t, DType dtype);
// Writes src's elements, converted, into dst's elements (both any strides).
// `src` must have dst's shape (expand it first) and must not overlap dst.
void copy_into(const Tensor& dst, const Tensor& src);

// ---- elementwise maps (output contiguous, inputs any strides)

// out[i] = f(load(in[i])); `in` has out's shape.
template <typename Out, typename In, typename F>
void map_unary(const Tensor& in, const Tensor& out, F&& f) {
  const In* ip = in.data<In>();
  Out* op = out.data<Out>();
  if (in.is_contiguous()) {
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) op[i] = convert<Out>(f(load(ip[i])));
    return;
  }
  int64_t k = 0;
  for_each_offsets<1>(in.sizes(), {in.strides()},
                      [&](const std::array<int64_t, 1>& o) { op[k++] = convert<Out>(f(load(ip[o[0]]))); });
}

// out[i] = f(load(a[i]), load(b[i])); `a` and `b` have out's shape (expand them first).
template <typename Out, typename A, typename B, typename F>
void map_binary(const Tensor& a, const Tensor& b, const Tensor& out, F&& f) {
  const A* ap = a.data<A>();
  const B* bp = b.data<B>();
  Out* op = out.data<Out>();
  int64_t k = 0;
  for_each_offsets<2>(out.sizes(), {a.strides(), b.strides()}, [&](const std::array<int64_t, 2>& o) {
    op[k++] = convert<Out>(f(load(ap[o[0]]), load(bp[o[1]])));
  });
}

// out[i] = f(load(a[i]), load(b[i]), load(c[i])); all inputs have out's shape.
template <typename Out, typename A, typename B, typename C, typename F>
void map_ternary(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& out, F&& f) {
  const A* ap = a.data<A>();
  const B* bp = b.data<B>();
  const C* cp = c.data<C>();
  Out* op = out.data<Out>();
  int64_t k = 0;
  for_each_offsets<3>(out.sizes(), {a.strides(), b.strides(), c.strides()}, [&](const std::array<int64_t, 3>& o) {
    op[k++] = convert<Out>(f(load(ap[o[0]]), load(bp[o[1]]), load(cp[o[2]])));
  });
}

// ---- type promotion

// PromotionOperand and result_type: base/promotion.h (the CUDA layers promote the same way).
using kiln::PromotionOperand;
using kiln::result_type;

// `s` as a 0-d tensor of `dtype`, or an error when the value does not fit
// (ATen's Scalar::to<T>() check, used by fill-like ops, clamp bounds and
// alpha): out of the target's range, NaN or infinity into an integer type, or
// a finite value beyond a float type's range. Negative ints may wrap into
// unsigned types; anything converts to bool.
Expected<Tensor> scalar_to_dtype(const Scalar& s, DType dtype);

// The 0-d tensor a Python number is wrapped into: int64, float64 or bool.
Tensor scalar_to_tensor(const Scalar& s);
// The dtype scalar_to_tensor uses for `s`.
DType scalar_dtype(const Scalar& s);

}  // namespace kiln::cpu
