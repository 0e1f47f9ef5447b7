#include "backends/cuda/gemm.h"

#include <charconv>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace kiln::cuda {
namespace {

bool adds_bias(GemmEpilogue e) { return e != GemmEpilogue::kNone; }

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kGemmMinAlignment == 0; }

// cuBLASLt reads the bias pointer's value before a run only for its alignment (heuristics, AlgoCheck). Those
// calls see this address, aligned to exactly kGemmMinAlignment, so the algorithm chosen accepts any bias that
// run() accepts; run() sets the real pointer.
const void* const kBiasAlignmentProbe =
    reinterpret_cast<const void*>(uintptr_t{kGemmMinAlignment});  // NOLINT(performance-no-int-to-ptr)

std::string float_text(float v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

cublasComputeType_t compute_type(const GemmShape& s) {
  return s.dtype == DType::Float32 && s.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kNone: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::kBiasRelu: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case GemmEpilogue::kBiasGelu: return CUBLASLT_EPILOGUE_GELU_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

template <typename T>
Status set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value, const char* what) {
  return cublas_status(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value), what);
}

// Everything on the matmul descriptor except compute and scale type. cuBLASLt's first operand is our B and its
// second our A (see GemmOp), so its TRANSA is our trans_b and its TRANSB our trans_a.
Status set_matmul_attributes(cublasLtMatmulDesc_t desc, const GemmShape& s, const void* bias) {
  const cublasOperation_t op_first = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  KILN_TRY(set_attribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, op_first, "setting CUBLASLT_MATMUL_DESC_TRANSA"));
  KILN_TRY(set_attribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, op_second, "setting CUBLASLT_MATMUL_DESC_TRANSB"));
  KILN_TRY(set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(s.epilogue),
                         "setting CUBLASLT_MATMUL_DESC_EPILOGUE"));
  if (!adds_bias(s.epilogue)) return Status::ok();
  KILN_ASSIGN_OR_RETURN(cudaDataType_t type, cuda_data_type(s.dtype));
  const auto bias_type = static_cast<int32_t>(type);
  KILN_TRY(set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type,
                         "setting CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE"));
  return set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "setting CUBLASLT_MATMUL_DESC_BIAS_POINTER");
}

// A column-major rows x cols layout with leading dimension ld, repeated `batch` times `stride` elements apart.
Expected<cublasLtMatrixLayout_t> make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                             int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  KILN_CUBLAS_TRY(
      cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const auto count = static_cast<int32_t>(batch);
    Status s = cublas_status(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
        "setting CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT");
    if (s) {
      s = cublas_status(
          cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
          "setting CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET");
    }
    if (!s) {
      cublasLtMatrixLayoutDestroy(layout);
      return s;
    }
  }
  return layout;
}

// The checks run() makes on its pointers, shared with tune_gemm so that bad arguments fail before tuning.
Status check_operands(const GemmShape& s, const void* a, const void* b, const void* c, const void* bias) {
  const std::pair<const void*, const char*> operands[] = {{a, "a"}, {b, "b"}, {c, "c"}};
  for (const auto& [p, name] : operands) {
    if (!p) return invalid_argument(std::string("GEMM operand ") + name + " is null");
    if (!aligned(p))
      return invalid_argument(std::string("GEMM operand ") + name + " is not " + std::to_string(kGemmMinAlignment) +
                              "-byte aligned");
  }
  if (adds_bias(s.epilogue)) {
    if (!bias)
      return invalid_argument("GEMM epilogue " + std::string(gemm_epilogue_name(s.epilogue)) +
                              " needs a bias, got null");
    if (!aligned(bias))
      return invalid_argument("GEMM bias is not " + std::to_string(kGemmMinAlignment) + "-byte aligned");
  } else if (bias) {
    return invalid_argument("GEMM got a bias but its epilogue is none");
  }
  return Status::ok();
}

class Preference {
 public:
  Preference() = default;
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  ~Preference() {
    if (pref_) cublasLtMatmulPreferenceDestroy(pref_);
  }
  Status init(size_t workspace_bytes) {
    KILN_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref_));
    const uint64_t limit = workspace_bytes;
    KILN_CUBLAS_TRY(
        cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit, sizeof limit));
    // Without these cuBLASLt assumes 256-byte aligned operands; run() promises only kGemmMinAlignment.
    const auto alignment = static_cast<uint32_t>(kGemmMinAlignment);
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      KILN_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref_, attr, &alignment, sizeof alignment));
    }
    return Status::ok();
  }
  cublasLtMatmulPreference_t get() const { return pref_; }

 private:
  cublasLtMatmulPreference_t pref_ = nullptr;
};

constexpr int kTuneWarmupRuns = 3;
constexpr int kTuneTimedRuns = 10;
constexpr int kMaxCandidates = 64;

}  // namespace

std::string_view gemm_epilogue_name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kNone: return "none";
    case GemmEpilogue::kBias: return "bias";
    case GemmEpilogue::kBiasRelu: return "bias_relu";
    case GemmEpilogue::kBiasGelu: return "bias_gelu";
  }
  return "?";
}

std::string GemmShape::to_string() const {
  std::string out = "gemm " + std::string(dtype_name(dtype));
  if (dtype == DType::Float32 && allow_tf32) out += " tf32";
  out += " m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
         " batch=" + std::to_string(batch);
  out += std::string(" a(") + (trans_a ? "t" : "n") + " ld=" + std::to_string(lda) +
         " stride=" + std::to_string(batch_stride_a) + ")";
  out += std::string(" b(") + (trans_b ? "t" : "n") + " ld=" + std::to_string(ldb) +
         " stride=" + std::to_string(batch_stride_b) + ")";
  out += " c(ld=" + std::to_string(ldc) + " stride=" + std::to_string(batch_stride_c) + ")";
  out += " epilogue=" + std::string(gemm_epilogue_name(epilogue));
  out += " alpha=" + float_text(alpha) + " beta=" + float_text(beta);
  return out;
}

Status GemmShape::validate() const {
  if (dtype != DType::Float32 && dtype != DType::Float16 && dtype != DType::BFloat16)
    return invalid_argument("GEMM dtype " + std::string(dtype_name(dtype)) +
                            " is not supported (float32, float16 or bfloat16)");
  const std::pair<int64_t, const char*> sizes[] = {{m, "m"}, {n, "n"}, {k, "k"}, {batch, "batch"}};
  for (const auto& [v, name] : sizes) {
    if (v <= 0) return invalid_argument(std::string("GEMM ") + name + " must be positive, got " + std::to_string(v));
  }
  if (batch > std::numeric_limits<int32_t>::max())
    return invalid_argument("GEMM batch " + std::to_string(batch) + " is larger than cuBLASLt allows");
  // Each operand's stored row length: the leading dimension must be at least this.
  struct Ld {
    int64_t ld, row;
    const char *name, *row_text;
  };
  const Ld lds[] = {
      {lda, trans_a ? m : k, "lda", trans_a ? "m (A is stored k x m)" : "k (A is stored m x k)"},
      {ldb, trans_b ? k : n, "ldb", trans_b ? "k (B is stored n x k)" : "n (B is stored k x n)"},
      {ldc, n, "ldc", "n (C is stored m x n)"},
  };
  for (const Ld& l : lds) {
    if (l.ld < l.row)
      return invalid_argument("GEMM " + std::string(l.name) + " (" + std::to_string(l.ld) +
                              ") is smaller than its row length " + l.row_text + " = " + std::to_string(l.row));
  }
  const std::pair<int64_t, const char*> strides[] = {
      {batch_stride_a, "batch_stride_a"}, {batch_stride_b, "batch_stride_b"}, {batch_stride_c, "batch_stride_c"}};
  for (const auto& [v, name] : strides) {
    if (v < 0) return invalid_argument(std::string("GEMM ") + name + " must not be negative, got " + std::to_string(v));
  }
  if (m > 1 && ldc > (std::numeric_limits<int64_t>::max() - n) / (m - 1))
    return invalid_argument("GEMM ldc (" + std::to_string(ldc) + ") times m (" + std::to_string(m) + ") overflows");
  const int64_t c_extent = (m - 1) * ldc + n;
  if (batch > 1 && batch_stride_c < c_extent)
    return invalid_argument("GEMM batch_stride_c (" + std::to_string(batch_stride_c) + ") must be at least " +
                            "(m-1)*ldc+n = " + std::to_string(c_extent) +
                            " so that the batch's outputs do not overlap");
  switch (epilogue) {
    case GemmEpilogue::kNone:
    case GemmEpilogue::kBias:
    case GemmEpilogue::kBiasRelu:
    case GemmEpilogue::kBiasGelu: break;
    default: return invalid_argument("GEMM epilogue " + std::to_string(static_cast<int>(epilogue)) + " is unknown");
  }
  return Status::ok();
}

GemmOp::GemmOp(GemmOp&& o) noexcept
    : lt_(std::exchange(o.lt_, nullptr)),
      shape_(o.shape_),
      algo_(o.algo_),
      workspace_bytes_(o.workspace_bytes_),
      desc_(std::exchange(o.desc_, nullptr)),
      layout_b_(std::exchange(o.layout_b_, nullptr)),
      layout_a_(std::exchange(o.layout_a_, nullptr)),
      layout_c_(std::exchange(o.layout_c_, nullptr)) {}

GemmOp& GemmOp::operator=(GemmOp&& o) noexcept {
  if (this != &o) {
    release();
    lt_ = std::exchange(o.lt_, nullptr);
    shape_ = o.shape_;
    algo_ = o.algo_;
    workspace_bytes_ = o.workspace_bytes_;
    desc_ = std::exchange(o.desc_, nullptr);
    layout_b_ = std::exchange(o.layout_b_, nullptr);
    layout_a_ = std::exchange(o.layout_a_, nullptr);
    layout_c_ = std::exchange(o.layout_c_, nullptr);
  }
  return *this;
}

GemmOp::~GemmOp() { release(); }

void GemmOp::release() {
  if (desc_) cublasLtMatmulDescDestroy(desc_);
  for (cublasLtMatrixLayout_t* l : {&layout_b_, &layout_a_, &layout_c_}) {
    if (*l) cublasLtMatrixLayoutDestroy(*l);
    *l = nullptr;
  }
  desc_ = nullptr;
}

Expected<GemmOp> GemmOp::describe(cublasLtHandle_t lt, const GemmShape& s) {
  KILN_TRY(s.validate());
  if (!lt) return invalid_argument("GEMM: null cuBLASLt handle");
  KILN_ASSIGN_OR_RETURN(cudaDataType_t type, cuda_data_type(s.dtype));
  GemmOp op;
  op.lt_ = lt;
  op.shape_ = s;
  KILN_CUBLAS_TRY(cublasLtMatmulDescCreate(&op.desc_, compute_type(s), CUDA_R_32F));
  KILN_TRY(set_matmul_attributes(op.desc_, s, adds_bias(s.epilogue) ? kBiasAlignmentProbe : nullptr));
  // Column-major views of the row-major buffers: B (k x n, or n x k when trans_b) is the column-major n x k
  // (or k x n) matrix op(B)^T (or op(B)); likewise A; C (m x n) is the column-major n x m matrix C^T.
  KILN_ASSIGN_OR_RETURN(
      op.layout_b_, make_layout(type, s.trans_b ? s.k : s.n, s.trans_b ? s.n : s.k, s.ldb, s.batch, s.batch_stride_b));
  KILN_ASSIGN_OR_RETURN(
      op.layout_a_, make_layout(type, s.trans_a ? s.m : s.k, s.trans_a ? s.k : s.m, s.lda, s.batch, s.batch_stride_a));
  KILN_ASSIGN_OR_RETURN(op.layout_c_, make_layout(type, s.n, s.m, s.ldc, s.batch, s.batch_stride_c));
  return op;
}

std::string gemm_kernel_class(const GemmShape& shape, const GemmAlgo* algo) {
  const int64_t elem = static_cast<int64_t>(dtype_size(shape.dtype));
  auto alignment = [&](int64_t elements) {
    int64_t a = 16;
    while (a > 1 && (elements * elem) % a != 0) a /= 2;
    return std::to_string(a);
  };
  std::string out = std::string(dtype_name(shape.dtype)) + (shape.allow_tf32 ? " tf32" : "") +
                    (shape.trans_a ? " at" : " a") + alignment(shape.lda) + (shape.trans_b ? " bt" : " b") +
                    alignment(shape.ldb) + " c" + alignment(shape.ldc) + " " +
                    std::string(gemm_epilogue_name(shape.epilogue)) + " alpha " + std::to_string(shape.alpha) +
                    " beta " + std::to_string(shape.beta);
  if (shape.batch > 1)
    out += " batched " + alignment(shape.batch_stride_a) + " " + alignment(shape.batch_stride_b) + " " +
           alignment(shape.batch_stride_c);
  if (algo)
    for (uint64_t w : algo->data) out += " " + std::to_string(w);
  return out;
}

Expected<GemmOp> GemmOp::create(cublasLtHandle_t lt, const GemmShape& shape, const GemmAlgo& algo) {
  const std::string where = "GEMM " + shape.to_string();
  auto described = describe(lt, shape);
  if (!described) return std::move(described).status().with_context(where);
  GemmOp op = std::move(described).value();
  static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(algo.data), "GemmAlgo::data must hold cublasLtMatmulAlgo_t");
  std::memcpy(&op.algo_, algo.data.data(), sizeof op.algo_);
  cublasLtMatmulHeuristicResult_t check{};
  const cublasStatus_t st =
      cublasLtMatmulAlgoCheck(lt, op.desc_, op.layout_b_, op.layout_a_, op.layout_c_, op.layout_c_, &op.algo_, &check);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE || st == CUBLAS_STATUS_ARCH_MISMATCH ||
      (st == CUBLAS_STATUS_SUCCESS && check.state != CUBLAS_STATUS_SUCCESS)) {
    const int code = static_cast<int>(st != CUBLAS_STATUS_SUCCESS ? st : check.state);
    return format_error(where + ": the plan's cuBLASLt algorithm cannot run with this device and cuBLASLt " +
                        std::to_string(cublasLtGetVersion()) + " (cublasLtMatmulAlgoCheck status " +
                        std::to_string(code) + "); rebuild the plan here");
  }
  KILN_TRY_CTX(cublas_status(st, "cublasLtMatmulAlgoCheck"), where);
  if (check.workspaceSize > algo.workspace_bytes)
    return format_error(where + ": the plan's cuBLASLt algorithm needs " + std::to_string(check.workspaceSize) +
                        " bytes of workspace here but the plan recorded " + std::to_string(algo.workspace_bytes) +
                        "; rebuild the plan here");
  op.workspace_bytes_ = algo.workspace_bytes;
  return op;
}

Status GemmOp::run(const void* a, const void* b, void* c, const void* bias, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream) const {
  if (!desc_) return internal_error("GemmOp::run on a moved-from GemmOp");
  KILN_TRY(check_operands(shape_, a, b, c, bias));
  if (workspace_bytes < workspace_bytes_ || (workspace_bytes_ > 0 && !workspace))
    return invalid_argument("GEMM needs " + std::to_string(workspace_bytes_) + " bytes of workspace, got " +
                            (workspace ? std::to_string(workspace_bytes) : std::string("none")));
  if (workspace && !aligned(workspace))
    return invalid_argument("GEMM workspace is not " + std::to_string(kGemmMinAlignment) + "-byte aligned");
  // The bias pointer lives on the descriptor. Rather than mutate the shared one (run() may be called from
  // several threads), describe this run on a stack descriptor: no allocation, nothing to release.
  cublasLtMatmulDesc_t desc = desc_;
  cublasLtMatmulDescOpaque_t local;
  if (adds_bias(shape_.epilogue)) {
    desc = &local;
    KILN_CUBLAS_TRY(cublasLtMatmulDescInit(desc, compute_type(shape_), CUDA_R_32F));
    KILN_TRY(set_matmul_attributes(desc, shape_, bias));
  }
  return cublas_status(cublasLtMatmul(lt_, desc, &shape_.alpha, b, layout_b_, a, layout_a_, &shape_.beta, c, layout_c_,
                                      c, layout_c_, &algo_, workspace, workspace_bytes_, stream),
                       "cublasLtMatmul");
}

Expected<GemmAlgo> pick_gemm(cublasLtHandle_t lt, const GemmShape& shape, size_t workspace_bytes) {
  const std::string where = "choosing an algorithm for GEMM " + shape.to_string();
  auto described = GemmOp::describe(lt, shape);
  if (!described) return std::move(described).status().with_context(where);
  Preference pref;
  KILN_TRY_CTX(pref.init(workspace_bytes), where);
  std::array<cublasLtMatmulHeuristicResult_t, 4> results{};
  int returned = 0;
  KILN_TRY_CTX(
      cublas_status(cublasLtMatmulAlgoGetHeuristic(lt, described->desc_, described->layout_b_, described->layout_a_,
                                                   described->layout_c_, described->layout_c_, pref.get(),
                                                   static_cast<int>(results.size()), results.data(), &returned),
                    "cublasLtMatmulAlgoGetHeuristic"),
      where);
  for (int i = 0; i < returned && i < static_cast<int>(results.size()); ++i) {
    const cublasLtMatmulHeuristicResult_t& r = results[static_cast<size_t>(i)];
    if (r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > workspace_bytes) continue;
    GemmAlgo a;
    std::memcpy(a.data.data(), &r.algo, sizeof r.algo);
    a.workspace_bytes = r.workspaceSize;
    return a;
  }
  return unsupported(where + ": cuBLASLt has no algorithm for it within " + std::to_string(workspace_bytes) +
                     " bytes of workspace on this device");
}

Expected<GemmAlgo> tune_gemm(cublasLtHandle_t lt, const GemmShape& shape, const void* a, const void* b, void* c,
                             const void* bias, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                             int max_candidates) {
  const std::string where = "tuning GEMM " + shape.to_string();
  if (max_candidates < 1 || max_candidates > kMaxCandidates)
    return invalid_argument(where + ": max_candidates must be in 1.." + std::to_string(kMaxCandidates) + ", got " +
                            std::to_string(max_candidates));
  if (!workspace) workspace_bytes = 0;
  auto described = GemmOp::describe(lt, shape);
  if (!described) return std::move(described).status().with_context(where);
  GemmOp op = std::move(described).value();
  KILN_TRY_CTX(check_operands(shape, a, b, c, bias), where);
  if (workspace && !aligned(workspace))
    return invalid_argument(where + ": workspace is not " + std::to_string(kGemmMinAlignment) + "-byte aligned");

  Preference pref;
  KILN_TRY_CTX(pref.init(workspace_bytes), where);
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(max_candidates));
  int returned = 0;
  KILN_TRY_CTX(
      cublas_status(cublasLtMatmulAlgoGetHeuristic(lt, op.desc_, op.layout_b_, op.layout_a_, op.layout_c_, op.layout_c_,
                                                   pref.get(), max_candidates, results.data(), &returned),
                    "cublasLtMatmulAlgoGetHeuristic"),
      where);
  if (returned <= 0) return unsupported(where + ": cuBLASLt has no algorithm for this GEMM on this device");

  GemmAlgo best;
  best.measured_ms = std::numeric_limits<float>::infinity();
  Status last_failure;
  for (int i = 0; i < returned && i < max_candidates; ++i) {
    const cublasLtMatmulHeuristicResult_t& r = results[static_cast<size_t>(i)];
    if (r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > workspace_bytes) continue;
    op.algo_ = r.algo;
    op.workspace_bytes_ = r.workspaceSize;
    // A candidate that cuBLASLt refuses to run is skipped; a CUDA error (events, a faulting kernel) is not.
    bool matmul_failed = false;
    Expected<float> ms = time_on_stream(stream, kTuneWarmupRuns, kTuneTimedRuns, [&]() -> Status {
      Status s = op.run(a, b, c, bias, workspace, workspace_bytes, stream);
      if (!s) matmul_failed = true;
      return s;
    });
    if (!ms) {
      if (!matmul_failed) return std::move(ms).status().with_context(where);
      last_failure = std::move(ms).status();
      continue;
    }
    ++best.candidates;
    if (*ms < best.measured_ms) {
      std::memcpy(best.data.data(), &r.algo, sizeof r.algo);
      best.workspace_bytes = r.workspaceSize;
      best.measured_ms = *ms;
    }
  }
  if (best.candidates == 0) {
    if (!last_failure.is_ok()) return std::move(last_failure).with_context(where + ": no candidate algorithm ran");
    return unsupported(where + ": cuBLASLt offered no usable algorithm within " + std::to_string(workspace_bytes) +
                       " bytes of workspace");
  }
  return best;
}

}  // namespace kiln::cuda
