// ATen's advanced indexing (`x[indices]` with a Tensor?[] list), shared by
// index.Tensor (gather) and index_put (scatter).
#pragma once

#include <optional>
#include <vector>

#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln::cpu {

// Where each element of `self[indices]` comes from.
struct AdvancedIndex {
  Shape result_shape;
  // For each result element in row-major order, its element offset in `self`
  // (relative to self's first element, through self's strides).
  std::vector<int64_t> offsets;
};

// Plans `self[indices]`. Each entry indexes the next dim(s) of self: None keeps
// a dim whole, an int64/int32 tensor picks positions
// (negative ones count from the end), a bool/uint8 mask covers mask.dim()
// dims and picks the positions where it is true. Integer tensors (and the
// masks' positions) broadcast together to shape B. The result holds B where
// the indexed dims were when they are adjacent, else B first, followed by the
// dims left whole. The error message (no node prefix) names the bad index.
Expected<AdvancedIndex> plan_advanced_index(const Tensor& self, const std::vector<std::optional<Tensor>>& indices);

}  // namespace kiln::cpu
