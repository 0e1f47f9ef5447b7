// The CUDA builder's pointwise layer: one ATen elementwise op over tensors of
// any dtype kiln holds (integers, bools, float64, and operands of different
// dtypes), promoted as PyTorch promotes them (base/promotion.h), for the
// nodes the fused floating programs (cuda_layers_elementwise.cc) do not take:
// integer and bool arithmetic, comparisons and logical ops, math functions of
// integers, and ops the programs do not know (remainder, fmod, pow of two
// tensors, copysign, bitwise ops, clamps by tensors, masked_fill, special
// functions, ...). One generated kernel per node (pointwise_kernel); each
// op's expression is written here once, over the helpers of
// kernels/pointwise.cuh.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_layers.h"
#include "base/promotion.h"
#include "ir/op_schema.h"

namespace kiln::cuda::layers {

namespace {

// What the op's result is: the operands' promoted dtype, a floating dtype
// (integer operands give float32), or bool.
enum class Result { kCommon, kFloating, kBool };

struct PointwiseOp {
  std::vector<const char*> operands;  // tensor-or-number arguments, in the order the expression reads them
  Result result = Result::kCommon;
  bool wide = false;  // computed in double whatever the dtype (special functions)
};

bool is_compare(OpKind op) {
  switch (op) {
    case OpKind::kLtTensor:
    case OpKind::kLtScalar:
    case OpKind::kLeTensor:
    case OpKind::kLeScalar:
    case OpKind::kGtTensor:
    case OpKind::kGtScalar:
    case OpKind::kGeTensor:
    case OpKind::kGeScalar:
    case OpKind::kEqTensor:
    case OpKind::kEqScalar:
    case OpKind::kNeTensor:
    case OpKind::kNeScalar: return true;
    default: return false;
  }
}

// The CUDA math function of a unary op computed in floating point, or null.
const char* float_function(OpKind op) {
  switch (op) {
    case OpKind::kExp: return "exp";
    case OpKind::kLog: return "log";
    case OpKind::kSqrt: return "sqrt";
    case OpKind::kSin: return "sin";
    case OpKind::kCos: return "cos";
    case OpKind::kTan: return "tan";
    case OpKind::kTanh: return "tanh";
    case OpKind::kErf: return "erf";
    case OpKind::kErfc: return "erfc";
    case OpKind::kLog1p: return "log1p";
    case OpKind::kExpm1: return "expm1";
    case OpKind::kAcos: return "acos";
    case OpKind::kAsin: return "asin";
    case OpKind::kAtan: return "atan";
    case OpKind::kSinh: return "sinh";
    case OpKind::kCosh: return "cosh";
    case OpKind::kAcosh: return "acosh";
    case OpKind::kAsinh: return "asinh";
    case OpKind::kAtanh: return "atanh";
    case OpKind::kExp2: return "exp2";
    case OpKind::kLog2: return "log2";
    case OpKind::kLog10: return "log10";
    case OpKind::kLgamma: return "lgamma";
    default: return nullptr;
  }
}

// The CUDA function of a special function, computed in double, or null.
const char* special_function(OpKind op) {
  switch (op) {
    case OpKind::kI0:
    case OpKind::kSpecialModifiedBesselI0: return "cyl_bessel_i0";
    case OpKind::kSpecialI1:
    case OpKind::kSpecialModifiedBesselI1: return "cyl_bessel_i1";
    case OpKind::kSpecialBesselJ0: return "j0";
    case OpKind::kSpecialBesselJ1: return "j1";
    case OpKind::kSpecialBesselY0: return "y0";
    case OpKind::kSpecialBesselY1: return "y1";
    case OpKind::kSpecialErfcx: return "erfcx";
    case OpKind::kSpecialNdtr: return "normcdf";
    case OpKind::kSpecialNdtri: return "normcdfinv";
    case OpKind::kErfinv: return "erfinv";
    default: return nullptr;
  }
}

// Unary special functions written once for both backends
// (kernels/special_functions.cuh), by their name there.
const char* shared_special_function(OpKind op) {
  switch (op) {
    case OpKind::kSpecialI0e: return "i0e";
    case OpKind::kSpecialI1e: return "i1e";
    case OpKind::kSpecialModifiedBesselK0: return "k0";
    case OpKind::kSpecialModifiedBesselK1: return "k1";
    case OpKind::kSpecialScaledModifiedBesselK0: return "k0e";
    case OpKind::kSpecialScaledModifiedBesselK1: return "k1e";
    case OpKind::kSpecialAiryAi: return "airy_ai";
    case OpKind::kSpecialLogNdtr: return "log_ndtr";
    default: return nullptr;
  }
}

// The orthogonal polynomials (x, n): special_functions::PolynomialKind, and
// whether shifted to [0, 1]; -1 for other ops.
std::pair<int, bool> polynomial_kind(OpKind op) {
  switch (op) {
    case OpKind::kSpecialChebyshevPolynomialT: return {0, false};
    case OpKind::kSpecialChebyshevPolynomialU: return {1, false};
    case OpKind::kSpecialChebyshevPolynomialV: return {2, false};
    case OpKind::kSpecialChebyshevPolynomialW: return {3, false};
    case OpKind::kSpecialHermitePolynomialH: return {4, false};
    case OpKind::kSpecialHermitePolynomialHe: return {5, false};
    case OpKind::kSpecialLaguerrePolynomialL: return {6, false};
    case OpKind::kSpecialLegendrePolynomialP: return {7, false};
    case OpKind::kSpecialShiftedChebyshevPolynomialT: return {0, true};
    case OpKind::kSpecialShiftedChebyshevPolynomialU: return {1, true};
    case OpKind::kSpecialShiftedChebyshevPolynomialV: return {2, true};
    case OpKind::kSpecialShiftedChebyshevPolynomialW: return {3, true};
    default: return {-1, false};
  }
}

std::optional<PointwiseOp> pointwise_op(const ir::Node& n) {
  const OpKind op = n.op;
  if (float_function(op) || op == OpKind::kRsqrt || op == OpKind::kReciprocal || op == OpKind::kSigmoid ||
      op == OpKind::kDeg2rad || op == OpKind::kRad2deg)
    return PointwiseOp{{"self"}, Result::kFloating};
  if (special_function(op) || op == OpKind::kSpecialEntr) return PointwiseOp{{"self"}, Result::kFloating, true};
  if (op == OpKind::kSpecialSphericalBesselJ0) return PointwiseOp{{"x"}, Result::kFloating, true};
  if (op == OpKind::kDigamma || op == OpKind::kPolygamma || op == OpKind::kSpecialPolygamma)
    return PointwiseOp{{"self"}, Result::kFloating, true};
  if (shared_special_function(op)) {
    const bool named_x = op == OpKind::kSpecialAiryAi || op == OpKind::kSpecialScaledModifiedBesselK0 ||
                         op == OpKind::kSpecialScaledModifiedBesselK1;
    return PointwiseOp{{named_x ? "x" : "self"}, Result::kFloating, true};
  }
  if (op == OpKind::kSpecialZeta || op == OpKind::kIgamma || op == OpKind::kIgammac)
    return PointwiseOp{{"self", "other"}, Result::kFloating, true};
  if (op == OpKind::kMvlgamma) return PointwiseOp{{"self"}, Result::kFloating, true};
  if (polynomial_kind(op).first >= 0) return PointwiseOp{{"x", "n"}, Result::kFloating, true};
  if (is_compare(op)) return PointwiseOp{{"self", "other"}, Result::kBool};
  switch (op) {
    case OpKind::kNeg:
    case OpKind::kAbs:
    case OpKind::kSign:
    case OpKind::kSgn:
    case OpKind::kPositive:
    case OpKind::kSquare:
    case OpKind::kFloor:
    case OpKind::kCeil:
    case OpKind::kTrunc:
    case OpKind::kRound:
    case OpKind::kFrac:
    case OpKind::kRelu:
    case OpKind::kBitwiseNot:
    case OpKind::kRoundDecimals:
    case OpKind::kLeakyRelu:
    case OpKind::kElu: return PointwiseOp{{"self"}, Result::kCommon};
    case OpKind::kLogicalNot:
    case OpKind::kIsnan:
    case OpKind::kIsinf:
    case OpKind::kIsfinite:
    case OpKind::kIsposinf:
    case OpKind::kIsneginf:
    case OpKind::kSignbit: return PointwiseOp{{"self"}, Result::kBool};
    case OpKind::kAddTensor:
    case OpKind::kAddScalar:
    case OpKind::kSubTensor:
    case OpKind::kSubScalar:
    case OpKind::kRsubTensor:
    case OpKind::kRsubScalar:
    case OpKind::kMulTensor:
    case OpKind::kMulScalar:
    case OpKind::kFloorDivide:
    case OpKind::kRemainderTensor:
    case OpKind::kRemainderScalar:
    case OpKind::kFmodTensor:
    case OpKind::kFmodScalar:
    case OpKind::kMinimum:
    case OpKind::kMaximum:
    case OpKind::kFmax:
    case OpKind::kFmin:
    case OpKind::kBitwiseAndTensor:
    case OpKind::kBitwiseOrTensor:
    case OpKind::kAndTensor: return PointwiseOp{{"self", "other"}, Result::kCommon};
    case OpKind::kDivTensor:
    case OpKind::kDivScalar:
    case OpKind::kAtan2:
    case OpKind::kHypot:
    case OpKind::kCopysignTensor:
    case OpKind::kNextafter:
    case OpKind::kLogaddexp:
    case OpKind::kLogaddexp2: return PointwiseOp{{"self", "other"}, Result::kFloating};
    case OpKind::kDivTensorMode: {
      const std::string mode = string_arg(n, "rounding_mode");
      return PointwiseOp{{"self", "other"}, mode.empty() ? Result::kFloating : Result::kCommon};
    }
    case OpKind::kHeaviside: return PointwiseOp{{"self", "values"}, Result::kCommon};
    case OpKind::kPowTensorScalar:
    case OpKind::kPowTensorTensor:
    case OpKind::kPowScalar: return PointwiseOp{{"self", "exponent"}, Result::kCommon};
    case OpKind::kFloatPowerTensorTensor:
    case OpKind::kFloatPowerTensorScalar: return PointwiseOp{{"self", "exponent"}, Result::kFloating, true};
    case OpKind::kLogicalAnd:
    case OpKind::kLogicalOr:
    case OpKind::kLogicalXor: return PointwiseOp{{"self", "other"}, Result::kBool};
    case OpKind::kClamp:
    case OpKind::kClampTensor: return PointwiseOp{{"self", "min", "max"}, Result::kCommon};
    case OpKind::kClampMin:
    case OpKind::kClampMinTensor: return PointwiseOp{{"self", "min"}, Result::kCommon};
    case OpKind::kClampMax:
    case OpKind::kClampMaxTensor: return PointwiseOp{{"self", "max"}, Result::kCommon};
    case OpKind::kMaskedFillScalar:
    case OpKind::kMaskedFillTensor: return PointwiseOp{{"self", "mask", "value"}, Result::kCommon};
    case OpKind::kWhere: return PointwiseOp{{"condition", "self", "other"}, Result::kCommon};
    default: return std::nullopt;
  }
}

// One operand: a tensor, a Python number, or absent (a clamp bound of None).
struct Operand {
  enum class Kind { kAbsent, kTensor, kInt, kFloat, kBool } kind = Kind::kAbsent;
  const ir::Value* tensor = nullptr;
  int64_t i = 0;
  double d = 0;
  bool number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  double value() const { return kind == Kind::kFloat ? d : static_cast<double>(i); }
};

// The operand `name` of `n`, or a message saying why it is none kiln can compute with.
Expected<Operand> operand(const ir::Node& n, const char* name) {
  Operand o;
  const ir::Arg* a = ir::argument_or_default(n, name);
  if (!a || std::holds_alternative<ir::NoneArg>(*a)) return o;
  if (const auto* v = std::get_if<ir::Value*>(a)) {
    if ((*v)->kind == ir::ValueKind::kTensor) {
      o.kind = Operand::Kind::kTensor;
      o.tensor = *v;
      return o;
    }
    if ((*v)->kind == ir::ValueKind::kSymInt && (*v)->sym && (*v)->sym->is_const()) {
      o.kind = Operand::Kind::kInt;
      o.i = (*v)->sym->value();
      return o;
    }
    return unsupported(std::string(name) + " is a number known only at run time");
  }
  if (const auto* i = std::get_if<int64_t>(a)) {
    o.kind = Operand::Kind::kInt;
    o.i = *i;
  } else if (const auto* d = std::get_if<double>(a)) {
    o.kind = Operand::Kind::kFloat;
    o.d = *d;
  } else if (const auto* b = std::get_if<bool>(a)) {
    o.kind = Operand::Kind::kBool;
    o.i = *b ? 1 : 0;
  } else {
    return unsupported(std::string(name) + " is neither a tensor nor a number");
  }
  return o;
}

// The type a kernel computes a dtype's values in: double, float, long long or int.
DType opmath(DType t) {
  switch (t) {
    case DType::Float64: return DType::Float64;
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16: return DType::Float32;
    case DType::Int64: return DType::Int64;
    default: return DType::Int32;
  }
}

bool floating_compute(DType c) { return c == DType::Float32 || c == DType::Float64; }

// Everything a node's kernel needs: operands, the promoted dtype, the compute type.
struct Plan {
  PointwiseOp op;
  std::vector<Operand> operands;
  DType common = DType::Float32;
  DType compute = DType::Float32;
};

Expected<Plan> plan_of(const ir::Node& n) {
  auto op = pointwise_op(n);
  if (!op) return unsupported("no pointwise form");
  if (n.outputs.size() != 1 || n.outputs[0]->kind != ir::ValueKind::kTensor)
    return unsupported("a pointwise op without one tensor result");
  const ir::Value* out = n.outputs[0];
  Plan p{*op, {}, DType::Float32, DType::Float32};
  std::vector<PromotionOperand> promo;
  for (const char* name : op->operands) {
    KILN_ASSIGN_OR_RETURN(Operand o, operand(n, name));
    if (o.kind == Operand::Kind::kTensor) {
      KILN_TRY(device_type_name(o.tensor->type.dtype).status());
      if (rank(o.tensor) > rank(out)) return unsupported(std::string(name) + " has more dims than the result");
    }
    // masked_fill's value and where's condition do not take part in promotion.
    const bool promotes = !(n.op == OpKind::kMaskedFillScalar || n.op == OpKind::kMaskedFillTensor
                                ? std::string_view(name) != "self"
                                : n.op == OpKind::kWhere && std::string_view(name) == "condition");
    if (promotes && o.kind == Operand::Kind::kTensor)
      promo.push_back({o.tensor->type.dtype, rank(o.tensor) == 0, false});
    if (promotes && o.number())
      promo.push_back({o.kind == Operand::Kind::kFloat  ? DType::Float64
                       : o.kind == Operand::Kind::kBool ? DType::Bool
                                                        : DType::Int64,
                       true, true});
    p.operands.push_back(o);
  }
  if (p.operands.empty() || p.operands[0].kind == Operand::Kind::kAbsent)
    return unsupported("a pointwise op without its first operand");
  KILN_TRY(device_type_name(out->type.dtype).status());
  p.common = result_type(promo);
  switch (op->result) {
    case Result::kFloating:
      if (!is_floating(out->type.dtype)) return unsupported("a floating op whose result is not floating");
      p.compute = opmath(out->type.dtype);
      break;
    case Result::kBool:
      if (out->type.dtype != DType::Bool) return unsupported("a predicate whose result is not bool");
      p.compute = opmath(p.common);
      break;
    case Result::kCommon: p.compute = opmath(out->type.dtype); break;
  }
  if (op->wide) p.compute = DType::Float64;
  return p;
}

// The expression of node `n`'s op over a0, a1, ... (tensor operands, in
// order) with numbers as literals of the compute type; an error for
// operand dtypes the op is not defined on.
Expected<std::string> expression(const ir::Node& n, const Plan& p, std::vector<const ir::Value*>& tensors) {
  const DType C = p.compute;
  const bool fl = floating_compute(C);
  // A number as the compute type, converted to the promoted dtype first as
  // torch converts a Python number to it: rounded to a float dtype
  // (`exact`: read at full precision, as mul/div by a number and the
  // activations' parameters are), wrapped into a narrow integer dtype, a
  // bool's truth (`by_value`: kept as it is, saturated to the compute type,
  // as clamp bounds are).
  auto number = [&](double v, int64_t i, bool integral, bool exact = false, bool by_value = false) -> std::string {
    const double d = integral ? static_cast<double>(i) : v;
    if (fl) return compute_literal(exact || by_value ? d : rounded_to_dtype(d, p.common), C);
    int64_t x = integral ? i : static_cast<int64_t>(v);
    if (by_value) {
      if (C == DType::Int32) x = std::clamp<int64_t>(x, INT32_MIN, INT32_MAX);
    } else {
      switch (p.common) {
        case DType::Bool: x = d != 0; break;
        case DType::UInt8: x = static_cast<uint8_t>(x); break;
        case DType::Int8: x = static_cast<int8_t>(x); break;
        case DType::Int16: x = static_cast<int16_t>(x); break;
        case DType::Int32: x = static_cast<int32_t>(x); break;
        default: break;
      }
    }
    return x == INT64_MIN ? "C(-9223372036854775807LL - 1)" : "C(" + std::to_string(x) + "LL)";
  };
  const bool is_clamp = n.op == OpKind::kClamp || n.op == OpKind::kClampMin || n.op == OpKind::kClampMax;
  const bool mul_div = n.op == OpKind::kMulTensor || n.op == OpKind::kMulScalar || n.op == OpKind::kDivTensor ||
                       n.op == OpKind::kDivScalar;
  const bool half = p.common == DType::Float16 || p.common == DType::BFloat16;
  std::vector<std::string> a;
  for (size_t k = 0; k < p.operands.size(); ++k) {
    const Operand& o = p.operands[k];
    if (o.kind == Operand::Kind::kTensor) {
      a.push_back("a" + std::to_string(tensors.size()));
      tensors.push_back(o.tensor);
    } else if (o.number()) {
      a.push_back(number(o.d, o.i, o.kind != Operand::Kind::kFloat, mul_div && half && k == 1, is_clamp && k > 0));
    } else {
      a.push_back("");
    }
  }
  auto param = [&](const char* name) -> Expected<std::string> {
    KILN_ASSIGN_OR_RETURN(Operand o, operand(n, name));
    if (!o.number()) return unsupported(std::string(name) + " that is not a number");
    return number(o.d, o.i, o.kind != Operand::Kind::kFloat, true);
  };
  auto need_float = [&]() -> Status {
    if (!fl) return unsupported(std::string(ir::op_target(n.op)) + " of integer or bool tensors");
    return Status::ok();
  };
  const std::string& x = a[0];
  const std::string y = a.size() > 1 ? a[1] : "";
  if (const char* f = float_function(n.op)) return std::string(f) + "(" + x + ")";
  if (const char* f = special_function(n.op)) return std::string(f) + "(" + x + ")";
  const std::string one = "C(1)", zero = "C(0)";
  auto alpha_times = [&](const std::string& v) -> Expected<std::string> {
    KILN_ASSIGN_OR_RETURN(Operand al, operand(n, "alpha"));
    if (!al.number() || al.value() == 1.0) return v;
    return "(" + v + " * " + number(al.d, al.i, al.kind != Operand::Kind::kFloat) + ")";
  };
  if (const auto [kind, shifted] = polynomial_kind(n.op); kind >= 0)
    return std::string("special_functions::") + (shifted ? "shifted_chebyshev(" : "polynomial(") +
           std::to_string(kind) + ", " + x + ", (long long)" + y + ")";
  if (const char* f = shared_special_function(n.op)) return std::string("special_functions::") + f + "(" + x + ")";
  switch (n.op) {
    case OpKind::kDigamma: return "special_functions::digamma(" + x + ")";
    case OpKind::kPolygamma:
    case OpKind::kSpecialPolygamma: {
      KILN_ASSIGN_OR_RETURN(Operand order, operand(n, "n"));
      if (order.kind != Operand::Kind::kInt || order.i < 0)
        return unsupported("polygamma of an order that is not >= 0");
      return "special_functions::polygamma(" + std::to_string(order.i) + "LL, " + x + ")";
    }
    case OpKind::kSpecialZeta: return "special_functions::hurwitz_zeta(" + x + ", " + y + ")";
    case OpKind::kIgamma: return "special_functions::igamma(" + x + ", " + y + ")";
    case OpKind::kIgammac: return "special_functions::igammac(" + x + ", " + y + ")";
    case OpKind::kMvlgamma: {
      KILN_ASSIGN_OR_RETURN(Operand p, operand(n, "p"));
      if (p.kind != Operand::Kind::kInt || p.i < 1) return unsupported("mvlgamma of a dimension that is not >= 1");
      return "special_functions::mvlgamma(" + x + ", " + std::to_string(p.i) + "LL)";
    }
    case OpKind::kRsqrt: return one + " / sqrt(" + x + ")";
    case OpKind::kReciprocal: return one + " / " + x;
    case OpKind::kSigmoid: return one + " / (" + one + " + exp(-" + x + "))";
    case OpKind::kDeg2rad: return x + " * " + compute_literal(3.14159265358979323846 / 180.0, C);
    case OpKind::kRad2deg: return x + " * " + compute_literal(180.0 / 3.14159265358979323846, C);
    case OpKind::kSpecialSphericalBesselJ0:
      return "(isinf(" + x + ") ? 0.0 : " + x + " == 0.0 ? 1.0 : sin(" + x + ") / " + x + ")";
    case OpKind::kSpecialEntr:
      return "(" + x + " != " + x + " ? " + x + " : " + x + " > 0.0 ? -" + x + " * log(" + x + ") : " + x +
             " == 0.0 ? 0.0 : -(double)INFINITY)";
    case OpKind::kNeg:
      if (n.operands()[0]->type.dtype == DType::Bool) return unsupported("negation of a bool tensor");
      return "C(-" + x + ")";
    case OpKind::kAbs: return "pw_abs(" + x + ")";
    case OpKind::kSign:
    case OpKind::kSgn: return "pw_sign(" + x + ")";
    case OpKind::kPositive: return x;
    case OpKind::kSquare: return "C(" + x + " * " + x + ")";
    case OpKind::kFloor: return fl ? "floor(" + x + ")" : x;
    case OpKind::kCeil: return fl ? "ceil(" + x + ")" : x;
    case OpKind::kTrunc: return fl ? "trunc(" + x + ")" : x;
    case OpKind::kRound: return fl ? "rint(" + x + ")" : x;
    case OpKind::kFrac: KILN_TRY(need_float()); return x + " - trunc(" + x + ")";
    case OpKind::kRelu: return "kiln_clamp_lo(" + x + ", " + zero + ")";
    case OpKind::kBitwiseNot:
      if (fl) return unsupported("bitwise_not of floating tensors");
      return n.outputs[0]->type.dtype == DType::Bool ? "!" + x : "C(~" + x + ")";
    case OpKind::kRoundDecimals: {
      KILN_TRY(need_float());
      KILN_ASSIGN_OR_RETURN(Operand d, operand(n, "decimals"));
      return "pw_round_decimals(" + x + ", " + std::to_string(d.number() ? d.i : 0) + "LL)";
    }
    case OpKind::kLeakyRelu: {
      KILN_TRY(need_float());
      KILN_ASSIGN_OR_RETURN(std::string slope, param("negative_slope"));
      return "(" + x + " > " + zero + " ? " + x + " : " + x + " * " + slope + ")";
    }
    case OpKind::kElu: {
      KILN_TRY(need_float());
      KILN_ASSIGN_OR_RETURN(std::string al, param("alpha"));
      KILN_ASSIGN_OR_RETURN(std::string sc, param("scale"));
      KILN_ASSIGN_OR_RETURN(std::string is, param("input_scale"));
      return "pw_elu(" + x + ", " + al + ", " + sc + ", " + is + ")";
    }
    case OpKind::kLogicalNot: return x + " == " + zero;
    case OpKind::kIsnan: return "pw_isnan(" + x + ")";
    case OpKind::kIsinf: return "pw_isinf(" + x + ")";
    case OpKind::kIsfinite: return "pw_isfinite(" + x + ")";
    case OpKind::kIsposinf: return "(pw_isinf(" + x + ") && " + x + " > " + zero + ")";
    case OpKind::kIsneginf: return "(pw_isinf(" + x + ") && " + x + " < " + zero + ")";
    case OpKind::kSignbit: return "pw_signbit(" + x + ")";
    case OpKind::kAddTensor:
    case OpKind::kAddScalar: {
      KILN_ASSIGN_OR_RETURN(std::string t, alpha_times(y));
      return "C(" + x + " + " + t + ")";
    }
    case OpKind::kSubTensor:
    case OpKind::kSubScalar: {
      if (!fl && p.common == DType::Bool) return unsupported("subtraction of bool tensors");
      KILN_ASSIGN_OR_RETURN(std::string t, alpha_times(y));
      return "C(" + x + " - " + t + ")";
    }
    case OpKind::kRsubTensor:
    case OpKind::kRsubScalar: {
      KILN_ASSIGN_OR_RETURN(std::string t, alpha_times(x));
      return "C(" + y + " - " + t + ")";
    }
    case OpKind::kMulTensor:
    case OpKind::kMulScalar: return "C(" + x + " * " + y + ")";
    case OpKind::kDivTensor:
    case OpKind::kDivScalar: return x + " / " + y;
    case OpKind::kDivTensorMode: {
      const std::string mode = string_arg(n, "rounding_mode");
      if (mode.empty()) return x + " / " + y;
      if (mode == "trunc") return "pw_div_trunc(" + x + ", " + y + ")";
      if (mode == "floor") return "pw_div_floor(" + x + ", " + y + ")";
      return unsupported("division with rounding mode '" + mode + "'");
    }
    case OpKind::kFloorDivide: return "pw_div_floor(" + x + ", " + y + ")";
    case OpKind::kRemainderTensor:
    case OpKind::kRemainderScalar: return "pw_remainder(" + x + ", " + y + ")";
    case OpKind::kFmodTensor:
    case OpKind::kFmodScalar: return "pw_fmod(" + x + ", " + y + ")";
    case OpKind::kPowTensorScalar:
      if (fl && p.operands[1].number()) {  // ATen's forms of these exponents (sqrt keeps -0 and takes -inf to nan)
        const double v = p.operands[1].value();
        if (v == 2.0) return "(" + x + " * " + x + ")";
        if (v == 3.0) return "(" + x + " * " + x + " * " + x + ")";
        if (v == 0.5) return "sqrt(" + x + ")";
        if (v == -0.5) return "(C(1) / sqrt(" + x + "))";
        if (v == -1.0) return "(C(1) / " + x + ")";
        if (v == -2.0) return "(C(1) / (" + x + " * " + x + "))";
      }
      [[fallthrough]];
    case OpKind::kPowTensorTensor:
    case OpKind::kPowScalar:
    case OpKind::kFloatPowerTensorTensor:
    case OpKind::kFloatPowerTensorScalar: return "pw_pow(" + x + ", " + y + ")";
    case OpKind::kMinimum: return "pw_minimum(" + x + ", " + y + ")";
    case OpKind::kMaximum: return "pw_maximum(" + x + ", " + y + ")";
    case OpKind::kFmax: return "pw_fmax(" + x + ", " + y + ")";
    case OpKind::kFmin: return "pw_fmin(" + x + ", " + y + ")";
    case OpKind::kAtan2: return "atan2(" + x + ", " + y + ")";
    case OpKind::kHypot: return "hypot(" + x + ", " + y + ")";
    case OpKind::kCopysignTensor: return "copysign(" + x + ", " + y + ")";
    case OpKind::kNextafter:
      if (p.common != DType::Float32 && p.common != DType::Float64)
        return unsupported("nextafter of tensors other than float32 and float64");
      return std::string(C == DType::Float32 ? "nextafterf(" : "nextafter(") + x + ", " + y + ")";
    case OpKind::kLogaddexp: return "pw_logaddexp(" + x + ", " + y + ")";
    case OpKind::kLogaddexp2: return "pw_logaddexp2(" + x + ", " + y + ")";
    case OpKind::kHeaviside: return "pw_heaviside(" + x + ", " + y + ")";
    case OpKind::kLtTensor:
    case OpKind::kLtScalar: return x + " < " + y;
    case OpKind::kLeTensor:
    case OpKind::kLeScalar: return x + " <= " + y;
    case OpKind::kGtTensor:
    case OpKind::kGtScalar: return x + " > " + y;
    case OpKind::kGeTensor:
    case OpKind::kGeScalar: return x + " >= " + y;
    case OpKind::kEqTensor:
    case OpKind::kEqScalar: return x + " == " + y;
    case OpKind::kNeTensor:
    case OpKind::kNeScalar: return x + " != " + y;
    case OpKind::kLogicalAnd: return "(" + x + " != " + zero + ") && (" + y + " != " + zero + ")";
    case OpKind::kLogicalOr: return "(" + x + " != " + zero + ") || (" + y + " != " + zero + ")";
    case OpKind::kLogicalXor: return "(" + x + " != " + zero + ") != (" + y + " != " + zero + ")";
    case OpKind::kBitwiseAndTensor:
    case OpKind::kAndTensor:
    case OpKind::kBitwiseOrTensor: {
      if (fl) return unsupported("bitwise ops on floating tensors");
      const char* op = n.op == OpKind::kBitwiseOrTensor ? " | " : " & ";
      return "C(" + x + op + y + ")";
    }
    case OpKind::kClamp:
    case OpKind::kClampTensor:
    case OpKind::kClampMin:
    case OpKind::kClampMinTensor:
    case OpKind::kClampMax:
    case OpKind::kClampMaxTensor: {
      std::string e = x;
      const bool has_min = n.op != OpKind::kClampMax && n.op != OpKind::kClampMaxTensor;
      size_t k = 1;
      if (has_min) {
        if (!a[k].empty()) e = "kiln_clamp_lo(" + e + ", " + a[k] + ")";
        ++k;
      }
      if (k < a.size() && !a[k].empty()) e = "kiln_clamp_hi(" + e + ", " + a[k] + ")";
      return e;
    }
    case OpKind::kMaskedFillScalar:
    case OpKind::kMaskedFillTensor: return "(" + y + " != " + zero + " ? " + a[2] + " : " + x + ")";
    case OpKind::kWhere: return "(" + x + " != " + zero + " ? " + y + " : " + a[2] + ")";
    default: break;
  }
  return unsupported("no pointwise form of " + std::string(ir::op_target(n.op)));
}

}  // namespace

std::string pointwise_refusal(const ir::Node& n) {
  auto p = plan_of(n);
  if (!p) return p.status().message();
  std::vector<const ir::Value*> tensors;
  auto e = expression(n, *p, tensors);
  if (!e) return e.status().message();
  if (tensors.empty()) return "a pointwise op on numbers only";
  return "";
}

bool pointwise_implements(ir::OpKind op) {
  ir::Node probe;
  probe.op = op;
  return pointwise_op(probe).has_value();
}

Status emit_pointwise(Builder& b, const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(Plan p, plan_of(n));
  std::vector<const ir::Value*> tensors;
  KILN_ASSIGN_OR_RETURN(std::string expr, expression(n, p, tensors));
  const ir::Value* out = n.outputs[0];
  const std::vector<int64_t> sizes = static_sizes(out);
  // Tensors of another dtype are converted to the promoted one first, as
  // torch casts operands to the common dtype (a predicate's operands) or
  // to the result's; a mask or a condition is read as it is.
  const DType promoted = b.compute_dtype(p.op.result == Result::kBool ? p.common : out->type.dtype);
  std::vector<DType> via;
  for (size_t k = 0; k < p.operands.size(); ++k) {
    if (p.operands[k].kind != Operand::Kind::kTensor) continue;
    const std::string_view name = p.op.operands[k];
    via.push_back(name == "mask" || name == "condition" ? DType::Bool : promoted);
  }
  std::vector<TRef> ins;
  std::vector<StridedLayout> layouts;
  for (size_t k = 0; k < tensors.size(); ++k) {
    KILN_ASSIGN_OR_RETURN(TRef r, b.ref(tensors[k]));
    KILN_ASSIGN_OR_RETURN(r, expanded(r, sizes));
    if (via[k] == DType::Bool && r.dtype != DType::Bool) via[k] = r.dtype;
    layouts.push_back(r.layout());
    ins.push_back(r);
  }
  TRef o = b.new_tensor(b.compute_dtype(out->type.dtype), sizes);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, pointwise_kernel(expr, p.compute, o.layout(), layouts, via));
  std::vector<BufferRef> args{o.buf};
  for (const TRef& r : ins) args.push_back(r.buf);
  KILN_TRY(b.launch(n.name, std::move(k), args));
  b.bind(out, o);
  return Status::ok();
}

}  // namespace kiln::cuda::layers
