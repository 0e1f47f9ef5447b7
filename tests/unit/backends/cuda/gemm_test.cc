#include "backends/cuda/gemm.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_support.h"
#include "kiln/dtype.h"

namespace kiln::cuda {
namespace {

// A shape whose operands are packed: lda, ldb and ldc are the stored row lengths.
GemmShape packed_shape(DType dtype, int64_t m, int64_t n, int64_t k, bool trans_a = false, bool trans_b = false) {
  GemmShape s;
  s.dtype = dtype;
  s.m = m, s.n = n, s.k = k;
  s.trans_a = trans_a, s.trans_b = trans_b;
  s.lda = trans_a ? m : k;
  s.ldb = trans_b ? k : n;
  s.ldc = n;
  return s;
}

// ---------------------------------------------------------------------------------------------------------------
// Shape checks (no GPU needed).

TEST(GemmShape, LdcSmallerThanNFailsValidateNamingLdc) {
  GemmShape s = packed_shape(DType::Float32, 64, 48, 32);
  ASSERT_TRUE(s.validate().is_ok()) << s.validate().to_string();
  s.ldc = 40;
  const Status st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("ldc"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("lda"), std::string::npos) << st.message();
}

TEST(GemmShape, LeadingDimensionsFollowTheStoredLayout) {
  // A stored k x m when trans_a: lda = k (enough untransposed) is too small when m > k.
  GemmShape s = packed_shape(DType::Float16, 64, 48, 32, /*trans_a=*/true, /*trans_b=*/true);
  EXPECT_TRUE(s.validate().is_ok()) << s.validate().to_string();
  s.lda = 32;
  Status st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("lda (32)"), std::string::npos) << st.message();
  // B stored n x k when trans_b: ldb = k = 32 suffices though n = 48.
  s = packed_shape(DType::Float16, 64, 48, 32, false, true);
  EXPECT_EQ(s.ldb, 32);
  EXPECT_TRUE(s.validate().is_ok()) << s.validate().to_string();
  s.ldb = 31;
  st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("ldb"), std::string::npos) << st.message();
}

TEST(GemmShape, RejectsOtherDtypesAndEmptySizes) {
  GemmShape s = packed_shape(DType::Int32, 4, 4, 4);
  Status st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("dtype"), std::string::npos) << st.message();
  s = packed_shape(DType::BFloat16, 4, 4, 4);
  s.k = 0;
  st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("k must be positive"), std::string::npos) << st.message();
  s = packed_shape(DType::BFloat16, 4, 4, 4);
  s.batch = 0;
  st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("batch"), std::string::npos) << st.message();
}

TEST(GemmShape, BatchedOutputsMayNotOverlapButInputsMayBroadcast) {
  const int64_t m = 8, n = 6, k = 5;
  GemmShape s = packed_shape(DType::Float32, m, n, k);
  s.batch = 3;
  s.batch_stride_a = m * k;
  s.batch_stride_b = 0;  // one weight for every batch entry
  s.batch_stride_c = m * n;
  EXPECT_TRUE(s.validate().is_ok()) << s.validate().to_string();
  s.batch_stride_c = m * n - 1;
  Status st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("batch_stride_c"), std::string::npos) << st.message();
  s.batch_stride_c = m * n;
  s.batch_stride_a = -1;
  st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("batch_stride_a"), std::string::npos) << st.message();
}

TEST(GemmShape, ToStringIsOneLineWithEveryField) {
  GemmShape s = packed_shape(DType::BFloat16, 64, 48, 32, false, true);
  s.epilogue = GemmEpilogue::kBiasGelu;
  s.alpha = 0.5f;
  const std::string text = s.to_string();
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  for (const char* part :
       {"bfloat16", "m=64", "n=48", "k=32", "batch=1", "b(t ld=32", "c(ld=48", "bias_gelu", "alpha=0.5", "beta=0"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << " not in " << text;
  }
}

// GEMMs that differ only in their sizes are one kernel class; a different
// algorithm, dtype, transpose, epilogue or operand alignment is another.
TEST(GemmShape, KernelClassLeavesOutTheSizesAndNothingElse) {
  GemmAlgo algo;
  algo.data = {21, 1, 2, 3, 0, 0, 0, 0};
  const GemmShape base = packed_shape(DType::Float16, 128, 768, 768, false, true);
  const std::string klass = gemm_kernel_class(base, &algo);
  GemmShape other = packed_shape(DType::Float16, 37, 768, 768, false, true);
  EXPECT_EQ(gemm_kernel_class(other, &algo), klass);
  other = packed_shape(DType::Float16, 512, 1536, 3072, false, true);  // leading dimensions still 16-byte multiples
  EXPECT_EQ(gemm_kernel_class(other, &algo), klass);
  std::vector<GemmShape> differ;
  differ.push_back(packed_shape(DType::BFloat16, 128, 768, 768, false, true));
  differ.push_back(packed_shape(DType::Float16, 128, 768, 768, false, false));
  differ.push_back(packed_shape(DType::Float16, 128, 768, 765, false, true));  // lda of 765 halves: 2-byte aligned
  differ.push_back(base);
  differ.back().epilogue = GemmEpilogue::kBiasRelu;
  differ.push_back(base);
  differ.back().beta = 1.0f;
  for (const GemmShape& d : differ) EXPECT_NE(gemm_kernel_class(d, &algo), klass) << d.to_string();
  GemmAlgo another = algo;
  another.data[1] = 7;
  EXPECT_NE(gemm_kernel_class(base, &another), klass);
  EXPECT_NE(gemm_kernel_class(base, nullptr), klass);
}

TEST(GemmShape, CreateValidatesTheShapeFirst) {
  GemmShape s = packed_shape(DType::Float32, 4, 4, 4);
  s.ldc = 3;
  auto op = GemmOp::create(nullptr, s, GemmAlgo{});
  ASSERT_FALSE(op.has_value());
  EXPECT_EQ(op.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(op.status().message().find("ldc"), std::string::npos) << op.status().message();
}

// ---------------------------------------------------------------------------------------------------------------
// GEMMs on the GPU, compared with a float64 reference computed on the host from the same (rounded) inputs.

// |got - want| <= abs + rel * |want|.
struct Tolerance {
  double abs, rel;
};
// float32 without TF32 accumulates in float32: only summation error, far below this.
constexpr Tolerance kFloat32Tolerance{1e-4, 1e-4};
// TF32 rounds each input to 10 mantissa bits: ~5e-4 relative per product, k products of order 1/3.
constexpr Tolerance kTf32Tolerance{2e-2, 1e-3};
// float16 output (11-bit significand) of values of order 1..10 with k <= 256: rounding ~5e-4 relative.
constexpr Tolerance kFloat16Tolerance{2e-2, 1e-3};
// bfloat16 output (8-bit significand): rounding up to 2^-9 relative, 0.03 at values near 16.
constexpr Tolerance kBFloat16Tolerance{5e-2, 1e-2};

// Host data in the dtype's encoding, and the values it holds (the rounded inputs the GPU sees).
struct HostData {
  std::vector<uint8_t> bytes;
  std::vector<double> values;
};

HostData encode(DType t, const std::vector<double>& values) {
  HostData h;
  h.bytes.resize(values.size() * dtype_size(t));
  h.values.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const auto f = static_cast<float>(values[i]);
    if (t == DType::Float16) {
      const Half v(f);
      std::memcpy(&h.bytes[i * 2], &v.bits, 2);
      h.values[i] = static_cast<float>(v);
    } else if (t == DType::BFloat16) {
      const BFloat16 v(f);
      std::memcpy(&h.bytes[i * 2], &v.bits, 2);
      h.values[i] = static_cast<float>(v);
    } else {
      std::memcpy(&h.bytes[i * 4], &f, 4);
      h.values[i] = f;
    }
  }
  return h;
}

std::vector<double> decode(DType t, const std::vector<uint8_t>& bytes) {
  std::vector<double> out(bytes.size() / dtype_size(t));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t == DType::Float16) {
      Half v;
      std::memcpy(&v.bits, &bytes[i * 2], 2);
      out[i] = static_cast<float>(v);
    } else if (t == DType::BFloat16) {
      BFloat16 v;
      std::memcpy(&v.bits, &bytes[i * 2], 2);
      out[i] = static_cast<float>(v);
    } else {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      out[i] = f;
    }
  }
  return out;
}

HostData random_data(DType t, size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(count);
  for (double& x : v) x = dist(rng);
  return encode(t, v);
}

// Elements spanned by `batch` matrices of `rows` stored rows of `cols` elements, `ld` apart, `stride` apart.
size_t span(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  return static_cast<size_t>((batch - 1) * stride + (rows - 1) * ld + cols);
}

// C as the shape defines it, from the initial C (read when beta != 0); padding keeps its initial values.
std::vector<double> reference_gemm(const GemmShape& s, const std::vector<double>& a, const std::vector<double>& b,
                                   const std::vector<double>& c0, const std::vector<double>& bias) {
  std::vector<double> c = c0;
  for (int64_t p = 0; p < s.batch; ++p) {
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < s.k; ++l) {
          const int64_t ai = p * s.batch_stride_a + (s.trans_a ? l * s.lda + i : i * s.lda + l);
          const int64_t bi = p * s.batch_stride_b + (s.trans_b ? j * s.ldb + l : l * s.ldb + j);
          acc += a[static_cast<size_t>(ai)] * b[static_cast<size_t>(bi)];
        }
        const auto ci = static_cast<size_t>(p * s.batch_stride_c + i * s.ldc + j);
        double v = s.alpha * acc + (s.beta != 0 ? s.beta * c0[ci] : 0.0);
        if (s.epilogue != GemmEpilogue::kNone) v += bias[static_cast<size_t>(j)];
        if (s.epilogue == GemmEpilogue::kBiasRelu) v = std::max(v, 0.0);
        if (s.epilogue == GemmEpilogue::kBiasGelu) {
          const double kSqrt2OverPi = 0.7978845608028654;
          v = 0.5 * v * (1 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v)));
        }
        c[ci] = v;
      }
    }
  }
  return c;
}

#define ASSERT_OK(expr)                                                      \
  do {                                                                       \
    const ::kiln::Status& assert_ok_status_ = (expr);                        \
    ASSERT_TRUE(assert_ok_status_.is_ok()) << assert_ok_status_.to_string(); \
  } while (0)

// A cuBLASLt handle and a non-default stream (graph capture needs one), released at the end of a test.
class GpuContext {
 public:
  GpuContext() {
    if (cublasLtCreate(&lt_) != CUBLAS_STATUS_SUCCESS) lt_ = nullptr;
    if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess) stream_ = nullptr;
  }
  GpuContext(const GpuContext&) = delete;
  GpuContext& operator=(const GpuContext&) = delete;
  ~GpuContext() {
    if (stream_) cudaStreamDestroy(stream_);
    if (lt_) cublasLtDestroy(lt_);
  }
  bool ok() const { return lt_ && stream_; }
  cublasLtHandle_t lt() const { return lt_; }
  cudaStream_t stream() const { return stream_; }

 private:
  cublasLtHandle_t lt_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

Expected<DeviceBuffer> upload(const std::vector<uint8_t>& bytes) {
  KILN_ASSIGN_OR_RETURN(DeviceBuffer d, DeviceBuffer::allocate(bytes.size()));
  KILN_CUDA_TRY(cudaMemcpy(d.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  return d;
}

enum class RunMode { kDirect, kGraphCapture };

// Tunes the shape on random data, creates a GemmOp from the result, runs it (directly or as a captured CUDA
// graph) and compares every element of C, padding included, with the reference.
void expect_gemm_matches_reference(const GemmShape& s, Tolerance tol, uint32_t seed, RunMode mode = RunMode::kDirect) {
  ASSERT_OK(s.validate());
  std::mt19937 rng(seed);
  const size_t na = span(s.trans_a ? s.k : s.m, s.trans_a ? s.m : s.k, s.lda, s.batch, s.batch_stride_a);
  const size_t nb = span(s.trans_b ? s.n : s.k, s.trans_b ? s.k : s.n, s.ldb, s.batch, s.batch_stride_b);
  const size_t nc = span(s.m, s.n, s.ldc, s.batch, s.batch_stride_c);
  const bool has_bias = s.epilogue != GemmEpilogue::kNone;
  const HostData a = random_data(s.dtype, na, rng);
  const HostData b = random_data(s.dtype, nb, rng);
  const HostData c0 = random_data(s.dtype, nc, rng);
  const HostData bias = random_data(s.dtype, has_bias ? static_cast<size_t>(s.n) : 0, rng);

  GpuContext gpu;
  ASSERT_TRUE(gpu.ok()) << "cuBLASLt handle or stream creation failed";
  auto da = upload(a.bytes), db = upload(b.bytes), dc = upload(c0.bytes);
  ASSERT_OK(da.status());
  ASSERT_OK(db.status());
  ASSERT_OK(dc.status());
  Expected<DeviceBuffer> dbias = DeviceBuffer();
  if (has_bias) dbias = upload(bias.bytes);
  ASSERT_OK(dbias.status());
  auto ws = DeviceBuffer::allocate(kGemmWorkspaceBytes);
  ASSERT_OK(ws.status());
  const void* bias_ptr = dbias->get();  // null without a bias

  auto algo =
      tune_gemm(gpu.lt(), s, da->get(), db->get(), dc->get(), bias_ptr, ws->get(), kGemmWorkspaceBytes, gpu.stream());
  ASSERT_OK(algo.status());
  EXPECT_GE(algo->candidates, 1);
  EXPECT_GT(algo->measured_ms, 0.0f);
  EXPECT_LE(algo->workspace_bytes, kGemmWorkspaceBytes);

  auto op = GemmOp::create(gpu.lt(), s, *algo);
  ASSERT_OK(op.status());
  EXPECT_EQ(op->workspace_bytes(), algo->workspace_bytes);
  // Tuning accumulated into C; start again from the initial C.
  ASSERT_OK(cuda_status(cudaMemcpy(dc->get(), c0.bytes.data(), c0.bytes.size(), cudaMemcpyHostToDevice), "reset C"));
  if (mode == RunMode::kDirect) {
    ASSERT_OK(op->run(da->get(), db->get(), dc->get(), bias_ptr, ws->get(), ws->nbytes(), gpu.stream()));
  } else {
    ASSERT_OK(cuda_status(cudaStreamBeginCapture(gpu.stream(), cudaStreamCaptureModeThreadLocal), "begin capture"));
    const Status run = op->run(da->get(), db->get(), dc->get(), bias_ptr, ws->get(), ws->nbytes(), gpu.stream());
    cudaGraph_t graph = nullptr;
    const Status end = cuda_status(cudaStreamEndCapture(gpu.stream(), &graph), "end capture");
    ASSERT_OK(run);
    ASSERT_OK(end);
    cudaGraphExec_t exec = nullptr;
    const Status inst = cuda_status(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    cudaGraphDestroy(graph);
    ASSERT_OK(inst);
    const Status launch = cuda_status(cudaGraphLaunch(exec, gpu.stream()), "cudaGraphLaunch");
    const Status sync = cuda_status(cudaStreamSynchronize(gpu.stream()), "cudaStreamSynchronize");
    cudaGraphExecDestroy(exec);
    ASSERT_OK(launch);
    ASSERT_OK(sync);
  }
  ASSERT_OK(cuda_status(cudaStreamSynchronize(gpu.stream()), "cudaStreamSynchronize"));
  std::vector<uint8_t> out(c0.bytes.size());
  ASSERT_OK(cuda_status(cudaMemcpy(out.data(), dc->get(), out.size(), cudaMemcpyDeviceToHost), "download C"));

  const std::vector<double> got = decode(s.dtype, out);
  const std::vector<double> want = reference_gemm(s, a.values, b.values, c0.values, bias.values);
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) <= tol.abs + tol.rel * std::fabs(want[i])) continue;
    if (bad++ == 0)
      first = "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " + std::to_string(want[i]);
  }
  EXPECT_EQ(bad, 0u) << bad << " of " << got.size() << " elements differ; first: " << first << " (" << s.to_string()
                     << ", algorithm timed at " << algo->measured_ms << " ms)";
}

TEST(CudaGemm, Float32MatchesReference) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  expect_gemm_matches_reference(packed_shape(DType::Float32, 64, 48, 32), kFloat32Tolerance, 1);
}

TEST(CudaGemm, Float32AlphaAndBetaAccumulateIntoC) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GemmShape s = packed_shape(DType::Float32, 33, 17, 29);  // odd sizes and leading dimensions
  s.alpha = 2.0f;
  s.beta = 0.5f;
  expect_gemm_matches_reference(s, kFloat32Tolerance, 2);
}

TEST(CudaGemm, Float32WithTf32MatchesReference) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GemmShape s = packed_shape(DType::Float32, 128, 96, 64);
  s.allow_tf32 = true;
  expect_gemm_matches_reference(s, kTf32Tolerance, 3);
}

TEST(CudaGemm, Float16BiasReluMatchesReference) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GemmShape s = packed_shape(DType::Float16, 96, 80, 128);
  s.epilogue = GemmEpilogue::kBiasRelu;
  expect_gemm_matches_reference(s, kFloat16Tolerance, 4);
}

TEST(CudaGemm, BFloat16BiasReluMatchesReference) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GemmShape s = packed_shape(DType::BFloat16, 64, 72, 256);
  s.epilogue = GemmEpilogue::kBiasRelu;
  expect_gemm_matches_reference(s, kBFloat16Tolerance, 5);
}

TEST(CudaGemm, Float16BiasGeluMatchesTanhApproximation) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GemmShape s = packed_shape(DType::Float16, 48, 64, 96);
  s.epilogue = GemmEpilogue::kBiasGelu;
  expect_gemm_matches_reference(s, kFloat16Tolerance, 6);
}

TEST(CudaGemm, BatchedWithBroadcastWeightMatchesReference) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GemmShape s = packed_shape(DType::Float32, 20, 24, 40);
  s.batch = 3;
  s.batch_stride_a = s.m * s.k;
  s.batch_stride_b = 0;  // one weight for every batch entry
  s.batch_stride_c = s.m * s.n;
  s.epilogue = GemmEpilogue::kBias;
  expect_gemm_matches_reference(s, kFloat32Tolerance, 7);
}

TEST(CudaGemm, BatchedFloat16WithTransposedBMatchesReference) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GemmShape s = packed_shape(DType::Float16, 16, 32, 64, /*trans_a=*/false, /*trans_b=*/true);
  s.batch = 4;
  s.batch_stride_a = s.m * s.k;
  s.batch_stride_b = s.n * s.k;
  s.batch_stride_c = s.m * s.n + 8;  // gaps between the outputs stay untouched
  expect_gemm_matches_reference(s, kFloat16Tolerance, 8);
}

TEST(CudaGemm, TransposedBWithPaddedLeadingDimensionsMatchesReference) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  // nn.Linear's layout: weight stored n x k. Padding in every row, and C's padding must stay untouched.
  GemmShape s = packed_shape(DType::Float16, 50, 40, 64, /*trans_a=*/false, /*trans_b=*/true);
  s.lda = 80;
  s.ldb = 72;
  s.ldc = 48;
  s.epilogue = GemmEpilogue::kBias;
  expect_gemm_matches_reference(s, kFloat16Tolerance, 9);
}

TEST(CudaGemm, TransposedAMatchesReference) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GemmShape s = packed_shape(DType::Float32, 24, 16, 40, /*trans_a=*/true, /*trans_b=*/false);
  s.lda = 32;
  expect_gemm_matches_reference(s, kFloat32Tolerance, 10);
}

TEST(CudaGemm, SingleRowGemvMatchesReference) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GemmShape s = packed_shape(DType::Float32, 1, 257, 200, /*trans_a=*/false, /*trans_b=*/true);
  s.epilogue = GemmEpilogue::kBiasRelu;
  expect_gemm_matches_reference(s, kFloat32Tolerance, 11);
}

TEST(CudaGemm, RunsInsideCudaGraphCapture) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GemmShape s = packed_shape(DType::BFloat16, 64, 64, 64, false, true);
  s.epilogue = GemmEpilogue::kBiasGelu;
  expect_gemm_matches_reference(s, kBFloat16Tolerance, 12, RunMode::kGraphCapture);
}

TEST(CudaGemm, RunRejectsMisalignedOrMissingOperands) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GemmShape s = packed_shape(DType::Float16, 32, 32, 32);
  s.epilogue = GemmEpilogue::kBias;
  GpuContext gpu;
  ASSERT_TRUE(gpu.ok());
  const size_t matrix_bytes = size_t{32} * 32 * 2, row_bytes = size_t{32} * 2;
  // a has room for the misaligned view below.
  auto a = DeviceBuffer::allocate(matrix_bytes + 64), b = DeviceBuffer::allocate(matrix_bytes),
       c = DeviceBuffer::allocate(matrix_bytes), bias = DeviceBuffer::allocate(row_bytes);
  auto ws = DeviceBuffer::allocate(kGemmWorkspaceBytes);
  for (const auto* buf : {&a, &b, &c, &bias, &ws}) ASSERT_OK(buf->status());
  auto algo = tune_gemm(gpu.lt(), s, a->get(), b->get(), c->get(), bias->get(), ws->get(), ws->nbytes(), gpu.stream());
  ASSERT_OK(algo.status());
  auto op = GemmOp::create(gpu.lt(), s, *algo);
  ASSERT_OK(op.status());

  Status st = op->run(a->bytes() + 2, b->get(), c->get(), bias->get(), ws->get(), ws->nbytes(), gpu.stream());
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("operand a"), std::string::npos) << st.message();
  st = op->run(a->get(), b->get(), c->get(), nullptr, ws->get(), ws->nbytes(), gpu.stream());
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bias"), std::string::npos) << st.message();
  if (op->workspace_bytes() > 0) {
    st = op->run(a->get(), b->get(), c->get(), bias->get(), ws->get(), op->workspace_bytes() - 1, gpu.stream());
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(st.message().find("workspace"), std::string::npos) << st.message();
  }
  // The same op still runs with good arguments.
  ASSERT_OK(op->run(a->get(), b->get(), c->get(), bias->get(), ws->get(), ws->nbytes(), gpu.stream()));
  ASSERT_OK(cuda_status(cudaStreamSynchronize(gpu.stream()), "cudaStreamSynchronize"));

  // Bad arguments to tune_gemm fail before anything is timed.
  auto bad = tune_gemm(gpu.lt(), s, a->get(), b->get(), c->get(), nullptr, ws->get(), ws->nbytes(), gpu.stream());
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
}

TEST(CudaGemm, CreateRefusesADamagedAlgorithm) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GpuContext gpu;
  ASSERT_TRUE(gpu.ok());
  GemmAlgo algo;
  algo.data.fill(~uint64_t{0});  // no algorithm cuBLASLt knows
  auto op = GemmOp::create(gpu.lt(), packed_shape(DType::Float16, 32, 32, 32), algo);
  ASSERT_FALSE(op.has_value());
  EXPECT_EQ(op.status().code(), ErrorCode::kFormat) << op.status().to_string();
  EXPECT_NE(op.status().message().find("rebuild"), std::string::npos) << op.status().message();
}

}  // namespace
}  // namespace kiln::cuda
