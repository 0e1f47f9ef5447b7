// Composite ops the default (training) dialect of torch.export keeps, written
// in core ops the kernels and engines take: one small function per op, in a
// table. A node whose arguments a decomposition does not cover is left as it
// is (partitioning then names it).
//
//   square(x)                      -> x * x
//   pad(x, pad, "constant", v)     -> constant_pad_nd(x, pad, v)
//   logsumexp(x, dims, keepdim)    -> log(sum(exp(x - m), dims, keepdim)) + m,
//                                     m = amax(x, dims, keepdim=True), 0 where |m| is inf
//   linalg_vector_norm(x, ord, dims, keepdim)
//                                  -> sqrt(sum(x * x)) (ord 2), sum(|x|) (1),
//                                     amax(|x|) (inf), amin(|x|) (-inf),
//                                     sum(|x|^p)^(1/p) (other p != 0)
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "lowering/pass.h"
#include "lowering/rewrite.h"

namespace kiln::lowering {

namespace {

using ir::OpKind;

// The reduced dims of a rank-`rank` tensor, normalized and sorted (every dim
// when `dims` is absent or empty, as torch reduces them), or nullopt when one
// is out of range or repeated.
std::optional<std::vector<int64_t>> reduced_dims(const std::optional<std::vector<int64_t>>& dims, size_t rank) {
  std::vector<bool> seen(rank, false);
  std::vector<int64_t> out;
  if (!dims || dims->empty()) {
    for (size_t d = 0; d < rank; ++d) out.push_back(static_cast<int64_t>(d));
    return out;
  }
  for (int64_t d : *dims) {
    const int64_t r = static_cast<int64_t>(rank);
    const int64_t nd = d < 0 ? d + r : d;
    if (nd < 0 || nd >= std::max<int64_t>(r, 1) || (rank > 0 && seen[static_cast<size_t>(nd)])) return std::nullopt;
    if (rank > 0) seen[static_cast<size_t>(nd)] = true;
    out.push_back(nd);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// `t` with `dims` reduced: kept as 1, or dropped.
ir::TensorType reduced(const ir::TensorType& t, const std::vector<int64_t>& dims, bool keepdim) {
  ir::TensorType r{t.dtype, {}};
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    const bool gone = std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) != dims.end();
    if (!gone)
      r.sizes.push_back(t.sizes[d]);
    else if (keepdim)
      r.sizes.push_back(ir::Dim::of(1));
  }
  return r;
}

Expected<bool> square(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1) return false;
  ir::Node* mul = ctx.insert_before(&n, OpKind::kMulTensor, n.name, {{"self", x}, {"other", x}}, n.outputs[0]->type);
  ctx.replace_uses(n.outputs[0], mul->outputs[0]);
  return true;
}

Expected<bool> pad(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto p = int_list(n, "pad");
  if (!x || !p || n.outputs.size() != 1) return false;
  if (const ir::Arg* mode = n.find("mode")) {
    const auto* s = std::get_if<std::string>(mode);
    if (!s || *s != "constant") return false;  // reflect, replicate, circular: not decomposed here
  }
  std::vector<ir::NamedArg> args{{"self", x}, {"pad", *p}};
  if (const ir::Arg* v = n.find("value"); v && !std::holds_alternative<ir::NoneArg>(*v)) args.push_back({"value", *v});
  ir::Node* c = ctx.insert_before(&n, OpKind::kConstantPadNd, n.name, std::move(args), n.outputs[0]->type);
  ctx.replace_uses(n.outputs[0], c->outputs[0]);
  return true;
}

Expected<bool> logsumexp(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || !is_floating(x->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype)
    return false;
  const auto keepdim = bool_value(n, "keepdim", false);
  const auto dims = reduced_dims(int_list(n, "dim", std::vector<int64_t>{}), x->type.sizes.size());
  if (!keepdim || !dims) return false;
  const ir::TensorType kept = reduced(x->type, *dims, true);
  const ir::TensorType mask_type{DType::Bool, kept.sizes};
  const std::string& b = n.name;
  ir::Node* m = ctx.insert_before(&n, OpKind::kAmax, b + "_max", {{"self", x}, {"dim", *dims}, {"keepdim", true}}, kept);
  ir::Node* a = ctx.insert_before(&n, OpKind::kAbs, b + "_max_abs", {{"self", m->outputs[0]}}, kept);
  ir::Node* inf = ctx.insert_before(&n, OpKind::kEqScalar, b + "_max_inf",
                                    {{"self", a->outputs[0]}, {"other", std::numeric_limits<double>::infinity()}},
                                    mask_type);
  // An infinite maximum shifts nothing (torch's rule): inf stays inf, -inf stays -inf.
  ir::Node* shift = ctx.insert_before(
      &n, OpKind::kMaskedFillScalar, b + "_shift",
      {{"self", m->outputs[0]}, {"mask", inf->outputs[0]}, {"value", 0.0}}, kept);
  ir::Node* d = ctx.insert_before(&n, OpKind::kSubTensor, b + "_centered",
                                  {{"self", x}, {"other", shift->outputs[0]}}, x->type);
  ir::Node* e = ctx.insert_before(&n, OpKind::kExp, b + "_exp", {{"self", d->outputs[0]}}, x->type);
  const ir::TensorType out = n.outputs[0]->type;
  ir::Node* s = ctx.insert_before(&n, OpKind::kSumDimIntList, b + "_sum",
                                  {{"self", e->outputs[0]}, {"dim", *dims}, {"keepdim", *keepdim}}, out);
  ir::Node* l = ctx.insert_before(&n, OpKind::kLog, b + "_log", {{"self", s->outputs[0]}}, out);
  ir::Value* back = shift->outputs[0];
  if (!*keepdim && !dims->empty()) {
    ir::Node* sq = ctx.insert_before(&n, OpKind::kSqueezeDims, b + "_shift_squeezed",
                                     {{"self", back}, {"dim", *dims}}, out);
    back = sq->outputs[0];
  }
  ir::Node* r = ctx.insert_before(&n, OpKind::kAddTensor, b, {{"self", l->outputs[0]}, {"other", back}}, out);
  ctx.replace_uses(n.outputs[0], r->outputs[0]);
  return true;
}

Expected<bool> vector_norm(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || !is_floating(x->type.dtype) || !absent(n, "dtype") ||
      n.outputs[0]->type.dtype != x->type.dtype)
    return false;
  const std::optional<double> ord = n.find("ord") ? ctx.number(n, "ord") : std::optional<double>(2.0);
  const auto keepdim = bool_value(n, "keepdim", false);
  std::optional<std::vector<int64_t>> given;
  if (!absent(n, "dim")) {
    given = int_list(n, "dim");
    if (!given) return false;
  }
  const auto dims = reduced_dims(given, x->type.sizes.size());
  if (!ord || *ord == 0 || std::isnan(*ord) || !keepdim || !dims) return false;
  const ir::TensorType out = n.outputs[0]->type;
  const std::string& b = n.name;
  auto reduce = [&](OpKind op, ir::Value* v, const std::string& name) {
    return ctx.insert_before(&n, op, name, {{"self", v}, {"dim", *dims}, {"keepdim", *keepdim}}, out)->outputs[0];
  };
  ir::Value* result = nullptr;
  if (*ord == 2) {
    ir::Value* sq = ctx.insert_before(&n, OpKind::kMulTensor, b + "_square", {{"self", x}, {"other", x}}, x->type)
                        ->outputs[0];
    result = ctx.insert_before(&n, OpKind::kSqrt, b, {{"self", reduce(OpKind::kSumDimIntList, sq, b + "_sum")}}, out)
                 ->outputs[0];
  } else {
    ir::Value* a = ctx.insert_before(&n, OpKind::kAbs, b + "_abs", {{"self", x}}, x->type)->outputs[0];
    if (*ord == 1) {
      result = reduce(OpKind::kSumDimIntList, a, b);
    } else if (std::isinf(*ord)) {
      result = reduce(*ord > 0 ? OpKind::kAmax : OpKind::kAmin, a, b);
    } else {
      ir::Value* p = ctx.insert_before(&n, OpKind::kPowTensorScalar, b + "_pow", {{"self", a}, {"exponent", *ord}},
                                       x->type)
                         ->outputs[0];
      result = ctx.insert_before(&n, OpKind::kPowTensorScalar, b,
                                 {{"self", reduce(OpKind::kSumDimIntList, p, b + "_sum")}, {"exponent", 1.0 / *ord}},
                                 out)
                   ->outputs[0];
    }
  }
  ctx.replace_uses(n.outputs[0], result);
  return true;
}

struct Decomposition {
  OpKind op;
  Expected<bool> (*rewrite)(PatternContext&, ir::Node&);
};

constexpr Decomposition kDecompositions[] = {
    {OpKind::kSquare, &square},
    {OpKind::kPad, &pad},
    {OpKind::kLogsumexp, &logsumexp},
    {OpKind::kLinalgVectorNorm, &vector_norm},
};

Expected<bool> decompose(PatternContext& ctx, ir::Node& n) {
  for (const Decomposition& d : kDecompositions)
    if (d.op == n.op) return d.rewrite(ctx, n);
  return false;
}

}  // namespace

const std::vector<ir::OpKind>& decomposed_ops() {
  static const std::vector<ir::OpKind> ops = [] {
    std::vector<ir::OpKind> v;
    for (const Decomposition& d : kDecompositions) v.push_back(d.op);
    return v;
  }();
  return ops;
}

Status decompose_composites(ir::Module& m) { return rewrite_to_fixed_point(m, decompose); }

}  // namespace kiln::lowering
