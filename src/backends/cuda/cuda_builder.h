// The CUDA engine builder: a Network in, a CudaPlan out.
//
// It walks the layers once, giving every value a device layout (views cost
// nothing: they are new strides over the same bytes), and emits one step per
// layer that computes: a generated kernel, a cuBLASLt GEMM or a cuDNN
// convolution. Epilogues are folded first (GEMM + bias + ReLU, convolution +
// bias + residual + ReLU), then elementwise chains are fused. Memory is then
// planned over the steps' lifetimes into one arena, every generated kernel
// is compiled with NVRTC in one module, and every GEMM and convolution is
// timed on the device among the candidates cuBLASLt and cuDNN offer.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "backends/cuda/cuda_plan.h"
#include "backends/cuda/cuda_support.h"
#include "backends/cuda/kernel_source.h"
#include "engine/network.h"

namespace kiln::cuda {

struct BuildConfig {
  std::string precision = "fp32";  // fp32 | tf32 | fp16 | bf16
  DeviceInfo device;
  std::function<void(const std::string&)> progress;
  // Every size a generated kernel reads (up to kMaxKernelDims of them) is
  // passed at run time instead of compiled in: the form a kernel serving a
  // range of shapes takes, built here for fixed shapes so that it can be
  // checked against the compiled-in form.
  bool sizes_at_run_time = false;
};

// Builds the plan for `net` (rewritten in place: epilogues folded, elementwise fused).
Expected<CudaPlan> build_cuda_plan(engine::Network& net, const BuildConfig& config);

// Whether the CUDA builder has an implementation for `op` at all.
bool cuda_implements(ir::OpKind op);
// For a node of an implemented op: why this node cannot be built (empty when it can).
std::string cuda_refusal(const ir::Node& node);

// Engine-internal: a tensor's place and layout while the builder works.
struct TRef {
  BufferRef buf;  // region -2 - a: byte offset inside arena allocation a (resolved after planning)
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes, strides;
  int alloc() const { return buf.region <= -2 ? -2 - buf.region : -1; }
  StridedLayout layout() const { return {dtype, sizes, strides}; }
  bool contiguous() const { return layout().is_contiguous(); }
};

class Builder {
 public:
  Builder(engine::Network& net, BuildConfig config) : net_(net), config_(std::move(config)) {}
  Expected<CudaPlan> build();

  // ---- for the layer emitters (cuda_layers.cc)
  const BuildConfig& config() const { return config_; }
  // The dtype a value of IR dtype `t` is computed in (--precision fp16/bf16 turn float32 into it).
  DType compute_dtype(DType t) const;
  bool allow_tf32() const { return config_.precision == "tf32"; }
  Expected<TRef> ref(const ir::Value* v);
  // The device slot an engine input is copied into, in its IR dtype (before
  // any precision cast); nullopt for anything that is not an engine input.
  std::optional<TRef> input_slot(const ir::Value* v) const;
  void bind(const ir::Value* v, TRef r);
  TRef new_tensor(DType dtype, const std::vector<int64_t>& sizes, bool channels_last = false);
  Status launch(const std::string& layer, GeneratedKernel k, const std::vector<BufferRef>& args);
  void add_gemm(const std::string& layer, const GemmLaunch& g, std::initializer_list<const TRef*> uses);
  void add_conv(const std::string& layer, const ConvLaunch& c, std::initializer_list<const TRef*> uses);
  // `t` itself when contiguous, else a contiguous copy (dtype `to` when given).
  Expected<TRef> contiguous(const TRef& t, const std::string& layer, std::optional<DType> to = std::nullopt);
  Expected<TRef> channels_last(const TRef& t, const std::string& layer);
  // A constant's device copy in dtype `dtype` (channels-last filter when asked).
  // transposed_matrix: a 2-D constant stored as its transpose; the TRef keeps
  // the logical sizes with swapped strides (a column-major view).
  // pad_channels: a channels-last filter stored with that many input channels (zeros past its own).
  Expected<TRef> constant(const ir::Value* v, DType dtype, bool channels_last_filter = false,
                          bool transposed_matrix = false, int64_t pad_channels = 0);
  bool is_constant(const ir::Value* v) const;
  BufferRef error_word() const { return {-2 - error_alloc_, 0}; }
  int add_error_layer(const std::string& layer);

 private:
  struct Alloc {
    int64_t bytes = 0;
    int first = 0, last = 0;
    int64_t offset = -1;
  };
  void touch(const TRef& t);
  void add_step(Step s, std::initializer_list<const TRef*> uses);
  Status plan_memory();
  void resolve(BufferRef& r) const;
  Status compile_kernels();
  Status tune();

  engine::Network& net_;
  BuildConfig config_;
  CudaPlan plan_;
  std::vector<std::optional<TRef>> refs_;
  std::vector<std::optional<TRef>> input_slots_;  // by value id
  std::vector<Alloc> allocs_;
  std::vector<std::pair<GeneratedKernel, std::vector<bool>>> kernels_;  // and which sizes each reads at run time
  std::map<std::string, int> kernel_index_;
  std::map<std::tuple<std::string, DType, bool, bool, int64_t>, int> constant_index_;
  int error_alloc_ = -1;
};

// Emits the steps of one layer (cuda_layers.cc).
Status emit_layer(Builder& b, const ir::Node& n);

// Folds GEMM + bias (+ ReLU) and convolution + residual add (+ ReLU) into
// their producing layers' epilogues (cuda_epilogues.cc).
Status fold_epilogues(engine::Network& net);

}  // namespace kiln::cuda
