// A convolution whose only user is an activation -> kiln.conv_act.
//
// conv1d / conv2d / convolution (not transposed, batched input) followed by
// relu, hardtanh (relu6 is hardtanh(0, 6)), silu, hardswish, gelu or sigmoid.
// kiln.conv_act takes aten.convolution's arguments less the transposed-only
// ones, plus the activation's name and, for hardtanh, its bounds.
#include "lowering/pass.h"
#include "lowering/rewrite.h"

namespace kiln::lowering {

namespace {

bool fusable_convolution(const PatternContext& ctx, const ir::Node& conv) {
  switch (conv.op) {
    case ir::OpKind::kConv1d:
    case ir::OpKind::kConv2d: break;
    case ir::OpKind::kConvolution:
      if (bool_value(conv, "transposed", false) != false) return false;
      break;
    default: return false;
  }
  // The convolution kernel kiln.conv_act runs takes batched inputs only.
  const ir::Value* input = PatternContext::tensor_arg(conv, "input");
  const ir::Value* weight = PatternContext::tensor_arg(conv, "weight");
  if (!input || !weight) return false;
  const size_t rank = weight->type.sizes.size();
  return (rank == 3 || rank == 4) && input->type.sizes.size() == rank;
}

// The activation's name and extra arguments, or nullopt when `act` is not one kiln.conv_act takes.
std::optional<std::vector<ir::NamedArg>> activation_of(const PatternContext& ctx, const ir::Node& act) {
  switch (act.op) {
    case ir::OpKind::kRelu: return std::vector<ir::NamedArg>{{"activation", std::string("relu")}};
    case ir::OpKind::kSilu: return std::vector<ir::NamedArg>{{"activation", std::string("silu")}};
    case ir::OpKind::kHardswish: return std::vector<ir::NamedArg>{{"activation", std::string("hardswish")}};
    case ir::OpKind::kSigmoid: return std::vector<ir::NamedArg>{{"activation", std::string("sigmoid")}};
    case ir::OpKind::kGelu: {
      const ir::Arg* a = act.find("approximate");
      const std::string* mode = a ? std::get_if<std::string>(a) : nullptr;
      if (a && !mode) return std::nullopt;
      if (!mode || *mode == "none") return std::vector<ir::NamedArg>{{"activation", std::string("gelu")}};
      if (*mode == "tanh") return std::vector<ir::NamedArg>{{"activation", std::string("gelu_tanh")}};
      return std::nullopt;
    }
    case ir::OpKind::kHardtanh: {
      const std::optional<double> lo = absent(act, "min_val") ? -1.0 : ctx.number(act, "min_val");
      const std::optional<double> hi = absent(act, "max_val") ? 1.0 : ctx.number(act, "max_val");
      if (!lo || !hi) return std::nullopt;
      return std::vector<ir::NamedArg>{{"activation", std::string("hardtanh")}, {"min_val", *lo}, {"max_val", *hi}};
    }
    default: return std::nullopt;
  }
}

Expected<bool> fuse(PatternContext& ctx, ir::Node& act) {
  if (act.outputs.size() != 1) return false;
  ir::Value* x = PatternContext::tensor_arg(act, "self");
  if (!x || !x->producer || !ctx.single_use(x) || !fusable_convolution(ctx, *x->producer)) return false;
  std::optional<std::vector<ir::NamedArg>> activation = activation_of(ctx, act);
  const ir::Value* out = act.outputs[0];
  if (!activation || out->type.dtype != x->type.dtype || !is_floating(x->type.dtype)) return false;
  const ir::Node& conv = *x->producer;
  std::vector<ir::NamedArg> args;
  for (const char* name : {"input", "weight", "bias", "stride", "padding", "dilation", "groups"})
    if (const ir::Arg* a = conv.find(name)) args.push_back({name, *a});
  for (ir::NamedArg& a : *activation) args.push_back(std::move(a));
  ir::Node* fused = ctx.insert_before(&act, ir::OpKind::kConvAct, conv.name, std::move(args), out->type);
  fused->metadata = conv.metadata;
  ctx.replace_uses(act.outputs[0], fused->outputs[0]);
  return true;
}

}  // namespace

Status fuse_conv_activation(ir::Module& m) { return rewrite_to_fixed_point(m, fuse); }

}  // namespace kiln::lowering
