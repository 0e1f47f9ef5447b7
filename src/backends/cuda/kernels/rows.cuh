// Kernels over the rows of a contiguous [rows, N] tensor: LayerNorm and
// RMSNorm (optionally of the sum of two inputs: a residual add folded into
// the norm, rounded to T as the add would leave it, and written out too when
// the sum has other users), softmax and log-softmax, and the RMSNorm of a
// 16-bit model between casts. Statistics in float32 (float64 for double).
#pragma once

#include "kiln/prelude.cuh"

namespace kiln {

enum RowKind { kRowLayerNorm = 0, kRowRmsNorm = 1, kRowSoftmax = 2, kRowLogSoftmax = 3 };

// A number whose bits a size carries (eps): a float's 32 bits, or a double's 64.
template <typename C>
__device__ __forceinline__ C row_number(long long bits) {
  if constexpr (sizeof(C) == 8) {
    return __longlong_as_double(bits);
  } else {
    return __int_as_float(static_cast<int>(bits));
  }
}

template <typename T, typename C>
__device__ __forceinline__ T row_store(C v) {
  if constexpr (sizeof(T) == 8) {
    return v;
  } else {
    return kiln_st<T>(v);
  }
}

// A block of Threads per row, reading the inputs again on each pass (rows of
// any length). Params: out, in, in2, sum_out, weight, bias; those the flags
// leave out are passed as `out` and never read.
// Sizes: 0 N, 1 eps's bits (in the compute type).
template <typename T, int Kind, int Threads, bool Residual, bool WriteSum, bool Weight, bool Bias, class D,
          class... P>
__global__ void __launch_bounds__(Threads)
    norm_rows_block(T* __restrict__ out, const T* __restrict__ in, const T* __restrict__ in2, T* __restrict__ sum_out,
                    const T* __restrict__ weight, const T* __restrict__ bias, P... kd) {
  kiln_enter_after_prior_grid();
  static_assert(Kind == kRowLayerNorm || Kind == kRowRmsNorm, "a norm");
  static_assert(!WriteSum || Residual, "the sum is written only when a residual is added");
  using C = typename compute_type<T>::type;
  const long long N = D::at(0, kd...);
  const C eps = row_number<C>(D::at(1, kd...));
  const long long row = blockIdx.x;
  __shared__ C red[32];
  // The row's value at j: in, or in + in2 rounded to T (written out on the first pass, when asked).
  auto at = [&](long long j, bool first) -> C {
    if constexpr (Residual) {
      const T v = row_store<T>(kiln_ld(in[row * N + j]) + kiln_ld(in2[row * N + j]));
      if constexpr (WriteSum) {
        if (first) sum_out[row * N + j] = v;
      }
      return kiln_ld(v);
    } else {
      (void)first;
      return kiln_ld(in[row * N + j]);
    }
  };
  C sum = 0;
  for (long long j = threadIdx.x; j < N; j += blockDim.x) sum += at(j, true);
  C mean = C(0);
  if constexpr (Kind == kRowLayerNorm) mean = kiln_block_reduce(sum, false, red) / C(N);
  C sq = 0;
  for (long long j = threadIdx.x; j < N; j += blockDim.x) {
    const C d = at(j, false) - mean;
    sq += d * d;
  }
  const C inv = C(1) / sqrt(kiln_block_reduce(sq, false, red) / C(N) + eps);
  for (long long j = threadIdx.x; j < N; j += blockDim.x) {
    C v = (at(j, false) - mean) * inv;
    if constexpr (Weight) v = v * kiln_ld(weight[j]);
    if constexpr (Bias) v = v + kiln_ld(bias[j]);
    out[row * N + j] = row_store<T>(v);
  }
}

// A warp per row holding it in registers (NVec 16-byte vectors, at most 8
// per lane), 16-byte loads and stores: pointers 16-byte aligned. Four rows
// per block of 128 threads. Params as norm_rows_block's.
// Sizes: 0 N (NVec vectors' worth), 1 rows, 2 eps's bits.
template <typename T, int Kind, int NVec, bool Residual, bool WriteSum, bool Weight, bool Bias, class D, class... P>
__global__ void __launch_bounds__(128)
    norm_rows_warp(T* __restrict__ out, const T* __restrict__ in, const T* __restrict__ in2, T* __restrict__ sum_out,
                   const T* __restrict__ weight, const T* __restrict__ bias, P... kd) {
  kiln_enter_after_prior_grid();
  static_assert(Kind == kRowLayerNorm || Kind == kRowRmsNorm, "a norm");
  static_assert(!WriteSum || Residual, "the sum is written only when a residual is added");
  static_assert(sizeof(T) <= 4, "16-byte vectors of float, half or bfloat16");
  constexpr int V = 16 / sizeof(T), PerLane = (NVec + 31) / 32;
  static_assert(PerLane <= 8, "at most 8 vectors per lane");
  using C = float;
  const long long N = D::at(0, kd...);
  const long long row = static_cast<long long>(blockIdx.x) * 4 + (threadIdx.x >> 5);
  if (row >= D::at(1, kd...)) return;
  const C eps = row_number<C>(D::at(2, kd...));
  const int lane = threadIdx.x & 31;
  C x[PerLane][V];
#pragma unroll
  for (int c = 0; c < PerLane; ++c) {
    const int vi = c * 32 + lane;
    if (vi < NVec) {
      const uint4 a = reinterpret_cast<const uint4*>(in + row * N)[vi];
      const T* ea = reinterpret_cast<const T*>(&a);
      if constexpr (Residual) {
        const uint4 r = reinterpret_cast<const uint4*>(in2 + row * N)[vi];
        const T* er = reinterpret_cast<const T*>(&r);
        uint4 sv;
        T* es = reinterpret_cast<T*>(&sv);
#pragma unroll
        for (int u = 0; u < V; ++u) {
          es[u] = kiln_st<T>(kiln_ld(ea[u]) + kiln_ld(er[u]));
          x[c][u] = kiln_ld(es[u]);
        }
        if constexpr (WriteSum) reinterpret_cast<uint4*>(sum_out + row * N)[vi] = sv;
      } else {
#pragma unroll
        for (int u = 0; u < V; ++u) x[c][u] = kiln_ld(ea[u]);
      }
    } else {
#pragma unroll
      for (int u = 0; u < V; ++u) x[c][u] = C(0);
    }
  }
  C mean = 0;
  if constexpr (Kind == kRowLayerNorm) {
    C sum = 0;
#pragma unroll
    for (int c = 0; c < PerLane; ++c)
#pragma unroll
      for (int u = 0; u < V; ++u) sum += x[c][u];
    mean = kiln_warp_sum(sum) / C(N);
  }
  C sq = 0;
#pragma unroll
  for (int c = 0; c < PerLane; ++c)
    if (c * 32 + lane < NVec)
#pragma unroll
      for (int u = 0; u < V; ++u) {
        const C d = x[c][u] - mean;
        sq += d * d;
      }
  const C inv = C(1) / sqrt(kiln_warp_sum(sq) / C(N) + eps);
#pragma unroll
  for (int c = 0; c < PerLane; ++c) {
    const int vi = c * 32 + lane;
    if (vi >= NVec) continue;
    uint4 wv, bv;
    if constexpr (Weight) wv = reinterpret_cast<const uint4*>(weight)[vi];
    if constexpr (Bias) bv = reinterpret_cast<const uint4*>(bias)[vi];
    const T* ew = reinterpret_cast<const T*>(&wv);
    const T* eb = reinterpret_cast<const T*>(&bv);
    uint4 ov;
    T* eo = reinterpret_cast<T*>(&ov);
#pragma unroll
    for (int u = 0; u < V; ++u) {
      C v = (x[c][u] - mean) * inv;
      if constexpr (Weight) v = v * kiln_ld(ew[u]);
      if constexpr (Bias) v = v + kiln_ld(eb[u]);
      eo[u] = kiln_st<T>(v);
    }
    reinterpret_cast<uint4*>(out + row * N)[vi] = ov;
  }
}

// Softmax (Kind kRowSoftmax) or log-softmax over each row, a block of
// Threads per row. Params: out, in. Sizes: 0 N.
template <typename T, int Kind, int Threads, class D, class... P>
__global__ void __launch_bounds__(Threads) softmax_rows(T* __restrict__ out, const T* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  static_assert(Kind == kRowSoftmax || Kind == kRowLogSoftmax, "softmax or log-softmax");
  using C = typename compute_type<T>::type;
  const long long N = D::at(0, kd...);
  const T* x = in + static_cast<long long>(blockIdx.x) * N;
  T* y = out + static_cast<long long>(blockIdx.x) * N;
  __shared__ C red[32];
  C m = -C(INFINITY);
  for (long long j = threadIdx.x; j < N; j += blockDim.x) m = kiln_max(m, C(kiln_ld(x[j])));
  m = kiln_block_reduce(m, true, red);
  C sum = 0;
  for (long long j = threadIdx.x; j < N; j += blockDim.x) sum += exp(kiln_ld(x[j]) - m);
  sum = kiln_block_reduce(sum, false, red);
  for (long long j = threadIdx.x; j < N; j += blockDim.x) {
    C v;
    if constexpr (Kind == kRowSoftmax) {
      v = exp(kiln_ld(x[j]) - m) / sum;
    } else {
      v = kiln_ld(x[j]) - m - log(sum);
    }
    y[j] = row_store<T>(v);
  }
}

// HF-style RMSNorm of a 16-bit model in one pass per row: y = to_T(x *
// rsqrt(mean(x^2) + eps)) computed in float32, then out = to_T(weight * y),
// rounding as the separate ops do. Params: out, in, weight.
// Sizes: 0 N, 1 eps's float32 bits.
template <typename T, int Threads, class D, class... P>
__global__ void __launch_bounds__(Threads)
    rms_norm_cast(T* __restrict__ out, const T* __restrict__ in, const T* __restrict__ weight, P... kd) {
  kiln_enter_after_prior_grid();
  const long long N = D::at(0, kd...);
  const float eps = row_number<float>(D::at(1, kd...));
  const T* x = in + static_cast<long long>(blockIdx.x) * N;
  T* y = out + static_cast<long long>(blockIdx.x) * N;
  __shared__ float red[32];
  float sq = 0.0f;
  for (long long j = threadIdx.x; j < N; j += blockDim.x) {
    const float d = kiln_ld(x[j]);
    sq += d * d;
  }
  const float inv = 1.0f / sqrt(kiln_block_reduce(sq, false, red) / float(N) + eps);
  for (long long j = threadIdx.x; j < N; j += blockDim.x) {
    const float v = kiln_round<T>(kiln_ld(x[j]) * inv);
    y[j] = kiln_st<T>(kiln_ld(weight[j]) * v);
  }
}

}  // namespace kiln
