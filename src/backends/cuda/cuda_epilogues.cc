// Epilogue folding for the CUDA builder: a GEMM whose only user adds a bias
// vector (and then, optionally, a ReLU) becomes one cuBLASLt call with a
// bias (+ReLU) epilogue; a convolution whose only user adds a residual of its
// own shape (and then, optionally, a ReLU) becomes one cuDNN call. The folded
// layer takes over the last folded layer's output value, so users and
// engine outputs need no rewiring. An RMSNorm between casts to and from
// float32, followed by a weight multiply, becomes one norm (fold_rms_norm_casts);
// a rotary embedding spelled out becomes one kiln.rotary layer (fold_rotary);
// a residual add feeding a norm is done by the norm (fold_residual_norm); a
// gated MLP's silu(gate) * up over two halves of one product is done by the
// product (fold_silu_gate).
#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "backends/cuda/cuda_builder.h"
#include "engine/fuse_elementwise.h"

namespace kiln::cuda {

namespace {

using ir::OpKind;

// Each value's users and use count (an engine output counts as a use),
// indexed by a number given to every value once: folds remove nodes and
// move operands but make no values, so counting again after a fold refills
// the same vectors.
struct Uses {
  std::unordered_map<const ir::Value*, size_t> id;
  std::vector<int> counts;
  std::vector<std::vector<ir::Node*>> user_lists;

  explicit Uses(const engine::Network& net) {
    for (const ir::Value* v : net.graph.inputs()) id.emplace(v, id.size());
    for (const auto& n : net.graph.nodes())
      for (const ir::Value* v : n->outputs) id.emplace(v, id.size());
    counts.resize(id.size());
    user_lists.resize(id.size());
    recount(net);
  }
  void recount(const engine::Network& net) {
    std::fill(counts.begin(), counts.end(), 0);
    for (auto& l : user_lists) l.clear();
    for (const auto& n : net.graph.nodes())
      for (ir::Value* v : n->operands()) {
        const size_t i = id.at(v);
        user_lists[i].push_back(n.get());
        ++counts[i];
      }
    for (const ir::Value* v : net.graph.outputs()) ++counts[id.at(v)];
  }
  int count(const ir::Value* v) const { return counts[id.at(v)]; }
  const std::vector<ir::Node*>& users(const ir::Value* v) const { return user_lists[id.at(v)]; }
};

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
ir::Node* sole_user(const Uses& u, const ir::Node& n, std::initializer_list<OpKind> kinds) {
  if (n.outputs.size() != 1 || u.count(n.outputs[0]) != 1) return nullptr;
  const auto& us = u.users(n.outputs[0]);
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

bool is_cast(const ir::Node& n) { return n.op == OpKind::kTo || n.op == OpKind::kToCopy; }

// Both folds below read `u`, the use counts of the graph as it is before they
// change it; fold_epilogues counts again after every fold.

// HF-style RMSNorm in 16-bit models, weight * to(rms_norm(to(x, float32)), T):
// the norm takes x in T, computes in float32, rounds to T and multiplies by
// the weight (rounding again), as the four ops do, in one row kernel. The
// norm gets `kiln_cast_weight`; the casts and the multiply go.
bool fold_rms_norm_casts(engine::Network& net, const Uses& u, ir::Node& n) {
  if (n.op != OpKind::kRmsNorm || n.outputs.size() != 1 || tensor_arg(n, "weight") || n.find("kiln_cast_weight") ||
      n.find("kiln_residual"))
    return false;
  ir::Value* x32 = tensor_arg(n, "input");
  if (!x32 || x32->type.dtype != DType::Float32 || !x32->producer || !is_cast(*x32->producer)) return false;
  ir::Node* up = x32->producer;
  ir::Value* x = tensor_arg(*up, "self");
  if (!x || (x->type.dtype != DType::Float16 && x->type.dtype != DType::BFloat16)) return false;
  const DType t = x->type.dtype;
  ir::Node* down = sole_user(u, n, {OpKind::kTo, OpKind::kToCopy});
  if (!down || down->outputs[0]->type.dtype != t) return false;
  ir::Node* mul = sole_user(u, *down, {OpKind::kMulTensor});
  if (!mul) return false;
  ir::Value* self = tensor_arg(*mul, "self");
  ir::Value* other = tensor_arg(*mul, "other");
  ir::Value* w = self == down->outputs[0] ? other : self;
  const auto& os = n.outputs[0]->type.sizes;
  if (!w || w == down->outputs[0] || !is_constant(net, w) || w->type.dtype != t || w->type.sizes.size() != 1 ||
      os.empty() || !os.back().is_static() || !w->type.sizes[0].is_static() ||
      w->type.sizes[0].value != os.back().value || mul->outputs[0]->type.dtype != t ||
      mul->outputs[0]->type.sizes.size() != os.size() || x->type.sizes.size() != os.size())
    return false;
  for (size_t d = 0; d < os.size(); ++d)
    if (!os[d].is_static() || !mul->outputs[0]->type.sizes[d].is_static() ||
        os[d].value != mul->outputs[0]->type.sizes[d].value || !x->type.sizes[d].is_static() ||
        x->type.sizes[d].value != os[d].value)
      return false;
  // The default eps is float32's: the norm computed in float32.
  if (!n.find("eps") || std::holds_alternative<ir::NoneArg>(*n.find("eps"))) {
    n.args.erase(std::remove_if(n.args.begin(), n.args.end(), [](const ir::NamedArg& a) { return a.name == "eps"; }),
                 n.args.end());
    n.args.push_back({"eps", static_cast<double>(std::numeric_limits<float>::epsilon())});
  }
  for (ir::NamedArg& a : n.args)
    if (a.name == "input") a.value = x;
  n.args.push_back({"kiln_cast_weight", w});
  absorb(net, n, down);
  absorb(net, n, mul);
  // The up-cast goes when the norm was its only user.
  if (u.count(x32) == 1) {
    auto& nodes = net.graph.nodes();
    nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [&](const auto& p) { return p.get() == up; }), nodes.end());
  }
  return true;
}

std::optional<int64_t> int_of(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = n.find(name);
  if (!a) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(a)) return *i;
  return std::nullopt;
}

// A static type's sizes, or nothing when a size is symbolic.
std::optional<std::vector<int64_t>> static_sizes_of(const ir::Value* v) {
  std::vector<int64_t> s;
  for (const ir::Dim& d : v->type.sizes) {
    if (!d.is_static()) return std::nullopt;
    s.push_back(d.value);
  }
  return s;
}

// `v` = slice(x, last dim, start, end) of a static x; returns x, start and end (clamped).
std::optional<std::tuple<ir::Value*, int64_t, int64_t>> last_dim_slice(const ir::Value* v) {
  if (!v->producer || v->producer->op != OpKind::kSliceTensor) return std::nullopt;
  const ir::Node& n = *v->producer;
  ir::Value* x = tensor_arg(n, "self");
  if (!x) return std::nullopt;
  auto xs = static_sizes_of(x);
  if (!xs || xs->empty()) return std::nullopt;
  const auto rank = static_cast<int64_t>(xs->size());
  const int64_t dim = int_of(n, "dim").value_or(0);
  if (dim != rank - 1 && dim != -1) return std::nullopt;
  if (const ir::Arg* st = n.find("step"); st && !std::holds_alternative<ir::NoneArg>(*st) && int_of(n, "step") != 1)
    return std::nullopt;
  const int64_t D = xs->back();
  int64_t start = int_of(n, "start").value_or(0), end = int_of(n, "end").value_or(D);
  if (start < 0) start += D;
  if (end < 0) end += D;
  start = std::clamp<int64_t>(start, 0, D);
  end = std::clamp<int64_t>(end, 0, D);
  return std::tuple{x, start, end};
}

// transformers' apply_rotary_pos_emb, x * cos + cat(-x2, x1) * sin with x1, x2
// the halves of x's last dim: one kiln.rotary layer instead of a negation, a
// concatenation (two copies) and the products and sum. The add becomes the
// rotary layer and keeps its output value.
bool fold_rotary(engine::Network& net, const Uses& u, ir::Node& o) {
  if (o.op != OpKind::kAddTensor || o.outputs.size() != 1 || !unit_alpha(o)) return false;
  ir::Value* p = tensor_arg(o, "self");
  ir::Value* q = tensor_arg(o, "other");
  if (!p || !q || p == q || !p->producer || !q->producer) return false;
  for (int swap = 0; swap < 2; ++swap) {
    ir::Value* m1v = swap ? q : p;
    ir::Value* m2v = swap ? p : q;
    ir::Node* m1 = m1v->producer;
    ir::Node* m2 = m2v->producer;
    if (m1->op != OpKind::kMulTensor || m2->op != OpKind::kMulTensor || u.count(m1v) != 1 || u.count(m2v) != 1)
      continue;
    ir::Value* a = tensor_arg(*m2, "self");
    ir::Value* b = tensor_arg(*m2, "other");
    if (!a || !b) continue;
    ir::Value* catv = a->producer && a->producer->op == OpKind::kCat ? a : b;
    ir::Value* sinv = catv == a ? b : a;
    if (!catv->producer || catv->producer->op != OpKind::kCat || u.count(catv) != 1) continue;
    ir::Node* cat = catv->producer;
    const auto* parts = std::get_if<std::vector<ir::Value*>>(cat->find("tensors"));
    if (!parts || parts->size() != 2) continue;
    ir::Value* negv = (*parts)[0];
    ir::Value* lo = (*parts)[1];
    if (!negv->producer || negv->producer->op != OpKind::kNeg || u.count(negv) != 1 || u.count(lo) != 1) continue;
    ir::Value* hi = tensor_arg(*negv->producer, "self");
    if (!hi || u.count(hi) != 1) continue;
    const auto hs = last_dim_slice(hi);
    const auto ls = last_dim_slice(lo);
    if (!hs || !ls || std::get<0>(*hs) != std::get<0>(*ls)) continue;
    ir::Value* x = std::get<0>(*hs);
    const auto xs = static_sizes_of(x);
    const int64_t D = xs->back(), half = D / 2;
    if (D % 2 != 0 || std::get<1>(*ls) != 0 || std::get<2>(*ls) != half || std::get<1>(*hs) != half ||
        std::get<2>(*hs) != D)
      continue;
    const auto cat_rank = static_cast<int64_t>(xs->size());
    const int64_t cat_dim = int_of(*cat, "dim").value_or(0);
    if (cat_dim != cat_rank - 1 && cat_dim != -1) continue;
    ir::Value* m1a = tensor_arg(*m1, "self");
    ir::Value* m1b = tensor_arg(*m1, "other");
    if (!m1a || !m1b || (m1a != x && m1b != x)) continue;
    ir::Value* cosv = m1a == x ? m1b : m1a;
    // Every operand has the output's dtype; cos and sin broadcast to x's sizes, which the output has.
    const DType t = x->type.dtype;
    if ((t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16) || cosv->type.dtype != t ||
        sinv->type.dtype != t || o.outputs[0]->type.dtype != t || !same_static_type(o.outputs[0], x))
      continue;
    auto bcast = [&](const ir::Value* v) {
      auto vs = static_sizes_of(v);
      if (!vs || vs->size() > xs->size()) return false;
      for (size_t d = 0; d < vs->size(); ++d) {
        const int64_t want = (*xs)[xs->size() - vs->size() + d];
        if ((*vs)[d] != want && (*vs)[d] != 1) return false;
      }
      return true;
    };
    if (!bcast(cosv) || !bcast(sinv)) continue;
    o.op = OpKind::kRotary;
    o.args = {{"input", x}, {"cos", cosv}, {"sin", sinv}};
    const std::set<const ir::Node*> gone{m1, m2, cat, negv->producer, hi->producer, lo->producer};
    auto& nodes = net.graph.nodes();
    nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [&](const auto& n) { return gone.count(n.get()) > 0; }),
                nodes.end());
    return true;
  }
  return false;
}

// A residual add feeding a LayerNorm or RMSNorm, norm(a + b) with a and b of
// the sum's shape: the norm reads a and b and adds them itself (rounding as
// the add does). When the sum has other users (a pre-norm transformer's
// residual stream), the norm also writes it, as its second output; those
// users must come after the norm, where the sum is now defined.
bool fold_residual_norm(engine::Network& net, const Uses& u, ir::Node& n) {
  if ((n.op != OpKind::kLayerNorm && n.op != OpKind::kRmsNorm) || n.outputs.size() != 1 ||
      n.find("kiln_residual") || n.find("kiln_cast_weight"))
    return false;
  ir::Value* x = tensor_arg(n, "input");
  if (!x || !x->producer || x->producer->op != OpKind::kAddTensor || !unit_alpha(*x->producer)) return false;
  ir::Node* add = x->producer;
  ir::Value* a = tensor_arg(*add, "self");
  ir::Value* b = tensor_arg(*add, "other");
  const DType t = x->type.dtype;
  if (!a || !b || (t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16) || !same_static_type(a, x) ||
      !same_static_type(b, x))
    return false;
  const size_t at = position(net, &n);
  for (const ir::Node* user : u.users(x))
    if (user != &n && position(net, user) < at) return false;
  for (ir::NamedArg& arg : n.args)
    if (arg.name == "input") arg.value = a;
  n.args.push_back({"kiln_residual", b});
  if (u.count(x) > 1) {  // other users, or an engine output
    x->producer = &n;
    x->output_index = 1;
    n.outputs.push_back(x);
  }
  auto& nodes = net.graph.nodes();
  nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [&](const auto& p) { return p.get() == add; }), nodes.end());
  return true;
}

bool is_gemm(const ir::Node& n) {
  if (!(n.op == OpKind::kMatmul || n.op == OpKind::kMm || (n.op == OpKind::kLinear && !tensor_arg(n, "bias"))))
    return false;
  // A product over an empty dim is a fill of zeros (emit_matmul), with nothing to fold into.
  const ir::Value* a = tensor_arg(n, n.op == OpKind::kLinear ? "input" : "self");
  return !(a && !a->type.sizes.empty() && a->type.sizes.back().is_static() && a->type.sizes.back().value == 0);
}

// kiln.silu_mul(a, b) with a and b slices of one width of the last dim of a
// matrix product read by nothing else (the gate and up projections made one
// product by lowering): the product takes `kiln_gate_up` = {a's start, b's
// start} and the silu_mul's output. Its layer computes both halves and
// silu(a) * b (emit_matmul); the slices and the silu_mul go.
bool fold_silu_gate(engine::Network& net, const Uses& u, ir::Node& n) {
  if (n.op != OpKind::kSiluMul || n.outputs.size() != 1) return false;
  ir::Value* a = tensor_arg(n, "a");
  ir::Value* b = tensor_arg(n, "b");
  if (!a || !b || a == b || u.count(a) != 1 || u.count(b) != 1) return false;
  const auto as = last_dim_slice(a);
  const auto bs = last_dim_slice(b);
  if (!as || !bs || std::get<0>(*as) != std::get<0>(*bs)) return false;
  ir::Value* x = std::get<0>(*as);
  ir::Node* mm = x->producer;
  if (!mm || !is_gemm(*mm) || mm->outputs.size() != 1 || u.count(x) != 2 || mm->find("kiln_act") ||
      mm->find("kiln_gate_up"))
    return false;
  ir::Value* out = n.outputs[0];
  const auto os = static_sizes_of(out);
  const auto xs = static_sizes_of(x);
  const auto a_sizes = static_sizes_of(a);
  const auto b_sizes = static_sizes_of(b);
  const int64_t width = std::get<2>(*as) - std::get<1>(*as);
  if (!os || !xs || !a_sizes || !b_sizes || os->empty() || os->size() != xs->size() || *a_sizes != *os ||
      *b_sizes != *os || os->back() != width || std::get<2>(*bs) - std::get<1>(*bs) != width ||
      !std::equal(os->begin(), os->end() - 1, xs->begin()))
    return false;
  const DType t = out->type.dtype;
  if ((t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16) || x->type.dtype != t ||
      a->type.dtype != t || b->type.dtype != t)
    return false;
  mm->args.push_back({"kiln_gate_up", std::vector<int64_t>{std::get<1>(*as), std::get<1>(*bs)}});
  const std::set<const ir::Node*> gone{a->producer, b->producer};
  absorb(net, *mm, &n);
  auto& nodes = net.graph.nodes();
  nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [&](const auto& p) { return gone.count(p.get()) > 0; }),
              nodes.end());
  return true;
}

}  // namespace

Status fold_epilogues(engine::Network& net) {
  Uses u(net);
  // `n` takes `operand` as argument `arg` and `add`'s output, then a ReLU that is the only user.
  auto fold = [&net, &u](ir::Node& n, const char* arg, ir::Value* operand, ir::Node* add) {
    n.args.push_back({arg, operand});
    absorb(net, n, add);  // the add's output, now n's, keeps its users: the counts still hold for it
    if (ir::Node* relu = sole_user(u, n, {OpKind::kRelu})) {
      n.args.push_back({"kiln_act", std::string("relu")});
      absorb(net, n, relu);
    }
  };
  // One node's folds; true when it folded (the graph changed).
  auto fold_at = [&](ir::Node& n) {
    if (fold_rms_norm_casts(net, u, n) || fold_rotary(net, u, n) || fold_residual_norm(net, u, n) ||
        fold_silu_gate(net, u, n))
      return true;
    const bool gemm = is_gemm(n);
    const bool conv = (n.op == OpKind::kConv2d || n.op == OpKind::kConvolution || n.op == OpKind::kConvAct);
    if (gemm && !n.find("kiln_bias") && !n.find("kiln_act") && !n.find("kiln_gate_up")) {
      ir::Node* add = sole_user(u, n, {OpKind::kAddTensor});
      if (!add || !unit_alpha(*add)) return false;
      ir::Value* self = tensor_arg(*add, "self");
      ir::Value* other = tensor_arg(*add, "other");
      ir::Value* bias = self == n.outputs[0] ? other : self;
      if (!bias || !is_constant(net, bias) || bias->type.dtype != n.outputs[0]->type.dtype) return false;
      const auto& os = n.outputs[0]->type.sizes;
      int64_t numel = 1;
      bool ok = !os.empty() && os.back().is_static() && bias->type.sizes.size() <= os.size();
      for (const ir::Dim& d : bias->type.sizes) {
        ok = ok && d.is_static();
        numel *= d.value;
      }
      if (!ok || bias->type.sizes.empty() || bias->type.sizes.back().value != os.back().value ||
          numel != os.back().value || !same_static_type(add->outputs[0], n.outputs[0]))
        return false;
      fold(n, "kiln_bias", bias, add);
      return true;
    }
    if (conv && !n.find("kiln_residual")) {
      if (n.op == OpKind::kConvAct) {  // the residual comes before the activation: only "none" folds
        const ir::Arg* act = n.find("activation");
        const auto* s = act ? std::get_if<std::string>(act) : nullptr;
        if (!s || *s != "none") return false;
      }
      if (const ir::Arg* tr = n.find("transposed"); tr && std::get_if<bool>(tr) && *std::get_if<bool>(tr)) return false;
      if (n.find("kiln_act")) return false;
      ir::Node* add = sole_user(u, n, {OpKind::kAddTensor});
      if (!add || !unit_alpha(*add)) return false;
      ir::Value* self = tensor_arg(*add, "self");
      ir::Value* other = tensor_arg(*add, "other");
      ir::Value* z = self == n.outputs[0] ? other : self;
      if (!z || z == n.outputs[0] || !same_static_type(z, n.outputs[0]) ||
          !same_static_type(add->outputs[0], n.outputs[0]) || !defined_before(net, z, &n))
        return false;
      fold(n, "kiln_residual", z, add);
      return true;
    }
    return false;
  };
  // Passes over the nodes until one folds nothing. After a fold the counts
  // are taken again and the pass goes on at the node that folded (it may
  // fold again: a norm that took its casts can take its residual).
  for (bool changed = true; changed;) {
    changed = false;
    auto& nodes = net.graph.nodes();
    for (size_t i = 0; i < nodes.size();) {
      ir::Node* n = nodes[i].get();
      if (!fold_at(*n)) {
        ++i;
        continue;
      }
      changed = true;
      u.recount(net);
      i = position(net, n);
    }
  }
  return net.verify();
}

const std::vector<engine::NetworkPass>& cuda_network_passes() {
  static const std::vector<engine::NetworkPass> passes = {
      {"fold-epilogues", &fold_epilogues,
       "a bias or residual add and a ReLU into the product or convolution before them; casts, the residual and "
       "rotary embeddings into norms and attention; SwiGLU into a gated MLP's gate/up product"},
      engine::fuse_elementwise_pass(),
  };
  return passes;
}

}  // namespace kiln::cuda
