// The value of a size symbol from a size it determines: for inputs whose
// dimensions are affine in one symbol (torch.export writes 32*s0 for a height
// declared as a multiple of 32).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ir/sym_expr.h"

namespace kiln::ir {

// When `e` has exactly one symbol and is affine in it with a nonzero slope
// (a*s + b, checked at three points): that symbol's name; else nullopt.
std::optional<std::string> affine_symbol(const SymExpr& e);

// The value of `e`'s one symbol that makes `e` equal `size`, when `e` is
// affine in it (affine_symbol) and such a whole value exists; else nullopt.
std::optional<int64_t> solve_affine(const SymExpr& e, int64_t size);
// The same for an `e` already known affine in `symbol` (affine_symbol gave it).
std::optional<int64_t> solve_affine(const SymExpr& e, const std::string& symbol, int64_t size);

}  // namespace kiln::ir
