// The CUDA builder's layers, rows: norms, softmax, GroupNorm; reductions; pooling.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string_view>

#include "backends/cuda/cuda_layers.h"

namespace kiln::cuda::layers {

Status emit_row(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  const ir::Value* xv = value_arg(n, n.op == OpKind::kLayerNorm || n.op == OpKind::kRmsNorm ? "input" : "self");
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(xv));
  const bool softmax = n.op != OpKind::kLayerNorm && n.op != OpKind::kRmsNorm;
  const size_t rank = x.sizes.size();
  if (softmax && rank > 1) {
    const int64_t d = norm_dim(int_arg(n, "dim").value_or(-1), rank);
    if (d < 0 || d >= static_cast<int64_t>(rank))
      return invalid_argument("softmax over a dim a " + std::to_string(rank) + "-d tensor lacks");
    if (d != static_cast<int64_t>(rank) - 1) {
      // Over another dim: the rows of the input with that dim moved last
      // (one copy), and the result seen through the inverse permutation.
      std::vector<size_t> perm;
      for (size_t k = 0; k < rank; ++k)
        if (k != static_cast<size_t>(d)) perm.push_back(k);
      perm.push_back(static_cast<size_t>(d));
      TRef moved = x;
      for (size_t k = 0; k < rank; ++k) {
        moved.sizes[k] = x.sizes[perm[k]];
        moved.strides[k] = x.strides[perm[k]];
      }
      KILN_ASSIGN_OR_RETURN(moved, b.contiguous(moved, n.name, dt));
      const int64_t cols = moved.sizes.back(), rows = cols == 0 ? 0 : prod(moved.sizes) / cols;
      TRef o = b.new_tensor(dt, moved.sizes);
      const RowOp op =
          n.op == OpKind::kLogSoftmax || n.op == OpKind::kLogSoftmaxInternal ? RowOp::kLogSoftmax : RowOp::kSoftmax;
      KILN_ASSIGN_OR_RETURN(GeneratedKernel k, row_kernel(op, dt, rows, cols, 0, false, false));
      KILN_TRY(b.launch(n.name, std::move(k), {o.buf, moved.buf}));
      TRef view = o;
      for (size_t k = 0; k < rank; ++k) {
        view.sizes[perm[k]] = o.sizes[k];
        view.strides[perm[k]] = o.strides[k];
      }
      b.bind(out, view);
      return Status::ok();
    }
  }
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

namespace {

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

}  // namespace

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

namespace {

// argmax / argmin(self, dim=None, keepdim=False): over dim, or over every
// element in row-major order, as int64.
Status emit_arg_reduce(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  const size_t rank = x.sizes.size();
  std::vector<bool> reduced(rank, is_none(n, "dim"));
  if (!is_none(n, "dim") && rank > 0) {
    const int64_t d = int_arg(n, "dim").value_or(0);
    const int64_t nd = norm_dim(d, rank);
    if (nd < 0 || nd >= static_cast<int64_t>(rank))
      return invalid_argument("argmax or argmin over dim " + std::to_string(d) + " of a " + std::to_string(rank) +
                              "-d tensor");
    reduced[static_cast<size_t>(nd)] = true;
  }
  ReduceDims rd;
  for (size_t d = 0; d < rank; ++d) {
    (reduced[d] ? rd.reduced_sizes : rd.kept_sizes).push_back(x.sizes[d]);
    (reduced[d] ? rd.reduced_strides : rd.kept_strides).push_back(x.strides[d]);
  }
  if (prod(rd.reduced_sizes) == 0) return invalid_argument("argmax or argmin over no elements");
  TRef o = b.new_tensor(DType::Int64, static_sizes(out));
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, arg_reduce_kernel(n.op == OpKind::kArgmax, x.dtype, rd));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf}));
  b.bind(out, o);
  return Status::ok();
}

// cumsum, cumprod, logcumsumexp(self, dim): floating tensors in their
// (compute) dtype, integers and bool to int64 (not logcumsumexp).
Status emit_cumsum(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  const bool floating_in = floating(value_arg(n, "self")->type.dtype);
  const DType dt = floating_in ? b.compute_dtype(out->type.dtype) : DType::Int64;
  KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, floating_in ? std::optional<DType>(dt) : std::nullopt));
  const size_t rank = x.sizes.size();
  const int64_t d = rank == 0 ? 0 : norm_dim(int_arg(n, "dim").value_or(0), rank);
  if (rank > 0 && (d < 0 || d >= static_cast<int64_t>(rank)))
    return invalid_argument("cumsum over dim " + std::to_string(int_arg(n, "dim").value_or(0)) + " of a " +
                            std::to_string(rank) + "-d tensor");
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= x.sizes[static_cast<size_t>(k)];
  for (int64_t k = d + 1; k < static_cast<int64_t>(rank); ++k) inner *= x.sizes[static_cast<size_t>(k)];
  const int64_t len = rank == 0 ? 1 : x.sizes[static_cast<size_t>(d)];
  TRef o = b.new_tensor(dt, static_sizes(out));
  if (prod(o.sizes) == 0) {
    b.bind(out, o);
    return Status::ok();
  }
  const ScanOp op = n.op == OpKind::kCumprod        ? ScanOp::kProd
                    : n.op == OpKind::kLogcumsumexp ? ScanOp::kLogSumExp
                                                    : ScanOp::kSum;
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, cumsum_kernel(dt, x.dtype, outer, len, inner, op));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf}));
  b.bind(out, o);
  return Status::ok();
}

}  // namespace

namespace {

bool is_any(OpKind op) { return op == OpKind::kAny || op == OpKind::kAnyDim || op == OpKind::kAnyDims; }
bool is_all(OpKind op) { return op == OpKind::kAll || op == OpKind::kAllDim || op == OpKind::kAllDims; }
bool is_var(OpKind op) { return op == OpKind::kVarCorrection || op == OpKind::kVarMeanCorrection; }

// Which dims of a rank-`rank` tensor node `n`'s "dim" reduces: every one for
// None or [], and a 0-d tensor whole for dim 0 or -1, as PyTorch has it.
Expected<std::vector<bool>> reduced_dims(const ir::Node& n, size_t rank) {
  std::vector<bool> reduced(rank, false);
  auto dims = ints_arg(n, "dim");
  if (!dims || dims->empty()) return std::vector<bool>(rank, true);
  for (int64_t d : *dims) {
    const int64_t nd = norm_dim(d, std::max<size_t>(rank, 1));
    if (nd < 0 || nd >= std::max<int64_t>(static_cast<int64_t>(rank), 1))
      return invalid_argument("reduction over dim " + std::to_string(d) + " of a " + std::to_string(rank) +
                              "-d tensor");
    if (rank > 0) reduced[static_cast<size_t>(nd)] = true;
  }
  return reduced;
}

// `x`'s dims split into kept and reduced ones.
ReduceDims split_dims(const TRef& x, const std::vector<bool>& reduced) {
  ReduceDims rd;
  for (size_t d = 0; d < x.sizes.size(); ++d) {
    (reduced[d] ? rd.reduced_sizes : rd.kept_sizes).push_back(x.sizes[d]);
    (reduced[d] ? rd.reduced_strides : rd.kept_strides).push_back(x.strides[d]);
  }
  return rd;
}

// var.correction / var_mean.correction(self, dim, correction=1, keepdim):
// one kernel, two passes per output.
Status emit_var(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  if (x.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<bool> reduced, reduced_dims(n, x.sizes.size()));
  const ReduceDims rd = split_dims(x, reduced);
  if (prod(rd.kept_sizes) != prod(static_sizes(out)))
    return invalid_argument("var of " + shape_to_string(x.sizes) + " keeps " + shape_to_string(rd.kept_sizes) +
                            ", not the exported result's " + shape_to_string(static_sizes(out)));
  const bool with_mean = n.op == OpKind::kVarMeanCorrection;
  TRef var = b.new_tensor(dt, static_sizes(out));
  TRef mean = with_mean ? b.new_tensor(dt, static_sizes(n.outputs[1])) : var;
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, var_kernel(dt, rd, double_arg(n, "correction").value_or(1.0), with_mean));
  KILN_TRY(b.launch(n.name, std::move(k), {var.buf, mean.buf, x.buf}));
  b.bind(out, var);
  if (with_mean) b.bind(n.outputs[1], mean);
  return Status::ok();
}

}  // namespace

Status emit_reduce(Builder& b, const ir::Node& n) {
  if (n.op == OpKind::kArgmax || n.op == OpKind::kArgmin) return emit_arg_reduce(b, n);
  if (n.op == OpKind::kCumsum || n.op == OpKind::kCumprod || n.op == OpKind::kLogcumsumexp) return emit_cumsum(b, n);
  if (is_var(n.op)) return emit_var(b, n);
  const ir::Value* out = n.outputs[0];
  // Integer and bool tensors reduce exactly, in their own types (sums to
  // int64); to a floating result (a dtype argument) they are converted first.
  // any / all: the max / min of the input converted to bool.
  const bool exact = !floating(out->type.dtype);
  const bool any = is_any(n.op), all = is_all(n.op);
  const DType dt = exact ? out->type.dtype : b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  if ((!exact || any || all) && x.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  }
  std::vector<bool> reduced;
  if (n.op == OpKind::kProdDimInt) {
    const int64_t d = norm_dim(*int_arg(n, "dim"), std::max<size_t>(x.sizes.size(), 1));
    reduced.assign(x.sizes.size(), false);
    if (!x.sizes.empty()) reduced[static_cast<size_t>(d)] = true;
  } else {
    KILN_ASSIGN_OR_RETURN(reduced, reduced_dims(n, x.sizes.size()));
  }
  const ReduceDims rd = split_dims(x, reduced);
  ReduceOp op = ReduceOp::kSum;
  if (n.op == OpKind::kProd || n.op == OpKind::kProdDimInt) op = ReduceOp::kProd;
  if (n.op == OpKind::kMeanDim || n.op == OpKind::kMean) op = ReduceOp::kMean;
  if (n.op == OpKind::kAmax || any) op = ReduceOp::kMax;
  if (n.op == OpKind::kAmin || all) op = ReduceOp::kMin;
  if (prod(rd.kept_sizes) != prod(static_sizes(out)))
    return invalid_argument("a reduction of " + shape_to_string(x.sizes) + " keeps " + shape_to_string(rd.kept_sizes) +
                            ", not the exported result's " + shape_to_string(static_sizes(out)));
  TRef o = b.new_tensor(dt, static_sizes(out));
  if ((any || all) && prod(rd.reduced_sizes) == 0) {  // any of nothing is false, all of nothing true
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k, fill_kernel(o.layout(), all ? 1.0 : 0.0));
    KILN_TRY(b.launch(n.name, std::move(k), {o.buf}));
    b.bind(out, o);
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, exact ? reduce_int_kernel(op, dt, x.dtype, rd) : reduce_kernel(op, dt, rd));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf}));
  b.bind(out, o);
  return Status::ok();
}

Status emit_pool(Builder& b, const ir::Node& n) {
  if (rank(value_arg(n, "self")) == 3) return emit_pool3d(b, n);  // unbatched
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  if (x.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  }
  PoolParams p;
  // Sizes the schema defaults (padding 0, dilation 1); a stride of [] is the kernel's.
  auto pair = [&](std::string_view name, std::vector<int64_t> if_empty = {}) {
    auto v = ints_arg(n, name).value_or(std::vector<int64_t>{});
    if (v.empty()) v = if_empty;
    if (v.empty()) v = {0};
    return std::make_pair(v[0], v.size() > 1 ? v[1] : v[0]);
  };
  if (n.op == OpKind::kAdaptiveAvgPool2d || n.op == OpKind::kAdaptiveAvgPool2dInternal) {
    p.kind = PoolParams::Kind::kAdaptiveAvg;
  } else {
    p.kind = n.op == OpKind::kMaxPool2d ? PoolParams::Kind::kMax : PoolParams::Kind::kAvg;
    std::tie(p.kh, p.kw) = pair("kernel_size");
    std::tie(p.sh, p.sw) = pair("stride", {p.kh, p.kw});
    std::tie(p.ph, p.pw) = pair("padding");
    if (p.kind == PoolParams::Kind::kMax) std::tie(p.dh, p.dw) = pair("dilation");
    p.count_include_pad = bool_arg(n, "count_include_pad");
    p.divisor_override = int_arg(n, "divisor_override").value_or(0);
  }
  const bool cl = x.sizes.size() == 4 && x.strides[1] == 1 && x.sizes[1] > 1;
  TRef o = b.new_tensor(dt, static_sizes(out), cl);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, pool2d_kernel(p, o.layout(), x.layout()));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf}));
  b.bind(out, o);
  return Status::ok();
}

namespace {

// The spatial rank of a pool family op the 3-D kernel takes (2 or 3), 0 for others.
int pool3d_rank(OpKind op) {
  switch (op) {
    case OpKind::kMaxPool2d:
    case OpKind::kAvgPool2d:
    case OpKind::kAdaptiveAvgPool2d:
    case OpKind::kAdaptiveAvgPool2dInternal:
    case OpKind::kMaxPool2dWithIndices:
    case OpKind::kAdaptiveMaxPool2d: return 2;
    case OpKind::kMaxPool3d:
    case OpKind::kMaxPool3dWithIndices:
    case OpKind::kAvgPool3d:
    case OpKind::kAdaptiveAvgPool3d:
    case OpKind::kAdaptiveAvgPool3dInternal:
    case OpKind::kAdaptiveMaxPool3d: return 3;
    default: return 0;
  }
}

}  // namespace

// Max pools with indices, adaptive max pools, the 3-D pools and unbatched 2-D
// pools, through one kernel over [N, C, D, H, W] views (a 2-D pool's input gets a unit depth; an
// unbatched input a unit batch).
Status emit_pool3d(Builder& b, const ir::Node& n) {
  const int sr = pool3d_rank(n.op);
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  if (x.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  }
  Pool3dParams p;
  const bool adaptive = n.op == OpKind::kAdaptiveMaxPool2d || n.op == OpKind::kAdaptiveMaxPool3d ||
                        n.op == OpKind::kAdaptiveAvgPool3d || n.op == OpKind::kAdaptiveAvgPool3dInternal ||
                        n.op == OpKind::kAdaptiveAvgPool2d || n.op == OpKind::kAdaptiveAvgPool2dInternal;
  const bool max = n.op == OpKind::kMaxPool2d || n.op == OpKind::kMaxPool2dWithIndices ||
                   n.op == OpKind::kAdaptiveMaxPool2d || n.op == OpKind::kMaxPool3d ||
                   n.op == OpKind::kMaxPool3dWithIndices || n.op == OpKind::kAdaptiveMaxPool3d;
  p.kind = adaptive ? (max ? Pool3dParams::Kind::kAdaptiveMax : Pool3dParams::Kind::kAdaptiveAvg)
                    : (max ? Pool3dParams::Kind::kMax : Pool3dParams::Kind::kAvg);
  if (!adaptive) {
    // Per spatial dim, the schema's defaults (padding 0, dilation 1); a stride of [] is the kernel's.
    auto per_dim = [&](std::string_view name, const std::array<int64_t, 3>& if_empty,
                       std::array<int64_t, 3>& to) -> Status {
      auto v = ints_arg(n, name).value_or(std::vector<int64_t>{});
      const size_t off = static_cast<size_t>(3 - sr);
      if (v.empty()) {
        to = if_empty;
        return Status::ok();
      }
      if (v.size() != 1 && v.size() != static_cast<size_t>(sr))
        return unsupported(std::string(name) + " of " + std::to_string(v.size()) + " entries");
      for (size_t i = 0; i < static_cast<size_t>(sr); ++i) to[off + i] = v.size() == 1 ? v[0] : v[i];
      return Status::ok();
    };
    KILN_TRY(per_dim("kernel_size", {1, 1, 1}, p.k));
    KILN_TRY(per_dim("stride", p.k, p.stride));
    KILN_TRY(per_dim("padding", {0, 0, 0}, p.pad));
    if (max) KILN_TRY(per_dim("dilation", {1, 1, 1}, p.dilation));
    p.count_include_pad = bool_arg(n, "count_include_pad", true);
    p.divisor_override = int_arg(n, "divisor_override").value_or(0);
  }
  // The input as [N, C, D, H, W]: a unit batch for an unbatched input, a unit depth (stride 0) for 2-D.
  StridedLayout in = x.layout();
  const size_t rank = in.sizes.size();
  if (rank == static_cast<size_t>(sr) + 1) {
    in.sizes.insert(in.sizes.begin(), 1);
    in.strides.insert(in.strides.begin(), 0);
  }
  if (sr == 2) {
    in.sizes.insert(in.sizes.begin() + 2, 1);
    in.strides.insert(in.strides.begin() + 2, 0);
  }
  TRef o = b.new_tensor(dt, static_sizes(out));
  StridedLayout ol = o.layout();
  ol.sizes = {in.sizes[0], in.sizes[1]};
  const std::vector<int64_t> os = static_sizes(out);
  if (sr == 2) ol.sizes.push_back(1);
  ol.sizes.insert(ol.sizes.end(), os.end() - sr, os.end());
  ol.strides = contiguous_strides_of(ol.sizes);
  const bool indices = n.outputs.size() > 1;
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, pool3d_kernel(p, ol, in, indices));
  if (indices) {
    TRef idx = b.new_tensor(DType::Int64, static_sizes(n.outputs[1]));
    KILN_TRY(b.launch(n.name, std::move(k), {o.buf, idx.buf, x.buf}));
    b.bind(n.outputs[1], idx);
  } else {
    KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf}));
  }
  b.bind(out, o);
  return Status::ok();
}

// segment_reduce: floating data, segments from 1-D lengths or offsets (int64)
// along a static axis.
std::string segment_reduce_refusal(const ir::Node& n) {
  const ir::Value* x = value_arg(n, "data");
  const ir::Value* lengths = value_arg(n, "lengths");
  const ir::Value* offsets = value_arg(n, "offsets");
  if (!x || !floating(x->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype)
    return "segment_reduce of non-floating data or to another dtype";
  const ir::Value* b = lengths ? lengths : offsets;
  if (!b || b->type.sizes.size() != 1 || b->type.dtype != DType::Int64)
    return "segment_reduce without 1-D int64 lengths or offsets";
  if (!lengths && (!b->type.sizes[0].is_static() || b->type.sizes[0].value < 1))
    return "segment_reduce with offsets that do not bound a segment list";
  const auto* reduce = std::get_if<std::string>(n.find("reduce"));
  if (!reduce || (*reduce != "sum" && *reduce != "mean" && *reduce != "max" && *reduce != "min" && *reduce != "prod"))
    return "a segment reduction other than sum, mean, max, min or prod";
  if (n.find("initial") && !is_none(n, "initial") && !double_arg(n, "initial"))
    return "segment_reduce with an initial value that is not a number";
  const int64_t axis = norm_dim(int_arg(n, "axis").value_or(0), rank(x));
  if (rank(x) == 0 || axis < 0 || axis >= static_cast<int64_t>(rank(x))) return "segment_reduce along a missing axis";
  return "";
}

Status emit_segment_reduce(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "data")));
  KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  const bool offsets = value_arg(n, "lengths") == nullptr;
  KILN_ASSIGN_OR_RETURN(TRef bounds, b.ref(value_arg(n, offsets ? "offsets" : "lengths")));
  KILN_ASSIGN_OR_RETURN(bounds, b.contiguous(bounds, n.name));
  const auto axis = static_cast<size_t>(norm_dim(int_arg(n, "axis").value_or(0), x.sizes.size()));
  const std::string reduce = std::get<std::string>(*n.find("reduce"));
  const int op = reduce == "sum" ? 0 : reduce == "mean" ? 1 : reduce == "max" ? 2 : reduce == "min" ? 3 : 4;
  const int64_t segments = bounds.sizes[0] - (offsets ? 1 : 0);
  if (segments < 0) return invalid_argument("segment_reduce with empty offsets");
  std::optional<double> initial;
  if (n.find("initial") && !is_none(n, "initial")) initial = double_arg(n, "initial");
  TRef o = b.new_tensor(dt, static_sizes(out));
  const int code = b.add_error_layer(n.name);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k,
                        segment_reduce_kernel(dt, op, offsets, initial, prod(x.sizes, 0, axis), x.sizes[axis],
                                              prod(x.sizes, axis + 1), segments, code));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf, bounds.buf, b.error_word()}));
  b.bind(out, o);
  return Status::ok();
}

namespace {

// The dim an ordering op orders along (msort: 0; median and nanmedian of
// every element: the flattened tensor), or nullopt when it is not a number in range.
std::optional<int64_t> order_dim(const ir::Node& n, size_t rank) {
  if (n.op == OpKind::kMsort || n.op == OpKind::kMedian || n.op == OpKind::kNanmedian) return 0;
  const auto d = int_arg(n, "dim").value_or(-1);
  const int64_t r = std::max<int64_t>(static_cast<int64_t>(rank), 1);
  const int64_t nd = norm_dim(d, static_cast<size_t>(r));
  if (nd < 0 || nd >= r) return std::nullopt;
  return nd;
}

int64_t order_len(const std::vector<int64_t>& sizes, const ir::Node& n, int64_t d) {
  if (n.op == OpKind::kMedian || n.op == OpKind::kNanmedian) return prod(sizes);
  return sizes.empty() ? 1 : sizes[static_cast<size_t>(d)];
}

}  // namespace

// sort, argsort, msort, topk, kthvalue, median and nanmedian of slices of at
// most 2048 entries, of floating and integer tensors.
std::string order_refusal(const ir::Node& n) {
  const ir::Value* x = value_arg(n, "self");
  if (!x || x->type.dtype == DType::Bool) return "ordering of bool tensors";
  const auto d = order_dim(n, rank(x));
  if (!d) return "ordering along a dim that is not a number in range";
  // The ordered length sizes the kernel's shared memory: known at build.
  std::vector<int64_t> sizes;
  for (size_t k = 0; k < x->type.sizes.size(); ++k) {
    const ir::Dim& s = x->type.sizes[k];
    const bool ordered = n.op == OpKind::kMedian || n.op == OpKind::kNanmedian || static_cast<int64_t>(k) == *d;
    if (ordered && !s.is_static()) return "ordering along a dim of a size known only at run time";
    sizes.push_back(s.is_static() ? s.value : 1);
  }
  if (order_len(sizes, n, *d) > 2048) return "ordering slices longer than 2048";
  const bool picks = n.op != OpKind::kSort && n.op != OpKind::kSortStable && n.op != OpKind::kArgsort &&
                     n.op != OpKind::kArgsortStable && n.op != OpKind::kMsort && n.op != OpKind::kTopk;
  if (picks && order_len(sizes, n, *d) == 0) return "the median or k-th value of an empty dim";
  if ((n.op == OpKind::kTopk || n.op == OpKind::kKthvalue) && !int_arg(n, "k")) return "a k that is not a number";
  return "";
}

Status emit_order(Builder& b, const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name));
  const int64_t d = *order_dim(n, x.sizes.size());
  const bool whole = n.op == OpKind::kMedian || n.op == OpKind::kNanmedian;
  const int64_t len = order_len(x.sizes, n, d);
  const int64_t outer = whole || x.sizes.empty() ? 1 : prod(x.sizes, 0, static_cast<size_t>(d));
  const int64_t inner = whole || x.sizes.empty() ? 1 : prod(x.sizes, static_cast<size_t>(d) + 1);
  int mode = 0;
  int64_t k = len;
  bool descending = bool_arg(n, "descending");
  switch (n.op) {
    case OpKind::kTopk:
      k = *int_arg(n, "k");
      descending = bool_arg(n, "largest", true);
      break;
    case OpKind::kKthvalue:
      mode = 1;
      k = *int_arg(n, "k");
      break;
    case OpKind::kMedian:
    case OpKind::kMedianDim: mode = 2; break;
    case OpKind::kNanmedian:
    case OpKind::kNanmedianDim: mode = 3; break;
    default: break;
  }
  if (k < (mode == 1 ? 1 : 0) || k > len)
    return invalid_argument("k " + std::to_string(k) + " out of range for a dim of " + std::to_string(len));
  if (len == 0 && mode != 0) return invalid_argument("the median or k-th value of an empty dim");
  // Values first, then positions; an op that returns only one gets scratch for the other.
  const bool indices_only = n.op == OpKind::kArgsort || n.op == OpKind::kArgsortStable;
  const ir::Value* vals_out = indices_only ? nullptr : n.outputs[0];
  const ir::Value* idx_out = indices_only ? n.outputs[0] : n.outputs.size() > 1 ? n.outputs[1] : nullptr;
  const std::vector<int64_t> out_sizes = static_sizes(n.outputs[0]);
  TRef values = b.new_tensor(x.dtype, vals_out ? static_sizes(vals_out) : out_sizes);
  TRef indices = b.new_tensor(DType::Int64, idx_out ? static_sizes(idx_out) : out_sizes);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel kern, order_kernel(x.dtype, mode, descending, outer, len, inner, k));
  KILN_TRY(b.launch(n.name, std::move(kern), {values.buf, indices.buf, x.buf}));
  if (vals_out) b.bind(vals_out, values);
  if (idx_out) b.bind(idx_out, indices);
  return Status::ok();
}

// Norms over the last dims, softmax over any dim, GroupNorm.
std::string row_refusal(const ir::Node& n) {
  const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  if (n.op == OpKind::kGroupNorm) return group_norm_refusal(n);
  const ir::Value* x = value_arg(n, n.op == OpKind::kLayerNorm || n.op == OpKind::kRmsNorm ? "input" : "self");
  if (!x || !floating(x->type.dtype) || !out || !floating(out->type.dtype)) return "row operations in floating types";
  // softmax's dtype argument: the input converted first, as torch does (emit_row's copy converts it).
  if (out->type.dtype != x->type.dtype && (n.op == OpKind::kLayerNorm || n.op == OpKind::kRmsNorm))
    return "norms to a dtype other than the input's";
  if (n.op == OpKind::kLayerNorm || n.op == OpKind::kRmsNorm) {
    auto ns = ints_arg(n, "normalized_shape");
    if (!ns) return "normalized_shape is not a static list";
    return "";
  }
  if (const int64_t d = norm_dim(int_arg(n, "dim").value_or(-1), rank(x));
      rank(x) > 0 && (d < 0 || d >= static_cast<int64_t>(rank(x))))
    return "softmax over a dim the tensor lacks";
  if (bool_arg(n, "half_to_float")) return "softmax with half_to_float";
  return "";
}

// Reductions over static dims: of floating tensors, and sums (to int64),
// max and min of integer and bool tensors; argmax and argmin of any tensor;
// cumsum of floating tensors in their dtype and of integers and bool to int64.
std::string reduce_refusal(const ir::Node& n) {
  const ir::Value* x = value_arg(n, "self");
  if (!x || n.outputs.empty()) return "reductions of non-tensors";
  if (n.op == OpKind::kArgmax || n.op == OpKind::kArgmin) {
    if (n.outputs[0]->type.dtype != DType::Int64) return "argmax or argmin to a dtype other than int64";
    if (!is_none(n, "dim") && !int_arg(n, "dim")) return "argmax or argmin over a dim that is not a number";
    return "";
  }
  if (n.op == OpKind::kLogcumsumexp && !floating(x->type.dtype)) return "logcumsumexp of a non-floating tensor";
  if (is_var(n.op)) {
    if (!floating(x->type.dtype)) return "var of a non-floating tensor";
    for (const ir::Value* o : n.outputs)
      if (o->type.dtype != x->type.dtype) return "var or its mean in a dtype other than the input's";
    if (n.find("correction") && !is_none(n, "correction") && !double_arg(n, "correction"))
      return "var with a correction that is not a number";
    if (n.find("dim") && !is_none(n, "dim") && !ints_arg(n, "dim")) return "reduction dims that are not a list";
    return "";
  }
  if (n.op == OpKind::kCumsum || n.op == OpKind::kCumprod || n.op == OpKind::kLogcumsumexp) {
    const DType want = floating(x->type.dtype) ? x->type.dtype : DType::Int64;
    if (n.outputs[0]->type.dtype != want) return "a cumulative sum or product to another dtype";
    if (!int_arg(n, "dim")) return "a scan over a dim that is not a number";
    return "";
  }
  if (is_any(n.op) || is_all(n.op)) {
    // An explicit empty list of dims reduces nothing (PyTorch's any/all), unlike sum's.
    if (auto dims = ints_arg(n, "dim"); n.find("dim") && !is_none(n, "dim") && dims && dims->empty())
      return "any or all over an empty list of dims";
    return n.outputs[0]->type.dtype == DType::Bool ? "" : "any or all to a dtype other than bool";
  }
  if (floating(x->type.dtype) && !floating(n.outputs[0]->type.dtype))
    return "reductions of floating tensors to an integer dtype";
  if (!floating(n.outputs[0]->type.dtype)) {
    if (n.op == OpKind::kMean || n.op == OpKind::kMeanDim) return "mean of a non-floating tensor";
    const bool sum =
        n.op == OpKind::kSum || n.op == OpKind::kSumDimIntList || n.op == OpKind::kProd || n.op == OpKind::kProdDimInt;
    if (sum && n.outputs[0]->type.dtype != DType::Int64) return "integer sums and products to a dtype other than int64";
    if (!sum && n.outputs[0]->type.dtype != x->type.dtype) return "integer max or min to another dtype";
  }
  if (n.op == OpKind::kProdDimInt) {
    const auto d = int_arg(n, "dim");
    const int64_t r = std::max<int64_t>(static_cast<int64_t>(rank(x)), 1);
    if (!d || norm_dim(*d, static_cast<size_t>(r)) < 0 || norm_dim(*d, static_cast<size_t>(r)) >= r)
      return "a product over a dim that is not a number in range";
    return "";
  }
  if (n.find("dim") && !is_none(n, "dim") && !ints_arg(n, "dim")) return "reduction dims that are not a list";
  return "";
}

// 2-D and 3-D pooling of floating tensors, batched or not.
std::string pool_refusal(const ir::Node& n) {
  const ir::Value* x = value_arg(n, "self");
  if (!x || !floating(x->type.dtype)) return "pooling of non-floating tensors";
  if (const auto d = int_arg(n, "divisor_override"); d && *d < 0) return "a negative divisor_override";
  if (const int sr = pool3d_rank(n.op); sr > 0) {
    if (rank(x) != static_cast<size_t>(sr) + 1 && rank(x) != static_cast<size_t>(sr) + 2)
      return "pooling of a tensor without " + std::to_string(sr) + " spatial dims and a channel dim";
    if (n.outputs[0]->type.dtype != x->type.dtype) return "pooling to another dtype";
    if (n.outputs.size() > 1 && n.outputs[1]->type.dtype != DType::Int64) return "pooling indices other than int64";
    return "";
  }
  return "";
}

}  // namespace kiln::cuda::layers
