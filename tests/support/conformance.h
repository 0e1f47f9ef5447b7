// The per-op conformance suite every engine backend runs: small networks, one
// op family each, built and run by the backend and compared with the
// reference interpreter (the CPU kernels run node by node, unfused). A
// backend skips a case only by answering kUnsupported for it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "engine/backend.h"
#include "runtime/interpreter.h"
#include "support/network_text.h"

namespace kiln::testing {

struct ConformanceCase {
  std::string name;
  std::string ir;                // every graph input is an engine input
  std::vector<int64_t> modulus;  // per input: 0 for uniform floats in [-1, 1), else integers in [0, modulus)
  double atol = 1e-5, rtol = 1e-4;
  size_t engine_inputs = SIZE_MAX;  // graph inputs from this one on are weights (constants bound at load)
  // The range of the symbol s0 the case's sizes use (max 0: every size is
  // static). Fixed-shape runs take s0 at opt; range runs build once for the
  // whole range and run at min, opt, max and an odd size between.
  ir::SymbolRange s0{0, 0, 0};
};

// `c` with one dynamic size s0 in [min, max], tuned for opt.
inline ConformanceCase ranged(ConformanceCase c, int64_t min, int64_t opt, int64_t max) {
  c.s0 = {min, max, opt};
  return c;
}

// Test names and failure messages show a case by its name.
inline void PrintTo(const ConformanceCase& c, std::ostream* os) { *os << c.name; }

inline std::vector<ConformanceCase> conformance_cases() {
  const double half = 2e-2;  // float16 results rounded once more than the reference's
  return {
      ranged({"unary_chain",
              R"(graph(%x: float32[s0, 33]) {
  %a: float32[s0, 33] = aten.exp.default(self=%x)
  %b: float32[s0, 33] = aten.log.default(self=%a)
  %c: float32[s0, 33] = aten.tanh.default(self=%b)
  %d: float32[s0, 33] = aten.sigmoid.default(self=%c)
  %e: float32[s0, 33] = aten.gelu.default(self=%d)
  %f: float32[s0, 33] = aten.gelu.default(self=%x, approximate="tanh")
  %g: float32[s0, 33] = aten.silu.default(self=%f)
  %h: float32[s0, 33] = aten.hardswish.default(self=%g)
  %i: float32[s0, 33] = aten.add.Tensor(self=%e, other=%h)
  %j: float32[s0, 33] = aten.clamp.default(self=%i, min=-0.5, max=0.75)
  %k: float32[s0, 33] = aten.erf.default(self=%j)
  return (%k)
}
)",
              {0}},
             1, 4, 40),
      ranged({"rounding_and_extrema",  // x: integers 0..63, so x / 4 - 8 lies on quarters, exact in every precision;
                                       // log1p of y / 2: y near -1 rounds to -1 in 16 bits
              R"(graph(%x: float32[s0, 33], %y: float32[s0, 33]) {
  %q: float32[s0, 33] = aten.mul.Tensor(self=%x, other=0.25)
  %s: float32[s0, 33] = aten.sub.Tensor(self=%q, other=8)
  %a: float32[s0, 33] = aten.floor.default(self=%s)
  %b: float32[s0, 33] = aten.ceil.default(self=%s)
  %c: float32[s0, 33] = aten.trunc.default(self=%s)
  %d: float32[s0, 33] = aten.round.default(self=%s)
  %e: float32[s0, 33] = aten.sign.default(self=%s)
  %f: float32[s0, 33] = aten.minimum.default(self=%a, other=%y)
  %g: float32[s0, 33] = aten.maximum.default(self=%b, other=%y)
  %yh: float32[s0, 33] = aten.mul.Tensor(self=%y, other=0.5)
  %h: float32[s0, 33] = aten.log1p.default(self=%yh)
  %i: float32[s0, 33] = aten.expm1.default(self=%y)
  return (%a, %b, %c, %d, %e, %f, %g, %h, %i)
}
)",
              {64, 0}},
             1, 4, 40),
      ranged({"broadcast_binary",
              R"(graph(%x: float32[2, 3, s0], %y: float32[3, 1], %z: float32[s0]) {
  %a: float32[2, 3, s0] = aten.mul.Tensor(self=%x, other=%y)
  %b: float32[2, 3, s0] = aten.sub.Tensor(self=%a, other=%z, alpha=2)
  %c: float32[2, 3, s0] = aten.div.Tensor(self=%b, other=3)
  %d: float32[2, 3, s0] = aten.rsub.Scalar(self=%c, other=1)
  %e: float32[2, 3, s0] = aten.pow.Tensor_Scalar(self=%d, exponent=2)
  return (%e)
}
)",
              {0, 0, 0}},
             1, 8, 40),
      ranged({"single_relu",
              R"(graph(%x: float32[s0, 7]) {
  %r: float32[s0, 7] = aten.relu.default(self=%x)
  return (%r)
}
)",
              {0}},
             1, 5, 40),
      ranged({"mm_bias_relu",
              R"(graph(%x: float32[s0, 24], %w: float32[24, 40], %b: float32[40]) {
  %mm: float32[s0, 40] = aten.mm.default(self=%x, mat2=%w)
  %a: float32[s0, 40] = aten.add.Tensor(self=%mm, other=%b)
  %r: float32[s0, 40] = aten.relu.default(self=%a)
  return (%r)
}
)",
              {0, 0, 0},
              1e-5,
              1e-4,
              1},
             1, 16, 64),
      // A product of a view that starts 1 element in (4 bytes at fp32, 2 at
      // fp16/bf16): the library GEMM and the matrix-vector kernel need their
      // operands 16-byte aligned, so the view is copied (Builder::aligned).
      ranged({"mm_of_a_view_at_an_odd_offset",
              R"(graph(%x: float32[s0, 13], %w: float32[8, 16]) {
  %v: float32[s0, 8] = aten.slice.Tensor(self=%x, dim=1, start=1, end=9)
  %y: float32[s0, 16] = aten.mm.default(self=%v, mat2=%w)
  return (%y)
}
)",
              {0, 0},
              1e-5,
              1e-4,
              1},
             1, 16, 64),
      ranged({"linear",
              R"(graph(%x: float32[2, s0, 24], %w: float32[40, 24], %b: float32[40]) {
  %y: float32[2, s0, 40] = aten.linear.default(input=%x, weight=%w, bias=%b)
  return (%y)
}
)",
              {0, 0, 0},
              1e-5,
              1e-4,
              1},
             1, 5, 64),
      ranged({"addmm",
              R"(graph(%b: float32[40], %x: float32[s0, 24], %w: float32[24, 40]) {
  %y: float32[s0, 40] = aten.addmm.default(self=%b, mat1=%x, mat2=%w, alpha=0.5)
  return (%y)
}
)",
              {0, 0, 0}},
             1, 16, 64),
      ranged({"bmm_transposed",
              R"(graph(%x: float32[3, s0, 16], %y: float32[3, 12, 16]) {
  %t: float32[3, 16, 12] = aten.transpose.int(self=%y, dim0=1, dim1=2)
  %z: float32[3, s0, 12] = aten.bmm.default(self=%x, mat2=%t)
  return (%z)
}
)",
              {0, 0}},
             1, 8, 40),
      ranged({"matmul_broadcast_batch",
              R"(graph(%x: float32[2, 3, s0, 16], %y: float32[3, 16, 4]) {
  %z: float32[2, 3, s0, 4] = aten.matmul.default(self=%x, other=%y)
  return (%z)
}
)",
              {0, 0}},
             1, 8, 40),
      ranged({"conv3x3_bias_relu_residual",
              R"(graph(%x: float32[s0, 8, 10, 10], %w: float32[8, 8, 3, 3], %b: float32[8]) {
  %c: float32[s0, 8, 10, 10] = aten.conv2d.default(input=%x, weight=%w, bias=%b, padding=[1, 1])
  %a: float32[s0, 8, 10, 10] = aten.add.Tensor(self=%c, other=%x)
  %r: float32[s0, 8, 10, 10] = aten.relu.default(self=%a)
  return (%r)
}
)",
              {0, 0, 0},
              1e-5,
              1e-4,
              1},
             1, 2, 8),
      ranged({"conv_strided_grouped",
              R"(graph(%x: float32[s0, 8, 11, 9], %w: float32[12, 2, 3, 3]) {
  %c: float32[s0, 12, 5, 4] = aten.conv2d.default(input=%x, weight=%w, stride=[2, 2], groups=4)
  return (%c)
}
)",
              {0, 0}},
             1, 1, 8),
      ranged({"conv_depthwise",
              R"(graph(%x: float32[2, 16, s0, s0], %w: float32[16, 1, 3, 3], %b: float32[16]) {
  %c: float32[2, 16, s0, s0] = aten.conv2d.default(input=%x, weight=%w, bias=%b, padding=[1, 1], groups=16)
  return (%c)
}
)",
              {0, 0, 0},
              1e-5,
              1e-4,
              1},
             3, 8, 16),
      ranged(
          {"conv_grouped_constants",  // ShuffleNet/ResNeXt-style: grouped filter and 1-d bias bound as weights at load
           R"(graph(%x: float32[s0, 16, 9, 9], %w: float32[24, 4, 3, 3], %b: float32[24]) {
  %c: float32[s0, 24, 9, 9] = aten.conv2d.default(input=%x, weight=%w, bias=%b, padding=[1, 1], groups=4)
  %r: float32[s0, 24, 9, 9] = aten.relu.default(self=%c)
  return (%r)
}
)",
           {0, 0, 0},
           1e-5,
           1e-4,
           1},
          1, 2, 8),
      ranged({"conv_depthwise7x7_constants",  // ConvNeXt-style: a depthwise 7x7 filter and its bias as weights
              R"(graph(%x: float32[1, 32, 14, s0], %w: float32[32, 1, 7, 7], %b: float32[32]) {
  %c: float32[1, 32, 14, s0] = aten.conv2d.default(input=%x, weight=%w, bias=%b, padding=[3, 3], groups=32)
  return (%c)
}
)",
              {0, 0, 0},
              1e-5,
              1e-4,
              1},
             7, 14, 20),
      ranged({"conv1d",  // 1-D convolutions: dense strided with a bias, depthwise dilated, filters as inputs
              R"(graph(%x: float32[s0, 4, 19], %w: float32[6, 4, 3], %b: float32[6], %d: float32[4, 1, 5]) {
  %a: float32[s0, 6, 10] = aten.conv1d.default(input=%x, weight=%w, bias=%b, stride=[2], padding=[1])
  %r: float32[s0, 6, 10] = aten.relu.default(self=%a)
  %c: float32[s0, 4, 11] = aten.conv1d.default(input=%x, weight=%d, dilation=[2], groups=4)
  return (%r, %c)
}
)",
              {0, 0, 0, 0}},
             1, 2, 6),
      ranged({"conv1d_constants",  // a 1-D convolution (wav2vec2's feature encoder) with its filter bound at load
              R"(graph(%x: float32[s0, 3, 40], %w: float32[8, 3, 10], %b: float32[8]) {
  %c: float32[s0, 8, 7] = aten.conv1d.default(input=%x, weight=%w, bias=%b, stride=[5])
  return (%c)
}
)",
              {0, 0, 0},
              1e-5,
              1e-4,
              1},
             1, 2, 4),
      ranged({"conv1x1",
              R"(graph(%x: float32[1, 32, s0, s0], %w: float32[64, 32, 1, 1], %b: float32[64]) {
  %c: float32[1, 64, s0, s0] = aten.conv2d.default(input=%x, weight=%w, bias=%b)
  return (%c)
}
)",
              {0, 0, 0},
              1e-5,
              1e-4,
              1},
             1, 7, 12),
      ranged({"pools",
              R"(graph(%x: float32[s0, 4, 9, 9]) {
  %m: float32[s0, 4, 5, 5] = aten.max_pool2d.default(self=%x, kernel_size=[3, 3], stride=[2, 2], padding=[1, 1])
  %a: float32[s0, 4, 3, 3] = aten.avg_pool2d.default(self=%m, kernel_size=[2, 2], stride=[2, 2], ceil_mode=true, count_include_pad=false)
  %g: float32[s0, 4, 2, 2] = aten.adaptive_avg_pool2d.default(self=%m, output_size=[2, 2])
  return (%a, %g)
}
)",
              {0}},
             1, 2, 8),
      ranged({"norms",
              R"(graph(%x: float32[3, s0, 64], %w: float32[64], %b: float32[64]) {
  %l: float32[3, s0, 64] = aten.layer_norm.default(input=%x, normalized_shape=[64], weight=%w, bias=%b, eps=1e-05)
  %r: float32[3, s0, 64] = aten.rms_norm.default(input=%l, normalized_shape=[64], weight=%w, eps=1e-06)
  return (%r)
}
)",
              {0, 0, 0},
              1e-5,
              1e-4,
              1},
             1, 5, 40),
      ranged({"softmaxes",
              R"(graph(%x: float32[6, s0]) {
  %s: float32[6, s0] = aten.softmax.int(self=%x, dim=-1)
  %l: float32[6, s0] = aten._log_softmax.default(self=%x, dim=1, half_to_float=false)
  %h: bfloat16[6, s0] = aten.to.dtype(self=%x, dtype=dtype.bfloat16)
  %w: float32[6, s0] = aten.softmax.int(self=%h, dim=0, dtype=dtype.float32)
  %v: float64[6, s0] = aten.log_softmax.int(self=%x, dim=-1, dtype=dtype.float64)
  return (%s, %l, %w, %v)
}
)",
              {0}},
             1, 100, 300),
      ranged({"reductions",
              R"(graph(%x: float32[4, s0, 10]) {
  %s: float32[4, 10] = aten.sum.dim_IntList(self=%x, dim=[1])
  %m: float32[4, 1, 1] = aten.mean.dim(self=%x, dim=[1, 2], keepdim=true)
  %a: float32[s0] = aten.amax.default(self=%x, dim=[0, 2])
  %b: float32[4, s0] = aten.amin.default(self=%x, dim=[-1])
  return (%s, %m, %a, %b)
}
)",
              {0}},
             1, 6, 20),
      ranged({"embedding_gather",
              R"(graph(%t: float32[20, 16], %i: int64[s0, 5], %p: int64[1, 20]) {
  %e: float32[s0, 5, 16] = aten.embedding.default(weight=%t, indices=%i)
  %s: int64[1, 5] = aten.slice.Tensor(self=%p, dim=1, start=0, end=5)
  %g: int64[1, 5] = aten.gather.default(self=%p, dim=1, index=%s)
  %f: float32[1, 5, 16] = aten.embedding.default(weight=%t, indices=%g)
  %a: float32[s0, 5, 16] = aten.add.Tensor(self=%e, other=%f)
  return (%a)
}
)",
              {0, 20, 20}},
             1, 3, 8),
      ranged({"index_select_any_dim",  // gathers along inner dims (resampling's), int64 and int32 indices
              R"(graph(%x: float32[s0, 5, 7], %i: int64[4], %j: int32[6]) {
  %a: float32[s0, 4, 7] = aten.index_select.default(self=%x, dim=1, index=%i)
  %b: float32[s0, 5, 6] = aten.index_select.default(self=%x, dim=2, index=%j)
  %c: float32[s0, 4, 6] = aten.index_select.default(self=%a, dim=-1, index=%j)
  %d: float32[s0, 4, 6] = aten.mul.Tensor(self=%c, other=%c)
  return (%a, %b, %d)
}
)",
              {0, 5, 7}},
             1, 3, 9),
      ranged({"views_and_cat",
              R"(graph(%x: float32[2, 6, s0], %y: float32[2, 3, s0]) {
  %w: symint = aten.sym_size.int(self=%x, dim=2)
  %p: float32[s0, 6, 2] = aten.permute.default(self=%x, dims=[2, 1, 0])
  %s: float32[s0, 3, 2] = aten.slice.Tensor(self=%p, dim=1, start=1, end=6, step=2)
  %t: float32[2, 3, s0] = aten.permute.default(self=%s, dims=[2, 1, 0])
  %c: float32[2, 6, s0] = aten.cat.default(tensors=[%t, %y], dim=1)
  %v: float32[12, s0] = aten.view.default(self=%c, size=[12, %w])
  %n: float32[12, s0] = aten.neg.default(self=%v)
  return (%n)
}
)",
              {0, 0}},
             1, 4, 9),
      ranged({"constant_pad",  // Swin's pad of a channels-last grid to whole windows; a crop and a fill value
              R"(graph(%x: float32[s0, 10, 10, 16], %y: float32[s0, 7]) {
  %p: float32[s0, 12, 12, 16] = aten.constant_pad_nd.default(self=%x, pad=[0, 0, 0, 2, 0, 2])
  %r: float32[s0, 12, 12, 16] = aten.relu.default(self=%p)
  %q: float32[s0, 6] = aten.constant_pad_nd.default(self=%y, pad=[1, -2], value=-1.5)
  %n: float32[s0, 6] = aten.neg.default(self=%q)
  return (%r, %n)
}
)",
              {0, 0}},
             1, 2, 5),
      ranged({"as_strided_reshape",  // ATen's adaptive_avg_pool2d to 1x1 in the aten dialect: a mean, then as_strided
              R"(graph(%x: float32[s0, 8, 5, 5], %w: float32[8, 3]) {
  %n: symint = aten.sym_size.int(self=%x, dim=0)
  %m: float32[s0, 8, 1, 1] = aten.mean.dim(self=%x, dim=[-1, -2], keepdim=true)
  %a: float32[s0, 8, 1, 1] = aten.as_strided.default(self=%m, size=[%n, 8, 1, 1], stride=[8, 1, 8, 8])
  %v: float32[s0, 8] = aten.view.default(self=%a, size=[%n, 8])
  %y: float32[s0, 3] = aten.mm.default(self=%v, mat2=%w)
  return (%y)
}
)",
              {0, 0}},
             1, 2, 5),
      ranged({"attention_bool_mask",
              R"(graph(%q: float32[2, 4, 9, 16], %k: float32[2, 4, s0, 16], %v: float32[2, 4, s0, 8], %m: bool[9, s0]) {
  %o: float32[2, 4, 9, 8] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, attn_mask=%m)
  return (%o)
}
)",
              {0, 0, 0, 2}},
             1, 11, 40),
      ranged({"attention_causal_scaled",
              R"(graph(%q: float32[1, 2, s0, 32], %k: float32[1, 2, s0, 32], %v: float32[1, 2, s0, 32]) {
  %o: float32[1, 2, s0, 32] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, is_causal=true, scale=0.3)
  return (%o)
}
)",
              {0, 0, 0}},
             1, 12, 70),
      ranged(
          {"attention_grouped_query_decode",  // one new token, 4 query heads per key head, an additive mask
           R"(graph(%q: float32[1, 8, 1, 16], %k: float32[1, 2, s0, 16], %v: float32[1, 2, s0, 16], %m: float32[1, 1, 1, s0]) {
  %o: float32[1, 8, 1, 16] = kiln.attention(query=%q, key=%k, value=%v, attn_mask=%m, enable_gqa=true)
  return (%o)
}
)",
           {0, 0, 0, 0}},
          1, 24, 64),
      ranged({"attention_grouped_query_causal",  // several query rows per head: the group's rows in one product
              R"(graph(%q: float32[2, 6, s0, 8], %k: float32[2, 3, s0, 8], %v: float32[2, 3, s0, 8]) {
  %o: float32[2, 6, s0, 8] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, is_causal=true, enable_gqa=true)
  return (%o)
}
)",
              {0, 0, 0}},
             1, 5, 20),
      ranged(
          {"attention_float16_strided_float_mask",  // q read through a transpose; 70 rows: a partial tile of 64
           R"(graph(%x: float16[2, s0, 4, 32], %k: float16[2, 4, 90, 32], %v: float16[2, 4, 90, 32], %m: float16[2, 1, 1, 90]) {
  %n: symint = aten.sym_size.int(self=%x, dim=1)
  %q: float16[2, 4, s0, 32] = aten.transpose.int(self=%x, dim0=1, dim1=2)
  %o: float16[2, 4, s0, 32] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, attn_mask=%m)
  %t: float16[2, s0, 4, 32] = aten.transpose.int(self=%o, dim0=1, dim1=2)
  %r: float16[2, s0, 128] = aten.reshape.default(self=%t, shape=[2, %n, 128])
  return (%r)
}
)",
           {0, 0, 0, 0},
           half,
           half},
          1, 70, 140),
      ranged(
          {"attention_bfloat16_causal_grouped_bool_mask",  // three key tiles, a bool mask, 2 query heads per key head
           R"(graph(%q: bfloat16[1, 4, 130, 64], %k: bfloat16[1, 2, s0, 64], %v: bfloat16[1, 2, s0, 64], %m: bool[130, s0]) {
  %o: bfloat16[1, 4, 130, 64] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, attn_mask=%m, enable_gqa=true, scale=0.2)
  return (%o)
}
)",
           {0, 0, 0, 2},
           half,
           half},
          16, 150, 200),
      ranged(
          {"attention_bfloat16_cache_prefix_mask",  // a prompt's rows over a static cache (positions below 100 of
                                                    // 256): key tiles past every row's position are not read
           R"(graph(%q: bfloat16[1, 8, s0, 64], %k: bfloat16[1, 2, 256, 64], %v: bfloat16[1, 2, 256, 64], %p: int64[s0, 1]) {
  %j: int64[256] = aten.arange.default(end=256)
  %m: bool[s0, 256] = aten.le.Tensor(self=%j, other=%p)
  %o: bfloat16[1, 8, s0, 64] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, attn_mask=%m, enable_gqa=true)
  return (%o)
}
)",
           {0, 0, 0, 100},
           half,
           half},
          16, 70, 130),
      ranged(
          {"attention_bfloat16_decode_cache_prefix_mask",  // 1-4 new tokens over a static cache of 300 (positions
                                                           // below 150): chunks of keys no row reaches are not read
           R"(graph(%q: bfloat16[1, 8, s0, 64], %k: bfloat16[1, 2, 300, 64], %v: bfloat16[1, 2, 300, 64], %p: int64[s0, 1]) {
  %j: int64[300] = aten.arange.default(end=300)
  %m: bool[s0, 300] = aten.le.Tensor(self=%j, other=%p)
  %o: bfloat16[1, 8, s0, 64] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, attn_mask=%m, enable_gqa=true)
  return (%o)
}
)",
           {0, 0, 0, 150},
           half,
           half},
          1, 2, 4),
      ranged({"attention_float16_causal_head128",
              R"(graph(%q: float16[2, 2, s0, 128], %k: float16[2, 2, s0, 128], %v: float16[2, 2, s0, 128]) {
  %o: float16[2, 2, s0, 128] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, is_causal=true)
  return (%o)
}
)",
              {0, 0, 0},
              half,
              half},
             1, 48, 100),
      ranged(
          {"attention_float16_key_padding_mask_many_heads",  // 32 or 64 query rows per block across the range
           R"(graph(%q: float16[4, 12, s0, 64], %k: float16[4, 12, s0, 64], %v: float16[4, 12, s0, 64], %m: bool[4, 1, 1, s0]) {
  %o: float16[4, 12, s0, 64] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, attn_mask=%m)
  return (%o)
}
)",
           {0, 0, 0, 2},
           half,
           half},
          200, 300, 400),
      ranged(
          {"residual_norms_float16",  // post-norm (the sum used once) and pre-norm (the sum kept): the norm adds
           R"(graph(%x: float16[s0, 768], %y: float16[s0, 768], %z: float16[s0, 40], %u: float16[s0, 40], %w: float16[768], %b: float16[768]) {
  %a: float16[s0, 768] = aten.add.Tensor(self=%x, other=%y)
  %n: float16[s0, 768] = aten.layer_norm.default(input=%a, normalized_shape=[768], weight=%w, bias=%b, eps=1e-12)
  %s: float16[s0, 40] = aten.add.Tensor(self=%z, other=%u)
  %m: float16[s0, 40] = aten.layer_norm.default(input=%s, normalized_shape=[40])
  %g: float16[s0, 40] = aten.gelu.default(self=%m)
  %r: float16[s0, 40] = aten.add.Tensor(self=%g, other=%s)
  return (%n, %r)
}
)",
           {0, 0, 0, 0, 0, 0},
           half,
           half,
           4},
          1, 6, 16),
      ranged({"residual_norms_float32_block_rows",  // rows of 34: no whole 16-byte vectors, a block per row
              R"(graph(%x: float32[s0, 34], %y: float32[s0, 34]) {
  %a: float32[s0, 34] = aten.add.Tensor(self=%x, other=%y)
  %n: float32[s0, 34] = aten.rms_norm.default(input=%a, normalized_shape=[34], eps=1e-06)
  %m: float32[s0, 34] = aten.mul.Tensor(self=%n, other=%a)
  return (%m)
}
)",
              {0, 0}},
             1, 5, 16),
      {"elementwise_float16_vectors_and_misaligned",  // 16-byte vectors; the same program off by one element
       R"(graph(%x: float16[1032], %y: float16[1032]) {
  %g: float16[1032] = aten.gelu.default(self=%x)
  %a: float16[1032] = aten.mul.Tensor(self=%g, other=%y)
  %xs: float16[1024] = aten.slice.Tensor(self=%x, dim=0, start=1, end=1025)
  %ys: float16[1024] = aten.slice.Tensor(self=%y, dim=0, start=1, end=1025)
  %h: float16[1024] = aten.gelu.default(self=%xs)
  %b: float16[1024] = aten.mul.Tensor(self=%h, other=%ys)
  return (%a, %b)
}
)",
       {0, 0},
       half,
       half},
      ranged({"conv_float16_three_channels",  // an image stem: the input and filter padded to 8 channels on CUDA
              R"(graph(%x: float16[s0, 3, 20, 20], %w: float16[16, 3, 7, 7], %b: float16[16]) {
  %y: float16[s0, 16, 10, 10] = aten.conv2d.default(input=%x, weight=%w, bias=%b, stride=[2, 2], padding=[3, 3])
  %r: float16[s0, 16, 10, 10] = aten.relu.default(self=%y)
  return (%r)
}
)",
              {0, 0, 0},
              half,
              half,
              1},
             1, 2, 8),
      ranged({"float16_mlp",
              R"(graph(%x: float16[s0, 32], %w: float16[32, 64], %b: float16[64]) {
  %mm: float16[s0, 64] = aten.mm.default(self=%x, mat2=%w)
  %a: float16[s0, 64] = aten.add.Tensor(self=%mm, other=%b)
  %g: float16[s0, 64] = aten.gelu.default(self=%a)
  %s: float16[s0, 64] = aten.softmax.int(self=%g, dim=-1)
  return (%s)
}
)",
              {0, 0, 0},
              half,
              half,
              1},
             1, 8, 64),
      ranged({"rms_norm_between_casts",  // transformers' LlamaRMSNorm in bfloat16 (one row kernel on CUDA)
              R"(graph(%x: bfloat16[3, s0, 320], %w: bfloat16[320]) {
  %up: float32[3, s0, 320] = aten.to.dtype(self=%x, dtype=dtype.float32)
  %n: float32[3, s0, 320] = aten.rms_norm.default(input=%up, normalized_shape=[320], eps=1e-05)
  %down: bfloat16[3, s0, 320] = aten.to.dtype(self=%n, dtype=dtype.bfloat16)
  %y: bfloat16[3, s0, 320] = aten.mul.Tensor(self=%w, other=%down)
  return (%y)
}
)",
              {0, 0},
              1e-2,
              1e-2,
              1},
             1, 2, 16),
      ranged({"rotary_embedding",  // transformers' apply_rotary_pos_emb (one kiln.rotary layer on CUDA)
              R"(graph(%q: float32[2, s0, 4, 32], %cos: float32[2, s0, 32], %sin: float32[2, s0, 32]) {
  %qt: float32[2, 4, s0, 32] = aten.transpose.int(self=%q, dim0=1, dim1=2)
  %c: float32[2, 1, s0, 32] = aten.unsqueeze.default(self=%cos, dim=1)
  %s: float32[2, 1, s0, 32] = aten.unsqueeze.default(self=%sin, dim=1)
  %m1: float32[2, 4, s0, 32] = aten.mul.Tensor(self=%qt, other=%c)
  %x1: float32[2, 4, s0, 16] = aten.slice.Tensor(self=%qt, dim=3, start=0, end=16)
  %x2: float32[2, 4, s0, 16] = aten.slice.Tensor(self=%qt, dim=3, start=16, end=9223372036854775807)
  %n: float32[2, 4, s0, 16] = aten.neg.default(self=%x2)
  %cat: float32[2, 4, s0, 32] = aten.cat.default(tensors=[%n, %x1], dim=-1)
  %m2: float32[2, 4, s0, 32] = aten.mul.Tensor(self=%cat, other=%s)
  %o: float32[2, 4, s0, 32] = aten.add.Tensor(self=%m1, other=%m2)
  return (%o)
}
)",
              {0, 0, 0}},
             1, 3, 16),
      ranged({"rotary_embedding_bfloat16",
              R"(graph(%q: bfloat16[2, s0, 4, 32], %cos: bfloat16[2, s0, 32], %sin: bfloat16[2, s0, 32]) {
  %qt: bfloat16[2, 4, s0, 32] = aten.transpose.int(self=%q, dim0=1, dim1=2)
  %c: bfloat16[2, 1, s0, 32] = aten.unsqueeze.default(self=%cos, dim=1)
  %s: bfloat16[2, 1, s0, 32] = aten.unsqueeze.default(self=%sin, dim=1)
  %m1: bfloat16[2, 4, s0, 32] = aten.mul.Tensor(self=%qt, other=%c)
  %x1: bfloat16[2, 4, s0, 16] = aten.slice.Tensor(self=%qt, dim=3, start=0, end=16)
  %x2: bfloat16[2, 4, s0, 16] = aten.slice.Tensor(self=%qt, dim=3, start=16, end=9223372036854775807)
  %n: bfloat16[2, 4, s0, 16] = aten.neg.default(self=%x2)
  %cat: bfloat16[2, 4, s0, 32] = aten.cat.default(tensors=[%n, %x1], dim=-1)
  %m2: bfloat16[2, 4, s0, 32] = aten.mul.Tensor(self=%cat, other=%s)
  %o: bfloat16[2, 4, s0, 32] = aten.add.Tensor(self=%m1, other=%m2)
  return (%o)
}
)",
              {0, 0, 0},
              1e-2,
              1e-2},
             1, 3, 16),
      ranged(
          {"where_mask",  // an attention mask from positions (torch.where of two constants), then a select of tensors
           R"(graph(%a: int64[1, 5, 1], %b: int64[1, 1, s0], %x: float32[3, 5, s0], %zero: float32[], %low: float32[]) {
  %m: bool[1, 5, s0] = aten.le.Tensor(self=%a, other=%b)
  %w: float32[1, 5, s0] = aten.where.self(condition=%m, self=%zero, other=%low)
  %y: float32[3, 5, s0] = aten.where.self(condition=%m, self=%x, other=%w)
  return (%w, %y)
}
)",
           {4, 4, 0, 0, 0},
           1e-5,
           1e-4,
           3},
          1, 7, 20),
      ranged(
          {"attention_mask_index",  // BERT's mask: rows of a bool mask picked by index tensors, and-ed with a causal
                                    // one
           R"(graph(%mask: bool[2, 6], %pos: int64[1, 1, 1, 6], %q: int64[1, 1, 6, 1], %x: float32[s0, 6], %rows: int64[2, 1, 1, 1], %cols: int64[3]) {
  %m: bool[2, 1, 1, 6] = aten.index.Tensor(self=%mask, indices=[%rows, %pos])
  %c: bool[1, 1, 6, 6] = aten.le.Tensor(self=%pos, other=%q)
  %both: bool[2, 1, 6, 6] = aten.__and__.Tensor(self=%m, other=%c)
  %either: bool[2, 1, 6, 6] = aten.bitwise_or.Tensor(self=%m, other=%c)
  %picked: float32[s0, 3] = aten.index.Tensor(self=%x, indices=?[None, %cols])
  %back: int64[3] = aten.sub.Tensor(self=%cols, other=6)
  %wrapped: float32[s0, 3] = aten.index.Tensor(self=%x, indices=?[None, %back])
  return (%both, %either, %picked, %wrapped)
}
)",
           {2, 6, 6, 0, 2, 6},
           1e-5,
           1e-4,
           4},
          1, 4, 9),
      ranged({"float_compare_mask",  // masks from floating scores, against numbers and broadcast tensors (integers:
                                     // exact at every precision)
              R"(graph(%x: float32[s0, 8], %y: float32[1, 8]) {
  %a: bool[s0, 8] = aten.gt.Scalar(self=%x, other=2.5)
  %b: bool[s0, 8] = aten.le.Tensor(self=%x, other=%y)
  %c: bool[s0, 8] = aten.eq.Scalar(self=%x, other=3)
  %d: bool[s0, 8] = aten.ne.Tensor(self=%y, other=%x)
  %e: bool[s0, 8] = aten.lt.Tensor(self=%x, other=1.5)
  %w: float32[s0, 8] = aten.where.self(condition=%a, self=%x, other=%y)
  return (%a, %b, %c, %d, %e, %w)
}
)",
              {5, 5}},
             1, 3, 20),
      ranged({"integer_reductions",  // counts of a mask, sums to int64, max and min of int64 and bool, exact
              R"(graph(%x: float32[s0, 8], %i: int64[s0, 6]) {
  %m: bool[s0, 8] = aten.gt.Scalar(self=%x, other=2.5)
  %a: int64[] = aten.sum.default(self=%m)
  %b: int64[8] = aten.sum.dim_IntList(self=%m, dim=[0])
  %c: int64[s0] = aten.sum.dim_IntList(self=%i, dim=[1])
  %d: int64[6] = aten.amax.default(self=%i, dim=[0])
  %e: int64[s0, 1] = aten.amin.default(self=%i, dim=[1], keepdim=true)
  %f: bool[s0] = aten.amax.default(self=%m, dim=[1])
  return (%a, %b, %c, %d, %e, %f)
}
)",
              {5, 1000}},
             1, 3, 20),
      {"reductions_past_one_grid",  // more outputs than one launch's grid holds (65535 * 16 blocks of 8 warps):
                                    // the grid strides over the rest; x: integers 0..199, ties take the first
       R"(graph(%x: float32[8392577, 2], %i: int64[8392577, 2]) {
  %s: float32[8392577] = aten.sum.dim_IntList(self=%x, dim=[1])
  %a: int64[8392577] = aten.argmax.default(self=%x, dim=1)
  %c: int64[8392577] = aten.sum.dim_IntList(self=%i, dim=[1])
  return (%s, %a, %c)
}
)",
       {200, 1000}},
      ranged(
          {"index_put_general",  // writes through Nones, negative and broadcast indices (unique, from arange), rows at
                                 // negative positions; accumulation at random indices with repeats, float and int64
           R"(graph(%x: float32[s0, 6, 5], %v: float32[5], %w: float32[s0, 3, 2], %y: float32[6, 5], %k: int64[s0], %u: float32[s0, 5], %z: int64[6], %q: int64[s0], %t: float32[3, 5]) {
  %r: int64[3] = aten.arange.start_step(start=0, end=6, step=2)
  %n: int64[3] = aten.sub.Scalar(self=%r, other=6)
  %a: float32[s0, 6, 5] = aten.index_put.default(self=%x, indices=?[None, %n], values=%v)
  %i: int64[3, 1] = aten.view.default(self=%r, size=[3, 1])
  %j: int64[2] = aten.arange.default(end=2)
  %b: float32[s0, 6, 5] = aten.index_put.default(self=%a, indices=?[None, %i, %j], values=%w)
  %c: float32[6, 5] = aten.index_put.default(self=%y, indices=[%k], values=%u, accumulate=true)
  %d: int64[6] = aten.index_put.default(self=%z, indices=?[%k], values=%q, accumulate=true)
  %e: float32[6, 5] = aten.index_put.default(self=%y, indices=[%n], values=%t)
  return (%b, %c, %d, %e)
}
)",
           {0, 0, 0, 0, 6, 0, 100, 100, 0},
           1e-5},
          1, 4, 20),
      ranged(
          {"scatter_family",  // random indices with repeats for the reductions (float and int64; mean floors
                              // integers), a value written at repeats (truncated into int64), unique indices (arange)
                              // for src
           R"(graph(%x: float32[6, 5], %i: int64[s0, 3], %u: float32[s0, 4], %z: int64[6, 5], %q: int64[s0, 4], %k: int64[s0], %w: float32[s0, 5]) {
  %a: float32[6, 5] = aten.scatter_add.default(self=%x, dim=0, index=%i, src=%u)
  %b: float32[6, 5] = aten.scatter_reduce.two(self=%x, dim=0, index=%i, src=%u, reduce="amax", include_self=false)
  %c: float32[6, 5] = aten.scatter_reduce.two(self=%x, dim=0, index=%i, src=%u, reduce="mean")
  %d: float32[6, 5] = aten.scatter_reduce.two(self=%x, dim=0, index=%i, src=%u, reduce="prod")
  %e: float32[6, 5] = aten.scatter_reduce.two(self=%x, dim=-2, index=%i, src=%u, reduce="amin")
  %f: float32[6, 5] = aten.scatter_reduce.two(self=%x, dim=0, index=%i, src=%u, reduce="mean", include_self=false)
  %g: int64[6, 5] = aten.scatter_reduce.two(self=%z, dim=0, index=%i, src=%q, reduce="mean")
  %h: int64[6, 5] = aten.scatter_reduce.two(self=%z, dim=0, index=%i, src=%q, reduce="amax", include_self=false)
  %j: float32[6, 5] = aten.index_add.default(self=%x, dim=0, index=%k, source=%w, alpha=2)
  %l: float32[6, 5] = aten.index_reduce.default(self=%x, dim=0, index=%k, source=%w, reduce="amax")
  %m: float32[6, 5] = aten.scatter.value(self=%x, dim=0, index=%i, value=0.5)
  %p: int64[3] = aten.arange.default(end=3)
  %p2: int64[1, 3] = aten.view.default(self=%p, size=[1, 3])
  %n: float32[6, 5] = aten.scatter.src(self=%x, dim=1, index=%p2, src=%u)
  %o: int64[6, 5] = aten.scatter.value(self=%z, dim=0, index=%i, value=2.5)
  return (%a, %b, %c, %d, %e, %f, %g, %h, %j, %l, %m, %n, %o)
}
)",
           {0, 6, 0, 100, 100, 6, 0},
           1e-5},
          1, 4, 20),
      ranged({"var_and_var_mean",  // two passes per output; at s0 = 1 the first divides by 0 (NaN, as torch)
              R"(graph(%x: float32[4, s0, 10]) {
  %v: float32[4, 10] = aten.var.correction(self=%x, dim=[1])
  %w: float32[4, 1, 1] = aten.var.correction(self=%x, dim=[1, 2], correction=0, keepdim=true)
  %a: float32[s0], %m: float32[s0] = aten.var_mean.correction(self=%x, dim=[0, -1], correction=2)
  %u: float32[] = aten.var.correction(self=%x)
  return (%v, %w, %a, %m, %u)
}
)",
              {0}},
             1, 6, 20),
      ranged(
          {"pools_with_indices_and_3d",  // integers 0..199 as floats (exact at every precision, ties take the first);
                                         // log(x - 100): NaN below 100 (the last NaN of a window wins), -inf at 100
           R"(graph(%x: float32[s0, 3, 7, 9], %v: float32[s0, 2, 5, 6, 7], %u: float32[3, 6, 8]) {
  %a: float32[s0, 3, 4, 5], %ai: int64[s0, 3, 4, 5] = aten.max_pool2d_with_indices.default(self=%x, kernel_size=[3, 3], stride=[2, 2], padding=[1, 1])
  %b: float32[s0, 3, 3, 4], %bi: int64[s0, 3, 3, 4] = aten.adaptive_max_pool2d.default(self=%x, output_size=[3, 4])
  %c: float32[s0, 2, 4, 3, 4], %ci: int64[s0, 2, 4, 3, 4] = aten.max_pool3d_with_indices.default(self=%v, kernel_size=[2, 3, 3], stride=[1, 2, 2], padding=[0, 1, 1])
  %d: float32[s0, 2, 4, 4, 5] = aten.max_pool3d.default(self=%v, kernel_size=[2, 2, 2], stride=[1, 1, 1], dilation=[1, 2, 2])
  %e: float32[s0, 2, 3, 3, 4] = aten.avg_pool3d.default(self=%v, kernel_size=[3, 3, 3], stride=[2, 2, 2], padding=[1, 1, 1], count_include_pad=false)
  %f: float32[s0, 2, 3, 3, 4] = aten.avg_pool3d.default(self=%v, kernel_size=[2, 2, 2], stride=[2, 2, 2], ceil_mode=true, divisor_override=5)
  %g: float32[s0, 2, 2, 3, 4] = aten.adaptive_avg_pool3d.default(self=%v, output_size=[2, 3, 4])
  %h: float32[s0, 2, 3, 2, 5], %hi: int64[s0, 2, 3, 2, 5] = aten.adaptive_max_pool3d.default(self=%v, output_size=[3, 2, 5])
  %k: float32[3, 3, 4], %ki: int64[3, 3, 4] = aten.max_pool2d_with_indices.default(self=%u, kernel_size=[2, 2])
  %l: float32[s0, 2, 3, 3, 4] = aten.avg_pool3d.default(self=%v, kernel_size=[3, 3, 3], stride=[2, 2, 2], padding=[1, 1, 1])
  %m: float32[3, 2, 3] = aten.adaptive_avg_pool2d.default(self=%u, output_size=[2, 3])
  %q: float32[3, 3, 4] = aten.avg_pool2d.default(self=%u, kernel_size=[3, 3], stride=[2, 2], padding=[1, 1])
  %r: float32[3, 5, 7] = aten.max_pool2d.default(self=%u, kernel_size=[2, 2], stride=[1, 1])
  %xt: float32[s0, 3, 7, 9] = aten.sub.Tensor(self=%x, other=100.0)
  %xn: float32[s0, 3, 7, 9] = aten.log.default(self=%xt)
  %n: float32[s0, 3, 3, 4], %ni: int64[s0, 3, 3, 4] = aten.max_pool2d_with_indices.default(self=%xn, kernel_size=[3, 3], stride=[2, 2])
  %vt: float32[s0, 2, 5, 6, 7] = aten.sub.Tensor(self=%v, other=100.0)
  %vn: float32[s0, 2, 5, 6, 7] = aten.log.default(self=%vt)
  %s: float32[s0, 2, 3, 2, 5], %si: int64[s0, 2, 3, 2, 5] = aten.adaptive_max_pool3d.default(self=%vn, output_size=[3, 2, 5])
  return (%a, %ai, %b, %bi, %c, %ci, %d, %e, %f, %g, %h, %hi, %k, %ki, %l, %m, %q, %r, %n, %ni, %s, %si)
}
)",
           {200, 200, 200}},
          1, 2, 6),
      ranged(
          {"insertion_points_histc_isin",  // integers as floats (exact at every precision); unsorted rows search alike
           R"(graph(%s: float32[s0, 9], %x: float32[s0, 5], %b: float32[7], %h: float32[s0, 11], %p: int64[s0, 9], %i: int64[12], %j: int64[s0, 4]) {
  %a: int64[s0, 5] = aten.searchsorted.Tensor(sorted_sequence=%s, self=%x)
  %c: int32[s0, 5] = aten.searchsorted.Tensor(sorted_sequence=%s, self=%x, out_int32=true, right=true)
  %d: int64[s0, 5] = aten.bucketize.Tensor(self=%x, boundaries=%b)
  %e: int64[s0, 11] = aten.searchsorted.Tensor(sorted_sequence=%b, self=%h, side="right")
  %f: int64[s0, 5] = aten.searchsorted.Tensor(sorted_sequence=%s, self=%x, sorter=%p)
  %g: float32[10] = aten.histc.default(self=%h, bins=10, min=20.0, max=150.0)
  %k: int64[s0, 4] = aten.searchsorted.Tensor(sorted_sequence=%i, self=%j)
  %l: float32[7] = aten.histc.default(self=%x, bins=7)
  %m: bool[s0, 5] = aten.isin.Tensor_Tensor(elements=%x, test_elements=%b)
  %q: bool[s0, 4] = aten.isin.Tensor_Tensor(elements=%j, test_elements=%i, invert=true)
  %xt: float32[s0, 5] = aten.sub.Tensor(self=%x, other=100.0)
  %xn: float32[s0, 5] = aten.log.default(self=%xt)
  %bt: float32[7] = aten.sub.Tensor(self=%b, other=100.0)
  %bn: float32[7] = aten.log.default(self=%bt)
  %r: bool[s0, 5] = aten.isin.Tensor_Tensor(elements=%xn, test_elements=%bn)
  return (%a, %c, %d, %e, %f, %g, %k, %l, %m, %q, %r)
}
)",
           {200, 200, 200, 200, 9, 100, 100}},
          1, 3, 17),
      ranged(
          {"grid_sampling",  // grids of multiples of 3/16 in [-1.5, 1.5] (exact at every precision, some outside)
           R"(graph(%x: float32[s0, 3, 6, 7], %gi: float32[s0, 4, 5, 2], %v: float32[s0, 2, 3, 4, 5], %hi: float32[s0, 2, 3, 4, 3]) {
  %gs: float32[s0, 4, 5, 2] = aten.sub.Tensor(self=%gi, other=8.0)
  %g: float32[s0, 4, 5, 2] = aten.mul.Scalar(self=%gs, other=0.1875)
  %hs: float32[s0, 2, 3, 4, 3] = aten.sub.Tensor(self=%hi, other=8.0)
  %h: float32[s0, 2, 3, 4, 3] = aten.mul.Scalar(self=%hs, other=0.1875)
  %a: float32[s0, 3, 4, 5] = aten.grid_sampler_2d.default(input=%x, grid=%g, interpolation_mode=0, padding_mode=0, align_corners=false)
  %b: float32[s0, 3, 4, 5] = aten.grid_sampler_2d.default(input=%x, grid=%g, interpolation_mode=1, padding_mode=1, align_corners=true)
  %c: float32[s0, 3, 4, 5] = aten.grid_sampler_2d.default(input=%x, grid=%g, interpolation_mode=2, padding_mode=2, align_corners=false)
  %d: float32[s0, 3, 4, 5] = aten.grid_sampler.default(input=%x, grid=%g, interpolation_mode=0, padding_mode=2, align_corners=true)
  %e: float32[s0, 2, 2, 3, 4] = aten.grid_sampler_3d.default(input=%v, grid=%h, interpolation_mode=0, padding_mode=0, align_corners=false)
  %f: float32[s0, 2, 2, 3, 4] = aten.grid_sampler_3d.default(input=%v, grid=%h, interpolation_mode=1, padding_mode=2, align_corners=true)
  %gl: float32[s0, 4, 5, 2] = aten.log.default(self=%g)
  %k: float32[s0, 3, 4, 5] = aten.grid_sampler_2d.default(input=%x, grid=%gl, interpolation_mode=0, padding_mode=0, align_corners=false)
  %l: float32[s0, 3, 4, 5] = aten.grid_sampler_2d.default(input=%x, grid=%gl, interpolation_mode=1, padding_mode=0, align_corners=false)
  %m: float32[s0, 3, 4, 5] = aten.grid_sampler_2d.default(input=%x, grid=%gl, interpolation_mode=0, padding_mode=1, align_corners=true)
  return (%a, %b, %c, %d, %e, %f, %k, %l, %m)
}
)",
           {0, 17, 0, 17}},
          1, 2, 7),
      ranged({"segment_reductions",  // lengths 0..3 (some segments empty) and the offsets they make
              R"(graph(%x: float32[s0, 12, 3], %l: int64[4], %z: int64[1]) {
  %cs: int64[4] = aten.cumsum.default(self=%l, dim=0)
  %off: int64[5] = aten.cat.default(tensors=[%z, %cs])
  %a: float32[s0, 4, 3] = aten.segment_reduce.default(data=%x, reduce="sum", lengths=%l, axis=1)
  %b: float32[s0, 4, 3] = aten.segment_reduce.default(data=%x, reduce="mean", lengths=%l, axis=1, initial=0.5)
  %c: float32[s0, 4, 3] = aten.segment_reduce.default(data=%x, reduce="max", offsets=%off, axis=1)
  %d: float32[s0, 4, 3] = aten.segment_reduce.default(data=%x, reduce="min", lengths=%l, axis=-2)
  %e: float32[s0, 4, 3] = aten.segment_reduce.default(data=%x, reduce="prod", offsets=%off, axis=1, initial=2.0)
  %f: float32[s0, 4, 3] = aten.segment_reduce.default(data=%x, reduce="mean", lengths=%l, axis=1)
  return (%a, %b, %c, %d, %e, %f)
}
)",
              {0, 4, 1}},
             1, 3, 9),
      ranged({"products",  // x uniform in [-1, 1) (products shrink: compared with atol), i integers 0..2
              R"(graph(%x: float32[s0, 5, 3], %i: int64[s0, 4]) {
  %a: float32[] = aten.prod.default(self=%x)
  %b: float32[s0, 3] = aten.prod.dim_int(self=%x, dim=1)
  %c: float32[s0, 1, 3] = aten.prod.dim_int(self=%x, dim=-2, keepdim=true)
  %d: int64[s0] = aten.prod.dim_int(self=%i, dim=1)
  %e: int64[] = aten.prod.default(self=%i)
  %f: float32[4] = aten.prod.dim_int(self=%i, dim=0, dtype=dtype.float32)
  return (%a, %b, %c, %d, %e, %f)
}
)",
              {0, 3}},
             1, 3, 9),
      ranged({"orderings",  // x, z integers 0..19 (ties); log(x - 10): NaN below 10, -inf at 10; ordered dims static
              R"(graph(%x: float32[s0, 9], %i: int64[6, s0], %z: float32[3, 5]) {
  %t: float32[s0, 9] = aten.sub.Tensor(self=%x, other=10.0)
  %zt: float32[3, 5] = aten.sub.Tensor(self=%z, other=10.0)
  %zy: float32[3, 5] = aten.log.default(self=%zt)
  %y: float32[s0, 9] = aten.log.default(self=%t)
  %a: float32[s0, 9], %ai: int64[s0, 9] = aten.sort.default(self=%x)
  %b: float32[s0, 9], %bi: int64[s0, 9] = aten.sort.stable(self=%y, stable=true, dim=1, descending=true)
  %c: int64[s0, 9] = aten.argsort.default(self=%y)
  %d: float32[s0, 4], %di: int64[s0, 4] = aten.topk.default(self=%x, k=4)
  %e: float32[s0, 3], %ei: int64[s0, 3] = aten.topk.default(self=%y, k=3, dim=-1, largest=false)
  %f: float32[s0], %fi: int64[s0] = aten.kthvalue.default(self=%x, k=3, dim=1)
  %g: float32[s0, 1], %gi: int64[s0, 1] = aten.median.dim(self=%y, dim=1, keepdim=true)
  %h: float32[s0], %hi: int64[s0] = aten.nanmedian.dim(self=%y, dim=1)
  %k: float32[] = aten.median.default(self=%z)
  %l: float32[] = aten.nanmedian.default(self=%zy)
  %m: int64[6, s0], %mi: int64[6, s0] = aten.sort.default(self=%i, dim=0, descending=true)
  %n: int64[6, s0] = aten.msort.default(self=%i)
  return (%a, %ai, %b, %bi, %c, %d, %di, %e, %ei, %f, %fi, %g, %gi, %h, %hi, %k, %l, %m, %mi, %n)
}
)",
              {20, 7, 20}},
             1, 4, 11),
      ranged({"empty_products",  // a sum over no terms is zeros; an empty result computes nothing
              R"(graph(%a: float32[s0, 0], %b: float32[0, 3], %c: float32[0, 4], %d: float32[4, 3]) {
  %x: float32[s0, 3] = aten.mm.default(self=%a, mat2=%b)
  %y: float32[0, 3] = aten.mm.default(self=%c, mat2=%d)
  %z: float32[s0, 3] = aten.relu.default(self=%x)
  return (%x, %y, %z)
}
)",
              {0}},
             1, 2, 5),
      ranged({"pad_modes",  // reflect, replicate (cropping too), circular and constant along the last two dims
              R"(graph(%x: float32[s0, 3, 5, 6]) {
  %a: float32[s0, 3, 9, 8] = aten.pad.default(self=%x, pad=[1, 1, 2, 2], mode="reflect")
  %b: float32[s0, 3, 5, 11] = aten.pad.default(self=%x, pad=[3, 2], mode="replicate")
  %c: float32[s0, 3, 7, 10] = aten.pad.default(self=%x, pad=[4, 0, 1, 1], mode="circular")
  %d: float32[s0, 3, 7, 4] = aten.replication_pad2d.default(self=%x, padding=[-1, -1, 1, 1])
  %e: float32[s0, 3, 5, 10] = aten.reflection_pad2d.default(self=%x, padding=[2, 2, 0, 0])
  %f: float32[s0, 3, 6, 6] = aten.pad.default(self=%x, pad=[0, 0, 0, 1], mode="constant", value=0.5)
  return (%a, %b, %c, %d, %e, %f)
}
)",
              {0}},
             1, 2, 9),
      ranged(
          {"conv_transposed",  // stride, padding, dilation and output padding; 1-D; filters as weights
           R"(graph(%x: float32[s0, 4, 5, 6], %x1: float32[s0, 4, 7], %w: float32[4, 3, 3, 2], %bias: float32[3], %w1: float32[4, 2, 3]) {
  %a: float32[s0, 3, 10, 8] = aten.convolution.default(input=%x, weight=%w, bias=%bias, stride=[2, 1], padding=[1, 0], dilation=[1, 2], transposed=true, output_padding=[1, 0], groups=1)
  %b: float32[s0, 2, 19] = aten.conv_transpose1d.default(input=%x1, weight=%w1, stride=[3], padding=[1])
  %c: float32[s0, 3, 7, 7] = aten.conv_transpose2d.input(input=%x, weight=%w, bias=%bias)
  return (%a, %b, %c)
}
)",
           {0, 0, 0, 0, 0},
           1e-5,
           1e-4,
           2},
          1, 2, 5),
      ranged({"softmax_other_dims",  // over a middle dim and the first: rows gathered with the dim last
              R"(graph(%x: float32[s0, 6, 5]) {
  %a: float32[s0, 6, 5] = aten._softmax.default(self=%x, dim=1, half_to_float=false)
  %b: float32[s0, 6, 5] = aten._log_softmax.default(self=%x, dim=0, half_to_float=false)
  %c: float32[s0, 6, 5] = aten.softmax.int(self=%x, dim=-2)
  %d: float32[s0, 6, 5] = aten.add.Tensor(self=%a, other=%c)
  return (%b, %d)
}
)",
              {0}},
             1, 4, 30),
      ranged({"argmax_argmin_cumsum",  // x: integers 0..199 as floats (exact at every precision; ties take the first)
              R"(graph(%x: float32[s0, 12], %i: int64[s0, 7]) {
  %a: int64[s0] = aten.argmax.default(self=%x, dim=1)
  %b: int64[1, 12] = aten.argmin.default(self=%x, dim=0, keepdim=true)
  %c: int64[] = aten.argmax.default(self=%x)
  %d: int64[s0] = aten.argmin.default(self=%i, dim=-1)
  %e: float32[s0, 12] = aten.cumsum.default(self=%x, dim=1)
  %f: int64[s0, 7] = aten.cumsum.default(self=%i, dim=0)
  %g: bool[s0, 12] = aten.gt.Scalar(self=%x, other=100.0)
  %h: int64[s0, 12] = aten.cumsum.default(self=%g, dim=-1)
  %t: float32[12, s0] = aten.transpose.int(self=%x, dim0=0, dim1=1)
  %u: int64[s0] = aten.argmax.default(self=%t, dim=0)
  return (%a, %b, %c, %d, %e, %f, %h, %u)
}
)",
              {200, 1000}},
             1, 5, 40),
      ranged(
          {"group_norm",  // GroupNorm with and without an affine, over 2-D and 1-D positions
           R"(graph(%x: float32[s0, 6, 4, 5], %t: float32[3, 8, 7], %w: float32[6], %b: float32[6], %wt: float32[8]) {
  %y: float32[s0, 6, 4, 5] = aten.group_norm.default(input=%x, num_groups=3, weight=%w, bias=%b, eps=1e-05)
  %z: float32[s0, 6, 4, 5] = aten.group_norm.default(input=%x, num_groups=2)
  %u: float32[3, 8, 7] = aten.group_norm.default(input=%t, num_groups=4, weight=%wt, eps=0.001)
  return (%y, %z, %u)
}
)",
           {},
           1e-5,
           1e-4,
           2},
          1, 2, 6),
      ranged({"pointwise_integers_and_mixed_dtypes",  // the pointwise layer (PyTorch's promotion, exact integers),
                                                      // any/all, a sum to float
              R"(graph(%i: int64[s0, 6], %j: int32[s0, 6], %x: float32[s0, 6], %u: uint8[s0, 6], %b: int8[s0, 6]) {
  %j1: int32[s0, 6] = aten.add.Scalar(self=%j, other=1)
  %a: int64[s0, 6] = aten.remainder.Scalar(self=%i, other=7)
  %c: int64[s0, 6] = aten.neg.default(self=%i)
  %d: int64[s0, 6] = aten.div.Tensor_mode(self=%c, other=%j1, rounding_mode="floor")
  %e: int64[s0, 6] = aten.fmod.Tensor(self=%c, other=%j1)
  %f: float32[s0, 6] = aten.div.Tensor(self=%i, other=%j1)
  %g: float32[s0, 6] = aten.add.Tensor(self=%x, other=%j, alpha=2)
  %h: bool[s0, 6] = aten.lt.Scalar(self=%i, other=500.5)
  %k: int64[s0, 6] = aten.bitwise_and.Tensor(self=%i, other=%j)
  %l: int32[s0, 6] = aten.pow.Tensor_Scalar(self=%j, exponent=2)
  %m: int64[s0, 6] = aten.maximum.default(self=%c, other=%j)
  %n: int64[s0, 6] = aten.sign.default(self=%d)
  %o: int64[s0, 6] = aten.abs.default(self=%e)
  %p: bool[s0, 6] = aten.logical_and.default(self=%i, other=%x)
  %q: bool[s0, 6] = aten.logical_not.default(self=%j)
  %r: uint8[s0, 6] = aten.add.Tensor(self=%u, other=%u)
  %t: int8[s0, 6] = aten.mul.Tensor(self=%b, other=%b)
  %v: int16[s0, 6] = aten.sub.Tensor(self=%u, other=%b)
  %w: float32[s0, 6] = aten.sqrt.default(self=%i)
  %y: int64[s0, 6] = aten.clamp.default(self=%c, min=-600, max=-10)
  %z: bool[s0, 6] = aten.bitwise_not.default(self=%h)
  %s: float32[s0] = aten.sum.dim_IntList(self=%j, dim=[1], dtype=dtype.float32)
  %x1: bool[s0] = aten.any.dim(self=%j, dim=1)
  %x2: bool[] = aten.all.default(self=%i)
  %x3: bool[6] = aten.any.dims(self=%h, dim=[0])
  %x4: int64[s0, 6] = aten.cumprod.default(self=%j, dim=1)
  %j8: int32[s0, 6] = aten.mul.Scalar(self=%j, other=-8)
  %fj: float32[s0, 6] = aten._to_copy.default(self=%j8, dtype=dtype.float32)
  %x5: uint8[s0, 6] = aten._to_copy.default(self=%fj, dtype=dtype.uint8)
  %x6: int8[s0, 6] = aten._to_copy.default(self=%fj, dtype=dtype.int8)
  %x7: int16[s0, 6] = aten._to_copy.default(self=%fj, dtype=dtype.int16)
  return (%a, %d, %e, %f, %g, %h, %k, %l, %m, %n, %o, %p, %q, %r, %t, %v, %w, %y, %z, %s, %x1, %x2, %x3, %x4, %x5,
          %x6, %x7)
}
)",
              {1000, 50, 0, 256, 100}},
             1, 3, 20),
      ranged({"pointwise_math_and_float64",  // math functions the fused programs do not know, float64 tensors
              R"(graph(%x: float32[s0, 7], %y: float32[s0, 7], %z: float64[s0, 7]) {
  %a: float32[s0, 7] = aten.acos.default(self=%x)
  %b: float32[s0, 7] = aten.cosh.default(self=%x)
  %c: float32[s0, 7] = aten.exp2.default(self=%y)
  %d: float32[s0, 7] = aten.log10.default(self=%x)
  %e: float32[s0, 7] = aten.atan2.default(self=%x, other=%y)
  %f: float32[s0, 7] = aten.copysign.Tensor(self=%x, other=%y)
  %g: float32[s0, 7] = aten.logaddexp.default(self=%x, other=%y)
  %h: float32[s0, 7] = aten.fmax.default(self=%x, other=%y)
  %k: float32[s0, 7] = aten.clamp.Tensor(self=%x, min=%y)
  %l: float32[s0, 7] = aten.special_erfcx.default(self=%x)
  %m: float32[s0, 7] = aten.special_bessel_j0.default(self=%y)
  %n: float32[s0, 7] = aten.leaky_relu.default(self=%x, negative_slope=0.2)
  %o: float32[s0, 7] = aten.elu.default(self=%y, alpha=1.5)
  %p: bool[s0, 7] = aten.isnan.default(self=%d)
  %q: bool[s0, 7] = aten.signbit.default(self=%x)
  %r: float64[s0, 7] = aten.mul.Tensor(self=%z, other=%z)
  %t: float64[s0, 7] = aten.sin.default(self=%z)
  %u: float64[s0, 7] = aten.add.Tensor(self=%r, other=%x)
  %v: float32[s0, 7] = aten._to_copy.default(self=%t, dtype=dtype.float32)
  %w: float32[s0, 7] = aten.pow.Tensor_Tensor(self=%c, exponent=%y)
  %x1: float32[s0, 7] = aten.cumprod.default(self=%x, dim=1)
  %x2: float32[s0, 7] = aten.logcumsumexp.default(self=%y, dim=1)
  %x3: float32[s0, 7] = aten.digamma.default(self=%c)
  %x4: float32[s0, 7] = aten.polygamma.default(n=2, self=%c)
  %x5: float32[s0, 7] = aten.special_chebyshev_polynomial_t.default(x=%x, n=5)
  %x6: float32[s0, 7] = aten.special_legendre_polynomial_p.default(x=%y, n=%b)
  %b2: float32[s0, 7] = aten.add.Scalar(self=%b, other=1.0)
  %x7: float32[s0, 7] = aten.special_zeta.default(self=%b2, other=%c)
  %x8: float64[s0, 7] = aten._softmax.default(self=%z, dim=1, half_to_float=false)
  %x9: float64[7] = aten.sum.dim_IntList(self=%z, dim=[0])
  %y1: float32[s0, 7] = aten.igamma.default(self=%b2, other=%c)
  %y2: float32[s0, 7] = aten.igammac.default(self=%c, other=%b2)
  %y3: float32[s0, 7] = aten.mvlgamma.default(self=%b2, p=3)
  %y4: float32[s0, 7] = aten.special_i0e.default(self=%x)
  %y5: float32[s0, 7] = aten.special_i1e.default(self=%y)
  %y6: float32[s0, 7] = aten.special_modified_bessel_k0.default(self=%b2)
  %y7: float32[s0, 7] = aten.special_modified_bessel_k1.default(self=%c)
  %y8: float32[s0, 7] = aten.special_scaled_modified_bessel_k0.default(x=%c)
  %y9: float32[s0, 7] = aten.special_scaled_modified_bessel_k1.default(x=%b2)
  %z1: float32[s0, 7] = aten.special_airy_ai.default(x=%x)
  %z2: float32[s0, 7] = aten.special_log_ndtr.default(self=%y)
  %z3: float64[s0, 7] = aten.special_airy_ai.default(x=%z)
  return (%a, %b, %c, %d, %e, %f, %g, %h, %k, %l, %m, %n, %o, %p, %q, %r, %u, %v, %w, %x1, %x2, %x3, %x4, %x5, %x6,
          %x7, %x8, %x9, %y1, %y2, %y3, %y4, %y5, %y6, %y7, %y8, %y9, %z1, %z2, %z3)
}
)",
              {0, 0, 0}},
             1, 3, 20),
      {"diagonal_views",  // diagonals above, on and below, of any two dims: strides over the input's bytes
       R"(graph(%x: float32[4, 5, 6]) {
  %a: float32[6, 4] = aten.diagonal.default(self=%x)
  %b: float32[4, 4] = aten.diagonal.default(self=%x, offset=2, dim1=1, dim2=2)
  %c: float32[5, 4] = aten.diagonal.default(self=%x, offset=-1, dim1=2, dim2=0)
  %d: float32[5, 4] = aten.mul.Scalar(self=%c, other=2.0)
  %e: float32[4, 0] = aten.diagonal.default(self=%x, offset=7, dim1=1, dim2=2)
  return (%a, %b, %d, %e)
}
)",
       {0}},
      ranged({"decode_bookkeeping",  // positions and counters of a static-cache decoder, and the cache write
              R"(graph(%pos: int64[1], %len: int64[], %cache: float32[1, 2, s0, 4], %x: float32[1, 2, 1, 4]) {
  %p1: int64[1] = aten.add.Tensor(self=%pos, other=%len)
  %p2: int64[1] = aten.sub.Tensor(self=%p1, other=%len, alpha=2)
  %p3: int64[1] = aten.mul.Scalar(self=%p2, other=3)
  %n: int64[] = aten.add.Scalar(self=%len, other=1)
  %c: int64[] = aten.copy.default(self=%len, src=%n)
  %d: float32[1, 2, 1, 4] = aten.to.device(self=%x, device=device("cpu"), dtype=dtype.float32)
  %w: float32[1, 2, s0, 4] = aten.index_copy.default(self=%cache, dim=2, index=%pos, source=%d)
  %v: float32[2, 1, 4] = aten.view.default(self=%x, size=[2, 1, 4])
  %u: float32[1, 2, s0, 4] = aten.index_put.default(self=%w, indices=?[None, None, %p1], values=%v, accumulate=false)
  %le: bool[1] = aten.le.Tensor(self=%p3, other=%pos)
  %gt: bool[] = aten.gt.Scalar(self=%len, other=2)
  return (%p3, %c, %w, %u, %le, %gt)
}
)",
              {5, 1, 0, 0}},
             5, 6, 12),
  };
}

inline Tensor conformance_input(const ir::Value& v, int64_t modulus, uint32_t seed) {
  Shape sizes;
  for (const ir::Dim& d : v.type.sizes) sizes.push_back(d.value);
  Tensor t = Tensor::zeros(DType::Float64, sizes);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = modulus > 0 ? static_cast<double>(rng() % static_cast<uint32_t>(modulus)) : u(rng);
  return t.to(v.type.dtype);
}

// The tolerance a case is held to at an engine precision: the case's own,
// widened to what computing in float16 (about 2^-11 per rounding) or
// bfloat16 (2^-8) over a chain of ops allows.
inline std::pair<double, double> conformance_tolerance(const ConformanceCase& c, const std::string& precision) {
  const double floor = precision == "fp16" ? 2e-2 : precision == "bf16" ? 8e-2 : 0.0;
  return {std::max(c.atol, floor), std::max(c.rtol, floor)};
}

// Runs `engine` on `inputs` and compares every output with `want` (the
// reference interpreter's), naming `run` in failures.
inline void expect_conformance_outputs(const engine::Engine& engine, const std::vector<Tensor>& inputs,
                                       const std::vector<cpu::RtValue>& want, const ConformanceCase& c,
                                       const std::string& precision, const std::string& run) {
  std::vector<Tensor> got;
  Status s = engine.execute(inputs, got);
  ASSERT_TRUE(s.is_ok()) << run << ": " << s.message();
  ASSERT_EQ(got.size(), want.size()) << run;
  const auto [atol, rtol] = conformance_tolerance(c, precision);
  for (size_t o = 0; o < got.size(); ++o) {
    const Tensor w = cpu::rt_value_to_tensor(want[o]);
    ASSERT_EQ(got[o].dtype(), w.dtype()) << run << ": output " << o;
    ASSERT_EQ(got[o].sizes(), w.sizes()) << run << ": output " << o;
    for (int64_t i = 0; i < w.numel(); ++i) {
      const double a = got[o].value_at(i), b = w.value_at(i);
      if (std::isnan(b)) {
        EXPECT_TRUE(std::isnan(a)) << run << ": output " << o << " element " << i;
        continue;
      }
      if (std::isinf(b)) {  // an infinity must be the same one
        EXPECT_EQ(a, b) << c.name << " (" << precision << ", " << run << "): output " << o << " element " << i;
        continue;
      }
      ASSERT_LE(std::fabs(a - b), atol + rtol * std::fabs(b))
          << c.name << " (" << precision << ", " << run << "): output " << o << " element " << i << ": got " << a
          << ", want " << b;
    }
  }
}

// The network of case `c` with its first `c.engine_inputs` graph inputs as
// engine inputs and the rest as weights, s0 left symbolic or fixed at `s0`.
inline engine::Network conformance_network(const ConformanceCase& c, std::optional<int64_t> s0) {
  engine::Network probe = network_from(c.ir);
  const size_t n_in = std::min(c.engine_inputs, probe.graph.inputs().size());
  std::vector<std::string> names;
  for (size_t i = n_in; i < probe.graph.inputs().size(); ++i) names.push_back(probe.graph.inputs()[i]->name);
  engine::Network net = network_from(c.ir, n_in, names);
  if (s0) {
    EXPECT_TRUE(ir::specialize(net.graph, {{"s0", *s0}}).is_ok()) << c.name << " at s0=" << *s0;
  }
  return net;
}

// Seeded inputs of a network whose sizes are all static (engine inputs, and
// weights by name), and the reference interpreter's outputs for them.
struct ConformanceData {
  std::vector<Tensor> inputs;
  std::map<std::string, Tensor> weights;
  std::vector<cpu::RtValue> want;
};

inline ConformanceData conformance_data(const ConformanceCase& c, const engine::Network& net) {
  ConformanceData d;
  std::vector<cpu::RtValue> ref_inputs;
  for (size_t i = 0; i < net.graph.inputs().size(); ++i) {
    Tensor t = conformance_input(*net.graph.inputs()[i], i < c.modulus.size() ? c.modulus[i] : 0,
                                 static_cast<uint32_t>(17 + i));
    ref_inputs.emplace_back(t);
    if (i < net.num_inputs) {
      d.inputs.push_back(t);
    } else {
      d.weights[net.graph.inputs()[i]->name] = t;
    }
  }
  auto want = runtime::interpret(net.graph, ref_inputs, cpu::cpu_kernels());
  EXPECT_TRUE(want.has_value()) << c.name << ": " << want.status().message();
  if (want.has_value()) d.want = std::move(*want);
  return d;
}

inline engine::WeightLookup conformance_weights(const std::map<std::string, Tensor>& w) {
  return [&w](const std::string& n) -> Expected<Tensor> {
    auto it = w.find(n);
    if (it == w.end()) return not_found("no weight '" + n + "'");
    return it->second;
  };
}

// The bytes of `plan` copied and the original freed, with copies of the
// weights: nothing the first load made can be reused by address (as the
// engine cache and a .kiln file give a plan back).
inline std::vector<uint8_t> stored_copy(std::vector<uint8_t>& plan) {
  std::vector<uint8_t> stored(plan.begin(), plan.end());
  plan.clear();
  plan.shrink_to_fit();
  return stored;
}

inline std::map<std::string, Tensor> cloned(const std::map<std::string, Tensor>& weights) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, w] : weights) out[name] = w.clone();
  return out;
}

// Builds `c` with `backend` at `precision` (s0 at its opt), runs it on seeded
// inputs and compares every output with the reference interpreter's, twice:
// the engine loaded from the bytes build() returned, and the engine loaded
// again from a copy of those bytes, with copies of the weights, after the
// first bytes are gone.
inline void run_conformance_case(const engine::Backend& backend, const ConformanceCase& c,
                                 const std::string& precision = "fp32") {
  engine::Network net = conformance_network(c, c.s0.max > 0 ? std::optional<int64_t>(c.s0.opt) : std::nullopt);
  const ConformanceData d = conformance_data(c, net);
  if (::testing::Test::HasFailure()) return;
  engine::BuildOptions options;
  options.precision = *parse_precision(precision);
  auto plan = backend.build(std::move(net), options);
  if (!plan.has_value() && plan.status().code() == ErrorCode::kUnsupported)
    GTEST_SKIP() << backend.name() << " does not take it: " << plan.status().message();
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  auto handle = backend.load(*plan, conformance_weights(d.weights), c.name);
  ASSERT_TRUE(handle.has_value()) << handle.status().message();
  engine::Engine built(&backend, *handle);
  expect_conformance_outputs(built, d.inputs, d.want, c, precision, "as built");
  if (::testing::Test::HasFatalFailure()) return;

  const std::vector<uint8_t> stored = stored_copy(*plan);
  const std::map<std::string, Tensor> stored_weights = cloned(d.weights);
  auto again = backend.load(stored, conformance_weights(stored_weights), c.name + " (stored)");
  ASSERT_TRUE(again.has_value()) << again.status().message();
  engine::Engine loaded(&backend, *again);
  expect_conformance_outputs(loaded, d.inputs, d.want, c, precision, "loaded from its serialized plan");
}

// The sizes a range run takes s0 at: min, opt, max and an odd size between
// them that is none of those.
inline std::vector<int64_t> conformance_sizes(const ir::SymbolRange& r) {
  std::vector<int64_t> sizes{r.min, r.opt, r.max};
  for (int64_t odd = (r.min + r.max) / 2 | 1; odd < r.max; odd += 2) {
    if (odd > r.min && odd != r.opt) {
      sizes.push_back(odd);
      break;
    }
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

// Builds `c` once for the whole range of s0 and runs that one engine at each
// of conformance_sizes(), against the reference interpreter on the network
// fixed at that size; then again from the plan's serialized bytes. A backend
// that takes the case at a fixed size must take its range too: a dynamic
// size is never the reason a case is refused.
inline void run_conformance_range_case(const engine::Backend& backend, const ConformanceCase& c,
                                       const std::string& precision = "fp32") {
  if (c.s0.max == 0) GTEST_SKIP() << c.name << " has no dynamic size";
  engine::Network net = conformance_network(c, std::nullopt);
  // Weights never depend on s0: the ones of the network at opt serve every size.
  const ConformanceData at_opt = conformance_data(c, conformance_network(c, c.s0.opt));
  if (::testing::Test::HasFailure()) return;
  engine::BuildOptions options;
  options.precision = *parse_precision(precision);
  options.symbols["s0"] = c.s0;
  auto plan = backend.build(std::move(net), options);
  if (!plan.has_value() && plan.status().code() == ErrorCode::kUnsupported) {
    engine::BuildOptions fixed;
    fixed.precision = *parse_precision(precision);
    auto static_plan = backend.build(conformance_network(c, c.s0.opt), fixed);
    ASSERT_FALSE(static_plan.has_value())
        << backend.name() << " takes " << c.name << " at s0=" << c.s0.opt << " but not over [" << c.s0.min << ", "
        << c.s0.max << "]: " << plan.status().message();
    GTEST_SKIP() << backend.name() << " does not take it: " << plan.status().message();
  }
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  auto handle = backend.load(*plan, conformance_weights(at_opt.weights), c.name);
  ASSERT_TRUE(handle.has_value()) << handle.status().message();
  engine::Engine built(&backend, *handle);
  const std::vector<uint8_t> stored = stored_copy(*plan);
  const std::map<std::string, Tensor> stored_weights = cloned(at_opt.weights);
  auto again = backend.load(stored, conformance_weights(stored_weights), c.name + " (stored)");
  ASSERT_TRUE(again.has_value()) << again.status().message();
  engine::Engine loaded(&backend, *again);
  for (int64_t n : conformance_sizes(c.s0)) {
    const ConformanceData d = conformance_data(c, conformance_network(c, n));
    if (::testing::Test::HasFailure()) return;
    const std::string at = "s0=" + std::to_string(n);
    expect_conformance_outputs(built, d.inputs, d.want, c, precision, "one build for the range, at " + at);
    if (::testing::Test::HasFatalFailure()) return;
    expect_conformance_outputs(loaded, d.inputs, d.want, c, precision, "the range's serialized plan loaded, at " + at);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace kiln::testing
