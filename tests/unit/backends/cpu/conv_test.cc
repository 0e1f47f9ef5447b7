#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "unit/backends/cpu/run_op.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using testing::B;
using testing::expect_close;
using testing::expect_error_names_node;
using testing::I;
using testing::Is;
using testing::OpArg;
using testing::run_op;
using testing::run_op_tensor;
using testing::Str;

// Random inputs: stream 7 of testing::random_tensor.
Tensor random_tensor(DType t, Shape shape, uint32_t seed) {
  return testing::random_tensor(t, std::move(shape), seed, /*stream=*/7);
}

Expected<std::vector<RtValue>> run1(OpKind op, std::vector<std::pair<std::string, OpArg>> args) {
  return run_op(op, std::move(args));
}

// Direct convolution: every output element sums its receptive field. x [N, C, H, W], w [O, C/g, KH, KW].
struct Geometry {
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
};

std::vector<double> direct_conv(const Tensor& x, const Tensor& w, const Tensor* bias, const Geometry& g, int64_t OH,
                                int64_t OW) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), KH = w.size(2), KW = w.size(3), Og = O / g.groups;
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = bias ? bias->value_at(o) : 0.0;
          const int64_t grp = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t ki = 0; ki < KH; ++ki)
              for (int64_t kj = 0; kj < KW; ++kj) {
                const int64_t ih = oh * g.sh - g.ph + ki * g.dh, iw = ow * g.sw - g.pw + kj * g.dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += x.value_at(((n * C + grp * Cg + c) * H + ih) * W + iw) *
                       w.value_at(((o * Cg + c) * KH + ki) * KW + kj);
              }
          out.push_back(acc);
        }
  return out;
}

// Transposed convolution by its definition: each input element scatters weight * value. w [C, O/g, KH, KW].
std::vector<double> direct_conv_transposed(const Tensor& x, const Tensor& w, const Tensor* bias, const Geometry& g,
                                           int64_t OH, int64_t OW) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Og = w.size(1), KH = w.size(2), KW = w.size(3), O = Og * g.groups, Cg = C / g.groups;
  std::vector<double> out(static_cast<size_t>(N * O * OH * OW), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t ih = 0; ih < H; ++ih)
        for (int64_t iw = 0; iw < W; ++iw)
          for (int64_t oc = 0; oc < Og; ++oc)
            for (int64_t ki = 0; ki < KH; ++ki)
              for (int64_t kj = 0; kj < KW; ++kj) {
                const int64_t oh = ih * g.sh - g.ph + ki * g.dh, ow = iw * g.sw - g.pw + kj * g.dw;
                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                const int64_t o = (c / Cg) * Og + oc;
                out[static_cast<size_t>(((n * O + o) * OH + oh) * OW + ow)] +=
                    x.value_at(((n * C + c) * H + ih) * W + iw) * w.value_at(((c * Og + oc) * KH + ki) * KW + kj);
              }
  if (bias)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t i = 0; i < OH * OW; ++i) out[static_cast<size_t>((n * O + o) * OH * OW + i)] += bias->value_at(o);
  return out;
}

TEST(ConvKernels, Conv2dStridePaddingDilation) {
  Tensor x = random_tensor(DType::Float32, {2, 3, 7, 6}, 1), w = random_tensor(DType::Float32, {4, 3, 3, 2}, 2);
  Tensor bias = random_tensor(DType::Float32, {4}, 3);
  Tensor out = run_op_tensor(OpKind::kConv2d, {{"input", x},
                                               {"weight", w},
                                               {"bias", bias},
                                               {"stride", Is({2, 1})},
                                               {"padding", Is({1, 0})},
                                               {"dilation", Is({1, 2})}});
  // H: (7 + 2 - 2 - 1) / 2 + 1 = 4; W: (6 - 2 - 1) / 1 + 1 = 4.
  EXPECT_EQ(out.sizes(), (Shape{2, 4, 4, 4}));
  Geometry g;
  g.sh = 2, g.ph = 1, g.dw = 2;
  expect_close(out, direct_conv(x, w, &bias, g, 4, 4), 1e-5);
}

TEST(ConvKernels, GroupedDepthwiseAndPointwise) {
  {
    Tensor x = random_tensor(DType::Float32, {2, 4, 5, 5}, 4), w = random_tensor(DType::Float32, {6, 2, 3, 3}, 5);
    Tensor out = run_op_tensor(OpKind::kConv2d, {{"input", x}, {"weight", w}, {"padding", Is({1})}, {"groups", I(2)}});
    EXPECT_EQ(out.sizes(), (Shape{2, 6, 5, 5}));
    Geometry g;
    g.ph = g.pw = 1, g.groups = 2;
    expect_close(out, direct_conv(x, w, nullptr, g, 5, 5), 1e-5);
  }
  {
    // Depthwise with channel multiplier 2, stride 2.
    Tensor x = random_tensor(DType::Float64, {1, 3, 6, 6}, 6), w = random_tensor(DType::Float64, {6, 1, 3, 3}, 7);
    Tensor bias = random_tensor(DType::Float64, {6}, 8);
    Tensor out = run_op_tensor(
        OpKind::kConv2d,
        {{"input", x}, {"weight", w}, {"bias", bias}, {"stride", Is({2})}, {"padding", Is({1})}, {"groups", I(3)}});
    EXPECT_EQ(out.sizes(), (Shape{1, 6, 3, 3}));
    Geometry g;
    g.sh = g.sw = 2, g.ph = g.pw = 1, g.groups = 3;
    expect_close(out, direct_conv(x, w, &bias, g, 3, 3), 1e-12);
  }
  {
    Tensor x = random_tensor(DType::Float32, {2, 5, 3, 4}, 9), w = random_tensor(DType::Float32, {3, 5, 1, 1}, 10);
    Tensor out = run_op_tensor(OpKind::kConv2d, {{"input", x}, {"weight", w}});
    EXPECT_EQ(out.sizes(), (Shape{2, 3, 3, 4}));
    expect_close(out, direct_conv(x, w, nullptr, Geometry{}, 3, 4), 1e-5);
  }
}

TEST(ConvKernels, UnbatchedAndNonContiguousInput) {
  Tensor base = random_tensor(DType::Float32, {5, 4, 2}, 11);  // [H, W, C] viewed as [C, H, W]
  Tensor x = base.as_strided({2, 5, 4}, {1, 8, 2}, 0);
  Tensor w = random_tensor(DType::Float32, {3, 2, 2, 2}, 12);
  Tensor out = run_op_tensor(OpKind::kConv2d, {{"input", x}, {"weight", w}});
  EXPECT_EQ(out.sizes(), (Shape{3, 4, 3}));
  Tensor x4 = x.contiguous().reshape({1, 2, 5, 4});
  expect_close(out, direct_conv(x4, w, nullptr, Geometry{}, 4, 3), 1e-5);
}

TEST(ConvKernels, StringPadding) {
  Tensor x = random_tensor(DType::Float32, {1, 2, 6, 5}, 13), w = random_tensor(DType::Float32, {3, 2, 4, 3}, 14);
  // 'same' with an even kernel and dilation 2 in H: total 6 -> 3 before, 3 after; W: total 2 -> 1, 1.
  Tensor same = run_op_tensor(OpKind::kConv2dPadding,
                              {{"input", x}, {"weight", w}, {"padding", Str("same")}, {"dilation", Is({2, 1})}});
  EXPECT_EQ(same.sizes(), (Shape{1, 3, 6, 5}));
  Geometry g;
  g.ph = 3, g.pw = 1, g.dh = 2;
  expect_close(same, direct_conv(x, w, nullptr, g, 6, 5), 1e-5);
  // Odd total padding (kernel 4 in H, no dilation): 1 before, 2 after, so the output keeps its size.
  Tensor same2 = run_op_tensor(OpKind::kConv2dPadding, {{"input", x}, {"weight", w}, {"padding", Str("same")}});
  EXPECT_EQ(same2.sizes(), (Shape{1, 3, 6, 5}));
  Geometry g2;
  g2.ph = 1, g2.pw = 1;
  expect_close(same2, direct_conv(x, w, nullptr, g2, 6, 5), 1e-5);
  Tensor valid = run_op_tensor(OpKind::kConv2dPadding, {{"input", x}, {"weight", w}, {"padding", Str("valid")}});
  EXPECT_EQ(valid.sizes(), (Shape{1, 3, 3, 3}));
  expect_error_names_node(
      run1(OpKind::kConv2dPadding, {{"input", x}, {"weight", w}, {"padding", Str("same")}, {"stride", Is({2})}}));
  expect_error_names_node(run1(OpKind::kConv2dPadding, {{"input", x}, {"weight", w}, {"padding", Str("full")}}));
}

TEST(ConvKernels, Conv1d) {
  Tensor x = random_tensor(DType::Float32, {2, 3, 10}, 15), w = random_tensor(DType::Float32, {4, 3, 3}, 16);
  Tensor bias = random_tensor(DType::Float32, {4}, 17);
  Tensor out = run_op_tensor(
      OpKind::kConv1d,
      {{"input", x}, {"weight", w}, {"bias", bias}, {"stride", Is({2})}, {"padding", Is({1})}, {"dilation", Is({2})}});
  // (10 + 2 - 4 - 1) / 2 + 1 = 4
  EXPECT_EQ(out.sizes(), (Shape{2, 4, 4}));
  Geometry g;
  g.sw = 2, g.pw = 1, g.dw = 2;
  expect_close(out, direct_conv(x.reshape({2, 3, 1, 10}), w.reshape({4, 3, 1, 3}), &bias, g, 1, 4), 1e-5);
  Tensor unbatched = run_op_tensor(
      OpKind::kConv1dPadding, {{"input", x.as_strided({3, 10}, {10, 1}, 0)}, {"weight", w}, {"padding", Str("same")}});
  EXPECT_EQ(unbatched.sizes(), (Shape{4, 10}));
  Geometry g1;
  g1.pw = 1;
  expect_close(
      unbatched,
      direct_conv(x.as_strided({1, 3, 1, 10}, {30, 10, 10, 1}, 0), w.reshape({4, 3, 1, 3}), nullptr, g1, 1, 10), 1e-5);
}

TEST(ConvKernels, ConvolutionOpPlainAndTransposed) {
  Tensor x = random_tensor(DType::Float32, {2, 4, 5, 4}, 18), w = random_tensor(DType::Float32, {6, 2, 3, 3}, 19);
  Tensor bias = random_tensor(DType::Float32, {6}, 20);
  Tensor out = run_op_tensor(OpKind::kConvolution, {{"input", x},
                                                    {"weight", w},
                                                    {"bias", bias},
                                                    {"stride", Is({1, 2})},
                                                    {"padding", Is({2, 1})},
                                                    {"dilation", Is({2, 1})},
                                                    {"transposed", B(false)},
                                                    {"output_padding", Is({0, 0})},
                                                    {"groups", I(2)}});
  // H: (5 + 4 - 4 - 1) / 1 + 1 = 5; W: (4 + 2 - 2 - 1) / 2 + 1 = 2.
  EXPECT_EQ(out.sizes(), (Shape{2, 6, 5, 2}));
  Geometry g;
  g.sw = 2, g.ph = 2, g.pw = 1, g.dh = 2, g.groups = 2;
  expect_close(out, direct_conv(x, w, &bias, g, 5, 2), 1e-5);

  Tensor wt = random_tensor(DType::Float32, {4, 3, 3, 2}, 21);  // [C, O/g, KH, KW], O = 6
  Tensor bt = random_tensor(DType::Float32, {6}, 22);
  Tensor tr = run_op_tensor(OpKind::kConvolution, {{"input", x},
                                                   {"weight", wt},
                                                   {"bias", bt},
                                                   {"stride", Is({2, 3})},
                                                   {"padding", Is({1, 0})},
                                                   {"dilation", Is({1, 2})},
                                                   {"transposed", B(true)},
                                                   {"output_padding", Is({1, 2})},
                                                   {"groups", I(2)}});
  // H: (5 - 1) * 2 - 2 + 1 * 2 + 1 + 1 = 10; W: (4 - 1) * 3 - 0 + 2 * 1 + 1 + 2 = 14.
  EXPECT_EQ(tr.sizes(), (Shape{2, 6, 10, 14}));
  Geometry gt;
  gt.sh = 2, gt.sw = 3, gt.ph = 1, gt.dw = 2, gt.groups = 2;
  expect_close(tr, direct_conv_transposed(x, wt, &bt, gt, 10, 14), 1e-5);
}

TEST(ConvKernels, ConvTransposeOps) {
  Tensor x = random_tensor(DType::Float64, {3, 4, 4}, 23), w = random_tensor(DType::Float64, {3, 2, 3, 3}, 24);
  Tensor out = run_op_tensor(
      OpKind::kConvTranspose2d,
      {{"input", x}, {"weight", w}, {"stride", Is({2})}, {"padding", Is({1})}, {"output_padding", Is({1})}});
  EXPECT_EQ(out.sizes(), (Shape{2, 8, 8}));
  Geometry g;
  g.sh = g.sw = 2, g.ph = g.pw = 1;
  expect_close(out, direct_conv_transposed(x.reshape({1, 3, 4, 4}), w, nullptr, g, 8, 8), 1e-12);
  Tensor x1 = random_tensor(DType::Float32, {2, 2, 5}, 25), w1 = random_tensor(DType::Float32, {2, 3, 2}, 26);
  Tensor o1 = run_op_tensor(OpKind::kConvTranspose1d, {{"input", x1}, {"weight", w1}, {"stride", Is({3})}});
  EXPECT_EQ(o1.sizes(), (Shape{2, 3, 14}));
  Geometry g1;
  g1.sw = 3;
  expect_close(o1, direct_conv_transposed(x1.reshape({2, 2, 1, 5}), w1.reshape({2, 3, 1, 2}), nullptr, g1, 1, 14),
               1e-5);
  expect_error_names_node(run1(OpKind::kConvTranspose2d, {{"input", x}, {"weight", w}, {"output_padding", Is({1})}}));
}

TEST(ConvKernels, ReducedPrecision) {
  for (DType t : {DType::Float16, DType::BFloat16}) {
    Tensor x = random_tensor(t, {1, 3, 5, 5}, 27), w = random_tensor(t, {2, 3, 3, 3}, 28);
    Tensor bias = random_tensor(t, {2}, 29);
    Tensor out = run_op_tensor(OpKind::kConv2d, {{"input", x}, {"weight", w}, {"bias", bias}, {"padding", Is({1})}});
    EXPECT_EQ(out.dtype(), t);
    Geometry g;
    g.ph = g.pw = 1;
    expect_close(out, direct_conv(x, w, &bias, g, 5, 5), t == DType::Float16 ? 3e-3 : 2e-2);
  }
}

TEST(ConvKernels, ShapeErrors) {
  Tensor x = random_tensor(DType::Float32, {1, 3, 5, 5}, 30);
  expect_error_names_node(
      run1(OpKind::kConv2d, {{"input", x}, {"weight", random_tensor(DType::Float32, {2, 4, 3, 3}, 1)}}));
  expect_error_names_node(
      run1(OpKind::kConv2d, {{"input", x}, {"weight", random_tensor(DType::Float32, {2, 3, 7, 3}, 1)}}));
  expect_error_names_node(run1(OpKind::kConv2d, {{"input", x},
                                                 {"weight", random_tensor(DType::Float32, {2, 3, 3, 3}, 1)},
                                                 {"bias", random_tensor(DType::Float32, {3}, 1)}}));
  expect_error_names_node(run1(
      OpKind::kConv2d, {{"input", x}, {"weight", random_tensor(DType::Float32, {4, 1, 3, 3}, 1)}, {"groups", I(2)}}));
  expect_error_names_node(
      run1(OpKind::kConv2d, {{"input", x}, {"weight", random_tensor(DType::Float64, {2, 3, 3, 3}, 1)}}));
  expect_error_names_node(
      run1(OpKind::kConv2d,
           {{"input", x}, {"weight", random_tensor(DType::Float32, {2, 3, 3, 3}, 1)}, {"stride", Is({0})}}));
  expect_error_names_node(
      run1(OpKind::kConv1d, {{"input", x}, {"weight", random_tensor(DType::Float32, {2, 3, 3}, 1)}}));
  expect_error_names_node(run1(
      OpKind::kConvTranspose2d,
      {{"input", x}, {"weight", random_tensor(DType::Float32, {3, 1, 1, 1}, 1)}, {"stride", Is({int64_t{1} << 40})}}));
  auto r3d = run1(OpKind::kConvolution, {{"input", random_tensor(DType::Float32, {1, 1, 2, 2, 2, 2}, 1)},
                                         {"weight", random_tensor(DType::Float32, {1, 1, 1, 1, 1, 1}, 2)},
                                         {"stride", Is({1})},
                                         {"padding", Is({0})},
                                         {"dilation", Is({1})},
                                         {"transposed", B(false)},
                                         {"output_padding", Is({0})},
                                         {"groups", I(1)}});
  ASSERT_FALSE(r3d.has_value());
  EXPECT_EQ(r3d.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(r3d.status().message().find("test_node"), std::string::npos);
}

}  // namespace
}  // namespace kiln::cpu
