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
using testing::expect_close;
using testing::expect_error_names_node;
using testing::F;
using testing::I;
using testing::Is;
using testing::make_tensor;
using testing::OpArg;
using testing::run_op;
using testing::run_op_tensor;

// Random inputs: stream 5 of testing::random_tensor, scaled by `scale` around `offset`.
Tensor random_tensor(DType t, Shape shape, uint32_t seed, double scale = 1.0, double offset = 0.0) {
  return testing::random_tensor(t, std::move(shape), seed, /*stream=*/5, scale, offset);
}

// Mean and biased variance of `n` values starting at element `start` with step `step`, two passes in double.
void moments(const Tensor& x, int64_t start, int64_t n, int64_t step, double* mean, double* var) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x.value_at(start + i * step);
  *mean = s / static_cast<double>(n);
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += std::pow(x.value_at(start + i * step) - *mean, 2);
  *var = ss / static_cast<double>(n);
}

std::vector<double> batch_norm_reference(const Tensor& x, const Tensor* w, const Tensor* b, const Tensor& rm,
                                         const Tensor& rv, double eps) {
  const int64_t N = x.size(0), C = x.size(1), plane = x.numel() / (N * C);
  std::vector<double> out;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = (i / plane) % C;
    const double normalized = (x.value_at(i) - rm.value_at(c)) / std::sqrt(rv.value_at(c) + eps);
    out.push_back(normalized * (w ? w->value_at(c) : 1.0) + (b ? b->value_at(c) : 0.0));
  }
  return out;
}

TEST(NormKernels, BatchNormInference) {
  Tensor x = random_tensor(DType::Float32, {2, 3, 2, 2}, 1, 2.0);
  Tensor w = random_tensor(DType::Float32, {3}, 2), b = random_tensor(DType::Float32, {3}, 3);
  Tensor rm = random_tensor(DType::Float32, {3}, 4), rv = random_tensor(DType::Float32, {3}, 5, 0.5, 1.0);
  Tensor out = run_op_tensor(OpKind::kBatchNorm, {{"input", x},
                                                  {"weight", w},
                                                  {"bias", b},
                                                  {"running_mean", rm},
                                                  {"running_var", rv},
                                                  {"training", B(false)},
                                                  {"momentum", F(0.1)},
                                                  {"eps", F(1e-3)},
                                                  {"cudnn_enabled", B(true)}});
  EXPECT_EQ(out.sizes(), x.sizes());
  expect_close(out, batch_norm_reference(x, &w, &b, rm, rv, 1e-3), 1e-5);
  Tensor plain =
      run_op_tensor(OpKind::kBatchNorm, {{"input", x.reshape({2, 3, 4}).as_strided({2, 3, 4}, {12, 4, 1}, 0)},
                                         {"running_mean", rm},
                                         {"running_var", rv},
                                         {"training", B(false)},
                                         {"momentum", F(0.1)},
                                         {"eps", F(1e-5)}});
  expect_close(plain, batch_norm_reference(x, nullptr, nullptr, rm, rv, 1e-5), 1e-5);
  // Training mode normalizes with the batch's own statistics: the inference
  // formula given the per-channel mean and biased variance computed here.
  const int64_t C = x.size(1), plane = x.numel() / (x.size(0) * C);
  Tensor mean = Tensor::zeros(DType::Float64, {C}), var = Tensor::zeros(DType::Float64, {C});
  for (int64_t i = 0; i < x.numel(); ++i) mean.data<double>()[(i / plane) % C] += x.value_at(i) / (x.numel() / C);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double d = x.value_at(i) - mean.value_at((i / plane) % C);
    var.data<double>()[(i / plane) % C] += d * d / static_cast<double>(x.numel() / C);
  }
  Tensor train = run_op_tensor(OpKind::kBatchNorm, {{"input", x},
                                                    {"running_mean", rm},
                                                    {"running_var", rv},
                                                    {"training", B(true)},
                                                    {"momentum", F(0.1)},
                                                    {"eps", F(1e-5)}});
  expect_close(train, batch_norm_reference(x, nullptr, nullptr, mean, var, 1e-5), 1e-5);
  expect_error_names_node(
      run_op(OpKind::kBatchNorm, {{"input", x}, {"training", B(false)}, {"momentum", F(0.1)}, {"eps", F(1e-5)}}));
  expect_error_names_node(run_op(OpKind::kBatchNorm, {{"input", x},
                                                      {"running_mean", random_tensor(DType::Float32, {4}, 1)},
                                                      {"running_var", rv},
                                                      {"training", B(false)},
                                                      {"momentum", F(0.1)},
                                                      {"eps", F(1e-5)}}));
}

TEST(NormKernels, NativeBatchNormNoTrainingOutputs) {
  Tensor x = random_tensor(DType::Float16, {2, 3, 5}, 6);
  Tensor w = random_tensor(DType::Float32, {3}, 7), b = random_tensor(DType::Float32, {3}, 8);
  Tensor rm = random_tensor(DType::Float32, {3}, 9), rv = random_tensor(DType::Float32, {3}, 10, 0.5, 1.0);
  auto r = run_op(OpKind::kNativeBatchNormNoTraining,
                  {{"input", x},
                   {"weight", w},
                   {"bias", b},
                   {"running_mean", rm},
                   {"running_var", rv},
                   {"momentum", F(0.1)},
                   {"eps", F(1e-5)}},
                  3);
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  Tensor out = std::get<Tensor>((*r)[0]), sm = std::get<Tensor>((*r)[1]), si = std::get<Tensor>((*r)[2]);
  EXPECT_EQ(out.dtype(), DType::Float16);
  expect_close(out, batch_norm_reference(x, &w, &b, rm, rv, 1e-5), 2e-3);
  EXPECT_EQ(sm.sizes(), (Shape{0}));
  EXPECT_EQ(si.sizes(), (Shape{0}));
  EXPECT_EQ(sm.dtype(), DType::Float32);  // mixed precision: statistics in float32
  auto r32 = run_op(OpKind::kNativeBatchNormNoTraining,
                    {{"input", x.to(DType::Float32)},
                     {"weight", w},
                     {"bias", b},
                     {"running_mean", rm},
                     {"running_var", rv},
                     {"momentum", F(0.1)},
                     {"eps", F(1e-5)}},
                    3);
  ASSERT_TRUE(r32.has_value());
  EXPECT_EQ(std::get<Tensor>((*r32)[1]).dtype(), DType::Float32);
}

std::vector<double> layer_norm_reference(const Tensor& x, int64_t rows, int64_t n, const Tensor* w, const Tensor* b,
                                         double eps, std::vector<double>* means, std::vector<double>* rstds) {
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r) {
    double mean, var;
    moments(x, r * n, n, 1, &mean, &var);
    if (means) means->push_back(mean);
    if (rstds) rstds->push_back(1 / std::sqrt(var + eps));
    for (int64_t i = 0; i < n; ++i)
      out.push_back((x.value_at(r * n + i) - mean) / std::sqrt(var + eps) * (w ? w->value_at(i) : 1) +
                    (b ? b->value_at(i) : 0));
  }
  return out;
}

TEST(NormKernels, LayerNormAndNativeLayerNorm) {
  Tensor x = random_tensor(DType::Float32, {2, 3, 4}, 11, 3.0, 1.0);
  Tensor w = random_tensor(DType::Float32, {3, 4}, 12), b = random_tensor(DType::Float32, {3, 4}, 13);
  Tensor out =
      run_op_tensor(OpKind::kLayerNorm, {{"input", x}, {"normalized_shape", Is({3, 4})}, {"weight", w}, {"bias", b}});
  expect_close(out, layer_norm_reference(x, 2, 12, &w, &b, 1e-5, nullptr, nullptr), 1e-5);
  auto r = run_op(OpKind::kNativeLayerNorm,
                  {{"input", x},
                   {"normalized_shape", Is({4})},
                   {"weight", ir::Arg(ir::NoneArg{})},
                   {"bias", ir::Arg(ir::NoneArg{})},
                   {"eps", F(1e-2)}},
                  3);
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  std::vector<double> means, rstds;
  std::vector<double> want = layer_norm_reference(x, 6, 4, nullptr, nullptr, 1e-2, &means, &rstds);
  expect_close(std::get<Tensor>((*r)[0]), want, 1e-5);
  Tensor mean = std::get<Tensor>((*r)[1]), rstd = std::get<Tensor>((*r)[2]);
  EXPECT_EQ(mean.sizes(), (Shape{2, 3, 1}));
  EXPECT_EQ(rstd.sizes(), (Shape{2, 3, 1}));
  EXPECT_EQ(mean.dtype(), DType::Float32);
  expect_close(mean, means, 1e-6);
  expect_close(rstd, rstds, 1e-6);
}

TEST(NormKernels, LayerNormReducedPrecisionAndErrors) {
  Tensor x = random_tensor(DType::BFloat16, {3, 8}, 14, 2.0);
  Tensor w = random_tensor(DType::BFloat16, {8}, 15);
  auto r = run_op(OpKind::kNativeLayerNorm, {{"input", x}, {"normalized_shape", Is({8})}, {"weight", w}}, 3);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(std::get<Tensor>((*r)[0]).dtype(), DType::BFloat16);
  EXPECT_EQ(std::get<Tensor>((*r)[1]).dtype(), DType::BFloat16);
  expect_close(std::get<Tensor>((*r)[0]), layer_norm_reference(x, 3, 8, &w, nullptr, 1e-5, nullptr, nullptr), 2e-2);
  expect_error_names_node(run_op(OpKind::kLayerNorm, {{"input", x}, {"normalized_shape", Is({4})}}));
  expect_error_names_node(
      run_op(OpKind::kLayerNorm,
             {{"input", x}, {"normalized_shape", Is({8})}, {"weight", random_tensor(DType::BFloat16, {2, 4}, 1)}}));
  expect_error_names_node(run_op(OpKind::kLayerNorm, {{"input", x}, {"normalized_shape", Is({})}}));
  expect_error_names_node(
      run_op(OpKind::kLayerNorm, {{"input", make_tensor(DType::Int64, {2}, {1, 2})}, {"normalized_shape", Is({2})}}));
}

TEST(NormKernels, RmsNormExplicitAndDefaultEps) {
  // Small values so that eps matters.
  for (DType t : {DType::Float32, DType::Float64}) {
    Tensor x = random_tensor(t, {2, 6}, 16, 1e-4);
    Tensor w = random_tensor(t, {6}, 17);
    const double default_eps = t == DType::Float32 ? 1.1920928955078125e-07 : 2.220446049250313e-16;
    for (bool explicit_eps : {true, false}) {
      const double eps = explicit_eps ? 1e-6 : default_eps;
      std::vector<std::pair<std::string, OpArg>> args = {{"input", x}, {"normalized_shape", Is({6})}, {"weight", w}};
      if (explicit_eps) args.push_back({"eps", F(1e-6)});
      Tensor out = run_op_tensor(OpKind::kRmsNorm, args);
      std::vector<double> want;
      for (int64_t r = 0; r < 2; ++r) {
        double ms = 0;
        for (int64_t i = 0; i < 6; ++i) ms += x.value_at(r * 6 + i) * x.value_at(r * 6 + i) / 6;
        for (int64_t i = 0; i < 6; ++i) want.push_back(x.value_at(r * 6 + i) / std::sqrt(ms + eps) * w.value_at(i));
      }
      expect_close(out, want, 1e-5);
    }
  }
  Tensor h = random_tensor(DType::Float16, {4, 2, 3}, 18);
  Tensor out = run_op_tensor(OpKind::kRmsNorm, {{"input", h}, {"normalized_shape", Is({2, 3})}});
  EXPECT_EQ(out.dtype(), DType::Float16);
  EXPECT_EQ(out.sizes(), h.sizes());
  expect_error_names_node(run_op(OpKind::kRmsNorm, {{"input", h}, {"normalized_shape", Is({3, 2})}}));
}

TEST(NormKernels, GroupNormAndNativeGroupNorm) {
  Tensor x = random_tensor(DType::Float32, {2, 6, 3, 2}, 19, 2.0, 0.5);
  Tensor w = random_tensor(DType::Float32, {6}, 20), b = random_tensor(DType::Float32, {6}, 21);
  const int64_t G = 3, per_group = 2 * 3 * 2;
  std::vector<double> want, means, rstds;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t g = 0; g < G; ++g) {
      double mean, var;
      moments(x, (n * G + g) * per_group, per_group, 1, &mean, &var);
      means.push_back(mean);
      rstds.push_back(1 / std::sqrt(var + 1e-5));
      for (int64_t i = 0; i < per_group; ++i) {
        const int64_t c = g * 2 + i / 6;
        want.push_back((x.value_at((n * G + g) * per_group + i) - mean) / std::sqrt(var + 1e-5) * w.value_at(c) +
                       b.value_at(c));
      }
    }
  Tensor out = run_op_tensor(OpKind::kGroupNorm, {{"input", x}, {"num_groups", I(G)}, {"weight", w}, {"bias", b}});
  expect_close(out, want, 1e-5);
  auto r = run_op(OpKind::kNativeGroupNorm,
                  {{"input", x},
                   {"weight", w},
                   {"bias", b},
                   {"N", I(2)},
                   {"C", I(6)},
                   {"HxW", I(6)},
                   {"group", I(G)},
                   {"eps", F(1e-5)}},
                  3);
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  expect_close(std::get<Tensor>((*r)[0]), want, 1e-5);
  EXPECT_EQ(std::get<Tensor>((*r)[1]).sizes(), (Shape{2, G}));
  expect_close(std::get<Tensor>((*r)[1]), means, 1e-6);
  expect_close(std::get<Tensor>((*r)[2]), rstds, 1e-6);
  expect_error_names_node(run_op(OpKind::kGroupNorm, {{"input", x}, {"num_groups", I(4)}}));
  expect_error_names_node(run_op(
      OpKind::kGroupNorm, {{"input", x}, {"num_groups", I(3)}, {"weight", random_tensor(DType::Float32, {3}, 1)}}));
  expect_error_names_node(
      run_op(OpKind::kNativeGroupNorm,
             {{"input", x}, {"N", I(2)}, {"C", I(6)}, {"HxW", I(5)}, {"group", I(3)}, {"eps", F(1e-5)}}));
}

}  // namespace
}  // namespace kiln::cpu
