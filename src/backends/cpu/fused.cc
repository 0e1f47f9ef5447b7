// Kernels of the fused ops that lowering's pattern rewrites make:
// kiln.attention, kiln.silu_mul and kiln.conv_act (schemas in ir/ops.def).
//
// A fused op means exactly what the ops it replaces mean, so its reference
// kernel is built from theirs: kiln.attention is scaled_dot_product_attention
// (stable softmax, both products on OpenBLAS) without dropout;
// kiln.conv_act runs the convolution kernel and then the activation's own
// kernel on the result. kiln.silu_mul is one loop that rounds the silu result
// to the dtype before multiplying, as the two separate ops do. Every fused
// result is therefore bit-identical to the unfused graph on this backend.
#include <cmath>
#include <string>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

// The reference kernels the fused ops are made of.
const KernelRegistry& parts() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    register_elementwise_kernels(r);
    register_conv_kernels(r);
    register_attention_kernels(r);
    return r;
  }();
  return registry;
}

// kiln.attention(query, key, value, attn_mask=None, scale=None, is_causal=False)
Status attention(KernelArgs& a) {
  // Arguments SDPA has and kiln.attention does not would change its meaning.
  for (const char* name : {"dropout_p"})
    if (a.has(name)) return a.error("kiln.attention takes no '" + std::string(name) + "' argument");
  return parts().find(ir::OpKind::kScaledDotProductAttention)(a);
}

// kiln.silu_mul(a, b) = silu(a) * b.
Status silu_mul(KernelArgs& args) {
  KILN_ASSIGN_OR_RETURN(Tensor a, args.tensor("a"));
  KILN_ASSIGN_OR_RETURN(Tensor b, args.tensor("b"));
  if (!is_floating(a.dtype()) || b.dtype() != a.dtype())
    return args.error("a and b must share one floating-point dtype, got " + a.type_string() + " and " +
                      b.type_string());
  const std::optional<Shape> shape = broadcast_shapes(a.sizes(), b.sizes());
  if (!shape)
    return args.error("shapes " + shape_to_string(a.sizes()) + " and " + shape_to_string(b.sizes()) +
                      " do not broadcast");
  Tensor out = Tensor::zeros(a.dtype(), *shape);
  visit_floating(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = opmath_t<T>;
    map_binary<T, T, T>(expand_to(a, *shape), expand_to(b, *shape), out, [](C x, C y) {
      const C silu = load(convert<T>(x / (C(1) + std::exp(-x))));  // aten.silu's result, rounded to T
      return silu * y;
    });
  });
  args.set_output(0, out);
  return Status::ok();
}

// Runs the activation named `activation` on `x` through its reference kernel,
// on a one-node graph named after `fused` (so errors name the fused node).
Expected<Tensor> activate(const KernelArgs& fused, const std::string& activation, const Tensor& x) {
  ir::Value in;
  in.id = 0;
  in.name = fused.node().name + ".conv";
  ir::Node n;
  n.name = fused.node().name;
  n.args = {{"self", &in}};
  if (activation == "relu") {
    n.op = ir::OpKind::kRelu;
  } else if (activation == "hardtanh") {
    n.op = ir::OpKind::kHardtanh;
    KILN_ASSIGN_OR_RETURN(double lo, fused.float_arg("min_val", -1.0));
    KILN_ASSIGN_OR_RETURN(double hi, fused.float_arg("max_val", 1.0));
    n.args.push_back({"min_val", lo});
    n.args.push_back({"max_val", hi});
  } else if (activation == "silu") {
    n.op = ir::OpKind::kSilu;
  } else if (activation == "hardswish") {
    n.op = ir::OpKind::kHardswish;
  } else if (activation == "gelu") {
    n.op = ir::OpKind::kGelu;
  } else if (activation == "gelu_tanh") {
    n.op = ir::OpKind::kGelu;
    n.args.push_back({"approximate", std::string("tanh")});
  } else if (activation == "sigmoid") {
    n.op = ir::OpKind::kSigmoid;
  } else {
    return fused.error("unknown activation '" + activation +
                       "'; expected relu, hardtanh, silu, hardswish, gelu, gelu_tanh or sigmoid");
  }
  const RtValue env[] = {x};
  KernelArgs args(n, env);
  KILN_TRY(parts().find(n.op)(args));
  return std::get<Tensor>(args.outputs().at(0));
}

// kiln.conv_act(input, weight, bias, stride, padding, dilation, groups, activation, min_val, max_val)
Status conv_act(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(std::string activation, a.string_arg("activation"));
  if (a.has("transposed") || a.has("output_padding"))
    return a.error("kiln.conv_act is never transposed; it takes no 'transposed' or 'output_padding' argument");
  KILN_TRY(parts().find(ir::OpKind::kConvolution)(a));
  const Tensor conv = std::get<Tensor>(a.outputs().at(0));
  KILN_ASSIGN_OR_RETURN(Tensor out, activate(a, activation, conv));
  a.set_output(0, out);
  return Status::ok();
}

}  // namespace

void register_fused_kernels(KernelRegistry& r) {
  r.add(ir::OpKind::kAttention, &attention);
  r.add(ir::OpKind::kSiluMul, &silu_mul);
  r.add(ir::OpKind::kConvAct, &conv_act);
}

}  // namespace kiln::cpu
