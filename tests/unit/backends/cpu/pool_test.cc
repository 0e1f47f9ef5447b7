#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "unit/backends/cpu/run_op.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using testing::B;
using testing::expect_close_equal_nan;
using testing::expect_error_names_node;
using testing::I;
using testing::Is;
using testing::make_tensor;
using testing::run_op;
using testing::run_op_tensor;

// Random inputs: stream 3 of testing::random_tensor.
Tensor random_tensor(DType t, Shape shape, uint32_t seed) {
  return testing::random_tensor(t, std::move(shape), seed, /*stream=*/3);
}

const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Window {
  int64_t k = 1, s = 1, p = 0, d = 1;
};

// Reference max pooling of planes [P, H, W] over explicit windows; out_h/out_w are given by the test.
void reference_max_pool(const Tensor& x, int64_t P, int64_t H, int64_t W, Window wh, Window ww, int64_t OH, int64_t OW,
                        std::vector<double>* values, std::vector<int64_t>* indices) {
  for (int64_t p = 0; p < P; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t best_i = -1;
        for (int64_t a = 0; a < wh.k; ++a)
          for (int64_t b = 0; b < ww.k; ++b) {
            const int64_t h = oh * wh.s - wh.p + a * wh.d, w = ow * ww.s - ww.p + b * ww.d;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            const double v = x.value_at((p * H + h) * W + w);
            if (best_i < 0 || v > best || std::isnan(v)) {
              best = v;
              best_i = h * W + w;
            }
          }
        values->push_back(best);
        indices->push_back(best_i);
      }
}

TEST(PoolKernels, MaxPoolHandComputed) {
  Tensor x = make_tensor(DType::Float32, {1, 1, 4, 4}, {1, 2, 5, 3, 4, 0, 1, 8, 7, 7, 2, 2, 0, 9, 3, 6});
  auto r = run_op(OpKind::kMaxPool2dWithIndices, {{"self", x}, {"kernel_size", Is({2, 2})}}, 2);
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  Tensor values = std::get<Tensor>((*r)[0]), idx = std::get<Tensor>((*r)[1]);
  EXPECT_EQ(values.sizes(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(idx.dtype(), DType::Int64);
  expect_close_equal_nan(values, {4, 8, 9, 6}, 0);
  const int64_t want_idx[] = {4, 7, 13, 15};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(idx.int_at(i), want_idx[i]);
  // The single-output op gives the same values.
  Tensor only = run_op_tensor(OpKind::kMaxPool2d, {{"self", x}, {"kernel_size", Is({2})}, {"stride", Is({})}});
  expect_close_equal_nan(only, {4, 8, 9, 6}, 0);
}

TEST(PoolKernels, MaxPoolPaddingStrideDilationCeil) {
  struct Case {
    Window h, w;
    bool ceil;
    int64_t OH, OW;
  };
  const Case cases[] = {
      {{3, 2, 1, 1}, {3, 2, 1, 1}, false, 3, 4},  // H 6, W 7
      {{3, 2, 0, 1}, {3, 2, 0, 1}, true, 3, 3},   // ceil adds a partial last window
      {{3, 3, 1, 1}, {2, 2, 1, 1}, true, 3, 4},   // ceil, but a window starting in the right padding is dropped
      {{2, 1, 1, 2}, {3, 2, 0, 2}, false, 6, 2},  // dilation
  };
  Tensor x = random_tensor(DType::Float32, {2, 3, 6, 7}, 1);
  for (const Case& c : cases) {
    auto r = run_op(OpKind::kMaxPool2dWithIndices,
                    {{"self", x},
                     {"kernel_size", Is({c.h.k, c.w.k})},
                     {"stride", Is({c.h.s, c.w.s})},
                     {"padding", Is({c.h.p, c.w.p})},
                     {"dilation", Is({c.h.d, c.w.d})},
                     {"ceil_mode", B(c.ceil)}},
                    2);
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    Tensor values = std::get<Tensor>((*r)[0]), idx = std::get<Tensor>((*r)[1]);
    ASSERT_EQ(values.sizes(), (Shape{2, 3, c.OH, c.OW}));
    std::vector<double> want;
    std::vector<int64_t> want_idx;
    reference_max_pool(x, 6, 6, 7, c.h, c.w, c.OH, c.OW, &want, &want_idx);
    expect_close_equal_nan(values, want, 0);
    for (size_t i = 0; i < want_idx.size(); ++i) EXPECT_EQ(idx.int_at(static_cast<int64_t>(i)), want_idx[i]);
  }
}

TEST(PoolKernels, MaxPoolNaNIntegersAndUnbatched) {
  Tensor x = make_tensor(DType::BFloat16, {1, 2, 2}, {1, kNaN, 3, 2});
  auto r = run_op(OpKind::kMaxPool2dWithIndices, {{"self", x}, {"kernel_size", Is({2})}}, 2);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(std::get<Tensor>((*r)[0]).sizes(), (Shape{1, 1, 1}));
  EXPECT_TRUE(std::isnan(std::get<Tensor>((*r)[0]).item()));
  EXPECT_EQ(std::get<Tensor>((*r)[1]).item_int(), 1);
  Tensor xi = make_tensor(DType::Int64, {1, 1, 2, 3}, {-5, -9, -7, -8, -6, -1});
  Tensor vi = run_op_tensor(OpKind::kMaxPool2d, {{"self", xi}, {"kernel_size", Is({2})}, {"stride", Is({1})}});
  EXPECT_EQ(vi.dtype(), DType::Int64);
  EXPECT_EQ(vi.int_at(0), -5);
  EXPECT_EQ(vi.int_at(1), -1);
}

// Reference average pooling for planes [P, H, W], window by window.
std::vector<double> reference_avg_pool(const Tensor& x, int64_t P, int64_t H, int64_t W, Window wh, Window ww,
                                       int64_t OH, int64_t OW, bool count_include_pad, int64_t divisor_override) {
  std::vector<double> out;
  for (int64_t p = 0; p < P; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double sum = 0;
        int64_t inside = 0, in_padded = 0;
        for (int64_t a = 0; a < wh.k; ++a)
          for (int64_t b = 0; b < ww.k; ++b) {
            const int64_t h = oh * wh.s - wh.p + a, w = ow * ww.s - ww.p + b;
            // Positions past the padded border (ceil_mode overhang) count for nothing.
            if (h >= H + wh.p || w >= W + ww.p) continue;
            ++in_padded;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            ++inside;
            sum += x.value_at((p * H + h) * W + w);
          }
        const double div = divisor_override ? static_cast<double>(divisor_override)
                                            : static_cast<double>(count_include_pad ? in_padded : inside);
        out.push_back(sum / div);
      }
  return out;
}

TEST(PoolKernels, AvgPoolVariants) {
  Tensor x = random_tensor(DType::Float32, {2, 2, 5, 6}, 2);
  struct Case {
    Window h, w;
    bool ceil, include_pad;
    int64_t divisor, OH, OW;
  };
  const Case cases[] = {
      {{2, 2, 0}, {2, 2, 0}, false, true, 0, 2, 3},
      {{3, 2, 1}, {3, 2, 1}, false, true, 0, 3, 3},
      {{3, 2, 1}, {3, 2, 1}, false, false, 0, 3, 3},
      {{2, 2, 1}, {4, 3, 1}, true, true, 0, 3, 3},  // ceil_mode overhang is not counted even with padding
      {{2, 2, 1}, {4, 3, 1}, true, false, 0, 3, 3},
      {{3, 1, 1}, {2, 2, 0}, false, true, 5, 5, 3},
  };
  for (const Case& c : cases) {
    std::vector<std::pair<std::string, testing::OpArg>> args = {{"self", x},
                                                                {"kernel_size", Is({c.h.k, c.w.k})},
                                                                {"stride", Is({c.h.s, c.w.s})},
                                                                {"padding", Is({c.h.p, c.w.p})},
                                                                {"ceil_mode", B(c.ceil)},
                                                                {"count_include_pad", B(c.include_pad)}};
    if (c.divisor) args.push_back({"divisor_override", I(c.divisor)});
    Tensor out = run_op_tensor(OpKind::kAvgPool2d, args);
    ASSERT_EQ(out.sizes(), (Shape{2, 2, c.OH, c.OW}));
    expect_close_equal_nan(out, reference_avg_pool(x, 4, 5, 6, c.h, c.w, c.OH, c.OW, c.include_pad, c.divisor), 1e-6);
  }
  // Hand-computed: 3x3 window with padding 1 at the corner sees 4 values.
  Tensor ones = make_tensor(DType::Float32, {1, 2, 2}, {1, 2, 3, 4});
  Tensor with_pad = run_op_tensor(
      OpKind::kAvgPool2d, {{"self", ones}, {"kernel_size", Is({3})}, {"stride", Is({2})}, {"padding", Is({1})}});
  EXPECT_EQ(with_pad.sizes(), (Shape{1, 1, 1}));
  EXPECT_NEAR(with_pad.item(), 10.0 / 9.0, 1e-6);
  Tensor no_pad = run_op_tensor(OpKind::kAvgPool2d, {{"self", ones},
                                                     {"kernel_size", Is({3})},
                                                     {"stride", Is({2})},
                                                     {"padding", Is({1})},
                                                     {"count_include_pad", B(false)}});
  EXPECT_NEAR(no_pad.item(), 2.5, 1e-6);
}

TEST(PoolKernels, AdaptiveAvgPoolNonDivisible) {
  Tensor x = random_tensor(DType::Float64, {2, 5, 7}, 3);
  Tensor out = run_op_tensor(OpKind::kAdaptiveAvgPool2d, {{"self", x}, {"output_size", Is({3, 4})}});
  ASSERT_EQ(out.sizes(), (Shape{2, 3, 4}));
  std::vector<double> want;
  for (int64_t p = 0; p < 2; ++p)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        const auto h0 = static_cast<int64_t>(std::floor(i * 5.0 / 3)),
                   h1 = static_cast<int64_t>(std::ceil((i + 1) * 5.0 / 3));
        const auto w0 = static_cast<int64_t>(std::floor(j * 7.0 / 4)),
                   w1 = static_cast<int64_t>(std::ceil((j + 1) * 7.0 / 4));
        double sum = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) sum += x.value_at((p * 5 + h) * 7 + w);
        want.push_back(sum / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
  expect_close_equal_nan(out, want, 1e-12);
  // Upsampling (output larger than input) repeats values; the internal op behaves the same.
  Tensor small = make_tensor(DType::Float16, {1, 1, 1, 2}, {1, 3});
  Tensor up = run_op_tensor(OpKind::kAdaptiveAvgPool2dInternal, {{"self", small}, {"output_size", Is({2, 3})}});
  EXPECT_EQ(up.dtype(), DType::Float16);
  expect_close_equal_nan(up, {1, 2, 3, 1, 2, 3}, 0);
  Tensor global = run_op_tensor(OpKind::kAdaptiveAvgPool2d, {{"self", x}, {"output_size", Is({1})}});
  EXPECT_EQ(global.sizes(), (Shape{2, 1, 1}));
}

TEST(PoolKernels, Errors) {
  Tensor x = random_tensor(DType::Float32, {1, 1, 4, 4}, 4);
  expect_error_names_node(run_op(OpKind::kMaxPool2d, {{"self", x}, {"kernel_size", Is({0})}}));
  expect_error_names_node(run_op(OpKind::kMaxPool2d, {{"self", x}, {"kernel_size", Is({2})}, {"padding", Is({2})}}));
  expect_error_names_node(run_op(OpKind::kMaxPool2d, {{"self", x}, {"kernel_size", Is({5})}}));
  expect_error_names_node(
      run_op(OpKind::kMaxPool2d, {{"self", random_tensor(DType::Float32, {4, 4}, 1)}, {"kernel_size", Is({2})}}));
  expect_error_names_node(run_op(OpKind::kMaxPool2d, {{"self", x}, {"kernel_size", Is({2, 2, 2})}}));
  expect_error_names_node(
      run_op(OpKind::kAvgPool2d, {{"self", x}, {"kernel_size", Is({2})}, {"divisor_override", I(0)}}));
  // Sizes read from a file that would overflow the output are rejected, not allocated.
  expect_error_names_node(
      run_op(OpKind::kAdaptiveAvgPool2d, {{"self", x}, {"output_size", Is({int64_t{1} << 40, int64_t{1} << 40})}}));
  expect_error_names_node(run_op(OpKind::kAdaptiveAvgPool2d,
                                 {{"self", make_tensor(DType::Int64, {1, 2, 2}, {})}, {"output_size", Is({1, 1})}}));
}

}  // namespace
}  // namespace kiln::cpu
