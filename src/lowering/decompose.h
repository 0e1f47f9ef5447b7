// What the decomposition passes share (lowering/decompose.cc and one file
// per family, lowering/decompose_<family>.cc): placing the nodes of one
// decomposition, reading its operands, and the table entry each file
// contributes.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lowering/rewrite.h"

namespace kiln::lowering {

// The reduced dims of a rank-`rank` tensor, normalized and sorted (every dim
// when `dims` is absent or empty, as torch reduces them), or nullopt when one
// is out of range or repeated.
std::optional<std::vector<int64_t>> reduced_dims(const std::optional<std::vector<int64_t>>& dims, size_t rank);

// The dims reduction node `n` of a rank-`rank` operand reduces: its "dim"
// argument (absent: every dim) through reduced_dims; nullopt when "dim" is not
// a constant list or reduced_dims refuses it.
std::optional<std::vector<int64_t>> node_reduced_dims(const ir::Node& n, size_t rank);

// `t` with `dims` reduced: kept as 1, or dropped.
ir::TensorType reduced(const ir::TensorType& t, const std::vector<int64_t>& dims, bool keepdim);

// The sizes two operands broadcast to, or nullopt when they do not
// (sizes that are symbolic must be equal, or one of them static 1).
std::optional<std::vector<ir::Dim>> broadcast_sizes(const std::vector<ir::Dim>& a, const std::vector<ir::Dim>& b);

// Sizes known at compile time, or nullopt when one is symbolic.
std::optional<std::vector<int64_t>> static_sizes(const ir::TensorType& t);

// A TensorType of static `sizes`.
ir::TensorType static_type(DType dt, const std::vector<int64_t>& sizes);

// `d` (possibly negative) as an index into `rank` dims, or -1 when out of range.
int64_t norm_dim(int64_t d, size_t rank);

// An int64 tensor of `v` (an index table computed at compile time).
Tensor index_table(const std::vector<int64_t>& v);

// Two floating operands of the dtype of `n`'s one result.
bool floating_pair(const ir::Node& n, ir::Value* a, ir::Value* c);

// Inserts the nodes of one decomposition before its root `n`, named after it.
class Nodes {
 public:
  Nodes(PatternContext& ctx, ir::Node& n) : ctx_(ctx), n_(n) {}
  const ir::TensorType& out() const { return n_.outputs[0]->type; }
  // A node of `op` over `args` whose result has `type`.
  ir::Value* add(ir::OpKind op, std::vector<ir::NamedArg> args, ir::TensorType type) {
    const std::string name = n_.name + "_" + std::to_string(count_++);
    return ctx_.insert_before(&n_, op, name, std::move(args), std::move(type))->outputs[0];
  }
  // A node of `op` with one result per entry of `types`.
  std::vector<ir::Value*> add_multi(ir::OpKind op, std::vector<ir::NamedArg> args, std::vector<ir::TensorType> types) {
    const std::string name = n_.name + "_" + std::to_string(count_++);
    return ctx_.insert_before(&n_, op, name, std::move(args), std::move(types))->outputs;
  }
  // An elementwise node of `x`'s type.
  ir::Value* unary(ir::OpKind op, ir::Value* x, std::vector<ir::NamedArg> more = {}) {
    std::vector<ir::NamedArg> args{{"self", x}};
    for (ir::NamedArg& a : more) args.push_back(std::move(a));
    return add(op, std::move(args), x->type);
  }
  // x OP y (a tensor or a number) at their broadcast sizes; null when they do not broadcast.
  ir::Value* binary(ir::OpKind op, ir::Value* x, ir::Arg y, DType dtype) {
    std::vector<ir::Dim> sizes = x->type.sizes;
    if (const auto* v = std::get_if<ir::Value*>(&y)) {
      auto b = broadcast_sizes(x->type.sizes, (*v)->type.sizes);
      if (!b) return nullptr;
      sizes = *b;
    }
    return add(op, {{"self", x}, {"other", std::move(y)}}, {dtype, sizes});
  }
  // A bool mask x OP number.
  ir::Value* compare(ir::OpKind op, ir::Value* x, double number) {
    return add(op, {{"self", x}, {"other", number}}, {DType::Bool, x->type.sizes});
  }
  // `x` with `value` where `mask` holds.
  ir::Value* fill(ir::Value* x, ir::Value* mask, double value) {
    return add(ir::OpKind::kMaskedFillScalar, {{"self", x}, {"mask", mask}, {"value", value}}, x->type);
  }
  // mask ? a : b, at the root's output type.
  ir::Value* select(ir::Value* mask, ir::Value* a, ir::Value* b) {
    return add(ir::OpKind::kWhere, {{"condition", mask}, {"self", a}, {"other", b}}, out());
  }
  // `x[start:end]` along static dim `dim`.
  ir::Value* slice(ir::Value* x, int64_t dim, int64_t start, int64_t end) {
    ir::TensorType t = x->type;
    t.sizes[static_cast<size_t>(dim)] = ir::Dim::of(end - start);
    return add(ir::OpKind::kSliceTensor, {{"self", x}, {"dim", dim}, {"start", start}, {"end", end}}, t);
  }
  // `x` with static sizes `sizes` (a reshape).
  ir::Value* reshape(ir::Value* x, const std::vector<int64_t>& sizes) {
    return add(ir::OpKind::kReshape, {{"self", x}, {"shape", sizes}}, static_type(x->type.dtype, sizes));
  }
  // `x` with unit dims inserted at `dims`, one after the other.
  ir::Value* unsqueezed(ir::Value* x, const std::vector<int64_t>& dims) {
    ir::Value* y = x;
    for (int64_t d : dims) {
      ir::TensorType t = y->type;
      t.sizes.insert(t.sizes.begin() + d, ir::Dim::of(1));
      y = add(ir::OpKind::kUnsqueeze, {{"self", y}, {"dim", d}}, t);
    }
    return y;
  }
  // The p-norm of `v` over `dims` (a linalg_vector_norm node, itself
  // decomposed); for p = 0 the count of nonzero entries, in v's dtype.
  ir::Value* p_norm(ir::Value* v, double p, const std::vector<int64_t>& dims, bool keepdim) {
    const ir::TensorType out = reduced(v->type, dims, keepdim);
    if (p == 0) {
      ir::Value* ne = compare(ir::OpKind::kNeScalar, v, 0.0);
      ir::Value* f = add(ir::OpKind::kToCopy, {{"self", ne}, {"dtype", v->type.dtype}}, {v->type.dtype, ne->type.sizes});
      return add(ir::OpKind::kSumDimIntList, {{"self", f}, {"dim", dims}, {"keepdim", keepdim}}, out);
    }
    return add(ir::OpKind::kLinalgVectorNorm, {{"self", v}, {"ord", p}, {"dim", dims}, {"keepdim", keepdim}}, out);
  }
  // A tensor constant holding `t` (an index or weight table computed at compile time).
  ir::Value* constant(const Tensor& t) { return ctx_.add_constant(n_.name, t); }
  // Ends the decomposition: `result` replaces the root's output.
  bool done(ir::Value* result) {
    if (!result) return false;
    ctx_.replace_uses(n_.outputs[0], result);
    return true;
  }

 private:
  PatternContext& ctx_;
  ir::Node& n_;
  int count_ = 0;
};

// The floating tensor argument `arg` of a one-output node whose result has
// its dtype; null otherwise (the decomposition then leaves the node alone).
ir::Value* floating_operand(const ir::Node& n, std::string_view arg = "self");

// A number argument with its default.
std::optional<double> number_or(const PatternContext& ctx, const ir::Node& n, std::string_view arg, double def);
// A number argument, or the default its op's schema declares when it is left
// out (ir::argument_or_default); nullopt when neither is a number.
std::optional<double> number_arg(const PatternContext& ctx, const ir::Node& n, std::string_view arg);

// One entry of the table of decompositions: the op and the function that
// rewrites a node of it (false: left as it is).
struct Decomposition {
  ir::OpKind op;
  Expected<bool> (*rewrite)(PatternContext&, ir::Node&);
};

// The decompositions of each family of composites, a file each:
std::span<const Decomposition> loss_decompositions();        // losses and distances (decompose_losses.cc)
std::span<const Decomposition> resampling_decompositions();  // upsampling (decompose_resampling.cc)
std::span<const Decomposition> pool_norm_decompositions();   // pools and norms (decompose_pools_norms.cc)
std::span<const Decomposition> shape_decompositions();       // shape (decompose_shape.cc)
std::span<const Decomposition> indexing_decompositions();    // indexing (decompose_indexing.cc)
std::span<const Decomposition> arithmetic_decompositions();  // arithmetic (decompose_arithmetic.cc)
std::span<const Decomposition> linalg_decompositions();      // linear algebra (decompose_linalg.cc)
std::span<const Decomposition> einsum_decompositions();      // einsum (decompose_einsum.cc)

// The decompositions of tensor products, scatters into static positions and
// scalar overloads (lowering/decompose_tensor.cc).
std::span<const Decomposition> tensor_decompositions();

}  // namespace kiln::lowering
