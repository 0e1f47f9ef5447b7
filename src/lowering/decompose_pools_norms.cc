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

constexpr Decomposition kPoolNormDecompositions[] = {
    {OpKind::kAdaptiveAvgPool1d, &pool1d},   {OpKind::kAvgPool1d, &pool1d},
    {OpKind::kMaxPool1d, &pool1d},           {OpKind::kMaxPool1dWithIndices, &pool1d},
    {OpKind::kAdaptiveMaxPool1d, &pool1d},   {OpKind::kMaxPool2dWithIndices, &pool_values_only},
    {OpKind::kInstanceNorm, &instance_norm},
};

}  // namespace

std::span<const Decomposition> pool_norm_decompositions() { return kPoolNormDecompositions; }

}  // namespace kiln::lowering
