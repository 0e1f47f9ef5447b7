#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "unit/backends/cpu/run_op.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using testing::expect_close;
using testing::expect_error_names_node;
using testing::F;
using testing::I;
using testing::make_tensor;
using testing::run_op;
using testing::run_op_tensor;

// Random inputs: stream 1 of testing::random_tensor.
Tensor random_tensor(DType t, Shape shape, uint32_t seed) {
  return testing::random_tensor(t, std::move(shape), seed, /*stream=*/1);
}

// Reference torch.matmul for rank <= 4 operands, by explicit broadcasting of a 4-d batch index.
std::vector<double> matmul_reference(const Tensor& a, const Tensor& b, Shape* out_shape) {
  Shape as = a.sizes(), bs = b.sizes();
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  while (as.size() < 4) as.insert(as.begin(), 1);
  while (bs.size() < 4) bs.insert(bs.begin(), 1);
  const int64_t n = as[2], k = as[3], m = bs[3];
  Shape batch = {std::max(as[0], bs[0]), std::max(as[1], bs[1])};
  const size_t batch_rank = std::max(a.dim(), b.dim()) > 2 ? static_cast<size_t>(std::max(a.dim(), b.dim()) - 2) : 0;
  out_shape->assign(batch.end() - static_cast<int64_t>(batch_rank), batch.end());
  if (!a1) out_shape->push_back(n);
  if (!b1) out_shape->push_back(m);
  std::vector<double> out;
  for (int64_t i0 = 0; i0 < batch[0]; ++i0)
    for (int64_t i1 = 0; i1 < batch[1]; ++i1)
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < m; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < k; ++j) {
            const int64_t ai = (((as[0] == 1 ? 0 : i0) * as[1] + (as[1] == 1 ? 0 : i1)) * n + r) * k + j;
            const int64_t bi = (((bs[0] == 1 ? 0 : i0) * bs[1] + (bs[1] == 1 ? 0 : i1)) * k + j) * m + c;
            acc += a.value_at(ai) * b.value_at(bi);
          }
          out.push_back(acc);
        }
  return out;
}

TEST(LinalgKernels, MmMatchesNaiveProduct) {
  for (DType t : {DType::Float32, DType::Float64}) {
    Tensor a = random_tensor(t, {5, 7}, 1), b = random_tensor(t, {7, 3}, 2);
    Tensor out = run_op_tensor(OpKind::kMm, {{"self", a}, {"mat2", b}});
    EXPECT_EQ(out.dtype(), t);
    EXPECT_EQ(out.sizes(), (Shape{5, 3}));
    Shape s;
    expect_close(out, matmul_reference(a, b, &s), t == DType::Float32 ? 1e-5 : 1e-12);
  }
}

TEST(LinalgKernels, MmReducedPrecisionAndIntegers) {
  for (DType t : {DType::Float16, DType::BFloat16}) {
    Tensor a = random_tensor(t, {4, 16}, 3), b = random_tensor(t, {16, 5}, 4);
    Tensor out = run_op_tensor(OpKind::kMm, {{"self", a}, {"mat2", b}});
    EXPECT_EQ(out.dtype(), t);
    Shape s;
    // Inputs are exact in float32; only the final rounding differs.
    expect_close(out, matmul_reference(a, b, &s), t == DType::Float16 ? 2e-3 : 1e-2);
  }
  Tensor a = make_tensor(DType::Int32, {2, 2}, {1, -2, 3, 4});
  Tensor b = make_tensor(DType::Int32, {2, 3}, {5, 6, 7, -8, 9, 10});
  Tensor out = run_op_tensor(OpKind::kMm, {{"self", a}, {"mat2", b}});
  EXPECT_EQ(out.dtype(), DType::Int32);
  const int64_t want[] = {21, -12, -13, -17, 54, 61};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.int_at(i), want[i]);
}

TEST(LinalgKernels, MmNonContiguousOperand) {
  Tensor base = random_tensor(DType::Float32, {7, 5}, 5);
  Tensor a = base.as_strided({5, 7}, {1, 5}, 0);  // base transposed
  Tensor b = random_tensor(DType::Float32, {7, 2}, 6);
  Tensor out = run_op_tensor(OpKind::kMm, {{"self", a}, {"mat2", b}});
  Shape s;
  expect_close(out, matmul_reference(a.contiguous(), b, &s), 1e-5);
}

TEST(LinalgKernels, BmmAndShapeErrors) {
  Tensor a = random_tensor(DType::Float32, {3, 2, 4}, 7), b = random_tensor(DType::Float32, {3, 4, 5}, 8);
  Tensor out = run_op_tensor(OpKind::kBmm, {{"self", a}, {"mat2", b}});
  EXPECT_EQ(out.sizes(), (Shape{3, 2, 5}));
  Shape s;
  expect_close(out, matmul_reference(a, b, &s), 1e-5);
  expect_error_names_node(run_op(OpKind::kBmm, {{"self", a}, {"mat2", random_tensor(DType::Float32, {2, 4, 5}, 9)}}));
  expect_error_names_node(run_op(OpKind::kMm, {{"self", random_tensor(DType::Float32, {2, 3}, 1)},
                                               {"mat2", random_tensor(DType::Float32, {4, 2}, 2)}}));
  expect_error_names_node(run_op(OpKind::kMm, {{"self", random_tensor(DType::Float32, {2, 3}, 1)},
                                               {"mat2", random_tensor(DType::Float64, {3, 2}, 2)}}));
}

TEST(LinalgKernels, MatmulRankCombinations) {
  struct Case {
    Shape a, b, out;
  };
  const Case cases[] = {
      {{4}, {4}, {}},                           // dot
      {{4}, {4, 3}, {3}},                       // vector x matrix
      {{2, 4}, {4}, {2}},                       // matrix x vector
      {{2, 4}, {4, 3}, {2, 3}},                 // mm
      {{5, 2, 4}, {4}, {5, 2}},                 // batch x vector
      {{4}, {5, 4, 3}, {5, 3}},                 // vector x batch
      {{5, 2, 4}, {4, 3}, {5, 2, 3}},           // batch x matrix
      {{2, 4}, {5, 4, 3}, {5, 2, 3}},           // matrix x batch
      {{2, 1, 3, 4}, {5, 4, 2}, {2, 5, 3, 2}},  // broadcast batch dims
      {{1, 6, 3, 4}, {2, 1, 4, 2}, {2, 6, 3, 2}},
  };
  uint32_t seed = 10;
  for (const Case& c : cases) {
    Tensor a = random_tensor(DType::Float32, c.a, seed++), b = random_tensor(DType::Float32, c.b, seed++);
    Tensor out = run_op_tensor(OpKind::kMatmul, {{"self", a}, {"other", b}});
    EXPECT_EQ(out.sizes(), c.out) << shape_to_string(c.a) << " x " << shape_to_string(c.b);
    Shape ref_shape;
    std::vector<double> ref = matmul_reference(a, b, &ref_shape);
    EXPECT_EQ(ref_shape, c.out);
    expect_close(out, ref, 1e-5);
  }
  expect_error_names_node(run_op(OpKind::kMatmul, {{"self", random_tensor(DType::Float32, {3, 2, 4}, 1)},
                                                   {"other", random_tensor(DType::Float32, {2, 4, 2}, 2)}}));
  expect_error_names_node(run_op(OpKind::kMatmul, {{"self", Tensor::scalar(DType::Float32, 1)},
                                                   {"other", random_tensor(DType::Float32, {2}, 2)}}));
}

TEST(LinalgKernels, AddmmWithScalarsAndBroadcastSelf) {
  Tensor a = random_tensor(DType::Float32, {3, 4}, 20), b = random_tensor(DType::Float32, {4, 2}, 21);
  Tensor bias = make_tensor(DType::Float32, {2}, {0.5, -1.5});
  Tensor out =
      run_op_tensor(OpKind::kAddmm, {{"self", bias}, {"mat1", a}, {"mat2", b}, {"beta", F(2.0)}, {"alpha", F(0.5)}});
  Shape s;
  std::vector<double> ref = matmul_reference(a, b, &s);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = 0.5 * ref[i] + 2.0 * bias.value_at(static_cast<int64_t>(i % 2));
  expect_close(out, ref, 1e-5);
  // beta = 0 ignores self, even NaN.
  Tensor nan_self = make_tensor(DType::Float32, {3, 2}, std::vector<double>(6, std::nan("")));
  Tensor z = run_op_tensor(OpKind::kAddmm, {{"self", nan_self}, {"mat1", a}, {"mat2", b}, {"beta", I(0)}});
  expect_close(z, matmul_reference(a, b, &s), 1e-5);
  expect_error_names_node(
      run_op(OpKind::kAddmm, {{"self", make_tensor(DType::Float32, {3}, {1, 2, 3})}, {"mat1", a}, {"mat2", b}}));
}

TEST(LinalgKernels, BaddbmmDefaultsAndHalf) {
  Tensor a = random_tensor(DType::BFloat16, {2, 3, 4}, 30), b = random_tensor(DType::BFloat16, {2, 4, 5}, 31);
  Tensor self = random_tensor(DType::BFloat16, {2, 1, 5}, 32);
  Tensor out = run_op_tensor(OpKind::kBaddbmm, {{"self", self}, {"batch1", a}, {"batch2", b}});
  EXPECT_EQ(out.dtype(), DType::BFloat16);
  EXPECT_EQ(out.sizes(), (Shape{2, 3, 5}));
  Shape s;
  std::vector<double> ref = matmul_reference(a, b, &s);
  for (int64_t bi = 0; bi < 2; ++bi)
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < 5; ++c) ref[static_cast<size_t>((bi * 3 + r) * 5 + c)] += self.value_at(bi * 5 + c);
  expect_close(out, ref, 1e-2);
}

TEST(LinalgKernels, LinearWithAndWithoutBias) {
  Tensor x = random_tensor(DType::Float32, {2, 3, 6}, 40), w = random_tensor(DType::Float32, {4, 6}, 41);
  Tensor bias = random_tensor(DType::Float32, {4}, 42);
  Tensor out = run_op_tensor(OpKind::kLinear, {{"input", x}, {"weight", w}, {"bias", bias}});
  EXPECT_EQ(out.sizes(), (Shape{2, 3, 4}));
  std::vector<double> ref;
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t o = 0; o < 4; ++o) {
      double acc = bias.value_at(o);
      for (int64_t i = 0; i < 6; ++i) acc += x.value_at(r * 6 + i) * w.value_at(o * 6 + i);
      ref.push_back(acc);
    }
  expect_close(out, ref, 1e-5);
  Tensor nb = run_op_tensor(OpKind::kLinear, {{"input", x}, {"weight", w}});
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t o = 0; o < 4; ++o) ref[static_cast<size_t>(r * 4 + o)] -= bias.value_at(o);
  expect_close(nb, ref, 1e-5);
  // A 1-d input gives a 1-d output.
  Tensor v = run_op_tensor(OpKind::kLinear, {{"input", random_tensor(DType::Float32, {6}, 43)}, {"weight", w}});
  EXPECT_EQ(v.sizes(), (Shape{4}));
  Tensor h = run_op_tensor(
      OpKind::kLinear,
      {{"input", x.to(DType::Float16)}, {"weight", w.to(DType::Float16)}, {"bias", bias.to(DType::Float16)}});
  EXPECT_EQ(h.dtype(), DType::Float16);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t o = 0; o < 4; ++o) ref[static_cast<size_t>(r * 4 + o)] += bias.value_at(o);
  expect_close(h, ref, 1e-2);
  expect_error_names_node(
      run_op(OpKind::kLinear, {{"input", x}, {"weight", random_tensor(DType::Float32, {4, 5}, 1)}}));
  expect_error_names_node(
      run_op(OpKind::kLinear, {{"input", x}, {"weight", w}, {"bias", random_tensor(DType::Float32, {3}, 1)}}));
}

TEST(LinalgKernels, EmptyInnerDimGivesZeros) {
  Tensor a = Tensor::zeros(DType::Float32, {2, 0}), b = Tensor::zeros(DType::Float32, {0, 3});
  Tensor out = run_op_tensor(OpKind::kMm, {{"self", a}, {"mat2", b}});
  EXPECT_EQ(out.sizes(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.value_at(i), 0.0);
}

}  // namespace
}  // namespace kiln::cpu
