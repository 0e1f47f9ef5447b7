// Reductions and 2-D pooling over tensors of any strides, in float32
// (float64 for double); a NaN in max or min gives NaN, as torch does;
// integer and bool reductions in 64-bit integers.
#pragma once

#include "kiln/prelude.cuh"

namespace kiln {

enum ReduceKind { kReduceSum = 0, kReduceMean = 1, kReduceMax = 2, kReduceMin = 3, kReduceProd = 4 };

// The input offset of index i of a mixed-radix space (Count dims whose sizes
// and strides start at sizes First and First + Count, innermost last):
// reduce's kept dims (First 2) for an output element, its reduced dims
// (First 2 + 2K) for an element reduced.
template <int First, int Count, class D, class... P>
__device__ __forceinline__ long long reduce_offset(long long i, const P&... kd) {
  long long off = 0;
#pragma unroll
  for (int d = Count - 1; d >= 0; --d) {
    const long long size = D::at(First + d, kd...);
    off += (i % size) * D::at(First + Count + d, kd...);
    i /= size;
  }
  return off;
}

// out[o] (contiguous) = reduce over the reduced index space of in at o: one
// warp per output element, 8 per block, the grid striding over the outputs
// when there are more than it holds. Params: out, in.
// Sizes: 0 outputs, 1 elements reduced per output, then the kept dims'
// sizes and strides (K each, in out's row-major order), then the reduced
// dims' sizes and strides (R each).
template <typename T, int Kind, int K, int R, class D, class... P>
__global__ void __launch_bounds__(256) reduce(T* __restrict__ out, const T* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  using C = typename compute_type<T>::type;
  const int lane = threadIdx.x & 31;
  for (long long o = static_cast<long long>(blockIdx.x) * 8 + (threadIdx.x >> 5); o < D::at(0, kd...);
       o += static_cast<long long>(gridDim.x) * 8) {
    const long long base = reduce_offset<2, K, D>(o, kd...);
    constexpr bool kMax = Kind == kReduceMax, kMin = Kind == kReduceMin, kProd = Kind == kReduceProd;
    C acc = kMax ? -C(INFINITY) : kMin ? C(INFINITY) : kProd ? C(1) : C(0);
    bool nan = false;
    const long long n_red = D::at(1, kd...);
    for (long long j = lane; j < n_red; j += 32) {
      const long long off = base + reduce_offset<2 + 2 * K, R, D>(j, kd...);
      const C v = kiln_ld(in[off]);
      if constexpr (kMax || kMin) {
        nan = nan || v != v;
        acc = kMax ? kiln_max(acc, v) : kiln_min(acc, v);
      } else if constexpr (kProd) {
        acc *= v;
      } else {
        acc += v;
      }
    }
    if constexpr (kMax) acc = kiln_warp_max(acc);
    if constexpr (kMin) acc = kiln_warp_min(acc);
    if constexpr (kProd)
      for (int s = 16; s > 0; s >>= 1) acc *= __shfl_xor_sync(0xffffffffu, acc, s);
    if constexpr (!kMax && !kMin && !kProd) acc = kiln_warp_sum(acc);
    if constexpr (kMax || kMin) {
      nan = __any_sync(0xffffffffu, nan);
      if (nan) acc = C(NAN);
    }
    if constexpr (Kind == kReduceMean) acc = acc / C(n_red);
    if (lane == 0) {
      if constexpr (sizeof(T) == 8) {
        out[o] = acc;
      } else {
        out[o] = kiln_st<T>(acc);
      }
    }
  }
}

// var (and with WithMean the mean) over the reduced index space at each
// output, in the compute type: one warp per output element and two passes
// (the mean, then the squared deviations from it), divided by
// max(0, n - correction) (0 gives inf or NaN, as torch does). Laid out and
// launched as reduce, the correction's double bits after the sizes.
// Params: var, mean (written with WithMean), in.
template <typename T, int K, int R, bool WithMean, class D, class... P>
__global__ void __launch_bounds__(256) reduce_var(T* __restrict__ out, T* __restrict__ mean_out,
                                                  const T* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  using C = typename compute_type<T>::type;
  const int lane = threadIdx.x & 31;
  const long long n_red = D::at(1, kd...);
  const double correction = __longlong_as_double(D::at(2 + 2 * K + 2 * R, kd...));
  const double divisor = static_cast<double>(n_red) - correction;
  for (long long o = static_cast<long long>(blockIdx.x) * 8 + (threadIdx.x >> 5); o < D::at(0, kd...);
       o += static_cast<long long>(gridDim.x) * 8) {
    const long long base = reduce_offset<2, K, D>(o, kd...);
    C sum = C(0);
    for (long long j = lane; j < n_red; j += 32) sum += kiln_ld(in[base + reduce_offset<2 + 2 * K, R, D>(j, kd...)]);
    const C mean = kiln_warp_sum(sum) / C(n_red);
    C m2 = C(0);
    for (long long j = lane; j < n_red; j += 32) {
      const C d = kiln_ld(in[base + reduce_offset<2 + 2 * K, R, D>(j, kd...)]) - mean;
      m2 += d * d;
    }
    const C var = kiln_warp_sum(m2) / C(divisor > 0 ? divisor : 0.0);
    if (lane == 0) {
      if constexpr (sizeof(T) == 8) {
        out[o] = var;
        if constexpr (WithMean) mean_out[o] = mean;
      } else {
        out[o] = kiln_st<T>(var);
        if constexpr (WithMean) mean_out[o] = kiln_st<T>(mean);
      }
    }
  }
}

// Reductions of integer and bool tensors, exact in 64 bits (wrapping): sum and
// prod to TO (int64, as torch promotes integers), max and min in the input's type. Laid out
// and launched as reduce. Params: out, in.
template <typename TO, typename TI, int Kind, int K, int R, class D, class... P>
__global__ void __launch_bounds__(256) reduce_int(TO* __restrict__ out, const TI* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  const int lane = threadIdx.x & 31;
  for (long long o = static_cast<long long>(blockIdx.x) * 8 + (threadIdx.x >> 5); o < D::at(0, kd...);
       o += static_cast<long long>(gridDim.x) * 8) {
    const long long base = reduce_offset<2, K, D>(o, kd...);
    constexpr bool kMax = Kind == kReduceMax, kMin = Kind == kReduceMin, kProd = Kind == kReduceProd;
    constexpr long long kLowest = -9223372036854775807LL - 1, kHighest = 9223372036854775807LL;
    long long acc = kMax ? kLowest : kMin ? kHighest : kProd ? 1 : 0;
    const long long n_red = D::at(1, kd...);
    for (long long j = lane; j < n_red; j += 32) {
      const long long off = base + reduce_offset<2 + 2 * K, R, D>(j, kd...);
      const long long v = static_cast<long long>(in[off]);
      acc = kMax    ? (v > acc ? v : acc)
            : kMin  ? (v < acc ? v : acc)
            : kProd ? static_cast<long long>(static_cast<unsigned long long>(acc) * static_cast<unsigned long long>(v))
                    : static_cast<long long>(static_cast<unsigned long long>(acc) + v);
    }
    for (int s = 16; s > 0; s >>= 1) {
      const long long v = __shfl_xor_sync(0xffffffffu, acc, s);
      acc = kMax    ? (v > acc ? v : acc)
            : kMin  ? (v < acc ? v : acc)
            : kProd ? static_cast<long long>(static_cast<unsigned long long>(acc) * static_cast<unsigned long long>(v))
                    : static_cast<long long>(static_cast<unsigned long long>(acc) + v);
    }
    if (lane == 0) out[o] = static_cast<TO>(acc);
  }
}

// The type argmax/argmin compare in, and an element read into it.
template <typename T> struct arg_compute {
  using type = long long;  // integers and bool, exactly
  static __device__ __forceinline__ long long ld(T v) { return static_cast<long long>(v); }
};
template <> struct arg_compute<float> {
  using type = float;
  static __device__ __forceinline__ float ld(float v) { return v; }
};
template <> struct arg_compute<double> {
  using type = double;
  static __device__ __forceinline__ double ld(double v) { return v; }
};
template <> struct arg_compute<__half> {
  using type = float;
  static __device__ __forceinline__ float ld(__half v) { return kiln_ld(v); }
};
template <> struct arg_compute<__nv_bfloat16> {
  using type = float;
  static __device__ __forceinline__ float ld(__nv_bfloat16 v) { return kiln_ld(v); }
};

// argmax (IsMax) or argmin over the reduced index space of in at each output
// element, as int64: the row-major index among the reduced dims of the first
// extreme; a NaN is the extreme, the first NaN winning, as torch has it.
// Laid out, sized and launched as reduce. Params: out, in.
template <typename T, bool IsMax, int K, int R, class D, class... P>
__global__ void __launch_bounds__(256) arg_reduce(long long* __restrict__ out, const T* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  using A = arg_compute<T>;
  using C = typename A::type;
  const int lane = threadIdx.x & 31;
  for (long long o = static_cast<long long>(blockIdx.x) * 8 + (threadIdx.x >> 5); o < D::at(0, kd...);
       o += static_cast<long long>(gridDim.x) * 8) {
    const long long base = reduce_offset<2, K, D>(o, kd...);
    // Each lane's first extreme among its indices (j increasing: a later equal value does not take it).
    C best = C(0);
    long long at = -1;
    bool best_nan = false;
    const long long n_red = D::at(1, kd...);
    for (long long j = lane; j < n_red; j += 32) {
      const long long off = base + reduce_offset<2 + 2 * K, R, D>(j, kd...);
      const C v = A::ld(in[off]);
      const bool nan = v != v;
      if (at < 0 || (!best_nan && (nan || (IsMax ? v > best : v < best)))) {
        best = v;
        at = j;
        best_nan = nan;
      }
    }
    // The lanes' candidates met: the better value, or of equal ones (NaN equal to NaN) the lower index.
    for (int s = 16; s > 0; s >>= 1) {
      const C ob = __shfl_xor_sync(0xffffffffu, best, s);
      const long long oat = __shfl_xor_sync(0xffffffffu, at, s);
      const bool on = __shfl_xor_sync(0xffffffffu, best_nan ? 1 : 0, s) != 0;
      if (oat < 0) continue;
      const bool better = (on && !best_nan) || (!on && !best_nan && (IsMax ? ob > best : ob < best));
      const bool equal = (on && best_nan) || (!on && !best_nan && ob == best);
      if (at < 0 || better || (equal && oat < at)) {
        best = ob;
        at = oat;
        best_nan = on;
      }
    }
    if (lane == 0) out[o] = at < 0 ? 0 : at;
  }
}

// Inclusive scans along one dim of a contiguous tensor viewed as [outer,
// len, inner], one thread per line (o, i), in the order and the types
// torch's CPU kernel accumulates in (Acc: float for 16-bit floats, double for
// float32 and float64, wrapping 64-bit integers for integers and bool), each
// element rounded to TO. Op: 0 sum, 1 product, 2 log-sum-exp (floating;
// NaN stays NaN, equal infinities stay as they are). Params: out, in.
// Sizes: 0 lines (outer * inner), 1 len, 2 inner.
template <typename TO, typename TI, typename Acc, int Op, class D, class... P>
__global__ void __launch_bounds__(256) cumsum(TO* __restrict__ out, const TI* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  const long long lines = D::at(0, kd...), len = D::at(1, kd...), inner = D::at(2, kd...);
  for (long long t = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; t < lines;
       t += static_cast<long long>(gridDim.x) * 256) {
    const long long first = (t / inner) * len * inner + t % inner;
    Acc acc = Op == 1 ? Acc(1) : Acc(0);
    if constexpr (Op == 2) acc = -Acc(INFINITY);
    for (long long j = 0; j < len; ++j) {
      const long long k = first + j * inner;
      const Acc v = kiln_cvt<Acc, TI>(in[k]);
      if constexpr (Op == 0) {
        acc = acc + v;
      } else if constexpr (Op == 1) {
        acc = acc * v;
      } else if (v != v || acc != acc) {
        acc = v != v ? v : acc;
      } else {
        const Acc lo = acc < v ? acc : v, hi = acc < v ? v : acc;
        if (lo != hi || isfinite(lo)) acc = hi + log1p(exp(lo - hi));
      }
      out[k] = kiln_cvt<TO, Acc>(acc);
    }
  }
}

enum PoolKind { kPoolMax = 0, kPoolAvg = 1, kPoolAdaptiveAvg = 2 };

// 2-D pooling over logical [N, C, H, W] tensors of any strides; with
// ChannelsInner the channel is the innermost loop (coalesced reads of a
// channels-last input). Avg: CountIncludePad, or Divisor > 0 in place of
// the count. Params: out, in. Sizes: 0 C, 1 OH, 2 OW, 3 H, 4 W, 5..8 in's
// strides, 9 n, 10..13 out's strides.
template <typename T, int Kind, bool ChannelsInner, int KH, int KW, int SH, int SW, int PH, int PW, int DH, int DW,
          bool CountIncludePad, long long Divisor, class D, class... P>
__global__ void __launch_bounds__(256) pool2d(T* __restrict__ out, const T* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  using C = typename compute_type<T>::type;
  const long long Ch = D::at(0, kd...), OH = D::at(1, kd...), OW = D::at(2, kd...), H = D::at(3, kd...),
                  W = D::at(4, kd...);
  const long long is0 = D::at(5, kd...), is1 = D::at(6, kd...), is2 = D::at(7, kd...), is3 = D::at(8, kd...);
  const long long n = D::at(9, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    long long r = i, c, ow, oh, b;
    if constexpr (ChannelsInner) {
      c = r % Ch;
      r /= Ch;
      ow = r % OW;
      r /= OW;
      oh = r % OH;
      b = r / OH;
    } else {
      ow = r % OW;
      r /= OW;
      oh = r % OH;
      r /= OH;
      c = r % Ch;
      b = r / Ch;
    }
    const T* src = in + b * is0 + c * is1;
    C acc;
    if constexpr (Kind == kPoolMax) {
      acc = -C(INFINITY);
      bool nan = false;
      for (int y = 0; y < KH; ++y) {
        const long long h = oh * SH - PH + y * DH;
        if (h < 0 || h >= H) continue;
        for (int x = 0; x < KW; ++x) {
          const long long w = ow * SW - PW + x * DW;
          if (w < 0 || w >= W) continue;
          const C v = kiln_ld(src[h * is2 + w * is3]);
          nan = nan || v != v;
          acc = kiln_max(acc, v);
        }
      }
      if (nan) acc = C(NAN);
    } else if constexpr (Kind == kPoolAvg) {
      acc = 0;
      long long cnt = 0;
      const long long h0 = oh * SH - PH, w0 = ow * SW - PW;
      const long long h1 = min(h0 + KH, H + PH), w1 = min(w0 + KW, W + PW);
      const long long pool = (h1 - h0) * (w1 - w0);
      for (long long h = max(h0, 0LL); h < min(h1, H); ++h)
        for (long long w = max(w0, 0LL); w < min(w1, W); ++w) {
          acc += kiln_ld(src[h * is2 + w * is3]);
          ++cnt;
        }
      if constexpr (Divisor > 0) {
        acc = acc / C(Divisor);
      } else if constexpr (CountIncludePad) {
        acc = acc / C(pool);
      } else {
        acc = acc / C(cnt);
      }
    } else {
      const long long h0 = (oh * H) / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
      const long long w0 = (ow * W) / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
      acc = 0;
      for (long long h = h0; h < h1; ++h)
        for (long long w = w0; w < w1; ++w) acc += kiln_ld(src[h * is2 + w * is3]);
      acc = acc / C((h1 - h0) * (w1 - w0));
    }
    T* dst = out + b * D::at(10, kd...) + c * D::at(11, kd...) + oh * D::at(12, kd...) + ow * D::at(13, kd...);
    if constexpr (sizeof(T) == 8) {
      *dst = acc;
    } else {
      *dst = kiln_st<T>(acc);
    }
  }
}

enum Pool3dKind { kPool3dMax = 0, kPool3dAvg = 1, kPool3dAdaptiveAvg = 2, kPool3dAdaptiveMax = 3 };

// One output of pooling over 3 spatial dims of a logical [N, C, D, H, W]
// input of any strides (2-D pools: D = 1 and a unit window along it): the
// value, and for the max kinds the flat index (d H + h) W + w of the first
// maximum in its plane (every NaN takes over, so the last NaN wins, as in
// ATen and on the CPU). Sizes:
// 0 C, 1 OD, 2 OH, 3 OW, 4 D, 5 H, 6 W, 7..11 in's strides, 12 n (outputs,
// contiguous [N, C, OD, OH, OW]).
template <typename T, int Kind, int KD, int KH, int KW, int SD, int SH, int SW, int PD, int PH, int PW, int DD, int DH,
          int DW, bool CountIncludePad, long long Divisor, class D, class... P>
__device__ __forceinline__ void pool3d_at(long long i, T* __restrict__ out, long long* __restrict__ idx,
                                          const T* __restrict__ in, P... kd) {
  using C = typename compute_type<T>::type;
  const long long Ch = D::at(0, kd...), OD = D::at(1, kd...), OH = D::at(2, kd...), OW = D::at(3, kd...);
  const long long ID = D::at(4, kd...), IH = D::at(5, kd...), IW = D::at(6, kd...);
  long long r = i;
  const long long ow = r % OW;
  r /= OW;
  const long long oh = r % OH;
  r /= OH;
  const long long od = r % OD;
  r /= OD;
  const long long c = r % Ch, b = r / Ch;
  const T* src = in + b * D::at(7, kd...) + c * D::at(8, kd...);
  const long long s2 = D::at(9, kd...), s3 = D::at(10, kd...), s4 = D::at(11, kd...);
  C acc;
  long long arg = -1;
  if constexpr (Kind == kPool3dMax || Kind == kPool3dAdaptiveMax) {
    long long d0, d1, h0, h1, w0, w1, step_d = DD, step_h = DH, step_w = DW;
    if constexpr (Kind == kPool3dMax) {
      d0 = od * SD - PD, h0 = oh * SH - PH, w0 = ow * SW - PW;
      d1 = d0 + (KD - 1) * DD + 1, h1 = h0 + (KH - 1) * DH + 1, w1 = w0 + (KW - 1) * DW + 1;
    } else {
      d0 = (od * ID) / OD, d1 = ((od + 1) * ID + OD - 1) / OD;
      h0 = (oh * IH) / OH, h1 = ((oh + 1) * IH + OH - 1) / OH;
      w0 = (ow * IW) / OW, w1 = ((ow + 1) * IW + OW - 1) / OW;
      step_d = step_h = step_w = 1;
    }
    // As ATen: from -inf at the window's first in-bounds position (stepping by the dilation), every NaN
    // taking over (the last one wins).
    while (d0 < 0) d0 += step_d;
    while (h0 < 0) h0 += step_h;
    while (w0 < 0) w0 += step_w;
    acc = -C(INFINITY);
    arg = (d0 * IH + h0) * IW + w0;
    for (long long d = d0; d < min(d1, ID); d += step_d)
      for (long long h = h0; h < min(h1, IH); h += step_h)
        for (long long w = w0; w < min(w1, IW); w += step_w) {
          const C v = kiln_ld(src[d * s2 + h * s3 + w * s4]);
          if (v > acc || v != v) {
            acc = v;
            arg = (d * IH + h) * IW + w;
          }
        }
  } else if constexpr (Kind == kPool3dAvg) {
    const long long d0 = od * SD - PD, h0 = oh * SH - PH, w0 = ow * SW - PW;
    const long long d1 = min(d0 + KD, ID + PD), h1 = min(h0 + KH, IH + PH), w1 = min(w0 + KW, IW + PW);
    const long long pool = (d1 - d0) * (h1 - h0) * (w1 - w0);
    acc = 0;
    long long cnt = 0;
    for (long long d = max(d0, 0LL); d < min(d1, ID); ++d)
      for (long long h = max(h0, 0LL); h < min(h1, IH); ++h)
        for (long long w = max(w0, 0LL); w < min(w1, IW); ++w) {
          acc += kiln_ld(src[d * s2 + h * s3 + w * s4]);
          ++cnt;
        }
    if (cnt == 0) {
      acc = 0;  // a window of padding only
    } else if constexpr (Divisor > 0) {
      acc = acc / C(Divisor);
    } else if constexpr (CountIncludePad) {
      acc = acc / C(pool);
    } else {
      acc = acc / C(cnt);
    }
  } else {
    const long long d0 = (od * ID) / OD, d1 = ((od + 1) * ID + OD - 1) / OD;
    const long long h0 = (oh * IH) / OH, h1 = ((oh + 1) * IH + OH - 1) / OH;
    const long long w0 = (ow * IW) / OW, w1 = ((ow + 1) * IW + OW - 1) / OW;
    acc = 0;
    for (long long d = d0; d < d1; ++d)
      for (long long h = h0; h < h1; ++h)
        for (long long w = w0; w < w1; ++w) acc += kiln_ld(src[d * s2 + h * s3 + w * s4]);
    acc = acc / C((d1 - d0) * (h1 - h0) * (w1 - w0));
  }
  if constexpr (sizeof(T) == 8) {
    out[i] = acc;
  } else {
    out[i] = kiln_st<T>(acc);
  }
  if (idx) idx[i] = arg;
}

// Params: out, in.
template <typename T, int Kind, int KD, int KH, int KW, int SD, int SH, int SW, int PD, int PH, int PW, int DD, int DH,
          int DW, bool CountIncludePad, long long Divisor, class D, class... P>
__global__ void __launch_bounds__(256) pool3d(T* __restrict__ out, const T* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  const long long n = D::at(12, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256)
    pool3d_at<T, Kind, KD, KH, KW, SD, SH, SW, PD, PH, PW, DD, DH, DW, CountIncludePad, Divisor, D>(i, out, nullptr,
                                                                                                      in, kd...);
}

// Params: out, indices (int64), in.
template <typename T, int Kind, int KD, int KH, int KW, int SD, int SH, int SW, int PD, int PH, int PW, int DD, int DH,
          int DW, bool CountIncludePad, long long Divisor, class D, class... P>
__global__ void __launch_bounds__(256) pool3d_indices(T* __restrict__ out, long long* __restrict__ idx,
                                                      const T* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  const long long n = D::at(12, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256)
    pool3d_at<T, Kind, KD, KH, KW, SD, SH, SW, PD, PH, PW, DD, DH, DW, CountIncludePad, Divisor, D>(i, out, idx, in,
                                                                                                      kd...);
}

// segment_reduce over contiguous data viewed [outer, len, inner]: output
// (o, s, i) reduces entries j of segment s (bounds from `lengths` summed, or
// from `offsets` directly) along the middle dim, in double from `initial`
// (Initial) or the reduction's identity: Op 0 sum, 1 mean (an empty segment
// gives initial, or NaN), 2 max, 3 min (a NaN wins), 4 prod. Bounds that are
// negative, decreasing or past len set the error word and give NaN.
// Params: out (contiguous [outer, segments, inner]), data, bounds (int64),
// error. Sizes: 0 len, 1 inner, 2 segments, 3 initial's bits (as double), 4 n.
template <typename T, int Op, bool Offsets, bool Initial, int ErrorCode, class D, class... P>
__global__ void __launch_bounds__(256) segment_reduce(T* __restrict__ out, const T* __restrict__ data,
                                                      const long long* __restrict__ bounds, int* error, P... kd) {
  kiln_enter_after_prior_grid();
  const long long len = D::at(0, kd...), inner = D::at(1, kd...), segments = D::at(2, kd...), n = D::at(4, kd...);
  for (long long k = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; k < n;
       k += static_cast<long long>(gridDim.x) * 256) {
    const long long i = k % inner, s = (k / inner) % segments, o = k / (inner * segments);
    long long lo, hi;
    if constexpr (Offsets) {
      lo = bounds[s];
      hi = bounds[s + 1];
    } else {
      lo = 0;
      for (long long t = 0; t < s; ++t) lo += bounds[t];
      hi = lo + bounds[s];
    }
    double acc;
    if (lo < 0 || hi < lo || hi > len) {
      atomicExch(error, ErrorCode);
      acc = NAN;
    } else {
      const double identity = Op == 2 ? -INFINITY : Op == 3 ? INFINITY : Op == 4 ? 1.0 : 0.0;
      acc = Initial ? __longlong_as_double(D::at(3, kd...)) : identity;
      for (long long j = lo; j < hi; ++j) {
        const double v = static_cast<double>(kiln_ld(data[(o * len + j) * inner + i]));
        if constexpr (Op == 2) {
          acc = v != v || v > acc ? v : acc;
        } else if constexpr (Op == 3) {
          acc = v != v || v < acc ? v : acc;
        } else if constexpr (Op == 4) {
          acc *= v;
        } else {
          acc += v;
        }
      }
      if constexpr (Op == 1)
        acc = hi > lo ? acc / static_cast<double>(hi - lo) : (Initial ? __longlong_as_double(D::at(3, kd...)) : NAN);
    }
    if constexpr (sizeof(T) >= 4) {
      out[k] = static_cast<T>(acc);
    } else {
      out[k] = kiln_st<T>(static_cast<float>(acc));
    }
  }
}

// ---- ordering along one dim

// Slices of a contiguous [outer, len, inner] input ordered in shared memory
// (P, a power of two >= len, at most 2048: keys and positions, padded past
// len), one block of 256 threads per slice, by a bitonic network whose
// comparison is total: positions past len last, then NaN after every number
// (first when Descending), then the key, then the position (so the order is
// stable, as the CPU's). Mode 0 writes the first K in order (values and
// positions, contiguous [outer, K, inner]); 1 the entry of rank K - 1; 2 the
// median (the lower middle; the first NaN where there is one); 3 the NaN-
// skipping median (modes 1-3: one value and position per slice, [outer * inner]).
// Params: values, indices (int64), in. Sizes: 0 len, 1 inner, 2 slices, 3 K.
template <typename T, typename Key, int P, int Mode, bool Descending, class D, class... P_>
__global__ void __launch_bounds__(256) order_slices(T* __restrict__ values, long long* __restrict__ indices,
                                                    const T* __restrict__ in, P_... kd) {
  kiln_enter_after_prior_grid();
  __shared__ Key keys[P];
  __shared__ int pos[P];
  __shared__ int nans;
  const long long len = D::at(0, kd...), inner = D::at(1, kd...), slices = D::at(2, kd...), K = D::at(3, kd...);
  for (long long s = blockIdx.x; s < slices; s += gridDim.x) {
    const long long o = s / inner, i = s % inner;
    if (threadIdx.x == 0) nans = 0;
    __syncthreads();
    for (int j = threadIdx.x; j < P; j += 256) {
      pos[j] = j;
      if (j < len) {
        const Key v = static_cast<Key>(kiln_key(in[(o * len + j) * inner + i]));
        keys[j] = v;
        if (v != v) atomicAdd(&nans, 1);
      } else {
        keys[j] = Key(0);
      }
    }
    __syncthreads();
    // a strictly before b.
    auto before = [&](int a, int b) {
      const int pa = pos[a], pb = pos[b];
      const bool pad_a = pa >= len, pad_b = pb >= len;
      if (pad_a || pad_b) return pad_a == pad_b ? pa < pb : pad_b;
      const Key ka = keys[a], kb = keys[b];
      const bool nan_a = ka != ka, nan_b = kb != kb;
      if (nan_a != nan_b) return Descending ? nan_a : nan_b;
      if (!nan_a && ka != kb) return Descending ? ka > kb : ka < kb;
      return pa < pb;
    };
    for (int k = 2; k <= P; k <<= 1)
      for (int j = k >> 1; j > 0; j >>= 1) {
        for (int t = threadIdx.x; t < P; t += 256) {
          const int u = t ^ j;
          if (u > t) {
            const bool up = (t & k) == 0;
            if (up ? before(u, t) : before(t, u)) {
              const Key kt = keys[t];
              keys[t] = keys[u];
              keys[u] = kt;
              const int pt = pos[t];
              pos[t] = pos[u];
              pos[u] = pt;
            }
          }
        }
        __syncthreads();
      }
    auto store = [&](long long at, int sorted) {
      const long long j = pos[sorted];
      values[at] = in[(o * len + j) * inner + i];
      indices[at] = j;
    };
    if constexpr (Mode == 0) {
      for (long long j = threadIdx.x; j < K; j += 256) store((o * K + j) * inner + i, static_cast<int>(j));
    } else if (threadIdx.x == 0) {
      long long rank = K - 1;
      if constexpr (Mode == 2) rank = nans > 0 ? len - nans : (len - 1) / 2;
      if constexpr (Mode == 3) rank = (len - nans - 1 > 0 ? len - nans - 1 : 0) / 2;
      store(s, static_cast<int>(rank));
    }
    __syncthreads();
  }
}

}  // namespace kiln
