#include "backends/cuda/conv.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <initializer_list>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace kiln::cuda {
namespace {

// cuDNN's convolution API answers a combination it has no kernel for (a layout, dtype, algorithm or
// fused form) with a NOT_SUPPORTED or BAD_PARAM sub-code. Arguments kiln controls are checked before
// every call, so both mean "cuDNN cannot run this convolution this way": kUnsupported, which lets the
// tuner try the next algorithm and the builder keep the node elsewhere.
Status conv_status(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return Status::ok();
  const int category = CUDNN_STATUS_CATEGORY(s);
  if (category != CUDNN_STATUS_NOT_SUPPORTED && category != CUDNN_STATUS_BAD_PARAM) return cudnn_status(s, what);
  std::string m = std::string(what) + ": " + cudnnGetErrorString(s);
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  if (detail[0] != '\0') m += std::string(" (") + detail + ")";
  return unsupported(m);
}

#define KILN_CONV_TRY(expr, what) KILN_TRY(conv_status((expr), what))

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// One cuDNN descriptor, created on init() and destroyed with its owner.
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() = default;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() {
    if (d_) Destroy(d_);
  }
  Status init(const char* what) {
    if (d_) return Status::ok();
    return conv_status(Create(&d_), what);
  }
  T get() const { return d_; }

 private:
  T d_ = nullptr;
};

using TensorDesc = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using ActivationDesc =
    Descriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;

Expected<cudnnDataType_t> conv_data_type(DType t) {
  switch (t) {
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    default: return invalid_argument("dtype " + std::string(dtype_name(t)) + " is not Float32, Float16 or BFloat16");
  }
}

// Tensor cores for the 16-bit types; for Float32, TF32 tensor cores only when allowed (FMA_MATH forbids them,
// as PyTorch does when torch.backends.cudnn.allow_tf32 is off).
cudnnMathType_t conv_math_type(const ConvShape& s) {
  if (s.dtype != DType::Float32 || s.allow_tf32) return CUDNN_TENSOR_OP_MATH;
  return CUDNN_FMA_MATH;
}

// cudnnConvolutionBiasActivationForward needs a bias, and with the identity activation it runs only
// IMPLICIT_PRECOMP_GEMM. Every other (form, algorithm) pair runs the plain convolution and adds bias,
// residual and ReLU after it with cuDNN's tensor ops; the tuner times both kinds and keeps the faster.
bool uses_fused_call(const ConvShape& s, cudnnConvolutionFwdAlgo_t algo) {
  return s.has_bias && (s.act == ConvActivation::kRelu || algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
}

// The descriptors of x, w, y, the bias and the convolution itself.
struct ConvDescriptors {
  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc conv;

  Status init(const ConvShape& s) {
    KILN_ASSIGN_OR_RETURN(const cudnnDataType_t dt, conv_data_type(s.dtype));
    const cudnnTensorFormat_t format = s.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    // validate() has checked every size fits an int.
    auto i = [](int64_t v) { return static_cast<int>(v); };
    KILN_TRY(x.init("cudnnCreateTensorDescriptor"));
    KILN_CONV_TRY(cudnnSetTensor4dDescriptor(x.get(), format, dt, i(s.n), i(s.c), i(s.h), i(s.w)),
                  "cudnnSetTensor4dDescriptor(x)");
    KILN_TRY(y.init("cudnnCreateTensorDescriptor"));
    KILN_CONV_TRY(cudnnSetTensor4dDescriptor(y.get(), format, dt, i(s.n), i(s.k), i(s.out_h), i(s.out_w)),
                  "cudnnSetTensor4dDescriptor(y)");
    KILN_TRY(w.init("cudnnCreateFilterDescriptor"));
    KILN_CONV_TRY(cudnnSetFilter4dDescriptor(w.get(), dt, format, i(s.k), i(s.c / s.groups), i(s.r), i(s.s)),
                  "cudnnSetFilter4dDescriptor(w)");
    if (s.has_bias) {
      KILN_TRY(bias.init("cudnnCreateTensorDescriptor"));
      KILN_CONV_TRY(cudnnSetTensor4dDescriptor(bias.get(), format, dt, 1, i(s.k), 1, 1),
                    "cudnnSetTensor4dDescriptor(bias)");
    }
    KILN_TRY(conv.init("cudnnCreateConvolutionDescriptor"));
    KILN_CONV_TRY(
        cudnnSetConvolution2dDescriptor(conv.get(), i(s.pad_h), i(s.pad_w), i(s.stride_h), i(s.stride_w),
                                        i(s.dilation_h), i(s.dilation_w), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        "cudnnSetConvolution2dDescriptor");
    KILN_CONV_TRY(cudnnSetConvolutionGroupCount(conv.get(), i(s.groups)), "cudnnSetConvolutionGroupCount");
    KILN_CONV_TRY(cudnnSetConvolutionMathType(conv.get(), conv_math_type(s)), "cudnnSetConvolutionMathType");
    // The output size validate() checked against PyTorch's formula must be cuDNN's too.
    int on = 0, oc = 0, oh = 0, ow = 0;
    KILN_CONV_TRY(cudnnGetConvolution2dForwardOutputDim(conv.get(), x.get(), w.get(), &on, &oc, &oh, &ow),
                  "cudnnGetConvolution2dForwardOutputDim");
    if (on != s.n || oc != s.k || oh != s.out_h || ow != s.out_w) {
      return internal_error("cuDNN computes output [" + std::to_string(on) + "," + std::to_string(oc) + "," +
                            std::to_string(oh) + "," + std::to_string(ow) + "], not the shape's");
    }
    return Status::ok();
  }
};

Status check_buffers(const ConvShape& s, const void* x, const void* w, const void* bias, const void* z, const void* y) {
  if (!x || !w || !y) return invalid_argument("x, w and y must all be device pointers (one is null)");
  if (s.has_bias && !bias) return invalid_argument("has_bias is set but bias is null");
  if (s.has_residual && !z) return invalid_argument("has_residual is set but z is null");
  // Both forms may write y before they read z (the plain path does; the fused call may, depending on the
  // algorithm), so a residual aliasing the output would be read after it was overwritten.
  if (s.has_residual && z == y) return invalid_argument("z aliases y; the residual must be its own buffer");
  return Status::ok();
}

// The handle's stream, put back when tuning returns.
class StreamRestore {
 public:
  StreamRestore(cudnnHandle_t h, cudaStream_t previous) : h_(h), previous_(previous) {}
  StreamRestore(const StreamRestore&) = delete;
  StreamRestore& operator=(const StreamRestore&) = delete;
  ~StreamRestore() { cudnnSetStream(h_, previous_); }

 private:
  cudnnHandle_t h_;
  cudaStream_t previous_;
};

}  // namespace

std::string ConvShape::to_string() const {
  auto d = [](int64_t v) { return std::to_string(v); };
  const int64_t cg = groups > 0 ? c / groups : c;
  std::string out = "conv2d " + std::string(dtype_name(dtype)) + (channels_last ? " nhwc" : " nchw");
  out += " x[" + d(n) + "," + d(c) + "," + d(h) + "," + d(w) + "]";
  out += " w[" + d(k) + "," + d(cg) + "," + d(r) + "," + d(s) + "]";
  out += " stride " + d(stride_h) + "x" + d(stride_w) + " pad " + d(pad_h) + "x" + d(pad_w) + " dilation " +
         d(dilation_h) + "x" + d(dilation_w) + " groups " + d(groups);
  out += " -> y[" + d(n) + "," + d(k) + "," + d(out_h) + "," + d(out_w) + "]";
  if (has_bias) out += " +bias";
  if (has_residual) out += " +z";
  if (act == ConvActivation::kRelu) out += " relu";
  if (dtype == DType::Float32 && allow_tf32) out += " tf32";
  return out;
}

Status ConvShape::validate() const {
  auto bad = [&](const std::string& what) { return invalid_argument(to_string() + ": " + what); };
  if (dtype != DType::Float32 && dtype != DType::Float16 && dtype != DType::BFloat16) {
    return bad("dtype " + std::string(dtype_name(dtype)) + " is not Float32, Float16 or BFloat16");
  }
  struct Field {
    const char* name;
    int64_t value;
    int64_t min;
  };
  const Field fields[] = {{"n", n, 1},
                          {"c", c, 1},
                          {"h", h, 1},
                          {"w", w, 1},
                          {"k", k, 1},
                          {"r", r, 1},
                          {"s", s, 1},
                          {"groups", groups, 1},
                          {"stride_h", stride_h, 1},
                          {"stride_w", stride_w, 1},
                          {"pad_h", pad_h, 0},
                          {"pad_w", pad_w, 0},
                          {"dilation_h", dilation_h, 1},
                          {"dilation_w", dilation_w, 1}};
  for (const Field& f : fields) {
    if (f.value < f.min) {
      return bad(std::string(f.name) + " is " + std::to_string(f.value) + ", must be at least " +
                 std::to_string(f.min));
    }
    if (f.value > INT_MAX) {
      return unsupported(to_string() + ": " + f.name + " is " + std::to_string(f.value) +
                         ", beyond cuDNN's 32-bit descriptors");
    }
  }
  if (c % groups != 0)
    return bad("c = " + std::to_string(c) + " is not divisible by groups = " + std::to_string(groups));
  if (k % groups != 0)
    return bad("k = " + std::to_string(k) + " is not divisible by groups = " + std::to_string(groups));
  // PyTorch: out = (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1, the window fitting at least once.
  auto check_out = [&](const char* name, int64_t out, int64_t in, int64_t pad, int64_t dilation, int64_t kernel,
                       int64_t stride) -> Status {
    const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
    if (span < 0) {
      return bad(std::string("the dilated window (") + std::to_string(dilation * (kernel - 1) + 1) +
                 ") is larger than the padded input (" + std::to_string(in + 2 * pad) + "), so " + name +
                 " would be empty");
    }
    const int64_t expected = span / stride + 1;
    if (out != expected) {
      return bad(std::string(name) + " is " + std::to_string(out) + " but PyTorch computes " +
                 std::to_string(expected) + " from the input size, kernel, stride, padding and dilation");
    }
    return Status::ok();
  };
  KILN_TRY(check_out("out_h", out_h, h, pad_h, dilation_h, r, stride_h));
  KILN_TRY(check_out("out_w", out_w, w, pad_w, dilation_w, s, stride_w));
  // cuDNN's legacy descriptors hold sizes and strides as int.
  auto fits = [](std::initializer_list<int64_t> factors) {
    int64_t product = 1;
    for (int64_t f : factors) {
      product *= f;  // each factor and the product so far are at most INT_MAX: no overflow
      if (product > INT_MAX) return false;
    }
    return true;
  };
  if (!fits({n, c, h, w}) || !fits({n, k, out_h, out_w}) || !fits({k, c / groups, r, s})) {
    return unsupported(to_string() + ": a tensor has more than INT_MAX elements, beyond cuDNN's 32-bit descriptors");
  }
  return Status::ok();
}

struct ConvOp::Impl {
  cudnnHandle_t handle = nullptr;
  ConvShape shape;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  bool fused = false;
  size_t workspace_bytes = 0;
  ConvDescriptors d;
  ActivationDesc act;  // set when fused or when the plain path applies a ReLU
};

ConvOp::ConvOp(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ConvOp::ConvOp(ConvOp&&) noexcept = default;
ConvOp& ConvOp::operator=(ConvOp&&) noexcept = default;
ConvOp::~ConvOp() = default;

size_t ConvOp::workspace_bytes() const { return impl_ ? impl_->workspace_bytes : 0; }

const ConvShape& ConvOp::shape() const {
  static const ConvShape kEmpty;
  return impl_ ? impl_->shape : kEmpty;
}

Expected<ConvOp> ConvOp::create(cudnnHandle_t h, const ConvShape& shape, const ConvAlgo& algo) {
  KILN_TRY(shape.validate());
  const std::string where = shape.to_string();
  if (algo.algo < 0 || algo.algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT) {
    return invalid_argument(where + ": algorithm " + std::to_string(algo.algo) +
                            " is not a cuDNN forward convolution algorithm (0.." +
                            std::to_string(CUDNN_CONVOLUTION_FWD_ALGO_COUNT - 1) + ")");
  }
  if (!h) return invalid_argument(where + ": null cuDNN handle");
  auto m = std::make_unique<Impl>();
  m->handle = h;
  m->shape = shape;
  m->algo = static_cast<cudnnConvolutionFwdAlgo_t>(algo.algo);
  m->fused = uses_fused_call(shape, m->algo);
  KILN_TRY_CTX(m->d.init(shape), where);
  if (m->fused || shape.act == ConvActivation::kRelu) {
    KILN_TRY_CTX(m->act.init("cudnnCreateActivationDescriptor"), where);
    const cudnnActivationMode_t mode =
        shape.act == ConvActivation::kRelu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY;
    // The fused call has long accepted only NOT_PROPAGATE_NAN for its ReLU (TensorFlow's fused convolution
    // notes the same); the standalone activation propagates NaN as torch.relu does.
    const cudnnNanPropagation_t nan = m->fused ? CUDNN_NOT_PROPAGATE_NAN : CUDNN_PROPAGATE_NAN;
    KILN_TRY_CTX(
        conv_status(cudnnSetActivationDescriptor(m->act.get(), mode, nan, 0.0), "cudnnSetActivationDescriptor"), where);
  }
  KILN_TRY_CTX(conv_status(cudnnGetConvolutionForwardWorkspaceSize(h, m->d.x.get(), m->d.w.get(), m->d.conv.get(),
                                                                   m->d.y.get(), m->algo, &m->workspace_bytes),
                           "cudnnGetConvolutionForwardWorkspaceSize"),
               where + ", algorithm " + std::to_string(algo.algo));
  if (m->workspace_bytes > algo.workspace_bytes) {
    return unsupported(where + ": algorithm " + std::to_string(algo.algo) + " needs " +
                       std::to_string(m->workspace_bytes) + " bytes of workspace with this cuDNN, but the plan " +
                       "recorded " + std::to_string(algo.workspace_bytes) +
                       " (built with another cuDNN version?); rebuild the plan");
  }
  return ConvOp(std::move(m));
}

Status ConvOp::run(const void* x, const void* w, const void* bias, const void* z, void* y, void* workspace,
                   size_t workspace_bytes) const {
  if (!impl_) return internal_error("ConvOp::run on a moved-from ConvOp");
  const Impl& m = *impl_;
  const ConvShape& s = m.shape;
  if (Status st = check_buffers(s, x, w, bias, z, y); !st) return std::move(st).with_context(s.to_string());
  if (workspace_bytes < m.workspace_bytes || (m.workspace_bytes > 0 && !workspace)) {
    return invalid_argument(s.to_string() + ": the algorithm needs " + std::to_string(m.workspace_bytes) +
                            " bytes of workspace, given " + std::to_string(workspace ? workspace_bytes : 0));
  }
  // Scaling factors are float for float, half and bfloat16 data.
  const float one = 1.0f, zero = 0.0f;
  Status st;
  if (m.fused) {
    // Without a residual, alpha2 = 0 and cuDNN reads no z; it still wants a valid tensor, so y stands in.
    const float alpha2 = s.has_residual ? 1.0f : 0.0f;
    st = conv_status(
        cudnnConvolutionBiasActivationForward(m.handle, &one, m.d.x.get(), x, m.d.w.get(), w, m.d.conv.get(), m.algo,
                                              workspace, workspace_bytes, &alpha2, m.d.y.get(), s.has_residual ? z : y,
                                              m.d.bias.get(), bias, m.act.get(), m.d.y.get(), y),
        "cudnnConvolutionBiasActivationForward");
  } else {
    st = conv_status(cudnnConvolutionForward(m.handle, &one, m.d.x.get(), x, m.d.w.get(), w, m.d.conv.get(), m.algo,
                                             workspace, workspace_bytes, &zero, m.d.y.get(), y),
                     "cudnnConvolutionForward");
    if (st && s.has_bias) {
      st = conv_status(cudnnAddTensor(m.handle, &one, m.d.bias.get(), bias, &one, m.d.y.get(), y),
                       "cudnnAddTensor(bias)");
    }
    if (st && s.has_residual) {
      st = conv_status(cudnnAddTensor(m.handle, &one, m.d.y.get(), z, &one, m.d.y.get(), y), "cudnnAddTensor(z)");
    }
    if (st && s.act == ConvActivation::kRelu) {
      st = conv_status(cudnnActivationForward(m.handle, m.act.get(), &one, m.d.y.get(), y, &zero, m.d.y.get(), y),
                       "cudnnActivationForward(relu)");
    }
  }
  if (!st) return std::move(st).with_context(s.to_string() + ", algorithm " + std::to_string(static_cast<int>(m.algo)));
  return Status::ok();
}

Expected<ConvAlgo> tune_conv(cudnnHandle_t h, const ConvShape& shape, const void* x, const void* w, const void* bias,
                             const void* z, void* y, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                             int quick) {
  KILN_TRY(shape.validate());
  const std::string where = "tuning " + shape.to_string();
  if (!h) return invalid_argument(where + ": null cuDNN handle");
  KILN_TRY_CTX(check_buffers(shape, x, w, bias, z, y), where);
  if (workspace_bytes > 0 && !workspace) return invalid_argument(where + ": workspace_bytes > 0 but workspace is null");

  cudaStream_t previous = nullptr;
  KILN_CONV_TRY(cudnnGetStream(h, &previous), "cudnnGetStream");
  KILN_CONV_TRY(cudnnSetStream(h, stream), "cudnnSetStream");
  const StreamRestore restore(h, previous);

  ConvDescriptors d;
  KILN_TRY_CTX(d.init(shape), where);
  int max_count = 0;
  KILN_CONV_TRY(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count),
                "cudnnGetConvolutionForwardAlgorithmMaxCount");
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(static_cast<size_t>(std::max(max_count, 1)));
  int returned = 0;
  const bool trace = tuning_traced();
  const auto find_start = std::chrono::steady_clock::now();
  if (quick > 0) {
    KILN_TRY_CTX(
        conv_status(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                           static_cast<int>(perfs.size()), &returned, perfs.data()),
                    "cudnnGetConvolutionForwardAlgorithm_v7"),
        where);
  } else {
    KILN_TRY_CTX(conv_status(cudnnFindConvolutionForwardAlgorithmEx(
                                 h, d.x.get(), x, d.w.get(), w, d.conv.get(), d.y.get(), y,
                                 static_cast<int>(perfs.size()), &returned, perfs.data(), workspace, workspace_bytes),
                             "cudnnFindConvolutionForwardAlgorithmEx"),
                 where);
  }

  if (trace)
    std::fprintf(stderr, "kiln: tuning %s: %s gave %d algorithms in %.1f ms\n", shape.to_string().c_str(),
                 quick > 0 ? "heuristic" : "find", returned, ms_since(find_start));
  // cuDNN timed the bare convolution; time what run() will enqueue (fused or followed by bias, residual and
  // ReLU) for every algorithm that ran, since the fused call does not support every algorithm and form.
  std::optional<ConvAlgo> best;
  std::set<int> tried;
  std::string skipped;
  auto skip = [&](int algo, const std::string& why) {
    skipped += (skipped.empty() ? "" : "; ") + std::string("algorithm ") + std::to_string(algo) + ": " + why;
  };
  for (int i = 0; i < std::min(returned, static_cast<int>(perfs.size())); ++i) {
    const cudnnConvolutionFwdAlgoPerf_t& p = perfs[static_cast<size_t>(i)];
    const int algo = static_cast<int>(p.algo);
    if (tried.count(algo) != 0) continue;  // cuDNN may list an algorithm once per math type
    if (quick > 0 && static_cast<int>(tried.size()) >= quick) break;
    if (p.status != CUDNN_STATUS_SUCCESS) {
      skip(algo, cudnnGetErrorString(p.status));
      continue;
    }
    if (p.memory > workspace_bytes) {
      skip(algo, "needs " + std::to_string(p.memory) + " bytes of workspace");
      continue;
    }
    tried.insert(algo);
    const auto candidate_start = std::chrono::steady_clock::now();
    // A candidate cuDNN refuses (kUnsupported, or an internal error that left CUDA healthy: cuDNN's fused
    // call is not uniform across algorithms) is skipped; bad arguments or a broken CUDA context end tuning.
    Expected<ConvOp> op = ConvOp::create(h, shape, ConvAlgo{algo, workspace_bytes, 0});
    if (!op) {
      if (op.status().code() == ErrorCode::kInvalidArgument) return op.status();
      skip(algo, op.status().message());
      continue;
    }
    Expected<float> ms = time_on_stream(stream, /*warmup=*/quick > 0 ? 1 : 2, /*reps=*/quick > 0 ? 3 : 10,
                                        [&] { return op->run(x, w, bias, z, y, workspace, workspace_bytes); });
    if (!ms) {
      if (ms.status().code() == ErrorCode::kInvalidArgument) return std::move(ms).status().with_context(where);
      if (ms.status().code() != ErrorCode::kUnsupported) {
        KILN_TRY_CTX(cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize"),
                     where + ", after algorithm " + std::to_string(algo) + " failed: " + ms.status().message());
      }
      skip(algo, ms.status().message());
      continue;
    }
    if (trace)
      std::fprintf(stderr, "kiln:   algorithm %d: %.3f ms a run, %.1f ms to create and time\n", algo, *ms,
                   ms_since(candidate_start));
    if (!best || *ms < best->measured_ms) best = ConvAlgo{algo, op->workspace_bytes(), *ms};
  }
  if (!best) {
    return unsupported(where + ": no cuDNN algorithm runs it within " + std::to_string(workspace_bytes) +
                       " bytes of workspace" + (skipped.empty() ? std::string() : " (" + skipped + ")"));
  }
  return *best;
}

Expected<ConvAlgo> pick_conv(cudnnHandle_t h, const ConvShape& shape, std::optional<int> preferred,
                             size_t workspace_bytes) {
  KILN_TRY(shape.validate());
  const std::string where = "choosing an algorithm for " + shape.to_string();
  if (!h) return invalid_argument(where + ": null cuDNN handle");
  std::string skipped;
  auto usable = [&](int algo) -> std::optional<ConvAlgo> {
    Expected<ConvOp> op = ConvOp::create(h, shape, ConvAlgo{algo, workspace_bytes, 0});
    if (!op) {
      skipped += (skipped.empty() ? "" : "; ") + std::string("algorithm ") + std::to_string(algo) + ": " +
                 op.status().message();
      return std::nullopt;
    }
    return ConvAlgo{algo, op->workspace_bytes(), 0};
  };
  if (preferred)
    if (std::optional<ConvAlgo> a = usable(*preferred)) return *a;
  ConvDescriptors d;
  KILN_TRY_CTX(d.init(shape), where);
  int max_count = 0;
  KILN_CONV_TRY(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count),
                "cudnnGetConvolutionForwardAlgorithmMaxCount");
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(static_cast<size_t>(std::max(max_count, 1)));
  int returned = 0;
  KILN_TRY_CTX(
      conv_status(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                         static_cast<int>(perfs.size()), &returned, perfs.data()),
                  "cudnnGetConvolutionForwardAlgorithm_v7"),
      where);
  std::set<int> tried;
  if (preferred) tried.insert(*preferred);
  for (int i = 0; i < std::min(returned, static_cast<int>(perfs.size())); ++i) {
    const cudnnConvolutionFwdAlgoPerf_t& p = perfs[static_cast<size_t>(i)];
    const int algo = static_cast<int>(p.algo);
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > workspace_bytes || !tried.insert(algo).second) continue;
    if (std::optional<ConvAlgo> a = usable(algo)) return *a;
  }
  return unsupported(where + ": no cuDNN algorithm runs it within " + std::to_string(workspace_bytes) +
                     " bytes of workspace" + (skipped.empty() ? std::string() : " (" + skipped + ")"));
}

}  // namespace kiln::cuda
