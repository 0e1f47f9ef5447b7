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

// A transposed convolution's output gathered from the columns a GEMM made
// (cols[(n*H + ih)*W + iw][(co*R + r)*S + s] = sum over ci of x[n, ci, ih,
// iw] * w[ci, co, r, s]): out[n, co, oh, ow] (contiguous) = bias[co] (with
// HasBias) + the sum, in the compute type, over the filter taps (r, s) whose
// input position ih = (oh + PH - r*DH) / SH (and iw likewise) divides evenly
// and lies inside the input. Params: out, cols, bias.
// Sizes: 0 n (N*Cout*OH*OW), 1 Cout, 2 OH, 3 OW, 4 H, 5 W, 6 R, 7 S, 8 SH,
// 9 SW, 10 PH, 11 PW, 12 DH, 13 DW.
template <typename T, bool HasBias, class D, class... P>
__global__ void __launch_bounds__(256) col2im(T* __restrict__ out, const T* __restrict__ cols,
                                              const T* __restrict__ bias, P... kd) {
  kiln_enter_after_prior_grid();
  using C = typename compute_type<T>::type;
  const long long n = D::at(0, kd...), K = D::at(1, kd...), OH = D::at(2, kd...), OW = D::at(3, kd...);
  const long long H = D::at(4, kd...), W = D::at(5, kd...), R = D::at(6, kd...), S = D::at(7, kd...);
  const long long SH = D::at(8, kd...), SW = D::at(9, kd...), PH = D::at(10, kd...), PW = D::at(11, kd...);
  const long long DH = D::at(12, kd...), DW = D::at(13, kd...);
  const long long row = K * R * S;
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    const long long ow = i % OW, t = i / OW, oh = t % OH, u = t / OH, co = u % K, b = u / K;
    C acc = HasBias ? kiln_ld(bias[co]) : C(0);
    for (long long r = 0; r < R; ++r) {
      const long long hh = oh + PH - r * DH;
      if (hh < 0 || hh % SH != 0 || hh / SH >= H) continue;
      const long long ih = hh / SH;
      for (long long s = 0; s < S; ++s) {
        const long long ww = ow + PW - s * DW;
        if (ww < 0 || ww % SW != 0 || ww / SW >= W) continue;
        acc += kiln_ld(cols[((b * H + ih) * W + ww / SW) * row + (co * R + r) * S + s]);
      }
    }
    if constexpr (sizeof(T) == 8) {
      out[i] = acc;
    } else {
      out[i] = kiln_st<T>(acc);
    }
  }
}

}  // namespace kiln
