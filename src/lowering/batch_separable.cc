// Whether a program is separable along the leading dimension one symbol
// sizes: output row i (along that dimension) depends on row i of the inputs
// and on nothing else that the symbol's value changes.
//
// A separable program computes, for b rows padded to B > b with any rows,
// the same first b rows of every output as it computes for the b rows alone:
// what lets a backend that builds static shapes only serve a range of batch
// sizes from engines built for a few sizes (runtime/program.cc, padded buckets).
//
// The proof walks the lowered graph once. Every value is one of:
//   free   its shape holds no symbol, and it does not depend on the rows
//          (weights, constants, what is computed from them);
//   rows   a tensor whose leading size is symbol * c (c a constant) and no
//          other size holds the symbol; element block i of c rows belongs to
//          input row i and depends on nothing from other rows;
//   shape  a symbolic scalar computed from the symbol: it may size views and
//          factories, never be data.
// An op on rows is accepted only where the op is known to work row by row
// along dimension 0: elementwise with free operands broadcast over the rows,
// reductions, softmax, norms and views over other dimensions, products and
// convolutions with free weights, reshapes that keep the leading size a
// multiple of the symbol, attention per batch. Anything else is refused,
// naming the node.
#include <algorithm>
#include <map>
#include <set>

#include "lowering/pass.h"

namespace kiln::lowering {

namespace {

enum class Kind { kFree, kRows, kShape };

// Elementwise: every operand either carries the rows at dimension 0 or broadcasts over it.
const std::set<std::string_view> kPointwise = {
    "aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor", "aten.sub.Scalar", "aten.rsub.Scalar",
    "aten.rsub.Tensor", "aten.mul.Tensor", "aten.mul.Scalar", "aten.div.Tensor", "aten.div.Scalar",
    "aten.div.Tensor_mode", "aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.neg.default",
    "aten.abs.default", "aten.exp.default", "aten.log.default", "aten.sqrt.default", "aten.rsqrt.default",
    "aten.reciprocal.default", "aten.sin.default", "aten.cos.default", "aten.tanh.default", "aten.erf.default",
    "aten.sigmoid.default", "aten.relu.default", "aten.gelu.default", "aten.silu.default", "aten.hardtanh.default",
    "aten.hardswish.default", "aten.hardsigmoid.default", "aten.clamp.default", "aten.clamp_min.default",
    "aten.where.self", "aten.masked_fill.Scalar", "aten.masked_fill.Tensor", "aten.eq.Scalar", "aten.eq.Tensor",
    "aten.ne.Scalar", "aten.ne.Tensor", "aten.lt.Scalar", "aten.lt.Tensor", "aten.le.Scalar", "aten.le.Tensor",
    "aten.gt.Scalar", "aten.gt.Tensor", "aten.ge.Scalar", "aten.ge.Tensor", "aten.logical_not.default",
    "aten.logical_and.default", "aten.bitwise_not.default", "aten.bitwise_and.Tensor", "aten.bitwise_or.Tensor",
    "aten.__and__.Tensor", "aten.clone.default", "aten.contiguous.default", "aten.to.dtype", "aten.to.dtype_layout",
    "aten.to.device", "aten._to_copy.default", "aten.type_as.default", "aten.dropout.default",
    "aten.lift_fresh_copy.default", "aten.alias.default", "aten.detach.default", "aten.fill.Scalar",
    "aten.zero.default", "aten.full_like.default", "aten.zeros_like.default", "aten.ones_like.default",
    "kiln.fused_elementwise", "kiln.silu_mul", "kiln.rotary", "aten.scaled_dot_product_attention.default",
    "kiln.attention",
    // Over the last two dimensions; on a matrix of rows, row i's result depends on row i and on i alone.
    "aten.tril.default", "aten.triu.default"};

// Per sample: the first operand carries the rows, the others are weights (filters, biases,
// running statistics) that no row indexes.
const std::set<std::string_view> kPerSample = {
    "aten.conv2d.default", "aten.conv1d.default", "aten.convolution.default", "aten.conv1d.padding",
    "aten.conv2d.padding", "aten.conv_transpose1d.default", "aten.conv_transpose2d.input", "kiln.conv_act",
    "aten.max_pool2d.default", "aten.max_pool2d_with_indices.default", "aten.avg_pool2d.default",
    "aten.adaptive_avg_pool2d.default", "aten._adaptive_avg_pool2d.default", "aten.pixel_shuffle.default",
    "aten._native_batch_norm_legit_no_training.default", "aten.group_norm.default", "aten.native_group_norm.default"};

// Matrix products: which argument carries the rows, and which may not.
struct Product {
  const char* rows;     // the operand whose leading dimension is the output's
  const char* weight;   // an operand that must be free (or, for batched products, rows too)
  bool batched;         // both operands may carry the rows (bmm-like)
};
const std::map<std::string_view, Product> kProducts = {
    {"aten.mm.default", {"self", "mat2", false}},         {"aten.linear.default", {"input", "weight", false}},
    {"aten.addmm.default", {"mat1", "mat2", false}},      {"aten.matmul.default", {"self", "other", true}},
    {"aten.bmm.default", {"self", "mat2", true}},         {"aten.baddbmm.default", {"batch1", "batch2", true}},
    {"aten.embedding.default", {"indices", "weight", false}}};

// Ops over one or more dimensions named by their "dim"-like arguments, which must not name dimension 0.
const std::set<std::string_view> kAlongDims = {
    "aten.softmax.int", "aten._softmax.default", "aten.log_softmax.int", "aten._log_softmax.default",
    "aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten.amin.default", "aten.max.dim",
    "aten.argmax.default", "aten.var.correction", "aten.var_mean.correction", "aten.any.dim", "aten.cumsum.default",
    "aten.diff.default", "aten.transpose.int", "aten.select.int", "aten.slice.Tensor", "aten.narrow.default",
    "aten.squeeze.dim", "aten.squeeze.dims", "aten.unflatten.int", "aten.split.Tensor",
    "aten.split_with_sizes.default", "aten.chunk.default", "aten.unbind.int", "aten.cat.default",
    "aten.index_select.default", "aten.gather.default"};
// The same, whose "dim" counts the output's dimensions (one more than the input's).
const std::set<std::string_view> kAlongNewDims = {"aten.unsqueeze.default", "aten.stack.default"};

// Reshapes: the leading size stays a multiple of the symbol (row-major order keeps row blocks whole).
const std::set<std::string_view> kReshapes = {"aten.view.default", "aten._unsafe_view.default",
                                              "aten.reshape.default", "aten.flatten.using_ints"};

// Factories: their output is free, or rows when only its leading size is the symbol.
const std::set<std::string_view> kFactories = {
    "aten.arange.default", "aten.arange.start", "aten.arange.start_step", "aten.full.default", "aten.zeros.default",
    "aten.ones.default", "aten.new_ones.default", "aten.new_zeros.default", "aten.empty.memory_format"};

// symbol * c for the leading size of `v` (c >= 1), or 0 when it is not such a multiple.
int64_t leading_factor(const ir::Value& v, const std::string& symbol) {
  if (v.kind != ir::ValueKind::kTensor || v.type.sizes.empty() || v.type.sizes[0].is_static()) return 0;
  const ir::SymExpr& e = *v.type.sizes[0].expr;
  if (e.kind() == ir::SymExpr::Kind::kSymbol) return e.name() == symbol ? 1 : 0;
  if (e.kind() != ir::SymExpr::Kind::kMul) return 0;
  int64_t c = 1, symbols = 0;
  for (const ir::SymExprPtr& a : e.args()) {
    if (a->is_const()) {
      c *= a->value();
    } else if (a->kind() == ir::SymExpr::Kind::kSymbol && a->name() == symbol) {
      ++symbols;
    } else {
      return 0;
    }
  }
  return symbols == 1 && c >= 1 ? c : 0;
}

bool mentions(const ir::SymExpr& e, const std::string& symbol) {
  std::vector<std::string> names;
  e.collect_symbols(names);
  return std::find(names.begin(), names.end(), symbol) != names.end();
}

// Whether any size of `v` from `first` on holds the symbol.
bool symbol_in_sizes(const ir::Value& v, const std::string& symbol, size_t first = 0) {
  for (size_t d = first; d < v.type.sizes.size(); ++d)
    if (!v.type.sizes[d].is_static() && mentions(*v.type.sizes[d].expr, symbol)) return true;
  return false;
}

// Every int a "dim"-like argument of `n` holds (dim, dims, dim0, dim1); nullopt when one is None
// (all dimensions) or not a number.
std::optional<std::vector<int64_t>> named_dims(const ir::Node& n) {
  std::vector<int64_t> dims;
  for (const ir::NamedArg& a : n.args) {
    if (a.name != "dim" && a.name != "dims" && a.name != "dim0" && a.name != "dim1") continue;
    if (const auto* i = std::get_if<int64_t>(&a.value)) {
      dims.push_back(*i);
    } else if (const auto* l = std::get_if<std::vector<int64_t>>(&a.value)) {
      if (l->empty()) return std::nullopt;  // reductions over [] reduce everything
      dims.insert(dims.end(), l->begin(), l->end());
    } else {
      return std::nullopt;
    }
  }
  return dims;
}

}  // namespace

Status check_batch_separable(const ir::Module& m, const std::string& symbol, std::vector<int64_t>* output_factors) {
  const ir::Graph& g = m.graph;
  std::vector<Kind> kind(g.num_values(), Kind::kFree);
  auto why = [&](const ir::Node& n, const std::string& reason) {
    return unsupported(n.describe() + " " + reason + "; it is not known to work row by row along dimension 0 (" +
                       symbol + ")");
  };
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const ir::Value& v = *g.inputs()[i];
    if (v.kind != ir::ValueKind::kTensor) {
      if (v.sym && mentions(*v.sym, symbol)) kind[static_cast<size_t>(v.id)] = Kind::kShape;
      continue;
    }
    if (!symbol_in_sizes(v, symbol)) continue;
    if (m.input_specs[i].kind != ir::InputSpec::Kind::kUserInput || leading_factor(v, symbol) != 1 ||
        symbol_in_sizes(v, symbol, 1))
      return unsupported("input '" + v.name + "' " + v.type.to_string() + " holds " + symbol +
                         " other than as its leading size");
    kind[static_cast<size_t>(v.id)] = Kind::kRows;
  }
  for (const ir::OutputSpec& s : m.output_specs) {
    if (s.kind == ir::OutputSpec::Kind::kBufferMutation)
      return unsupported("the program writes buffer '" + s.target + "' (state does not split into rows)");
    if (s.kind == ir::OutputSpec::Kind::kUserInputMutation)
      return unsupported("the program writes input '" + s.target + "' (padded rows would be written back)");
  }

  for (const auto& node : g.nodes()) {
    const ir::Node& n = *node;
    const std::string_view op = ir::op_target(n.op);
    const ir::OpCategory category = ir::op_category(n.op);
    bool rows = false, shape = false;
    for (const ir::Value* v : n.operands()) {
      rows = rows || kind[static_cast<size_t>(v->id)] == Kind::kRows;
      shape = shape || kind[static_cast<size_t>(v->id)] == Kind::kShape;
    }
    if (category == ir::OpCategory::kCheck) continue;
    if (category == ir::OpCategory::kSym) {
      for (const ir::Value* o : n.outputs)
        if (rows || shape || (o->sym && mentions(*o->sym, symbol))) kind[static_cast<size_t>(o->id)] = Kind::kShape;
      continue;
    }
    const bool factory = kFactories.count(op) > 0;
    const bool reshape = kReshapes.count(op) > 0;
    const bool expand = op == "aten.expand.default" || op == "aten.expand_as.default";
    // A size computed from the symbol may size a result (a SymInt[] argument of a
    // factory, reshape or expand), never be a value (a fill value, an arange end).
    for (const ir::NamedArg& a : n.args) {
      auto is_shape = [&](const ir::Value* v) { return v && kind[static_cast<size_t>(v->id)] == Kind::kShape; };
      bool as_value = false, as_size = false;
      if (const auto* v = std::get_if<ir::Value*>(&a.value)) as_value = is_shape(*v);
      if (const auto* l = std::get_if<std::vector<ir::Value*>>(&a.value))
        for (const ir::Value* v : *l) as_value = as_value || is_shape(v);
      if (const auto* l = std::get_if<std::vector<std::optional<ir::Value*>>>(&a.value))
        for (const auto& v : *l) as_value = as_value || (v && is_shape(*v));
      if (const auto* l = std::get_if<std::vector<ir::SymInt>>(&a.value))
        for (const ir::SymInt& v : *l)
          if (const auto* pv = std::get_if<ir::Value*>(&v)) as_size = as_size || is_shape(*pv);
      if (as_value || (as_size && !factory && !reshape && !expand))
        return why(n, "reads a size computed from " + symbol + " as data (argument '" + a.name + "')");
    }
    bool out_has_symbol = false;
    for (const ir::Value* o : n.outputs)
      out_has_symbol = out_has_symbol || (o->kind == ir::ValueKind::kTensor && symbol_in_sizes(*o, symbol));
    if (!rows && !out_has_symbol) continue;  // free in, free out (shape only sizes the result)

    // The rows operands' leading sizes; the outputs' must be symbol multiples too.
    int64_t rows_rank = -1;
    for (const ir::Value* v : n.operands())
      if (kind[static_cast<size_t>(v->id)] == Kind::kRows) rows_rank = std::max<int64_t>(rows_rank, static_cast<int64_t>(v->type.sizes.size()));
    for (const ir::Value* o : n.outputs) {
      if (o->kind != ir::ValueKind::kTensor) return why(n, "computes a scalar from the rows");
      if (!symbol_in_sizes(*o, symbol))
        return why(n, "computes '" + o->name + "' " + o->type.to_string() + " from the rows without their dimension");
      if (leading_factor(*o, symbol) == 0 || symbol_in_sizes(*o, symbol, 1))
        return why(n, "gives '" + o->name + "' " + o->type.to_string() + ", whose leading size is not a multiple of " +
                          symbol);
    }
    const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
    const int64_t out_rank = out ? static_cast<int64_t>(out->type.sizes.size()) : 0;

    if (!rows) {
      // A factory or expand sized by the symbol at dimension 0 only: every row alike.
      if (!factory && !expand) return why(n, "gives rows without reading any");
    } else if (kPointwise.count(op)) {
      // Attention mixes positions along its sequence dimension and rotary
      // embeddings read positions along theirs: dimension 0 must be a batch
      // dimension in front of those (rank 3 and up), never the sequence itself.
      if (op == "aten.scaled_dot_product_attention.default" || op == "kiln.attention" || op == "kiln.rotary")
        for (const ir::Value* v : n.operands())
          if (kind[static_cast<size_t>(v->id)] == Kind::kRows && v->type.sizes.size() < 3)
            return why(n, "attends over rows '" + v->name + "' " + v->type.to_string() +
                              ", whose dimension 0 is the sequence, not a batch");
      for (const ir::Value* v : n.operands()) {
        if (v->kind != ir::ValueKind::kTensor) continue;
        const int64_t r = static_cast<int64_t>(v->type.sizes.size());
        if (kind[static_cast<size_t>(v->id)] == Kind::kRows) {
          if (r != out_rank || leading_factor(*v, symbol) != leading_factor(*out, symbol))
            return why(n, "combines rows '" + v->name + "' " + v->type.to_string() + " into " + out->type.to_string());
        } else if (r == out_rank && r > 0 && !(v->type.sizes[0].is_static() && v->type.sizes[0].value == 1)) {
          return why(n, "combines the rows with '" + v->name + "' " + v->type.to_string() +
                            ", which does not broadcast along dimension 0");
        }
      }
    } else if (kPerSample.count(op)) {
      const std::vector<ir::Value*> operands = n.operands();
      if (operands.empty() || kind[static_cast<size_t>(operands[0]->id)] != Kind::kRows ||
          leading_factor(*operands[0], symbol) != leading_factor(*out, symbol))
        return why(n, "takes the rows other than as its input");
      for (size_t k = 1; k < operands.size(); ++k)
        if (kind[static_cast<size_t>(operands[k]->id)] == Kind::kRows)
          return why(n, "takes rows '" + operands[k]->name + "' as a weight");
    } else if (auto product = kProducts.find(op); product != kProducts.end()) {
      auto operand = [&](const char* name) -> const ir::Value* {
        const ir::Arg* a = n.find(name);
        const auto* v = a ? std::get_if<ir::Value*>(a) : nullptr;
        return v ? *v : nullptr;
      };
      const ir::Value* r = operand(product->second.rows);
      const ir::Value* w = operand(product->second.weight);
      if (!r || !w || kind[static_cast<size_t>(r->id)] != Kind::kRows ||
          leading_factor(*r, symbol) != leading_factor(*out, symbol) || (op != "aten.embedding.default" && r->type.sizes.size() < 2))
        return why(n, "does not take the rows as '" + std::string(product->second.rows) + "'");
      if (kind[static_cast<size_t>(w->id)] == Kind::kRows) {
        if (!product->second.batched || w->type.sizes.size() < 3 ||
            leading_factor(*w, symbol) != leading_factor(*r, symbol))
          return why(n, "multiplies rows by rows '" + w->name + "'");
      } else if (product->second.batched && w->type.sizes.size() >= 3 &&
                 !(w->type.sizes[0].is_static() && w->type.sizes[0].value == 1)) {
        return why(n, "multiplies the rows by '" + w->name + "' " + w->type.to_string() +
                          ", which does not broadcast along dimension 0");
      }
      // Any other operand (a bias) is free or broadcasts; one carrying rows must match them.
      for (const ir::Value* v : n.operands()) {
        if (v == r || v == w || v->kind != ir::ValueKind::kTensor) continue;
        const bool v_rows = kind[static_cast<size_t>(v->id)] == Kind::kRows;
        if (v_rows ? (v->type.sizes.size() != static_cast<size_t>(out_rank) ||
                      leading_factor(*v, symbol) != leading_factor(*out, symbol))
                   : (static_cast<int64_t>(v->type.sizes.size()) == out_rank &&
                      !(v->type.sizes[0].is_static() && v->type.sizes[0].value == 1)))
          return why(n, "adds '" + v->name + "' " + v->type.to_string() + ", which does not follow the rows");
      }
    } else if (kAlongDims.count(op) || kAlongNewDims.count(op)) {
      auto dims = named_dims(n);
      if (!dims) return why(n, "works over every dimension");
      int64_t rank = rows_rank + (kAlongNewDims.count(op) ? 1 : 0);
      for (int64_t d : *dims) {
        const int64_t nd = d < 0 ? d + rank : d;
        if (nd == 0) return why(n, "works along dimension 0");
      }
      if (dims->empty() && op != "aten.squeeze.dims") return why(n, "works over every dimension");
    } else if (op == "aten.permute.default") {
      auto dims = named_dims(n);
      if (!dims || dims->empty() || ((*dims)[0] != 0 && (*dims)[0] != -rows_rank))
        return why(n, "moves dimension 0");
    } else if (op == "aten.layer_norm.default" || op == "aten.native_layer_norm.default" ||
               op == "aten.rms_norm.default") {
      const ir::Arg* a = n.find("normalized_shape");
      const auto* shape_arg = a ? std::get_if<std::vector<int64_t>>(a) : nullptr;
      if (!shape_arg || static_cast<int64_t>(shape_arg->size()) >= rows_rank)
        return why(n, "normalizes over dimension 0");
    } else if (op == "aten.batch_norm.default") {
      const ir::Arg* a = n.find("training");
      const auto* training = a ? std::get_if<bool>(a) : nullptr;
      if (!training || *training) return why(n, "takes statistics over the batch (training)");
    } else if (op == "aten.repeat.default") {
      const ir::Arg* a = n.find("repeats");
      const auto* r = a ? std::get_if<std::vector<int64_t>>(a) : nullptr;
      if (!r || static_cast<int64_t>(r->size()) != rows_rank || (*r)[0] != 1) return why(n, "repeats dimension 0");
    } else if (op == "aten.constant_pad_nd.default") {
      const ir::Arg* a = n.find("pad");
      const auto* p = a ? std::get_if<std::vector<int64_t>>(a) : nullptr;
      if (!p || static_cast<int64_t>(p->size() / 2) >= rows_rank) return why(n, "pads dimension 0");
    } else if (reshape || expand) {
      // Checked above: the result's leading size is a multiple of the symbol.
      for (const ir::Value* v : n.operands())
        if (kind[static_cast<size_t>(v->id)] == Kind::kRows && leading_factor(*v, symbol) == 0)
          return why(n, "reshapes rows whose leading size is not a multiple of " + symbol);
      if (expand && out && out->type.sizes.size() != static_cast<size_t>(rows_rank))
        return why(n, "expands the rows to another rank");
    } else {
      return why(n, "reads the rows");
    }
    for (const ir::Value* o : n.outputs) kind[static_cast<size_t>(o->id)] = Kind::kRows;
  }

  std::vector<int64_t> factors;
  for (const ir::Value* v : g.outputs()) {
    const Kind k = kind[static_cast<size_t>(v->id)];
    if (k == Kind::kShape) return unsupported("output '" + v->name + "' is a size computed from " + symbol);
    if (k == Kind::kFree && v->kind == ir::ValueKind::kTensor && symbol_in_sizes(*v, symbol))
      return unsupported("output '" + v->name + "' holds " + symbol + " but was not followed row by row");
    factors.push_back(k == Kind::kRows ? leading_factor(*v, symbol) : 0);
  }
  if (output_factors) *output_factors = std::move(factors);
  return Status::ok();
}

}  // namespace kiln::lowering
