// Matrix-vector products for few rows (a decoder's one token): row-major
// c (M x n) = act(alpha * a (M x k) * w^T + bias), w stored as n rows of k
// (a linear layer's weight). Warps stream w's rows once with 16-byte loads
// (__ldcs: read once, not kept in L1/L2 ahead of what is reused), accumulate
// in float32 and, with Split > 1, split k among Split warps of a block whose
// partial sums meet in shared memory. One block of 8 warps covers 8 / Split
// columns. Launched early, it asks for its first weights in L2 before it
// waits for the grid before it (see below). Needs k, lda and ldw multiples
// of 16 bytes' worth of elements and a, w 16-byte aligned (gemv_fits on the
// host).
//
// M is the most rows an instance takes (1, 2, 4 or 8): a call's rows, up to
// M, are a size, so that one kernel serves 5 to 8 rows alike.
//
// Act kGemvSwiglu is a gated MLP's gate and up products with silu(gate) * up
// after them: output column j reads w's rows gate + j and up + j (one pass
// over the activations for both) and writes silu(g) * u, rounded as the
// unfused layers round: g and u to T (the product's output), silu(g) to T,
// then the product.
//
// Sizes (kiln::Sizes): 0 n, 1 ldw, 2 k / (16 / sizeof(T)) (16-byte vectors
// per row), 3 lda, 4 ldc, 5 alpha's float32 bits, 6 rows (1 to M); with
// kGemvSwiglu 7 the gate's first row of w, 8 the up's.
#pragma once

#include "kiln/prelude.cuh"

namespace kiln {

// gelu: the tanh form, as cuBLASLt's; swiglu: silu(gate) * up (above).
enum GemvActivation { kGemvNone = 0, kGemvRelu = 1, kGemvGelu = 2, kGemvSwiglu = 3 };

// FP8 e4m3 weights (a byte each; kiln_fp8 marks the storage type).
struct kiln_fp8 {
  unsigned char bits;
};

// The weights of one 16-byte vector as float32: 16 / sizeof(T) of them.
template <typename T> struct gemv_weights {
  static constexpr int kCount = 16 / sizeof(T);
  static __device__ __forceinline__ void unpack(const uint4& v, float (&out)[kCount]) {
    const T* p = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int e = 0; e < kCount; ++e) out[e] = kiln_ld(p[e]);
  }
};
template <> struct gemv_weights<kiln_fp8> {
  static constexpr int kCount = 16;
  static __device__ __forceinline__ void unpack(const uint4& v, float (&out)[16]) {
    const unsigned int words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const unsigned short pair = static_cast<unsigned short>(words[i / 2] >> (16 * (i % 2)));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
      unsigned int h2;
      asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(pair));
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
#else
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const unsigned int b = (pair >> (8 * h)) & 0xffu;
        const unsigned int e = (b >> 3) & 0xfu, m = b & 7u;
        float x = e == 0 ? static_cast<float>(m) * 0.001953125f  // 2^-9
                         : __uint_as_float(((e + 120u) << 23) | (m << 20));
        if (e == 15 && m == 7) x = __int_as_float(0x7fc00000);
        out[2 * i + h] = (b & 0x80u) ? -x : x;
      }
#endif
    }
  }
};

// W is T, or kiln_fp8 with `scales` (one float32 per row of w) multiplying
// each row's sum.
template <typename T, typename W, int M, int Split, int Act, class D, class... P>
__device__ __forceinline__ void gemv_rows(T* __restrict__ c, const T* __restrict__ a, const W* __restrict__ w,
                                          const float* __restrict__ scales, const T* __restrict__ bias,
                                          const P&... kd) {
  static_assert(M >= 1 && M <= 8, "at most 8 rows");
  static_assert(Split == 1 || Split == 2 || Split == 4 || Split == 8, "k split among 1, 2, 4 or 8 warps");
  constexpr int kWarps = 8, kCols = kWarps / Split, kVec = 16 / sizeof(T);
  constexpr int kWv = gemv_weights<W>::kCount;  // weights per 16-byte vector of w
  constexpr int kXv = kWv / kVec;               // 16-byte vectors of a per vector of w
  constexpr int kRowsOfW = Act == kGemvSwiglu ? 2 : 1;  // rows of w a column reads
  const long long n = D::at(0, kd...), ldw = D::at(1, kd...), kv = D::at(2, kd...);
  const long long lda = D::at(3, kd...), ldc = D::at(4, kd...);
  const float alpha = __int_as_float(static_cast<int>(D::at(5, kd...)));
  const int rows = static_cast<int>(D::at(6, kd...));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, part = warp % Split;
  const long long col = static_cast<long long>(blockIdx.x) * kCols + warp / Split;
  long long wrow[kRowsOfW];
  if constexpr (Act == kGemvSwiglu) {
    wrow[0] = D::at(7, kd...) + col;
    wrow[1] = D::at(8, kd...) + col;
  } else {
    wrow[0] = col;
  }
  float acc[kRowsOfW][M];
#pragma unroll
  for (int q = 0; q < kRowsOfW; ++q)
#pragma unroll
    for (int r = 0; r < M; ++r) acc[q][r] = 0.0f;
  // Launched early (programmatic dependent launch), the kernel asks for the
  // first 2 KB of each weight row part it reads while the grid before it
  // finishes: weights are constants no kernel writes. Then it waits for that
  // grid, whose output may be `a`.
  kiln_launch_dependents();
  const uint4* wr[kRowsOfW];
#pragma unroll
  for (int q = 0; q < kRowsOfW; ++q) wr[q] = reinterpret_cast<const uint4*>(w + wrow[q] * ldw);
  if (col < n && lane < 16) {
    // Lane l asks for line l % 4 (8 vectors) of the warp's chunk l / 4 (32 vectors).
    const long long v = part * 32 + (lane >> 2) * 32 * Split + (lane & 3) * 8;
    if (v < kv)
#pragma unroll
      for (int q = 0; q < kRowsOfW; ++q) kiln_prefetch_l2(wr[q] + v);
  }
  kiln_wait_prior_grid();
  if (col < n) {
#pragma unroll 4
    for (long long v = part * 32 + lane; v < kv; v += 32 * Split) {
      float wf[kRowsOfW][kWv];
#pragma unroll
      for (int q = 0; q < kRowsOfW; ++q) gemv_weights<W>::unpack(__ldcs(wr[q] + v), wf[q]);
#pragma unroll
      for (int r = 0; r < M; ++r) {
        if (r >= rows) break;
#pragma unroll
        for (int h = 0; h < kXv; ++h) {
          const uint4 xv = __ldg(reinterpret_cast<const uint4*>(a + r * lda) + v * kXv + h);
          const T* xp = reinterpret_cast<const T*>(&xv);
#pragma unroll
          for (int q = 0; q < kRowsOfW; ++q)
#pragma unroll
            for (int e = 0; e < kVec; ++e) acc[q][r] = fmaf(wf[q][h * kVec + e], kiln_ld(xp[e]), acc[q][r]);
        }
      }
    }
  }
#pragma unroll
  for (int q = 0; q < kRowsOfW; ++q)
#pragma unroll
    for (int r = 0; r < M; ++r) acc[q][r] = kiln_warp_sum(acc[q][r]);
  if constexpr (Split > 1) {
    __shared__ float parts[kWarps][kRowsOfW][M];
    if (lane == 0) {
#pragma unroll
      for (int q = 0; q < kRowsOfW; ++q)
#pragma unroll
        for (int r = 0; r < M; ++r) parts[warp][q][r] = acc[q][r];
    }
    __syncthreads();
    if (part == 0 && lane == 0) {
#pragma unroll
      for (int q = 0; q < kRowsOfW; ++q)
#pragma unroll
        for (int r = 0; r < M; ++r) {
          float t = 0.0f;
#pragma unroll
          for (int p = 0; p < Split; ++p) t += parts[warp + p][q][r];
          acc[q][r] = t;
        }
    }
  }
  if (part != 0 || lane != 0 || col >= n) return;
#pragma unroll
  for (int r = 0; r < M; ++r) {
    if (r >= rows) break;
    float v[kRowsOfW];
#pragma unroll
    for (int q = 0; q < kRowsOfW; ++q) {
      v[q] = alpha * (scales != nullptr ? acc[q][r] * scales[wrow[q]] : acc[q][r]);
      if (bias != nullptr) v[q] += kiln_ld(bias[wrow[q]]);
    }
    if constexpr (Act == kGemvRelu) v[0] = v[0] > 0.0f ? v[0] : 0.0f;
    if constexpr (Act == kGemvGelu)
      v[0] = 0.5f * v[0] * (1.0f + tanhf(0.7978845608028654f * (v[0] + 0.044715f * v[0] * v[0] * v[0])));
    if constexpr (Act == kGemvSwiglu) {
      const float g = kiln_round<T>(v[0]), u = kiln_round<T>(v[kRowsOfW - 1]);
      v[0] = kiln_round<T>(g / (1.0f + exp(-g))) * u;
    }
    c[r * ldc + col] = kiln_st<T>(v[0]);
  }
}

// Params: c, a, w.
template <typename T, int M, int Split, int Act, class D, class... P>
__global__ void __launch_bounds__(256) gemv(T* __restrict__ c, const T* __restrict__ a, const T* __restrict__ w,
                                            P... kd) {
  gemv_rows<T, T, M, Split, Act, D>(c, a, w, nullptr, nullptr, kd...);
}

// Params: c, a, w, bias (n elements).
template <typename T, int M, int Split, int Act, class D, class... P>
__global__ void __launch_bounds__(256) gemv_bias(T* __restrict__ c, const T* __restrict__ a,
                                                 const T* __restrict__ w, const T* __restrict__ bias, P... kd) {
  gemv_rows<T, T, M, Split, Act, D>(c, a, w, nullptr, bias, kd...);
}

// FP8 e4m3 weights, a float32 scale per row of w (DeviceConstant::fp8_rows);
// sizes as gemv's, with 2 the row's 16-byte vectors of w (k / 16).
// Params: c, a, w, scales.
template <typename T, int M, int Split, int Act, class D, class... P>
__global__ void __launch_bounds__(256) gemv_fp8(T* __restrict__ c, const T* __restrict__ a,
                                                const kiln_fp8* __restrict__ w, const float* __restrict__ scales,
                                                P... kd) {
  gemv_rows<T, kiln_fp8, M, Split, Act, D>(c, a, w, scales, nullptr, kd...);
}

// Params: c, a, w, scales, bias (n elements).
template <typename T, int M, int Split, int Act, class D, class... P>
__global__ void __launch_bounds__(256)
    gemv_fp8_bias(T* __restrict__ c, const T* __restrict__ a, const kiln_fp8* __restrict__ w,
                  const float* __restrict__ scales, const T* __restrict__ bias, P... kd) {
  gemv_rows<T, kiln_fp8, M, Split, Act, D>(c, a, w, scales, bias, kd...);
}

}  // namespace kiln
