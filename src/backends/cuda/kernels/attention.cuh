// Scaled dot-product attention: q [B, H, L, E], k [B, Hk, S, E], v [B, Hk, S, Ev]
// (H a multiple of Hk: grouped-query heads share a key/value head, G = H / Hk),
// an optional mask broadcast to [B, H, L, S] through its strides (bool: true
// keeps; a floating mask is added to the scores) and causal masking (top-left
// aligned, as PyTorch's: row i sees keys j <= i). Softmax in float32; a fully
// masked row gives zeros (PyTorch's safe softmax, as the CPU kernel).
#pragma once

#include "kiln/prelude.cuh"

namespace kiln {

// ---- a warp per query row, for any floating type and head size up to 256

// 8 rows per block share key/value tiles of 32 keys in shared memory; out
// [B, H, L, Ev] contiguous. Sizes: 0 H, 1 G, 2 L, 3 S, 4..7 q's strides,
// 8..11 k's, 12..15 v's, 16 the scale's float32 bits, 17..20 the mask's.
template <typename T, typename M, bool Masked, bool Causal, int E, int Ev, class D, class... P>
__device__ __forceinline__ void attention_rows_body(T* __restrict__ out, const T* __restrict__ q,
                                                    const T* __restrict__ k, const T* __restrict__ v,
                                                    const M* __restrict__ mask, const P&... kd) {
  constexpr int kRows = 8, kTile = 32, EVP = (Ev + 31) / 32;  // per-lane register slots
  const long long H = D::at(0, kd...), G = D::at(1, kd...), L = D::at(2, kd...), S = D::at(3, kd...);
  const float scale = __int_as_float(static_cast<int>(D::at(16, kd...)));
  __shared__ float ks[kTile][E + 1];
  __shared__ float vs[kTile][Ev];
  __shared__ float qs[kRows][E];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long bh = blockIdx.y;
  const long long b = bh / H, h = bh % H, hk = h / G;
  const long long l = static_cast<long long>(blockIdx.x) * kRows + warp;
  const bool active = l < L;
  if (active)
    for (int e = lane; e < E; e += 32)
      qs[warp][e] = kiln_ld(q[b * D::at(4, kd...) + h * D::at(5, kd...) + l * D::at(6, kd...) +
                              e * D::at(7, kd...)]) *
                    scale;
  float m = -INFINITY, den = 0.0f;
  float acc[EVP];
  for (int j = 0; j < EVP; ++j) acc[j] = 0.0f;
  long long kend = S;
  if constexpr (Causal) kend = min(S, (static_cast<long long>(blockIdx.x) + 1) * kRows);
  for (long long t0 = 0; t0 < kend; t0 += kTile) {
    __syncthreads();
    for (int i = threadIdx.x; i < kTile * E; i += kRows * 32) {
      const int r = i / E, e = i % E;
      const long long t = t0 + r;
      ks[r][e] = t < S ? kiln_ld(k[b * D::at(8, kd...) + hk * D::at(9, kd...) + t * D::at(10, kd...) +
                                   e * D::at(11, kd...)])
                       : 0.0f;
    }
    for (int i = threadIdx.x; i < kTile * Ev; i += kRows * 32) {
      const int r = i / Ev, e = i % Ev;
      const long long t = t0 + r;
      vs[r][e] = t < S ? kiln_ld(v[b * D::at(12, kd...) + hk * D::at(13, kd...) + t * D::at(14, kd...) +
                                   e * D::at(15, kd...)])
                       : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    const long long t = t0 + lane;
    float sc = -INFINITY;
    if (t < S) {
      float d = 0.0f;
      for (int e = 0; e < E; ++e) d += qs[warp][e] * ks[lane][e];
      sc = d;
      if constexpr (Causal) {
        if (t > l) sc = -INFINITY;
      }
      if constexpr (Masked) {
        const M mv = mask[b * D::at(17, kd...) + h * D::at(18, kd...) + l * D::at(19, kd...) + t * D::at(20, kd...)];
        if constexpr (same_type<M, bool>::value) {
          if (!mv) sc = -INFINITY;
        } else {
          sc += kiln_ld(mv);
        }
      }
    }
    const float tmax = kiln_warp_max(sc);
    const float mnew = fmaxf(m, tmax);
    if (mnew == -INFINITY) continue;
    const float corr = m == -INFINITY ? 0.0f : __expf(m - mnew);
    const float pexp = sc == -INFINITY ? 0.0f : __expf(sc - mnew);
    den = den * corr + kiln_warp_sum(pexp);
    m = mnew;
    for (int j = 0; j < EVP; ++j) acc[j] *= corr;
    for (int r = 0; r < kTile; ++r) {
      const float pr = __shfl_sync(0xffffffffu, pexp, r);
      if (pr == 0.0f) continue;
      for (int j = 0; j < EVP; ++j) {
        const int e = lane + 32 * j;
        if (e < Ev) acc[j] += pr * vs[r][e];
      }
    }
  }
  if (!active) return;
  const float inv = den > 0.0f ? 1.0f / den : 0.0f;
  T* o = out + ((b * H + h) * L + l) * Ev;
  for (int j = 0; j < EVP; ++j) {
    const int e = lane + 32 * j;
    if (e < Ev) o[e] = kiln_st<T>(acc[j] * inv);
  }
}

// Params: out, q, k, v.
template <typename T, bool Causal, int E, int Ev, class D, class... P>
__global__ void __launch_bounds__(256) attention_rows(T* __restrict__ out, const T* __restrict__ q,
                                                      const T* __restrict__ k, const T* __restrict__ v, P... kd) {
  kiln_enter_after_prior_grid();
  attention_rows_body<T, bool, false, Causal, E, Ev, D>(out, q, k, v, nullptr, kd...);
}

// Params: out, q, k, v, mask.
template <typename T, typename M, bool Causal, int E, int Ev, class D, class... P>
__global__ void __launch_bounds__(256)
    attention_rows_masked(T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ k,
                          const T* __restrict__ v, const M* __restrict__ mask, P... kd) {
  kiln_enter_after_prior_grid();
  attention_rows_body<T, M, true, Causal, E, Ev, D>(out, q, k, v, mask, kd...);
}

// ---- on tensor cores, FlashAttention-style (16-bit types)

// A block of 4 warps takes 16 * RW query rows of one (batch, head): RW row
// groups of 16, each held by KS warps (RW * KS = 4) as mma fragments in
// registers. Keys and values stream through shared memory 64 at a time; of
// each tile, warp s of a row group takes keys [s * 64 / KS, (s + 1) * 64 / KS)
// (KS > 1 splits the keys when there are too few query rows to fill the GPU
// with whole tiles). S = q k^T and O += P v run on the tensor cores
// (m16n8k16, float32 accumulators), and the row maximum and sum of the
// softmax are kept online in the registers that hold S (FlashAttention's
// rescaling), so nothing of S leaves the SM; a row group's KS partial results
// merge through shared memory at the end. A mask that is the same for every
// query row (a key-padding mask) is read once per tile into shared memory,
// and a tile the mask hides from all the block's rows is skipped unread.
// Head size E a multiple of 16 up to 128 for keys and values alike; unit
// last strides and even others. Sizes: 0 L, 1 S, 2 G, 3..5 q's strides
// (batch, head, row), 6..8 k's, 9..11 v's, 12..14 out's, 15 the scale's
// float32 bits, 16..19 the mask's strides.
template <typename T, typename M, bool Masked, bool Causal, int E, int RW, int KS, class D, class... P>
__device__ __forceinline__ void flash_attention_body(T* __restrict__ out, const T* __restrict__ q,
                                                     const T* __restrict__ k, const T* __restrict__ v,
                                                     const M* __restrict__ mask, const P&... kd) {
  static_assert(RW * KS == 4, "a block is 4 warps");
  constexpr int kRows = 16 * RW, kKeys = 64, kSplit = kKeys / KS, kThreads = 128;
  constexpr int kPitch = E + 8;  // rows padded: fragment reads hit distinct banks, 16-byte aligned
  const int L = static_cast<int>(D::at(0, kd...)), S = static_cast<int>(D::at(1, kd...));
  const float scale = __int_as_float(static_cast<int>(D::at(15, kd...)));
  __shared__ __align__(16) T ks[kKeys][kPitch];
  __shared__ __align__(16) T vs[kKeys][kPitch];
  __shared__ float mk[kKeys];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int group = warp / KS, split = warp % KS;
  const long long h = blockIdx.y, b = blockIdx.z, hk = h / D::at(2, kd...);
  const int r0 = blockIdx.x * kRows + group * 16 + g, r1 = r0 + 8;
  const T* qb = q + b * D::at(3, kd...) + h * D::at(4, kd...);
  const T* kb = k + b * D::at(6, kd...) + hk * D::at(7, kd...);
  const T* vb = v + b * D::at(9, kd...) + hk * D::at(10, kd...);
  const long long ksr = D::at(8, kd...), vsr = D::at(11, kd...);
  auto pair_at = [](const T* base, int row, long long stride, int col) -> unsigned {
    return *reinterpret_cast<const unsigned*>(base + row * stride + col);
  };
  // 16-byte loads of the key and value rows where their addresses allow.
  const bool wide = ((reinterpret_cast<unsigned long long>(kb) | reinterpret_cast<unsigned long long>(vb)) & 15) == 0 &&
                    ksr % 8 == 0 && vsr % 8 == 0;
  // A mask whose value does not depend on the query row.
  bool key_mask = false;
  long long mask_base = 0;
  if constexpr (Masked) {
    key_mask = D::at(18, kd...) == 0;
    mask_base = b * D::at(16, kd...) + h * D::at(17, kd...);
  }
  const long long qs = D::at(5, kd...);
  unsigned qf[E / 16][4];
#pragma unroll
  for (int c = 0; c < E / 16; ++c) {
    const int col = c * 16 + 2 * t;
    qf[c][0] = r0 < L ? pair_at(qb, r0, qs, col) : 0u;
    qf[c][1] = r1 < L ? pair_at(qb, r1, qs, col) : 0u;
    qf[c][2] = r0 < L ? pair_at(qb, r0, qs, col + 8) : 0u;
    qf[c][3] = r1 < L ? pair_at(qb, r1, qs, col + 8) : 0u;
  }
  float o[E / 8][4];
#pragma unroll
  for (int e = 0; e < E / 8; ++e) o[e][0] = o[e][1] = o[e][2] = o[e][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  int kend = S;
  if constexpr (Causal) kend = min(S, static_cast<int>(blockIdx.x) * kRows + kRows);
  for (int j0 = 0; j0 < kend; j0 += kKeys) {
    // A tile the mask hides from every row of the block adds nothing (its
    // weights are exp(-inf) = 0): its keys and values are not read. A prompt
    // written into a static cache masks the cache's unwritten end this way.
    bool any = true;
    [[maybe_unused]] float key_add = -INFINITY;
    if constexpr (Masked) {
      any = false;
      if (key_mask) {
        if (threadIdx.x < kKeys && j0 + static_cast<int>(threadIdx.x) < S) {
          const M mv = mask[mask_base + static_cast<long long>(j0 + threadIdx.x) * D::at(19, kd...)];
          if constexpr (same_type<M, bool>::value) {
            key_add = mv ? 0.0f : -INFINITY;
          } else {
            key_add = kiln_ld(mv);
          }
          any = key_add != -INFINITY;
        }
      } else {
        for (int i = threadIdx.x; i < kRows * kKeys && !any; i += kThreads) {
          const int row = static_cast<int>(blockIdx.x) * kRows + i / kKeys, j = j0 + i % kKeys;
          if (row >= L || j >= S || (Causal && j > row)) continue;
          const M mv = mask[mask_base + static_cast<long long>(row) * D::at(18, kd...) +
                            static_cast<long long>(j) * D::at(19, kd...)];
          if constexpr (same_type<M, bool>::value) {
            any = mv;
          } else {
            any = kiln_ld(mv) != -INFINITY;
          }
        }
      }
    }
    // (Also the barrier before the tiles are overwritten.)
    if (!__syncthreads_or(any)) continue;
    if (wide) {
      for (int i = threadIdx.x; i < kKeys * E / 8; i += kThreads) {
        const int r = i / (E / 8), c = (i % (E / 8)) * 8, j = j0 + r;
        const bool in = j < S;
        const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
        *reinterpret_cast<uint4*>(&ks[r][c]) = in ? *reinterpret_cast<const uint4*>(kb + j * ksr + c) : zero;
        *reinterpret_cast<uint4*>(&vs[r][c]) = in ? *reinterpret_cast<const uint4*>(vb + j * vsr + c) : zero;
      }
    } else {
      for (int i = threadIdx.x; i < kKeys * E / 2; i += kThreads) {
        const int r = i / (E / 2), c = (i % (E / 2)) * 2, j = j0 + r;
        const bool in = j < S;
        *reinterpret_cast<unsigned*>(&ks[r][c]) = in ? pair_at(kb, j, ksr, c) : 0u;
        *reinterpret_cast<unsigned*>(&vs[r][c]) = in ? pair_at(vb, j, vsr, c) : 0u;
      }
    }
    if constexpr (Masked) {
      if (key_mask && threadIdx.x < kKeys) mk[threadIdx.x] = key_add;
    }
    __syncthreads();
    float sc[kSplit / 8][4];
#pragma unroll
    for (int n = 0; n < kSplit / 8; ++n) {
      sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
      const int key = split * kSplit + n * 8 + g;
#pragma unroll
      for (int c = 0; c < E / 16; ++c)
        kiln_mma16816(sc[n], qf[c], *reinterpret_cast<const unsigned*>(&ks[key][c * 16 + 2 * t]),
                      *reinterpret_cast<const unsigned*>(&ks[key][c * 16 + 8 + 2 * t]), T());
    }
    // Scale and mask, in the log2 domain from here on (exp2f).
#pragma unroll
    for (int n = 0; n < kSplit / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e < 2 ? r0 : r1, jt = split * kSplit + n * 8 + 2 * t + (e & 1), j = j0 + jt;
        float x = sc[n][e] * scale;
        bool keep = j < S;
        if constexpr (Causal) keep = keep && j <= i;
        if constexpr (Masked) {
          if (key_mask) {
            x += mk[jt];
          } else if (keep && i < L) {
            const M mv = mask[mask_base + static_cast<long long>(i) * D::at(18, kd...) +
                              static_cast<long long>(j) * D::at(19, kd...)];
            if constexpr (same_type<M, bool>::value) {
              keep = mv;
            } else {
              x += kiln_ld(mv);
            }
          }
        }
        (void)i;
        sc[n][e] = keep ? x * 1.44269504088896341f : -INFINITY;
      }
    float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < kSplit / 8; ++n) {
      x0 = fmaxf(x0, fmaxf(sc[n][0], sc[n][1]));
      x1 = fmaxf(x1, fmaxf(sc[n][2], sc[n][3]));
    }
    x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
    x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
    x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
    x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
    const float n0 = fmaxf(m0, x0), n1 = fmaxf(m1, x1);
    // Rows with nothing kept yet keep a finite base so that exp2f gives 0, never NaN.
    const float base0 = n0 == -INFINITY ? 0.0f : n0, base1 = n1 == -INFINITY ? 0.0f : n1;
    const float a0 = exp2f(m0 - base0), a1 = exp2f(m1 - base1);
    m0 = n0;
    m1 = n1;
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int n = 0; n < kSplit / 8; ++n) {
      sc[n][0] = exp2f(sc[n][0] - base0);
      sc[n][1] = exp2f(sc[n][1] - base0);
      sc[n][2] = exp2f(sc[n][2] - base1);
      sc[n][3] = exp2f(sc[n][3] - base1);
      s0 += sc[n][0] + sc[n][1];
      s1 += sc[n][2] + sc[n][3];
    }
    l0 = l0 * a0 + s0;
    l1 = l1 * a1 + s1;
#pragma unroll
    for (int e = 0; e < E / 8; ++e) {
      o[e][0] *= a0;
      o[e][1] *= a0;
      o[e][2] *= a1;
      o[e][3] *= a1;
    }
    // P's accumulators are the A fragments of P v, 16 keys at a time.
#pragma unroll
    for (int c = 0; c < kSplit / 16; ++c) {
      const unsigned pa[4] = {kiln_pack2(sc[2 * c][0], sc[2 * c][1], T()), kiln_pack2(sc[2 * c][2], sc[2 * c][3], T()),
                              kiln_pack2(sc[2 * c + 1][0], sc[2 * c + 1][1], T()),
                              kiln_pack2(sc[2 * c + 1][2], sc[2 * c + 1][3], T())};
      const int key = split * kSplit + c * 16 + 2 * t;
#pragma unroll
      for (int e = 0; e < E / 8; ++e) {
        const int col = e * 8 + g;
        kiln_mma16816(o[e], pa, kiln_pair(vs[key][col], vs[key + 1][col]),
                      kiln_pair(vs[key + 8][col], vs[key + 9][col]), T());
      }
    }
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  if constexpr (KS > 1) {
    // The row group's splits merge in the tiles' shared memory: each writes
    // its maximum, sum and unnormalized output, and split 0 rescales them to
    // the largest maximum (a split that kept nothing has -inf and weighs 0).
    static_assert(sizeof(ks) + sizeof(vs) >= 4 * 16 * (E + 2) * sizeof(float), "room to merge the splits");
    float* part = reinterpret_cast<float*>(&ks[0][0]) + warp * 16 * (E + 2);  // [16][E] then 16 maxima, 16 sums
    __syncthreads();
    if (split > 0) {
#pragma unroll
      for (int e = 0; e < E / 8; ++e) {
        const int col = e * 8 + 2 * t;
        part[g * E + col] = o[e][0];
        part[g * E + col + 1] = o[e][1];
        part[(g + 8) * E + col] = o[e][2];
        part[(g + 8) * E + col + 1] = o[e][3];
      }
      if (t == 0) {
        part[16 * E + g] = m0;
        part[16 * E + g + 8] = m1;
        part[16 * E + 16 + g] = l0;
        part[16 * E + 16 + g + 8] = l1;
      }
    }
    __syncthreads();
    if (split > 0) return;
    float w0[KS], w1[KS];
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int s2 = 1; s2 < KS; ++s2) {
      const float* pp = part + s2 * 16 * (E + 2);
      mx0 = fmaxf(mx0, pp[16 * E + g]);
      mx1 = fmaxf(mx1, pp[16 * E + g + 8]);
    }
    const float base0 = mx0 == -INFINITY ? 0.0f : mx0, base1 = mx1 == -INFINITY ? 0.0f : mx1;
    w0[0] = exp2f(m0 - base0);
    w1[0] = exp2f(m1 - base1);
    l0 *= w0[0];
    l1 *= w1[0];
#pragma unroll
    for (int s2 = 1; s2 < KS; ++s2) {
      const float* pp = part + s2 * 16 * (E + 2);
      w0[s2] = exp2f(pp[16 * E + g] - base0);
      w1[s2] = exp2f(pp[16 * E + g + 8] - base1);
      l0 += pp[16 * E + 16 + g] * w0[s2];
      l1 += pp[16 * E + 16 + g + 8] * w1[s2];
    }
#pragma unroll
    for (int e = 0; e < E / 8; ++e) {
      const int col = e * 8 + 2 * t;
      o[e][0] *= w0[0];
      o[e][1] *= w0[0];
      o[e][2] *= w1[0];
      o[e][3] *= w1[0];
#pragma unroll
      for (int s2 = 1; s2 < KS; ++s2) {
        const float* pp = part + s2 * 16 * (E + 2);
        o[e][0] += pp[g * E + col] * w0[s2];
        o[e][1] += pp[g * E + col + 1] * w0[s2];
        o[e][2] += pp[(g + 8) * E + col] * w1[s2];
        o[e][3] += pp[(g + 8) * E + col + 1] * w1[s2];
      }
    }
  }
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  T* ob = out + b * D::at(12, kd...) + h * D::at(13, kd...);
  const long long os = D::at(14, kd...);
#pragma unroll
  for (int e = 0; e < E / 8; ++e) {
    const int col = e * 8 + 2 * t;
    if (r0 < L) *reinterpret_cast<unsigned*>(ob + r0 * os + col) = kiln_pack2(o[e][0] * inv0, o[e][1] * inv0, T());
    if (r1 < L) *reinterpret_cast<unsigned*>(ob + r1 * os + col) = kiln_pack2(o[e][2] * inv1, o[e][3] * inv1, T());
  }
}

// Params: out, q, k, v.
template <typename T, bool Causal, int E, int RW, int KS, class D, class... P>
__global__ void __launch_bounds__(128) flash_attention(T* __restrict__ out, const T* __restrict__ q,
                                                       const T* __restrict__ k, const T* __restrict__ v, P... kd) {
  kiln_enter_after_prior_grid();
  flash_attention_body<T, bool, false, Causal, E, RW, KS, D>(out, q, k, v, nullptr, kd...);
}

// Params: out, q, k, v, mask.
template <typename T, typename M, bool Causal, int E, int RW, int KS, class D, class... P>
__global__ void __launch_bounds__(128)
    flash_attention_masked(T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ k,
                           const T* __restrict__ v, const M* __restrict__ mask, P... kd) {
  kiln_enter_after_prior_grid();
  flash_attention_body<T, M, true, Causal, E, RW, KS, D>(out, q, k, v, mask, kd...);
}

// ---- few query rows over many keys (a decode step), FlashDecoding-style

// The keys split into chunks of 64, a block per (chunk, key head, batch): the
// block takes the R = G * L query rows that read its key head (row r = g * L
// + l: query head hk * G + g, query row l; at most RM) and writes each row's
// partial softmax state over its chunk, part[((b * Hk + hk) * chunks + c) * R
// + r] = {max, sum, o[0..Ev)} (float32, the maximum in the log2 domain, o not
// yet divided by the sum); decode_attention_merge combines the chunks. A chunk
// the mask (or causality) hides from every row writes max -inf and reads no
// keys or values, so a static cache costs the positions written so far.
// Sizes: 0 L, 1 S, 2 G, 3 R, 4 chunks, 5..7 q's strides (batch, head, row),
// 8..10 k's, 11..13 v's, 14 the scale's float32 bits, 15..18 the mask's.
template <typename T, typename M, bool Masked, bool Causal, int E, int Ev, int RM, class D, class... P>
__device__ __forceinline__ void decode_attention_body(float* __restrict__ part, const T* __restrict__ q,
                                                      const T* __restrict__ k, const T* __restrict__ v,
                                                      const M* __restrict__ mask, const P&... kd) {
  constexpr int kKeys = 64, kThreads = 128, kVec = 16 / sizeof(T);
  const long long L = D::at(0, kd...), S = D::at(1, kd...), G = D::at(2, kd...);
  const int R = static_cast<int>(D::at(3, kd...));
  const long long chunks = D::at(4, kd...);
  const float scale = __int_as_float(static_cast<int>(D::at(14, kd...))) * 1.44269504088896341f;
  __shared__ __align__(16) T ks[kKeys][E + kVec];
  __shared__ __align__(16) T vs[kKeys][Ev];
  __shared__ float qs[RM][E];
  __shared__ float sc[RM][kKeys];
  const long long c = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const long long j0 = c * kKeys;
  float* pb = part + ((b * gridDim.y + hk) * chunks + c) * R * (Ev + 2);
  // Which scores the mask and causality keep (0 or the mask's addend), -inf for the rest.
  bool any = false;
  for (int i = threadIdx.x; i < R * kKeys; i += kThreads) {
    const int r = i / kKeys, jt = i % kKeys;
    const long long j = j0 + jt, l = r % L, h = hk * G + r / L;
    float add = j < S ? 0.0f : -INFINITY;
    if constexpr (Causal) {
      if (j > l) add = -INFINITY;
    }
    if constexpr (Masked) {
      if (add == 0.0f) {
        const M mv = mask[b * D::at(15, kd...) + h * D::at(16, kd...) + l * D::at(17, kd...) + j * D::at(18, kd...)];
        if constexpr (same_type<M, bool>::value) {
          if (!mv) add = -INFINITY;
        } else {
          add = kiln_ld(mv);
        }
      }
    }
    sc[r][jt] = add;
    any = any || add != -INFINITY;
  }
  if (!__syncthreads_or(any)) {
    if (threadIdx.x < R) {
      pb[threadIdx.x * (Ev + 2)] = -INFINITY;
      pb[threadIdx.x * (Ev + 2) + 1] = 0.0f;
    }
    return;
  }
  for (int i = threadIdx.x; i < R * E; i += kThreads) {
    const int r = i / E, e = i % E;
    const long long l = r % L, h = hk * G + r / L;
    qs[r][e] = kiln_ld(q[b * D::at(5, kd...) + h * D::at(6, kd...) + l * D::at(7, kd...) + e]) * scale;
  }
  const T* kb = k + b * D::at(8, kd...) + hk * D::at(9, kd...);
  const T* vb = v + b * D::at(11, kd...) + hk * D::at(12, kd...);
  const long long ksr = D::at(10, kd...), vsr = D::at(13, kd...);
  const bool wide = ((reinterpret_cast<unsigned long long>(kb) | reinterpret_cast<unsigned long long>(vb)) & 15) == 0 &&
                    ksr % kVec == 0 && vsr % kVec == 0 && E % kVec == 0 && Ev % kVec == 0;
  if (wide) {
    for (int i = threadIdx.x; i < kKeys * (E / kVec); i += kThreads) {
      const int r = i / (E / kVec), e = (i % (E / kVec)) * kVec;
      const long long j = j0 + r;
      *reinterpret_cast<uint4*>(&ks[r][e]) =
          j < S ? *reinterpret_cast<const uint4*>(kb + j * ksr + e) : make_uint4(0u, 0u, 0u, 0u);
    }
    for (int i = threadIdx.x; i < kKeys * (Ev / kVec); i += kThreads) {
      const int r = i / (Ev / kVec), e = (i % (Ev / kVec)) * kVec;
      const long long j = j0 + r;
      *reinterpret_cast<uint4*>(&vs[r][e]) =
          j < S ? *reinterpret_cast<const uint4*>(vb + j * vsr + e) : make_uint4(0u, 0u, 0u, 0u);
    }
  } else {
    for (int i = threadIdx.x; i < kKeys * E; i += kThreads) {
      const int r = i / E, e = i % E;
      const long long j = j0 + r;
      ks[r][e] = j < S ? kb[j * ksr + e] : kiln_st<T>(0.0f);
    }
    for (int i = threadIdx.x; i < kKeys * Ev; i += kThreads) {
      const int r = i / Ev, e = i % Ev;
      const long long j = j0 + r;
      vs[r][e] = j < S ? vb[j * vsr + e] : kiln_st<T>(0.0f);
    }
  }
  __syncthreads();
  // Scores in the log2 domain.
  for (int i = threadIdx.x; i < R * kKeys; i += kThreads) {
    const int r = i / kKeys, jt = i % kKeys;
    const float add = sc[r][jt];
    if (add == -INFINITY) continue;
    float d = 0.0f;
#pragma unroll 8
    for (int e = 0; e < E; ++e) d = fmaf(qs[r][e], kiln_ld(ks[jt][e]), d);
    sc[r][jt] = d + add * 1.44269504088896341f;
  }
  __syncthreads();
  // Each warp takes rows warp, warp + 4, ...: the chunk's maximum, weights and sum.
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int r = warp; r < R; r += kThreads / 32) {
    const float x0 = sc[r][lane], x1 = sc[r][lane + 32];
    const float mx = kiln_warp_max(fmaxf(x0, x1));
    const float base = mx == -INFINITY ? 0.0f : mx;
    const float p0 = exp2f(x0 - base), p1 = exp2f(x1 - base);
    sc[r][lane] = p0;
    sc[r][lane + 32] = p1;
    const float sum = kiln_warp_sum(p0 + p1);
    if (lane == 0) {
      pb[r * (Ev + 2)] = mx;
      pb[r * (Ev + 2) + 1] = sum;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < R * Ev; i += kThreads) {
    const int r = i / Ev, e = i % Ev;
    float acc = 0.0f;
#pragma unroll 8
    for (int j = 0; j < kKeys; ++j) acc = fmaf(sc[r][j], kiln_ld(vs[j][e]), acc);
    pb[r * (Ev + 2) + 2 + e] = acc;
  }
}

// Params: part, q, k, v.
template <typename T, bool Causal, int E, int Ev, int RM, class D, class... P>
__global__ void __launch_bounds__(128) decode_attention(float* __restrict__ part, const T* __restrict__ q,
                                                        const T* __restrict__ k, const T* __restrict__ v, P... kd) {
  kiln_enter_after_prior_grid();
  decode_attention_body<T, bool, false, Causal, E, Ev, RM, D>(part, q, k, v, nullptr, kd...);
}

// Params: part, q, k, v, mask.
template <typename T, typename M, bool Causal, int E, int Ev, int RM, class D, class... P>
__global__ void __launch_bounds__(128)
    decode_attention_masked(float* __restrict__ part, const T* __restrict__ q, const T* __restrict__ k,
                            const T* __restrict__ v, const M* __restrict__ mask, P... kd) {
  kiln_enter_after_prior_grid();
  decode_attention_body<T, M, true, Causal, E, Ev, RM, D>(part, q, k, v, mask, kd...);
}

// A warp per query row (b, hk, r), 4 rows a block: the chunks' partial states
// rescaled to the largest maximum and summed; out[b, hk * G + r / L, r % L, :]
// through its strides (a row no key reaches gives zeros, as PyTorch's safe
// softmax). Sizes: 0 rows (B * Hk * R), 1 Hk, 2 R, 3 L, 4 G, 5 chunks,
// 6..9 out's strides.
template <typename T, int Ev, class D, class... P>
__global__ void __launch_bounds__(128) decode_attention_merge(T* __restrict__ out, const float* __restrict__ part,
                                                              P... kd) {
  kiln_enter_after_prior_grid();
  constexpr int EVP = (Ev + 31) / 32;
  const long long rows = D::at(0, kd...), Hk = D::at(1, kd...), R = D::at(2, kd...), L = D::at(3, kd...);
  const long long G = D::at(4, kd...), chunks = D::at(5, kd...);
  const long long row = static_cast<long long>(blockIdx.x) * 4 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const long long r = row % R, bhk = row / R, hk = bhk % Hk, b = bhk / Hk;
  const float* p0 = part + bhk * chunks * R * (Ev + 2) + r * (Ev + 2);
  const long long step = R * (Ev + 2);
  float mx = -INFINITY;
  for (long long c = lane; c < chunks; c += 32) mx = fmaxf(mx, p0[c * step]);
  mx = kiln_warp_max(mx);
  float sum = 0.0f, acc[EVP];
#pragma unroll
  for (int j = 0; j < EVP; ++j) acc[j] = 0.0f;
  if (mx != -INFINITY) {
    for (long long c = 0; c < chunks; ++c) {
      const float* pc = p0 + c * step;
      const float m = pc[0];
      if (m == -INFINITY) continue;
      const float w = exp2f(m - mx);
      sum += w * pc[1];
#pragma unroll
      for (int j = 0; j < EVP; ++j) {
        const int e = lane + 32 * j;
        if (e < Ev) acc[j] = fmaf(w, pc[2 + e], acc[j]);
      }
    }
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  T* o = out + b * D::at(6, kd...) + (hk * G + r / L) * D::at(7, kd...) + (r % L) * D::at(8, kd...);
#pragma unroll
  for (int j = 0; j < EVP; ++j) {
    const int e = lane + 32 * j;
    if (e < Ev) o[e * D::at(9, kd...)] = kiln_st<T>(acc[j] * inv);
  }
}

}  // namespace kiln
