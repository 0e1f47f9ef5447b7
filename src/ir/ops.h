// Op kinds, generated from ops.def (the one list of ops).
#pragma once

#include <optional>
#include <string_view>

namespace kiln::ir {

enum class OpKind : uint16_t {
  kUnknown = 0,
#define KILN_OP(e, target, kind) k##e,
#define KILN_INPLACE_OP(e, target, functional, first) k##e,
#include "ir/ops.def"
#undef KILN_OP
#undef KILN_INPLACE_OP
};

enum class OpCategory { kCompute, kView, kCheck, kSym, kInplace, kUnknown };

// "aten.add.Tensor"; also accepts the "torch.ops." prefix.
std::optional<OpKind> op_from_target(std::string_view target);
std::string_view op_target(OpKind op);
// Whether a user's op entry (fallback_ops) names `target`: "aten.relu.default"
// matches "aten.relu.default", "aten.relu" and "relu" (each also with
// "torch.ops."); "_operator.getitem" matches "_operator.getitem" and "getitem".
bool op_matches_entry(std::string_view entry, std::string_view target);
OpCategory op_category(OpKind op);
// For in-place ops, the functional op they become; otherwise nullopt.
std::optional<OpKind> functional_form(OpKind op);
// For in-place ops, the schema name of the functional form's first argument.
std::string_view functional_first_arg(OpKind op);
// Number of ops in the list (for tables and tests).
size_t op_count();
OpKind op_at(size_t index);

}  // namespace kiln::ir
