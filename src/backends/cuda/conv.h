// 2-D convolution on the GPU through cuDNN's convolution API:
//   y = act(conv(x, w) + bias + z)
// with the bias, the residual z and the ReLU fused into the convolution where
// cuDNN can (cudnnConvolutionBiasActivationForward), and otherwise applied by
// cuDNN's tensor ops after it. The algorithm is chosen at build time by timing
// (tune_conv) and recorded; at load time ConvOp rebuilds the descriptors for
// that algorithm and enqueues it without allocating or synchronizing.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backends/cuda/cuda_support.h"
#include "kiln/dtype.h"
#include "kiln/status.h"

namespace kiln::cuda {

enum class ConvActivation { kNone, kRelu };

// y = act(conv(x, w) + bias + z): 2-D convolution, cross-correlation like PyTorch.
struct ConvShape {
  DType dtype = DType::Float32;        // x, w, bias, z, y: Float32, Float16 or BFloat16
  bool allow_tf32 = false;             // Float32 only (ignored for the 16-bit types, which always use tensor cores)
  int64_t n = 0, c = 0, h = 0, w = 0;  // input
  int64_t k = 0, r = 0, s = 0;         // k filters of r x s over c/groups channels
  int64_t groups = 1;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t out_h = 0, out_w = 0;  // as PyTorch computes them; validate() checks them
  // Layout of x, z and y: NCHW-contiguous when false, NHWC (channels-last: strides [H*W*C, 1, W*C, C] for
  // logical NCHW sizes) when true. The filter w is always given in PyTorch's logical order K x C/groups x R x S;
  // when channels_last it is stored K x R x S x C/groups (the caller converts weights once at load time).
  bool channels_last = false;
  bool has_bias = false;      // bias: k values
  bool has_residual = false;  // z: same shape and layout as y, added before the activation
  ConvActivation act = ConvActivation::kNone;

  // "conv2d float16 nhwc x[8,64,56,56] w[64,64,3,3] stride 1x1 pad 1x1 dilation 1x1 groups 1 -> y[8,64,56,56]
  // +bias +z relu".
  std::string to_string() const;
  // kInvalidArgument naming the bad field (dtype, a size, groups, stride, pad, dilation, out_h, out_w);
  // kUnsupported for a size beyond cuDNN's 32-bit descriptors.
  Status validate() const;
};

// One recorded algorithm choice, stored in the engine plan.
struct ConvAlgo {
  int algo = 0;  // cudnnConvolutionFwdAlgo_t
  size_t workspace_bytes = 0;
  float measured_ms = 0;
};

// Build time: times the algorithms cuDNN offers for `shape` on the given buffers (workspace up to
// workspace_bytes), keeping the fastest one that supports the fused form requested.
//   h:         cuDNN handle of the current device; its stream is set to `stream` while tuning and restored after.
//   shape:     the convolution; must validate().
//   x, w:      device input and filter (filter in the layout `shape` describes).
//   bias, z:   device bias (k values) and residual, or null where `shape` has none.
//   y:         device output, overwritten many times; z must not alias it.
//   workspace: device scratch of workspace_bytes (null when 0); algorithms needing more are skipped.
//   stream:    where the timed work runs; the call synchronizes it.
// The measured time is that of ConvOp::run for the chosen algorithm, bias, residual and activation included.
// kUnsupported when no algorithm cuDNN offers runs this convolution (e.g. a layout cuDNN lacks for the dtype).
// With `quick` > 0, only the first `quick` algorithms of cuDNN's heuristic
// are timed (briefly), not every algorithm cuDNN finds: a range build's
// timing at the ends of its range.
Expected<ConvAlgo> tune_conv(cudnnHandle_t h, const ConvShape& shape, const void* x, const void* w, const void* bias,
                             const void* z, void* y, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                             int quick = 0);

// Run time, for a convolution shape no build timed (a new size of an engine
// built for a range): `preferred` (the algorithm the build timed for the same
// layer at another size) when cuDNN runs this shape with it within
// workspace_bytes, else the first of cuDNN's heuristic (_v7) that does; no
// convolution is run or timed. kUnsupported when none fits.
Expected<ConvAlgo> pick_conv(cudnnHandle_t h, const ConvShape& shape, std::optional<int> preferred,
                             size_t workspace_bytes);

// Load time: descriptors for one convolution with a recorded algorithm.
class ConvOp {
 public:
  // h: the cuDNN handle run() will use. Fails with kInvalidArgument for a bad shape or algorithm number, and
  // with kUnsupported when this cuDNN rejects the descriptors or needs more workspace for the algorithm than
  // the plan recorded (a plan built with another cuDNN). With a bias and ReLU, or a bias and
  // IMPLICIT_PRECOMP_GEMM, run() is one cudnnConvolutionBiasActivationForward; otherwise it is
  // cudnnConvolutionForward followed by cudnnAddTensor (bias, then z) and cudnnActivationForward as needed.
  static Expected<ConvOp> create(cudnnHandle_t h, const ConvShape& shape, const ConvAlgo& algo);

  ConvOp(ConvOp&&) noexcept;
  ConvOp& operator=(ConvOp&&) noexcept;
  ConvOp(const ConvOp&) = delete;
  ConvOp& operator=(const ConvOp&) = delete;
  ~ConvOp();

  // Enqueues on the handle's stream (set by the caller with cudnnSetStream; this does not allocate or
  // synchronize: it is called inside CUDA graph capture). Pointers are device pointers, null where unused
  // (bias without has_bias, z without has_residual, workspace when workspace_bytes() is 0). No input may
  // alias y (z == y is refused). workspace_bytes must be at least workspace_bytes().
  Status run(const void* x, const void* w, const void* bias, const void* z, void* y, void* workspace,
             size_t workspace_bytes) const;

  // The workspace this algorithm needs, as cuDNN reports it here.
  size_t workspace_bytes() const;
  const ConvShape& shape() const;

 private:
  struct Impl;
  explicit ConvOp(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;  // owns every cuDNN descriptor
};

// The workspace the builder offers each convolution while tuning.
constexpr size_t kConvWorkspaceBytes = size_t{64} << 20;

}  // namespace kiln::cuda
