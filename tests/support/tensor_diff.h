// Comparing tensors in tests.
#pragma once

#include <algorithm>
#include <cmath>

#include "kiln/tensor.h"

namespace kiln::testing {

// The largest |a - b| over the elements (logical order); infinity when the
// element counts differ.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return INFINITY;
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(a.value_at(i) - b.value_at(i)));
  return m;
}

}  // namespace kiln::testing
