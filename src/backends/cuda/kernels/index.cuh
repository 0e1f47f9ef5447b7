// Rows picked and written by integer indices: an embedding's rows gathered
// from a table, and index_copy's scatter of rows into positions along a dim.
// An index out of range sets *error to ErrorCode (the engine's error word)
// instead of reading or writing out of bounds. A grid-stride loop of 256
// threads per block.
#pragma once

#include "kiln/prelude.cuh"

namespace kiln {

// out[i, :] = table[index[i], :] for `rows` indices into a [table_rows, cols]
// table (both contiguous); an index in [-table_rows, 0) counts from the end,
// one outside [-table_rows, table_rows) writes zeros.
// Params: out, table, index, error. Sizes: 0 cols, 1 table_rows, 2 rows * cols.
template <typename T, typename I, int ErrorCode, class D, class... P>
__global__ void __launch_bounds__(256)
    gather_rows(T* __restrict__ out, const T* __restrict__ table, const I* __restrict__ index, int* error, P... kd) {
  const long long cols = D::at(0, kd...), table_rows = D::at(1, kd...), n = D::at(2, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    const long long row = i / cols, col = i % cols;
    long long ix = static_cast<long long>(index[row]);
    if (ix < 0) ix += table_rows;
    if (ix < 0 || ix >= table_rows) {
      atomicExch(error, ErrorCode);
      out[i] = static_cast<T>(0);
      continue;
    }
    out[i] = table[ix * cols + col];
  }
}

// out[o, index[j], i] = src[o, j, i]: src viewed as [outer, count, inner] and
// out as [outer, out_dim, inner] (both contiguous); a position outside
// [0, out_dim) writes nothing for its row.
// Params: out, src, index, error. Sizes: 0 inner, 1 count, 2 out_dim, 3 outer * count * inner.
template <typename T, typename I, int ErrorCode, class D, class... P>
__global__ void __launch_bounds__(256)
    index_copy(T* __restrict__ out, const T* __restrict__ src, const I* __restrict__ index, int* error, P... kd) {
  const long long inner = D::at(0, kd...), count = D::at(1, kd...), out_dim = D::at(2, kd...), n = D::at(3, kd...);
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * 256) {
    const long long in = i % inner, t = i / inner, j = t % count, o = t / count;
    const long long ix = static_cast<long long>(index[j]);
    if (ix < 0 || ix >= out_dim) {
      atomicExch(error, ErrorCode);
      continue;
    }
    out[(o * out_dim + ix) * inner + in] = src[i];
  }
}

}  // namespace kiln
