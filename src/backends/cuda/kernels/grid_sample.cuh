// grid_sampler's arithmetic, written once for both backends: the CPU kernel
// (backends/cpu/volume.cc) includes this file as C++, NVRTC compiles it for
// the CUDA layer (as "kiln/grid_sample.cuh"). A sample point is a grid entry
// in [-1, 1] per spatial dim, unnormalized to an input position, treated by
// the padding mode (0 zeros, 1 border, 2 reflection) and read bilinearly
// (trilinearly in 3-d), at the nearest entry, or bicubically (2-d), all in
// double. Only what both compilers take: no standard library on the device.
#pragma once

#ifdef __CUDACC_RTC__
#define KILN_SAMPLE_FN __device__ __forceinline__
#else
#include <cmath>
#define KILN_SAMPLE_FN inline
#endif

namespace kiln::grid_sample {

#ifndef __CUDACC_RTC__
using std::fabs;
using std::floor;
using std::fmax;
using std::fmin;
using std::fmod;
using std::nearbyint;
#endif

// A coordinate in [-1, 1] to a position in an input dim of `size` entries.
KILN_SAMPLE_FN double unnormalize(double g, long long size, bool align_corners) {
  return align_corners ? (g + 1) / 2 * static_cast<double>(size - 1) : ((g + 1) * static_cast<double>(size) - 1) / 2;
}

// v mirrored into [lo2 / 2, hi2 / 2] (the parity of the flips taken in
// double, so that a huge v does not overflow an integer).
KILN_SAMPLE_FN double reflect(double v, double lo2, double hi2) {
  if (lo2 == hi2) return 0.0;
  const double min = lo2 / 2, span = (hi2 - lo2) / 2;
  v = fabs(v - min);
  const double extra = fmod(v, span);
  return fmod(floor(v / span), 2.0) == 0 ? extra + min : span - extra + min;
}

// v clamped to [0, last]; a NaN comes out as 0, as PyTorch's CPU kernel
// gives it.
KILN_SAMPLE_FN double clip(double v, double last) { return fmin(last, fmax(v, 0.0)); }

// A position treated by the padding mode: zeros as is (reads outside give 0),
// border clamped, reflection mirrored at the edges, then clamped.
KILN_SAMPLE_FN double pad_coord(double x, long long size, bool align_corners, int padding) {
  const double last = static_cast<double>(size - 1);
  if (padding == 1) return clip(x, last);
  if (padding == 2)
    return clip(align_corners ? reflect(x, 0, 2.0 * last) : reflect(x, -1, 2.0 * static_cast<double>(size) - 1), last);
  return x;
}

// A position as an index: one that is not finite or lies far outside any
// tensor becomes -100 (read as outside, so 0), as ATen's
// safe_downgrade_to_int_range does, instead of an undefined conversion.
KILN_SAMPLE_FN long long to_index(double v) {
  return v == v && v > -1e15 && v < 1e15 ? static_cast<long long>(v) : -100;
}

KILN_SAMPLE_FN double cubic1(double x, double A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
KILN_SAMPLE_FN double cubic2(double x, double A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }

// The sample of one plane (read through at(z, y, x), which gives 0 outside
// [0, D) x [0, H) x [0, W)) at grid point (gx, gy, gz); `three` for a 3-d
// input (a 2-d one is depth 1, sampled at depth 0). mode 0 bilinear, 1
// nearest (half to even), 2 bicubic (2-d only).
template <class At>
KILN_SAMPLE_FN double sample(const At& at, double gx, double gy, double gz, long long D, long long H, long long W,
                             int mode, int padding, bool align, bool three) {
  if (mode == 2) {
    // Bicubic: the point unnormalized without padding; its 4x4 neighbours each read through the padding mode.
    const double ix = unnormalize(gx, W, align), iy = unnormalize(gy, H, align);
    const double x0 = floor(ix), y0 = floor(iy), tx = ix - x0, ty = iy - y0;
    const double A = -0.75;
    const double wx[4] = {cubic2(tx + 1, A), cubic1(tx, A), cubic1(1 - tx, A), cubic2(2 - tx, A)};
    const double wy[4] = {cubic2(ty + 1, A), cubic1(ty, A), cubic1(1 - ty, A), cubic2(2 - ty, A)};
    double r = 0;
    for (int i = 0; i < 4; ++i) {
      double row = 0;
      for (int j = 0; j < 4; ++j) {
        const double my = pad_coord(y0 - 1 + i, H, align, padding), mx = pad_coord(x0 - 1 + j, W, align, padding);
        row += wx[j] * at(0, to_index(my), to_index(mx));
      }
      r += wy[i] * row;
    }
    return r;
  }
  const double ix = pad_coord(unnormalize(gx, W, align), W, align, padding);
  const double iy = pad_coord(unnormalize(gy, H, align), H, align, padding);
  const double iz = three ? pad_coord(unnormalize(gz, D, align), D, align, padding) : 0.0;
  if (mode == 1) return at(to_index(nearbyint(iz)), to_index(nearbyint(iy)), to_index(nearbyint(ix)));
  const double x0 = floor(ix), y0 = floor(iy), z0 = floor(iz);
  const double tx = ix - x0, ty = iy - y0, tz = iz - z0;
  double r = 0;
  for (int dz = 0; dz < (three ? 2 : 1); ++dz)
    for (int dy = 0; dy < 2; ++dy)
      for (int dx = 0; dx < 2; ++dx) {
        const double w = (dx ? tx : 1 - tx) * (dy ? ty : 1 - ty) * (three ? (dz ? tz : 1 - tz) : 1.0);
        if (w == 0) continue;
        // A corner outside reads 0; a NaN weight still makes the sample NaN, as in PyTorch.
        r += w * at(to_index(z0) + dz, to_index(y0) + dy, to_index(x0) + dx);
      }
  return r;
}

}  // namespace kiln::grid_sample

#ifdef __CUDACC_RTC__
#include "kiln/prelude.cuh"

namespace kiln {

// grid_sampler over contiguous tensors, one output per thread: in
// [N, C, (D,) H, W], grid [N, points..., 2 or 3] (x, y(, z)), out
// [N, C, points...]. Params: out, in, grid. Sizes: 0 C, 1 D (1 in 2-d),
// 2 H, 3 W, 4 points per batch entry, 5 n (outputs).
template <typename T, typename G, int Mode, int Padding, bool Align, bool Three, class D, class... P>
__global__ void __launch_bounds__(256) grid_sampler(T* __restrict__ out, const T* __restrict__ in,
                                                    const G* __restrict__ grid, P... kd) {
  kiln_enter_after_prior_grid();
  const long long C = D::at(0, kd...), ID = D::at(1, kd...), IH = D::at(2, kd...), IW = D::at(3, kd...);
  const long long points = D::at(4, kd...), n = D::at(5, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    const long long p = i % points, r = i / points, c = r % C, b = r / C;
    const G* g = grid + (b * points + p) * (Three ? 3 : 2);
    const double gx = static_cast<double>(kiln_ld(g[0])), gy = static_cast<double>(kiln_ld(g[1]));
    const double gz = Three ? static_cast<double>(kiln_ld(g[Three ? 2 : 0])) : 0.0;
    const T* plane = in + (b * C + c) * ID * IH * IW;
    auto at = [&](long long z, long long y, long long x) -> double {
      if (z < 0 || z >= ID || y < 0 || y >= IH || x < 0 || x >= IW) return 0.0;
      return static_cast<double>(kiln_ld(plane[(z * IH + y) * IW + x]));
    };
    const double v = grid_sample::sample(at, gx, gy, gz, ID, IH, IW, Mode, Padding, Align, Three);
    if constexpr (sizeof(T) >= 4) {
      out[i] = static_cast<T>(v);
    } else {
      out[i] = kiln_st<T>(static_cast<float>(v));
    }
  }
}

}  // namespace kiln
#endif
