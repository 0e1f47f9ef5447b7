#include "backends/cpu/fused_elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/broadcast.h"
#include "unit/backends/cpu/op_test_helpers.h"

namespace kiln::cpu {
namespace {

using engine::ElementwiseInstr;
using engine::ElementwiseProgram;
using ir::OpKind;
using testing::F;
using testing::OpArg;
using testing::random_tensor;
using testing::Str;

ElementwiseProgram program(const std::string& text) {
  auto p = ElementwiseProgram::parse(text);
  EXPECT_TRUE(p.has_value()) << p.status().message();
  return p.has_value() ? *p : ElementwiseProgram{};
}

// The program run op by op on the reference kernels, each instruction as the
// node it stands for.
Expected<Tensor> run_reference(const ElementwiseProgram& p, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> regs = inputs;
  for (const ElementwiseInstr& in : p.instrs) {
    std::vector<std::pair<std::string, OpArg>> args = {{"self", regs[static_cast<size_t>(in.operands[0])]}};
    if (in.op == OpKind::kSiluMul)
      args = {{"a", regs[static_cast<size_t>(in.operands[0])]}, {"b", regs[static_cast<size_t>(in.operands[1])]}};
    const auto& s = in.scalars;
    switch (in.op) {
      case OpKind::kAddTensor:
      case OpKind::kSubTensor:
        args.push_back({"other", regs[static_cast<size_t>(in.operands[1])]});
        args.push_back({"alpha", F(s[0])});
        break;
      case OpKind::kMulTensor:
      case OpKind::kDivTensor: args.push_back({"other", regs[static_cast<size_t>(in.operands[1])]}); break;
      case OpKind::kAddScalar:
      case OpKind::kSubScalar:
      case OpKind::kRsubScalar:
        args.push_back({"other", F(s[0])});
        args.push_back({"alpha", F(s[1])});
        break;
      case OpKind::kMulScalar:
      case OpKind::kDivScalar: args.push_back({"other", F(s[0])}); break;
      case OpKind::kPowTensorScalar: args.push_back({"exponent", F(s[0])}); break;
      case OpKind::kClamp:
        // The program's infinite bound stands for an absent one: give the kernel none.
        if (!(std::isinf(s[0]) && s[0] < 0)) args.push_back({"min", F(s[0])});
        if (!(std::isinf(s[1]) && s[1] > 0)) args.push_back({"max", F(s[1])});
        break;
      case OpKind::kClampMin: args.push_back({"min", F(s[0])}); break;
      case OpKind::kHardtanh:
        args.push_back({"min_val", F(s[0])});
        args.push_back({"max_val", F(s[1])});
        break;
      case OpKind::kGelu: args.push_back({"approximate", ir::Arg(in.mode)}); break;
      default: break;
    }
    KILN_ASSIGN_OR_RETURN(std::vector<RtValue> out, testing::run_op(in.op, std::move(args)));
    regs.push_back(std::get<Tensor>(out[0]));
  }
  return regs.back();
}

Tensor broadcast_output(const std::vector<Tensor>& inputs) {
  Shape shape;
  for (const Tensor& t : inputs) shape = *broadcast_shapes(shape, t.sizes());
  return Tensor::zeros(inputs[0].dtype(), shape);
}

// Expects the same bits in every element. With `any_nan`, a NaN matches any
// NaN: C++ leaves the sign and payload of a NaN that two NaN operands produce
// to the compiler, which may order commutative operands either way.
void expect_same_bits(const Tensor& got, const Tensor& want, bool any_nan = false) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.sizes(), want.sizes());
  const Tensor a = got.contiguous(), b = want.contiguous();
  const size_t w = dtype_size(a.dtype());
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (any_nan && std::isnan(a.value_at(i)) && std::isnan(b.value_at(i))) continue;
    const auto* pa = static_cast<const uint8_t*>(a.raw_data()) + static_cast<size_t>(i) * w;
    const auto* pb = static_cast<const uint8_t*>(b.raw_data()) + static_cast<size_t>(i) * w;
    ASSERT_EQ(std::memcmp(pa, pb, w), 0) << "element " << i << " is " << a.value_at(i) << ", want " << b.value_at(i);
  }
}

// Runs `text` fused and op by op on `inputs`; both must give the same bits.
void expect_matches_reference(const std::string& text, const std::vector<Tensor>& inputs, bool any_nan = false) {
  const ElementwiseProgram p = program(text);
  auto want = run_reference(p, inputs);
  ASSERT_TRUE(want.has_value()) << want.status().message();
  Tensor out = broadcast_output(inputs);
  Status s = run_fused_elementwise(p, inputs, out);
  ASSERT_TRUE(s.is_ok()) << s.message();
  expect_same_bits(out, *want, any_nan);
}

// A [rows, cols] view that is the transpose of a contiguous [cols, rows] tensor.
Tensor transposed_random(DType dtype, int64_t rows, int64_t cols, uint32_t seed, double scale) {
  Tensor base = random_tensor(dtype, {cols, rows}, seed, 99, scale);
  Tensor t = base.as_strided({rows, cols}, {1, rows}, 0);
  EXPECT_FALSE(t.is_contiguous());
  return t;
}

constexpr DType kDtypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

// x: [3, 4, 5] contiguous; b: [5] broadcast; t: [4, 5] transposed view.
std::vector<Tensor> mixed_inputs(DType dtype, uint32_t seed, double scale) {
  return {random_tensor(dtype, {3, 4, 5}, seed, 1, scale), random_tensor(dtype, {5}, seed, 2, scale),
          transposed_random(dtype, 4, 5, seed, scale)};
}

constexpr const char* kArithmetic =
    "inputs 3; %3 = aten.mul.Tensor(%0, %1); %4 = aten.add.Tensor(%3, %2, 1); %5 = aten.sub.Tensor(%4, %0, 0.75); "
    "%6 = aten.add.Tensor(%5, %1, -1.5); %7 = aten.div.Tensor(%6, %2); %8 = aten.add.Scalar(%7, 0.1, 1); "
    "%9 = aten.sub.Scalar(%8, 3, 0.3); %10 = aten.rsub.Scalar(%9, 0.7, 1); %11 = aten.rsub.Scalar(%10, 2, 1.25); "
    "%12 = aten.mul.Scalar(%11, 0.1); %13 = aten.div.Scalar(%12, 3); %14 = aten.sub.Tensor(%13, %2, 1)";

constexpr const char* kMath =
    "inputs 3; %3 = aten.abs.default(%0); %4 = aten.add.Scalar(%3, 0.5, 1); %5 = aten.log.default(%4); "
    "%6 = aten.sqrt.default(%4); %7 = aten.rsqrt.default(%4); %8 = aten.reciprocal.default(%4); "
    "%9 = aten.exp.default(%2); %10 = aten.sin.default(%0); %11 = aten.cos.default(%2); "
    "%12 = aten.tanh.default(%10); %13 = aten.erf.default(%11); %14 = aten.neg.default(%13); "
    "%15 = aten.add.Tensor(%5, %6, 1); %16 = aten.mul.Tensor(%15, %7); %17 = aten.add.Tensor(%16, %8, 1); "
    "%18 = aten.add.Tensor(%17, %9, 1); %19 = aten.add.Tensor(%18, %12, 1); %20 = aten.sub.Tensor(%19, %14, 1); "
    "%21 = aten.mul.Tensor(%20, %1)";

constexpr const char* kActivations =
    "inputs 3; %3 = aten.add.Tensor(%0, %2, 1); %4 = aten.sigmoid.default(%3); %5 = aten.relu.default(%3); "
    "%6 = aten.gelu.default(%3, 'none'); %7 = aten.gelu.default(%3, 'tanh'); %8 = aten.silu.default(%3); "
    "%9 = aten.hardtanh.default(%3, -2, 2.5); %10 = aten.hardswish.default(%3); "
    "%11 = aten.hardsigmoid.default(%3); %12 = aten.clamp.default(%3, -1, inf); "
    "%13 = aten.clamp.default(%3, -inf, 0.5); %14 = aten.clamp.default(%3, -0.3, 0.2); "
    "%15 = aten.clamp_min.default(%3, 0.25); %16 = aten.mul.Tensor(%4, %5); %17 = aten.add.Tensor(%16, %6, 1); "
    "%18 = aten.sub.Tensor(%17, %7, 1); %19 = aten.add.Tensor(%18, %8, 2); %20 = aten.mul.Tensor(%19, %9); "
    "%21 = aten.add.Tensor(%20, %10, 1); %22 = aten.add.Tensor(%21, %11, 1); %23 = aten.mul.Tensor(%22, %12); "
    "%24 = aten.add.Tensor(%23, %13, 1); %25 = aten.add.Tensor(%24, %14, 1); %26 = aten.add.Tensor(%25, %15, 1); "
    "%27 = aten.mul.Tensor(%26, %1); %28 = kiln.silu_mul(%3, %27); %29 = kiln.silu_mul(%28, %2)";

constexpr const char* kPowers =
    "inputs 3; %3 = aten.abs.default(%0); %4 = aten.add.Scalar(%3, 0.25, 1); "
    "%5 = aten.pow.Tensor_Scalar(%4, 2); %6 = aten.pow.Tensor_Scalar(%4, 3); %7 = aten.pow.Tensor_Scalar(%4, 0.5); "
    "%8 = aten.pow.Tensor_Scalar(%4, -0.5); %9 = aten.pow.Tensor_Scalar(%4, -1); "
    "%10 = aten.pow.Tensor_Scalar(%4, -2); %11 = aten.pow.Tensor_Scalar(%4, 1.7); "
    "%12 = aten.pow.Tensor_Scalar(%2, 4); %13 = aten.add.Tensor(%5, %6, 1); %14 = aten.add.Tensor(%13, %7, 1); "
    "%15 = aten.add.Tensor(%14, %8, 1); %16 = aten.add.Tensor(%15, %9, 1); %17 = aten.add.Tensor(%16, %10, 1); "
    "%18 = aten.add.Tensor(%17, %11, 1); %19 = aten.sub.Tensor(%18, %12, 0.5); %20 = aten.div.Tensor(%19, %1)";

TEST(FusedElementwise, ArithmeticMatchesReferenceBitForBit) {
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    for (uint32_t seed : {1u, 2u}) expect_matches_reference(kArithmetic, mixed_inputs(dtype, seed, 2.0));
  }
}

TEST(FusedElementwise, MathFunctionsMatchReferenceBitForBit) {
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    for (uint32_t seed : {3u, 4u}) expect_matches_reference(kMath, mixed_inputs(dtype, seed, 2.0));
  }
}

TEST(FusedElementwise, ActivationsMatchReferenceBitForBit) {
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    for (uint32_t seed : {5u, 6u}) expect_matches_reference(kActivations, mixed_inputs(dtype, seed, 4.0));
  }
}

TEST(FusedElementwise, PowersMatchReferenceBitForBit) {
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    for (uint32_t seed : {7u, 8u}) expect_matches_reference(kPowers, mixed_inputs(dtype, seed, 1.5));
  }
}

TEST(FusedElementwise, ContiguousSameShapeInputs) {
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    // More elements than one chunk, and not a multiple of it.
    std::vector<Tensor> in = {random_tensor(dtype, {7, 123}, 9, 1, 3.0), random_tensor(dtype, {7, 123}, 9, 2, 3.0),
                              random_tensor(dtype, {7, 123}, 9, 3, 3.0)};
    expect_matches_reference(kActivations, in);
    expect_matches_reference(kArithmetic, in);
  }
}

TEST(FusedElementwise, BroadcastShapesAndStrides) {
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    // A column, a row and a 0-d tensor broadcast against each other; a long inner dim.
    expect_matches_reference(kArithmetic,
                             {random_tensor(dtype, {300, 1}, 10, 1, 2.0), random_tensor(dtype, {1, 301}, 10, 2, 2.0),
                              random_tensor(dtype, {}, 10, 3, 2.0)});
    // Every input a transposed view, one of them sliced with a step.
    Tensor wide = random_tensor(dtype, {9, 6}, 11, 4, 2.0);
    Tensor stepped = wide.as_strided({3, 6}, {1, 9}, 2);  // a view with gaps between its columns
    expect_matches_reference(
        kMath, {transposed_random(dtype, 3, 6, 12, 2.0), stepped, transposed_random(dtype, 3, 6, 13, 2.0)});
    // 0-d inputs and output.
    expect_matches_reference(kPowers, {random_tensor(dtype, {}, 14, 1, 2.0), random_tensor(dtype, {}, 14, 2, 2.0),
                                       random_tensor(dtype, {}, 14, 3, 2.0)});
  }
}

TEST(FusedElementwise, SpecialValuesMatchReference) {
  // NaN, infinities, signed zeros, values near the 16-bit limits, and NaN clamp bounds.
  const std::vector<double> specials = {NAN,    INFINITY, -INFINITY, 0.0,  -0.0, 1e-8, -1e-8, 65504,
                                        -65504, 7e4,      1e38,      -3.5, 2.0,  0.5,  -1,    1};
  const std::string text =
      "inputs 2; %2 = aten.mul.Tensor(%0, %1); %3 = aten.clamp.default(%2, nan, inf); "
      "%4 = aten.hardtanh.default(%0, -1, nan); %5 = aten.relu.default(%1); %6 = aten.abs.default(%0); "
      "%7 = aten.div.Tensor(%6, %5); %8 = aten.add.Tensor(%7, %4, 3); %9 = aten.sub.Tensor(%8, %3, 1); "
      "%10 = aten.neg.default(%9); %11 = aten.exp.default(%0); %12 = aten.mul.Scalar(%11, 1e300); "
      "%13 = aten.add.Tensor(%12, %10, 1)";
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const int64_t n = static_cast<int64_t>(specials.size());
    Tensor a = testing::make_tensor(dtype, {n, 1}, specials);
    Tensor b = testing::make_tensor(dtype, {1, n}, specials);
    expect_matches_reference(text, {a, b}, /*any_nan=*/true);
  }
}

TEST(FusedElementwise, EmptyOutputWritesNothing) {
  Tensor x = Tensor::zeros(DType::Float32, {0, 4});
  Tensor out = Tensor::zeros(DType::Float32, {0, 4});
  EXPECT_TRUE(
      run_fused_elementwise(program("inputs 1; %1 = aten.exp.default(%0)"), std::vector<Tensor>{x}, out).is_ok());
}

TEST(FusedElementwise, OutputMayBeAnInput) {
  Tensor x = random_tensor(DType::Float16, {5, 70}, 15, 1, 2.0);
  Tensor b = random_tensor(DType::Float16, {70}, 15, 2, 2.0);
  const ElementwiseProgram p = program("inputs 2; %2 = aten.mul.Tensor(%0, %1); %3 = aten.silu.default(%2)");
  auto want = run_reference(p, {x, b});
  ASSERT_TRUE(want.has_value());
  ASSERT_TRUE(run_fused_elementwise(p, std::vector<Tensor>{x, b}, x).is_ok());
  expect_same_bits(x, *want);
}

TEST(FusedElementwise, RefusesWhatDoesNotFit) {
  const ElementwiseProgram p = program("inputs 2; %2 = aten.mul.Tensor(%0, %1); %3 = aten.neg.default(%2)");
  Tensor x = Tensor::zeros(DType::Float32, {2, 3});
  Tensor out = Tensor::zeros(DType::Float32, {2, 3});
  auto code = [&](std::vector<Tensor> inputs, Tensor& o, const ElementwiseProgram& prog) {
    return run_fused_elementwise(prog, inputs, o).code();
  };
  EXPECT_EQ(code({x}, out, p), ErrorCode::kInvalidArgument);  // one input for two
  EXPECT_EQ(code({x, Tensor::zeros(DType::Float64, {2, 3})}, out, p), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({x, Tensor::zeros(DType::Float32, {4})}, out, p), ErrorCode::kInvalidArgument);
  Tensor ints = Tensor::zeros(DType::Int64, {2, 3});
  EXPECT_EQ(code({ints, ints}, ints, p), ErrorCode::kInvalidArgument);
  Tensor strided = Tensor::zeros(DType::Float32, {3, 2}).as_strided({2, 3}, {1, 2}, 0);
  EXPECT_EQ(code({x, x}, strided, p), ErrorCode::kInvalidArgument);
  ElementwiseProgram bad = p;
  bad.instrs[1].operands = {5};
  EXPECT_EQ(code({x, x}, out, bad), ErrorCode::kFormat);
  EXPECT_TRUE(run_fused_elementwise(p, std::vector<Tensor>{x, x}, out).is_ok());
}

TEST(FusedElementwise, RefusesConstantsTheReferenceRefuses) {
  // A clamp bound beyond float16's range is an error in the reference kernel too.
  const ElementwiseProgram p = program("inputs 1; %1 = aten.clamp.default(%0, 1e6, inf); %2 = aten.neg.default(%1)");
  Tensor x = random_tensor(DType::Float16, {4}, 16, 1);
  EXPECT_FALSE(run_reference(p, {x}).has_value());
  Tensor out = Tensor::zeros(DType::Float16, {4});
  Status s = run_fused_elementwise(p, std::vector<Tensor>{x}, out);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("clamp bound"), std::string::npos) << s.message();
}

TEST(FusedElementwise, KernelRunsFromTheRegistry) {
  Tensor x = random_tensor(DType::BFloat16, {2, 3, 4}, 17, 1, 2.0);
  Tensor b = random_tensor(DType::BFloat16, {3, 1}, 17, 2, 2.0);
  const std::string text = "inputs 2; %2 = aten.sub.Tensor(%0, %1, 1); %3 = aten.gelu.default(%2, 'tanh')";
  auto out = testing::run_op(OpKind::kFusedElementwise,
                             {{"inputs", std::vector<Tensor>{x, b}}, {"program", Str(text.c_str())}});
  ASSERT_TRUE(out.has_value()) << out.status().message();
  auto want = run_reference(program(text), {x, b});
  ASSERT_TRUE(want.has_value());
  expect_same_bits(std::get<Tensor>((*out)[0]), *want);

  auto bad = testing::run_op(OpKind::kFusedElementwise,
                             {{"inputs", std::vector<Tensor>{x}}, {"program", Str("inputs 1; %1 = aten.nope(%0)")}});
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), ErrorCode::kFormat);
  EXPECT_NE(bad.status().message().find("test_node"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace kiln::cpu
