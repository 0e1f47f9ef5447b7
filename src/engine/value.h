// A value at run time, as the runtime passes it between engines, fallback
// nodes and the caller: a tensor, a symbolic int / float / bool, or nothing.
#pragma once

#include <cstdint>
#include <variant>

#include "ir/graph.h"
#include "kiln/tensor.h"

namespace kiln::engine {

using RtValue = std::variant<std::monostate, Tensor, int64_t, double, bool>;

// Symbolic scalars cross engine boundaries and the public API as 0-d tensors
// (int64, float64, bool; int64 exactly). A tensor passes through unchanged;
// an empty value gives an undefined tensor.
Tensor rt_value_to_tensor(const RtValue& v);
// Back again, for a value of `kind` (a tensor stays a tensor).
RtValue tensor_to_rt_value(ir::ValueKind kind, const Tensor& t);

}  // namespace kiln::engine
