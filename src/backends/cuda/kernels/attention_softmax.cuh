// Softmax over the rows of attention scores [B*H*L, S] (contiguous), for
// attention computed as two GEMMs around it: an optional mask broadcast to
// [B, H, L, S] through its strides (bool: false masks out; a floating mask
// is added) and causal (top-left aligned) masking; a fully masked row
// becomes zeros. float32 inside; a block of Threads per row.
#pragma once

#include "kiln/prelude.cuh"

namespace kiln {

// Sizes: 0 H, 1 L, 2 S, then with a mask its strides 3..6 (B, H, L, S).
template <typename T, typename M, bool Masked, bool Causal, class D, class... P>
__device__ __forceinline__ void attention_softmax_row(T* __restrict__ out, const T* __restrict__ in,
                                                      const M* __restrict__ mask, const P&... kd) {
  const long long row = blockIdx.x;
  const long long H = D::at(0, kd...), L = D::at(1, kd...), S = D::at(2, kd...);
  const long long l = row % L, bh = row / L, h = bh % H, b = bh / H;
  const T* x = in + row * S;
  T* y = out + row * S;
  __shared__ float red[32];
  auto score = [&](long long j) -> float {
    float v = kiln_ld(x[j]);
    if constexpr (Causal) {
      if (j > l) return -INFINITY;
    }
    if constexpr (Masked) {
      const M mv = mask[b * D::at(3, kd...) + h * D::at(4, kd...) + l * D::at(5, kd...) + j * D::at(6, kd...)];
      if constexpr (same_type<M, bool>::value) {
        if (!mv) return -INFINITY;
      } else {
        v += kiln_ld(mv);
      }
    }
    return v;
  };
  float m = -INFINITY;
  for (long long j = threadIdx.x; j < S; j += blockDim.x) m = fmaxf(m, score(j));
  m = kiln_block_reduce(m, true, red);
  float sum = 0.0f;
  if (m != -INFINITY)
    for (long long j = threadIdx.x; j < S; j += blockDim.x) sum += __expf(score(j) - m);
  sum = kiln_block_reduce(sum, false, red);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (long long j = threadIdx.x; j < S; j += blockDim.x)
    y[j] = kiln_st<T>(m == -INFINITY ? 0.0f : __expf(score(j) - m) * inv);
}

// Params: out, scores.
template <typename T, bool Causal, int Threads, class D, class... P>
__global__ void __launch_bounds__(Threads) attention_softmax(T* __restrict__ out, const T* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  attention_softmax_row<T, bool, false, Causal, D>(out, in, nullptr, kd...);
}

// Params: out, scores, mask.
template <typename T, typename M, bool Causal, int Threads, class D, class... P>
__global__ void __launch_bounds__(Threads)
    attention_softmax_masked(T* __restrict__ out, const T* __restrict__ in, const M* __restrict__ mask, P... kd) {
  kiln_enter_after_prior_grid();
  attention_softmax_row<T, M, true, Causal, D>(out, in, mask, kd...);
}

}  // namespace kiln
