// The CUDA builder's layer emitters, dispatched by op family (one file per
// family: cuda_layers_<family>.cc, each holding what its family cannot take
// beside its emitter). Views are strides over the same bytes (no step);
// everything else is a generated kernel, a cuBLASLt GEMM or a cuDNN
// convolution. cuda_refusal() answers, per node, what the emitters cannot
// take, so that such nodes fall back instead of failing the build.
#include "backends/cuda/cuda_layers.h"

namespace kiln::cuda {

using namespace layers;

namespace {

enum class Family {
  kNone,
  kSize,  // sizes and arithmetic on them: numbers once the network is specialized to a shape; no step
  kArange,
  kView,
  kIdentity,
  kElementwise,
  kGemm,
  kConv,
  kRow,
  kReduce,
  kPool,
  kPool3d,   // max pools with indices, adaptive max pools, 3-D pools
  kSearch,   // searchsorted, bucketize, histc
  kSample,   // grid_sampler
  kSegment,  // segment_reduce
  kOrder,    // sort, argsort, topk, kthvalue, median
  kAttention,
  kGather,
  kGatherDim,
  kCat,
  kPad,
  kCast,
  kIndexCopy,
  kScatter,
  kCopyInto,
  kRotary
};

Family family(OpKind op) {
  switch (op) {
    case OpKind::kSymSize: return Family::kSize;
    case OpKind::kArange:
    case OpKind::kArangeStart:
    case OpKind::kArangeStartStep: return Family::kArange;
    case OpKind::kView:
    case OpKind::kUnsafeView:
    case OpKind::kReshape:
    case OpKind::kFlatten:
    case OpKind::kUnflatten:
    case OpKind::kPermute:
    case OpKind::kTranspose:
    case OpKind::kT:
    case OpKind::kSelectInt:
    case OpKind::kSliceTensor:
    case OpKind::kNarrow:
    case OpKind::kUnsqueeze:
    case OpKind::kSqueeze:
    case OpKind::kSqueezeDim:
    case OpKind::kSqueezeDims:
    case OpKind::kExpand:
    case OpKind::kExpandAs:
    case OpKind::kSplitTensor:
    case OpKind::kSplitWithSizes:
    case OpKind::kChunk:
    case OpKind::kUnbind:
    case OpKind::kDiagonal:
    case OpKind::kAsStrided: return Family::kView;
    case OpKind::kAlias:
    case OpKind::kDetach:
    case OpKind::kLiftFreshCopy:
    case OpKind::kClone:
    case OpKind::kContiguous:
    case OpKind::kDropout: return Family::kIdentity;
    case OpKind::kTo:
    case OpKind::kToCopy:
    case OpKind::kTypeAs:
    case OpKind::kToDtypeLayout:
    case OpKind::kToDevice: return Family::kCast;
    case OpKind::kCopy: return Family::kCopyInto;
    case OpKind::kMm:
    case OpKind::kBmm:
    case OpKind::kMatmul:
    case OpKind::kLinear:
    case OpKind::kAddmm: return Family::kGemm;
    case OpKind::kConv1d:
    case OpKind::kConv2d:
    case OpKind::kConvTranspose1d:
    case OpKind::kConvTranspose2d:
    case OpKind::kConvolution:
    case OpKind::kConvAct: return Family::kConv;
    case OpKind::kLayerNorm:
    case OpKind::kGroupNorm:
    case OpKind::kRmsNorm:
    case OpKind::kSoftmax:
    case OpKind::kSoftmaxInternal:
    case OpKind::kLogSoftmax:
    case OpKind::kLogSoftmaxInternal: return Family::kRow;
    case OpKind::kMeanDim:
    case OpKind::kMean:
    case OpKind::kSumDimIntList:
    case OpKind::kSum:
    case OpKind::kAmax:
    case OpKind::kAmin:
    case OpKind::kArgmax:
    case OpKind::kArgmin:
    case OpKind::kCumsum:
    case OpKind::kCumprod:
    case OpKind::kLogcumsumexp:
    case OpKind::kAny:
    case OpKind::kAnyDim:
    case OpKind::kAnyDims:
    case OpKind::kAll:
    case OpKind::kAllDim:
    case OpKind::kAllDims:
    case OpKind::kVarCorrection:
    case OpKind::kVarMeanCorrection:
    case OpKind::kProd:
    case OpKind::kProdDimInt: return Family::kReduce;
    case OpKind::kMaxPool2d:
    case OpKind::kAvgPool2d:
    case OpKind::kAdaptiveAvgPool2d:
    case OpKind::kAdaptiveAvgPool2dInternal: return Family::kPool;
    case OpKind::kMaxPool2dWithIndices:
    case OpKind::kAdaptiveMaxPool2d:
    case OpKind::kMaxPool3d:
    case OpKind::kMaxPool3dWithIndices:
    case OpKind::kAvgPool3d:
    case OpKind::kAdaptiveAvgPool3d:
    case OpKind::kAdaptiveAvgPool3dInternal:
    case OpKind::kAdaptiveMaxPool3d: return Family::kPool3d;
    case OpKind::kSearchsortedTensor:
    case OpKind::kBucketizeTensor:
    case OpKind::kHistc:
    case OpKind::kIsinTensorTensor: return Family::kSearch;
    case OpKind::kGridSampler:
    case OpKind::kGridSampler2d:
    case OpKind::kGridSampler3d: return Family::kSample;
    case OpKind::kSegmentReduce: return Family::kSegment;
    case OpKind::kSort:
    case OpKind::kSortStable:
    case OpKind::kArgsort:
    case OpKind::kArgsortStable:
    case OpKind::kMsort:
    case OpKind::kTopk:
    case OpKind::kKthvalue:
    case OpKind::kMedian:
    case OpKind::kMedianDim:
    case OpKind::kNanmedian:
    case OpKind::kNanmedianDim: return Family::kOrder;
    case OpKind::kAttention:
    case OpKind::kScaledDotProductAttention: return Family::kAttention;
    case OpKind::kEmbedding:
    case OpKind::kIndexSelect: return Family::kGather;
    case OpKind::kGather:
    case OpKind::kIndexTensor: return Family::kGatherDim;
    case OpKind::kCat: return Family::kCat;
    case OpKind::kConstantPadNd:
    case OpKind::kPad:
    case OpKind::kReflectionPad1d:
    case OpKind::kReflectionPad2d:
    case OpKind::kReflectionPad3d:
    case OpKind::kReplicationPad1d:
    case OpKind::kReplicationPad2d:
    case OpKind::kReplicationPad3d: return Family::kPad;
    case OpKind::kRotary: return Family::kRotary;
    case OpKind::kIndexCopy:
    case OpKind::kIndexPut:
    case OpKind::kCacheWrite: return Family::kIndexCopy;
    case OpKind::kScatterSrc:
    case OpKind::kScatterValue:
    case OpKind::kScatterReduce:
    case OpKind::kScatterValueReduce:
    case OpKind::kScatterAdd:
    case OpKind::kScatterReduceTwo:
    case OpKind::kIndexAdd:
    case OpKind::kIndexReduce: return Family::kScatter;
    case OpKind::kFusedElementwise:
    case OpKind::kSiluMul: return Family::kElementwise;
    default: break;
  }
  if (ir::op_category(op) == ir::OpCategory::kSym && op != OpKind::kLocalScalarDense) return Family::kSize;
  // Comparisons, where, bitwise and logical ops among them (pointwise_implements).
  return engine::is_elementwise_program_op(op) || pointwise_implements(op) ? Family::kElementwise : Family::kNone;
}

// A number in the network specialized to a shape: the size of a tensor's dimension, or a scalar whose expression in the
// sizes is known.
std::string size_refusal(const ir::Node& n) {
  if (n.outputs.empty()) return "a size computation without a result";
  for (const ir::Value* v : n.outputs)
    if (v->kind != ir::ValueKind::kSymInt || (!v->sym && n.op != OpKind::kSymSize))
      return "a scalar computed at run time whose value is not an expression of the sizes";
  if (n.op == OpKind::kSymSize &&
      (n.operands().empty() || n.operands()[0]->kind != ir::ValueKind::kTensor || !int_arg(n, "dim")))
    return "the size of something that is not a tensor";
  return "";
}

bool is_softmax(OpKind op) {
  return op == OpKind::kSoftmax || op == OpKind::kSoftmaxInternal || op == OpKind::kLogSoftmax ||
         op == OpKind::kLogSoftmaxInternal;
}

// Layers other than elementwise ones, casts and views take float32, the
// 16-bit floats, int64, int32 and bool tensors; softmax and reductions
// float64 too (their kernels compute in double for it).
std::string wide_dtype_refusal(const ir::Node& n, bool float64) {
  auto check = [&](const ir::Value* v) -> std::string {
    if (v->kind != ir::ValueKind::kTensor) return "";
    if (float64 && v->type.dtype == DType::Float64) return "";
    switch (v->type.dtype) {
      case DType::Float32:
      case DType::Float16:
      case DType::BFloat16:
      case DType::Int64:
      case DType::Int32:
      case DType::Bool: return "";
      default:
        return "dtype " + std::string(dtype_name(v->type.dtype)) + " of '" + v->name + "': the CUDA layer for " +
               std::string(ir::op_target(n.op)) + " takes float32, float16, bfloat16, int64, int32 and bool";
    }
  };
  for (const ir::Value* v : n.operands())
    if (std::string why = check(v); !why.empty()) return why;
  for (const ir::Value* v : n.outputs)
    if (std::string why = check(v); !why.empty()) return why;
  return "";
}

}  // namespace

bool cuda_implements(ir::OpKind op) { return family(op) != Family::kNone; }

std::string cuda_refusal(const ir::Node& n) {
  const Family f = family(n.op);
  if (f != Family::kElementwise && f != Family::kCast && f != Family::kView && f != Family::kIdentity &&
      f != Family::kCopyInto && f != Family::kSize)
    if (std::string why = wide_dtype_refusal(n, f == Family::kReduce || is_softmax(n.op)); !why.empty()) return why;
  switch (f) {
    case Family::kElementwise: return elementwise_refusal(n);
    case Family::kIdentity: return identity_refusal(n);
    case Family::kCast: return cast_refusal(n);
    case Family::kGemm: return gemm_refusal(n);
    case Family::kConv: return conv_refusal(n);
    case Family::kRow: return row_refusal(n);
    case Family::kReduce: return reduce_refusal(n);
    case Family::kPool:
    case Family::kPool3d: return pool_refusal(n);
    case Family::kSearch: return search_refusal(n);
    case Family::kSample: return grid_sampler_refusal(n);
    case Family::kSegment: return segment_reduce_refusal(n);
    case Family::kOrder: return order_refusal(n);
    case Family::kAttention: return attention_refusal(n);
    case Family::kGather: return gather_rows_refusal(n);
    case Family::kGatherDim: return gather_refusal(n);
    case Family::kCat: return cat_refusal(n);
    case Family::kPad: return pad_refusal(n);
    case Family::kIndexCopy: return index_copy_refusal(n);
    case Family::kScatter: return scatter_refusal(n);
    case Family::kCopyInto: return copy_into_refusal(n);
    case Family::kView: return n.op == OpKind::kAsStrided ? as_strided_refusal(n) : "";
    case Family::kArange: return arange_refusal(n);
    case Family::kSize: return size_refusal(n);
    case Family::kRotary: return "";  // made by the builder itself (fold_rotary)
    case Family::kNone: break;
  }
  return "no CUDA layer";
}

Status emit_layer(Builder& b, const ir::Node& n) {
  switch (family(n.op)) {
    case Family::kSize: return Status::ok();
    case Family::kArange: return emit_arange(b, n);
    case Family::kView: return emit_view(b, n);
    case Family::kIdentity: {
      KILN_ASSIGN_OR_RETURN(TRef r, b.ref(n.operands()[0]));
      b.bind(n.outputs[0], r);
      return Status::ok();
    }
    case Family::kCast: return emit_cast(b, n);
    case Family::kElementwise: return emit_elementwise(b, n);
    case Family::kGemm: return emit_matmul(b, n);
    case Family::kConv: return emit_conv(b, n);
    case Family::kRow: return n.op == OpKind::kGroupNorm ? emit_group_norm(b, n) : emit_row(b, n);
    case Family::kReduce: return emit_reduce(b, n);
    case Family::kPool: return emit_pool(b, n);
    case Family::kPool3d: return emit_pool3d(b, n);
    case Family::kSearch: return emit_search(b, n);
    case Family::kSample: return emit_grid_sampler(b, n);
    case Family::kSegment: return emit_segment_reduce(b, n);
    case Family::kOrder: return emit_order(b, n);
    case Family::kAttention: return emit_attention(b, n);
    case Family::kGather: return emit_gather_rows(b, n);
    case Family::kGatherDim: return emit_gather(b, n);
    case Family::kCat: return emit_cat(b, n);
    case Family::kPad: return emit_pad(b, n);
    case Family::kIndexCopy: return emit_index_copy(b, n);
    case Family::kScatter: return emit_scatter(b, n);
    case Family::kCopyInto: return emit_copy_into(b, n);
    case Family::kRotary: return emit_rotary(b, n);
    case Family::kNone: break;
  }
  if (ir::op_category(n.op) == ir::OpCategory::kCheck) return Status::ok();
  return unsupported("the CUDA backend has no layer for " + n.describe());
}
}  // namespace kiln::cuda
