// Kernels first met in transformers' training-dialect graphs: diff, __and__, to.device.
#include <gtest/gtest.h>

#include "backends/cpu/kernel.h"
#include "unit/backends/cpu/run_op.h"

namespace kiln::cpu {
namespace {

using testing::make_tensor;
using testing::run_op_tensor;

TEST(DiffKernel, FirstAndSecondOrderWithPrepend) {
  Tensor x = make_tensor(DType::Int64, {2, 4}, {1, 4, 9, 16, 0, 1, 0, 1});
  Tensor d = run_op_tensor(ir::OpKind::kDiff, {{"self", x}});
  ASSERT_EQ(d.sizes(), (Shape{2, 3}));
  const int64_t want[] = {3, 5, 7, 1, -1, 1};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(d.int_at(i), want[i]);
  Tensor d2 = run_op_tensor(ir::OpKind::kDiff, {{"self", x}, {"n", ir::Arg(int64_t{2})}});
  ASSERT_EQ(d2.sizes(), (Shape{2, 2}));
  const int64_t want2[] = {2, 2, -2, 2};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(d2.int_at(i), want2[i]);
  // Along dim 0 with a prepended row of zeros: first row is x[0] itself.
  Tensor zeros = Tensor::zeros(DType::Int64, {1, 4});
  Tensor d0 = run_op_tensor(ir::OpKind::kDiff, {{"self", x}, {"dim", ir::Arg(int64_t{0})}, {"prepend", zeros}});
  ASSERT_EQ(d0.sizes(), (Shape{2, 4}));
  const int64_t want0[] = {1, 4, 9, 16, -1, -3, -9, -15};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(d0.int_at(i), want0[i]);
}

TEST(DiffKernel, BoolUsesInequalityAndBadPrependIsAnError) {
  Tensor b = make_tensor(DType::Bool, {4}, {1, 1, 0, 1});
  Tensor d = run_op_tensor(ir::OpKind::kDiff, {{"self", b}});
  ASSERT_EQ(d.dtype(), DType::Bool);
  const int64_t want[] = {0, 1, 1};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(d.int_at(i), want[i]);
  auto bad = testing::run_op(ir::OpKind::kDiff, {{"self", b}, {"prepend", Tensor::zeros(DType::Float32, {1})}});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("test_node"), std::string::npos);
}

TEST(AndKernel, MatchesLogicalAndOnBools) {
  Tensor a = make_tensor(DType::Bool, {4}, {1, 1, 0, 0});
  Tensor b = make_tensor(DType::Bool, {4}, {1, 0, 1, 0});
  Tensor r = run_op_tensor(ir::OpKind::kAndTensor, {{"self", a}, {"other", b}});
  ASSERT_EQ(r.dtype(), DType::Bool);
  const int64_t want[] = {1, 0, 0, 0};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.int_at(i), want[i]);
}

TEST(ToDeviceKernel, ConvertsDtypeOnTheHost) {
  Tensor x = make_tensor(DType::Float32, {3}, {1.5, -2.25, 3.0});
  Tensor r = run_op_tensor(ir::OpKind::kToDevice,
                           {{"self", x}, {"device", ir::Arg(ir::Device{})}, {"dtype", ir::Arg(DType::Int64)}});
  ASSERT_EQ(r.dtype(), DType::Int64);
  EXPECT_EQ(r.int_at(0), 1);
  EXPECT_EQ(r.int_at(1), -2);  // truncation toward zero, as PyTorch's float->int conversion
  EXPECT_EQ(r.int_at(2), 3);
}

}  // namespace
}  // namespace kiln::cpu
