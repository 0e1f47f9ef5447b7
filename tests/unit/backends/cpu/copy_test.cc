#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "unit/backends/cpu/op_test_helpers.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using namespace testing;

TEST(CopyKernels, CloneAndContiguousOfTransposedView) {
  const std::vector<double> v = {1, 2, 3, 4, 5, 6};
  Tensor x = transposed(DType::Float32, v, 2, 3);
  ASSERT_FALSE(x.is_contiguous());
  for (OpKind op : {OpKind::kClone, OpKind::kContiguous, OpKind::kLiftFreshCopy}) {
    Tensor out = run_op_tensor(op, {{"self", x}});
    EXPECT_TRUE(out.is_contiguous());
    EXPECT_EQ(out.sizes(), (Shape{2, 3}));
    EXPECT_NE(out.storage(), x.storage());
    for (int i = 0; i < 6; ++i) EXPECT_EQ(out.data<float>()[i], v[i]);
  }
}

TEST(CopyKernels, CopyBroadcastsSrcIntoSelf) {
  Tensor self = make_tensor(DType::Int32, {2, 3}, {0, 0, 0, 0, 0, 0});
  Tensor src = make_tensor(DType::Float32, {3}, {1.5, -2.5, 3});
  Tensor out = run_op_tensor(OpKind::kCopy, {{"self", self}, {"src", src}});
  EXPECT_EQ(out.dtype(), DType::Int32);
  EXPECT_EQ(values(out), (std::vector<double>{1, -2, 3, 1, -2, 3}));
  expect_error(OpKind::kCopy, {{"self", self}, {"src", make_tensor(DType::Float32, {4}, {})}}, "broadcast");
}

TEST(CopyKernels, ToDtype) {
  Tensor x = make_tensor(DType::Float32, {4}, {-1.7, 0, 2.5, 300});
  Tensor i = run_op_tensor(OpKind::kTo, {{"self", x}, {"dtype", D(DType::Int64)}});
  EXPECT_EQ(i.dtype(), DType::Int64);
  EXPECT_EQ(values(i), (std::vector<double>{-1, 0, 2, 300}));
  Tensor b = run_op_tensor(OpKind::kToCopy, {{"self", x}, {"dtype", D(DType::Bool)}});
  EXPECT_EQ(values(b), (std::vector<double>{1, 0, 1, 1}));
  Tensor h = run_op_tensor(OpKind::kToDtypeLayout, {{"self", x}, {"dtype", D(DType::Float16)}});
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(h.value_at(0), static_cast<float>(Half(-1.7f)));
  // Without a dtype, _to_copy is a plain copy.
  Tensor c = run_op_tensor(OpKind::kToCopy, {{"self", x}, {"dtype", None()}, {"layout", None()}});
  EXPECT_EQ(c.dtype(), DType::Float32);
  EXPECT_NE(c.storage(), x.storage());
  Tensor bf = make_tensor(DType::BFloat16, {1}, {3.0});
  EXPECT_EQ(run_op_tensor(OpKind::kTo, {{"self", bf}, {"dtype", D(DType::Int32)}}).value_at(0), 3);
  expect_error(OpKind::kTo, {{"self", x}}, "dtype");
}

TEST(CopyKernels, OutOfRangeFloatToIntegerIsDefined) {
  // x86 semantics, as PyTorch's CPU casts: truncate toward zero; values out of
  // int32 range give INT32_MIN for types up to 32 bits, then narrow.
  Tensor x = make_tensor(DType::Float32, {5}, {3e9, -1.5, 300.7, std::nan(""), 255.9});
  Tensor i32 = run_op_tensor(OpKind::kToCopy, {{"self", x}, {"dtype", D(DType::Int32)}});
  EXPECT_EQ(values(i32), (std::vector<double>{-2147483648.0, -1, 300, -2147483648.0, 255}));
  Tensor u8 = run_op_tensor(OpKind::kToCopy, {{"self", x}, {"dtype", D(DType::UInt8)}});
  EXPECT_EQ(values(u8), (std::vector<double>{0, 255, 44, 0, 255}));
  Tensor i64 = run_op_tensor(OpKind::kToCopy, {{"self", x}, {"dtype", D(DType::Int64)}});
  EXPECT_EQ(i64.data<int64_t>()[0], 3000000000);
  EXPECT_EQ(i64.data<int64_t>()[3], std::numeric_limits<int64_t>::min());
}

TEST(CopyKernels, TypeAs) {
  Tensor x = make_tensor(DType::Int64, {2}, {1, 2});
  Tensor other = make_tensor(DType::Float64, {5}, {});
  Tensor out = run_op_tensor(OpKind::kTypeAs, {{"self", x}, {"other", other}});
  EXPECT_EQ(out.dtype(), DType::Float64);
  EXPECT_EQ(out.sizes(), (Shape{2}));
  EXPECT_EQ(values(out), (std::vector<double>{1, 2}));
}

TEST(CopyKernels, DropoutIsIdentityInEval) {
  Tensor x = make_tensor(DType::Float32, {3}, {1, 2, 3});
  Tensor out = run_op_tensor(OpKind::kDropout, {{"input", x}, {"p", F(0.5)}, {"train", B(false)}});
  EXPECT_EQ(values(out), (std::vector<double>{1, 2, 3}));
  expect_error(OpKind::kDropout, {{"input", x}, {"p", F(0.5)}, {"train", B(true)}}, "training mode");
  expect_error(OpKind::kDropout, {{"input", x}, {"p", F(1.5)}, {"train", B(false)}}, "probability");
}

}  // namespace
}  // namespace kiln::cpu
