// Matrix products of one input by several constant weights become one.
//
// Attention's q, k and v projections (and a gated MLP's gate and up) multiply
// the same activations by different weights: x @ W1 (+ b1), x @ W2 (+ b2), ...
// With every W a constant [k, n_i] (linear weights after decompose-linear and
// fold-constants) of one dtype, they become x @ [W1 W2 ...] (+ [b1 b2 ...])
// with each old result a slice of the last dimension: one wide GEMM in place
// of several narrow ones, and the slices are views.
#include <algorithm>
#include <vector>

#include "lowering/pass.h"
#include "lowering/rewrite.h"

namespace kiln::lowering {

namespace {

struct Member {
  ir::Node* mm = nullptr;
  const Tensor* weight = nullptr;
  ir::Node* add = nullptr;  // the bias add that is the product's only user, if any
  const Tensor* bias = nullptr;
  ir::Value* result = nullptr;  // what the rest of the graph reads
};

// `n` as a member of a group: a 2-D-weight matmul with a constant weight and,
// when `biased`, its sole user adding a constant bias of the product's width.
std::optional<Member> member_of(PatternContext& ctx, ir::Node& n, const ir::Value* input, bool biased) {
  if ((n.op != ir::OpKind::kMatmul && n.op != ir::OpKind::kMm) || n.outputs.size() != 1) return std::nullopt;
  const char* other = n.op == ir::OpKind::kMatmul ? "other" : "mat2";
  if (PatternContext::tensor_arg(n, "self") != input) return std::nullopt;
  ir::Value* w = PatternContext::tensor_arg(n, other);
  const Tensor* wt = w ? ctx.constant(w) : nullptr;
  if (!wt || wt->dim() != 2 || w->type.dtype != n.outputs[0]->type.dtype) return std::nullopt;
  Member m{&n, wt, nullptr, nullptr, n.outputs[0]};
  ir::Value* out = n.outputs[0];
  const std::vector<ir::Node*>& users = ctx.users(out);
  ir::Node* add = ctx.single_use(out) && users.size() == 1 && users[0]->op == ir::OpKind::kAddTensor &&
                          plain_add(ctx, *users[0])
                      ? users[0]
                      : nullptr;
  if (add) {
    ir::Value* self = PatternContext::tensor_arg(*add, "self");
    ir::Value* b = self == out ? PatternContext::tensor_arg(*add, "other") : self;
    const Tensor* bt = b && b != out ? ctx.constant(b) : nullptr;
    if (bt && bt->dim() == 1 && bt->size(0) == wt->size(1) && bt->dtype() == wt->dtype() &&
        add->outputs[0]->type.dtype == out->type.dtype && same_sizes(add->outputs[0]->type.sizes, out->type.sizes)) {
      m.add = add;
      m.bias = bt;
      m.result = add->outputs[0];
    }
  }
  if ((m.add != nullptr) != biased) return std::nullopt;
  return m;
}

// Tensors [k, n_i] (or [n_i]) side by side along their last dimension.
Tensor concat_last(const std::vector<const Tensor*>& parts) {
  int64_t total = 0;
  for (const Tensor* t : parts) total += t->sizes().back();
  Shape sizes = parts[0]->sizes();
  sizes.back() = total;
  Tensor out = Tensor::zeros(parts[0]->dtype(), sizes);
  int64_t at = 0;
  for (const Tensor* t : parts) {
    Shape strides = out.strides();
    out.as_strided(t->sizes(), strides, at).copy_from(*t);
    at += t->sizes().back();
  }
  return out;
}

Expected<bool> fuse(PatternContext& ctx, ir::Node& root) {
  if (root.op != ir::OpKind::kMatmul && root.op != ir::OpKind::kMm) return false;
  ir::Value* input = PatternContext::tensor_arg(root, "self");
  if (!input || input->type.sizes.empty()) return false;
  for (bool biased : {true, false}) {
    const std::optional<Member> first = member_of(ctx, root, input, biased);
    if (!first) continue;
    // The members in graph order (same weight rows and dtype); the first is where the fused product goes.
    const std::vector<ir::Node*>& readers = ctx.users(input);
    std::vector<Member> members;
    for (const auto& n : ctx.graph().nodes()) {
      if (std::find(readers.begin(), readers.end(), n.get()) == readers.end()) continue;
      if (auto m = member_of(ctx, *n, input, biased);
          m && m->weight->size(0) == first->weight->size(0) && m->weight->dtype() == first->weight->dtype())
        members.push_back(*m);
    }
    if (members.size() < 2 || members[0].mm != &root) return false;
    std::vector<const Tensor*> weights, biases;
    for (const Member& m : members) {
      weights.push_back(m.weight);
      if (biased) biases.push_back(m.bias);
    }
    const Tensor wcat = concat_last(weights);
    const int64_t total = wcat.size(1);
    ir::TensorType type = root.outputs[0]->type;
    type.sizes.back() = ir::Dim::of(total);
    const std::string base = root.name + "_fused";
    ir::Value* w = ctx.add_constant(base + ".weight", wcat);
    ir::Node* mm = ctx.insert_before(&root, root.op, base, {{"self", input}, {root.op == ir::OpKind::kMatmul ? "other" : "mat2", w}}, type);
    ir::Value* product = mm->outputs[0];
    if (biased) {
      ir::Value* b = ctx.add_constant(base + ".bias", concat_last(biases));
      product = ctx.insert_before(&root, ir::OpKind::kAddTensor, base + "_bias", {{"self", product}, {"other", b}}, type)
                    ->outputs[0];
    }
    const auto last = static_cast<int64_t>(type.sizes.size()) - 1;
    int64_t at = 0;
    for (const Member& m : members) {
      const int64_t width = m.weight->size(1);
      ir::Node* slice = ctx.insert_before(&root, ir::OpKind::kSliceTensor, m.result->name + "_part",
                                          {{"self", product}, {"dim", last}, {"start", at}, {"end", at + width},
                                           {"step", int64_t{1}}},
                                          m.result->type);
      ctx.replace_uses(m.result, slice->outputs[0]);
      at += width;
    }
    return true;
  }
  return false;
}

}  // namespace

Status fuse_parallel_matmuls(ir::Module& m) { return rewrite_to_fixed_point(m, fuse); }

}  // namespace kiln::lowering
