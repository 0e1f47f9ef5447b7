// PyTorch's type promotion over an op's operands (c10's result_type), which
// both backends follow: the CPU kernels to pick the dtype they compute in,
// the CUDA builder to pick the type a generated kernel computes in.
#pragma once

#include <span>

#include "kiln/dtype.h"

namespace kiln {

// One operand of an op, as PyTorch's result_type sees it: a tensor with
// dimensions, a 0-d tensor, or a Python number ("wrapped number": int ->
// int64, float -> float64, bool -> bool).
struct PromotionOperand {
  DType dtype = DType::Float32;
  bool zero_dim = false;
  bool wrapped_number = false;
};

// PyTorch's result_type over operands: dimensioned tensors win over 0-d
// tensors, which win over Python numbers, unless a lower group holds a higher
// category (bool < integer < floating). A Python float becomes float32 (the
// default dtype). An empty list gives float32.
DType result_type(std::span<const PromotionOperand> operands);

}  // namespace kiln
