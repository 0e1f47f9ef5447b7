// Epilogue folding for the CUDA builder: a GEMM whose only user adds a bias
// vector (and then, optionally, a ReLU) becomes one cuBLASLt call with a
// bias (+ReLU) epilogue; a convolution whose only user adds a residual of its
// own shape (and then, optionally, a ReLU) becomes one cuDNN call. The folded
// layer takes over the last folded layer's output value, so users and
// engine outputs need no rewiring.
#include <algorithm>
#include <map>

#include "backends/cuda/cuda_builder.h"

namespace kiln::cuda {

namespace {

using ir::OpKind;

struct Uses {
  std::map<const ir::Value*, std::vector<ir::Node*>> users;
  std::map<const ir::Value*, int> count;
};

Uses count_uses(engine::Network& net) {
  Uses u;
  for (auto& n : net.graph.nodes())
    for (ir::Value* v : n->operands()) {
      u.users[v].push_back(n.get());
      ++u.count[v];
    }
  for (const ir::Value* v : net.graph.outputs()) ++u.count[v];
  return u;
}

bool unit_alpha(const ir::Node& n) {
  const ir::Arg* a = n.find("alpha");
  if (!a || std::holds_alternative<ir::NoneArg>(*a)) return true;
  if (const auto* i = std::get_if<int64_t>(a)) return *i == 1;
  if (const auto* d = std::get_if<double>(a)) return *d == 1.0;
  return false;
}

ir::Value* tensor_arg(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = n.find(name);
  if (!a) return nullptr;
  const auto* v = std::get_if<ir::Value*>(a);
  return v && *v && (*v)->kind == ir::ValueKind::kTensor ? *v : nullptr;
}

bool same_static_type(const ir::Value* a, const ir::Value* b) {
  if (a->type.dtype != b->type.dtype || a->type.sizes.size() != b->type.sizes.size()) return false;
  for (size_t d = 0; d < a->type.sizes.size(); ++d)
    if (!a->type.sizes[d].is_static() || !b->type.sizes[d].is_static() ||
        a->type.sizes[d].value != b->type.sizes[d].value)
      return false;
  return true;
}

// The single user of `n`'s only output, when it is an op of `kinds`.
ir::Node* sole_user(Uses& u, const ir::Node& n, std::initializer_list<OpKind> kinds) {
  if (n.outputs.size() != 1 || u.count[n.outputs[0]] != 1) return nullptr;
  auto& us = u.users[n.outputs[0]];
  if (us.size() != 1) return nullptr;
  ir::Node* user = us[0];
  return std::find(kinds.begin(), kinds.end(), user->op) != kinds.end() ? user : nullptr;
}

// `producer` takes over `user`'s output; `user` is removed from the graph.
void absorb(engine::Network& net, ir::Node& producer, ir::Node* user) {
  ir::Value* out = user->outputs[0];
  out->producer = &producer;
  out->output_index = 0;
  producer.outputs[0] = out;
  auto& nodes = net.graph.nodes();
  nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [&](const auto& p) { return p.get() == user; }), nodes.end());
}

size_t position(engine::Network& net, const ir::Node* n) {
  auto& nodes = net.graph.nodes();
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].get() == n) return i;
  return nodes.size();
}

bool defined_before(engine::Network& net, const ir::Value* v, const ir::Node* n) {
  if (!v->producer) return true;  // an engine input or constant
  return position(net, v->producer) < position(net, n);
}

bool is_constant(const engine::Network& net, const ir::Value* v) {
  const auto& ins = net.graph.inputs();
  return std::find(ins.begin() + static_cast<long>(net.num_inputs), ins.end(), v) != ins.end();
}

}  // namespace

Status fold_epilogues(engine::Network& net) {
  // `n` takes `operand` as argument `arg` and `add`'s output, then a ReLU that is the only user.
  auto fold = [&net](ir::Node& n, const char* arg, ir::Value* operand, ir::Node* add) {
    n.args.push_back({arg, operand});
    absorb(net, n, add);
    Uses u = count_uses(net);
    if (ir::Node* relu = sole_user(u, n, {OpKind::kRelu})) {
      n.args.push_back({"kiln_act", std::string("relu")});
      absorb(net, n, relu);
    }
  };
  bool changed = true;
  while (changed) {
    changed = false;
    Uses u = count_uses(net);
    for (auto& np : net.graph.nodes()) {
      ir::Node& n = *np;
      const bool gemm =
          n.op == OpKind::kMatmul || n.op == OpKind::kMm || (n.op == OpKind::kLinear && !tensor_arg(n, "bias"));
      const bool conv = (n.op == OpKind::kConv2d || n.op == OpKind::kConvolution || n.op == OpKind::kConvAct);
      if (gemm && !n.find("kiln_bias") && !n.find("kiln_act")) {
        ir::Node* add = sole_user(u, n, {OpKind::kAddTensor});
        if (!add || !unit_alpha(*add)) continue;
        ir::Value* self = tensor_arg(*add, "self");
        ir::Value* other = tensor_arg(*add, "other");
        ir::Value* bias = self == n.outputs[0] ? other : self;
        if (!bias || !is_constant(net, bias) || bias->type.dtype != n.outputs[0]->type.dtype) continue;
        const auto& os = n.outputs[0]->type.sizes;
        int64_t numel = 1;
        bool ok = !os.empty() && os.back().is_static() && bias->type.sizes.size() <= os.size();
        for (const ir::Dim& d : bias->type.sizes) {
          ok = ok && d.is_static();
          numel *= d.value;
        }
        if (!ok || bias->type.sizes.empty() || bias->type.sizes.back().value != os.back().value ||
            numel != os.back().value || !same_static_type(add->outputs[0], n.outputs[0]))
          continue;
        fold(n, "kiln_bias", bias, add);
        changed = true;
        break;
      }
      if (conv && !n.find("kiln_residual")) {
        if (n.op == OpKind::kConvAct) {  // the residual comes before the activation: only "none" folds
          const ir::Arg* act = n.find("activation");
          const auto* s = act ? std::get_if<std::string>(act) : nullptr;
          if (!s || *s != "none") continue;
        }
        if (const ir::Arg* tr = n.find("transposed"); tr && std::get_if<bool>(tr) && *std::get_if<bool>(tr)) continue;
        if (n.find("kiln_act")) continue;
        ir::Node* add = sole_user(u, n, {OpKind::kAddTensor});
        if (!add || !unit_alpha(*add)) continue;
        ir::Value* self = tensor_arg(*add, "self");
        ir::Value* other = tensor_arg(*add, "other");
        ir::Value* z = self == n.outputs[0] ? other : self;
        if (!z || z == n.outputs[0] || !same_static_type(z, n.outputs[0]) ||
            !same_static_type(add->outputs[0], n.outputs[0]) || !defined_before(net, z, &n))
          continue;
        fold(n, "kiln_residual", z, add);
        changed = true;
        break;
      }
    }
  }
  return net.verify();
}

}  // namespace kiln::cuda
