// Pooling and normalization composites: adaptive_avg_pool1d, avg_pool1d,
// max_pool1d, max_pool1d_with_indices and adaptive_max_pool1d as their 2-d
// forms over a unit height; max_pool2d_with_indices with unread indices as
// max_pool2d; instance_norm from the input's statistics.
//
// A node whose arguments a decomposition does not cover (symbolic sizes where
// it needs static ones, complex dtypes) is left as it is, and partitioning
// names it.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "lowering/decompose.h"

namespace kiln::lowering {

namespace {

using ir::OpKind;

// adaptive_avg_pool1d, avg_pool1d, max_pool1d: the 2-d op over [..., 1, L].
Expected<bool> pool1d(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const bool with_indices = n.op == OpKind::kMaxPool1dWithIndices || n.op == OpKind::kAdaptiveMaxPool1d;
  if (!x || n.outputs.size() != (with_indices ? 2u : 1u) || !is_floating(x->type.dtype) || x->type.sizes.size() < 2 ||
      x->type.sizes.size() > 3)
    return false;
  const int64_t h = static_cast<int64_t>(x->type.sizes.size()) - 1;  // the unit height's dim
  std::vector<ir::TensorType> pooled;
  for (const ir::Value* o : n.outputs) {
    if (o->type.sizes.size() != x->type.sizes.size()) return false;
    pooled.push_back(o->type);
    pooled.back().sizes.insert(pooled.back().sizes.begin() + h, ir::Dim::of(1));
  }
  auto pair = [&](const char* arg, int64_t first,
                  std::optional<std::vector<int64_t>> def) -> std::optional<std::vector<int64_t>> {
    auto v = int_list(n, arg, def);
    if (!v || v->size() > 1) return std::nullopt;
    if (v->empty()) return std::vector<int64_t>{};
    return std::vector<int64_t>{first, (*v)[0]};
  };
  std::vector<ir::NamedArg> args;
  OpKind op;
  if (n.op == OpKind::kAdaptiveAvgPool1d || n.op == OpKind::kAdaptiveMaxPool1d) {
    auto size = pair("output_size", 1, std::nullopt);
    if (!size || size->empty()) return false;
    op = n.op == OpKind::kAdaptiveAvgPool1d ? OpKind::kAdaptiveAvgPool2d : OpKind::kAdaptiveMaxPool2d;
    args = {{"output_size", *size}};
  } else {
    auto k = pair("kernel_size", 1, std::nullopt);
    auto s = pair("stride", 1, std::vector<int64_t>{});
    auto p = pair("padding", 0, std::vector<int64_t>{0});
    const auto ceil = bool_value(n, "ceil_mode");
    if (!k || k->empty() || !s || !p || p->empty() || !ceil) return false;
    if (s->empty()) s = k;
    args = {{"kernel_size", *k}, {"stride", *s}, {"padding", *p}};
    if (n.op == OpKind::kAvgPool1d) {
      const auto include = bool_value(n, "count_include_pad", true);
      if (!include) return false;
      op = OpKind::kAvgPool2d;
      args.push_back({"ceil_mode", *ceil});
      args.push_back({"count_include_pad", *include});
    } else {
      auto d = pair("dilation", 1, std::vector<int64_t>{1});
      if (!d || d->empty()) return false;
      op = with_indices ? OpKind::kMaxPool2dWithIndices : OpKind::kMaxPool2d;
      args.push_back({"dilation", *d});
      args.push_back({"ceil_mode", *ceil});
    }
  }
  Nodes b(ctx, n);
  ir::TensorType tall = x->type;
  tall.sizes.insert(tall.sizes.begin() + h, ir::Dim::of(1));
  args.insert(args.begin(), {"self", b.add(OpKind::kUnsqueeze, {{"self", x}, {"dim", h}}, tall)});
  const std::vector<ir::Value*> p = b.add_multi(op, std::move(args), pooled);
  // With a unit height a 2-d pool's index (h * width + w) is the 1-d one.
  for (size_t i = 1; i < p.size(); ++i)
    ctx.replace_uses(n.outputs[i], b.add(OpKind::kSqueezeDims, {{"self", p[i]}, {"dim", std::vector<int64_t>{h}}},
                                         n.outputs[i]->type));
  return b.done(b.add(OpKind::kSqueezeDims, {{"self", p[0]}, {"dim", std::vector<int64_t>{h}}}, n.outputs[0]->type));
}

// max_pool2d_with_indices whose indices nothing reads (the aten dialect's
// form of max_pool2d) is max_pool2d.
Expected<bool> pool_values_only(PatternContext& ctx, ir::Node& n) {
  if (n.outputs.size() != 2 || ctx.uses(n.outputs[1]) != 0) return false;
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kMaxPool2d, n.args, b.out()));
}

// instance_norm from the input's statistics: (x - mean) / sqrt(var + eps) over
// each sample's and channel's spatial dims (biased variance), then weight and
// bias per channel.
Expected<bool> instance_norm(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "input");
  ir::Value* w = PatternContext::tensor_arg(n, "weight");
  ir::Value* bias = PatternContext::tensor_arg(n, "bias");
  const auto use_input_stats = bool_value(n, "use_input_stats");
  const auto eps = ctx.number(n, "eps");
  if (!x || n.outputs.size() != 1 || !is_floating(x->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype ||
      x->type.sizes.size() < 3 || !use_input_stats || !*use_input_stats || !eps)
    return false;
  if ((w && w->type.dtype != x->type.dtype) || (bias && bias->type.dtype != x->type.dtype)) return false;
  const size_t rank = x->type.sizes.size();
  std::vector<int64_t> dims;
  for (size_t d = 2; d < rank; ++d) dims.push_back(static_cast<int64_t>(d));
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  const ir::TensorType kept = reduced(x->type, dims, true);
  ir::Value* mean = b.add(OpKind::kMeanDim, {{"self", x}, {"dim", dims}, {"keepdim", true}}, kept);
  ir::Value* c = b.binary(OpKind::kSubTensor, x, mean, dt);
  ir::Value* var = b.add(OpKind::kMeanDim,
                         {{"self", b.binary(OpKind::kMulTensor, c, c, dt)}, {"dim", dims}, {"keepdim", true}}, kept);
  ir::Value* y =
      b.binary(OpKind::kMulTensor, c, b.unary(OpKind::kRsqrt, b.binary(OpKind::kAddTensor, var, *eps, dt)), dt);
  auto per_channel = [&](ir::Value* v) -> ir::Value* {
    if (v->type.sizes.size() != 1) return nullptr;
    ir::TensorType col{dt, {v->type.sizes[0]}};
    std::vector<int64_t> shape{-1};
    for (size_t d = 2; d < rank; ++d) {
      col.sizes.push_back(ir::Dim::of(1));
      shape.push_back(1);
    }
    if (!v->type.sizes[0].is_static()) return nullptr;
    shape[0] = v->type.sizes[0].value;
    return b.add(OpKind::kView, {{"self", v}, {"size", shape}}, col);
  };
  if (w) {
    ir::Value* wc = per_channel(w);
    if (!wc) return false;
    y = b.binary(OpKind::kMulTensor, y, wc, dt);
  }
  if (bias) {
    ir::Value* bc = per_channel(bias);
    if (!bc) return false;
    y = b.binary(OpKind::kAddTensor, y, bc, dt);
  }
  return b.done(y);
}

// `v`'s sizes when all are static.
std::optional<std::vector<int64_t>> static_shape(const ir::Value* v) {
  std::vector<int64_t> out;
  for (const ir::Dim& d : v->type.sizes) {
    if (!d.is_static()) return std::nullopt;
    out.push_back(d.value);
  }
  return out;
}

// Values written (or, for a max pool's gradient, added) per plane at their
// indices into a plane of zeros: [planes, from] values and indices land in
// [planes, to] zeros along dim 1 (scatter / scatter_add), shaped `out` after.
ir::Value* scatter_planes(Nodes& b, OpKind op, ir::Value* values, ir::Value* indices, int64_t planes, int64_t from,
                          int64_t to, const ir::TensorType& out) {
  const DType dt = values->type.dtype;
  auto flat = [&](ir::Value* v, int64_t cols, DType t) {
    return b.add(OpKind::kView, {{"self", v}, {"size", std::vector<int64_t>{planes, cols}}},
                 {t, {ir::Dim::of(planes), ir::Dim::of(cols)}});
  };
  const ir::TensorType zeros_type{dt, {ir::Dim::of(planes), ir::Dim::of(to)}};
  ir::Value* zeros = b.add(
      OpKind::kFull, {{"size", std::vector<int64_t>{planes, to}}, {"fill_value", 0.0}, {"dtype", dt}}, zeros_type);
  ir::Value* written = b.add(op,
                             {{"self", zeros},
                              {"dim", int64_t{1}},
                              {"index", flat(indices, from, DType::Int64)},
                              {"src", flat(values, from, dt)}},
                             zeros_type);
  std::vector<int64_t> shape;
  for (const ir::Dim& d : out.sizes) shape.push_back(d.value);
  return b.add(OpKind::kView, {{"self", written}, {"size", shape}}, out);
}

// max_unpool2d / max_unpool3d: each value written at its index within its
// plane of the output's spatial size (scatter into zeros).
Expected<bool> max_unpool(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* idx = PatternContext::tensor_arg(n, "indices");
  const size_t spatial = n.op == OpKind::kMaxUnpool2d ? 2 : 3;
  if (!x || !idx || n.outputs.size() != 1 || idx->type.dtype != DType::Int64 ||
      n.outputs[0]->type.dtype != x->type.dtype)
    return false;
  const auto xs = static_shape(x), is = static_shape(idx), os = static_shape(n.outputs[0]);
  if (!xs || !is || !os || *xs != *is || xs->size() < spatial + 1 || xs->size() > spatial + 2 ||
      os->size() != xs->size())
    return false;
  int64_t planes = 1, from = 1, to = 1;
  for (size_t d = 0; d < xs->size(); ++d) {
    const bool lead = d + spatial < xs->size();
    if (lead && (*xs)[d] != (*os)[d]) return false;
    (lead ? planes : from) *= (*xs)[d];
    if (!lead) to *= (*os)[d];
  }
  Nodes b(ctx, n);
  return b.done(scatter_planes(b, OpKind::kScatterSrc, x, idx, planes, from, to, b.out()));
}

// max_pool2d_with_indices_backward: each gradient added at its index within
// its input plane (a position several windows chose gets their sum).
Expected<bool> max_pool2d_backward(PatternContext& ctx, ir::Node& n) {
  ir::Value* g = PatternContext::tensor_arg(n, "grad_output");
  ir::Value* self = PatternContext::tensor_arg(n, "self");
  ir::Value* idx = PatternContext::tensor_arg(n, "indices");
  if (!g || !self || !idx || n.outputs.size() != 1 || idx->type.dtype != DType::Int64 || !is_floating(g->type.dtype) ||
      n.outputs[0]->type.dtype != g->type.dtype)
    return false;
  const auto gs = static_shape(g), is = static_shape(idx), ss = static_shape(self), os = static_shape(n.outputs[0]);
  if (!gs || !is || !ss || !os || *gs != *is || *os != *ss || gs->size() != ss->size() ||
      (ss->size() != 3 && ss->size() != 4))
    return false;
  const size_t r = ss->size();
  const int64_t from = (*gs)[r - 1] * (*gs)[r - 2], to = (*ss)[r - 1] * (*ss)[r - 2];
  int64_t planes = 1;
  for (size_t d = 0; d + 2 < r; ++d) {
    if ((*gs)[d] != (*ss)[d]) return false;
    planes *= (*ss)[d];
  }
  Nodes b(ctx, n);
  return b.done(scatter_planes(b, OpKind::kScatterAdd, g, idx, planes, from, to, b.out()));
}

// native_layer_norm whose statistics are read (with them unread it becomes
// layer_norm: fuse-layer-norm): the mean and the inverse std over the
// normalized trailing dims (biased variance), kept as size-1 dims, and the
// output with weight and bias broadcast over the leading dims.
Expected<bool> native_layer_norm(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "input");
  ir::Value* w = PatternContext::tensor_arg(n, "weight");
  ir::Value* bias = PatternContext::tensor_arg(n, "bias");
  const auto shape = int_list(n, "normalized_shape");
  const auto eps = ctx.number(n, "eps");
  if (!x || n.outputs.size() != 3 || !shape || shape->empty() || !eps || !is_floating(x->type.dtype) ||
      shape->size() > x->type.sizes.size())
    return false;
  if (ctx.uses(n.outputs[1]) == 0 && ctx.uses(n.outputs[2]) == 0) return false;
  const DType dt = x->type.dtype;
  for (const ir::Value* o : n.outputs)
    if (o->type.dtype != dt) return false;
  std::vector<int64_t> dims;
  for (size_t d = x->type.sizes.size() - shape->size(); d < x->type.sizes.size(); ++d)
    dims.push_back(static_cast<int64_t>(d));
  // weight and bias of the normalized dims' sizes.
  for (const ir::Value* v : {w, bias}) {
    if (!v) continue;
    if (v->type.dtype != dt || v->type.sizes.size() != dims.size()) return false;
    for (size_t k = 0; k < dims.size(); ++k)
      if (!same_dim(v->type.sizes[k], x->type.sizes[static_cast<size_t>(dims[k])])) return false;
  }
  Nodes b(ctx, n);
  const ir::TensorType kept = reduced(x->type, dims, true);
  if (kept.sizes.size() != n.outputs[1]->type.sizes.size()) return false;
  ir::Value* mean = b.add(OpKind::kMeanDim, {{"self", x}, {"dim", dims}, {"keepdim", true}}, kept);
  ir::Value* c = b.binary(OpKind::kSubTensor, x, mean, dt);
  ir::Value* var = b.add(OpKind::kMeanDim,
                         {{"self", b.binary(OpKind::kMulTensor, c, c, dt)}, {"dim", dims}, {"keepdim", true}}, kept);
  ir::Value* rstd = b.unary(OpKind::kRsqrt, b.binary(OpKind::kAddTensor, var, *eps, dt));
  ir::Value* y = b.binary(OpKind::kMulTensor, c, rstd, dt);
  if (w) y = b.binary(OpKind::kMulTensor, y, w, dt);
  if (bias) y = b.binary(OpKind::kAddTensor, y, bias, dt);
  ctx.replace_uses(n.outputs[1], mean);
  ctx.replace_uses(n.outputs[2], rstd);
  return b.done(y);
}

// The batch norms in core ops, every tensor of one floating dtype and the
// channel count static. In training, the batch's statistics over every dim
// but 1 (biased variance for the output; at least two values per channel,
// static: one gives an infinite unbiased variance, left to the kernel), the
// saved mean and inverse std per channel, and the running statistics moved by
// momentum toward the batch mean and the unbiased variance, as PyTorch
// updates them; in evaluation, the running statistics (unless every
// parameter of a batch_norm or _native_batch_norm_legit_no_training is a
// constant: fold-batch-norm's then), its saved statistics unread. Outputs by op:
//   batch_norm                            out
//   native_batch_norm                     out, mean, invstd ([0] in evaluation: unused)
//   _native_batch_norm_legit_no_training  out, [0], [0] (unused)
//   _native_batch_norm_legit_functional   out, mean, invstd, running_mean, running_var
//   _batch_norm_with_update_functional    out, mean, invstd, reserve (unused), running_mean, running_var
Expected<bool> batch_norm(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "input");
  ir::Value* w = PatternContext::tensor_arg(n, "weight");
  ir::Value* bias = PatternContext::tensor_arg(n, "bias");
  ir::Value* rm = PatternContext::tensor_arg(n, "running_mean");
  ir::Value* rv = PatternContext::tensor_arg(n, "running_var");
  const bool with_update = n.op == OpKind::kBatchNormWithUpdateFunctional;
  const bool functional = with_update || n.op == OpKind::kNativeBatchNormLegitFunctional;
  std::optional<bool> training = true;
  if (n.op == OpKind::kNativeBatchNormNoTraining) training = false;
  if (!with_update && n.op != OpKind::kNativeBatchNormNoTraining) training = bool_value(n, "training");
  const auto momentum = ctx.number(n, "momentum");
  const auto eps = ctx.number(n, "eps");
  const size_t want_outputs = n.op == OpKind::kBatchNorm ? 1 : with_update ? 6 : functional ? 5 : 3;
  if (!x || n.outputs.size() != want_outputs || !training || !eps || (*training && functional && !momentum) ||
      !is_floating(x->type.dtype) || x->type.sizes.size() < 2 || !x->type.sizes[1].is_static())
    return false;
  if ((!*training || functional) && (!rm || !rv)) return false;
  // An evaluation-mode batch_norm or _native_batch_norm_legit_no_training whose parameters are all
  // constants is fold-batch-norm's (into a convolution before it, or a constant scale and shift).
  if (!*training && (n.op == OpKind::kBatchNorm || n.op == OpKind::kNativeBatchNormNoTraining) && ctx.constant(rm) &&
      ctx.constant(rv) && (!w || ctx.constant(w)) && (!bias || ctx.constant(bias)))
    return false;
  // Outputs with nothing to give them here (the reserve; the statistics in
  // evaluation) must be unused, or empty: an empty tensor of their type.
  auto placeholder = [&](const ir::Value* o) {
    const auto sizes = static_sizes(o->type);
    return ctx.uses(o) == 0 ||
           (sizes && std::accumulate(sizes->begin(), sizes->end(), int64_t{1}, std::multiplies<int64_t>()) == 0);
  };
  std::vector<ir::Value*> placeholders;
  if (with_update) placeholders.push_back(n.outputs[3]);
  if (!*training && n.outputs.size() >= 3) placeholders.insert(placeholders.end(), {n.outputs[1], n.outputs[2]});
  for (const ir::Value* o : placeholders)
    if (!placeholder(o)) return false;
  const DType dt = x->type.dtype;
  for (const ir::Value* v : {w, bias, rm, rv})
    if (v && (v->type.dtype != dt || v->type.sizes.size() != 1)) return false;
  for (const ir::Value* o : n.outputs)
    if (o->type.dtype != dt && !(with_update && o == n.outputs[3])) return false;
  const size_t rank = x->type.sizes.size();
  int64_t count = 1;
  std::vector<int64_t> dims, shape;
  for (size_t d = 0; d < rank; ++d) {
    shape.push_back(d == 1 ? x->type.sizes[d].value : 1);
    if (d == 1) continue;
    dims.push_back(static_cast<int64_t>(d));
    if (*training && !x->type.sizes[d].is_static()) return false;
    if (x->type.sizes[d].is_static()) count *= x->type.sizes[d].value;
  }
  if (*training && count < 2) return false;
  Nodes b(ctx, n);
  const ir::TensorType kept = reduced(x->type, dims, true);
  const ir::TensorType channel{dt, {x->type.sizes[1]}};
  const std::vector<int64_t> flat{x->type.sizes[1].value};
  auto as_column = [&](ir::Value* v) { return b.add(OpKind::kView, {{"self", v}, {"size", shape}}, kept); };
  auto as_flat = [&](ir::Value* v) { return b.add(OpKind::kView, {{"self", v}, {"size", flat}}, channel); };
  ir::Value *mean = nullptr, *var = nullptr;
  if (*training) {
    mean = b.add(OpKind::kMeanDim, {{"self", x}, {"dim", dims}, {"keepdim", true}}, kept);
    ir::Value* c = b.binary(OpKind::kSubTensor, x, mean, dt);
    var = b.add(OpKind::kMeanDim, {{"self", b.binary(OpKind::kMulTensor, c, c, dt)}, {"dim", dims}, {"keepdim", true}},
                kept);
  } else {
    mean = as_column(rm);
    var = as_column(rv);
  }
  ir::Value* rstd = b.unary(OpKind::kRsqrt, b.binary(OpKind::kAddTensor, var, *eps, dt));
  ir::Value* y = b.binary(OpKind::kMulTensor, b.binary(OpKind::kSubTensor, x, mean, dt), rstd, dt);
  if (w) y = b.binary(OpKind::kMulTensor, y, as_column(w), dt);
  if (bias) y = b.binary(OpKind::kAddTensor, y, as_column(bias), dt);
  if (*training && n.outputs.size() >= 3) {
    ctx.replace_uses(n.outputs[1], as_flat(mean));
    ctx.replace_uses(n.outputs[2], as_flat(rstd));
  }
  for (ir::Value* o : placeholders)
    if (ctx.uses(o) != 0)
      ctx.replace_uses(o, b.add(OpKind::kEmpty, {{"size", *static_sizes(o->type)}, {"dtype", o->type.dtype}}, o->type));
  if (functional) {
    ir::Value* new_mean = rm;
    ir::Value* new_var = rv;
    if (*training) {
      const double m = *momentum;
      auto moved = [&](ir::Value* running, ir::Value* batch, double scale) {
        ir::Value* keep = b.binary(OpKind::kMulTensor, running, 1 - m, dt);
        return b.binary(OpKind::kAddTensor, keep, b.binary(OpKind::kMulTensor, as_flat(batch), m * scale, dt), dt);
      };
      new_mean = moved(rm, mean, 1.0);
      new_var = moved(rv, var, static_cast<double>(count) / static_cast<double>(count - 1));
    }
    const size_t first = with_update ? 4 : 3;
    ctx.replace_uses(n.outputs[first], new_mean);
    ctx.replace_uses(n.outputs[first + 1], new_var);
  }
  return b.done(y);
}

constexpr Decomposition kPoolNormDecompositions[] = {
    {OpKind::kAdaptiveAvgPool1d, &pool1d},
    {OpKind::kAvgPool1d, &pool1d},
    {OpKind::kMaxPool1d, &pool1d},
    {OpKind::kMaxPool1dWithIndices, &pool1d},
    {OpKind::kAdaptiveMaxPool1d, &pool1d},
    {OpKind::kMaxPool2dWithIndices, &pool_values_only},
    {OpKind::kInstanceNorm, &instance_norm},
    {OpKind::kNativeLayerNorm, &native_layer_norm},
    {OpKind::kMaxUnpool2d, &max_unpool},
    {OpKind::kMaxUnpool3d, &max_unpool},
    {OpKind::kMaxPool2dWithIndicesBackward, &max_pool2d_backward},
    {OpKind::kBatchNorm, &batch_norm},
    {OpKind::kNativeBatchNorm, &batch_norm},
    {OpKind::kNativeBatchNormNoTraining, &batch_norm},
    {OpKind::kNativeBatchNormLegitFunctional, &batch_norm},
    {OpKind::kBatchNormWithUpdateFunctional, &batch_norm},
};

}  // namespace

std::span<const Decomposition> pool_norm_decompositions() { return kPoolNormDecompositions; }

}  // namespace kiln::lowering
