// A convolution's input made ready for tensor-core kernels: its channels
// padded into channels-last storage, or its patches laid out as the rows of
// a matrix (im2col, for a GEMM). The input is read through any strides of
// its logical [N, C, H, W]. A grid-stride loop of 256 threads per block.
#pragma once

#include "kiln/prelude.cuh"

namespace kiln {

// out (channels-last [N, H, W, P], contiguous) = in with channels C..P-1 zero.
// Params: out, in. Sizes: 0 P, 1 W, 2 H, 3 C, 4 N * H * W * P, 5..8 in's strides (N, C, H, W).
template <typename T, class D, class... P>
__global__ void __launch_bounds__(256) pad_channels(T* __restrict__ out, const T* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  const long long Pc = D::at(0, kd...), W = D::at(1, kd...), H = D::at(2, kd...), C = D::at(3, kd...);
  const long long n = D::at(4, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    const long long c = i % Pc, t = i / Pc, x = t % W, u = t / W, y = u % H, b = u / H;
    out[i] = c < C ? in[b * D::at(5, kd...) + c * D::at(6, kd...) + y * D::at(7, kd...) + x * D::at(8, kd...)]
                   : static_cast<T>(0);
  }
}

// out[(n*OH + oh)*OW + ow][(r*S + s)*C + c] = in[n, c, oh*SH - PH + r*DH, ow*SW - PW + s*DW]
// (zero outside the image); the filter's width S, strides, padding and
// dilation are template arguments. Params: out, in.
// Sizes: 0 cols (R*S*C), 1 C, 2 OW, 3 OH, 4 H, 5 W, 6 rows * cols, 7..10 in's strides (N, C, H, W).
template <typename T, int S, int SH, int SW, int PH, int PW, int DH, int DW, class D, class... P>
__global__ void __launch_bounds__(256) im2col(T* __restrict__ out, const T* __restrict__ in, P... kd) {
  kiln_enter_after_prior_grid();
  const long long cols = D::at(0, kd...), C = D::at(1, kd...), OW = D::at(2, kd...), OH = D::at(3, kd...);
  const long long H = D::at(4, kd...), W = D::at(5, kd...), n = D::at(6, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    const long long col = i % cols, row = i / cols;
    const long long c = col % C, rs = col / C, kx = rs % S, ky = rs / S;
    const long long ow = row % OW, t = row / OW, oh = t % OH, b = t / OH;
    const long long h = oh * SH - PH + ky * DH, w = ow * SW - PW + kx * DW;
    out[i] = (h >= 0 && h < H && w >= 0 && w < W)
                 ? in[b * D::at(7, kd...) + c * D::at(8, kd...) + h * D::at(9, kd...) + w * D::at(10, kd...)]
                 : static_cast<T>(0);
  }
}

}  // namespace kiln
