// A lowering pass rewrites a module in place and returns a Status.
#pragma once

#include <functional>

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::lowering {

// Weights over one storage with one view (the same blob of the archive,
// dtype, sizes, strides and offset) become one graph input under the name
// users read (a buffer's, then a parameter's, then a constant's); the other
// names go into m.aliases. Runs before functionalize, so a write to any of
// them is a write to the one tensor.
Status merge_storage_aliases(ir::Module& m);

// Complex values become pairs of real tensors (real and imaginary parts),
// torch.fft's transforms and aten's _fft_r2c/_fft_c2c/_fft_c2r products with
// constant DFT matrices, and the ops that give real results of complex values
// (real, imag, abs, angle, view_as_real) their real computations. Refuses,
// naming it, a complex input or output and an op on complex values it does
// not split; afterwards no value of the graph is complex.
Status split_complex(ir::Module& m);

// Rewrites in-place ops (add_, copy_ into a view of a buffer, index_copy_, ...)
// into functional ops, and turns every write into a program buffer into an
// explicit buffer_mutation output. Afterwards the graph outputs are: buffer
// mutations in the program's buffer order, then user outputs.
Status functionalize(ir::Module& m);

// Evaluates, once, every node that depends only on parameters and tensor
// constants; results become tensor constants named "_folded.<value>".
Status fold_constants(ir::Module& m);

// Removes nodes whose results are never used (run-time checks are kept).
Status eliminate_dead_code(ir::Module& m);

// Symbols whose range (m.symbols) is a single value become constants: sizes
// that depend only on them become static, symbolic scalars that do become
// numbers where they are used, and the symbols leave m.symbols. The nodes
// that computed those scalars are left for eliminate_dead_code.
Status specialize_symbols(ir::Module& m);

// An analysis, not a pass: ok when every output row along the leading
// dimension that `symbol` sizes depends only on the same row of the inputs
// (so padding the inputs with rows leaves the first rows of every output as
// they were); kUnsupported naming the first node (or input, output, buffer
// write) that may mix rows otherwise. `output_factors` (may be null) gets,
// per graph output, c where its leading size is symbol * c, or 0 for an
// output that does not hold the rows.
Status check_batch_separable(const ir::Module& m, const std::string& symbol, std::vector<int64_t>* output_factors);

// ---- simplifications that let the pattern rewrites see whole patterns

// Drops aten._assert_tensor_metadata checks whose dtype the IR's static types
// already guarantee (the only property the check tests at run time).
Status remove_static_asserts(ir::Module& m);

// Replaces casts to the dtype a value already has (to.dtype, _to_copy with
// only a dtype, type_as) by the value itself.
Status remove_identity_casts(ir::Module& m);

// ---- decompositions and pattern rewrites (each in its own file)

// aten.linear(input, weight, bias) -> matmul(input, permute(weight, [1, 0])) + bias.
Status decompose_linear(ir::Module& m);

// Composite ops of the default dialect (square, pad, logsumexp,
// linalg_vector_norm) written in core ops; decomposed_ops() lists them.
Status decompose_composites(ir::Module& m);
const std::vector<ir::OpKind>& decomposed_ops();
// The same, leaving the ops `kept` names as they are.
Status decompose_composites_keeping(ir::Module& m, const std::function<bool(ir::OpKind)>& kept);

// Batch norm in eval mode after a convolution with constant weights becomes
// that convolution with folded weight and bias; any other eval batch norm with
// constant statistics becomes x * scale + shift with constant scale and shift.
Status fold_batch_norm(ir::Module& m);

// aten.native_layer_norm whose mean and rstd are unused -> aten.layer_norm.
Status fuse_layer_norm(ir::Module& m);

// x * rsqrt(mean(x^2, -1, keepdim) + eps) [* weight] -> aten.rms_norm.
Status fuse_rms_norm(ir::Module& m);

// The erf and tanh formulas of GELU spelled out elementwise -> aten.gelu.
Status fuse_gelu(ir::Module& m);

// clamp(x + 3, 0, 6) / 6 -> aten.hardsigmoid(x); x times that -> aten.hardswish(x).
Status fuse_hardswish(ir::Module& m);

// x * sigmoid(x) -> aten.silu(x).
Status fuse_silu(ir::Module& m);

// x @ W1 (+ b1), x @ W2 (+ b2), ... with constant 2-D weights -> one product
// x @ [W1 W2 ...] (+ [b1 b2 ...]) whose last-dimension slices replace them.
Status fuse_parallel_matmuls(ir::Module& m);

// aten.silu(a) * b -> kiln.silu_mul(a, b).
Status fuse_silu_gate(ir::Module& m);

// scaled_dot_product_attention, and softmax(q k^T * scale + mask) v spelled out
// (matmul or the ATen dialect's expand/view/bmm form) -> kiln.attention.
Status fuse_attention(ir::Module& m);

// A convolution whose only user is relu / hardtanh / silu / hardswish / gelu /
// sigmoid -> kiln.conv_act.
Status fuse_conv_activation(ir::Module& m);

// The program's outputs in the canonical order (invariant 4, ir::OutputOrder):
// buffer mutations first, in buffer order, then user outputs as exported.
Status order_outputs(ir::Module& m);

}  // namespace kiln::lowering
