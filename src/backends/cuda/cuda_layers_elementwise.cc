// The CUDA builder's layers, elementwise: fused floating programs, integer arithmetic and comparisons, floating
// comparisons, where, copies into a tensor, arange.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string_view>

#include "backends/cuda/cuda_layers.h"

namespace kiln::cuda::layers {

Status emit_program(Builder& b, const std::string& layer, const engine::ElementwiseProgram& prog,
                    const std::vector<const ir::Value*>& operands, const ir::Value* out) {
  std::vector<TRef> ins;
  for (const ir::Value* v : operands) {
    KILN_ASSIGN_OR_RETURN(TRef r, b.ref(v));
    ins.push_back(r);
  }
  return emit_program_on(b, layer, prog, std::move(ins), out);
}

// emit_program on operands already bound: each converted to the compute
// dtype and broadcast to `out`'s sizes.
Status emit_program_on(Builder& b, const std::string& layer, const engine::ElementwiseProgram& prog,
                       std::vector<TRef> operands, const ir::Value* out) {
  const std::vector<int64_t> sizes = static_sizes(out);
  const DType dt = b.compute_dtype(out->type.dtype);
  std::vector<TRef> ins;
  for (TRef r : operands) {
    if (r.dtype != dt) {
      KILN_ASSIGN_OR_RETURN(r, b.contiguous(r, layer, dt));
    }
    KILN_ASSIGN_OR_RETURN(r, expanded(r, sizes));
    ins.push_back(r);
  }
  // The output takes the layout of a full-size dense operand (channels-last stays channels-last).
  bool cl = false;
  for (const TRef& r : ins)
    if (r.sizes.size() == 4 && dense_layout(r.sizes, r.strides) && r.strides[1] == 1 && r.sizes[1] > 1 &&
        prod(r.sizes) > r.sizes[1]) {
      cl = true;
      break;
    }
  TRef o = b.new_tensor(dt, sizes, cl);
  std::vector<StridedLayout> layouts;
  std::vector<BufferRef> args{o.buf};
  for (const TRef& r : ins) {
    layouts.push_back(r.layout());
    args.push_back(r.buf);
  }
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, elementwise_kernel(prog, o.layout(), layouts));
  KILN_TRY(b.launch(layer, std::move(k), args));
  b.bind(out, o);
  return Status::ok();
}

namespace {

// The operator of an integer add/sub/mul or comparison layer, or an empty string.
std::string integer_operator(OpKind op) {
  switch (op) {
    case OpKind::kAddTensor:
    case OpKind::kAddScalar: return "+";
    case OpKind::kSubTensor:
    case OpKind::kSubScalar: return "-";
    case OpKind::kMulTensor:
    case OpKind::kMulScalar: return "*";
    case OpKind::kLtTensor:
    case OpKind::kLtScalar: return "<";
    case OpKind::kLeTensor:
    case OpKind::kLeScalar: return "<=";
    case OpKind::kGtTensor:
    case OpKind::kGtScalar: return ">";
    case OpKind::kGeTensor:
    case OpKind::kGeScalar: return ">=";
    case OpKind::kEqTensor:
    case OpKind::kEqScalar: return "==";
    case OpKind::kNeTensor:
    case OpKind::kNeScalar: return "!=";
    case OpKind::kAndTensor:
    case OpKind::kBitwiseAndTensor: return "&";
    case OpKind::kBitwiseOrTensor: return "|";
    default: return "";
  }
}

// Whether `n` is integer arithmetic or an integer comparison (positions, counters, masks from positions).
// A symbolic integer whose value is an expression of the sizes (`sym_size`
// and arithmetic on it): a number in every network specialized to a shape.
bool sized_scalar(const ir::Value* v) { return v && v->kind == ir::ValueKind::kSymInt && v->sym; }

bool integer_binary(const ir::Node& n) {
  const std::string op = integer_operator(n.op);
  const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  const ir::Value* a = value_arg(n, "self");
  const bool bitwise = op == "&" || op == "|";
  if (op.empty() || !out || !a ||
      (a->type.dtype != DType::Int64 && a->type.dtype != DType::Int32 && !(bitwise && a->type.dtype == DType::Bool)))
    return false;
  const bool compare = op != "+" && op != "-" && op != "*" && !bitwise;
  if (out->type.dtype != (compare ? DType::Bool : a->type.dtype)) return false;
  for (const ir::Value* v : n.operands()) {
    if (sized_scalar(v) && v != a) continue;  // `other` a size: a number once the shape is known
    if (v->kind != ir::ValueKind::kTensor || v->type.dtype != a->type.dtype) return false;
  }
  const ir::Arg* other = n.find("other");
  if (other && !std::get_if<ir::Value*>(other) && !std::get_if<int64_t>(other)) return false;  // a float scalar
  const ir::Arg* alpha = n.find("alpha");
  return !alpha || std::get_if<int64_t>(alpha);
}

// A comparison of floating tensors, or of one with a number, giving bool (masks from scores).
bool floating_compare(const ir::Node& n) {
  const std::string op = integer_operator(n.op);
  const ir::Value* out = n.outputs.size() == 1 ? n.outputs[0] : nullptr;
  const ir::Value* a = value_arg(n, "self");
  if (op.empty() || op == "+" || op == "-" || op == "*" || op == "&" || op == "|" || !out ||
      out->kind != ir::ValueKind::kTensor || out->type.dtype != DType::Bool || !a ||
      a->kind != ir::ValueKind::kTensor || !is_floating(a->type.dtype) || a->type.dtype == DType::Float64)
    return false;
  const ir::Arg* other = n.find("other");
  if (!other) return false;
  if (const ir::Value* const* v = std::get_if<ir::Value*>(other))
    return (*v)->kind == ir::ValueKind::kTensor && is_floating((*v)->type.dtype) && (*v)->type.dtype != DType::Float64;
  return std::get_if<double>(other) || std::get_if<int64_t>(other);
}

Status emit_floating_compare(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const std::vector<int64_t> sizes = static_sizes(out);
  KILN_ASSIGN_OR_RETURN(TRef a, b.ref(value_arg(n, "self")));
  KILN_ASSIGN_OR_RETURN(const TRef wide, expanded(a, sizes));
  std::optional<TRef> rhs;
  double scalar = 0;
  if (const ir::Value* other = value_arg(n, "other")) {
    KILN_ASSIGN_OR_RETURN(TRef r, b.ref(other));
    KILN_ASSIGN_OR_RETURN(rhs, expanded(r, sizes));
  } else if (const double* d = std::get_if<double>(n.find("other"))) {
    scalar = *d;
  } else {
    scalar = static_cast<double>(int_arg(n, "other").value_or(0));
  }
  TRef o = b.new_tensor(DType::Bool, sizes);
  const StridedLayout rl = rhs ? rhs->layout() : StridedLayout{};
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k,
                        compare_kernel(integer_operator(n.op), o.layout(), wide.layout(), rhs ? &rl : nullptr, scalar));
  std::vector<BufferRef> args{o.buf, a.buf};
  if (rhs) args.push_back(rhs->buf);
  KILN_TRY(b.launch(n.name, std::move(k), args));
  b.bind(out, o);
  return Status::ok();
}

// torch.where(condition, self, other) on tensors: a bool condition, values
// of the result's dtype, or floating ones for a floating result (an engine
// below fp32 converts activations but may keep a 0-d constant as it is).
bool where_select(const ir::Node& n) {
  if (n.op != OpKind::kWhere || n.outputs.size() != 1 || n.outputs[0]->kind != ir::ValueKind::kTensor) return false;
  const ir::Value* c = value_arg(n, "condition");
  const ir::Value* a = value_arg(n, "self");
  const ir::Value* o = value_arg(n, "other");
  const DType t = n.outputs[0]->type.dtype;
  auto fits = [&](const ir::Value* v) {
    return v->kind == ir::ValueKind::kTensor && (v->type.dtype == t || (is_floating(v->type.dtype) && is_floating(t)));
  };
  return c && a && o && c->kind == ir::ValueKind::kTensor && c->type.dtype == DType::Bool && fits(a) && fits(o);
}

Status emit_where(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const std::vector<int64_t> sizes = static_sizes(out);
  std::vector<TRef> in;
  for (const char* name : {"condition", "self", "other"}) {
    KILN_ASSIGN_OR_RETURN(TRef r, b.ref(value_arg(n, name)));
    KILN_ASSIGN_OR_RETURN(TRef wide, expanded(r, sizes));
    in.push_back(wide);
  }
  TRef o = b.new_tensor(out->type.dtype, sizes);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, where_kernel(o.layout(), in[0].layout(), in[1].layout(), in[2].layout()));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, in[0].buf, in[1].buf, in[2].buf}));
  b.bind(out, o);
  return Status::ok();
}

Status emit_integer_binary(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const std::vector<int64_t> sizes = static_sizes(out);
  KILN_ASSIGN_OR_RETURN(TRef a, b.ref(value_arg(n, "self")));
  std::optional<TRef> rhs;
  int64_t scalar = 0;
  if (const ir::Value* other = value_arg(n, "other"); other && sized_scalar(other)) {
    if (!other->sym->is_const()) return unsupported(n.name + ": its size operand is not specialized to a shape");
    scalar = other->sym->value();
  } else if (other) {
    KILN_ASSIGN_OR_RETURN(TRef r, b.ref(other));
    KILN_ASSIGN_OR_RETURN(rhs, expanded(r, sizes));
  } else {
    scalar = int_arg(n, "other").value_or(0);
  }
  const int64_t alpha = int_arg(n, "alpha").value_or(1);
  TRef o = b.new_tensor(out->type.dtype, sizes);
  const StridedLayout rl = rhs ? rhs->layout() : StridedLayout{};
  KILN_ASSIGN_OR_RETURN(const TRef wide, expanded(a, sizes));
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, integer_binary_kernel(integer_operator(n.op), o.layout(), wide.layout(),
                                                                 rhs ? &rl : nullptr, scalar, alpha));
  std::vector<BufferRef> args{o.buf, a.buf};
  if (rhs) args.push_back(rhs->buf);
  KILN_TRY(b.launch(n.name, std::move(k), args));
  b.bind(out, o);
  return Status::ok();
}

}  // namespace

// copy(self, src): src broadcast to self's sizes in self's dtype (the functional form of self.copy_(src)).
Status emit_copy_into(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const std::vector<int64_t> sizes = static_sizes(out);
  KILN_ASSIGN_OR_RETURN(TRef src, b.ref(value_arg(n, "src")));
  TRef o = b.new_tensor(b.compute_dtype(out->type.dtype), sizes);
  KILN_ASSIGN_OR_RETURN(const TRef wide, expanded(src, sizes));
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, copy_kernel(o.layout(), wide.layout()));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, src.buf}));
  b.bind(out, o);
  return Status::ok();
}

Status emit_elementwise(Builder& b, const ir::Node& n) {
  if (integer_binary(n)) return emit_integer_binary(b, n);
  if (where_select(n)) return emit_where(b, n);
  if (floating_compare(n)) return emit_floating_compare(b, n);
  if (n.op == OpKind::kFusedElementwise) {
    const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("inputs"));
    if (!ins) return internal_error("fused layer without inputs");
    KILN_ASSIGN_OR_RETURN(engine::ElementwiseProgram prog, engine::ElementwiseProgram::parse(string_arg(n, "program")));
    return emit_program(b, n.name, prog, {ins->begin(), ins->end()}, n.outputs[0]);
  }
  std::vector<ir::Value*> operands;
  auto instr = engine::elementwise_instr(n, &operands);
  if (!instr) return emit_pointwise(b, n);
  engine::ElementwiseProgram prog;
  prog.num_inputs = static_cast<int>(operands.size());
  prog.instrs.push_back(*instr);
  return emit_program(b, n.name, prog, {operands.begin(), operands.end()}, n.outputs[0]);
}

// torch.arange of integer positions: one kernel.
Status emit_arange(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const std::vector<int64_t> sizes = static_sizes(out);
  const int64_t start = n.find("start") ? int_arg(n, "start").value_or(0) : 0;
  const int64_t step = n.find("step") ? int_arg(n, "step").value_or(1) : 1;
  if (sizes.size() != 1 || step == 0) return unsupported("arange " + n.describe());
  TRef o = b.new_tensor(out->type.dtype, sizes);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, arange_kernel(out->type.dtype, sizes[0], start, step));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf}));
  b.bind(out, o);
  return Status::ok();
}

// Fused programs, integer arithmetic and comparisons, floating comparisons,
// where; the pointwise layer for the rest.
std::string elementwise_refusal(const ir::Node& n) {
  if (n.op == OpKind::kFusedElementwise || integer_binary(n) || where_select(n) || floating_compare(n)) return "";
  if (engine::is_fusible_elementwise(n)) return "";
  return pointwise_refusal(n);
}

// copy_ of a tensor that broadcasts to self.
std::string copy_into_refusal(const ir::Node& n) {
  const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  const ir::Value* src = value_arg(n, "src");
  if (!src || !out || src->kind != ir::ValueKind::kTensor || rank(src) > rank(out))
    return "copy from something that does not broadcast to self";
  return "";
}

// Integer positions (a sequence's, sized by it); the end may be a size known only at run time.
std::string arange_refusal(const ir::Node& n) {
  const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  // Integer positions (a sequence's, sized by it); the end may be a size known only at run time.
  if (!out || (out->type.dtype != DType::Int64 && out->type.dtype != DType::Int32) || rank(out) != 1)
    return "arange other than of int64 or int32 positions";
  for (const char* a : {"start", "step"})
    if (n.find(a) && !is_none(n, a) && !int_arg(n, a))
      return std::string("arange with a ") + a + " that is not an integer";
  if (n.find("end") && !int_arg(n, "end") && !value_arg(n, "end")) return "arange with an end that is not an integer";
  return "";
}

}  // namespace kiln::cuda::layers
