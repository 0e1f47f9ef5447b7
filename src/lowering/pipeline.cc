#include "lowering/pipeline.h"

#include <algorithm>

namespace kiln::lowering {

const std::vector<PassInfo>& default_pipeline() {
  static const std::vector<PassInfo> passes = {
      {"merge-storage-aliases",
       &merge_storage_aliases,
       "weights over one storage with one view become one input; their other names are aliases",
       {},
       nullptr,
       true},
      {"functionalize",
       &functionalize,
       "in-place ops and writes through views become functional; buffer writes become outputs",
       {},
       nullptr,
       true},
      {"split-complex",
       &split_complex,
       "complex values become real and imaginary parts; Fourier transforms become products with DFT matrices",
       {},
       nullptr,
       true},
      {"decompose", &decompose_composites, "composite ops of the default dialect become core ops", decomposed_ops(),
       &decompose_composites_keeping, true},
      {"eliminate-dead-code", &eliminate_dead_code, "drop nodes whose results are unused"},
      {"fold-constants", &fold_constants, "evaluate nodes that depend only on weights and constants, once"},
      {"remove-static-asserts", &remove_static_asserts, "drop dtype checks the IR's types already decide"},
      {"remove-identity-casts", &remove_identity_casts, "casts to a value's own dtype become the value"},
      {"decompose-linear",
       &decompose_linear,
       "linear becomes matmul with the permuted weight, plus bias",
       {ir::OpKind::kLinear}},
      {"fold-batch-norm",
       &fold_batch_norm,
       "eval batch norm folds into the convolution before it, else scale and shift",
       {ir::OpKind::kBatchNorm, ir::OpKind::kNativeBatchNormNoTraining}},
      {"fuse-layer-norm",
       &fuse_layer_norm,
       "native_layer_norm (native_group_norm) with unused statistics becomes layer_norm (group_norm)",
       {ir::OpKind::kNativeLayerNorm, ir::OpKind::kNativeGroupNorm}},
      {"fuse-rms-norm",
       &fuse_rms_norm,
       "x * rsqrt(mean(x^2) + eps) [* weight] becomes rms_norm",
       {ir::OpKind::kMeanDim, ir::OpKind::kMulTensor, ir::OpKind::kPowTensorScalar, ir::OpKind::kRsqrt}},
      {"fuse-gelu",
       &fuse_gelu,
       "the erf and tanh GELU formulas become gelu",
       {ir::OpKind::kDivScalar, ir::OpKind::kDivTensor, ir::OpKind::kErf, ir::OpKind::kMulScalar,
        ir::OpKind::kMulTensor, ir::OpKind::kPowTensorScalar, ir::OpKind::kTanh}},
      {"fuse-hardswish",
       &fuse_hardswish,
       "clamp(x + 3, 0, 6) / 6 [* x] becomes hardsigmoid [hardswish]",
       {ir::OpKind::kClamp, ir::OpKind::kClampMin, ir::OpKind::kDivScalar, ir::OpKind::kDivTensor,
        ir::OpKind::kHardsigmoid, ir::OpKind::kHardtanh, ir::OpKind::kMulScalar, ir::OpKind::kMulTensor}},
      {"fuse-silu", &fuse_silu, "x * sigmoid(x) becomes silu", {ir::OpKind::kMulTensor, ir::OpKind::kSigmoid}},
      {"fuse-silu-gate",
       &fuse_silu_gate,
       "silu(a) * b becomes kiln.silu_mul",
       {ir::OpKind::kMulTensor, ir::OpKind::kSilu}},
      {"fuse-attention",
       &fuse_attention,
       "SDPA and softmax(q k^T * scale + mask) v become kiln.attention",
       {ir::OpKind::kBmm, ir::OpKind::kDivScalar, ir::OpKind::kDivTensor, ir::OpKind::kMatmul, ir::OpKind::kMulScalar,
        ir::OpKind::kMulTensor, ir::OpKind::kScaledDotProductAttention, ir::OpKind::kSoftmax,
        ir::OpKind::kSoftmaxInternal, ir::OpKind::kWhere}},
      {"fuse-conv-activation",
       &fuse_conv_activation,
       "a convolution and its activation become kiln.conv_act",
       {ir::OpKind::kConv1d, ir::OpKind::kConv2d, ir::OpKind::kConvolution, ir::OpKind::kGelu, ir::OpKind::kHardswish,
        ir::OpKind::kHardtanh, ir::OpKind::kRelu, ir::OpKind::kSigmoid, ir::OpKind::kSilu}},
      {"fold-constants", &fold_constants, "store weight-only results of the rewrites (transposed weights) once"},
      {"fuse-parallel-matmuls",
       &fuse_parallel_matmuls,
       "products of one input by several constant weights become one product and slices",
       {ir::OpKind::kMatmul, ir::OpKind::kMm, ir::OpKind::kAddTensor}},
      {"eliminate-dead-code", &eliminate_dead_code, "drop nodes whose results are unused"},
      {"order-outputs",
       &order_outputs,
       "buffer mutations first, in buffer order, then user outputs",
       {},
       nullptr,
       true},
  };
  return passes;
}

Status run_pipeline(ir::Module& m, const std::vector<PassInfo>& passes, const PipelineOptions& options) {
  for (const PassInfo& p : passes) {
    auto forced = [&](ir::OpKind op) {
      return std::any_of(options.keep_ops.begin(), options.keep_ops.end(),
                         [&](const std::string& entry) { return ir::op_matches_entry(entry, ir::op_target(op)); });
    };
    const bool keeps = std::any_of(p.absorbs.begin(), p.absorbs.end(), forced);
    if ((keeps && !p.run_keeping) || options.disables(p.name)) continue;
    KILN_TRY(options.run_pass(
        p.name, [&] { return keeps ? p.run_keeping(m, forced) : p.run(m); }, m.graph));
  }
  return Status::ok();
}

}  // namespace kiln::lowering
