// The arguments each op takes, as PyTorch declares them: names, types and
// defaults, read from the schemas tools/op_schemas.py records from PyTorch's
// operator registry (op_schemas.inc, one per ATen op of ops.def). Loading
// checks every node's arguments against its op's schema (check_arguments),
// and readers take a default from here (argument_or_default) instead of
// writing it again.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/ops.h"
#include "kiln/status.h"

namespace kiln::ir {

// One declared argument: "int[1] dim=None" is {name "dim", type "int[1]?"...}.
struct ArgumentSchema {
  std::string name;
  // As declared, without alias annotations: "Tensor", "Tensor?", "int[]",
  // "SymInt[2]", "Scalar", "ScalarType?", ...
  std::string type;
  bool keyword_only = false;  // after the "*"
  // The declared default (NoneArg for "=None"); nullopt for a required
  // argument. A default kiln cannot represent (none today) reads as nullopt
  // with has_default set.
  std::optional<Arg> default_value;
  bool has_default = false;

  bool optional() const { return !type.empty() && type.back() == '?'; }
  // The type without "?" and without a list's length: "int[]" for "int[2]?".
  std::string base_type() const;
  int64_t list_length() const;  // N of a list of N ("int[2]"), else 0
  bool is_tensor() const;       // Tensor or Tensor?
  bool is_tensor_list() const;  // Tensor[] or Tensor?[]
};

struct OpSchema {
  std::string text;  // as PyTorch prints it
  std::vector<ArgumentSchema> arguments;

  const ArgumentSchema* find(std::string_view name) const;
};

// The schema of `op`; null for an op PyTorch declares none for (kiln's own
// ops, Python's operators, torch.sym_*).
const OpSchema* op_schema(OpKind op);

// Parses one schema as PyTorch prints it ("aten::add.Tensor(Tensor self, ...)
// -> Tensor"): kFormat naming what it could not read.
Expected<OpSchema> parse_op_schema(std::string_view text);

// A node's arguments against its op's schema: every name is declared, every
// argument without a default is given, tensors are given for tensor
// arguments and no tensor for others. kInvalidArgument naming the node, the
// argument and the schema. Nodes of ops without a schema pass.
Status check_arguments(const Node& n);

// The argument `name` of `n`, or the default its op's schema declares when
// it is not given; null when neither (or the name is not declared).
const Arg* argument_or_default(const Node& n, std::string_view name);

}  // namespace kiln::ir
