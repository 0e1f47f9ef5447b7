// Row-major GEMMs on cuBLASLt: the shape of one GEMM, choosing its algorithm
// at build time (tune_gemm), and running it with the recorded algorithm at load
// time (GemmOp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "backends/cuda/cuda_support.h"
#include "kiln/dtype.h"
#include "kiln/status.h"

namespace kiln::cuda {

// What runs after the product, on float32 values, before C is stored.
enum class GemmEpilogue {
  kNone,
  kBias,      // + bias[j]
  kBiasRelu,  // relu(. + bias[j])
  kBiasGelu,  // gelu(. + bias[j]), cuBLASLt's GELU epilogue (tanh approximation)
};

// "none", "bias", "bias_relu", "bias_gelu".
std::string_view gemm_epilogue_name(GemmEpilogue e);

// Row-major GEMM: C[b] (m x n) = alpha * op(A[b]) (m x k) * op(B[b]) (k x n) + beta * C[b], then the epilogue
// (bias is a length-n vector of the output dtype added to every row, then relu/gelu).
struct GemmShape {
  DType dtype = DType::Float32;  // A, B, C and bias: Float32, Float16 or BFloat16; accumulation is always float32
  bool allow_tf32 = false;       // Float32 only: use TF32 tensor cores; ignored for 16-bit dtypes
  int64_t m = 0, n = 0, k = 0, batch = 1;
  // A(i,l) = a[i*lda + l] when !trans_a, a[l*lda + i] when trans_a (A stored as k x m). Same for B
  // (B(l,j) = b[l*ldb + j], or b[j*ldb + l] when trans_b). C(i,j) = c[i*ldc + j].
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  // In elements; 0 broadcasts that operand over the batch (not allowed for C when batch > 1).
  int64_t batch_stride_a = 0, batch_stride_b = 0, batch_stride_c = 0;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  float alpha = 1.0f, beta = 0.0f;

  // One line, for logs and plan text: "gemm float16 m=.. n=.. k=.. batch=.. a[n lda=..] ...".
  std::string to_string() const;
  // kInvalidArgument naming the bad field: dtype, sizes > 0, leading dimensions large enough for the stored
  // rows, batch strides >= 0, and C's batch stride keeping the batch's outputs apart.
  Status validate() const;
};

// A chosen cuBLASLt algorithm, as stored in an engine plan (cublasLtMatmulAlgo_t is 8 uint64 words).
struct GemmAlgo {
  std::array<uint64_t, 8> data{};
  size_t workspace_bytes = 0;  // workspace the algorithm needs; run() must be given at least this much
  float measured_ms = 0;       // time measured at build
  int candidates = 0;          // how many heuristic candidates were timed
};

// What picks the library kernel a GEMM runs: its algorithm (null: none recorded), types, transposes,
// epilogue, whether it is batched, alpha and beta, and how its leading dimensions and batch strides are
// aligned (the largest power of two up to 16 bytes that divides each) — everything but its sizes. GEMMs of
// one class run the same cuBLASLt kernel.
std::string gemm_kernel_class(const GemmShape& shape, const GemmAlgo* algo);

// The workspace limit the builder tunes with (and so the most any recorded algorithm asks of run()).
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

// The alignment, in bytes, that every pointer given to tune_gemm and GemmOp::run (a, b, c, bias, workspace)
// must have. Algorithms are chosen for this alignment, not for the (stricter) alignment of the buffers used
// while tuning, so a recorded algorithm runs on any buffers that meet it.
constexpr size_t kGemmMinAlignment = 16;

// Build time: asks cublasLtMatmulAlgoGetHeuristic for up to max_candidates algorithms for `shape` (workspace
// limit workspace_bytes), times each one on the given device buffers with CUDA events (a few warm-up runs,
// median of several), and returns the fastest.
//   lt                 cuBLASLt handle, on the current device.
//   shape              the GEMM; validated first.
//   a, b, c, bias      device buffers large enough for the shape, kGemmMinAlignment-aligned; bias is required
//                      exactly when the epilogue adds one (null otherwise). The timing runs overwrite c (and
//                      with beta != 0 accumulate into it), so its contents afterwards are unspecified.
//   workspace          device workspace of workspace_bytes bytes (may be null when workspace_bytes is 0).
//   stream             the stream the timing runs on; tune_gemm synchronizes it.
//   max_candidates     how many heuristic candidates to ask for, 1..64.
// kUnsupported when cuBLASLt has no algorithm for the shape on this device.
Expected<GemmAlgo> tune_gemm(cublasLtHandle_t lt, const GemmShape& shape, const void* a, const void* b, void* c,
                             const void* bias, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                             int max_candidates = 8);

// Run time, for a GEMM shape no build timed (a new size of an engine built
// for a range): the first algorithm cuBLASLt's heuristic offers that fits
// workspace_bytes, with nothing run or timed (microseconds on the host).
// kUnsupported when cuBLASLt offers none.
Expected<GemmAlgo> pick_gemm(cublasLtHandle_t lt, const GemmShape& shape, size_t workspace_bytes);

// Load time: the cuBLASLt descriptors for one GEMM with a recorded algorithm. Move-only; the destructor
// releases every descriptor. run() is const and may be called from several threads at once.
class GemmOp {
 public:
  // Validates `shape`, builds the descriptors and checks the algorithm with cublasLtMatmulAlgoCheck: kFormat
  // when this device or cuBLASLt version cannot run it, or when it needs more workspace than the plan recorded
  // (the plan must be rebuilt). `lt` must outlive the op.
  static Expected<GemmOp> create(cublasLtHandle_t lt, const GemmShape& shape, const GemmAlgo& algo);

  GemmOp(const GemmOp&) = delete;
  GemmOp& operator=(const GemmOp&) = delete;
  GemmOp(GemmOp&& o) noexcept;
  GemmOp& operator=(GemmOp&& o) noexcept;
  ~GemmOp();

  // Enqueues the GEMM on `stream` (no synchronization, no allocation: safe inside CUDA graph capture).
  //   a, b, c      device pointers laid out as the shape says, kGemmMinAlignment-aligned; c is read when
  //                beta != 0 and written in place.
  //   bias         length-n device vector of the shape's dtype when the epilogue adds a bias, else null.
  //   workspace    device memory of workspace_bytes >= this->workspace_bytes() bytes.
  // kInvalidArgument for a missing or misaligned pointer or too small a workspace.
  Status run(const void* a, const void* b, void* c, const void* bias, void* workspace, size_t workspace_bytes,
             cudaStream_t stream) const;

  const GemmShape& shape() const { return shape_; }
  // The workspace run() needs, in bytes.
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  GemmOp() = default;
  // The shape's descriptors, with no algorithm yet (tune_gemm fills algo_ per candidate).
  static Expected<GemmOp> describe(cublasLtHandle_t lt, const GemmShape& shape);
  void release();

  friend Expected<GemmAlgo> pick_gemm(cublasLtHandle_t, const GemmShape&, size_t);
  friend Expected<GemmAlgo> tune_gemm(cublasLtHandle_t, const GemmShape&, const void*, const void*, void*, const void*,
                                      void*, size_t, cudaStream_t, int);

  cublasLtHandle_t lt_ = nullptr;
  GemmShape shape_;
  cublasLtMatmulAlgo_t algo_{};
  size_t workspace_bytes_ = 0;
  // cuBLASLt computes the column-major C^T = op(B)^T op(A)^T: its first operand is our B, its second our A.
  cublasLtMatmulDesc_t desc_ = nullptr;  // with a placeholder bias pointer; run() sets the real one on a copy
  cublasLtMatrixLayout_t layout_b_ = nullptr, layout_a_ = nullptr, layout_c_ = nullptr;
};

}  // namespace kiln::cuda
