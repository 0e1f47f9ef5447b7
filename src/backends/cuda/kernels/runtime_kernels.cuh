// Kernels kiln's CUDA runtime launches around engines, not part of any
// engine's plan: compiled once per process with NVRTC for the device present
// (runtime_kernels.cc), from this file embedded into the library at build time.
// Self-contained: no headers, so NVRTC needs no include path.

typedef unsigned char kiln_u8;
typedef unsigned short kiln_u16;
typedef unsigned int kiln_u32;
typedef long long kiln_i64;
typedef unsigned long long kiln_u64;

struct __align__(16) KilnVec16 {
  kiln_u32 x, y, z, w;
};

// Up to KILN_COPY_BATCH copies in one launch: a call's small inputs into
// their slots and its outputs out of the arena cost one launch each way
// instead of one copy each. Block (k, c) copies chunk c (KILN_COPY_CHUNK
// bytes) of region k. Passed by value (the kernel parameter space holds it).
#define KILN_COPY_BATCH 32
#define KILN_COPY_CHUNK 16384
struct KilnCopyBatch {
  int n;
  kiln_u32 bytes[KILN_COPY_BATCH];
  const kiln_u8* src[KILN_COPY_BATCH];
  kiln_u8* dst[KILN_COPY_BATCH];
};

extern "C" __global__ void kiln_copy_batch(const KilnCopyBatch b) {
  const int k = blockIdx.x;
  if (k >= b.n) return;
  const kiln_u32 begin = blockIdx.y * KILN_COPY_CHUNK;
  if (begin >= b.bytes[k]) return;
  const kiln_u32 n = min(b.bytes[k] - begin, static_cast<kiln_u32>(KILN_COPY_CHUNK));
  const kiln_u8* s = b.src[k] + begin;
  kiln_u8* d = b.dst[k] + begin;
  kiln_u32 head = 0;
  if (((reinterpret_cast<kiln_u64>(s) | reinterpret_cast<kiln_u64>(d)) & 15) == 0) {
    const kiln_u32 vectors = n / 16;
    for (kiln_u32 i = threadIdx.x; i < vectors; i += blockDim.x)
      reinterpret_cast<KilnVec16*>(d)[i] = reinterpret_cast<const KilnVec16*>(s)[i];
    head = vectors * 16;
  }
  for (kiln_u32 i = head + threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

// dtype codes: 0 float32, 1 float16, 2 bfloat16.
__device__ __forceinline__ float kiln_load(const void* x, int dtype, kiln_i64 i) {
  if (dtype == 0) return static_cast<const float*>(x)[i];
  const kiln_u16 bits = static_cast<const kiln_u16*>(x)[i];
  if (dtype == 2) return __uint_as_float(static_cast<kiln_u32>(bits) << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
  return f;
}

// Whether (a, ia) comes before (b, ib) in torch.argmax's order: the larger
// value (a NaN above any number), then the smaller index.
__device__ __forceinline__ bool kiln_argmax_before(float a, kiln_i64 ia, float b, kiln_i64 ib) {
  const bool na = a != a, nb = b != b;
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

// The argmax of rows in two launches, so that a vocabulary-sized row is read
// by many blocks at once (one block alone waits on its loads one after
// another). kiln_argmax_partial: block (b, row) takes its share of the row
// (`chunk` elements) and writes its best (value, index) to part[row * parts +
// b]; kiln_argmax_final: one block per row reduces the `parts` partials.
__device__ __forceinline__ void kiln_argmax_keep(float& v, kiln_i64& at, float y, kiln_i64 i) {
  if (at < 0 || kiln_argmax_before(y, i, v, at)) {
    v = y;
    at = i;
  }
}

// Reduces the block's (value, index) pairs to thread 0's (blockDim.x a power of two, at most 1024).
__device__ __forceinline__ void kiln_argmax_block(float& v, kiln_i64& at) {
  __shared__ float best_value[1024];
  __shared__ kiln_i64 best_index[1024];
  best_value[threadIdx.x] = v;
  best_index[threadIdx.x] = at;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const unsigned o = threadIdx.x + half;
      if (best_index[o] >= 0 &&
          (best_index[threadIdx.x] < 0 ||
           kiln_argmax_before(best_value[o], best_index[o], best_value[threadIdx.x], best_index[threadIdx.x]))) {
        best_value[threadIdx.x] = best_value[o];
        best_index[threadIdx.x] = best_index[o];
      }
    }
    __syncthreads();
  }
  v = best_value[0];
  at = best_index[0];
}

extern "C" __global__ void __launch_bounds__(256) kiln_argmax_partial(const void* x, int dtype, kiln_i64 n,
                                                                       kiln_i64 chunk, float* part_value,
                                                                       kiln_i64* part_index) {
  const kiln_i64 row = blockIdx.y, parts = gridDim.x;
  const kiln_u64 elem = dtype == 0 ? 4 : 2;
  const void* r = static_cast<const kiln_u8*>(x) + static_cast<kiln_u64>(row) * static_cast<kiln_u64>(n) * elem;
  const kiln_i64 begin = blockIdx.x * chunk;
  const kiln_i64 end = begin + chunk < n ? begin + chunk : n;
  float v = 0;
  kiln_i64 at = -1;
  // Eight independent loads in flight per thread.
  kiln_i64 i = begin + threadIdx.x;
  for (; i + 7 * 256 < end; i += 8 * 256) {
    float y[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) y[j] = kiln_load(r, dtype, i + j * 256);
#pragma unroll
    for (int j = 0; j < 8; ++j) kiln_argmax_keep(v, at, y[j], i + j * 256);
  }
  for (; i < end; i += 256) kiln_argmax_keep(v, at, kiln_load(r, dtype, i), i);
  kiln_argmax_block(v, at);
  if (threadIdx.x == 0) {
    part_value[row * parts + blockIdx.x] = v;
    part_index[row * parts + blockIdx.x] = at;
  }
}

extern "C" __global__ void __launch_bounds__(1024) kiln_argmax_final(const float* part_value,
                                                                      const kiln_i64* part_index, kiln_i64 parts,
                                                                      kiln_i64* out) {
  const kiln_i64 row = blockIdx.x;
  float v = 0;
  kiln_i64 at = -1;
  for (kiln_i64 b = threadIdx.x; b < parts; b += blockDim.x) {
    const kiln_i64 i = part_index[row * parts + b];
    if (i >= 0) kiln_argmax_keep(v, at, part_value[row * parts + b], i);
  }
  kiln_argmax_block(v, at);
  if (threadIdx.x == 0) out[row] = at < 0 ? 0 : at;
}

// torch.nonzero on the device, over chunks of KILN_NZ_CHUNK elements (one
// block of 256 threads each), in three launches: kiln_nonzero_count writes the
// number of nonzero elements of each chunk; kiln_nonzero_scan (one block)
// turns those into each chunk's first output row and writes the total, the
// one number the host reads back to size the output; kiln_nonzero_write
// writes the index tuples of its chunk's nonzero elements from there on, in
// row-major order. An element is nonzero when its bits outside `mask` are not
// all zero: the sign bit is masked for floating types, so -0.0 is zero and
// NaN is not, as in torch.
#define KILN_NZ_CHUNK 4096
#define KILN_NZ_MAX_DIMS 8
struct KilnNonzeroShape {
  int ndim;
  kiln_i64 sizes[KILN_NZ_MAX_DIMS];
};

__device__ __forceinline__ bool kiln_nonzero_at(const void* x, int elem_bytes, kiln_u64 mask, kiln_i64 i) {
  kiln_u64 bits;
  if (elem_bytes == 1) bits = static_cast<const kiln_u8*>(x)[i];
  else if (elem_bytes == 2) bits = static_cast<const kiln_u16*>(x)[i];
  else if (elem_bytes == 4) bits = static_cast<const kiln_u32*>(x)[i];
  else bits = static_cast<const kiln_u64*>(x)[i];
  return (bits & mask) != 0;
}

extern "C" __global__ void __launch_bounds__(256) kiln_nonzero_count(const void* x, int elem_bytes, kiln_u64 mask,
                                                                      kiln_i64 n, kiln_i64* counts) {
  const kiln_i64 begin = static_cast<kiln_i64>(blockIdx.x) * KILN_NZ_CHUNK;
  int total = 0;
  for (int r = 0; r < KILN_NZ_CHUNK / 256; ++r) {
    const kiln_i64 i = begin + r * 256 + threadIdx.x;
    total += __syncthreads_count(i < n && kiln_nonzero_at(x, elem_bytes, mask, i));
  }
  if (threadIdx.x == 0) counts[blockIdx.x] = total;
}

// counts[b] becomes the sum of counts[0, b); *total the sum of all. One block of 1024 threads.
extern "C" __global__ void __launch_bounds__(1024) kiln_nonzero_scan(kiln_i64* counts, kiln_i64 chunks,
                                                                      kiln_i64* total) {
  __shared__ kiln_i64 part[1024];
  kiln_i64 carry = 0;
  for (kiln_i64 base = 0; base < chunks; base += 1024) {
    const kiln_i64 i = base + threadIdx.x;
    const kiln_i64 v = i < chunks ? counts[i] : 0;
    part[threadIdx.x] = v;
    __syncthreads();
    for (unsigned step = 1; step < 1024; step *= 2) {
      const kiln_i64 add = threadIdx.x >= step ? part[threadIdx.x - step] : 0;
      __syncthreads();
      part[threadIdx.x] += add;
      __syncthreads();
    }
    if (i < chunks) counts[i] = carry + part[threadIdx.x] - v;
    carry += part[1023];
    __syncthreads();
  }
  if (threadIdx.x == 0) *total = carry;
}

// Calls f(i, row) for each nonzero element i of the block's chunk, in order,
// row being its place in the output (the chunk's first row from `offsets`).
template <typename F>
__device__ __forceinline__ void kiln_nonzero_each(const void* x, int elem_bytes, kiln_u64 mask, kiln_i64 n,
                                                  const kiln_i64* offsets, F f) {
  __shared__ int warp_total[8];
  const kiln_i64 begin = static_cast<kiln_i64>(blockIdx.x) * KILN_NZ_CHUNK;
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  kiln_i64 row = offsets[blockIdx.x];
  for (int r = 0; r < KILN_NZ_CHUNK / 256; ++r) {
    const kiln_i64 i = begin + r * 256 + threadIdx.x;
    const bool hit = i < n && kiln_nonzero_at(x, elem_bytes, mask, i);
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_total[warp] = __popc(ballot);
    __syncthreads();
    int before = __popc(ballot & ((1u << lane) - 1u)), all = 0;
    for (unsigned w = 0; w < 8; ++w) {
      if (w < warp) before += warp_total[w];
      all += warp_total[w];
    }
    if (hit) f(i, row + before);
    row += all;
    __syncthreads();
  }
}

// The index tuples of the nonzero elements: out [count, ndim].
extern "C" __global__ void __launch_bounds__(256) kiln_nonzero_write(const void* x, int elem_bytes, kiln_u64 mask,
                                                                      kiln_i64 n, const kiln_i64* offsets,
                                                                      const KilnNonzeroShape shape, kiln_i64* out) {
  kiln_nonzero_each(x, elem_bytes, mask, n, offsets, [&](kiln_i64 i, kiln_i64 row) {
    kiln_i64 rest = i;
    kiln_i64* o = out + row * shape.ndim;
    for (int d = shape.ndim - 1; d >= 0; --d) {
      o[d] = rest % shape.sizes[d];
      rest /= shape.sizes[d];
    }
  });
}

// x[mask] for a mask over x's leading dims: row i of src (row_bytes each,
// the elements under mask element i) goes to row `row` of dst, in order.
extern "C" __global__ void __launch_bounds__(256) kiln_masked_rows(const void* x, int elem_bytes, kiln_u64 mask,
                                                                    kiln_i64 n, const kiln_i64* offsets,
                                                                    const kiln_u8* src, kiln_i64 row_bytes,
                                                                    kiln_u8* dst) {
  kiln_nonzero_each(x, elem_bytes, mask, n, offsets, [&](kiln_i64 i, kiln_i64 row) {
    const kiln_u8* s = src + i * row_bytes;
    kiln_u8* d = dst + row * row_bytes;
    if (((reinterpret_cast<kiln_u64>(s) | reinterpret_cast<kiln_u64>(d) | static_cast<kiln_u64>(row_bytes)) & 3) == 0) {
      for (kiln_i64 k = 0; k < row_bytes / 4; ++k)
        reinterpret_cast<kiln_u32*>(d)[k] = reinterpret_cast<const kiln_u32*>(s)[k];
    } else {
      for (kiln_i64 k = 0; k < row_bytes; ++k) d[k] = s[k];
    }
  });
}

// torch.unique (sorted) and unique_consecutive of a flattened tensor on the
// device. Each element becomes an unsigned key that orders as its value
// does (kind: 0 unsigned, 1 signed, 2 float16, 3 bfloat16, 4 float32,
// 5 float64; -0.0 is +0.0 and every NaN one key above +inf), paired with its
// index. unique sorts the pairs (a bitonic network over m, a power of two,
// padded with the largest pair; ties by index, so equal values keep their
// order); unique_consecutive keeps them in place. A position starts a group
// when its key differs from the one before, or is a NaN's (each NaN is its
// own); the starts are counted and placed as nonzero's rows are, and the
// count is the one number the host reads back.
#define KILN_UQ_UNSIGNED 0
#define KILN_UQ_SIGNED 1
#define KILN_UQ_F16 2
#define KILN_UQ_BF16 3
#define KILN_UQ_F32 4
#define KILN_UQ_F64 5

__device__ __forceinline__ kiln_u64 kiln_unique_key(const void* x, int elem_bytes, int kind, kiln_i64 i) {
  kiln_u64 bits;
  if (elem_bytes == 1) bits = static_cast<const kiln_u8*>(x)[i];
  else if (elem_bytes == 2) bits = static_cast<const kiln_u16*>(x)[i];
  else if (elem_bytes == 4) bits = static_cast<const kiln_u32*>(x)[i];
  else bits = static_cast<const kiln_u64*>(x)[i];
  if (kind == KILN_UQ_UNSIGNED) return bits;
  const int width = elem_bytes * 8;
  const kiln_u64 sign = kiln_u64{1} << (width - 1);
  const kiln_u64 all = width == 64 ? ~kiln_u64{0} : (kiln_u64{1} << width) - 1;
  if (kind == KILN_UQ_SIGNED) return bits ^ sign;
  // Floating: exponent all ones and a nonzero fraction is a NaN.
  const int fraction = kind == KILN_UQ_F16 ? 10 : kind == KILN_UQ_BF16 ? 7 : kind == KILN_UQ_F32 ? 23 : 52;
  const kiln_u64 magnitude = bits & (sign - 1);
  const kiln_u64 infinity = (sign - 1) & ~((kiln_u64{1} << fraction) - 1);
  if (magnitude > infinity) return all + (width == 64 ? 0 : 1);  // NaN: above every number (64-bit: all ones)
  if (magnitude == 0) return sign;                               // -0.0 and +0.0
  return (bits & sign) ? (~bits & all) : (bits | sign);
}

// Whether `key` (of kind and width) is a NaN's.
__device__ __forceinline__ bool kiln_unique_nan(kiln_u64 key, int elem_bytes, int kind) {
  if (kind < KILN_UQ_F16) return false;
  return elem_bytes == 8 ? key == ~kiln_u64{0} : key == (kiln_u64{1} << (elem_bytes * 8));
}

extern "C" __global__ void kiln_unique_keys(const void* x, int elem_bytes, int kind, kiln_i64 n, kiln_i64 m,
                                            kiln_u64* keys, kiln_i64* index) {
  const kiln_i64 i = static_cast<kiln_i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m) return;
  keys[i] = i < n ? kiln_unique_key(x, elem_bytes, kind, i) : ~kiln_u64{0};
  index[i] = i < n ? i : 0x7fffffffffffffffLL;
}

// One compare-and-swap stage of the bitonic network (block size k, distance j).
extern "C" __global__ void kiln_unique_sort_step(kiln_u64* keys, kiln_i64* index, kiln_i64 m, kiln_i64 j,
                                                 kiln_i64 k) {
  const kiln_i64 i = static_cast<kiln_i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  const kiln_i64 l = i ^ j;
  if (i >= m || l <= i) return;
  const bool ascending = (i & k) == 0;
  const kiln_u64 ki = keys[i], kl = keys[l];
  const kiln_i64 ii = index[i], il = index[l];
  const bool greater = ki > kl || (ki == kl && ii > il);
  if (greater == ascending) {
    keys[i] = kl;
    keys[l] = ki;
    index[i] = il;
    index[l] = ii;
  }
}

// starts[p] = 1 where position p begins a group.
extern "C" __global__ void kiln_unique_starts(const kiln_u64* keys, int elem_bytes, int kind, kiln_i64 n,
                                              kiln_u8* starts) {
  const kiln_i64 p = static_cast<kiln_i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= n) return;
  starts[p] = p == 0 || keys[p] != keys[p - 1] || kiln_unique_nan(keys[p], elem_bytes, kind);
}

// Each group's first position (first[g]) and value (values[g], elem_bytes
// each, copied from x at the position's index).
extern "C" __global__ void __launch_bounds__(256) kiln_unique_groups(const kiln_u8* starts, kiln_i64 n,
                                                                      const kiln_i64* offsets, const kiln_i64* index,
                                                                      const kiln_u8* x, int elem_bytes,
                                                                      kiln_i64* first, kiln_u8* values) {
  kiln_nonzero_each(starts, 1, 0xff, n, offsets, [&](kiln_i64 p, kiln_i64 g) {
    first[g] = p;
    const kiln_u8* s = x + index[p] * elem_bytes;
    for (int b = 0; b < elem_bytes; ++b) values[g * elem_bytes + b] = s[b];
  });
}

// inverse[index[p]] = the group of position p (the last g with first[g] <= p),
// counts[g] = the positions of group g.
extern "C" __global__ void kiln_unique_inverse(const kiln_i64* index, kiln_i64 n, const kiln_i64* first,
                                               kiln_i64 groups, kiln_i64* inverse, kiln_i64* counts) {
  const kiln_i64 p = static_cast<kiln_i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= n) return;
  kiln_i64 lo = 0, hi = groups - 1;
  while (lo < hi) {
    const kiln_i64 mid = (lo + hi + 1) / 2;
    if (first[mid] <= p) lo = mid;
    else hi = mid - 1;
  }
  if (inverse) inverse[index[p]] = lo;
  if (counts && first[lo] == p) counts[lo] = (lo + 1 < groups ? first[lo + 1] : n) - p;
}
