// The CPU kernel of fused elementwise layers (kiln.fused_elementwise).
#pragma once

#include <span>

#include "engine/elementwise_program.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln::cpu {

// Runs `program` over `inputs` in one pass over `out`'s elements, with no
// intermediate tensors. The results are bit-identical to running the
// program's ops one by one on the reference kernels: every instruction
// computes in the op's precision (float for 16-bit types) and rounds to the
// dtype, as the reference kernel does.
//   program: validated again here; program.num_inputs must equal inputs.size()
//   inputs:  tensors of out's dtype (f32, f64, f16 or bf16), any strides (views,
//            transposes, broadcast expansions), each broadcastable to out's shape
//   out:     preallocated and contiguous, with the broadcast shape of the inputs
//            (e.g. a slice of an engine's memory arena). It may be one of the
//            inputs (the very same elements) but must not overlap them otherwise.
// Errors: kFormat for an invalid program, kInvalidArgument for inputs or an
// output that do not fit it, and the reference kernels' errors for constants
// they refuse (a clamp bound or alpha out of the dtype's range).
Status run_fused_elementwise(const engine::ElementwiseProgram& program, std::span<const Tensor> inputs, Tensor& out);

}  // namespace kiln::cpu
