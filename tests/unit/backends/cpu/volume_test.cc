// 3-d windows (volume.cc) against the 2-d kernels, an independent
// implementation: a 3-d convolution or pool whose window is one deep is the
// 2-d one applied to each depth slice. Grid sampling against grids whose
// samples are known (the identity, midpoints, points outside).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "unit/backends/cpu/op_test_helpers.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using namespace testing;

Tensor wave(Shape sizes, double phase) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(0.37 * static_cast<double>(i) + phase);
  return make_tensor(DType::Float64, std::move(sizes), v);
}

// x[:, :, z] of a [N, C, D, H, W] tensor, contiguous.
Tensor depth_slice(const Tensor& x, int64_t z) {
  const Shape& s = x.sizes();
  return x
      .as_strided({s[0], s[1], s[3], s[4]}, {x.strides()[0], x.strides()[1], x.strides()[3], x.strides()[4]},
                  x.storage_offset() + z * x.strides()[2])
      .contiguous();
}

void expect_slices_match(const Tensor& volume, const std::function<Tensor(int64_t)>& plane) {
  for (int64_t z = 0; z < volume.size(2); ++z) {
    const std::vector<double> got = values(depth_slice(volume, z)), want = values(plane(z));
    ASSERT_EQ(got.size(), want.size()) << "depth " << z;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "depth " << z << " at " << i;
  }
}

TEST(VolumeKernels, ConvolutionOneDeepIsTheTwoDimensionalOnePerSlice) {
  const Tensor x = wave({2, 4, 3, 5, 6}, 0.1), w = wave({6, 2, 1, 3, 2}, 0.7), bias = wave({6}, 1.3);
  const Tensor w2 = w.reshape({6, 2, 3, 2});
  const Tensor y = run_op_tensor(OpKind::kConv3d, {{"input", x},
                                                   {"weight", w},
                                                   {"bias", bias},
                                                   {"stride", Is({1, 2, 1})},
                                                   {"padding", Is({0, 1, 1})},
                                                   {"dilation", Is({1, 1, 2})},
                                                   {"groups", I(2)}});
  expect_slices_match(y, [&](int64_t z) {
    return run_op_tensor(OpKind::kConv2d, {{"input", depth_slice(x, z)},
                                           {"weight", w2},
                                           {"bias", bias},
                                           {"stride", Is({2, 1})},
                                           {"padding", Is({1, 1})},
                                           {"dilation", Is({1, 2})},
                                           {"groups", I(2)}});
  });
  // Transposed: weight [C_in, C_out / groups, 1, kh, kw].
  const Tensor wt = wave({4, 3, 1, 3, 3}, 0.2);
  const Tensor yt = run_op_tensor(OpKind::kConvTranspose3d, {{"input", x},
                                                             {"weight", wt},
                                                             {"stride", Is({1, 2, 2})},
                                                             {"padding", Is({0, 1, 0})},
                                                             {"output_padding", Is({0, 1, 0})}});
  expect_slices_match(yt, [&](int64_t z) {
    return run_op_tensor(OpKind::kConvTranspose2d, {{"input", depth_slice(x, z)},
                                                    {"weight", wt.reshape({4, 3, 3, 3})},
                                                    {"stride", Is({2, 2})},
                                                    {"padding", Is({1, 0})},
                                                    {"output_padding", Is({1, 0})}});
  });
  // convolution.default with three spatial dims reaches the same kernel.
  const Tensor yc = run_op_tensor(OpKind::kConvolution, {{"input", x},
                                                         {"weight", w},
                                                         {"bias", bias},
                                                         {"stride", Is({1, 2, 1})},
                                                         {"padding", Is({0, 1, 1})},
                                                         {"dilation", Is({1, 1, 2})},
                                                         {"transposed", B(false)},
                                                         {"output_padding", Is({0, 0, 0})},
                                                         {"groups", I(2)}});
  EXPECT_EQ(values(yc), values(y));
}

TEST(VolumeKernels, PoolsOneDeepAreTheTwoDimensionalOnesPerSlice) {
  const Tensor x = wave({1, 3, 2, 7, 6}, 0.4);
  const Tensor mx = run_op_tensor(OpKind::kMaxPool3d, {{"self", x},
                                                       {"kernel_size", Is({1, 3, 2})},
                                                       {"stride", Is({1, 2, 2})},
                                                       {"padding", Is({0, 1, 1})},
                                                       {"ceil_mode", B(true)}});
  expect_slices_match(mx, [&](int64_t z) {
    return run_op_tensor(OpKind::kMaxPool2d, {{"self", depth_slice(x, z)},
                                              {"kernel_size", Is({3, 2})},
                                              {"stride", Is({2, 2})},
                                              {"padding", Is({1, 1})},
                                              {"ceil_mode", B(true)}});
  });
  for (bool include_pad : {true, false}) {
    const Tensor av = run_op_tensor(OpKind::kAvgPool3d, {{"self", x},
                                                         {"kernel_size", Is({1, 3, 3})},
                                                         {"stride", Is({1, 2, 2})},
                                                         {"padding", Is({0, 1, 1})},
                                                         {"ceil_mode", B(true)},
                                                         {"count_include_pad", B(include_pad)}});
    expect_slices_match(av, [&](int64_t z) {
      return run_op_tensor(OpKind::kAvgPool2d, {{"self", depth_slice(x, z)},
                                                {"kernel_size", Is({3, 3})},
                                                {"stride", Is({2, 2})},
                                                {"padding", Is({1, 1})},
                                                {"ceil_mode", B(true)},
                                                {"count_include_pad", B(include_pad)}});
    });
  }
  const Tensor ad = run_op_tensor(OpKind::kAdaptiveAvgPool3d, {{"self", x}, {"output_size", Is({2, 3, 4})}});
  expect_slices_match(ad, [&](int64_t z) {
    return run_op_tensor(OpKind::kAdaptiveAvgPool2d, {{"self", depth_slice(x, z)}, {"output_size", Is({3, 4})}});
  });
  // Indices count within each (n, c) volume: the 2-d indices plus the slice's offset.
  auto am = run_op(OpKind::kAdaptiveMaxPool3d, {{"self", x}, {"output_size", Is({2, 2, 3})}}, 2);
  ASSERT_TRUE(am.has_value()) << am.status().message();
  auto am2 = run_op(OpKind::kAdaptiveMaxPool2d, {{"self", depth_slice(x, 1)}, {"output_size", Is({2, 3})}}, 2);
  ASSERT_TRUE(am2.has_value());
  const std::vector<double> i3 = values(depth_slice(output(*am, 1), 1)), i2 = values(output(*am2, 1));
  for (size_t i = 0; i < i2.size(); ++i) EXPECT_EQ(i3[i], i2[i] + 7 * 6);
}

TEST(VolumeKernels, GridSamplerReadsTheSamplesItIsGiven) {
  // 1 x 1 x 2 x 3 input; the identity grid with align_corners reads every pixel back.
  const Tensor x = make_tensor(DType::Float32, {1, 1, 2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor ident = make_tensor(DType::Float32, {1, 2, 3, 2}, {-1, -1, 0, -1, 1, -1, -1, 1, 0, 1, 1, 1});
  for (int64_t mode : {0, 1, 2})
    EXPECT_EQ(values(run_op_tensor(OpKind::kGridSampler2d, {{"input", x},
                                                            {"grid", ident},
                                                            {"interpolation_mode", I(mode)},
                                                            {"padding_mode", I(0)},
                                                            {"align_corners", B(true)}})),
              (std::vector<double>{1, 2, 3, 4, 5, 6}))
        << "mode " << mode;
  // Bilinear at the centre of the four top-left pixels; a point beyond the
  // right edge reads zeros, the border value or the reflection.
  const Tensor pts = make_tensor(DType::Float32, {1, 1, 2, 2}, {-0.5, 0, 2, -1});
  const std::vector<double> zeros = values(run_op_tensor(
      OpKind::kGridSampler2d,
      {{"input", x}, {"grid", pts}, {"interpolation_mode", I(0)}, {"padding_mode", I(0)}, {"align_corners", B(true)}}));
  EXPECT_NEAR(zeros[0], (1 + 2 + 4 + 5) / 4.0, 1e-6);
  EXPECT_EQ(zeros[1], 0.0);  // x = 2 is column 3, one right of the last
  const std::vector<double> border = values(run_op_tensor(
      OpKind::kGridSampler2d,
      {{"input", x}, {"grid", pts}, {"interpolation_mode", I(0)}, {"padding_mode", I(1)}, {"align_corners", B(true)}}));
  EXPECT_EQ(border[1], 3.0);
  const std::vector<double> mirror = values(run_op_tensor(
      OpKind::kGridSampler2d,
      {{"input", x}, {"grid", pts}, {"interpolation_mode", I(0)}, {"padding_mode", I(2)}, {"align_corners", B(true)}}));
  EXPECT_EQ(mirror[1], 2.0);  // column 3 mirrors about column 2 to column 1
  // 3-d: trilinear at the centre of a 2 x 2 x 2 cube is its mean.
  const Tensor cube = make_tensor(DType::Float64, {1, 1, 2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  const Tensor centre = make_tensor(DType::Float64, {1, 1, 1, 1, 3}, {0, 0, 0});
  EXPECT_NEAR(run_op_tensor(OpKind::kGridSampler3d, {{"input", cube},
                                                     {"grid", centre},
                                                     {"interpolation_mode", I(0)},
                                                     {"padding_mode", I(0)},
                                                     {"align_corners", B(false)}})
                  .item(),
              3.5, 1e-12);
}

// NaN as PyTorch 2.11's CPU kernels treat it (values taken from it): a NaN
// grid point samples NaN bilinearly, 0 at the nearest entry (outside), and
// the border clamps it to 0; a max pool's every NaN takes over, so the last
// NaN's index is given.
TEST(VolumeKernels, NanGridPointsAndNanWindowsAsAten) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = make_tensor(DType::Float32, {1, 1, 2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor pts = make_tensor(DType::Float32, {1, 1, 1, 2}, {nan, 0});
  auto sample = [&](int64_t mode, int64_t padding) {
    return run_op_tensor(OpKind::kGridSampler2d, {{"input", x},
                                                  {"grid", pts},
                                                  {"interpolation_mode", I(mode)},
                                                  {"padding_mode", I(padding)},
                                                  {"align_corners", B(true)}})
        .item();
  };
  EXPECT_TRUE(std::isnan(sample(0, 0)));
  EXPECT_EQ(sample(1, 0), 0.0);
  // Border: x clamped to column 0, y = 0 lies between the rows: (1 + 4) / 2.
  EXPECT_NEAR(sample(0, 1), 2.5, 1e-6);
  const Tensor v = make_tensor(DType::Float32, {1, 1, 1, 2, 2}, {nan, 1, nan, 2});
  auto pooled = run_op(OpKind::kMaxPool3dWithIndices, {{"self", v}, {"kernel_size", Is({1, 2, 2})}}, 2);
  ASSERT_TRUE(pooled.has_value()) << pooled.status().message();
  EXPECT_TRUE(std::isnan(std::get<Tensor>((*pooled)[0]).item()));
  EXPECT_EQ(std::get<Tensor>((*pooled)[1]).item(), 2);
  auto adaptive = run_op(OpKind::kAdaptiveMaxPool3d, {{"self", v}, {"output_size", Is({1, 1, 1})}}, 2);
  ASSERT_TRUE(adaptive.has_value()) << adaptive.status().message();
  EXPECT_EQ(std::get<Tensor>((*adaptive)[1]).item(), 2);
}

}  // namespace
}  // namespace kiln::cpu
