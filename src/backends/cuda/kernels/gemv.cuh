// Matrix-vector products for few rows (a decoder's one token): row-major
// c (M x n) = act(alpha * a (M x k) * w^T + bias), w stored as n rows of k
// (a linear layer's weight). Warps stream w's rows once with 16-byte loads
// (__ldcs: read once, not kept in L1/L2 ahead of what is reused), accumulate
// in float32 and, with Split > 1, split k among Split warps of a block whose
// partial sums meet in shared memory. One block of 8 warps covers 8 / Split
// columns. Needs k, lda and ldw multiples of 16 bytes' worth of elements and
// a, w 16-byte aligned (gemv_fits on the host).
//
// M is the most rows an instance takes (1, 2, 4 or 8): a call's rows, up to
// M, are a size, so that one kernel serves 5 to 8 rows alike.
//
// Sizes (kiln::Sizes): 0 n, 1 ldw, 2 k / (16 / sizeof(T)) (16-byte vectors
// per row), 3 lda, 4 ldc, 5 alpha's float32 bits, 6 rows (1 to M).
#pragma once

#include "kiln/prelude.cuh"

namespace kiln {

enum GemvActivation { kGemvNone = 0, kGemvRelu = 1, kGemvGelu = 2 };  // gelu: the tanh form, as cuBLASLt's

template <typename T, int M, int Split, int Act, class D, class... P>
__device__ __forceinline__ void gemv_rows(T* __restrict__ c, const T* __restrict__ a, const T* __restrict__ w,
                                          const T* __restrict__ bias, const P&... kd) {
  static_assert(M >= 1 && M <= 8, "at most 8 rows");
  static_assert(Split == 1 || Split == 2 || Split == 4 || Split == 8, "k split among 1, 2, 4 or 8 warps");
  constexpr int kWarps = 8, kCols = kWarps / Split, kVec = 16 / sizeof(T);
  const long long n = D::at(0, kd...), ldw = D::at(1, kd...), kv = D::at(2, kd...);
  const long long lda = D::at(3, kd...), ldc = D::at(4, kd...);
  const float alpha = __int_as_float(static_cast<int>(D::at(5, kd...)));
  const int rows = static_cast<int>(D::at(6, kd...));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, part = warp % Split;
  const long long col = static_cast<long long>(blockIdx.x) * kCols + warp / Split;
  float acc[M];
#pragma unroll
  for (int r = 0; r < M; ++r) acc[r] = 0.0f;
  if (col < n) {
    const uint4* wr = reinterpret_cast<const uint4*>(w + col * ldw);
#pragma unroll 4
    for (long long v = part * 32 + lane; v < kv; v += 32 * Split) {
      const uint4 wv = __ldcs(wr + v);
      const T* wp = reinterpret_cast<const T*>(&wv);
#pragma unroll
      for (int r = 0; r < M; ++r) {
        if (r >= rows) break;
        const uint4 xv = __ldg(reinterpret_cast<const uint4*>(a + r * lda) + v);
        const T* xp = reinterpret_cast<const T*>(&xv);
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[r] = fmaf(kiln_ld(wp[e]), kiln_ld(xp[e]), acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < M; ++r) acc[r] = kiln_warp_sum(acc[r]);
  if constexpr (Split > 1) {
    __shared__ float parts[kWarps][M];
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < M; ++r) parts[warp][r] = acc[r];
    }
    __syncthreads();
    if (part == 0 && lane == 0) {
#pragma unroll
      for (int r = 0; r < M; ++r) {
        float t = 0.0f;
#pragma unroll
        for (int p = 0; p < Split; ++p) t += parts[warp + p][r];
        acc[r] = t;
      }
    }
  }
  if (part != 0 || lane != 0 || col >= n) return;
#pragma unroll
  for (int r = 0; r < M; ++r) {
    if (r >= rows) break;
    float v = alpha * acc[r];
    if (bias != nullptr) v += kiln_ld(bias[col]);
    if constexpr (Act == kGemvRelu) v = v > 0.0f ? v : 0.0f;
    if constexpr (Act == kGemvGelu) v = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    c[r * ldc + col] = kiln_st<T>(v);
  }
}

// Params: c, a, w.
template <typename T, int M, int Split, int Act, class D, class... P>
__global__ void __launch_bounds__(256) gemv(T* __restrict__ c, const T* __restrict__ a, const T* __restrict__ w,
                                            P... kd) {
  gemv_rows<T, M, Split, Act, D>(c, a, w, nullptr, kd...);
}

// Params: c, a, w, bias (n elements).
template <typename T, int M, int Split, int Act, class D, class... P>
__global__ void __launch_bounds__(256) gemv_bias(T* __restrict__ c, const T* __restrict__ a,
                                                 const T* __restrict__ w, const T* __restrict__ bias, P... kd) {
  gemv_rows<T, M, Split, Act, D>(c, a, w, bias, kd...);
}

}  // namespace kiln
