// Fused elementwise layers: an ElementwiseProgram run over chunks of the
// output. Each chunk's input elements are loaded into registers in the
// compute type, every instruction runs over the chunk (rounding its results
// to the dtype, as the reference kernel stores them), and the last register
// is stored. Formulas and constant conversions follow elementwise.cc exactly:
// a fused layer must give the bits its ops give one by one.
#include "backends/cpu/fused_elementwise.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

using ir::OpKind;

constexpr int64_t kChunk = 256;  // elements per register

// One instruction ready to run: registers and constants in compute type C,
// converted the way the op's reference kernel converts them.
template <typename C>
struct Step {
  OpKind op = OpKind::kUnknown;
  int x = 0, y = 0;  // registers read (y only by two-register ops)
  int dst = 0;
  C k = 0;  // `other` of .Scalar ops; pow's exponent rounded to the dtype
  C alpha = 1;
  bool unit_alpha = true;
  double exponent = 0;  // pow's exponent as given (ATen's special cases test it)
  C lo = 0, hi = 0;     // clamp bounds
  bool has_lo = false, has_hi = false;
  bool gelu_tanh = false;
};

// A bound or alpha the way the reference reads it: scalar_to_dtype (which
// refuses values out of the dtype's range), then loaded.
template <typename T>
Expected<opmath_t<T>> checked_constant(double v, DType dtype, const char* what) {
  auto t = scalar_to_dtype(Scalar::of_float(v), dtype);
  if (!t.has_value()) return invalid_argument(std::string(what) + ": " + t.status().message());
  return load(*t->template data<T>());
}

template <typename T>
Expected<std::vector<Step<opmath_t<T>>>> prepare_steps(const engine::ElementwiseProgram& p, DType dtype) {
  using C = opmath_t<T>;
  std::vector<Step<C>> steps;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const engine::ElementwiseInstr& in = p.instrs[i];
    Step<C> s;
    s.op = in.op;
    s.x = in.operands[0];
    s.y = in.operands.size() > 1 ? in.operands[1] : 0;
    s.dst = p.num_inputs + static_cast<int>(i);
    auto set_alpha = [&](double a) -> Status {
      KILN_ASSIGN_OR_RETURN(s.alpha, checked_constant<T>(a, dtype, "alpha"));
      s.unit_alpha = s.alpha == C(1);
      return Status::ok();
    };
    auto set_bounds = [&](std::optional<double> lo, std::optional<double> hi) -> Status {
      if (lo) {
        KILN_ASSIGN_OR_RETURN(s.lo, checked_constant<T>(*lo, dtype, "clamp bound"));
        s.has_lo = true;
      }
      if (hi) {
        KILN_ASSIGN_OR_RETURN(s.hi, checked_constant<T>(*hi, dtype, "clamp bound"));
        s.has_hi = true;
      }
      return Status::ok();
    };
    switch (in.op) {
      case OpKind::kAddTensor:
      case OpKind::kSubTensor: KILN_TRY(set_alpha(in.scalars[0])); break;
      case OpKind::kAddScalar:
      case OpKind::kSubScalar:
      case OpKind::kRsubScalar:
        // add/sub round a Python number to the dtype first.
        s.k = load(convert<T>(in.scalars[0]));
        KILN_TRY(set_alpha(in.scalars[1]));
        break;
      case OpKind::kMulScalar:
      case OpKind::kDivScalar:
        // mul/div read a Python number at compute precision (not rounded to a 16-bit dtype).
        s.k = convert<C>(in.scalars[0]);
        break;
      case OpKind::kPowTensorScalar:
        s.exponent = in.scalars[0];
        s.k = load(convert<T>(in.scalars[0]));
        break;
      case OpKind::kClamp:
      case OpKind::kHardtanh: KILN_TRY(set_bounds(in.scalars[0], in.scalars[1])); break;
      case OpKind::kClampMin: KILN_TRY(set_bounds(in.scalars[0], std::nullopt)); break;
      case OpKind::kRelu: KILN_TRY(set_bounds(0.0, std::nullopt)); break;
      case OpKind::kGelu: s.gelu_tanh = in.mode == "tanh"; break;
      default: break;
    }
    steps.push_back(s);
  }
  return steps;
}

// Rounds a computed value to T, as storing it into a T tensor does.
template <typename T>
opmath_t<T> round_to(opmath_t<T> v) {
  if constexpr (is_reduced_float_v<T>) {
    return load(convert<T>(v));
  } else {
    return v;
  }
}

// Runs one instruction over `n` elements of its registers.
template <typename T>
void run_step(const Step<opmath_t<T>>& s, const opmath_t<T>* x, const opmath_t<T>* y, opmath_t<T>* d, int64_t n) {
  using C = opmath_t<T>;
  auto unary = [&](auto f) {
    for (int64_t j = 0; j < n; ++j) d[j] = round_to<T>(f(x[j]));
  };
  auto binary = [&](auto f) {
    for (int64_t j = 0; j < n; ++j) d[j] = round_to<T>(f(x[j], y[j]));
  };
  const C k = s.k, al = s.alpha;
  switch (s.op) {
    case OpKind::kAddTensor:
      if (s.unit_alpha) {
        binary([](C a, C b) { return a + b; });
      } else {
        binary([al](C a, C b) { return std::fma(al, b, a); });
      }
      break;
    case OpKind::kSubTensor:
      if (s.unit_alpha) {
        binary([](C a, C b) { return a - b; });
      } else {
        binary([al](C a, C b) { return std::fma(-al, b, a); });
      }
      break;
    case OpKind::kAddScalar:
      if (s.unit_alpha) {
        unary([k](C a) { return a + k; });
      } else {
        unary([k, al](C a) { return std::fma(al, k, a); });
      }
      break;
    case OpKind::kSubScalar:
      if (s.unit_alpha) {
        unary([k](C a) { return a - k; });
      } else {
        unary([k, al](C a) { return std::fma(-al, k, a); });
      }
      break;
    case OpKind::kRsubScalar:  // other - alpha * self
      if (s.unit_alpha) {
        unary([k](C a) { return k - a; });
      } else {
        unary([k, al](C a) { return std::fma(-al, a, k); });
      }
      break;
    case OpKind::kMulTensor: binary([](C a, C b) { return a * b; }); break;
    case OpKind::kMulScalar: unary([k](C a) { return a * k; }); break;
    case OpKind::kDivTensor: binary([](C a, C b) { return a / b; }); break;
    case OpKind::kDivScalar: unary([k](C a) { return a / k; }); break;
    case OpKind::kPowTensorScalar: {
      const double e = s.exponent;
      if (e == 2.0) {
        unary([](C a) { return a * a; });
      } else if (e == 3.0) {
        unary([](C a) { return a * a * a; });
      } else if (e == 0.5) {
        unary([](C a) { return std::sqrt(a); });
      } else if (e == -0.5) {
        unary([](C a) { return C(1) / std::sqrt(a); });
      } else if (e == -1.0) {
        unary([](C a) { return C(1) / a; });
      } else if (e == -2.0) {
        unary([](C a) { return C(1) / (a * a); });
      } else {
        unary([k](C a) { return std::pow(a, k); });
      }
      break;
    }
    case OpKind::kNeg: unary([](C a) { return -a; }); break;
    case OpKind::kAbs: unary([](C a) { return std::abs(a); }); break;
    case OpKind::kExp: unary([](C a) { return std::exp(a); }); break;
    case OpKind::kLog: unary([](C a) { return std::log(a); }); break;
    case OpKind::kSqrt: unary([](C a) { return std::sqrt(a); }); break;
    case OpKind::kRsqrt: unary([](C a) { return C(1) / std::sqrt(a); }); break;
    case OpKind::kReciprocal: unary([](C a) { return C(1) / a; }); break;
    case OpKind::kSin: unary([](C a) { return std::sin(a); }); break;
    case OpKind::kCos: unary([](C a) { return std::cos(a); }); break;
    case OpKind::kTanh: unary([](C a) { return std::tanh(a); }); break;
    case OpKind::kErf: unary([](C a) { return std::erf(a); }); break;
    case OpKind::kLog1p: unary([](C a) { return std::log1p(a); }); break;
    case OpKind::kExpm1: unary([](C a) { return std::expm1(a); }); break;
    case OpKind::kFloor: unary([](C a) { return std::floor(a); }); break;
    case OpKind::kCeil: unary([](C a) { return std::ceil(a); }); break;
    case OpKind::kTrunc: unary([](C a) { return std::trunc(a); }); break;
    case OpKind::kRound: unary([](C a) { return std::nearbyint(a); }); break;
    case OpKind::kSign: unary([](C a) { return static_cast<C>((C(0) < a) - (a < C(0))); }); break;
    case OpKind::kMinimum: binary([](C a, C b) { return (a < b || a != a) ? a : b; }); break;
    case OpKind::kMaximum: binary([](C a, C b) { return (a > b || a != a) ? a : b; }); break;
    case OpKind::kAtan2: binary([](C a, C b) { return std::atan2(a, b); }); break;
    case OpKind::kHypot: binary([](C a, C b) { return std::hypot(a, b); }); break;
    case OpKind::kSigmoid: unary([](C a) { return C(1) / (C(1) + std::exp(-a)); }); break;
    case OpKind::kSilu: unary([](C a) { return a / (C(1) + std::exp(-a)); }); break;
    case OpKind::kHardswish: unary([](C a) { return a * std::min(std::max(a + C(3), C(0)), C(6)) / C(6); }); break;
    case OpKind::kHardsigmoid: unary([](C a) { return std::min(std::max(a + C(3), C(0)), C(6)) / C(6); }); break;
    case OpKind::kSiluMul:  // silu's result is rounded to T before the product, as the two ops round
      binary([](C a, C b) { return round_to<T>(a / (C(1) + std::exp(-a))) * b; });
      break;
    case OpKind::kGelu:
      if (s.gelu_tanh) {
        unary([](C a) {
          const C beta = C(std::numbers::sqrt2 * (2 * std::numbers::inv_sqrtpi) * 0.5);  // sqrt(2 / pi)
          const C kappa = C(0.044715);
          return C(0.5) * a * (C(1) + std::tanh(beta * (a + kappa * a * a * a)));
        });
      } else {
        unary([](C a) { return a * C(0.5) * (C(1) + std::erf(a * C(std::numbers::sqrt2 / 2))); });
      }
      break;
    case OpKind::kClamp:
    case OpKind::kClampMin:
    case OpKind::kHardtanh:
    case OpKind::kRelu: {
      // NaN stays NaN, and a NaN bound gives NaN (as clamp_to in elementwise.cc).
      const bool has_lo = s.has_lo, has_hi = s.has_hi;
      const C lo = s.lo, hi = s.hi;
      unary([=](C a) {
        if (std::isnan(a)) return a;
        if (has_lo) a = std::isnan(lo) ? lo : std::max(a, lo);
        if (has_hi) a = std::isnan(hi) ? hi : std::min(a, hi);
        return a;
      });
      break;
    }
    default: break;  // validate() admits no other op
  }
}

// The output's iteration space with dims that need no separate index merged:
// sizes innermost first, and per input the element strides of each.
struct Loop {
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides;
};

Loop coalesce(const Shape& shape, const std::vector<Tensor>& expanded) {
  const size_t n_in = expanded.size();
  Loop loop;
  loop.strides.resize(n_in);
  bool same_contiguous = true;  // the common case: every input laid out like the output
  for (const Tensor& t : expanded) same_contiguous = same_contiguous && t.is_contiguous();
  if (same_contiguous) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    loop.sizes = {n};
    for (auto& s : loop.strides) s = {1};
    return loop;
  }
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1) continue;
    bool merge = !loop.sizes.empty();
    for (size_t k = 0; k < n_in && merge; ++k)
      merge = expanded[k].strides()[d] == loop.strides[k].back() * loop.sizes.back();
    if (merge) {
      loop.sizes.back() *= shape[d];
      continue;
    }
    loop.sizes.push_back(shape[d]);
    for (size_t k = 0; k < n_in; ++k) loop.strides[k].push_back(expanded[k].strides()[d]);
  }
  if (loop.sizes.empty()) {  // one element
    loop.sizes = {1};
    for (auto& s : loop.strides) s = {0};
  }
  return loop;
}

template <typename T>
Status run_typed(const engine::ElementwiseProgram& p, const std::vector<Tensor>& expanded, Tensor& out) {
  using C = opmath_t<T>;
  KILN_ASSIGN_OR_RETURN(std::vector<Step<C>> steps, prepare_steps<T>(p, out.dtype()));
  const int64_t numel = out.numel();
  if (numel == 0) return Status::ok();

  const Loop loop = coalesce(out.sizes(), expanded);
  const size_t n_in = expanded.size();
  const size_t n_regs = n_in + steps.size();
  std::vector<C> regs(n_regs * kChunk);
  auto reg = [&](int r) { return regs.data() + static_cast<size_t>(r) * kChunk; };
  std::vector<const T*> base(n_in);
  for (size_t k = 0; k < n_in; ++k) base[k] = expanded[k].data<T>();
  T* const out_data = out.data<T>();
  const C* const result = reg(static_cast<int>(n_regs) - 1);

  const int64_t inner = loop.sizes[0];
  const int64_t rows = numel / inner;
  std::vector<int64_t> index(loop.sizes.size(), 0);
  std::vector<int64_t> offset(n_in, 0);
  int64_t out_offset = 0;
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t start = 0; start < inner; start += kChunk) {
      const int64_t n = std::min(kChunk, inner - start);
      for (size_t k = 0; k < n_in; ++k) {
        const int64_t stride = loop.strides[k][0];
        const T* src = base[k] + offset[k] + start * stride;
        C* r = reg(static_cast<int>(k));
        if (stride == 1) {
          for (int64_t j = 0; j < n; ++j) r[j] = load(src[j]);
        } else if (stride == 0) {
          std::fill(r, r + n, load(*src));
        } else {
          for (int64_t j = 0; j < n; ++j) r[j] = load(src[j * stride]);
        }
      }
      for (const Step<C>& s : steps) run_step<T>(s, reg(s.x), reg(s.y), reg(s.dst), n);
      T* dst = out_data + out_offset + start;
      for (int64_t j = 0; j < n; ++j) dst[j] = convert<T>(result[j]);
    }
    out_offset += inner;
    for (size_t d = 1; d < loop.sizes.size(); ++d) {
      for (size_t k = 0; k < n_in; ++k) offset[k] += loop.strides[k][d];
      if (++index[d] < loop.sizes[d]) break;
      for (size_t k = 0; k < n_in; ++k) offset[k] -= loop.strides[k][d] * loop.sizes[d];
      index[d] = 0;
    }
  }
  return Status::ok();
}

bool fusible_dtype(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

Status fused_elementwise_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> inputs, a.tensors("inputs"));
  KILN_ASSIGN_OR_RETURN(std::string text, a.string_arg("program"));
  auto program = engine::ElementwiseProgram::parse(text);
  if (!program.has_value()) return program.status().with_context(a.node().describe());
  if (inputs.empty()) return a.error("a fused elementwise layer needs at least one input");
  Shape shape;
  for (const Tensor& t : inputs) {
    auto s = broadcast_shapes(shape, t.sizes());
    if (!s)
      return a.error("inputs cannot be broadcast together: " + t.type_string() + " against " + shape_to_string(shape));
    shape = std::move(*s);
  }
  if (auto n = checked_numel(shape); !n.has_value()) return a.error(n.status().message());
  Tensor out = Tensor::zeros(inputs[0].dtype(), shape);
  KILN_TRY_CTX(run_fused_elementwise(*program, inputs, out), a.node().describe());
  a.set_output(0, out);
  return Status::ok();
}

}  // namespace

Status run_fused_elementwise(const engine::ElementwiseProgram& program, std::span<const Tensor> inputs, Tensor& out) {
  KILN_TRY(program.validate());
  if (static_cast<size_t>(program.num_inputs) != inputs.size())
    return invalid_argument("the program reads " + std::to_string(program.num_inputs) + " inputs, got " +
                            std::to_string(inputs.size()));
  if (!out.defined() || !out.is_contiguous()) return invalid_argument("the output must be a contiguous tensor");
  if (!fusible_dtype(out.dtype()))
    return invalid_argument("fused elementwise layers compute in float32, float64, float16 or bfloat16, got " +
                            out.type_string());
  std::vector<Tensor> expanded;
  expanded.reserve(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    if (!t.defined()) return invalid_argument("input " + std::to_string(k) + " is undefined");
    if (t.dtype() != out.dtype())
      return invalid_argument("input " + std::to_string(k) + " is " + t.type_string() + ", the output is " +
                              out.type_string() + " (all must have one dtype)");
    if (!can_expand(t.sizes(), out.sizes()))
      return invalid_argument("input " + std::to_string(k) + " " + t.type_string() +
                              " does not broadcast to the output's shape " + shape_to_string(out.sizes()));
    expanded.push_back(expand_to(t, out.sizes()));
  }
  return visit_floating(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    return run_typed<T>(program, expanded, out);
  });
}

void register_fused_elementwise_kernels(KernelRegistry& r) {
  r.add(ir::OpKind::kFusedElementwise, &fused_elementwise_kernel);
}

}  // namespace kiln::cpu
