// Tensors made from numbers: integer positions (torch.arange) and a size an
// engine gives back as a 0-d int64 tensor.
#pragma once

#include "kiln/prelude.cuh"

namespace kiln {

// out[i] = start + i * step for i < n, wrapping as integers do.
// Params: out. Sizes: 0 start, 1 step, 2 n.
template <typename T, class D, class... P>
__global__ void __launch_bounds__(256) arange(T* __restrict__ out, P... kd) {
  kiln_enter_after_prior_grid();
  const unsigned long long start = static_cast<unsigned long long>(D::at(0, kd...));
  const unsigned long long step = static_cast<unsigned long long>(D::at(1, kd...));
  const long long n = D::at(2, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256)
    out[i] = static_cast<T>(start + step * static_cast<unsigned long long>(i));
}

// out[0] = the value. Params: out. Sizes: 0 the value.
template <class D, class... P>
__global__ void __launch_bounds__(32) scalar_fill(long long* __restrict__ out, P... kd) {
  kiln_enter_after_prior_grid();
  if (threadIdx.x == 0) out[0] = D::at(0, kd...);
}

}  // namespace kiln
