// kiln.rotary (transformers' apply_rotary_pos_emb in one kernel): out =
// round(x * cos) + round(rotate_half(x) * sin), rounded to T at each step as
// the separate ops do.
#pragma once

#include "kiln/strided.cuh"

namespace kiln {

// out contiguous; x, cos and sin strided at out's sizes (cos and sin expanded
// with zero strides); the last dim is even. Params: out, x, cos, sin.
// Sizes: as kiln/strided.cuh's over out's Rank dims (not merged) and four
// tensors, then the last dim's size, its half, and x's stride times the half.
template <typename T, int Rank, class D, class... P>
__global__ void __launch_bounds__(256)
    rotary(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ c, const T* __restrict__ sn, P... kd) {
  kiln_enter_after_prior_grid();
  constexpr int E = strided_extra<Rank, 4>;
  const long long last = D::at(E, kd...), half = D::at(E + 1, kd...), shift = D::at(E + 2, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < D::at(0, kd...);
       i += static_cast<long long>(gridDim.x) * 256) {
    long long o[4];
    strided_offsets<long long, Rank, 4, D>(i, o, kd...);
    const long long j = i % last;
    const float xv = kiln_ld(x[o[1]]);
    const float xp = kiln_ld(x[o[1] + (j < half ? shift : -shift)]);
    const float rot = j < half ? -xp : xp;
    const float a = kiln_round<T>(xv * kiln_ld(c[o[2]]));
    const float b = kiln_round<T>(rot * kiln_ld(sn[o[3]]));
    out[o[0]] = kiln_st<T>(a + b);
  }
}

}  // namespace kiln
