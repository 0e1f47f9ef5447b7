// What the pattern-rewriting passes share: who uses each value, which values
// are weights, reading scalar operands, and placing new nodes and constants.
//
// A pass is a function that looks at one node (the root of a pattern, the
// node whose result the rewrite replaces) and either leaves the graph alone or
// inserts new nodes before the root and redirects the root's uses to them. The
// nodes the pattern consumed are left dead; rewrite_to_fixed_point removes
// them and repeats until nothing matches.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln::lowering {

class PatternContext {
 public:
  // Counts the uses in `m`'s graph as it is now.
  explicit PatternContext(ir::Module& m);

  ir::Module& module() { return m_; }
  ir::Graph& graph() { return m_.graph; }

  // Uses of `v` by nodes and graph outputs when the context was made. A value
  // created since then reports a large count, so no pattern consumes it in
  // this round.
  int uses(const ir::Value* v) const;
  bool single_use(const ir::Value* v) const { return uses(v) == 1; }
  // The nodes that used `v` (one entry per use; graph outputs not included).
  const std::vector<ir::Node*>& users(const ir::Value* v) const;
  // The producer of `v` when it is `op`, else null.
  ir::Node* producer_if(const ir::Value* v, ir::OpKind op) const;

  // The stored tensor of a weight: a graph input that is a parameter, a tensor
  // constant, or a buffer the program never writes (read-only state such as
  // batch-norm statistics, frozen as Torch-TensorRT freezes them). Null for
  // anything computed or given by the caller.
  const Tensor* constant(const ir::Value* v) const;

  // A number argument of `n`: a Python int or float, or a one-element tensor
  // constant. nullopt when absent or not known at compile time.
  std::optional<double> number(const ir::Node& n, std::string_view arg) const;
  // The tensor Value of argument `arg`, or null when it is absent, None or not a tensor.
  static ir::Value* tensor_arg(const ir::Node& n, std::string_view arg);

  // A new tensor constant "_folded.<base>" (made unique) holding `t`, added as a
  // graph input with a constant InputSpec, as fold-constants names its results.
  ir::Value* add_constant(const std::string& base, const Tensor& t);
  // A node inserted just before `anchor`, with one tensor output of `type`.
  ir::Node* insert_before(const ir::Node* anchor, ir::OpKind op, std::string name, std::vector<ir::NamedArg> args,
                          ir::TensorType type);
  // The same with one output per entry of `types`, named `name`, `name`_1, ...
  ir::Node* insert_before(const ir::Node* anchor, ir::OpKind op, std::string name, std::vector<ir::NamedArg> args,
                          std::vector<ir::TensorType> types);
  // Redirects every use of `from` (node operands and graph outputs) to `to`;
  // a `to` made since the context was created takes `from`'s name.
  void replace_uses(ir::Value* from, ir::Value* to);

 private:
  ir::Module& m_;
  size_t counted_values_ = 0;
  std::vector<int> uses_;
  std::vector<std::vector<ir::Node*>> users_;
  std::vector<const Tensor*> constants_;
};

// Tries one rewrite rooted at `root`; true when the graph changed.
using RewriteFn = std::function<Expected<bool>(PatternContext& ctx, ir::Node& root)>;

// Offers every node to `rewrite`, then drops dead nodes, and repeats while
// something changed. Leaves the graph untouched when nothing matches.
// `fired`, if given, receives the number of rewrites.
Status rewrite_to_fixed_point(ir::Module& m, const RewriteFn& rewrite, int* fired = nullptr);

// ---- small matching helpers

// For a binary node (self, other) where one operand is a compile-time number
// (PatternContext::number) and the other a tensor: the tensor and the number.
std::optional<std::pair<ir::Value*, double>> tensor_and_number(const PatternContext& ctx, const ir::Node& n);
// add.Tensor / add.Scalar with no alpha, or alpha 1.
bool plain_add(const PatternContext& ctx, const ir::Node& n);

// Equal sizes: the same number, or the same symbolic expression.
bool same_dim(const ir::Dim& a, const ir::Dim& b);
bool same_sizes(const std::vector<ir::Dim>& a, const std::vector<ir::Dim>& b);
// |a - b| <= rel * |b|.
bool near(double a, double b, double rel = 1e-6);
// Argument readers: the argument, else the default its op's schema declares
// (ir::argument_or_default), else `fallback` (an op of kiln's own, a None
// default); nullopt when the argument is of another kind.
// An int list argument.
std::optional<std::vector<int64_t>> int_list(const ir::Node& n, std::string_view arg,
                                             std::optional<std::vector<int64_t>> fallback = std::nullopt);
// An int argument.
std::optional<int64_t> int_value(const ir::Node& n, std::string_view arg,
                                 std::optional<int64_t> fallback = std::nullopt);
// A bool argument.
std::optional<bool> bool_value(const ir::Node& n, std::string_view arg, std::optional<bool> fallback = std::nullopt);
// True when argument `arg` is absent or None.
bool absent(const ir::Node& n, std::string_view arg);
// `dim` (possibly negative) refers to the last dim of a rank-`rank` tensor.
bool is_last_dim(int64_t dim, size_t rank);
// A static TensorType of `t`'s dtype and sizes.
ir::TensorType type_of(const Tensor& t);

}  // namespace kiln::lowering
