// Elementwise kernels over tensors of any strides: copies and conversions,
// fills with a number, torch.where, floating comparisons and integer arithmetic. A grid-stride
// loop of 256 threads per block over the output's n elements; each element's
// offset in every tensor comes from its linear index through the loop's
// dims (kiln_strided_offsets). Idx is int where every index and offset fits
// (integer division by compiled-in sizes is much cheaper), else long long.
//
// Sizes: 0 n, then the loop's Rank sizes (innermost first, size-1 dims
// dropped and neighbours merged where every tensor allows), then each
// tensor's Rank strides in parameter order, then the kernel's own numbers.
#pragma once

#include "kiln/prelude.cuh"

namespace kiln {

// o[t] = the offset of linear index i in tensor t.
template <typename Idx, int Rank, int NT, class D, class... P>
__device__ __forceinline__ void strided_offsets(Idx i, Idx (&o)[NT], const P&... kd) {
#pragma unroll
  for (int t = 0; t < NT; ++t) o[t] = 0;
  Idx r = i;
#pragma unroll
  for (int d = 0; d < Rank; ++d) {
    const Idx size = static_cast<Idx>(D::at(1 + d, kd...));
    const Idx x = d + 1 == Rank ? r : r % size;
#pragma unroll
    for (int t = 0; t < NT; ++t) o[t] += x * static_cast<Idx>(D::at(1 + Rank + t * Rank + d, kd...));
    if (d + 1 != Rank) r /= size;
  }
}

// The index of the kernel's first own number among its sizes.
template <int Rank, int NT>
constexpr int strided_extra = 1 + Rank + NT * Rank;

#define KILN_STRIDED_LOOP(i)                                                                          \
  for (Idx i = static_cast<Idx>(blockIdx.x) * 256 + threadIdx.x; i < static_cast<Idx>(D::at(0, kd...)); \
       i += static_cast<Idx>(gridDim.x) * 256)

// out = in converted to out's type (bool as 0/1). Params: out, in.
template <typename O, typename I, typename Idx, int Rank, class D, class... P>
__global__ void __launch_bounds__(256) copy(O* __restrict__ out, const I* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  KILN_STRIDED_LOOP(i) {
    Idx o[2];
    strided_offsets<Idx, Rank, 2, D>(i, o, kd...);
    out[o[0]] = kiln_cvt<O, I>(in[o[1]]);
  }
}

// out = a number: for a floating T its float32 bits are the kernel's own
// number (converted to T), for an integer or bool T the integer itself. Params: out.
template <typename T, bool Floating, typename Idx, int Rank, class D, class... P>
__global__ void __launch_bounds__(256) fill(T* __restrict__ out, P... kd) {
  kiln_enter_after_prior_grid();
  const long long raw = D::at(strided_extra<Rank, 1>, kd...);
  T v;
  if constexpr (Floating) {
    v = kiln_cvt<T, float>(__int_as_float(static_cast<int>(raw)));
  } else {
    v = static_cast<T>(raw);
  }
  KILN_STRIDED_LOOP(i) {
    Idx o[1];
    strided_offsets<Idx, Rank, 1, D>(i, o, kd...);
    out[o[0]] = v;
  }
}

// out = c ? a : b, a and b converted to out's type. Params: out, c (bool), a, b.
template <typename T, typename A, typename B, typename Idx, int Rank, class D, class... P>
__global__ void __launch_bounds__(256)
    where(T* __restrict__ out, const bool* __restrict__ c, const A* __restrict__ a, const B* __restrict__ b, P... kd) {
  kiln_enter_after_prior_grid();
  KILN_STRIDED_LOOP(i) {
    Idx o[4];
    strided_offsets<Idx, Rank, 4, D>(i, o, kd...);
    out[o[0]] = c[o[1]] ? kiln_cvt<T, A>(a[o[2]]) : kiln_cvt<T, B>(b[o[3]]);
  }
}

enum CompareOp { kLt = 0, kLe = 1, kGt = 2, kGe = 3, kEq = 4, kNe = 5 };

template <int Op, typename V>
__device__ __forceinline__ bool compared(V a, V b) {
  if constexpr (Op == kLt) return a < b;
  if constexpr (Op == kLe) return a <= b;
  if constexpr (Op == kGt) return a > b;
  if constexpr (Op == kGe) return a >= b;
  if constexpr (Op == kEq) return a == b;
  if constexpr (Op == kNe) return a != b;
}

// Floating comparison, both sides in float (exact for every operand type).
// Params: out (bool), a, b.
template <typename A, typename B, int Op, typename Idx, int Rank, class D, class... P>
__global__ void __launch_bounds__(256)
    compare(bool* __restrict__ out, const A* __restrict__ a, const B* __restrict__ b, P... kd) {
  kiln_enter_after_prior_grid();
  KILN_STRIDED_LOOP(i) {
    Idx o[3];
    strided_offsets<Idx, Rank, 3, D>(i, o, kd...);
    out[o[0]] = compared<Op>(kiln_cvt<float, A>(a[o[1]]), kiln_cvt<float, B>(b[o[2]]));
  }
}

// a compared with a number (its float32 bits the kernel's own number,
// rounded to a's type first as torch converts a Python number). Params: out (bool), a.
template <typename A, int Op, typename Idx, int Rank, class D, class... P>
__global__ void __launch_bounds__(256) compare_scalar(bool* __restrict__ out, const A* __restrict__ a, P... kd) {
  kiln_enter_after_prior_grid();
  const float rhs = __int_as_float(static_cast<int>(D::at(strided_extra<Rank, 2>, kd...)));
  KILN_STRIDED_LOOP(i) {
    Idx o[2];
    strided_offsets<Idx, Rank, 2, D>(i, o, kd...);
    out[o[0]] = compared<Op>(kiln_cvt<float, A>(a[o[1]]), rhs);
  }
}

enum IntegerOp { kAdd = 0, kSub = 1, kMul = 2, kAnd = 3, kOr = 4, kXor = 5, kIntCompare = 6 };  // + CompareOp

template <typename I>
struct unsigned_of;
template <>
struct unsigned_of<long long> {
  using type = unsigned long long;
};
template <>
struct unsigned_of<int> {
  using type = unsigned int;
};

// a OP b as torch's integer tensors do it: wrapping arithmetic (b times Alpha
// for + and -), bitwise operators (bool too), comparisons (Op kIntCompare + a CompareOp).
template <typename T, typename I, int Op, long long Alpha>
__device__ __forceinline__ T integer_op(I a, I b) {
  if constexpr (Op <= kMul) {
    using U = typename unsigned_of<I>::type;
    const U r = Op == kMul ? static_cast<U>(b) : static_cast<U>(b) * static_cast<U>(Alpha);
    const U x = static_cast<U>(a);
    return static_cast<T>(Op == kAdd ? x + r : Op == kSub ? x - r : x * r);
  } else if constexpr (Op == kAnd) {
    return static_cast<T>(a & b);
  } else if constexpr (Op == kOr) {
    return static_cast<T>(a | b);
  } else if constexpr (Op == kXor) {
    return static_cast<T>(a ^ b);
  } else {
    return compared<Op - kIntCompare>(a, b);
  }
}

// Params: out, a, b.
template <typename T, typename I, int Op, long long Alpha, typename Idx, int Rank, class D, class... P>
__global__ void __launch_bounds__(256)
    integer_binary(T* __restrict__ out, const I* __restrict__ a, const I* __restrict__ b, P... kd) {
  kiln_enter_after_prior_grid();
  KILN_STRIDED_LOOP(i) {
    Idx o[3];
    strided_offsets<Idx, Rank, 3, D>(i, o, kd...);
    out[o[0]] = integer_op<T, I, Op, Alpha>(a[o[1]], b[o[2]]);
  }
}

// b a number, the kernel's own (a size, say: a sequence length added to a counter). Params: out, a.
template <typename T, typename I, int Op, long long Alpha, typename Idx, int Rank, class D, class... P>
__global__ void __launch_bounds__(256) integer_scalar(T* __restrict__ out, const I* __restrict__ a, P... kd) {
  kiln_enter_after_prior_grid();
  const I b = static_cast<I>(D::at(strided_extra<Rank, 2>, kd...));
  KILN_STRIDED_LOOP(i) {
    Idx o[2];
    strided_offsets<Idx, Rank, 2, D>(i, o, kd...);
    out[o[0]] = integer_op<T, I, Op, Alpha>(a[o[1]], b);
  }
}

#undef KILN_STRIDED_LOOP

}  // namespace kiln
