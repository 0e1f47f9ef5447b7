// Symbolic scalar ops (sizes read at run time, Python arithmetic on SymInts)
// and runtime checks (_assert_scalar, _assert_tensor_metadata).
#include <cmath>

#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

// Python builtins (_operator.mul, ...) are serialized with positional
// arguments; read them by position.
Expected<Scalar> positional(KernelArgs& a, size_t i) {
  const ir::Node& n = a.node();
  if (i >= n.args.size()) return a.error("expects at least " + std::to_string(i + 1) + " arguments");
  return a.scalar(n.args[i].name);
}

int64_t floor_div(int64_t x, int64_t y) {
  int64_t q = x / y;
  if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
  return q;
}

Status binary(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Scalar x, positional(a, 0));
  ir::OpKind op = a.node().op;
  if (op == ir::OpKind::kPyNeg) {
    a.set_output(0, x.kind == Scalar::Kind::kFloat ? RtValue(-x.f) : RtValue(-x.i));
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(Scalar y, positional(a, 1));
  bool fl = x.kind == Scalar::Kind::kFloat || y.kind == Scalar::Kind::kFloat;
  using K = ir::OpKind;
  switch (op) {
    case K::kPyAdd: a.set_output(0, fl ? RtValue(x.f + y.f) : RtValue(x.i + y.i)); break;
    case K::kPySub: a.set_output(0, fl ? RtValue(x.f - y.f) : RtValue(x.i - y.i)); break;
    case K::kPyMul: a.set_output(0, fl ? RtValue(x.f * y.f) : RtValue(x.i * y.i)); break;
    case K::kPyFloordiv:
    case K::kPyMod:
      if (fl) {
        double q = std::floor(x.f / y.f);
        a.set_output(0, op == K::kPyFloordiv ? RtValue(q) : RtValue(x.f - q * y.f));
      } else {
        if (y.i == 0) return a.error("integer division by zero");
        int64_t q = floor_div(x.i, y.i);
        a.set_output(0, op == K::kPyFloordiv ? RtValue(q) : RtValue(x.i - q * y.i));
      }
      break;
    case K::kPyLe: a.set_output(0, fl ? x.f <= y.f : x.i <= y.i); break;
    case K::kPyLt: a.set_output(0, fl ? x.f < y.f : x.i < y.i); break;
    case K::kPyGe: a.set_output(0, fl ? x.f >= y.f : x.i >= y.i); break;
    case K::kPyGt: a.set_output(0, fl ? x.f > y.f : x.i > y.i); break;
    case K::kPyEq: a.set_output(0, fl ? x.f == y.f : x.i == y.i); break;
    case K::kPyNe: a.set_output(0, fl ? x.f != y.f : x.i != y.i); break;
    case K::kPyAnd: a.set_output(0, x.i != 0 && y.i != 0); break;
    case K::kSymMax: a.set_output(0, fl ? RtValue(std::max(x.f, y.f)) : RtValue(std::max(x.i, y.i))); break;
    case K::kSymMin: a.set_output(0, fl ? RtValue(std::min(x.f, y.f)) : RtValue(std::min(x.i, y.i))); break;
    default: return a.error("not a binary symbolic op");
  }
  return Status::ok();
}

Status sym_not(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Scalar x, positional(a, 0));
  a.set_output(0, x.i == 0);
  return Status::ok();
}

Status sym_sqrt(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Scalar x, positional(a, 0));
  a.set_output(0, std::sqrt(x.f));
  return Status::ok();
}

Status sym_size(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim, a.int_arg("dim"));
  if (dim < -t.dim() || dim >= t.dim())
    return a.error("dim " + std::to_string(dim) + " out of range for a tensor of rank " + std::to_string(t.dim()));
  a.set_output(0, t.size(dim));
  return Status::ok();
}

Status sym_numel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, a.tensor("self"));
  a.set_output(0, t.numel());
  return Status::ok();
}

Status local_scalar_dense(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, a.tensor("self"));
  if (t.numel() != 1) return a.error("expects a one-element tensor, got " + t.type_string());
  if (is_floating(t.dtype())) a.set_output(0, t.item());
  else if (t.dtype() == DType::Bool) a.set_output(0, t.item_int() != 0);
  else a.set_output(0, t.item_int());
  return Status::ok();
}

Status getitem(KernelArgs& a) {
  return a.error("a getitem on a symbolic value is not supported");
}

Status assert_scalar(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Scalar cond, a.scalar("self"));
  if (cond.i == 0 && cond.f == 0) {
    std::string msg = a.string_arg("assert_msg", std::string("assertion failed")).value();
    return invalid_argument(a.node().describe() + ": run-time check failed: " + msg);
  }
  return Status::ok();
}

Status assert_tensor_metadata(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, a.tensor("a"));
  KILN_ASSIGN_OR_RETURN(auto dtype, a.dtype_arg("dtype"));
  if (dtype && *dtype != t.dtype())
    return a.error("expected dtype " + std::string(dtype_name(*dtype)) + ", got " + t.type_string());
  return Status::ok();
}

Status constrain_range(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(int64_t v, a.int_arg("size"));
  KILN_ASSIGN_OR_RETURN(auto lo, a.optional_int("min"));
  KILN_ASSIGN_OR_RETURN(auto hi, a.optional_int("max"));
  if ((lo && v < *lo) || (hi && v > *hi))
    return a.error("value " + std::to_string(v) + " is outside the range the program was exported for");
  return Status::ok();
}

}  // namespace

void register_symbolic_kernels(KernelRegistry& r) {
  using K = ir::OpKind;
  for (K k : {K::kPyAdd, K::kPySub, K::kPyMul, K::kPyFloordiv, K::kPyMod, K::kPyLe, K::kPyLt, K::kPyGe, K::kPyGt,
              K::kPyEq, K::kPyNe, K::kPyAnd, K::kPyNeg, K::kSymMax, K::kSymMin})
    r.add(k, &binary);
  r.add(K::kSymNot, &sym_not);
  r.add(K::kSymSqrt, &sym_sqrt);
  r.add(K::kSymSize, &sym_size);
  r.add(K::kSymNumel, &sym_numel);
  r.add(K::kLocalScalarDense, &local_scalar_dense);
  r.add(K::kPyGetitem, &getitem);
  r.add(K::kAssertScalar, &assert_scalar);
  r.add(K::kAssertTensorMetadata, &assert_tensor_metadata);
  r.add(K::kSymConstrainRangeForSize, &constrain_range);
  r.add(K::kSymConstrainRange, &constrain_range);
}

}  // namespace kiln::cpu
