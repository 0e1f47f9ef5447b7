#include "backends/cuda/conv.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_support.h"
#include "kiln/dtype.h"

namespace kiln::cuda {
namespace {

// A shape with out_h / out_w filled in by PyTorch's formula.
ConvShape with_output_size(ConvShape s) {
  s.out_h = (s.h + 2 * s.pad_h - s.dilation_h * (s.r - 1) - 1) / s.stride_h + 1;
  s.out_w = (s.w + 2 * s.pad_w - s.dilation_w * (s.s - 1) - 1) / s.stride_w + 1;
  return s;
}

ConvShape small_shape() {
  ConvShape s;
  s.n = 1, s.c = 4, s.h = 8, s.w = 8, s.k = 8, s.r = 3, s.s = 3, s.pad_h = 1, s.pad_w = 1;
  return with_output_size(s);
}

// ---------------------------------------------------------------------------------------------------------------
// Shape checks (no GPU needed).

TEST(ConvShape, WrongOutHFailsValidateNamingOutH) {
  ConvShape s = small_shape();
  ASSERT_TRUE(s.validate().is_ok()) << s.validate().to_string();
  s.out_h = 9;  // PyTorch computes 8
  const Status st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("out_h"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("out_w"), std::string::npos) << st.message();
}

TEST(ConvShape, StridedOutputSizeIsPyTorchs) {
  ConvShape s = small_shape();
  s.stride_h = s.stride_w = 2;
  s.out_h = s.out_w = 4;  // (8 + 2 - 2 - 1) / 2 + 1
  EXPECT_TRUE(s.validate().is_ok()) << s.validate().to_string();
  s.out_w = 5;
  const Status st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("out_w"), std::string::npos) << st.message();
}

TEST(ConvShape, GroupsMustDivideChannelsAndFilters) {
  ConvShape s = small_shape();
  s.groups = 3;
  Status st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("groups"), std::string::npos) << st.message();
  s.groups = 4;
  s.k = 6;
  st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("k = 6"), std::string::npos) << st.message();
}

TEST(ConvShape, RejectsNonFloatDtypeAndBadSizes) {
  ConvShape s = small_shape();
  s.dtype = DType::Int32;
  Status st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("dtype"), std::string::npos) << st.message();
  s = small_shape();
  s.stride_h = 0;
  st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("stride_h"), std::string::npos) << st.message();
  s = small_shape();
  s.r = 20;  // window larger than the padded input
  st = s.validate();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("out_h"), std::string::npos) << st.message();
}

TEST(ConvShape, ToStringNamesLayoutAndEpilogue) {
  ConvShape s = small_shape();
  s.dtype = DType::Float16;
  s.channels_last = true;
  s.has_bias = s.has_residual = true;
  s.act = ConvActivation::kRelu;
  const std::string text = s.to_string();
  EXPECT_NE(text.find("nhwc"), std::string::npos) << text;
  EXPECT_NE(text.find("+bias +z relu"), std::string::npos) << text;
  EXPECT_NE(text.find("x[1,4,8,8]"), std::string::npos) << text;
}

TEST(ConvOp, CreateRefusesAnUnknownAlgorithm) {
  const Expected<ConvOp> op = ConvOp::create(nullptr, small_shape(), ConvAlgo{/*algo=*/99, 0, 0});
  ASSERT_FALSE(op.has_value());
  EXPECT_EQ(op.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(op.status().message().find("algorithm 99"), std::string::npos) << op.status().message();
}

// ---------------------------------------------------------------------------------------------------------------
// GPU: cuDNN against a direct double-precision convolution on the host.

class CudnnHandle {
 public:
  CudnnHandle() = default;
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  ~CudnnHandle() {
    if (h) cudnnDestroy(h);
  }
  cudnnHandle_t h = nullptr;
};

class Stream {
 public:
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (s) cudaStreamDestroy(s);
  }
  cudaStream_t s = nullptr;
};

// v rounded to what `dtype` stores, so host and device see the same inputs.
double stored_value(DType dtype, double v) {
  switch (dtype) {
    case DType::Float16: return static_cast<float>(Half(static_cast<float>(v)));
    case DType::BFloat16: return static_cast<float>(BFloat16(static_cast<float>(v)));
    default: return static_cast<float>(v);
  }
}

std::vector<double> random_values(size_t count, double scale, DType dtype, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-scale, scale);
  std::vector<double> out(count);
  for (double& v : out) v = stored_value(dtype, dist(rng));
  return out;
}

std::vector<uint8_t> encode(const std::vector<double>& values, DType dtype) {
  const size_t esize = dtype_size(dtype);
  std::vector<uint8_t> bytes(values.size() * esize);
  for (size_t i = 0; i < values.size(); ++i) {
    const float f = static_cast<float>(values[i]);
    uint16_t bits = 0;
    switch (dtype) {
      case DType::Float16: bits = Half(f).bits; break;
      case DType::BFloat16: bits = BFloat16(f).bits; break;
      default: std::memcpy(&bytes[i * esize], &f, sizeof(f)); continue;
    }
    std::memcpy(&bytes[i * esize], &bits, sizeof(bits));
  }
  return bytes;
}

std::vector<double> decode(const std::vector<uint8_t>& bytes, DType dtype) {
  const size_t esize = dtype_size(dtype);
  std::vector<double> out(bytes.size() / esize);
  for (size_t i = 0; i < out.size(); ++i) {
    if (dtype == DType::Float32) {
      float f;
      std::memcpy(&f, &bytes[i * esize], sizeof(f));
      out[i] = f;
      continue;
    }
    uint16_t bits;
    std::memcpy(&bits, &bytes[i * esize], sizeof(bits));
    if (dtype == DType::Float16) {
      Half hv;
      hv.bits = bits;
      out[i] = static_cast<float>(hv);
    } else {
      BFloat16 bv;
      bv.bits = bits;
      out[i] = static_cast<float>(bv);
    }
  }
  return out;
}

// Offset of logical element [a][b][i][j] of an A x B x I x J tensor: contiguous in that order, or with b
// innermost (NHWC for activations, K x R x S x C/groups for the filter) when channels_last.
size_t offset(bool channels_last, int64_t a, int64_t b, int64_t i, int64_t j, int64_t B, int64_t I, int64_t J) {
  return static_cast<size_t>(channels_last ? ((a * I + i) * J + j) * B + b : ((a * B + b) * I + i) * J + j);
}

// Logical (NCHW / KCRS) values rearranged into the layout the shape describes, and back.
std::vector<double> to_layout(const std::vector<double>& logical, bool channels_last, int64_t A, int64_t B, int64_t I,
                              int64_t J) {
  std::vector<double> out(logical.size());
  for (int64_t a = 0; a < A; ++a)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < I; ++i)
        for (int64_t j = 0; j < J; ++j)
          out[offset(channels_last, a, b, i, j, B, I, J)] = logical[offset(false, a, b, i, j, B, I, J)];
  return out;
}

std::vector<double> from_layout(const std::vector<double>& stored, bool channels_last, int64_t A, int64_t B, int64_t I,
                                int64_t J) {
  std::vector<double> out(stored.size());
  for (int64_t a = 0; a < A; ++a)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < I; ++i)
        for (int64_t j = 0; j < J; ++j)
          out[offset(false, a, b, i, j, B, I, J)] = stored[offset(channels_last, a, b, i, j, B, I, J)];
  return out;
}

// y = act(conv(x, w) + bias + z) by its definition, in double. x, z, y in NCHW, w in K x C/groups x R x S.
std::vector<double> reference_conv(const ConvShape& s, const std::vector<double>& x, const std::vector<double>& w,
                                   const std::vector<double>& bias, const std::vector<double>& z) {
  const int64_t cg = s.c / s.groups, kg = s.k / s.groups;
  std::vector<double> y(static_cast<size_t>(s.n * s.k * s.out_h * s.out_w));
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t k = 0; k < s.k; ++k)
      for (int64_t oh = 0; oh < s.out_h; ++oh)
        for (int64_t ow = 0; ow < s.out_w; ++ow) {
          const int64_t group = k / kg;
          double acc = 0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t kr = 0; kr < s.r; ++kr)
              for (int64_t ks = 0; ks < s.s; ++ks) {
                const int64_t ih = oh * s.stride_h - s.pad_h + kr * s.dilation_h;
                const int64_t iw = ow * s.stride_w - s.pad_w + ks * s.dilation_w;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                acc += x[offset(false, n, group * cg + ci, ih, iw, s.c, s.h, s.w)] *
                       w[offset(false, k, ci, kr, ks, cg, s.r, s.s)];
              }
          const size_t o = offset(false, n, k, oh, ow, s.k, s.out_h, s.out_w);
          if (s.has_bias) acc += bias[static_cast<size_t>(k)];
          if (s.has_residual) acc += z[o];
          if (s.act == ConvActivation::kRelu) acc = std::max(acc, 0.0);
          y[o] = acc;
        }
  return y;
}

Expected<DeviceBuffer> upload(const std::vector<uint8_t>& bytes) {
  KILN_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(bytes.size()));
  KILN_CUDA_TRY(cudaMemcpy(b.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  return b;
}

// Everything one convolution needs on the device, from seeded random inputs, with the host reference.
struct ConvProblem {
  ConvShape shape;
  std::vector<double> expected;  // logical NCHW
  DeviceBuffer x, w, bias, z, y, workspace;
  size_t y_bytes = 0;

  const void* bias_ptr() const { return shape.has_bias ? bias.get() : nullptr; }
  const void* z_ptr() const { return shape.has_residual ? z.get() : nullptr; }
};

Expected<ConvProblem> make_problem(const ConvShape& s, uint32_t seed) {
  ConvProblem p;
  p.shape = s;
  std::mt19937 rng(seed);
  const int64_t cg = s.c / s.groups;
  // Weights scaled by 1/sqrt(fan-in) keep outputs near 1, as in a trained network.
  const double w_scale = 1.0 / std::sqrt(static_cast<double>(cg * s.r * s.s));
  const auto x = random_values(static_cast<size_t>(s.n * s.c * s.h * s.w), 1.0, s.dtype, rng);
  const auto w = random_values(static_cast<size_t>(s.k * cg * s.r * s.s), w_scale, s.dtype, rng);
  const auto bias = s.has_bias ? random_values(static_cast<size_t>(s.k), 1.0, s.dtype, rng) : std::vector<double>{};
  const size_t y_count = static_cast<size_t>(s.n * s.k * s.out_h * s.out_w);
  const auto z = s.has_residual ? random_values(y_count, 1.0, s.dtype, rng) : std::vector<double>{};
  p.expected = reference_conv(s, x, w, bias, z);

  const bool cl = s.channels_last;
  KILN_ASSIGN_OR_RETURN(p.x, upload(encode(to_layout(x, cl, s.n, s.c, s.h, s.w), s.dtype)));
  KILN_ASSIGN_OR_RETURN(p.w, upload(encode(to_layout(w, cl, s.k, cg, s.r, s.s), s.dtype)));
  if (s.has_bias) {
    KILN_ASSIGN_OR_RETURN(p.bias, upload(encode(bias, s.dtype)));
  }
  if (s.has_residual) {
    KILN_ASSIGN_OR_RETURN(p.z, upload(encode(to_layout(z, cl, s.n, s.k, s.out_h, s.out_w), s.dtype)));
  }
  p.y_bytes = y_count * dtype_size(s.dtype);
  KILN_ASSIGN_OR_RETURN(p.y, DeviceBuffer::allocate(p.y_bytes));
  KILN_ASSIGN_OR_RETURN(p.workspace, DeviceBuffer::allocate(kConvWorkspaceBytes));
  return p;
}

// Reads y back into logical NCHW order.
Expected<std::vector<double>> read_output(const ConvProblem& p) {
  std::vector<uint8_t> bytes(p.y_bytes);
  KILN_CUDA_TRY(cudaMemcpy(bytes.data(), p.y.get(), p.y_bytes, cudaMemcpyDeviceToHost));
  const ConvShape& s = p.shape;
  return from_layout(decode(bytes, s.dtype), s.channels_last, s.n, s.k, s.out_h, s.out_w);
}

// |got - expected| <= atol + rtol * |expected| everywhere; reports the first few misses with their index.
void expect_close(const std::vector<double>& got, const std::vector<double>& expected, double atol, double rtol,
                  const ConvShape& s) {
  ASSERT_EQ(got.size(), expected.size());
  int misses = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - expected[i]);
    worst = std::max(worst, std::isnan(err) ? INFINITY : err);
    if (!(err <= atol + rtol * std::fabs(expected[i]))) {
      if (++misses <= 5) ADD_FAILURE() << s.to_string() << ": y[" << i << "] = " << got[i] << ", want " << expected[i];
    }
  }
  EXPECT_EQ(misses, 0) << "of " << got.size() << " outputs; largest error " << worst;
}

// A captured CUDA graph and its executable form.
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

struct CheckOptions {
  uint32_t seed = 1;
  bool may_be_unsupported = false;  // tuning may answer kUnsupported instead
  bool capture_in_graph = false;    // run() inside CUDA graph capture, then replay the graph
};

// Tunes the convolution, loads it with the recorded algorithm, runs it into a NaN-filled y on a stream
// (directly or by replaying a captured graph) and compares with the host reference.
void check_conv(const ConvShape& shape, double atol, double rtol, const CheckOptions& options = {}) {
  ASSERT_TRUE(shape.validate().is_ok()) << shape.validate().to_string();
  Expected<ConvProblem> problem = make_problem(shape, options.seed);
  ASSERT_TRUE(problem.has_value()) << problem.status().to_string();
  ConvProblem& p = *problem;
  CudnnHandle handle;
  ASSERT_EQ(cudnnCreate(&handle.h), CUDNN_STATUS_SUCCESS);
  Stream stream;
  ASSERT_EQ(cudaStreamCreate(&stream.s), cudaSuccess);

  const Expected<ConvAlgo> algo = tune_conv(handle.h, shape, p.x.get(), p.w.get(), p.bias_ptr(), p.z_ptr(), p.y.get(),
                                            p.workspace.get(), kConvWorkspaceBytes, stream.s);
  if (options.may_be_unsupported && !algo.has_value()) {
    EXPECT_EQ(algo.status().code(), ErrorCode::kUnsupported) << algo.status().to_string();
    std::cout << "[ unsupported ] " << algo.status().message() << "\n";
    return;
  }
  ASSERT_TRUE(algo.has_value()) << algo.status().to_string();
  EXPECT_LE(algo->workspace_bytes, kConvWorkspaceBytes);
  EXPECT_GE(algo->measured_ms, 0.0f);

  const Expected<ConvOp> op = ConvOp::create(handle.h, shape, *algo);
  ASSERT_TRUE(op.has_value()) << op.status().to_string();
  EXPECT_LE(op->workspace_bytes(), algo->workspace_bytes);
  ASSERT_EQ(cudnnSetStream(handle.h, stream.s), CUDNN_STATUS_SUCCESS);
  auto run = [&] {
    return op->run(p.x.get(), p.w.get(), p.bias_ptr(), p.z_ptr(), p.y.get(), p.workspace.get(), op->workspace_bytes());
  };
  Graph graph;
  if (options.capture_in_graph) {
    ASSERT_EQ(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal), cudaSuccess);
    const Status captured = run();
    const cudaError_t end = cudaStreamEndCapture(stream.s, &graph.graph);
    ASSERT_TRUE(captured.is_ok()) << captured.to_string();
    ASSERT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
    ASSERT_EQ(cudaGraphInstantiate(&graph.exec, graph.graph, 0), cudaSuccess);
  }
  // All-ones bytes are NaN in every float type: an output run() does not write cannot pass.
  ASSERT_EQ(cudaMemsetAsync(p.y.get(), 0xff, p.y_bytes, stream.s), cudaSuccess);
  if (options.capture_in_graph) {
    ASSERT_EQ(cudaGraphLaunch(graph.exec, stream.s), cudaSuccess);
  } else {
    const Status st = run();
    ASSERT_TRUE(st.is_ok()) << st.to_string();
  }
  ASSERT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);

  const Expected<std::vector<double>> got = read_output(p);
  ASSERT_TRUE(got.has_value()) << got.status().to_string();
  SCOPED_TRACE(shape.to_string() + ", algorithm " + std::to_string(algo->algo));
  expect_close(*got, p.expected, atol, rtol, shape);
}

ConvShape conv3x3(DType dtype, bool channels_last, int64_t n, int64_t c, int64_t hw, int64_t k) {
  ConvShape s;
  s.dtype = dtype;
  s.channels_last = channels_last;
  s.n = n, s.c = c, s.h = s.w = hw, s.k = k, s.r = s.s = 3, s.pad_h = s.pad_w = 1;
  return with_output_size(s);
}

TEST(CudaConv, Fp32NchwBiasRelu3x3) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ConvShape s = conv3x3(DType::Float32, /*channels_last=*/false, 2, 16, 16, 32);
  s.has_bias = true;
  s.act = ConvActivation::kRelu;
  s.allow_tf32 = false;
  check_conv(s, /*atol=*/1e-4, /*rtol=*/1e-4);
}

TEST(CudaConv, Fp16NhwcStride2BiasResidualRelu) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ConvShape s = conv3x3(DType::Float16, /*channels_last=*/true, 2, 32, 16, 64);
  s.stride_h = s.stride_w = 2;
  s.has_bias = s.has_residual = true;
  s.act = ConvActivation::kRelu;
  check_conv(with_output_size(s), /*atol=*/2e-2, /*rtol=*/1e-2);
}

TEST(CudaConv, Fp16NhwcDepthwise3x3) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ConvShape s = conv3x3(DType::Float16, /*channels_last=*/true, 2, 32, 16, 32);
  s.groups = 32;
  s.has_bias = true;
  s.act = ConvActivation::kRelu;
  check_conv(s, /*atol=*/2e-2, /*rtol=*/1e-2);
}

TEST(CudaConv, Fp32NchwGrouped4Bias) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ConvShape s = conv3x3(DType::Float32, /*channels_last=*/false, 2, 16, 12, 32);
  s.groups = 4;
  s.has_bias = true;  // no activation: the fused call (IMPLICIT_PRECOMP_GEMM only) or convolution + add
  check_conv(s, /*atol=*/1e-4, /*rtol=*/1e-4);
}

TEST(CudaConv, Fp16Nhwc1x1BiasOnly) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ConvShape s;
  s.dtype = DType::Float16;
  s.channels_last = true;
  s.n = 2, s.c = 64, s.h = s.w = 14, s.k = 32, s.r = s.s = 1;
  s.has_bias = true;
  check_conv(with_output_size(s), /*atol=*/2e-2, /*rtol=*/1e-2);
}

TEST(CudaConv, Fp16NhwcResNetStem7x7Stride2) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ConvShape s;
  s.dtype = DType::Float16;
  s.channels_last = true;
  s.n = 2, s.c = 3, s.h = s.w = 64, s.k = 64, s.r = s.s = 7;
  s.stride_h = s.stride_w = 2, s.pad_h = s.pad_w = 3;
  s.has_bias = true;
  s.act = ConvActivation::kRelu;
  check_conv(with_output_size(s), /*atol=*/2e-2, /*rtol=*/1e-2);
}

TEST(CudaConv, Bf16NhwcBiasRelu3x3) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ConvShape s = conv3x3(DType::BFloat16, /*channels_last=*/true, 2, 32, 12, 32);
  s.has_bias = true;
  s.act = ConvActivation::kRelu;
  check_conv(s, /*atol=*/3e-2, /*rtol=*/2e-2);
}

TEST(CudaConv, Fp16NhwcResidualReluWithoutBias) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ConvShape s = conv3x3(DType::Float16, /*channels_last=*/true, 1, 16, 12, 16);
  s.has_residual = true;  // no bias: convolution, then add z, then ReLU
  s.act = ConvActivation::kRelu;
  check_conv(s, /*atol=*/2e-2, /*rtol=*/1e-2);
}

TEST(CudaConv, Fp32NchwDilatedPlain) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ConvShape s = conv3x3(DType::Float32, /*channels_last=*/false, 1, 8, 15, 8);
  s.dilation_h = s.dilation_w = 2, s.pad_h = s.pad_w = 2;
  check_conv(with_output_size(s), /*atol=*/1e-4, /*rtol=*/1e-4);
}

// The runtime enqueues convolutions inside CUDA graph capture: both forms must capture and replay.
TEST(CudaConv, Fp16NhwcFusedFormReplaysFromCudaGraph) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ConvShape s = conv3x3(DType::Float16, /*channels_last=*/true, 2, 32, 12, 32);
  s.has_bias = s.has_residual = true;
  s.act = ConvActivation::kRelu;
  check_conv(s, /*atol=*/2e-2, /*rtol=*/1e-2, {.seed = 7, .capture_in_graph = true});
}

TEST(CudaConv, Fp16NhwcUnfusedFormReplaysFromCudaGraph) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ConvShape s = conv3x3(DType::Float16, /*channels_last=*/true, 2, 32, 12, 32);
  s.has_residual = true;  // no bias: convolution, add z, ReLU as three captured calls
  s.act = ConvActivation::kRelu;
  check_conv(s, /*atol=*/2e-2, /*rtol=*/1e-2, {.seed = 8, .capture_in_graph = true});
}

// cuDNN lacks some algorithms for fp32 NHWC: tuning either finds one that is right or says kUnsupported.
TEST(CudaConv, Fp32NhwcRunsOrIsUnsupported) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ConvShape s = conv3x3(DType::Float32, /*channels_last=*/true, 1, 16, 10, 16);
  s.has_bias = true;
  s.act = ConvActivation::kRelu;
  check_conv(s, /*atol=*/1e-4, /*rtol=*/1e-4, {.seed = 3, .may_be_unsupported = true});
}

TEST(CudaConv, RunRefusesMissingBiasAliasedResidualAndSmallWorkspace) {
  if (!kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ConvShape s = conv3x3(DType::Float16, /*channels_last=*/true, 1, 8, 8, 8);
  s.has_bias = s.has_residual = true;
  s.act = ConvActivation::kRelu;
  Expected<ConvProblem> problem = make_problem(s, 5);
  ASSERT_TRUE(problem.has_value()) << problem.status().to_string();
  const ConvProblem& p = *problem;
  CudnnHandle handle;
  ASSERT_EQ(cudnnCreate(&handle.h), CUDNN_STATUS_SUCCESS);
  const Expected<ConvAlgo> algo = tune_conv(handle.h, s, p.x.get(), p.w.get(), p.bias.get(), p.z.get(), p.y.get(),
                                            p.workspace.get(), kConvWorkspaceBytes, nullptr);
  ASSERT_TRUE(algo.has_value()) << algo.status().to_string();
  const Expected<ConvOp> op = ConvOp::create(handle.h, s, *algo);
  ASSERT_TRUE(op.has_value()) << op.status().to_string();
  const size_t ws = op->workspace_bytes();
  EXPECT_EQ(op->run(p.x.get(), p.w.get(), nullptr, p.z.get(), p.y.get(), p.workspace.get(), ws).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(op->run(p.x.get(), p.w.get(), p.bias.get(), p.y.get(), p.y.get(), p.workspace.get(), ws).code(),
            ErrorCode::kInvalidArgument);
  if (ws > 0) {
    EXPECT_EQ(op->run(p.x.get(), p.w.get(), p.bias.get(), p.z.get(), p.y.get(), p.workspace.get(), ws - 1).code(),
              ErrorCode::kInvalidArgument);
  }
  EXPECT_TRUE(op->run(p.x.get(), p.w.get(), p.bias.get(), p.z.get(), p.y.get(), p.workspace.get(), ws).is_ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace kiln::cuda
