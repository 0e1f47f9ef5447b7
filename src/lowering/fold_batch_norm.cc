// Batch norm in evaluation mode folded into constants.
//
// Eval batch norm is a per-channel affine map: y = x * scale + shift with
//   scale[c] = weight[c] / sqrt(running_var[c] + eps)
//   shift[c] = bias[c] - running_mean[c] * scale[c].
// After a convolution whose only user it is (and whose weights are constant)
// the map folds into the convolution: weight'[o] = weight[o] * scale[o] and
// bias'[o] = bias[o] * scale[o] + shift[o]. Anywhere else it becomes a mul and
// an add by constant [C, 1, ...] tensors. Folded values are computed in double
// and stored in the dtype of the tensor they replace.
//
// Running statistics are buffers in torch.export; those the program never
// writes are read as constants (PatternContext::constant).
#include <cmath>
#include <type_traits>
#include <vector>

#include "lowering/pass.h"
#include "lowering/rewrite.h"

namespace kiln::lowering {

namespace {

struct EvalBatchNorm {
  ir::Value* input = nullptr;
  ir::Value* out = nullptr;
  std::vector<double> scale, shift;  // per channel
};

std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.value_at(i);
  return v;
}

// An eval batch norm with constant parameters, with its affine map.
std::optional<EvalBatchNorm> match_batch_norm(const PatternContext& ctx, const ir::Node& n) {
  if (n.op == ir::OpKind::kBatchNorm) {
    if (n.outputs.size() != 1 || bool_value(n, "training") != false) return std::nullopt;
  } else if (n.op == ir::OpKind::kNativeBatchNormNoTraining) {
    if (n.outputs.size() != 3 || ctx.uses(n.outputs[1]) != 0 || ctx.uses(n.outputs[2]) != 0) return std::nullopt;
  } else {
    return std::nullopt;
  }
  EvalBatchNorm bn;
  bn.input = PatternContext::tensor_arg(n, "input");
  bn.out = n.outputs[0];
  const std::optional<double> eps = absent(n, "eps") ? std::optional<double>(1e-5) : ctx.number(n, "eps");
  if (!bn.input || !eps || bn.input->type.sizes.size() < 2 || !bn.input->type.sizes[1].is_static()) return std::nullopt;
  const DType dt = bn.out->type.dtype;
  if (!is_floating(dt) || bn.input->type.dtype != dt) return std::nullopt;
  const int64_t channels = bn.input->type.sizes[1].value;

  // Statistics must be constants; weight and bias may also be absent.
  const Tensor* mean = ctx.constant(PatternContext::tensor_arg(n, "running_mean"));
  const Tensor* var = ctx.constant(PatternContext::tensor_arg(n, "running_var"));
  const Tensor* weight = ctx.constant(PatternContext::tensor_arg(n, "weight"));
  const Tensor* bias = ctx.constant(PatternContext::tensor_arg(n, "bias"));
  if (!mean || !var || (!weight && !absent(n, "weight")) || (!bias && !absent(n, "bias"))) return std::nullopt;
  for (const Tensor* t : {mean, var, weight, bias})
    if (t && (t->numel() != channels || !is_floating(t->dtype()))) return std::nullopt;

  const std::vector<double> m = as_doubles(*mean), v = as_doubles(*var);
  const std::vector<double> w = weight ? as_doubles(*weight) : std::vector<double>(m.size(), 1.0);
  const std::vector<double> b = bias ? as_doubles(*bias) : std::vector<double>(m.size(), 0.0);
  for (size_t c = 0; c < m.size(); ++c) {
    const double s = w[c] / std::sqrt(v[c] + *eps);
    bn.scale.push_back(s);
    bn.shift.push_back(b[c] - m[c] * s);
  }
  return bn;
}

bool is_convolution(const ir::Node& n) {
  switch (n.op) {
    case ir::OpKind::kConv1d:
    case ir::OpKind::kConv2d: return true;
    case ir::OpKind::kConvolution: return bool_value(n, "transposed", false) == false;
    default: return false;
  }
}

// Folds `bn` into the convolution producing its input, when that is possible.
bool fold_into_convolution(PatternContext& ctx, ir::Node& bn_node, const EvalBatchNorm& bn) {
  ir::Node* conv = bn.input->producer;
  if (!conv || !is_convolution(*conv) || !ctx.single_use(bn.input)) return false;
  ir::Value* weight_v = PatternContext::tensor_arg(*conv, "weight");
  ir::Value* input_v = PatternContext::tensor_arg(*conv, "input");
  const Tensor* weight = ctx.constant(weight_v);
  const Tensor* bias = ctx.constant(PatternContext::tensor_arg(*conv, "bias"));
  if (!weight || !input_v || (!bias && !absent(*conv, "bias"))) return false;
  // Batched only: for an unbatched input dim 1 is not the channel dim.
  if (weight->dim() < 3 || input_v->type.sizes.size() != static_cast<size_t>(weight->dim())) return false;
  const int64_t out_channels = weight->size(0);
  if (out_channels != static_cast<int64_t>(bn.scale.size()) || !is_floating(weight->dtype())) return false;
  if (bias && bias->numel() != out_channels) return false;

  // A scale per output channel into a fresh tensor (the weight itself stays as it is), each
  // product in double and rounded once to the weight's dtype. float32 weights (the common
  // case, and most of a model's bytes) go straight through; other dtypes convert via double.
  const int64_t per_channel = out_channels == 0 ? 0 : weight->numel() / out_channels;
  auto scale_channels = [&](const auto* src, auto* dst) {
    using T = std::remove_pointer_t<decltype(dst)>;
    for (int64_t o = 0; o < out_channels; ++o) {
      const double k = bn.scale[static_cast<size_t>(o)];
      for (int64_t i = o * per_channel; i < (o + 1) * per_channel; ++i)
        dst[i] = static_cast<T>(static_cast<double>(src[i]) * k);
    }
  };
  Tensor w;
  if (weight->dtype() == DType::Float32) {
    const Tensor src = weight->contiguous();
    w = Tensor::empty(DType::Float32, weight->sizes());
    scale_channels(src.data<float>(), w.data<float>());
  } else {
    w = weight->dtype() == DType::Float64 ? weight->clone() : weight->to(DType::Float64);
    scale_channels(w.data<double>(), w.data<double>());
    w = w.to(weight->dtype());
  }
  Tensor b = Tensor::zeros(DType::Float64, {out_channels});
  for (int64_t o = 0; o < out_channels; ++o) {
    const auto c = static_cast<size_t>(o);
    b.data<double>()[o] = (bias ? bias->value_at(o) : 0.0) * bn.scale[c] + bn.shift[c];
  }
  const std::string base = bn.out->name.empty() ? conv->name : bn.out->name;
  ir::Value* new_w = ctx.add_constant(base + ".weight", w);
  ir::Value* new_b = ctx.add_constant(base + ".bias", b.to(bias ? bias->dtype() : weight->dtype()));

  std::vector<ir::NamedArg> args;
  for (const ir::NamedArg& a : conv->args) {
    if (a.name == "weight") {
      args.push_back({"weight", new_w});
      if (!conv->find("bias")) args.push_back({"bias", new_b});
    } else {
      args.push_back(a.name == "bias" ? ir::NamedArg{"bias", new_b} : a);
    }
  }
  ir::Node* folded = ctx.insert_before(&bn_node, conv->op, conv->name, std::move(args), bn.out->type);
  folded->metadata = conv->metadata;
  ctx.replace_uses(bn.out, folded->outputs[0]);
  return true;
}

// x * scale + shift with [C, 1, ...] constants.
void scale_and_shift(PatternContext& ctx, ir::Node& bn_node, const EvalBatchNorm& bn) {
  const int64_t channels = static_cast<int64_t>(bn.scale.size());
  Shape shape(bn.input->type.sizes.size() - 1, 1);
  shape[0] = channels;
  Tensor scale = Tensor::zeros(DType::Float64, shape), shift = Tensor::zeros(DType::Float64, shape);
  for (int64_t c = 0; c < channels; ++c) {
    scale.data<double>()[c] = bn.scale[static_cast<size_t>(c)];
    shift.data<double>()[c] = bn.shift[static_cast<size_t>(c)];
  }
  const DType dt = bn.out->type.dtype;
  const std::string base = bn.out->name.empty() ? bn_node.name : bn.out->name;
  ir::Value* scale_v = ctx.add_constant(base + ".scale", scale.to(dt));
  ir::Value* shift_v = ctx.add_constant(base + ".shift", shift.to(dt));
  ir::Node* mul = ctx.insert_before(&bn_node, ir::OpKind::kMulTensor, bn_node.name + "_scale",
                                    {{"self", bn.input}, {"other", scale_v}}, bn.out->type);
  ir::Node* add = ctx.insert_before(&bn_node, ir::OpKind::kAddTensor, bn_node.name,
                                    {{"self", mul->outputs[0]}, {"other", shift_v}}, bn.out->type);
  ctx.replace_uses(bn.out, add->outputs[0]);
}

Expected<bool> fold(PatternContext& ctx, ir::Node& n) {
  std::optional<EvalBatchNorm> bn = match_batch_norm(ctx, n);
  if (!bn) return false;
  if (!fold_into_convolution(ctx, n, *bn)) scale_and_shift(ctx, n, *bn);
  return true;
}

}  // namespace

Status fold_batch_norm(ir::Module& m) { return rewrite_to_fixed_point(m, fold); }

}  // namespace kiln::lowering
