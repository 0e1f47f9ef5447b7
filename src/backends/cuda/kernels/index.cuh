// Rows picked and written by integer indices: an embedding's rows gathered
// from a table, and index_copy's scatter of rows into positions along a dim.
// An index out of range sets *error to ErrorCode (the engine's error word)
// instead of reading or writing out of bounds. A grid-stride loop of 256
// threads per block.
#pragma once

#include "kiln/prelude.cuh"

namespace kiln {

// out[i, :] = table[index[i], :] for `rows` indices into a [table_rows, cols]
// table (both contiguous); an index in [-table_rows, 0) counts from the end,
// one outside [-table_rows, table_rows) writes zeros.
// Params: out, table, index, error. Sizes: 0 cols, 1 table_rows, 2 rows * cols.
template <typename T, typename I, int ErrorCode, class D, class... P>
__global__ void __launch_bounds__(256)
    gather_rows(T* __restrict__ out, const T* __restrict__ table, const I* __restrict__ index, int* error, P... kd) {
  kiln_enter_after_prior_grid();
  const long long cols = D::at(0, kd...), table_rows = D::at(1, kd...), n = D::at(2, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    const long long row = i / cols, col = i % cols;
    long long ix = static_cast<long long>(index[row]);
    if (ix < 0) ix += table_rows;
    if (ix < 0 || ix >= table_rows) {
      atomicExch(error, ErrorCode);
      out[i] = static_cast<T>(0);
      continue;
    }
    out[i] = table[ix * cols + col];
  }
}

// out[o, j, c] = table[o, index[j], c]: index_select along a dim other than
// the first, table viewed as [outer, table_rows, cols] and out as [outer,
// count, cols] (both contiguous); an index outside [-table_rows, table_rows)
// sets the error word and writes zeros.
// Params: out, table, index, error. Sizes: 0 cols, 1 table_rows, 2 count, 3 outer * count * cols.
template <typename T, typename I, int ErrorCode, class D, class... P>
__global__ void __launch_bounds__(256)
    index_select(T* __restrict__ out, const T* __restrict__ table, const I* __restrict__ index, int* error, P... kd) {
  kiln_enter_after_prior_grid();
  const long long cols = D::at(0, kd...), table_rows = D::at(1, kd...), count = D::at(2, kd...), n = D::at(3, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    const long long col = i % cols, t = i / cols, j = t % count, o = t / count;
    long long ix = static_cast<long long>(index[j]);
    if (ix < 0) ix += table_rows;
    if (ix < 0 || ix >= table_rows) {
      atomicExch(error, ErrorCode);
      out[i] = static_cast<T>(0);
      continue;
    }
    out[i] = table[(o * table_rows + ix) * cols + col];
  }
}

// out[o, index[j], i] = src[o, j, i]: src viewed as [outer, count, inner] and
// out as [outer, out_dim, inner] (both contiguous); a position outside
// [0, out_dim) writes nothing for its row.
// Params: out, src, index, error. Sizes: 0 inner, 1 count, 2 out_dim, 3 outer * count * inner.
template <typename T, typename I, int ErrorCode, class D, class... P>
__global__ void __launch_bounds__(256)
    index_copy(T* __restrict__ out, const T* __restrict__ src, const I* __restrict__ index, int* error, P... kd) {
  kiln_enter_after_prior_grid();
  const long long inner = D::at(0, kd...), count = D::at(1, kd...), out_dim = D::at(2, kd...), n = D::at(3, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    const long long in = i % inner, t = i / inner, j = t % count, o = t / count;
    const long long ix = static_cast<long long>(index[j]);
    if (ix < 0 || ix >= out_dim) {
      atomicExch(error, ErrorCode);
      continue;
    }
    out[(o * out_dim + ix) * inner + in] = src[i];
  }
}

}  // namespace kiln

namespace kiln {

// torch.gather: out[c] = in[c with c[Dim] replaced by index[c]] for every
// coordinate c of index's sizes (out and index share sizes; any strides); an
// index in [-extent, 0) counts from the end, one outside [-extent, extent)
// writes zero. Params: out, in, index, error.
// Sizes: 0 extent (in's size along Dim), 1 n, 2.. index's Rank sizes, out's
// strides, index's strides, in's strides (each Rank, outermost first).
template <typename T, typename I, int Rank, int Dim, int ErrorCode, class D, class... P>
__global__ void __launch_bounds__(256)
    gather(T* __restrict__ out, const T* __restrict__ in, const I* __restrict__ index, int* error, P... kd) {
  kiln_enter_after_prior_grid();
  const long long extent = D::at(0, kd...), n = D::at(1, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    long long r = i, oo = 0, io = 0, xo = 0;
#pragma unroll
    for (int d = Rank - 1; d >= 0; --d) {
      const long long size = D::at(2 + d, kd...), c = r % size;
      r /= size;
      oo += c * D::at(2 + Rank + d, kd...);
      xo += c * D::at(2 + 2 * Rank + d, kd...);
      if (d != Dim) io += c * D::at(2 + 3 * Rank + d, kd...);
    }
    long long ix = static_cast<long long>(index[xo]);
    if (ix < 0) ix += extent;
    if (ix < 0 || ix >= extent) {
      atomicExch(error, ErrorCode);
      out[oo] = static_cast<T>(0);
      continue;
    }
    out[oo] = in[io + ix * D::at(2 + 3 * Rank + Dim, kd...)];
  }
}

// How index_body moves an element: torch.index's read, index_put's write,
// or index_put's accumulation (an atomic add: duplicate positions sum).
enum IndexMode { kIndexRead = 0, kIndexPut = 1, kIndexAdd = 2 };

// The element at p increased by v, atomically; 64-bit integers wrap.
__device__ __forceinline__ void kiln_atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void kiln_atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void kiln_atomic_add(__half* p, __half v) { atomicAdd(p, v); }
__device__ __forceinline__ void kiln_atomic_add(__nv_bfloat16* p, __nv_bfloat16 v) { atomicAdd(p, v); }
__device__ __forceinline__ void kiln_atomic_add(int* p, int v) { atomicAdd(p, v); }
__device__ __forceinline__ void kiln_atomic_add(long long* p, long long v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// torch.index and index_put with Count index tensors (types I0.., the unused
// ones any) for self's dims First..First+Count-1, over the indexed space:
// self's dims before First, then the indices' broadcast sizes (IndexRank
// dims), then self's dims after First + Count (Rank dims in all). Each index
// is read at the space's coordinates through its own strides; `a` at the
// space's strides, self at its own. kIndexRead: out (a) = self[indices], an
// index in [-size, 0) counting from the end, one outside [-size, size)
// writing zero. kIndexPut / kIndexAdd: self[indices] = (or +=) values (a,
// broadcast to the space: stride 0 where it repeats), an index out of range
// writing nothing. Either sets the error word for an index out of range.
// Sizes: 0 n, 1.. the space's Rank sizes, a's Rank strides, each index's
// Rank strides, self's strides (Rank - IndexRank + Count), then self's sizes
// along the Count indexed dims.
template <typename T, typename I0, typename I1, typename I2, typename I3, int Count, int Rank, int First,
          int IndexRank, int ErrorCode, int Mode, class D, class... P>
__device__ __forceinline__ void index_body(T* a, T* self, const void* const* idx, int* error, const P&... kd) {
  constexpr int InRank = Rank - IndexRank + Count;
  constexpr int kOutStrides = 1 + Rank, kIdx = 1 + 2 * Rank, kIn = kIdx + Count * Rank, kExtent = kIn + InRank;
  const long long n = D::at(0, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    long long r = i, oo = 0, io = 0, x[Count];
#pragma unroll
    for (int m = 0; m < Count; ++m) x[m] = 0;
#pragma unroll
    for (int d = Rank - 1; d >= 0; --d) {
      const long long size = D::at(1 + d, kd...), c = r % size;
      r /= size;
      oo += c * D::at(kOutStrides + d, kd...);
#pragma unroll
      for (int m = 0; m < Count; ++m) x[m] += c * D::at(kIdx + m * Rank + d, kd...);
      if (d < First) io += c * D::at(kIn + d, kd...);
      if (d >= First + IndexRank) io += c * D::at(kIn + d - IndexRank + Count, kd...);
    }
    bool bad = false;
#pragma unroll
    for (int m = 0; m < Count; ++m) {
      const long long extent = D::at(kExtent + m, kd...);
      long long ix = 0;
      if (m == 0) ix = static_cast<long long>(static_cast<const I0*>(idx[0])[x[0]]);
      if (m == 1) ix = static_cast<long long>(static_cast<const I1*>(idx[1])[x[1]]);
      if (m == 2) ix = static_cast<long long>(static_cast<const I2*>(idx[2])[x[2]]);
      if (m == 3) ix = static_cast<long long>(static_cast<const I3*>(idx[3])[x[3]]);
      if (ix < 0) ix += extent;
      if (ix < 0 || ix >= extent) {
        bad = true;
      } else {
        io += ix * D::at(kIn + First + m, kd...);
      }
    }
    if (bad) {
      atomicExch(error, ErrorCode);
      if constexpr (Mode == kIndexRead) a[oo] = static_cast<T>(0);
      continue;
    }
    if constexpr (Mode == kIndexRead) a[oo] = self[io];
    if constexpr (Mode == kIndexPut) self[io] = a[oo];
    if constexpr (Mode == kIndexAdd) kiln_atomic_add(self + io, a[oo]);
  }
}

// Params: a (out, or values), self, index0, error.
template <typename T, typename I0, int Rank, int First, int IndexRank, int ErrorCode, int Mode, class D, class... P>
__global__ void __launch_bounds__(256) index1(T* a, T* self, const I0* __restrict__ x0, int* error, P... kd) {
  kiln_enter_after_prior_grid();
  const void* idx[1] = {x0};
  index_body<T, I0, I0, I0, I0, 1, Rank, First, IndexRank, ErrorCode, Mode, D>(a, self, idx, error, kd...);
}

// Params: a (out, or values), self, index0, index1, error.
template <typename T, typename I0, typename I1, int Rank, int First, int IndexRank, int ErrorCode, int Mode, class D,
          class... P>
__global__ void __launch_bounds__(256)
    index2(T* a, T* self, const I0* __restrict__ x0, const I1* __restrict__ x1, int* error, P... kd) {
  kiln_enter_after_prior_grid();
  const void* idx[2] = {x0, x1};
  index_body<T, I0, I1, I0, I0, 2, Rank, First, IndexRank, ErrorCode, Mode, D>(a, self, idx, error, kd...);
}

// Params: a (out, or values), self, index0, index1, index2, error.
template <typename T, typename I0, typename I1, typename I2, int Rank, int First, int IndexRank, int ErrorCode,
          int Mode, class D, class... P>
__global__ void __launch_bounds__(256) index3(T* a, T* self, const I0* __restrict__ x0, const I1* __restrict__ x1,
                                              const I2* __restrict__ x2, int* error, P... kd) {
  kiln_enter_after_prior_grid();
  const void* idx[3] = {x0, x1, x2};
  index_body<T, I0, I1, I2, I0, 3, Rank, First, IndexRank, ErrorCode, Mode, D>(a, self, idx, error, kd...);
}

// Params: a (out, or values), self, index0, index1, index2, index3, error.
template <typename T, typename I0, typename I1, typename I2, typename I3, int Rank, int First, int IndexRank,
          int ErrorCode, int Mode, class D, class... P>
__global__ void __launch_bounds__(256)
    index4(T* a, T* self, const I0* __restrict__ x0, const I1* __restrict__ x1, const I2* __restrict__ x2,
           const I3* __restrict__ x3, int* error, P... kd) {
  kiln_enter_after_prior_grid();
  const void* idx[4] = {x0, x1, x2, x3};
  index_body<T, I0, I1, I2, I3, 4, Rank, First, IndexRank, ErrorCode, Mode, D>(a, self, idx, error, kd...);
}

}  // namespace kiln

namespace kiln {

// How a scatter combines a value with the element it lands on.
enum ScatterOp { kScatterPut = 0, kScatterAdd = 1, kScatterMul = 2, kScatterMax = 3, kScatterMin = 4, kScatterMean = 5 };

// An element type's bits as the unsigned integer of its size (for atomicCAS).
template <typename T> struct scatter_bits;
template <> struct scatter_bits<float> {
  using U = unsigned int;
  static __device__ __forceinline__ U to(float v) { return __float_as_uint(v); }
  static __device__ __forceinline__ float from(U u) { return __uint_as_float(u); }
};
template <> struct scatter_bits<double> {
  using U = unsigned long long;
  static __device__ __forceinline__ U to(double v) { return static_cast<U>(__double_as_longlong(v)); }
  static __device__ __forceinline__ double from(U u) { return __longlong_as_double(static_cast<long long>(u)); }
};
template <> struct scatter_bits<__half> {
  using U = unsigned short;
  static __device__ __forceinline__ U to(__half v) { return __half_as_ushort(v); }
  static __device__ __forceinline__ __half from(U u) { return __ushort_as_half(u); }
};
template <> struct scatter_bits<__nv_bfloat16> {
  using U = unsigned short;
  static __device__ __forceinline__ U to(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
  static __device__ __forceinline__ __nv_bfloat16 from(U u) { return __ushort_as_bfloat16(u); }
};
template <> struct scatter_bits<int> {
  using U = unsigned int;
  static __device__ __forceinline__ U to(int v) { return static_cast<U>(v); }
  static __device__ __forceinline__ int from(U u) { return static_cast<int>(u); }
};
template <> struct scatter_bits<long long> {
  using U = unsigned long long;
  static __device__ __forceinline__ U to(long long v) { return static_cast<U>(v); }
  static __device__ __forceinline__ long long from(U u) { return static_cast<long long>(u); }
};

// The element type's compute type for a scatter: float for 16-bit floats, else itself.
template <typename T> struct scatter_compute { using type = T; };
template <> struct scatter_compute<__half> { using type = float; };
template <> struct scatter_compute<__nv_bfloat16> { using type = float; };

// x combined with v as the CPU kernels combine them: products wrap for
// integers; max and min keep a NaN (the one already there first).
template <int Op, typename C>
__device__ __forceinline__ C scatter_combine(C x, C v) {
  if constexpr (Op == kScatterMul) {
    if constexpr (sizeof(C) == 8 && C(0.5) == C(0)) {
      return static_cast<C>(static_cast<unsigned long long>(x) * static_cast<unsigned long long>(v));
    } else if constexpr (C(0.5) == C(0)) {
      return static_cast<C>(static_cast<unsigned int>(x) * static_cast<unsigned int>(v));
    } else {
      return x * v;
    }
  } else if constexpr (Op == kScatterMax || Op == kScatterMin) {
    if (v != v || x != x) return x != x ? x : v;
    return Op == kScatterMax ? (x < v ? v : x) : (v < x ? v : x);
  } else {
    return x + v;
  }
}

// *p = combine(*p, v), atomically (a compare-and-swap loop; adds through
// kiln_atomic_add).
template <int Op, typename T>
__device__ __forceinline__ void scatter_update(T* p, T v) {
  if constexpr (Op == kScatterAdd || Op == kScatterMean) {
    kiln_atomic_add(p, v);
  } else {
    using B = scatter_bits<T>;
    using C = typename scatter_compute<T>::type;
    typename B::U* q = reinterpret_cast<typename B::U*>(p);
    typename B::U seen = *reinterpret_cast<volatile typename B::U*>(q), want;
    do {
      want = seen;
      const C x = kiln_cvt<C>(B::from(want));
      const T next = kiln_cvt<T>(scatter_combine<Op, C>(x, kiln_cvt<C>(v)));
      seen = atomicCAS(q, want, B::to(next));
    } while (seen != want);
  }
}

// The value a reduction starts from where self is not included.
template <int Op, typename T>
__device__ __forceinline__ T scatter_identity() {
  using C = typename scatter_compute<T>::type;
  if constexpr (Op == kScatterMul) return kiln_cvt<T>(C(1));
  if constexpr (Op == kScatterMax || Op == kScatterMin) {
    if constexpr (sizeof(T) == 8 && C(0.5) == C(0)) {
      return Op == kScatterMax ? static_cast<T>(-9223372036854775807LL - 1) : static_cast<T>(9223372036854775807LL);
    } else if constexpr (C(0.5) == C(0)) {
      return Op == kScatterMax ? static_cast<T>(-2147483647 - 1) : static_cast<T>(2147483647);
    } else {
      return kiln_cvt<T>(Op == kScatterMax ? -C(INFINITY) : C(INFINITY));
    }
  }
  return kiln_cvt<T>(C(0));
}

// torch.scatter, scatter_add, scatter_reduce, index_add and index_reduce
// into dst (a copy of self, written in place) over an index space of Rank
// dims: at each coordinate c, ix = index[c] (through the index's strides;
// one outside [0, extent) sets the error word and writes nothing), and
// src[c] (through its strides; all 0 for a value) lands at c with c[Dim]
// replaced by ix (through dst's strides). Phase 0 sets each landing place to
// Op's identity (a reduction that leaves self out); phase 1 combines (Put
// writes; Add and Mean add, Mean counting into count as well; Mul, Max and
// Min through compare-and-swap); phase 2 divides each element of dst by its
// count where that is above 0 (Mean; integers floor, as ATen's mean).
// Params: dst, src, index, count (int32, Mean only), error.
// Sizes: 0 n (the space's elements; dst's for phase 2), 1 extent (dst's
// size along Dim), 2 alpha (a double's bits; Add scales by it where it is
// not 1), then the space's Rank sizes, the index's, src's and dst's Rank
// strides.
template <typename T, typename I, int Rank, int Dim, int ErrorCode, int Op, int Phase, class D, class... P>
__global__ void __launch_bounds__(256) scatter(T* dst, const T* __restrict__ src, const I* __restrict__ index,
                                               int* count, int* error, P... kd) {
  kiln_enter_after_prior_grid();
  using C = typename scatter_compute<T>::type;
  const long long n = D::at(0, kd...), extent = D::at(1, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    if constexpr (Phase == 2) {
      const int c = count[i];
      if (c <= 0) continue;
      if constexpr (C(0.5) == C(0)) {
        const C v = static_cast<C>(dst[i]), q = v / c;
        dst[i] = static_cast<T>((q * c != v && (v < 0) != (c < 0)) ? q - 1 : q);
      } else {
        dst[i] = kiln_cvt<T>(kiln_cvt<C>(dst[i]) / static_cast<C>(c));
      }
    } else {
      long long r = i, xo = 0, so = 0, dox = 0;
#pragma unroll
      for (int d = Rank - 1; d >= 0; --d) {
        const long long size = D::at(3 + d, kd...), c = r % size;
        r /= size;
        xo += c * D::at(3 + Rank + d, kd...);
        so += c * D::at(3 + 2 * Rank + d, kd...);
        if (d != Dim) dox += c * D::at(3 + 3 * Rank + d, kd...);
      }
      const long long ix = static_cast<long long>(index[xo]);
      if (ix < 0 || ix >= extent) {
        atomicExch(error, ErrorCode);
        continue;
      }
      T* at = dst + dox + ix * D::at(3 + 3 * Rank + Dim, kd...);
      if constexpr (Phase == 0) {
        *at = scatter_identity<Op, T>();
      } else if constexpr (Op == kScatterPut) {
        *at = src[so];
      } else {
        T v = src[so];
        if constexpr (Op == kScatterAdd) {
          const long long alpha_bits = D::at(2, kd...);
          const double alpha = __longlong_as_double(alpha_bits);
          if (alpha != 1.0) {
            if constexpr (C(0.5) == C(0)) {
              v = static_cast<T>(static_cast<long long>(static_cast<double>(v) * alpha));
            } else {
              v = kiln_cvt<T>(static_cast<C>(static_cast<double>(kiln_cvt<C>(v)) * alpha));
            }
          }
        }
        scatter_update<Op, T>(at, v);
        if constexpr (Op == kScatterMean) atomicAdd(count + (at - dst), 1);
      }
    }
  }
}

}  // namespace kiln

namespace kiln {

// How a pad reads past the edge: mirrored without repeating the edge
// (reflect), the edge repeated (replicate), or wrapped around (circular).
enum PadMode { kPadReflect = 0, kPadReplicate = 1, kPadCircular = 2 };

// out[c] = in[s] with s[d] = c[d] - lo[d] brought inside [0, in's size) by
// Mode along each dim (a dim not padded has lo 0). Params: out, in.
// Sizes: 0 n, then out's Rank sizes, in's Rank sizes, in's Rank strides and
// the Rank pads before (negative: cropped).
template <typename T, int Rank, int Mode, class D, class... P>
__global__ void __launch_bounds__(256) pad_edges(T* __restrict__ out, const T* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  const long long n = D::at(0, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    long long r = i, off = 0;
#pragma unroll
    for (int d = Rank - 1; d >= 0; --d) {
      const long long size = D::at(1 + d, kd...), c = r % size;
      r /= size;
      const long long len = D::at(1 + Rank + d, kd...);
      long long s = c - D::at(1 + 3 * Rank + d, kd...);
      if constexpr (Mode == kPadReflect) {
        if (s < 0) s = -s;
        if (s >= len) s = 2 * (len - 1) - s;
      } else if constexpr (Mode == kPadReplicate) {
        s = s < 0 ? 0 : (s >= len ? len - 1 : s);
      } else {
        s = ((s % len) + len) % len;
      }
      off += s * D::at(1 + 2 * Rank + d, kd...);
    }
    out[i] = in[off];
  }
}

// ---- insertion points and histograms

// The insertion point of value i in its row of a contiguous [rows, len]
// sorted sequence (per_row 0: one row serves every value): the first position
// whose entry is >= the value (> with Right), compared as ATen does (a NaN
// value goes after every entry); with a sorter, entry j is seq[sorter[j]], and
// a sorter index out of range sets the error word and reads entry 0.
template <typename O, typename T, bool Right, int ErrorCode, class D, class... P>
__device__ __forceinline__ void search_sorted_at(long long i, O* __restrict__ out, const T* __restrict__ seq,
                                                 const T* __restrict__ values, const long long* __restrict__ sorter,
                                                 int* error, P... kd) {
  const long long len = D::at(0, kd...), per_row = D::at(1, kd...);
  const long long row = per_row == 0 ? 0 : i / per_row;
  const T* base = seq + row * len;
  const long long* perm = sorter ? sorter + row * len : nullptr;
  const auto x = kiln_key(values[i]);
  long long lo = 0, hi = len;
  while (lo < hi) {
    const long long mid = lo + (hi - lo) / 2;
    long long at = mid;
    if (perm) {
      at = perm[mid];
      if (at < 0 || at >= len) {
        atomicExch(error, ErrorCode);
        at = 0;
      }
    }
    const auto e = kiln_key(base[at]);
    const bool go_right = Right ? !(e > x) : !(e >= x);
    if (go_right)
      lo = mid + 1;
    else
      hi = mid;
  }
  out[i] = static_cast<O>(lo);
}

// Params: out, seq, values, error. Sizes: 0 len, 1 per_row, 2 n (values).
template <typename O, typename T, bool Right, int ErrorCode, class D, class... P>
__global__ void __launch_bounds__(256) search_sorted(O* __restrict__ out, const T* __restrict__ seq,
                                                     const T* __restrict__ values, int* error, P... kd) {
  kiln_enter_after_prior_grid();
  const long long n = D::at(2, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256)
    search_sorted_at<O, T, Right, ErrorCode, D>(i, out, seq, values, nullptr, error, kd...);
}

// Params: out, seq, values, sorter (int64, seq's sizes), error. Sizes as search_sorted.
template <typename O, typename T, bool Right, int ErrorCode, class D, class... P>
__global__ void __launch_bounds__(256)
    search_sorted_by(O* __restrict__ out, const T* __restrict__ seq, const T* __restrict__ values,
                     const long long* __restrict__ sorter, int* error, P... kd) {
  kiln_enter_after_prior_grid();
  const long long n = D::at(2, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256)
    search_sorted_at<O, T, Right, ErrorCode, D>(i, out, seq, values, sorter, error, kd...);
}

// histc's range into range[0..1] (one block): the given [lo, hi] when
// lo < hi, else the finite values' own range (0 and 0 when there are none),
// widened by 1 each way when empty, as ATen does. Params: range (2 doubles),
// in. Sizes: 0 lo's bits, 1 hi's bits (as double), 2 n.
template <typename T, class D, class... P>
__global__ void __launch_bounds__(256) histogram_range(double* __restrict__ range, const T* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  double lo = __longlong_as_double(D::at(0, kd...)), hi = __longlong_as_double(D::at(1, kd...));
  const long long n = D::at(2, kd...);
  if (!(lo < hi)) {
    __shared__ double lows[256], highs[256];
    double l = INFINITY, h = -INFINITY;
    for (long long i = threadIdx.x; i < n; i += 256) {
      const double v = static_cast<double>(kiln_key(in[i]));
      if (isfinite(v)) {
        l = fmin(l, v);
        h = fmax(h, v);
      }
    }
    lows[threadIdx.x] = l;
    highs[threadIdx.x] = h;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
      if (threadIdx.x < s) {
        lows[threadIdx.x] = fmin(lows[threadIdx.x], lows[threadIdx.x + s]);
        highs[threadIdx.x] = fmax(highs[threadIdx.x], highs[threadIdx.x + s]);
      }
      __syncthreads();
    }
    lo = lows[0];
    hi = highs[0];
    if (!isfinite(lo)) lo = hi = 0;
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  if (threadIdx.x == 0) {
    range[0] = lo;
    range[1] = hi;
  }
}

// histc's counts: each value in [lo, hi] (range[0..1]; contiguous input)
// adds one to bin (v - lo) * bins / (hi - lo) computed in Acc (float for
// float32 input, as ATen does), clamped to the last bin; NaN and values
// outside count nowhere. The counts (zeroed before) are 64-bit. Params:
// counts, range, in. Sizes: 0 bins, 1 n.
template <typename T, typename Acc, class D, class... P>
__global__ void __launch_bounds__(256) histogram_counts(unsigned long long* __restrict__ counts,
                                                        const double* __restrict__ range, const T* __restrict__ in,
                                                        P... kd) {
  kiln_enter_after_prior_grid();
  const long long bins = D::at(0, kd...), n = D::at(1, kd...);
  const double lo = range[0], hi = range[1];
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    const double v = static_cast<double>(kiln_key(in[i]));
    if (!(v >= lo && v <= hi)) continue;
    long long b = static_cast<long long>((static_cast<Acc>(v) - static_cast<Acc>(lo)) * static_cast<Acc>(bins) /
                                         (static_cast<Acc>(hi) - static_cast<Acc>(lo)));
    b = b < 0 ? 0 : b >= bins ? bins - 1 : b;
    atomicAdd(counts + b, 1ULL);
  }
}

// isin: out[i] = whether element i equals one of n_test test elements (in
// double, as the CPU compares; int64 with int64 exactly; NaN equals
// nothing), negated with Invert. Params: out (bool), elements, tests
// (both contiguous). Sizes: 0 n_test, 1 n.
__device__ __forceinline__ bool kiln_isin_equal(long long a, long long b) { return a == b; }
template <typename A, typename B>
__device__ __forceinline__ bool kiln_isin_equal(A a, B b) {
  return static_cast<double>(kiln_key(a)) == static_cast<double>(kiln_key(b));
}
template <typename TE, typename TT, bool Invert, class D, class... P>
__global__ void __launch_bounds__(256) isin(bool* __restrict__ out, const TE* __restrict__ elements,
                                            const TT* __restrict__ tests, P... kd) {
  kiln_enter_after_prior_grid();
  const long long n_test = D::at(0, kd...), n = D::at(1, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    const TE e = elements[i];
    bool found = false;
    for (long long j = 0; j < n_test && !found; ++j) found = kiln_isin_equal(e, tests[j]);
    out[i] = found != Invert;
  }
}

}  // namespace kiln
