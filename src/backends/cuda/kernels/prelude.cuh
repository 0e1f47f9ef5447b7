// Definitions every kiln kernel relies on: element types, loads, stores and
// rounding, conversions, warp and block reductions, tensor-core fragments,
// and the sizes a kernel reads (literals or run-time values).
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef long long i64;
// The sizes a kernel reads at run time, passed by value after its pointers.
struct KilnDims { long long v[64]; };
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
__device__ __forceinline__ float kiln_ld(float v) { return v; }
__device__ __forceinline__ double kiln_ld(double v) { return v; }
__device__ __forceinline__ float kiln_ld(__half v) { return __half2float(v); }
__device__ __forceinline__ float kiln_ld(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T kiln_st(float v);
template <> __device__ __forceinline__ float kiln_st<float>(float v) { return v; }
template <> __device__ __forceinline__ __half kiln_st<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 kiln_st<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <typename T> __device__ __forceinline__ double kiln_st_d(double v) { return v; }
template <typename T> __device__ __forceinline__ float kiln_round(float v) { return kiln_ld(kiln_st<T>(v)); }
// A value as compared and ordered: 16-bit floats as float, every other type as itself.
__device__ __forceinline__ float kiln_key(__half v) { return __half2float(v); }
__device__ __forceinline__ float kiln_key(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T kiln_key(T v) { return v; }
template <> __device__ __forceinline__ float kiln_round<float>(float v) { return v; }
template <typename T> __device__ __forceinline__ double kiln_round(double v) { return v; }
template <typename C> __device__ __forceinline__ C kiln_min(C a, C b) { return a < b ? a : b; }
template <typename C> __device__ __forceinline__ C kiln_max(C a, C b) { return a > b ? a : b; }
// clamp as ATen does it: NaN stays NaN, a NaN bound gives NaN.
template <typename C> __device__ __forceinline__ C kiln_clamp_lo(C a, C lo) { return a != a ? a : (lo != lo ? lo : (a < lo ? lo : a)); }
template <typename C> __device__ __forceinline__ C kiln_clamp_hi(C a, C hi) { return a != a ? a : (hi != hi ? hi : (a > hi ? hi : a)); }
// Conversions between any two element types (bool as 0/1), through double for
// integers and through float for 16-bit floats; a float to a narrow integer
// (int16, int8, uint8) truncates through int32 and wraps, NaN and values
// out of int32's range giving INT32_MIN first, as the CPU kernels do.
template <typename D, typename S> __device__ __forceinline__ D kiln_cvt(S v) { return static_cast<D>(v); }
__device__ __forceinline__ int kiln_to_int32(double d) {
  return (d >= -2147483648.0 && d < 2147483648.0) ? (int)d : (int)0x80000000u;
}
#define KILN_CVT_NARROW(D) \
  template <> __device__ __forceinline__ D kiln_cvt<D, float>(float v) { return (D)kiln_to_int32(v); } \
  template <> __device__ __forceinline__ D kiln_cvt<D, double>(double v) { return (D)kiln_to_int32(v); }
KILN_CVT_NARROW(short)
KILN_CVT_NARROW(signed char)
KILN_CVT_NARROW(unsigned char)
template <> __device__ __forceinline__ __half kiln_cvt<__half, __half>(__half v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 kiln_cvt<__nv_bfloat16, __nv_bfloat16>(__nv_bfloat16 v) { return v; }
#define KILN_CVT_FROM16(S) \
  template <> __device__ __forceinline__ float kiln_cvt<float, S>(S v) { return kiln_ld(v); } \
  template <> __device__ __forceinline__ double kiln_cvt<double, S>(S v) { return kiln_ld(v); } \
  template <> __device__ __forceinline__ long long kiln_cvt<long long, S>(S v) { return (long long)kiln_ld(v); } \
  template <> __device__ __forceinline__ int kiln_cvt<int, S>(S v) { return (int)kiln_ld(v); } \
  template <> __device__ __forceinline__ bool kiln_cvt<bool, S>(S v) { return kiln_ld(v) != 0.0f; } \
  template <> __device__ __forceinline__ short kiln_cvt<short, S>(S v) { return (short)kiln_to_int32(kiln_ld(v)); } \
  template <> __device__ __forceinline__ signed char kiln_cvt<signed char, S>(S v) { return (signed char)kiln_to_int32(kiln_ld(v)); } \
  template <> __device__ __forceinline__ unsigned char kiln_cvt<unsigned char, S>(S v) { return (unsigned char)kiln_to_int32(kiln_ld(v)); }
KILN_CVT_FROM16(__half)
KILN_CVT_FROM16(__nv_bfloat16)
#define KILN_CVT_TO16(D) \
  template <> __device__ __forceinline__ D kiln_cvt<D, float>(float v) { return kiln_st<D>(v); } \
  template <> __device__ __forceinline__ D kiln_cvt<D, double>(double v) { return kiln_st<D>((float)v); } \
  template <> __device__ __forceinline__ D kiln_cvt<D, long long>(long long v) { return kiln_st<D>((float)v); } \
  template <> __device__ __forceinline__ D kiln_cvt<D, int>(int v) { return kiln_st<D>((float)v); } \
  template <> __device__ __forceinline__ D kiln_cvt<D, bool>(bool v) { return kiln_st<D>(v ? 1.0f : 0.0f); } \
  template <> __device__ __forceinline__ D kiln_cvt<D, short>(short v) { return kiln_st<D>((float)v); } \
  template <> __device__ __forceinline__ D kiln_cvt<D, signed char>(signed char v) { return kiln_st<D>((float)v); } \
  template <> __device__ __forceinline__ D kiln_cvt<D, unsigned char>(unsigned char v) { return kiln_st<D>((float)v); }
KILN_CVT_TO16(__half)
KILN_CVT_TO16(__nv_bfloat16)
template <> __device__ __forceinline__ __half kiln_cvt<__half, __nv_bfloat16>(__nv_bfloat16 v) { return __float2half_rn(__bfloat162float(v)); }
template <> __device__ __forceinline__ __nv_bfloat16 kiln_cvt<__nv_bfloat16, __half>(__half v) { return __float2bfloat16_rn(__half2float(v)); }
// Programmatic dependent launch (sm_90 and later; no-ops before). A kernel
// launched with programmatic stream serialization may start once every block
// of the grid before it has called kiln_launch_dependents (or exited); it
// reads what that grid writes only after kiln_wait_prior_grid, which waits
// for that grid to finish and its writes to be visible. For a kernel
// launched the usual way both are no-ops.
__device__ __forceinline__ void kiln_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void kiln_wait_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// The start of a kernel that may be launched early: the next kernel may
// launch, then this one waits for the grid before it (every kernel of an
// engine starts so, reading and writing nothing before it has waited).
__device__ __forceinline__ void kiln_enter_after_prior_grid() {
  kiln_launch_dependents();
  kiln_wait_prior_grid();
}
// Asks for the 128-byte line at p in L2 (no register, no wait).
__device__ __forceinline__ void kiln_prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
__device__ __forceinline__ float kiln_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double kiln_warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float kiln_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double kiln_warp_max(double v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float kiln_warp_min(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double kiln_warp_min(double v) {
  for (int o = 16; o > 0; o >>= 1) v = fmin(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// The sum or maximum of v over the block, returned to every thread; red: 32 shared slots.
template <typename C> __device__ __forceinline__ C kiln_block_reduce(C v, bool is_max, C* red) {
  v = is_max ? kiln_warp_max(v) : kiln_warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  const int nw = (blockDim.x + 31) >> 5;
  C r = threadIdx.x < nw ? red[threadIdx.x] : (is_max ? -C(INFINITY) : C(0));
  if (warp == 0) r = is_max ? kiln_warp_max(r) : kiln_warp_sum(r);
  if (threadIdx.x == 0) red[0] = r;
  __syncthreads();
  return red[0];
}
// Tensor cores (sm_80+): d += a * b for one warp, a 16x16 row-major and b 16x8
// column-major fragment of 16-bit floats (the tag picks the type), d 16x8 float32.
__device__ __forceinline__ void kiln_mma16816(float* d, const unsigned* a, unsigned b0, unsigned b1, __half) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void kiln_mma16816(float* d, const unsigned* a, unsigned b0, unsigned b1, __nv_bfloat16) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two 16-bit floats in one register, lo in the low half (a fragment's pair).
__device__ __forceinline__ unsigned kiln_pack2(float lo, float hi, __half) {
  return (unsigned)__half_as_ushort(__float2half_rn(lo)) | ((unsigned)__half_as_ushort(__float2half_rn(hi)) << 16);
}
__device__ __forceinline__ unsigned kiln_pack2(float lo, float hi, __nv_bfloat16) {
  return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
         ((unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}
__device__ __forceinline__ unsigned kiln_pair(__half lo, __half hi) {
  return (unsigned)__half_as_ushort(lo) | ((unsigned)__half_as_ushort(hi) << 16);
}
__device__ __forceinline__ unsigned kiln_pair(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return (unsigned)__bfloat16_as_ushort(lo) | ((unsigned)__bfloat16_as_ushort(hi) << 16);
}

namespace kiln {

// std::is_same (NVRTC has no standard headers).
template <typename A, typename B>
struct same_type {
  static constexpr bool value = false;
};
template <typename A>
struct same_type<A, A> {
  static constexpr bool value = true;
};

// The type a kernel computes in for elements of type T: float, double for double.
template <typename T>
struct compute_type {
  using type = float;
};
template <>
struct compute_type<double> {
  using type = double;
};

// The sizes a kernel template reads, as its last template argument: V... their
// values at build time; bit i of Mask set: size i is read at run time instead,
// from the KilnDims the launch passes after the kernel's pointers (a kernel
// with any such size takes one, as its parameter pack `P... kd`). With the
// index a constant, at() is the literal itself where the size is compiled in.
template <unsigned long long Mask, long long... V>
struct Sizes {
  static constexpr int count = sizeof...(V);
  __device__ static __forceinline__ long long at(int i) {
    long long r = 0;
    int j = 0;
    ((r = j++ == i ? V : r), ...);
    return r;
  }
  __device__ static __forceinline__ long long at(int i, const KilnDims& kd) {
    return (Mask >> i) & 1ULL ? kd.v[i] : at(i);
  }
};

}  // namespace kiln
