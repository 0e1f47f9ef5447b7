// The CUDA builder's layer emitters: per op family, the device layout of the
// result and the step that computes it. Views are strides over the same
// bytes (no step); everything else is a generated kernel, a cuBLASLt GEMM or
// a cuDNN convolution. cuda_refusal() answers, per node, what the emitters
// cannot take, so that such nodes fall back instead of failing the build.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string_view>

#include "backends/cuda/cuda_builder.h"

namespace kiln::cuda {

namespace {

using ir::OpKind;

// ---- argument reading

const ir::Value* value_arg(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = n.find(name);
  if (!a) return nullptr;
  const auto* v = std::get_if<ir::Value*>(a);
  return v ? *v : nullptr;
}

std::optional<int64_t> int_arg(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = n.find(name);
  if (!a) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(a)) return *i;
  if (const auto* b = std::get_if<bool>(a)) return *b ? 1 : 0;
  return std::nullopt;
}

std::optional<double> double_arg(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = n.find(name);
  if (!a) return std::nullopt;
  if (const auto* d = std::get_if<double>(a)) return *d;
  if (const auto* i = std::get_if<int64_t>(a)) return static_cast<double>(*i);
  return std::nullopt;
}

bool bool_arg(const ir::Node& n, std::string_view name, bool def) {
  const ir::Arg* a = n.find(name);
  if (!a) return def;
  if (const auto* b = std::get_if<bool>(a)) return *b;
  if (const auto* i = std::get_if<int64_t>(a)) return *i != 0;
  return def;
}

std::string string_arg(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = n.find(name);
  if (!a) return "";
  const auto* s = std::get_if<std::string>(a);
  return s ? *s : "";
}

bool is_none(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = n.find(name);
  return !a || std::holds_alternative<ir::NoneArg>(*a);
}

std::optional<std::vector<int64_t>> ints_arg(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = n.find(name);
  if (!a) return std::nullopt;
  if (const auto* v = std::get_if<std::vector<int64_t>>(a)) return *v;
  if (const auto* i = std::get_if<int64_t>(a)) return std::vector<int64_t>{*i};
  if (const auto* s = std::get_if<std::vector<ir::SymInt>>(a)) {
    std::vector<int64_t> out;
    for (const auto& x : *s) {
      if (!std::holds_alternative<int64_t>(x)) return std::nullopt;
      out.push_back(std::get<int64_t>(x));
    }
    return out;
  }
  return std::nullopt;
}

std::vector<int64_t> static_sizes(const ir::Value* v) {
  std::vector<int64_t> s;
  for (const ir::Dim& d : v->type.sizes) s.push_back(d.value);
  return s;
}

int64_t norm_dim(int64_t d, size_t rank) { return d < 0 ? d + static_cast<int64_t>(rank) : d; }

int64_t prod(const std::vector<int64_t>& v, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t p = 1;
  for (size_t i = from; i < std::min(to, v.size()); ++i) p *= v[i];
  return p;
}

std::vector<int64_t> contiguous_strides_of(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) st[d - 1] = st[d] * std::max<int64_t>(sizes[d], 1);
  return st;
}

// ---- views

// PyTorch's rule for a view with new sizes over old strides, or nullopt when
// the layout needs a copy.
std::optional<std::vector<int64_t>> view_strides(const std::vector<int64_t>& old_sizes,
                                                 const std::vector<int64_t>& old_strides,
                                                 const std::vector<int64_t>& new_sizes) {
  if (old_sizes.empty()) return std::vector<int64_t>(new_sizes.size(), 1);
  const int64_t numel = prod(old_sizes);
  if (numel == 0) return contiguous_strides_of(new_sizes);
  std::vector<int64_t> ns(new_sizes.size(), 0);
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t td = static_cast<int64_t>(old_sizes.size()) - 1; td >= 0; --td) {
    tensor_numel *= old_sizes[static_cast<size_t>(td)];
    if (td == 0 || (old_sizes[static_cast<size_t>(td - 1)] != 1 &&
                    old_strides[static_cast<size_t>(td - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[static_cast<size_t>(view_d)] == 1)) {
        ns[static_cast<size_t>(view_d)] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[static_cast<size_t>(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_base_stride = old_strides[static_cast<size_t>(td - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return ns;
}

Expected<TRef> reshaped(Builder& b, const TRef& in, const std::vector<int64_t>& sizes, const std::string& layer) {
  if (auto st = view_strides(in.sizes, in.strides, sizes)) {
    TRef r = in;
    r.sizes = sizes;
    r.strides = *st;
    return r;
  }
  KILN_ASSIGN_OR_RETURN(TRef c, b.contiguous(in, layer));
  c.sizes = sizes;
  c.strides = contiguous_strides_of(sizes);
  return c;
}

TRef narrowed(const TRef& in, size_t dim, int64_t start, int64_t size, int64_t step = 1) {
  TRef r = in;
  r.buf.offset += start * in.strides[dim] * static_cast<int64_t>(dtype_size(in.dtype));
  r.sizes[dim] = size;
  r.strides[dim] *= step;
  return r;
}

// Whether `from` broadcasts to `to` (aligned right: each size equal or 1).
bool broadcasts_to(const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d)
    if (from[d] != to[lead + d] && from[d] != 1) return false;
  return true;
}

// `t` broadcast to `sizes` (aligned right; stride 0 on broadcast dims), or
// kInvalidArgument when it does not broadcast to them (sizes from a .pt2's
// tensor_meta that disagree with the operand).
Expected<TRef> expanded(const TRef& t, const std::vector<int64_t>& sizes) {
  if (!broadcasts_to(t.sizes, sizes))
    return invalid_argument(shape_to_string(t.sizes) + " does not broadcast to " + shape_to_string(sizes));
  TRef r = t;
  r.sizes = sizes;
  r.strides.assign(sizes.size(), 0);
  const size_t lead = sizes.size() - t.sizes.size();
  for (size_t d = 0; d < t.sizes.size(); ++d)
    r.strides[lead + d] = (t.sizes[d] == 1 && sizes[lead + d] != 1) ? 0 : t.strides[d];
  return r;
}

// Whether strides lay out `sizes` densely in some dim order (no gaps, no overlap).
bool dense_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t expect = 1;
  for (size_t d : order) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expect) return false;
    expect *= sizes[d];
  }
  return true;
}

Status emit_view(Builder& b, const ir::Node& n) {
  const std::string& layer = n.name;
  const ir::Value* self = n.operands().empty() ? nullptr : n.operands()[0];
  if (!self) return internal_error("view without an operand");
  KILN_ASSIGN_OR_RETURN(TRef in, b.ref(self));
  const ir::Value* out = n.outputs[0];
  const std::vector<int64_t> out_sizes = static_sizes(out);
  const size_t rank = in.sizes.size();
  // A dim argument within [0, rank) once wrapped: a .pt2's attributes and
  // tensor_meta are not trusted to agree with the operand.
  auto dim_in = [&](int64_t d, size_t of_rank, const char* what) -> Expected<size_t> {
    const int64_t nd = norm_dim(d, of_rank);
    if (nd < 0 || nd >= static_cast<int64_t>(of_rank))
      return invalid_argument(std::string(what) + " dim " + std::to_string(d) + " of a " + std::to_string(of_rank) +
                              "-d tensor");
    return static_cast<size_t>(nd);
  };
  auto same_rank = [&](const std::vector<int64_t>& os, size_t want) -> Status {
    if (os.size() != want)
      return invalid_argument("the exported output " + shape_to_string(os) + " of a view of " +
                              shape_to_string(in.sizes) + " has rank " + std::to_string(os.size()) + ", not " +
                              std::to_string(want));
    return Status::ok();
  };
  switch (n.op) {
    case OpKind::kPermute: {
      auto dims = ints_arg(n, "dims");
      if (!dims || dims->size() != rank) return invalid_argument("permute: bad dims");
      TRef r = in;
      std::vector<bool> seen(rank, false);
      for (size_t d = 0; d < rank; ++d) {
        KILN_ASSIGN_OR_RETURN(const size_t s, dim_in((*dims)[d], rank, "permute"));
        if (seen[s]) return invalid_argument("permute names dim " + std::to_string(s) + " twice");
        seen[s] = true;
        r.sizes[d] = in.sizes[s];
        r.strides[d] = in.strides[s];
      }
      b.bind(out, r);
      return Status::ok();
    }
    case OpKind::kTranspose:
    case OpKind::kT: {
      TRef r = in;
      if (rank >= 2) {
        KILN_ASSIGN_OR_RETURN(const size_t d0,
                              dim_in(n.op == OpKind::kT ? 0 : int_arg(n, "dim0").value_or(0), rank, "transpose"));
        KILN_ASSIGN_OR_RETURN(const size_t d1,
                              dim_in(n.op == OpKind::kT ? 1 : int_arg(n, "dim1").value_or(1), rank, "transpose"));
        std::swap(r.sizes[d0], r.sizes[d1]);
        std::swap(r.strides[d0], r.strides[d1]);
      }
      b.bind(out, r);
      return Status::ok();
    }
    case OpKind::kExpand:
    case OpKind::kExpandAs: {
      KILN_ASSIGN_OR_RETURN(TRef r, expanded(in, out_sizes));
      b.bind(out, r);
      return Status::ok();
    }
    case OpKind::kSelectInt: {
      KILN_ASSIGN_OR_RETURN(const size_t d, dim_in(int_arg(n, "dim").value_or(0), rank, "select"));
      int64_t idx = int_arg(n, "index").value_or(0);
      if (idx < 0) idx += in.sizes[d];
      if (idx < 0 || idx >= in.sizes[d])
        return invalid_argument("select of index " + std::to_string(int_arg(n, "index").value_or(0)) +
                                " along a dim of size " + std::to_string(in.sizes[d]));
      TRef r = narrowed(in, d, idx, 1);
      r.sizes.erase(r.sizes.begin() + static_cast<long>(d));
      r.strides.erase(r.strides.begin() + static_cast<long>(d));
      b.bind(out, r);
      return Status::ok();
    }
    case OpKind::kSliceTensor:
    case OpKind::kNarrow: {
      KILN_ASSIGN_OR_RETURN(const size_t d, dim_in(int_arg(n, "dim").value_or(0), rank, "slice"));
      KILN_TRY(same_rank(out_sizes, rank));
      int64_t start = int_arg(n, "start").value_or(0);
      if (start < 0) start += in.sizes[d];
      start = std::clamp<int64_t>(start, 0, in.sizes[d]);
      const int64_t step = n.op == OpKind::kSliceTensor ? int_arg(n, "step").value_or(1) : 1;
      // The exported length must lie inside the operand along d.
      if (step < 1 || out_sizes[d] < 0 || (out_sizes[d] > 0 && start + (out_sizes[d] - 1) * step >= in.sizes[d]))
        return invalid_argument("a slice of " + std::to_string(out_sizes[d]) + " from " + std::to_string(start) +
                                " step " + std::to_string(step) + " along a dim of size " +
                                std::to_string(in.sizes[d]));
      b.bind(out, narrowed(in, d, start, out_sizes[d], step));
      return Status::ok();
    }
    case OpKind::kSplitTensor:
    case OpKind::kSplitWithSizes:
    case OpKind::kChunk:
    case OpKind::kUnbind: {
      KILN_ASSIGN_OR_RETURN(const size_t d, dim_in(int_arg(n, "dim").value_or(0), rank, "split"));
      int64_t start = 0;
      for (const ir::Value* o : n.outputs) {
        const std::vector<int64_t> os = static_sizes(o);
        KILN_TRY(same_rank(os, n.op == OpKind::kUnbind ? rank - 1 : rank));
        if (start + (n.op == OpKind::kUnbind ? 1 : os[d]) > in.sizes[d])
          return invalid_argument("the parts of a split along dim " + std::to_string(d) + " are longer than its " +
                                  std::to_string(in.sizes[d]));
        if (n.op == OpKind::kUnbind) {
          TRef r = narrowed(in, d, start, 1);
          r.sizes.erase(r.sizes.begin() + static_cast<long>(d));
          r.strides.erase(r.strides.begin() + static_cast<long>(d));
          b.bind(o, r);
          start += 1;
        } else {
          b.bind(o, narrowed(in, d, start, os[d]));
          start += os[d];
        }
      }
      return Status::ok();
    }
    default: break;
  }
  // view, reshape, flatten, unflatten, squeeze, unsqueeze and identities
  KILN_ASSIGN_OR_RETURN(TRef r, reshaped(b, in, out_sizes, layer));
  b.bind(out, r);
  return Status::ok();
}

// ---- elementwise

Status emit_program_on(Builder& b, const std::string& layer, const engine::ElementwiseProgram& prog,
                       std::vector<TRef> operands, const ir::Value* out);

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
  if (!instr) return unsupported("not an elementwise layer the GPU builder can generate");
  engine::ElementwiseProgram prog;
  prog.num_inputs = static_cast<int>(operands.size());
  prog.instrs.push_back(*instr);
  return emit_program(b, n.name, prog, {operands.begin(), operands.end()}, n.outputs[0]);
}

// ---- GEMM

struct MatLayout {
  bool trans = false;
  int64_t ld = 0;
};

std::optional<MatLayout> mat_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  if (sc == 1 && (rows == 1 || sr >= cols)) return MatLayout{false, rows == 1 ? cols : sr};
  if (sr == 1 && (cols == 1 || sc >= rows)) return MatLayout{true, cols == 1 ? rows : sc};
  return std::nullopt;
}

// The single batch stride of `t`'s leading dims (those before the last two), or nullopt.
std::optional<int64_t> batch_stride(const TRef& t) {
  const size_t nb = t.sizes.size() - 2;
  int64_t stride = 0, expect = -1;
  for (size_t d = nb; d-- > 0;) {
    if (t.sizes[d] == 1) continue;
    if (expect < 0) {
      stride = t.strides[d];
      expect = stride * t.sizes[d];
      continue;
    }
    if (stride == 0 ? t.strides[d] != 0 : t.strides[d] != expect) return std::nullopt;
    expect = t.strides[d] * t.sizes[d];
  }
  return stride;
}

Status emit_gemm(Builder& b, const std::string& layer, TRef A, TRef B, const ir::Value* out, const TRef* bias,
                 GemmEpilogue ep, float alpha) {
  const std::vector<int64_t> sizes = static_sizes(out);
  const DType dt = b.compute_dtype(out->type.dtype);
  if (A.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(A, b.contiguous(A, layer, dt));
  }
  if (B.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(B, b.contiguous(B, layer, dt));
  }
  const size_t rank = sizes.size();
  if (rank < 2 || A.sizes.size() < 2 || B.sizes.size() < 2)
    return invalid_argument("a matrix product of " + shape_to_string(A.sizes) + " and " + shape_to_string(B.sizes) +
                            " exported as " + shape_to_string(sizes));
  const int64_t M = sizes[rank - 2], N = sizes[rank - 1], K = A.sizes.back();
  std::vector<int64_t> batch(sizes.begin(), sizes.end() - 2);
  const int64_t nbatch = prod(batch);
  auto full = [&](const TRef& t, int64_t r, int64_t c) {
    std::vector<int64_t> s = batch;
    s.push_back(r);
    s.push_back(c);
    return expanded(t, s);
  };
  KILN_ASSIGN_OR_RETURN(A, full(A, M, K));
  KILN_ASSIGN_OR_RETURN(B, full(B, K, N));
  TRef C = b.new_tensor(dt, sizes);
  GemmLaunch g;
  GemmShape& s = g.shape;
  s.dtype = dt;
  s.allow_tf32 = b.allow_tf32();
  s.n = N;
  s.k = K;
  s.alpha = alpha;
  s.epilogue = ep;
  s.ldc = N;
  // Fold the batch into M when B is shared by every batch entry and A's rows run on.
  auto sb = batch_stride(B);
  bool folded = false;
  if (sb && *sb == 0 && nbatch > 1) {
    std::vector<int64_t> rs(A.sizes.begin(), A.sizes.end() - 1), rst(A.strides.begin(), A.strides.end() - 1);
    if (A.strides.back() == 1) {
      if (auto st = view_strides(rs, rst, {nbatch * M})) {
        s.m = nbatch * M;
        s.lda = std::max<int64_t>((*st)[0], K);
        s.trans_a = false;
        s.batch = 1;
        folded = true;
      }
    }
  }
  auto setup = [&](TRef& t, int64_t r, int64_t c, bool& trans, int64_t& ld, int64_t& bs) -> Status {
    auto ml = mat_layout(r, c, t.strides[t.strides.size() - 2], t.strides.back());
    auto st = batch_stride(t);
    if (!ml || !st) {
      KILN_ASSIGN_OR_RETURN(t, b.contiguous(t, layer));
      ml = mat_layout(r, c, t.strides[t.strides.size() - 2], t.strides.back());
      st = batch_stride(t);
    }
    trans = ml->trans;
    ld = ml->ld;
    bs = *st;
    return Status::ok();
  };
  if (!folded) {
    s.m = M;
    s.batch = nbatch;
    KILN_TRY(setup(A, M, K, s.trans_a, s.lda, s.batch_stride_a));
    s.batch_stride_c = M * N;
  }
  KILN_TRY(setup(B, K, N, s.trans_b, s.ldb, s.batch_stride_b));
  if (folded) s.batch_stride_b = 0;
  g.a = A.buf;
  g.b = B.buf;
  g.c = C.buf;
  if (bias) {
    g.bias = bias->buf;
    g.has_bias = true;
  }
  KILN_TRY(s.validate().with_context(layer));
  // A few rows against a weight stored as rows of k (a decoder's one token
  // through a linear layer): a generated matrix-vector kernel streams the
  // weight at memory bandwidth, where cuBLASLt's GEMM tiles waste most of it.
  GemvShape gv;
  gv.dtype = dt;
  gv.m = s.m;
  gv.n = s.n;
  gv.k = s.k;
  gv.lda = s.lda;
  gv.ldw = s.ldb;
  gv.ldc = s.ldc;
  gv.alpha = s.alpha;
  gv.has_bias = bias != nullptr;
  gv.activation = ep == GemmEpilogue::kBiasRelu ? "relu" : (ep == GemmEpilogue::kBiasGelu ? "gelu" : "none");
  if (s.batch == 1 && !s.trans_a && s.trans_b && s.beta == 0.0f && !s.allow_tf32 && A.buf.offset % 16 == 0 &&
      B.buf.offset % 16 == 0 && gemv_fits(gv)) {
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k, gemv_kernel(gv));
    std::vector<BufferRef> args{C.buf, A.buf, B.buf};
    if (bias) args.push_back(bias->buf);
    KILN_TRY(b.launch(layer + " gemv", std::move(k), args));
    b.bind(out, C);
    return Status::ok();
  }
  if (bias) {
    b.add_gemm(layer, g, {&A, &B, &C, bias});
  } else {
    b.add_gemm(layer, g, {&A, &B, &C});
  }
  b.bind(out, C);
  return Status::ok();
}

Status emit_matmul(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  const ir::Value *a = nullptr, *w = nullptr;
  bool w_transposed = false;
  float alpha = 1.0f;
  const ir::Value* bias_v = value_arg(n, "kiln_bias");
  switch (n.op) {
    case OpKind::kMm:
    case OpKind::kBmm:
      a = value_arg(n, "self");
      w = value_arg(n, "mat2");
      break;
    case OpKind::kMatmul:
      a = value_arg(n, "self");
      w = value_arg(n, "other");
      break;
    case OpKind::kLinear:
      a = value_arg(n, "input");
      w = value_arg(n, "weight");
      w_transposed = true;
      if (!bias_v) bias_v = value_arg(n, "bias");
      break;
    case OpKind::kAddmm:
      a = value_arg(n, "mat1");
      w = value_arg(n, "mat2");
      bias_v = value_arg(n, "self");
      alpha = static_cast<float>(double_arg(n, "alpha").value_or(1.0));
      break;
    default: return internal_error("not a GEMM layer");
  }
  if (!a || !w) return internal_error("GEMM layer without operands");
  KILN_ASSIGN_OR_RETURN(TRef A, b.ref(a));
  // A weight stored k x n (a linear layer's weight transposed while lowering)
  // feeding few rows: store it n x k on the device instead, so that the
  // matrix-vector kernel streams whole rows of it (emit_gemm). Asked for
  // before any plain use, so the plain copy is never uploaded.
  const bool few_rows_of_constant = !w_transposed && b.is_constant(w) && w->type.sizes.size() == 2 &&
                                    w->type.sizes[1].is_static() && w->type.sizes[1].value > 0 &&
                                    prod(static_sizes(out)) / w->type.sizes[1].value <= kGemvMaxRows;
  TRef W;
  if (few_rows_of_constant) {
    KILN_ASSIGN_OR_RETURN(W, b.constant(w, b.compute_dtype(w->type.dtype), false, /*transposed_matrix=*/true));
  } else {
    KILN_ASSIGN_OR_RETURN(W, b.ref(w));
  }
  if (w_transposed) {
    std::swap(W.sizes[0], W.sizes[1]);
    std::swap(W.strides[0], W.strides[1]);
  }
  GemmEpilogue ep = GemmEpilogue::kNone;
  std::optional<TRef> bias;
  if (bias_v) {
    KILN_ASSIGN_OR_RETURN(TRef br, b.ref(bias_v));
    if (br.dtype != dt) {
      KILN_ASSIGN_OR_RETURN(br, b.contiguous(br, n.name, dt));
    }
    KILN_ASSIGN_OR_RETURN(br, b.contiguous(br, n.name));
    bias = br;
    ep = string_arg(n, "kiln_act") == "relu" ? GemmEpilogue::kBiasRelu : GemmEpilogue::kBias;
  }
  return emit_gemm(b, n.name, A, W, out, bias ? &*bias : nullptr, ep, alpha);
}

// ---- convolution

// The largest patch matrix a convolution is lowered to im2col + GEMM with.
constexpr int64_t kIm2colLimitBytes = int64_t{8} << 20;

// Small convolutions (batch 1 sizes) run as im2col + cuBLASLt GEMM; large ones
// stay on cuDNN, where the patch matrix or the residual copy would cost more
// than cuDNN's own kernels (measured on an H200: resnet50 fp16 batch 1 went
// from 0.78 to 0.47 ms this way, while routing batch-64 layers made it slower).
bool use_im2col_gemm(const ConvShape& s, DType dt) {
  if (!s.channels_last || s.groups != 1) return false;
  const int64_t esize = static_cast<int64_t>(dtype_size(dt));
  const int64_t m = s.n * s.out_h * s.out_w;
  const bool pointwise = s.r == 1 && s.s == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0;
  const int64_t col_bytes = pointwise ? 0 : m * s.r * s.s * s.c * esize;
  const int64_t out_bytes = m * s.k * esize;
  return m <= 16384 && col_bytes <= kIm2colLimitBytes && (!s.has_residual || out_bytes <= (int64_t{2} << 20));
}

// The channel count a 16-bit channels-last convolution's input is padded to when it has fewer.
constexpr int64_t kPaddedChannels = 8;

Status emit_conv(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  const bool cl = dt == DType::Float16 || dt == DType::BFloat16;
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "input")));
  if (x.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  }
  const ir::Value* wv = value_arg(n, "weight");
  TRef w;
  // A few input channels (an image's 3) leave cuDNN's channels-last kernels
  // off the tensor cores: the input is copied into 8 channels, zeros past its
  // own, and the filter is stored with 8 channels to match.
  const bool pad_channels =
      cl && int_arg(n, "groups").value_or(1) == 1 && x.sizes[1] < kPaddedChannels && b.is_constant(wv);
  if (pad_channels) {
    TRef xp = b.new_tensor(dt, {x.sizes[0], kPaddedChannels, x.sizes[2], x.sizes[3]}, true);
    KILN_ASSIGN_OR_RETURN(GeneratedKernel pk, pad_channels_kernel(x.layout(), kPaddedChannels));
    KILN_TRY(b.launch(n.name + " pad channels", std::move(pk), {xp.buf, x.buf}));
    x = xp;
  } else if (cl) {
    KILN_ASSIGN_OR_RETURN(x, b.channels_last(x, n.name));
  } else {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name));
  }
  if (pad_channels) {
    KILN_ASSIGN_OR_RETURN(w, b.constant(wv, dt, cl, false, kPaddedChannels));
  } else if (b.is_constant(wv)) {
    KILN_ASSIGN_OR_RETURN(w, b.constant(wv, dt, cl));
  } else {
    KILN_ASSIGN_OR_RETURN(w, b.ref(wv));
    if (w.dtype != dt) {
      KILN_ASSIGN_OR_RETURN(w, b.contiguous(w, n.name, dt));
    }
    if (cl) {
      KILN_ASSIGN_OR_RETURN(w, b.channels_last(w, n.name));
    } else {
      KILN_ASSIGN_OR_RETURN(w, b.contiguous(w, n.name));
    }
  }
  const std::vector<int64_t> os = static_sizes(out);
  ConvLaunch c;
  ConvShape& s = c.shape;
  s.dtype = dt;
  s.allow_tf32 = b.allow_tf32();
  s.n = x.sizes[0], s.c = x.sizes[1], s.h = x.sizes[2], s.w = x.sizes[3];
  s.k = w.sizes[0], s.r = w.sizes[2], s.s = w.sizes[3];
  s.groups = int_arg(n, "groups").value_or(1);
  auto pair = [&](std::string_view name, int64_t def) {
    auto v = ints_arg(n, name).value_or(std::vector<int64_t>{def});
    if (v.empty()) v = {def};
    return std::make_pair(v[0], v.size() > 1 ? v[1] : v[0]);
  };
  std::tie(s.stride_h, s.stride_w) = pair("stride", 1);
  std::tie(s.pad_h, s.pad_w) = pair("padding", 0);
  std::tie(s.dilation_h, s.dilation_w) = pair("dilation", 1);
  // The exported output type against what the operands give (a .pt2's
  // tensor_meta is not trusted to agree): cuDNN writes n x k x out_h x out_w.
  if (os.size() != 4 || os[0] != s.n || os[1] != s.k || w.sizes.size() != 4 || s.groups < 1 ||
      w.sizes[1] * s.groups != s.c)
    return invalid_argument("the convolution of input " + shape_to_string(x.sizes) + " and filter " +
                            shape_to_string(w.sizes) + " in " + std::to_string(s.groups) +
                            " groups cannot give the exported output " + shape_to_string(os));
  s.out_h = os[2];
  s.out_w = os[3];
  s.channels_last = cl;
  TRef y = b.new_tensor(dt, os, cl);
  std::optional<TRef> bias, z;
  if (const ir::Value* bv = value_arg(n, "bias")) {
    KILN_ASSIGN_OR_RETURN(TRef br, b.ref(bv));
    if (br.dtype != dt) {
      KILN_ASSIGN_OR_RETURN(br, b.contiguous(br, n.name, dt));
    }
    KILN_ASSIGN_OR_RETURN(br, b.contiguous(br, n.name));
    if (prod(br.sizes) != s.k)
      return invalid_argument("a convolution of " + std::to_string(s.k) + " filters with a bias of " +
                              shape_to_string(br.sizes));
    bias = br;
    s.has_bias = true;
    c.bias = br.buf;
  }
  if (const ir::Value* zv = value_arg(n, "kiln_residual")) {
    KILN_ASSIGN_OR_RETURN(TRef zr, b.ref(zv));
    if (zr.dtype != dt) {
      KILN_ASSIGN_OR_RETURN(zr, b.contiguous(zr, n.name, dt));
    }
    if (cl) {
      KILN_ASSIGN_OR_RETURN(zr, b.channels_last(zr, n.name));
    } else {
      KILN_ASSIGN_OR_RETURN(zr, b.contiguous(zr, n.name));
    }
    z = zr;
    s.has_residual = true;
    c.z = zr.buf;
  }
  std::string act = n.op == OpKind::kConvAct ? string_arg(n, "activation") : "";
  if (string_arg(n, "kiln_act") == "relu") act = "relu";
  s.act = act == "relu" ? ConvActivation::kRelu : ConvActivation::kNone;
  c.x = x.buf;
  c.w = w.buf;
  c.y = y.buf;
  KILN_TRY(s.validate().with_context(n.name));
  // A 1x1, stride-1 convolution over channels-last data is a GEMM: [N*H*W, C] x [C, K]
  // (the KRSC filter read transposed), with cuBLASLt's bias (+ReLU) epilogue. cuDNN's
  // fused forms take 0.1-0.3 ms for these at batch 1 where the GEMM takes microseconds.
  const bool pointwise = cl && s.r == 1 && s.s == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 &&
                         s.pad_w == 0 && s.groups == 1 && !s.has_residual && s.has_bias;
  if (pointwise) {
    GemmLaunch g;
    GemmShape& gs = g.shape;
    gs.dtype = dt;
    gs.m = s.n * s.h * s.w;
    gs.n = s.k;
    gs.k = s.c;
    gs.lda = s.c;
    gs.trans_b = true;
    gs.ldb = s.c;
    gs.ldc = s.k;
    gs.epilogue = s.act == ConvActivation::kRelu ? GemmEpilogue::kBiasRelu : GemmEpilogue::kBias;
    g.a = x.buf;
    g.b = w.buf;
    g.c = y.buf;
    g.bias = bias->buf;
    g.has_bias = true;
    KILN_TRY(gs.validate().with_context(n.name));
    b.add_gemm(n.name, g, {&x, &w, &y, &*bias});
  } else if (use_im2col_gemm(s, dt)) {
    // Small convolutions (batch 1) as patches x filters on cuBLASLt: cuDNN's
    // convolutions take ~0.1 ms each at these sizes, the GEMM a few microseconds.
    Im2colParams ip;
    ip.r = s.r, ip.s = s.s, ip.sh = s.stride_h, ip.sw = s.stride_w, ip.ph = s.pad_h, ip.pw = s.pad_w;
    ip.dh = s.dilation_h, ip.dw = s.dilation_w, ip.oh = s.out_h, ip.ow = s.out_w;
    const int64_t kk = s.r * s.s * s.c;
    TRef col = x;  // a 1x1 stride-1 convolution reads the channels-last input as it is
    if (!(s.r == 1 && s.s == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0)) {
      col = b.new_tensor(dt, {s.n * s.out_h * s.out_w, kk});
      KILN_ASSIGN_OR_RETURN(GeneratedKernel k, im2col_kernel(ip, x.layout()));
      KILN_TRY(b.launch(n.name + " im2col", std::move(k), {col.buf, x.buf}));
    }
    GemmLaunch g;
    GemmShape& gs = g.shape;
    gs.dtype = dt;
    gs.m = s.n * s.out_h * s.out_w;
    gs.n = s.k;
    gs.k = kk;
    gs.lda = kk;
    gs.trans_b = true;
    gs.ldb = kk;
    gs.ldc = s.k;
    if (z) {
      // The residual goes into the output first and is accumulated into (beta = 1).
      KILN_ASSIGN_OR_RETURN(GeneratedKernel cp, copy_kernel(y.layout(), z->layout()));
      KILN_TRY(b.launch(n.name + " residual", std::move(cp), {y.buf, z->buf}));
      gs.beta = 1.0f;
    }
    const bool relu = s.act == ConvActivation::kRelu;
    if (bias) {
      gs.epilogue = relu ? GemmEpilogue::kBiasRelu : GemmEpilogue::kBias;
      g.bias = bias->buf;
      g.has_bias = true;
    }
    g.a = col.buf;
    g.b = w.buf;
    g.c = y.buf;
    KILN_TRY(gs.validate().with_context(n.name));
    b.add_gemm(n.name, g, {&col, &w, &y, bias ? &*bias : &y});
    if (relu && !bias) {
      engine::ElementwiseProgram prog;
      prog.num_inputs = 1;
      engine::ElementwiseInstr r;
      r.op = OpKind::kRelu;
      r.operands = {0};
      prog.instrs.push_back(r);
      TRef o = b.new_tensor(dt, os, cl);
      KILN_ASSIGN_OR_RETURN(GeneratedKernel rk, elementwise_kernel(prog, o.layout(), {y.layout()}));
      KILN_TRY(b.launch(n.name + " relu", std::move(rk), {o.buf, y.buf}));
      y = o;
    }
  } else {
    b.add_conv(n.name, c, {&x, &w, &y, bias ? &*bias : &y, z ? &*z : &y});
  }
  if (act.empty() || act == "none" || act == "relu") {
    b.bind(out, y);
    return Status::ok();
  }
  // Activations cuDNN does not fuse run as a generated kernel on the result.
  engine::ElementwiseInstr in;
  in.operands = {0};
  if (act == "silu")
    in.op = OpKind::kSilu;
  else if (act == "sigmoid")
    in.op = OpKind::kSigmoid;
  else if (act == "hardswish")
    in.op = OpKind::kHardswish;
  else if (act == "gelu" || act == "gelu_tanh") {
    in.op = OpKind::kGelu;
    in.mode = act == "gelu" ? "none" : "tanh";
  } else if (act == "hardtanh") {
    in.op = OpKind::kHardtanh;
    in.scalars = {double_arg(n, "min_val").value_or(-1.0), double_arg(n, "max_val").value_or(1.0)};
  } else {
    return unsupported("convolution activation '" + act + "'");
  }
  engine::ElementwiseProgram prog;
  prog.num_inputs = 1;
  prog.instrs.push_back(in);
  TRef o = b.new_tensor(dt, os, cl);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, elementwise_kernel(prog, o.layout(), {y.layout()}));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, y.buf}));
  b.bind(out, o);
  return Status::ok();
}

// ---- rows, reductions, pooling

Status emit_row(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  const ir::Value* xv = value_arg(n, n.op == OpKind::kLayerNorm || n.op == OpKind::kRmsNorm ? "input" : "self");
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(xv));
  KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  const std::vector<int64_t> sizes = static_sizes(out);
  int64_t cols = sizes.empty() ? 1 : sizes.back();
  RowOp op = RowOp::kSoftmax;
  double eps = 0;
  std::optional<TRef> weight, bias;
  if (n.op == OpKind::kLayerNorm || n.op == OpKind::kRmsNorm) {
    op = n.op == OpKind::kLayerNorm ? RowOp::kLayerNorm : RowOp::kRmsNorm;
    const auto ns = ints_arg(n, "normalized_shape").value_or(std::vector<int64_t>{});
    cols = prod(ns);
    if (auto e = double_arg(n, "eps")) {
      eps = *e;
    } else {
      eps = xv->type.dtype == DType::Float16    ? 0.0009765625
            : xv->type.dtype == DType::BFloat16 ? 0.0078125
            : xv->type.dtype == DType::Float64  ? std::numeric_limits<double>::epsilon()
                                                : std::numeric_limits<float>::epsilon();
    }
    for (auto [name, slot] : {std::pair{"weight", &weight}, std::pair{"bias", &bias}}) {
      if (const ir::Value* v = value_arg(n, name)) {
        KILN_ASSIGN_OR_RETURN(TRef r, b.ref(v));
        KILN_ASSIGN_OR_RETURN(r, b.contiguous(r, n.name, dt));
        *slot = r;
      }
    }
  } else if (n.op == OpKind::kLogSoftmax || n.op == OpKind::kLogSoftmaxInternal) {
    op = RowOp::kLogSoftmax;
  }
  const int64_t rows = cols == 0 ? 0 : prod(sizes) / cols;
  TRef o = b.new_tensor(dt, sizes);
  if (const ir::Value* cw = value_arg(n, "kiln_cast_weight")) {  // fold_rms_norm_casts
    if (value_arg(n, "kiln_residual")) return internal_error("a norm folded with both a cast weight and a residual");
    KILN_ASSIGN_OR_RETURN(TRef w, b.ref(cw));
    KILN_ASSIGN_OR_RETURN(w, b.contiguous(w, n.name, dt));
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k, rms_norm_cast_kernel(dt, rows, cols, eps));
    KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf, w.buf}));
    b.bind(out, o);
    return Status::ok();
  }
  if (op == RowOp::kLayerNorm || op == RowOp::kRmsNorm) {
    NormRows p{op, dt, rows, cols, eps, weight.has_value(), bias.has_value()};
    std::vector<const TRef*> operands{&x};
    std::optional<TRef> residual, sum;
    if (const ir::Value* rv = value_arg(n, "kiln_residual")) {  // fold_residual_norm
      KILN_ASSIGN_OR_RETURN(TRef r, b.ref(rv));
      KILN_ASSIGN_OR_RETURN(r, b.contiguous(r, n.name, dt));
      residual = r;
      p.residual = true;
      operands.push_back(&*residual);
      if (n.outputs.size() > 1) {
        sum = b.new_tensor(dt, sizes);
        p.write_sum = true;
      }
    }
    for (const std::optional<TRef>* t : {&weight, &bias})
      if (*t) operands.push_back(&**t);
    p.vectorized = norm_rows_vector_fits(dt, cols) &&
                   std::all_of(operands.begin(), operands.end(), [](const TRef* t) { return t->buf.offset % 16 == 0; });
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k, norm_rows_kernel(p));
    auto buf = [](const std::optional<TRef>& t) { return t ? &t->buf : nullptr; };
    KILN_TRY(
        b.launch(n.name, std::move(k), norm_rows_args(o.buf, x.buf, buf(residual), buf(sum), buf(weight), buf(bias))));
    b.bind(out, o);
    if (sum) b.bind(n.outputs[1], *sum);
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, row_kernel(op, dt, rows, cols, eps, weight.has_value(), bias.has_value()));
  std::vector<BufferRef> args{o.buf, x.buf};
  KILN_TRY(b.launch(n.name, std::move(k), args));
  b.bind(out, o);
  return Status::ok();
}

// group_norm(input [N, C, *], num_groups G, weight [C]?, bias [C]?, eps):
// the rows [N * G, C / G * prod(*)] normalized as a LayerNorm without
// weight, then times weight[c] plus bias[c] per channel in one elementwise
// kernel.
std::string group_norm_refusal(const ir::Node& n) {
  const ir::Value* x = value_arg(n, "input");
  const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  if (!x || !out || !is_floating(x->type.dtype) || out->type.dtype != x->type.dtype || x->type.sizes.size() < 2)
    return "group_norm of a floating tensor of rank >= 2 with the input's dtype";
  const auto g = int_arg(n, "num_groups");
  const ir::Dim& c = x->type.sizes[1];
  if (!g || *g < 1 || !c.is_static() || c.value % *g != 0) return "group_norm whose groups do not divide a static C";
  for (const char* name : {"weight", "bias"})
    if (const ir::Value* v = value_arg(n, name); v && (v->type.sizes.size() != 1 || v->type.dtype != x->type.dtype))
      return std::string("group_norm with a ") + name + " other than a vector of the input's dtype";
  return "";
}

Status emit_group_norm(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  const std::vector<int64_t> sizes = static_sizes(out);
  const int64_t groups = int_arg(n, "num_groups").value_or(1);
  const int64_t rows = sizes[0] * groups;
  const int64_t cols = rows == 0 ? 0 : prod(sizes) / rows;
  const double eps = double_arg(n, "eps").value_or(1e-5);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "input")));
  KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  KILN_ASSIGN_OR_RETURN(TRef flat, reshaped(b, x, {rows, cols}, n.name));
  const ir::Value* wv = value_arg(n, "weight");
  const ir::Value* bv = value_arg(n, "bias");
  TRef normed = b.new_tensor(dt, wv || bv ? std::vector<int64_t>{rows, cols} : sizes);
  NormRows p{RowOp::kLayerNorm, dt, rows, cols, eps, false, false};
  p.vectorized = norm_rows_vector_fits(dt, cols) && flat.buf.offset % 16 == 0 && normed.buf.offset % 16 == 0;
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, norm_rows_kernel(p));
  KILN_TRY(b.launch(n.name, std::move(k),
                    norm_rows_args<BufferRef>(normed.buf, flat.buf, nullptr, nullptr, nullptr, nullptr)));
  if (!wv && !bv) {
    b.bind(out, normed);
    return Status::ok();
  }
  normed.sizes = sizes;
  normed.strides = contiguous_strides_of(sizes);
  // weight and bias as [1, C, 1, ...]: broadcast over the batch and the positions.
  std::vector<int64_t> channel(sizes.size(), 1);
  channel[1] = sizes[1];
  std::vector<TRef> operands{normed};
  std::string text = "inputs " + std::to_string(1 + (wv ? 1 : 0) + (bv ? 1 : 0)) + "; ";
  int reg = 0, next = static_cast<int>(1 + (wv ? 1 : 0) + (bv ? 1 : 0));
  for (const ir::Value* v : {wv, bv}) {
    if (!v) continue;
    KILN_ASSIGN_OR_RETURN(TRef r, b.ref(v));
    KILN_ASSIGN_OR_RETURN(r, b.contiguous(r, n.name, dt));
    KILN_ASSIGN_OR_RETURN(r, reshaped(b, r, channel, n.name));
    operands.push_back(r);
    const int in = static_cast<int>(operands.size()) - 1;
    text += "%" + std::to_string(next) + " = " +
            (v == wv ? "aten.mul.Tensor(%" + std::to_string(reg) + ", %" + std::to_string(in) + ")"
                     : "aten.add.Tensor(%" + std::to_string(reg) + ", %" + std::to_string(in) + ", 1)") +
            "; ";
    reg = next++;
  }
  text.resize(text.size() - 2);
  KILN_ASSIGN_OR_RETURN(engine::ElementwiseProgram prog, engine::ElementwiseProgram::parse(text));
  return emit_program_on(b, n.name + ".affine", prog, std::move(operands), out);
}

Status emit_reduce(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  if (x.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  }
  const size_t rank = x.sizes.size();
  std::vector<bool> reduced(rank, false);
  auto dims = ints_arg(n, "dim");
  if (!dims || dims->empty()) {
    reduced.assign(rank, true);
  } else {
    // dim 0 or -1 of a 0-d tensor reduces it whole, as PyTorch has it.
    for (int64_t d : *dims) {
      const int64_t nd = norm_dim(d, std::max<size_t>(rank, 1));
      if (nd < 0 || nd >= std::max<int64_t>(static_cast<int64_t>(rank), 1))
        return invalid_argument("reduction over dim " + std::to_string(d) + " of a " + std::to_string(rank) +
                                "-d tensor");
      if (rank > 0) reduced[static_cast<size_t>(nd)] = true;
    }
  }
  ReduceDims rd;
  for (size_t d = 0; d < rank; ++d) {
    auto& sz = reduced[d] ? rd.reduced_sizes : rd.kept_sizes;
    auto& st = reduced[d] ? rd.reduced_strides : rd.kept_strides;
    sz.push_back(x.sizes[d]);
    st.push_back(x.strides[d]);
  }
  ReduceOp op = ReduceOp::kSum;
  if (n.op == OpKind::kMeanDim || n.op == OpKind::kMean) op = ReduceOp::kMean;
  if (n.op == OpKind::kAmax) op = ReduceOp::kMax;
  if (n.op == OpKind::kAmin) op = ReduceOp::kMin;
  TRef o = b.new_tensor(dt, static_sizes(out));
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, reduce_kernel(op, dt, rd));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf}));
  b.bind(out, o);
  return Status::ok();
}

Status emit_pool(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  if (x.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  }
  PoolParams p;
  auto pair = [&](std::string_view name, std::vector<int64_t> def) {
    auto v = ints_arg(n, name).value_or(def);
    if (v.empty()) v = def;
    return std::make_pair(v[0], v.size() > 1 ? v[1] : v[0]);
  };
  if (n.op == OpKind::kAdaptiveAvgPool2d || n.op == OpKind::kAdaptiveAvgPool2dInternal) {
    p.kind = PoolParams::Kind::kAdaptiveAvg;
  } else {
    p.kind = n.op == OpKind::kMaxPool2d ? PoolParams::Kind::kMax : PoolParams::Kind::kAvg;
    std::tie(p.kh, p.kw) = pair("kernel_size", {1});
    std::tie(p.sh, p.sw) = pair("stride", {p.kh, p.kw});
    std::tie(p.ph, p.pw) = pair("padding", {0});
    if (p.kind == PoolParams::Kind::kMax) std::tie(p.dh, p.dw) = pair("dilation", {1});
    p.count_include_pad = bool_arg(n, "count_include_pad", true);
    p.divisor_override = int_arg(n, "divisor_override").value_or(0);
  }
  const bool cl = x.sizes.size() == 4 && x.strides[1] == 1 && x.sizes[1] > 1;
  TRef o = b.new_tensor(dt, static_sizes(out), cl);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, pool2d_kernel(p, o.layout(), x.layout()));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf}));
  b.bind(out, o);
  return Status::ok();
}

// ---- attention, gathers, concatenation, casts

// The stride of a [B, H] pair of dims walked as one batch index b*H + h, if there is one.
std::optional<int64_t> pair_stride(int64_t B, int64_t H, int64_t sb, int64_t sh) {
  if (H == 1) return B == 1 ? 0 : sb;
  if (B == 1 || sb == sh * H) return sh;
  return std::nullopt;
}

// Attention as cuBLASLt batched GEMMs around a generated masked softmax:
// scores = scale * Q K^T, P = softmax(scores + mask), O = P V. Taken when q, k
// and v are matrices with one batch stride over [B, Hk] and the scores fit in
// 64 MiB; otherwise the fused kernel runs. With grouped-query heads (Hk key
// heads for H = G * Hk query heads), the G query heads of a key head are the
// rows of one product: batch B * Hk, G * L rows, and the scores keep the
// [B, H, L, S] order the softmax expects. Returns whether it emitted the layer.
Expected<bool> attention_as_gemms(Builder& b, const std::string& layer, TRef q, TRef k, TRef v,
                                  const AttentionParams& p, const BufferRef* mask, const TRef& o) {
  const int64_t B = q.sizes[0], H = q.sizes[1], L = q.sizes[2], E = q.sizes[3];
  const int64_t Hk = k.sizes[1], S = k.sizes[2], Ev = v.sizes[3];
  const DType dt = q.dtype;
  if (Hk < 1 || H % Hk != 0 || v.sizes[1] != Hk) return false;
  const int64_t G = H / Hk;
  if (B * H * L * S * static_cast<int64_t>(dtype_size(dt)) > (int64_t{64} << 20)) return false;
  // The row stride of q's G * L rows per key head, when there is one.
  auto q_rows = [&](const TRef& t) -> std::optional<int64_t> {
    if (G * L == 1) return E;
    if (G == 1) return t.strides[2];
    if (L == 1) return t.strides[1];
    if (t.strides[1] == L * t.strides[2]) return t.strides[2];
    return std::nullopt;
  };
  // Operands the batched GEMMs cannot walk as they are ([B, S, H, E] storage
  // seen as [B, H, S, E] with B > 1, misaligned views) are copied contiguous first.
  for (TRef* t : {&q, &k, &v}) {
    const int64_t group = t == &q ? G : 1;
    if (t->strides[3] != 1 || t->buf.offset % 16 != 0 ||
        !pair_stride(B, Hk, t->strides[0], group * t->strides[1]) || (t == &q && !q_rows(*t))) {
      TRef c = b.new_tensor(t->dtype, t->sizes);
      KILN_ASSIGN_OR_RETURN(GeneratedKernel ck, copy_kernel(c.layout(), t->layout()));
      KILN_TRY(b.launch(layer + " contiguous", std::move(ck), {c.buf, t->buf}));
      *t = c;
    }
  }
  auto sq = pair_stride(B, Hk, q.strides[0], G * q.strides[1]);
  auto sk = pair_stride(B, Hk, k.strides[0], k.strides[1]);
  auto sv = pair_stride(B, Hk, v.strides[0], v.strides[1]);
  auto lq = q_rows(q);
  if (!sq || !sk || !sv || !lq) return internal_error("attention operands without a batch stride after copying");
  TRef scores = b.new_tensor(dt, {B * H, L, S});
  GemmLaunch g1;
  GemmShape& s1 = g1.shape;
  s1.dtype = dt;
  s1.allow_tf32 = b.allow_tf32();
  s1.m = G * L, s1.n = S, s1.k = E, s1.batch = B * Hk;
  s1.lda = *lq;
  s1.trans_b = true;
  s1.ldb = S == 1 ? E : k.strides[2];
  s1.ldc = S;
  s1.batch_stride_a = *sq, s1.batch_stride_b = *sk, s1.batch_stride_c = G * L * S;
  s1.alpha = static_cast<float>(p.scale);
  g1.a = q.buf, g1.b = k.buf, g1.c = scores.buf;
  if (!s1.validate()) return false;
  b.add_gemm(layer + " scores", g1, {&q, &k, &scores});
  TRef probs = b.new_tensor(dt, {B * H, L, S});
  KILN_ASSIGN_OR_RETURN(GeneratedKernel sm,
                        attention_softmax_kernel(dt, B, H, L, S, p.has_mask ? &p.mask : nullptr, p.causal));
  std::vector<BufferRef> sargs{probs.buf, scores.buf};
  if (p.has_mask) sargs.push_back(*mask);
  KILN_TRY(b.launch(layer + " softmax", std::move(sm), sargs));
  GemmLaunch g2;
  GemmShape& s2 = g2.shape;
  s2.dtype = dt;
  s2.allow_tf32 = b.allow_tf32();
  s2.m = G * L, s2.n = Ev, s2.k = S, s2.batch = B * Hk;
  s2.lda = S;
  s2.ldb = S == 1 ? Ev : v.strides[2];
  s2.ldc = Ev;
  s2.batch_stride_a = G * L * S, s2.batch_stride_b = *sv, s2.batch_stride_c = G * L * Ev;
  g2.a = probs.buf, g2.b = v.buf, g2.c = o.buf;
  KILN_TRY(s2.validate().with_context(layer));
  b.add_gemm(layer + " values", g2, {&probs, &v, &o});
  return true;
}

Status emit_attention(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  AttentionParams p;
  TRef q, k, v;
  for (auto [name, slot] : {std::pair{"query", &q}, std::pair{"key", &k}, std::pair{"value", &v}}) {
    KILN_ASSIGN_OR_RETURN(*slot, b.ref(value_arg(n, name)));
    if (slot->dtype != dt) {
      KILN_ASSIGN_OR_RETURN(*slot, b.contiguous(*slot, n.name, dt));
    }
  }
  p.q = q.layout();
  p.k = k.layout();
  p.v = v.layout();
  std::optional<TRef> mask;
  if (const ir::Value* mv = value_arg(n, "attn_mask")) {
    KILN_ASSIGN_OR_RETURN(TRef m, b.ref(mv));
    if (m.dtype != DType::Bool && m.dtype != dt) {
      KILN_ASSIGN_OR_RETURN(m, b.contiguous(m, n.name, dt));
    }
    const std::vector<int64_t> ms{q.sizes[0], q.sizes[1], q.sizes[2], k.sizes[2]};
    KILN_ASSIGN_OR_RETURN(m, expanded(m, ms));
    p.has_mask = true;
    p.mask = m.layout();
    mask = m;
  }
  p.causal = bool_arg(n, "is_causal", false);
  p.scale = double_arg(n, "scale").value_or(1.0 / std::sqrt(static_cast<double>(q.sizes[3])));
  const std::vector<int64_t> os = static_sizes(out);
  // 16-bit attention over several query rows runs on the tensor cores in one
  // kernel that reads q, k and v through their strides and writes [B, L, H, E]
  // storage, so the usual transpose back to [B, L, H * E] is a view. (One row
  // per head, a decode step, stays on the GEMMs below.)
  if (os.size() == 4 && os[2] >= 16 && q.buf.offset % 4 == 0 && k.buf.offset % 4 == 0 && v.buf.offset % 4 == 0 &&
      flash_attention_fits(p, {dt, os, {os[2] * os[1] * os[3], os[3], os[1] * os[3], 1}})) {
    TRef fo = b.new_tensor(dt, {os[0], os[2], os[1], os[3]});
    fo.sizes = os;
    fo.strides = {os[2] * os[1] * os[3], os[3], os[1] * os[3], 1};
    KILN_ASSIGN_OR_RETURN(GeneratedKernel kern, flash_attention_kernel(p, fo.layout()));
    std::vector<BufferRef> fargs{fo.buf, q.buf, k.buf, v.buf};
    if (mask) fargs.push_back(mask->buf);
    KILN_TRY(b.launch(n.name, std::move(kern), fargs));
    b.bind(out, fo);
    return Status::ok();
  }
  TRef o = b.new_tensor(dt, os);
  std::vector<BufferRef> args{o.buf, q.buf, k.buf, v.buf};
  if (mask) args.push_back(mask->buf);
  if (Expected<bool> done = attention_as_gemms(b, n.name, q, k, v, p, args.size() > 4 ? &args[4] : nullptr, o);
      !done.has_value()) {
    return done.status();
  } else if (*done) {
    b.bind(out, o);
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(GeneratedKernel kern, attention_kernel(p));
  KILN_TRY(b.launch(n.name, std::move(kern), args));
  b.bind(out, o);
  return Status::ok();
}

Status emit_gather_rows(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  const bool emb = n.op == OpKind::kEmbedding;
  KILN_ASSIGN_OR_RETURN(TRef table, b.ref(value_arg(n, emb ? "weight" : "self")));
  KILN_ASSIGN_OR_RETURN(table, b.contiguous(table, n.name, dt));
  KILN_ASSIGN_OR_RETURN(TRef idx, b.ref(value_arg(n, emb ? "indices" : "index")));
  KILN_ASSIGN_OR_RETURN(idx, b.contiguous(idx, n.name));
  if (table.sizes.empty()) return invalid_argument("rows gathered from a 0-d table");
  const int64_t rows = prod(idx.sizes);
  const int64_t table_rows = table.sizes[0];
  const int64_t cols = table_rows == 0 ? 0 : prod(table.sizes) / table_rows;
  TRef o = b.new_tensor(dt, static_sizes(out));
  const int code = b.add_error_layer(n.name);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, gather_rows_kernel(dt, idx.dtype, rows, table_rows, cols, code));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, table.buf, idx.buf, b.error_word()}));
  b.bind(out, o);
  return Status::ok();
}

// torch.index (x[i, j], x[:, i]): index tensors for consecutive dims of
// self, Nones before and after them; nullopt when the indices are not of
// that form (a bool mask, whose result size depends on the data, or index
// tensors apart).
struct IndexRead {
  int64_t first = 0;
  std::vector<const ir::Value*> indices;
};

std::optional<IndexRead> index_read(const ir::Node& n) {
  // Tensor?[] (Nones among them) or Tensor[] (none), as the program spells it.
  std::vector<std::optional<ir::Value*>> all;
  const ir::Arg* arg = n.find("indices");
  if (const auto* opt = arg ? std::get_if<std::vector<std::optional<ir::Value*>>>(arg) : nullptr) all = *opt;
  if (const auto* plain = arg ? std::get_if<std::vector<ir::Value*>>(arg) : nullptr)
    all.assign(plain->begin(), plain->end());
  const auto* list = &all;
  const ir::Value* self = value_arg(n, "self");
  if (list->empty() || !self || self->kind != ir::ValueKind::kTensor || n.outputs.size() != 1) return std::nullopt;
  IndexRead r;
  size_t k = 0;
  while (k < list->size() && !(*list)[k]) ++k;
  r.first = static_cast<int64_t>(k);
  for (; k < list->size() && (*list)[k]; ++k) {
    const ir::Value* v = *(*list)[k];
    if (v->kind != ir::ValueKind::kTensor || (v->type.dtype != DType::Int64 && v->type.dtype != DType::Int32))
      return std::nullopt;
    r.indices.push_back(v);
  }
  for (; k < list->size(); ++k)
    if ((*list)[k]) return std::nullopt;
  if (r.indices.empty() || list->size() > self->type.sizes.size()) return std::nullopt;
  return r;
}

Status emit_index(Builder& b, const ir::Node& n) {
  auto r = index_read(n);
  if (!r) return unsupported(n.name + ": an index other than tensors for consecutive dims");
  const ir::Value* out = n.outputs[0];
  const std::vector<int64_t> sizes = static_sizes(out);
  const DType dt = b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  if (x.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  }
  const int64_t count = static_cast<int64_t>(r->indices.size());
  const int64_t index_rank = static_cast<int64_t>(sizes.size()) - static_cast<int64_t>(x.sizes.size()) + count;
  if (index_rank < 0) return invalid_argument(n.name + ": its result has fewer dims than the index leaves");
  const std::vector<int64_t> bshape(sizes.begin() + r->first, sizes.begin() + r->first + index_rank);
  std::vector<StridedLayout> layouts;
  std::vector<BufferRef> args;
  for (const ir::Value* v : r->indices) {
    KILN_ASSIGN_OR_RETURN(TRef t, b.ref(v));
    KILN_ASSIGN_OR_RETURN(TRef wide, expanded(t, bshape));
    StridedLayout l{t.dtype, sizes, std::vector<int64_t>(sizes.size(), 0)};
    for (int64_t d = 0; d < index_rank; ++d)
      l.strides[static_cast<size_t>(r->first + d)] = wide.strides[static_cast<size_t>(d)];
    layouts.push_back(std::move(l));
    args.push_back(t.buf);
  }
  TRef o = b.new_tensor(dt, sizes);
  const int code = b.add_error_layer(n.name);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, index_kernel(o.layout(), x.layout(), layouts, r->first, index_rank, code));
  std::vector<BufferRef> all{o.buf, x.buf};
  all.insert(all.end(), args.begin(), args.end());
  all.push_back(b.error_word());
  KILN_TRY(b.launch(n.name, std::move(k), all));
  b.bind(out, o);
  return Status::ok();
}

Status emit_gather(Builder& b, const ir::Node& n) {
  if (n.op == OpKind::kIndexTensor) return emit_index(b, n);
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  if (x.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  }
  KILN_ASSIGN_OR_RETURN(TRef idx, b.ref(value_arg(n, "index")));
  const int64_t dim = norm_dim(int_arg(n, "dim").value_or(0), x.sizes.size());
  TRef o = b.new_tensor(dt, static_sizes(out));
  const int code = b.add_error_layer(n.name);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, gather_kernel(o.layout(), x.layout(), idx.layout(), dim, code));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf, idx.buf, b.error_word()}));
  b.bind(out, o);
  return Status::ok();
}

// A write of rows at positions along one dim: index_copy, kiln.cache_write, or
// index_put with one position index (Nones before it) and values that are the
// rows, perhaps without leading 1s (torch's x[:, :, pos] = v).
struct IndexWrite {
  const ir::Value* self = nullptr;
  const ir::Value* index = nullptr;
  const ir::Value* source = nullptr;
  int64_t dim = 0;
  std::vector<int64_t> rows;  // the source's sizes as written: self's with dim's size the index count
};

std::optional<IndexWrite> index_write(const ir::Node& n) {
  IndexWrite w;
  w.self = value_arg(n, "self");
  if (!w.self || n.outputs.size() != 1) return std::nullopt;
  const size_t rank = std::max<size_t>(1, w.self->type.sizes.size());
  if (n.op == OpKind::kIndexPut) {
    const auto* idx = std::get_if<std::vector<std::optional<ir::Value*>>>(n.find("indices"));
    const ir::Arg* acc = n.find("accumulate");
    if (!idx || idx->empty() || (acc && std::get_if<bool>(acc) && *std::get_if<bool>(acc))) return std::nullopt;
    for (size_t k = 0; k + 1 < idx->size(); ++k)
      if ((*idx)[k]) return std::nullopt;
    if (!idx->back() || idx->size() > rank) return std::nullopt;
    w.index = *idx->back();
    w.dim = static_cast<int64_t>(idx->size()) - 1;
    w.source = value_arg(n, "values");
  } else {
    w.index = value_arg(n, "index");
    w.source = value_arg(n, "source");
    w.dim = norm_dim(int_arg(n, "dim").value_or(0), rank);
  }
  if (!w.index || !w.source || w.index->type.sizes.size() > 1 || w.dim < 0 || w.dim >= static_cast<int64_t>(rank))
    return std::nullopt;
  w.rows = w.self->type.sizes.empty() ? std::vector<int64_t>{1} : static_sizes(w.self);
  w.rows[static_cast<size_t>(w.dim)] = w.index->type.sizes.empty() ? 1 : w.index->type.sizes[0].value;
  // The source: exactly the rows, or the rows without leading 1s.
  std::vector<int64_t> src = static_sizes(w.source);
  if (src.empty()) src = {1};
  if (src.size() > w.rows.size()) return std::nullopt;
  const size_t lead = w.rows.size() - src.size();
  for (size_t d = 0; d < w.rows.size(); ++d)
    if (d < lead ? w.rows[d] != 1 : w.rows[d] != src[d - lead]) return std::nullopt;
  return w;
}

// index_copy / index_put (into a copy of self) and kiln.cache_write (into the
// engine input slot of self itself: the caller's cache, written in place).
Status emit_index_copy(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  std::optional<IndexWrite> w = index_write(n);
  if (!w) return unsupported("not a write of rows at positions");
  const bool in_place = n.op == OpKind::kCacheWrite;
  TRef dst;
  if (in_place) {
    std::optional<TRef> slot = b.input_slot(w->self);
    if (!slot) return internal_error("writes in place into '" + w->self->name + "', which is not an engine input");
    dst = *slot;
  } else {
    KILN_ASSIGN_OR_RETURN(TRef x, b.ref(w->self));
    dst = b.new_tensor(b.compute_dtype(out->type.dtype), static_sizes(out));
    KILN_ASSIGN_OR_RETURN(GeneratedKernel ck, copy_kernel(dst.layout(), x.layout()));
    KILN_TRY(b.launch(n.name, std::move(ck), {dst.buf, x.buf}));
  }
  KILN_ASSIGN_OR_RETURN(TRef src, b.ref(w->source));
  KILN_ASSIGN_OR_RETURN(src, b.contiguous(src, n.name, dst.dtype));
  KILN_ASSIGN_OR_RETURN(TRef idx, b.ref(w->index));
  KILN_ASSIGN_OR_RETURN(idx, b.contiguous(idx, n.name));
  const std::vector<int64_t>& rows = w->rows;
  const std::vector<int64_t> dsizes = dst.sizes.empty() ? std::vector<int64_t>{1} : dst.sizes;
  const auto d = static_cast<size_t>(w->dim);
  if (dsizes.size() != rows.size() || prod(src.sizes) != prod(rows) || prod(idx.sizes) != rows[d])
    return invalid_argument("the rows written, self and the index do not fit together");
  const int code = b.add_error_layer(n.name);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, index_copy_kernel(dst.dtype, idx.dtype, prod(rows, 0, d), rows[d],
                                                             prod(rows, d + 1), dsizes[d], code));
  KILN_TRY(b.launch(n.name, std::move(k), {dst.buf, src.buf, idx.buf, b.error_word()}));
  if (in_place && b.compute_dtype(dst.dtype) != dst.dtype) {
    KILN_ASSIGN_OR_RETURN(TRef cast, b.contiguous(dst, n.name, b.compute_dtype(dst.dtype)));
    b.bind(out, cast);
  } else {
    b.bind(out, dst);
  }
  return Status::ok();
}

Status emit_rotary(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  const std::vector<int64_t> os = static_sizes(out);
  std::vector<TRef> ops;
  for (const char* name : {"input", "cos", "sin"}) {
    KILN_ASSIGN_OR_RETURN(TRef r, b.ref(value_arg(n, name)));
    if (r.dtype != dt) {
      KILN_ASSIGN_OR_RETURN(r, b.contiguous(r, n.name, dt));
    }
    KILN_ASSIGN_OR_RETURN(r, expanded(r, os));
    ops.push_back(r);
  }
  TRef o = b.new_tensor(dt, os);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, rotary_kernel(o.layout(), ops[0].layout(), ops[1].layout(), ops[2].layout()));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, ops[0].buf, ops[1].buf, ops[2].buf}));
  b.bind(out, o);
  return Status::ok();
}

Status emit_cat(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  if (!ins) return internal_error("cat without tensors");
  const std::vector<int64_t> os = static_sizes(out);
  const int64_t nd = norm_dim(int_arg(n, "dim").value_or(0), os.size());
  if (nd < 0 || nd >= static_cast<int64_t>(os.size()))
    return invalid_argument("cat along dim " + std::to_string(int_arg(n, "dim").value_or(0)) + " of " +
                            shape_to_string(os));
  const auto d = static_cast<size_t>(nd);
  TRef o = b.new_tensor(dt, os);
  int64_t start = 0;
  for (const ir::Value* v : *ins) {
    KILN_ASSIGN_OR_RETURN(TRef r, b.ref(v));
    if (r.sizes.size() != os.size()) continue;  // legacy empty 1-D operands
    bool fits = start + r.sizes[d] <= os[d];
    for (size_t k = 0; k < os.size(); ++k) fits = fits && (k == d || r.sizes[k] == os[k]);
    if (!fits)
      return invalid_argument("cat of " + shape_to_string(r.sizes) + " at " + std::to_string(start) + " along dim " +
                              std::to_string(d) + " does not fit the exported output " + shape_to_string(os));
    TRef slice = narrowed(o, d, start, r.sizes[d]);
    start += r.sizes[d];
    if (prod(r.sizes) == 0) continue;
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k, copy_kernel(slice.layout(), r.layout()));
    KILN_TRY(b.launch(n.name, std::move(k), {slice.buf, r.buf}));
  }
  b.bind(out, o);
  return Status::ok();
}

Status emit_cast(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(n.operands()[0]));
  const DType dt = b.compute_dtype(out->type.dtype);
  if (x.dtype == dt) {
    b.bind(out, x);
    return Status::ok();
  }
  TRef o = b.new_tensor(dt, x.sizes);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, copy_kernel(o.layout(), x.layout()));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf}));
  b.bind(out, o);
  return Status::ok();
}

enum class Family {
  kNone,
  kSize,  // sizes and arithmetic on them: numbers once the network is specialized to a shape; no step
  kArange,
  kView,
  kIdentity,
  kElementwise,
  kGemm,
  kConv,
  kRow,
  kReduce,
  kPool,
  kAttention,
  kGather,
  kGatherDim,
  kCat,
  kCast,
  kIndexCopy,
  kCopyInto,
  kRotary
};

Family family(OpKind op) {
  switch (op) {
    case OpKind::kSymSize: return Family::kSize;
    case OpKind::kArange:
    case OpKind::kArangeStart:
    case OpKind::kArangeStartStep: return Family::kArange;
    case OpKind::kView:
    case OpKind::kUnsafeView:
    case OpKind::kReshape:
    case OpKind::kFlatten:
    case OpKind::kUnflatten:
    case OpKind::kPermute:
    case OpKind::kTranspose:
    case OpKind::kT:
    case OpKind::kSelectInt:
    case OpKind::kSliceTensor:
    case OpKind::kNarrow:
    case OpKind::kUnsqueeze:
    case OpKind::kSqueeze:
    case OpKind::kSqueezeDim:
    case OpKind::kSqueezeDims:
    case OpKind::kExpand:
    case OpKind::kExpandAs:
    case OpKind::kSplitTensor:
    case OpKind::kSplitWithSizes:
    case OpKind::kChunk:
    case OpKind::kUnbind: return Family::kView;
    case OpKind::kAlias:
    case OpKind::kDetach:
    case OpKind::kLiftFreshCopy:
    case OpKind::kClone:
    case OpKind::kContiguous:
    case OpKind::kDropout: return Family::kIdentity;
    case OpKind::kTo:
    case OpKind::kToCopy:
    case OpKind::kTypeAs:
    case OpKind::kToDtypeLayout:
    case OpKind::kToDevice: return Family::kCast;
    case OpKind::kCopy: return Family::kCopyInto;
    case OpKind::kMm:
    case OpKind::kBmm:
    case OpKind::kMatmul:
    case OpKind::kLinear:
    case OpKind::kAddmm: return Family::kGemm;
    case OpKind::kConv2d:
    case OpKind::kConvolution:
    case OpKind::kConvAct: return Family::kConv;
    case OpKind::kLayerNorm:
    case OpKind::kGroupNorm:
    case OpKind::kRmsNorm:
    case OpKind::kSoftmax:
    case OpKind::kSoftmaxInternal:
    case OpKind::kLogSoftmax:
    case OpKind::kLogSoftmaxInternal: return Family::kRow;
    case OpKind::kMeanDim:
    case OpKind::kMean:
    case OpKind::kSumDimIntList:
    case OpKind::kSum:
    case OpKind::kAmax:
    case OpKind::kAmin: return Family::kReduce;
    case OpKind::kMaxPool2d:
    case OpKind::kAvgPool2d:
    case OpKind::kAdaptiveAvgPool2d:
    case OpKind::kAdaptiveAvgPool2dInternal: return Family::kPool;
    case OpKind::kAttention:
    case OpKind::kScaledDotProductAttention: return Family::kAttention;
    case OpKind::kEmbedding:
    case OpKind::kIndexSelect: return Family::kGather;
    case OpKind::kGather:
    case OpKind::kIndexTensor: return Family::kGatherDim;
    case OpKind::kCat: return Family::kCat;
    case OpKind::kRotary: return Family::kRotary;
    case OpKind::kIndexCopy:
    case OpKind::kIndexPut:
    case OpKind::kCacheWrite: return Family::kIndexCopy;
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
    case OpKind::kNeScalar: return Family::kElementwise;  // integer ones here; floating ones if fusible
    case OpKind::kAndTensor:
    case OpKind::kBitwiseAndTensor:
    case OpKind::kBitwiseOrTensor:
    case OpKind::kFusedElementwise:
    case OpKind::kWhere:
    case OpKind::kSiluMul: return Family::kElementwise;
    default: break;
  }
  if (ir::op_category(op) == ir::OpCategory::kSym && op != OpKind::kLocalScalarDense) return Family::kSize;
  return engine::is_elementwise_program_op(op) ? Family::kElementwise : Family::kNone;
}

bool floating(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16 || t == DType::Float64;
}

}  // namespace

bool cuda_implements(ir::OpKind op) { return family(op) != Family::kNone; }

std::string cuda_refusal(const ir::Node& n) {
  auto rank = [](const ir::Value* v) { return v ? v->type.sizes.size() : 0; };
  const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  switch (family(n.op)) {
    case Family::kElementwise:
      if (n.op == OpKind::kFusedElementwise || integer_binary(n) || where_select(n) || floating_compare(n)) return "";
      if (n.op == OpKind::kWhere) return "where on numbers, or on values of another kind than its result";
      if (!engine::is_fusible_elementwise(n))
        return "the GPU generates elementwise kernels for floating tensors of one dtype with number arguments only";
      return "";
    case Family::kIdentity:
      if (n.operands().empty() || n.operands()[0]->kind != ir::ValueKind::kTensor || !out)
        return "an identity of something that is not a tensor";
      if (n.op == OpKind::kDropout && bool_arg(n, "train", false)) return "dropout in training mode";
      return "";
    case Family::kCast:
      if (!out || out->kind != ir::ValueKind::kTensor || n.operands().empty() ||
          n.operands()[0]->kind != ir::ValueKind::kTensor)
        return "not a tensor cast";
      return "";
    case Family::kGemm: {
      for (const ir::Value* v : n.operands())
        if (v->kind == ir::ValueKind::kTensor && !floating(v->type.dtype)) return "integer matrix products";
      const ir::Value* a = value_arg(n, n.op == OpKind::kLinear ? "input" : n.op == OpKind::kAddmm ? "mat1" : "self");
      const ir::Value* w = value_arg(n, n.op == OpKind::kLinear   ? "weight"
                                        : n.op == OpKind::kMatmul ? "other"
                                                                  : "mat2");
      if (rank(a) < 2 || rank(w) < 2 || rank(out) < 2) return "matrix products with a 1-D operand or result";
      if (n.op == OpKind::kLinear && rank(w) != 2) return "linear with a weight that is not 2-D";
      if (n.op == OpKind::kAddmm) {
        if (double_arg(n, "beta").value_or(1.0) != 1.0) return "addmm with beta != 1";
        const ir::Value* bias = value_arg(n, "self");
        if (!bias || rank(bias) > 2 || (rank(bias) == 2 && bias->type.sizes[0].value != 1))
          return "addmm whose bias is not a row vector";
      }
      if (n.op == OpKind::kLinear) {
        const ir::Value* bias = value_arg(n, "bias");
        if (bias && rank(bias) != 1) return "linear whose bias is not 1-D";
      }
      return "";
    }
    case Family::kConv: {
      const ir::Value* x = value_arg(n, "input");
      const ir::Value* w = value_arg(n, "weight");
      if (rank(x) != 4 || rank(w) != 4 || rank(out) != 4) return "convolutions other than batched 2-D";
      if (n.op == OpKind::kConvolution) {
        if (bool_arg(n, "transposed", false)) return "transposed convolution";
        for (int64_t p : ints_arg(n, "output_padding").value_or(std::vector<int64_t>{}))
          if (p != 0) return "convolution with output padding";
      }
      if (!is_none(n, "padding") && !ints_arg(n, "padding")) return "convolution padding given as a string";
      for (const char* a : {"stride", "dilation"})
        if (!is_none(n, a) && !ints_arg(n, a)) return std::string("convolution ") + a + " that is not a static list";
      if (!floating(x->type.dtype) || x->type.dtype == DType::Float64) return "convolutions in this dtype";
      const std::string act = n.op == OpKind::kConvAct ? string_arg(n, "activation") : "";
      if (!act.empty() && act != "none" && act != "relu" && act != "silu" && act != "sigmoid" && act != "hardswish" &&
          act != "gelu" && act != "gelu_tanh" && act != "hardtanh")
        return "convolution activation '" + act + "'";
      return "";
    }
    case Family::kRow: {
      if (n.op == OpKind::kGroupNorm) return group_norm_refusal(n);
      const ir::Value* x = value_arg(n, n.op == OpKind::kLayerNorm || n.op == OpKind::kRmsNorm ? "input" : "self");
      if (!x || !floating(x->type.dtype) || !out || out->type.dtype != x->type.dtype)
        return "row operations in floating types with the input's dtype";
      if (n.op == OpKind::kLayerNorm || n.op == OpKind::kRmsNorm) {
        auto ns = ints_arg(n, "normalized_shape");
        if (!ns) return "normalized_shape is not a static list";
        return "";
      }
      const int64_t d = norm_dim(int_arg(n, "dim").value_or(-1), rank(x));
      if (rank(x) > 0 && d != static_cast<int64_t>(rank(x)) - 1) return "softmax over a dim other than the last";
      if (bool_arg(n, "half_to_float", false)) return "softmax with half_to_float";
      return "";
    }
    case Family::kReduce: {
      const ir::Value* x = value_arg(n, "self");
      if (!x || !floating(x->type.dtype)) return "reductions of non-floating tensors";
      if (!is_none(n, "dtype")) return "reductions with a dtype argument";
      if (n.find("dim") && !is_none(n, "dim") && !ints_arg(n, "dim")) return "reduction dims that are not a list";
      return "";
    }
    case Family::kPool: {
      const ir::Value* x = value_arg(n, "self");
      if (rank(x) != 4 || !floating(x->type.dtype)) return "pooling other than batched 2-D in floating types";
      return "";
    }
    case Family::kAttention: {
      for (const char* name : {"query", "key", "value"}) {
        const ir::Value* v = value_arg(n, name);
        if (rank(v) != 4) return "attention with q, k and v that are not 4-D";
        if (!floating(v->type.dtype) || v->type.dtype == DType::Float64) return "attention in this dtype";
        if (v->type.sizes[3].value > 256) return "attention head size above 256";
      }
      if (double_arg(n, "dropout_p").value_or(0.0) != 0.0) return "attention with dropout";
      if (const ir::Value* m = value_arg(n, "attn_mask"); m && rank(m) > 4) return "attention mask of rank > 4";
      return "";
    }
    case Family::kGather: {
      const ir::Value* idx = value_arg(n, n.op == OpKind::kEmbedding ? "indices" : "index");
      if (!idx || (idx->type.dtype != DType::Int64 && idx->type.dtype != DType::Int32)) return "non-integer indices";
      if (rank(value_arg(n, n.op == OpKind::kEmbedding ? "weight" : "self")) < 1) return "rows of a 0-d table";
      if (n.op == OpKind::kIndexSelect) {
        const ir::Value* x = value_arg(n, "self");
        if (norm_dim(int_arg(n, "dim").value_or(0), rank(x)) != 0 || rank(idx) != 1)
          return "index_select along a dim other than 0";
      }
      return "";
    }
    case Family::kGatherDim: {
      if (n.op == OpKind::kIndexTensor)
        return index_read(n) ? ""
                             : "index with a bool mask (its result's size depends on the data) or with index "
                               "tensors for dims that are not consecutive";
      const ir::Value* idx = value_arg(n, "index");
      const ir::Value* x = value_arg(n, "self");
      if (!idx || !x || (idx->type.dtype != DType::Int64 && idx->type.dtype != DType::Int32))
        return "gather with non-integer indices";
      if (rank(idx) != rank(x) || rank(x) == 0) return "gather whose index rank differs from the input's";
      if (bool_arg(n, "sparse_grad", false)) return "gather with sparse_grad";
      return "";
    }
    case Family::kCat: {
      const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
      if (!ins || !out) return "cat without a tensor list";
      for (const ir::Value* v : *ins)
        if (v->type.dtype != out->type.dtype) return "cat of mixed dtypes";
      return "";
    }
    case Family::kIndexCopy: {
      std::optional<IndexWrite> w = index_write(n);
      if (!w) return "index writes other than rows at positions along one dim (one position index, Nones before it)";
      if (w->index->type.dtype != DType::Int64 && w->index->type.dtype != DType::Int32)
        return "index writes with non-integer indices";
      if (w->source->type.dtype != w->self->type.dtype) return "index writes of mixed dtypes";
      return "";
    }
    case Family::kCopyInto: {
      const ir::Value* src = value_arg(n, "src");
      if (!src || !out || src->kind != ir::ValueKind::kTensor || rank(src) > rank(out))
        return "copy from something that does not broadcast to self";
      return "";
    }
    case Family::kView: return "";
    case Family::kArange:
      // Integer positions (a sequence's, sized by it); the end may be a size known only at run time.
      if (!out || (out->type.dtype != DType::Int64 && out->type.dtype != DType::Int32) || rank(out) != 1)
        return "arange other than of int64 or int32 positions";
      for (const char* a : {"start", "step"})
        if (n.find(a) && !is_none(n, a) && !int_arg(n, a))
          return std::string("arange with a ") + a + " that is not an integer";
      if (n.find("end") && !int_arg(n, "end") && !value_arg(n, "end"))
        return "arange with an end that is not an integer";
      return "";
    case Family::kSize:
      // A number in the network specialized to a shape: the size of a tensor's
      // dimension, or a scalar whose expression in the sizes is known.
      if (n.outputs.empty()) return "a size computation without a result";
      for (const ir::Value* v : n.outputs)
        if (v->kind != ir::ValueKind::kSymInt || (!v->sym && n.op != OpKind::kSymSize))
          return "a scalar computed at run time whose value is not an expression of the sizes";
      if (n.op == OpKind::kSymSize &&
          (n.operands().empty() || n.operands()[0]->kind != ir::ValueKind::kTensor || !int_arg(n, "dim")))
        return "the size of something that is not a tensor";
      return "";
    case Family::kRotary: return "";  // made by the builder itself (fold_rotary)
    case Family::kNone: break;
  }
  return "no CUDA layer";
}

Status emit_layer(Builder& b, const ir::Node& n) {
  switch (family(n.op)) {
    case Family::kSize: return Status::ok();
    case Family::kArange: {
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
    case Family::kView: return emit_view(b, n);
    case Family::kIdentity: {
      KILN_ASSIGN_OR_RETURN(TRef r, b.ref(n.operands()[0]));
      b.bind(n.outputs[0], r);
      return Status::ok();
    }
    case Family::kCast: return emit_cast(b, n);
    case Family::kElementwise: return emit_elementwise(b, n);
    case Family::kGemm: return emit_matmul(b, n);
    case Family::kConv: return emit_conv(b, n);
    case Family::kRow: return n.op == OpKind::kGroupNorm ? emit_group_norm(b, n) : emit_row(b, n);
    case Family::kReduce: return emit_reduce(b, n);
    case Family::kPool: return emit_pool(b, n);
    case Family::kAttention: return emit_attention(b, n);
    case Family::kGather: return emit_gather_rows(b, n);
    case Family::kGatherDim: return emit_gather(b, n);
    case Family::kCat: return emit_cat(b, n);
    case Family::kIndexCopy: return emit_index_copy(b, n);
    case Family::kCopyInto: return emit_copy_into(b, n);
    case Family::kRotary: return emit_rotary(b, n);
    case Family::kNone: break;
  }
  if (ir::op_category(n.op) == ir::OpCategory::kCheck) return Status::ok();
  return unsupported("the CUDA backend has no layer for " + n.describe());
}

}  // namespace kiln::cuda
