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
#include "backends/cuda/nvrtc_compile.h"
#include "engine/memory_plan.h"
#include "engine/network.h"

namespace kiln::cuda {

struct BuildConfig {
  Precision precision = Precision::kFp32;
  DeviceInfo device;
  std::function<void(const std::string&)> progress;
  // Every size a generated kernel reads (up to kMaxKernelDims of them) is
  // passed at run time instead of compiled in: the form a kernel serving a
  // range of shapes takes, built here for fixed shapes so that it can be
  // checked against the compiled-in form.
  bool sizes_at_run_time = false;
  // The range of every size symbol (a network with symbolic sizes builds one
  // plan serving the whole range, tuned at each symbol's opt).
  std::map<std::string, ir::SymbolRange> symbols;
  // engine::BuildOptions::passes: the network passes' context.
  ir::PassContext passes;
};

// A generated kernel with which of its sizes it reads at run time.
using KernelChoice = std::pair<GeneratedKernel, std::vector<bool>>;

// What an engine knows a compiled kernel by: SHA-256 of its text (or its
// template instance), which sizes it reads at run time and the values of the
// others, in hex.
std::string kernel_key(const KernelChoice& k);
// The same from the kernel's identity_digest (SHA-256 of its identity, in
// hex), its sizes and which of them it reads at run time.
std::string kernel_key(const std::string& identity, const std::vector<int64_t>& dims, const std::vector<bool>& runtime);
std::string identity_digest(const GeneratedKernel& k);

// GEMM and convolution algorithms chosen by timing, by shape (the shape's
// to_string(), which names every field): steps of one shape (a decoder's
// layers) are timed once, at build and at each new shape of a range engine.
struct TunedAlgos {
  std::map<std::string, GemmAlgo> gemms;
  std::map<std::string, ConvAlgo> convs;
};

// The algorithm remembered in `tuned` for the shape `key`, else `tune()`'s,
// then remembered.
template <typename Algo, typename Tune>
Expected<Algo> tuned_once(std::map<std::string, Algo>& tuned, const std::string& key, Tune&& tune) {
  if (auto it = tuned.find(key); it != tuned.end()) return it->second;
  Expected<Algo> a = tune();
  if (a) tuned.emplace(key, *a);
  return a;
}

// The algorithm of a GEMM or convolution step, nothing timed: the one
// `tuned` remembers for its shape, else for a GEMM the first of cuBLASLt's
// heuristic, for a convolution the algorithm `by_layer` gives its layer
// where cuDNN runs it at this size, else cuDNN's heuristic (remembered in
// `tuned`), within workspace_bytes. Set in the step; true when chosen anew.
Expected<bool> choose_algorithm(Step& step, cublasLtHandle_t lt, cudnnHandle_t dnn,
                                const std::map<std::string, int>& by_layer, TunedAlgos& tuned, size_t workspace_bytes);

// `kernels` compiled with NVRTC into one module for `arch`: a kernel written
// as text is named names[i]; a template instance's names[i] is replaced by
// its name in the module (NVRTC's lowered name).
Expected<CompiledModule> compile_kernels(const std::vector<const KernelChoice*>& kernels,
                                         std::vector<std::string>& names, const std::string& arch);

// Builds the plan for `net`. A network with fixed sizes is rewritten in
// place (epilogues folded, elementwise fused). One with symbolic sizes is
// left as it is (a range plan keeps it to make each shape's steps from) and
// gets a plan for the range config.symbols gives: the steps at every
// symbol's opt, tuned there, with the kernels of the shapes at min, opt and
// max compiled, every size they read passed at run time. kUnsupported when
// a symbol has no finite range or no engine input's size gives its value.
Expected<CudaPlan> build_cuda_plan(engine::Network& net, const BuildConfig& config);

// The steps of range network `net` at one shape: a copy specialized to
// `bindings`, epilogues folded and elementwise chains fused on it, emitted
// with every generated kernel reading its sizes at run time, memory planned;
// kernels not compiled (`kernels`, indexed by the steps), GEMMs and
// convolutions not timed.
struct ShapePlan {
  CudaPlan plan;
  std::vector<KernelChoice> kernels;
  std::vector<std::string> identities;  // per kernel: identity_digest of its generated kernel
};
Expected<ShapePlan> plan_for_shape(const engine::Network& net, const ir::SymBindings& bindings,
                                   const BuildConfig& config);

// The host part of building a range network's plan: each symbol's range
// (kUnsupported as build_cuda_plan says), the steps at every symbol's opt,
// and when the range holds at most KILN_CUDA_SHAPE_TABLE shapes (default
// 4096) every shape planned, on as many threads as the host has, into the
// plan's table; else the shapes at min and max. Kernels are chosen across
// all of them (a size that moves at any shape read at run time, the others
// compiled in) but not compiled (plan.kernel_names empty; `kernels` in
// kernel_keys order); nothing is timed.
struct RangeBuild {
  CudaPlan plan;
  std::vector<KernelChoice> kernels;
};
Expected<RangeBuild> plan_range(const engine::Network& net, const BuildConfig& config);

// Times every GEMM and convolution of `plan` among up to `candidates` of the
// library's algorithms on scratch device memory, recording the fastest.
// `convs_only`: only the convolutions, each among the first 2 algorithms of
// cuDNN's heuristic, briefly (a range build's timing at its ends).
Status tune_plan(CudaPlan& plan, const BuildConfig& config, int candidates = 8, bool convs_only = false);

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
  // The steps only: every layer emitted, memory planned, references resolved.
  Status emit();
  CudaPlan& plan() { return plan_; }
  const std::vector<KernelChoice>& kernels() const { return kernels_; }
  // The symbol values of the shape being built (for sizes the engine gives back).
  void set_bindings(ir::SymBindings b) { bindings_ = std::move(b); }

  // ---- for the layer emitters (cuda_layers.cc)
  const BuildConfig& config() const { return config_; }
  // The dtype a value of IR dtype `t` is computed in (--precision fp16/bf16 turn float32 into it).
  DType compute_dtype(DType t) const;
  bool allow_tf32() const { return config_.precision == Precision::kTf32; }
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
  // `t` itself when its first element is `bytes`-aligned, else a contiguous
  // copy in a fresh slot (a view at an odd offset into a tensor: a library
  // call or a vectorized kernel needs its operands aligned).
  Expected<TRef> aligned(const TRef& t, const std::string& layer, int64_t bytes);
  Expected<TRef> channels_last(const TRef& t, const std::string& layer);
  // A constant's device copy in dtype `dtype` (channels-last filter when asked).
  // transposed_matrix: a 2-D constant stored as its transpose; the TRef keeps
  // the logical sizes with swapped strides (a column-major view).
  // pad_channels: a channels-last filter stored with that many input channels (zeros past its own).
  Expected<TRef> constant(const ir::Value* v, DType dtype, bool channels_last_filter = false,
                          bool transposed_matrix = false, int64_t pad_channels = 0);
  // A 2-D [k, n] constant stored as n rows of k FP8 e4m3 values with a
  // float32 scale per row (DeviceConstant::fp8_rows): the rows, and the scales.
  Expected<std::pair<BufferRef, BufferRef>> fp8_rows_constant(const ir::Value* v);
  bool is_constant(const ir::Value* v) const;
  BufferRef error_word() const { return {-2 - error_alloc_, 0}; }
  int add_error_layer(const std::string& layer);

 private:
  using Alloc = engine::ArenaBlock;  // its steps are plan steps
  void touch(const TRef& t);
  // `out` after a copy kernel step that writes `t` into it.
  Expected<TRef> copied(const TRef& t, TRef out, const std::string& layer);
  void add_step(Step s, std::initializer_list<const TRef*> uses);
  Status plan_memory();
  void resolve(BufferRef& r) const;

  engine::Network& net_;
  BuildConfig config_;
  CudaPlan plan_;
  std::vector<std::optional<TRef>> refs_;
  std::vector<std::optional<TRef>> input_slots_;  // by value id
  std::vector<Alloc> allocs_;
  std::vector<KernelChoice> kernels_;
  std::map<std::string, int> kernel_index_;
  std::map<std::tuple<std::string, DType, bool, bool, int64_t>, int> constant_index_;
  int error_alloc_ = -1;
  ir::SymBindings bindings_;
};

// Emits the steps of one layer (cuda_layers.cc).
Status emit_layer(Builder& b, const ir::Node& n);

// Folds GEMM + bias (+ ReLU) and convolution + residual add (+ ReLU) into
// their producing layers' epilogues, and norms, rotary embeddings and gated
// MLPs into their layers (cuda_epilogues.cc).
Status fold_epilogues(engine::Network& net);

// The CUDA target's network passes, in the order its build runs them:
// "fold-epilogues", then "fuse-elementwise".
const std::vector<engine::NetworkPass>& cuda_network_passes();

}  // namespace kiln::cuda
