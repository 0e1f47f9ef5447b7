// kiln's IR: a graph of ATen-level nodes over SSA values.
//
// A Value is produced once (by a node, or as a graph input) and referenced by
// pointer; nothing is ever wired by name. Node arguments keep their schema
// names (as torch.export writes them) so that kernels and passes read
// `self`, `dim`, `keepdim` the way the ATen schema defines them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ir/ops.h"
#include "ir/sym_expr.h"
#include "kiln/dtype.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln::ir {

// A size: a known integer, or a symbolic expression.
struct Dim {
  int64_t value = 0;   // valid when expr is null
  SymExprPtr expr;     // null for static sizes
  static Dim of(int64_t v) { return {v, nullptr}; }
  static Dim of(SymExprPtr e) {
    if (e && e->is_const()) return {e->value(), nullptr};
    return {0, std::move(e)};
  }
  bool is_static() const { return expr == nullptr; }
  std::string to_string() const { return expr ? expr->to_string() : std::to_string(value); }
};

struct TensorType {
  DType dtype = DType::Float32;
  std::vector<Dim> sizes;
  std::string to_string() const;  // "f32[s0, 3, 224, 224]"
};

enum class ValueKind { kTensor, kSymInt, kSymFloat, kSymBool };

class Node;

class Value {
 public:
  int id = 0;              // dense index inside its graph
  std::string name;        // the exporter's name; for printing and messages only
  ValueKind kind = ValueKind::kTensor;
  TensorType type;         // for tensors
  SymExprPtr sym;          // for SymInt values whose expression is known
  Node* producer = nullptr;  // null for graph inputs
  int output_index = 0;
};

struct Device {
  std::string type = "cpu";
  int64_t index = -1;  // -1: none given
  bool operator==(const Device&) const = default;
};

// An int that may be symbolic (a SymInt value computed at run time).
using SymInt = std::variant<int64_t, Value*>;

struct NoneArg {
  bool operator==(const NoneArg&) const = default;
};

// One argument of a node. Value* / lists of Value* are the SSA operands;
// everything else is a compile-time attribute.
using Arg = std::variant<NoneArg, bool, int64_t, double, std::string, DType, Device,
                         std::vector<int64_t>, std::vector<double>, std::vector<bool>,
                         Value*,                               // tensor or symbolic scalar
                         std::vector<Value*>,                  // Tensor[]
                         std::vector<std::optional<Value*>>,   // Tensor?[]
                         std::vector<SymInt>>;                 // SymInt[] with symbols

struct NamedArg {
  std::string name;
  Arg value;
};

class Node {
 public:
  OpKind op = OpKind::kUnknown;
  std::string name;  // the exporter's node name, for messages
  std::vector<NamedArg> args;
  std::vector<Value*> outputs;
  std::map<std::string, std::string> metadata;  // e.g. nn_module_stack

  const Arg* find(std::string_view arg_name) const;
  Arg* find(std::string_view arg_name);
  // Every Value this node reads, in argument order (may repeat).
  std::vector<Value*> operands() const;
  // Replaces each use of `from` by `to` in this node's arguments.
  void replace_operand(Value* from, Value* to);
  // "node 'add_3' (aten.add.Tensor)"
  std::string describe() const;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  Value* add_value(std::string name, ValueKind kind, TensorType type = {});
  Value* add_input(std::string name, ValueKind kind, TensorType type = {});
  // Appends a node; its outputs are created from `output_types`.
  Node* add_node(OpKind op, std::string name, std::vector<NamedArg> args,
                 std::vector<std::pair<std::string, TensorType>> output_types,
                 ValueKind output_kind = ValueKind::kTensor);

  std::vector<std::unique_ptr<Node>>& nodes() { return nodes_; }
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<Value*>& inputs() { return inputs_; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  std::vector<Value*>& outputs() { return outputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  size_t num_values() const { return values_.size(); }
  Value* value(size_t id) const { return values_[id].get(); }

  // Checks SSA well-formedness: every operand defined before use, outputs defined.
  Status verify() const;

  // Deep copy; `map` (if given) receives old->new value pointers.
  Graph clone(std::map<const Value*, Value*>* map = nullptr) const;

  // Renumbers in place: values nothing defines (neither an input nor a node's
  // output) are dropped, the rest are numbered densely in definition order
  // (inputs, then each node's outputs), and each takes the name print_graph
  // gives it (its own, made unique); each node is named as the parser names
  // it (its first output, or its op). What the text form does not hold is
  // cleared (a scalar's tensor type, a non-integer scalar's expression), so a
  // compacted graph and its printed text read back are alike, and a program
  // compiled now says what one loaded from a file says. Pointers to the
  // values kept stay valid.
  Status compact();

 private:
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
};

// Where a graph input comes from and where an output goes (the graph signature).
struct InputSpec {
  enum class Kind { kParameter, kBuffer, kConstant, kUserInput };
  Kind kind = Kind::kUserInput;
  std::string target;  // fqn of the parameter/buffer/constant; empty for user inputs
  bool persistent = true;
};

struct OutputSpec {
  enum class Kind { kBufferMutation, kUserOutput, kUserInputMutation };
  Kind kind = Kind::kUserOutput;
  std::string target;  // buffer fqn or user input name for mutations
};

// Substitutes `fixed` into `g`: every size whose symbols are all fixed becomes
// static, and every symbolic scalar whose expression is then known becomes a
// number where it is used (a node's argument or an element of a size list).
// The graph keeps its values and nodes; the ones that computed those sizes
// are then unused.
Status specialize(Graph& g, const SymBindings& fixed);

struct SymbolRange {
  int64_t min = 0;
  int64_t max = INT64_MAX;  // INT64_MAX: unbounded
  int64_t opt = 0;          // the size engines are tuned for (a --shape profile's OPT); 0: none given
};

// A loaded program: graph, signature (parallel to graph inputs/outputs),
// weights by fqn and symbol ranges. Produced by the frontend, rewritten by
// lowering, run by the runtime.
struct Module {
  Graph graph;
  std::vector<InputSpec> input_specs;    // one per graph input
  std::vector<OutputSpec> output_specs;  // one per graph output
  std::map<std::string, Tensor> weights;  // parameters, buffers and constants by fqn
  // Names the archive gives a tensor that is kept under another name (tensors
  // over one storage with one view, merged by lowering's
  // merge_storage_aliases): alias fqn -> the fqn the program keeps.
  std::map<std::string, std::string> aliases;
  std::map<std::string, SymbolRange> symbols;
  std::string dialect;        // "TRAINING" or "ATEN"
  std::string torch_version;  // as recorded by the exporter
  std::string source;         // file it came from, for messages
};

// A copy of `m` to rewrite on its own: the graph deep-copied, the weights'
// tensors shared (passes add and drop weights, never write one in place).
Module clone_module(const Module& m);

// Invariant 4 (one canonical output order): a program's results and each
// engine's output bindings put buffer mutations first, in the program's buffer
// order, then everything else in the order it already has. This is the one
// definition; lowering orders the program's outputs with it, the partitioner
// an engine's outputs, and the runtime refuses a program not in this order.
class OutputOrder {
 public:
  explicit OutputOrder(const Module& m);
  // Rank of value `v`: the buffer's position among the program's buffers when
  // `v` is the new value of a buffer (a buffer-mutation output), else kRest.
  int64_t rank(const Value* v) const;
  // Sorts `values` into the canonical order (stably: equal ranks keep their order).
  void sort(std::vector<const Value*>& values) const;
  // Whether `values` are in the canonical order.
  bool ordered(const std::vector<const Value*>& values) const;
  // Whether the program's outputs are in the canonical order.
  bool program_outputs_ordered() const;
  static constexpr int64_t kRest = INT64_MAX;

 private:
  const Module& m_;
  std::map<const Value*, int64_t> rank_;
};

// Reorders the program's outputs (graph outputs with their specs) into the canonical order.
void reorder_outputs(Module& m);

const char* input_kind_name(InputSpec::Kind k);
const char* output_kind_name(OutputSpec::Kind k);

}  // namespace kiln::ir
