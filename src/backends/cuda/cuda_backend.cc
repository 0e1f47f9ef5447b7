#include "backends/cuda/cuda_backend.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "backends/cuda/cuda_builder.h"
#include "backends/cuda/device_constant.h"
#include "backends/cuda/device_memory.h"
#include "backends/cuda/nvrtc_compile.h"
#include "backends/cuda/runtime_kernels.h"
#include "engine/plan.h"
#include "ir/sym_solve.h"
#include "kiln/settings.h"

namespace kiln::cuda {

namespace {

// How many shapes a range engine keeps ready when nothing says otherwise:
// every shape of its plan's table when the table has at most
// kMaxPreparedShapes (each prepared, its graph captured, when a context
// opens), else kDefaultShapesKept, prepared as calls meet them.
constexpr size_t kDefaultShapesKept = 16;
constexpr size_t kMaxPreparedShapes = 1024;
// How many calls of one engine run side by side at most (each on a context
// of its own: arena, workspace, stream, prepared shapes) when nothing says
// otherwise. Contexts open only as concurrent calls need them.
constexpr size_t kDefaultContexts = 8;

Expected<std::shared_ptr<const DeviceBuffer>> shared_device_constant(const Tensor& w, const DeviceConstant& c);

// The device forms of `constants`, from `weights` by name (shared_device_constant).
Expected<std::vector<std::shared_ptr<const DeviceBuffer>>> device_constants(
    const std::map<std::string, Tensor>& weights, const std::vector<DeviceConstant>& constants,
    const std::string& what) {
  std::vector<std::shared_ptr<const DeviceBuffer>> out;
  for (const DeviceConstant& dc : constants) {
    auto w = weights.find(dc.name);
    if (w == weights.end()) return format_error(what + ": no weight '" + dc.name + "' for the plan's constant");
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const DeviceBuffer> d, shared_device_constant(w->second, dc));
    out.push_back(std::move(d));
  }
  return out;
}

struct RunTimeWorkCounters {
  std::atomic<uint64_t> shapes_prepared{0}, shapes_planned{0}, kernels_compiled{0}, algorithms_chosen{0},
      graphs_captured{0};
};
RunTimeWorkCounters& run_time_work_counters() {
  static RunTimeWorkCounters counters;
  return counters;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// The steps of one shape of an engine and what runs them: of a fixed-shape
// engine its only shape, of a range engine each shape called so far. The
// engine's active shape lives in its own members of these names (swapped
// with an Instance to change shape).
struct Instance {
  CudaPlan plan;
  std::vector<std::shared_ptr<const DeviceBuffer>> constants;
  std::vector<cudaKernel_t> kernels;
  std::vector<std::shared_ptr<const GemmOp>> gemms;
  std::vector<std::shared_ptr<const ConvOp>> convs;
  std::vector<std::vector<void*>> kernel_args;
  std::vector<std::vector<int64_t>> kernel_dims;
  std::vector<uint8_t*> bound;
  std::vector<std::pair<std::vector<uint8_t*>, cudaGraphExec_t>> graphs;
  std::vector<const void*> last_input;
  bool launched = false;

  Instance() = default;
  Instance(Instance&&) = default;
  Instance& operator=(Instance&& o) noexcept {
    release();
    plan = std::move(o.plan);
    constants = std::move(o.constants);
    kernels = std::move(o.kernels);
    gemms = std::move(o.gemms);
    convs = std::move(o.convs);
    kernel_args = std::move(o.kernel_args);
    kernel_dims = std::move(o.kernel_dims);
    bound = std::move(o.bound);
    graphs = std::move(o.graphs);
    o.graphs.clear();
    last_input = std::move(o.last_input);
    launched = o.launched;
    return *this;
  }
  ~Instance() { release(); }
  void release() {
    for (auto& [b, g] : graphs) cudaGraphExecDestroy(g);
    graphs.clear();
  }
};

// What an engine built for a range of shapes keeps to make the steps of a
// shape it has not run yet, shared by the engine's contexts.
struct RangeCommon {
  engine::Network network;          // the layer graph as built, sizes symbolic
  std::vector<PlanSymbol> symbols;  // the plan's, in its order
  // Per engine input and dimension: the symbol its size gives (affine in it alone), or empty.
  std::vector<std::vector<std::string>> input_symbols;
  BuildConfig config;                              // precision and device, for plan_for_shape
  std::map<std::string, Tensor> weights;           // every constant of the network, by name
  std::map<std::string, int> conv_algo_by_layer;   // the build's choice per convolution layer, tried first elsewhere
  size_t shapes_kept = kDefaultShapesKept;         // per context: the active shape and the ones in `shapes`, at most
  int trace = 0;  // KILN_CUDA_TRACE: 1 each new shape's preparation, timed, on stderr; 2 also each call's parts
  static constexpr size_t kMaxTunedShapes = 4096;  // GEMM and convolution shapes remembered (then forgotten at once)

  // What contexts learn as they go, under `mutex`: kernels by key (the
  // plan's and any compiled since, into `libraries`), and algorithms by
  // GEMM/convolution shape (the build's timings at opt, and those chosen,
  // not timed, for shapes since).
  std::mutex mutex;
  std::map<std::string, cudaKernel_t> kernel_by_key;
  std::vector<cudaLibrary_t> libraries;
  TunedAlgos tuned;
  TunedAlgos built;  // what the plan recorded: `tuned` starts again from these
  // A table's algorithms (the build's at opt and those it chose for every
  // other shape), never changed after load: read without the mutex.
  TunedAlgos table_algos;

  // A plan whose build planned every shape of its range: each shape's steps
  // come from its table, every kernel from `kernels` (the plan's, all of
  // them compiled at build), every algorithm from `tuned`.
  std::shared_ptr<const ShapeTable> table;
  CudaPlan header;  // the plan's fields a shape's plan takes (no steps)
  std::vector<cudaKernel_t> kernels;
  // Per variant: its device constants, made at load and held while the
  // engine lives (a variant may ask for weights in other forms: a GEMV's
  // transposed matrices), or empty where its shapes' constants vary.
  std::vector<std::vector<std::shared_ptr<const DeviceBuffer>>> variant_constants;

  ~RangeCommon() {
    for (cudaLibrary_t l : libraries) cudaLibraryUnload(l);
  }
};

// A context's shapes of a range engine: the active one's symbol values, and
// the others run before, most recently used first (at most shapes_kept - 1).
struct RangeState {
  std::shared_ptr<RangeCommon> common;
  std::vector<int64_t> active;
  std::list<std::pair<std::vector<int64_t>, Instance>> shapes;
};

// Launches one kernel step: its pointers and (when it reads sizes at run
// time) its KilnDims as parameters; with programmatic stream serialization
// when `early` (KILN_CUDA_PDL=1: the kernel may launch before the one before
// it ends, and waits for it in kiln_enter_after_prior_grid).
cudaError_t launch_kernel(cudaKernel_t kernel, const KernelLaunch& k, const std::vector<void*>& args,
                          const std::vector<int64_t>& dims, cudaStream_t stream, bool early) {
  std::vector<void*> params(args.size());
  for (size_t a = 0; a < args.size(); ++a) params[a] = const_cast<void**>(&args[a]);
  if (!dims.empty()) params.push_back(const_cast<int64_t*>(dims.data()));
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(k.grid[0], k.grid[1], k.grid[2]);
  config.blockDim = dim3(k.block[0], k.block[1], k.block[2]);
  config.dynamicSmemBytes = k.shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  if (early) {
    config.attrs = &attr;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(kernel), params.data());
}

// Captures what `enqueue` puts on `stream` (capturing it runs nothing) as a
// graph, instantiated and uploaded to the device (its work put there now,
// not at its first launch) and waited for: the launch may come on another
// stream. The stream must be this thread's to capture on.
Expected<cudaGraphExec_t> capture_on(cudaStream_t stream, const std::function<Status(cudaStream_t)>& enqueue) {
  KILN_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  Status st = enqueue(stream);
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream, &g);
  KILN_TRY(st);
  KILN_TRY(cuda_status(e, "cudaStreamEndCapture"));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  KILN_TRY(cuda_status(ie, "cudaGraphInstantiate"));
  cudaError_t ue = cudaGraphUpload(exec, stream);
  if (ue == cudaSuccess) ue = cudaStreamSynchronize(stream);
  if (ue != cudaSuccess) {
    cudaGraphExecDestroy(exec);
    return cuda_status(ue, "cudaGraphUpload");
  }
  return exec;
}

// Captures CUDA graphs on a thread of its own, so that no call waits for a
// capture: a job is a copy of everything a shape's steps launch with (kernel
// arguments and GEMM pointers resolved for the call's bindings, the
// constants they read held alive), and its result, a graph ready to launch,
// is taken by the context's next call (CudaEngine::install_captured). Steps
// that launch through cuDNN share the context's handle and are captured on
// the call's thread instead (CudaEngine::capture_pending).
class GraphCapturer {
 public:
  struct KernelStep {
    cudaKernel_t kernel = nullptr;
    KernelLaunch launch;  // grid, block, shared bytes
    std::vector<void*> args;
    std::vector<int64_t> dims;
  };
  struct GemmStep {
    std::shared_ptr<const GemmOp> op;
    const void *a = nullptr, *b = nullptr, *bias = nullptr;
    void* c = nullptr;
  };
  // What identifies the graph with `keep` (the constants it reads): the
  // shape's symbol values (empty for a fixed-shape engine), the bindings and
  // the arena's generation.
  struct Key {
    std::vector<int64_t> shape;
    std::vector<uint8_t*> bound;
    uint64_t generation = 0;
  };
  struct Job {
    Key key;
    std::vector<std::variant<KernelStep, GemmStep>> steps;
    std::vector<std::shared_ptr<const DeviceBuffer>> keep;  // the constants, alive until the graph is installed
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    bool early_launch = false;
  };
  struct Done {
    Key key;
    cudaGraphExec_t exec = nullptr;  // null: the capture failed (the shape launches step by step)
    std::vector<std::shared_ptr<const DeviceBuffer>> keep;
  };

  GraphCapturer() { cudaGetDevice(&device_); }
  GraphCapturer(const GraphCapturer&) = delete;
  GraphCapturer& operator=(const GraphCapturer&) = delete;
  ~GraphCapturer() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    if (worker_.joinable()) worker_.join();
    for (Done& d : done_)
      if (d.exec) cudaGraphExecDestroy(d.exec);
    if (stream_) cudaStreamDestroy(stream_);
  }

  void submit(Job job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(job));
      if (!worker_.joinable()) worker_ = std::thread([this] { work(); });
    }
    changed_.notify_all();
  }

  // The graphs captured since the last take.
  std::vector<Done> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(done_, {});
  }

  // Returns once every job submitted so far is captured (or failed).
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return jobs_.empty() && !busy_; });
  }

 private:
  void work() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
      lock.unlock();
      Done d{job.key, capture(job), std::move(job.keep)};
      lock.lock();
      // Counted once the next call can take it.
      if (d.exec) run_time_work_counters().graphs_captured.fetch_add(1, std::memory_order_relaxed);
      done_.push_back(std::move(d));
      busy_ = false;
      changed_.notify_all();
    }
  }

  cudaGraphExec_t capture(const Job& job) {
    if (!stream_ && cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess) return nullptr;
    Expected<cudaGraphExec_t> exec = capture_on(stream_, [&](cudaStream_t s) -> Status {
      for (const auto& step : job.steps) {
        if (const auto* k = std::get_if<KernelStep>(&step)) {
          KILN_TRY(cuda_status(launch_kernel(k->kernel, k->launch, k->args, k->dims, s, job.early_launch),
                               "cudaLaunchKernel"));
        } else {
          const auto& g = std::get<GemmStep>(step);
          KILN_TRY(g.op->run(g.a, g.b, g.c, g.bias, job.workspace, job.workspace_bytes, s));
        }
      }
      return Status::ok();
    });
    if (exec) return *exec;
    (void)cudaGetLastError();  // a failed capture leaves no error behind for the next call
    return nullptr;
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;  // the worker's own
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> jobs_;
  std::vector<Done> done_;
  bool busy_ = false, stop_ = false;
  std::thread worker_;
};

// One execution context of an engine: the memory, stream, library handles,
// prepared shapes and captured graphs of calls that run one at a time. The
// kernels, weights and (for a range engine) layer graph are the engine's,
// shared by all its contexts (CudaEngineGroup).
struct CudaEngine {
  std::string what;
  CudaPlan plan;
  std::vector<int> alias_input;  // per engine output: the engine input it is written into in place, or -1
  DeviceBuffer arena, workspace;
  // Device copies of the weights, shared with every other engine of this
  // process made from the same host weight in the same device form.
  std::vector<std::shared_ptr<const DeviceBuffer>> constants;
  std::vector<cudaKernel_t> kernels;
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t dnn = nullptr;
  cudaStream_t own_stream = nullptr;
  std::vector<std::shared_ptr<const GemmOp>> gemms;  // per step
  std::vector<std::shared_ptr<const ConvOp>> convs;  // per step
  // The descriptors made so far, by shape and algorithm: steps of one shape
  // (a model's layers) and shapes that share GEMMs share them.
  std::map<std::string, std::shared_ptr<const GemmOp>> gemm_ops;
  std::map<std::string, std::shared_ptr<const ConvOp>> conv_ops;
  static constexpr size_t kMaxOps = 4096;       // then made anew
  std::vector<std::vector<void*>> kernel_args;  // per step: device pointers, for the bindings in `bound`
  std::vector<std::vector<int64_t>> kernel_dims;  // per step: its KilnDims (kMaxKernelDims values), or empty
  // Per engine input: device memory bound in place of the input's arena slot
  // (a caller's tensor read and written where it lies: a session's KV cache),
  // or null for the slot itself. Steps' pointers into a bound slot resolve
  // into the bound memory instead.
  std::vector<uint8_t*> bound;
  // A captured graph per set of bindings, most recently used first (a few
  // sessions alternating on one engine each keep theirs).
  static constexpr size_t kMaxGraphs = 4;
  std::vector<std::pair<std::vector<uint8_t*>, cudaGraphExec_t>> graphs;
  // Recorded on the caller's stream after a call's last use of the arena: the
  // next call, on any stream, waits for it.
  cudaEvent_t engine_done = nullptr;
  // The error word as the host sees it (page-locked memory mapped into the
  // device's address space): each call copies the arena's word there as its
  // last step, so an asynchronous call's bad index is reported by the next
  // call or synchronize() without a wait of its own. Null for engines whose
  // kernels check no index.
  volatile int32_t* error_host = nullptr;
  void* error_host_device = nullptr;
  // Per engine input: the device memory bound the call before (a large
  // read-only input is bound when the same memory comes twice in a row).
  std::vector<const void*> last_input;
  // Whether the active shape's steps have run once: its first call launches
  // them one by one, a graph is captured when it comes again.
  bool launched = false;
  // Set by launch() for a call whose graph is to be captured on this thread
  // after its work is enqueued (run_on): a shape with cuDNN steps, whose
  // handle is the context's.
  bool capture_pending = false;
  // The other shapes' graphs are captured on the capturer's thread; the
  // (shape, bindings) it is capturing, and those whose capture failed (they
  // launch step by step).
  std::unique_ptr<GraphCapturer> capturer;
  std::set<std::pair<std::vector<int64_t>, std::vector<uint8_t*>>> capturing, not_captured;
  // Counts the arena's moves: a graph captured before one reads the old arena.
  uint64_t arena_generation = 0;
  // Page-locked host memory the context's calls stage host inputs and
  // outputs through: a copy from or to pageable memory goes through the
  // driver's own staging, which calls of all contexts share (one at a time);
  // from page-locked memory it is the copy engine's alone, so contexts'
  // calls overlap. Grown to a call's host bytes (up to kMaxStagingBytes;
  // larger calls copy directly); `staging_free` is recorded after a call's
  // last copy through it, and the next call waits for it before writing.
  static constexpr size_t kMaxStagingBytes = size_t{16} << 20;
  // Copies larger than this go directly: the driver's pageable path
  // overlaps its own staging with the transfer, which a copy into staging
  // followed by the transfer does not (a batch of images costs more staged).
  static constexpr size_t kMaxStagedCopy = size_t{1} << 20;
  // The staging a copy of `bytes` takes (256-byte granules), 0 for one that goes directly.
  static size_t staged_size(size_t bytes) { return bytes > kMaxStagedCopy ? 0 : (bytes + 255) / 256 * 256; }
  uint8_t* staging = nullptr;
  size_t staging_bytes = 0;
  size_t staging_used = 0;             // this call's, or SIZE_MAX when it copies directly
  cudaEvent_t staging_free = nullptr;  // null until a call first stages
  struct StagedOutput {
    void* dst;
    const uint8_t* src;
    size_t bytes;
  };
  std::vector<StagedOutput> staged_outputs;  // this call's host outputs, copied out once it is done
  // Read once at load from KILN_CUDA_GRAPHS=0, KILN_CUDA_DEBUG=1, KILN_CUDA_PROFILE=1, KILN_CUDA_STAGING=0,
  // KILN_CUDA_PDL=1.
  bool use_graphs = true, debug = false, profile = false, profile_all = false, use_staging = true;
  // Kernels launched early (programmatic dependent launch): each lets the next one launch and waits for the one
  // before it as it starts (kiln_enter_after_prior_grid), so launches overlap the kernel before; a matrix-vector
  // kernel asks for its first weights in L2 before it waits (gemv.cuh).
  bool early_launch = false;
  bool profiled = false;  // KILN_CUDA_PROFILE: the steps are timed at the first launch
  std::unique_ptr<RangeState> range;  // engines built for a range of shapes

  ~CudaEngine() {
    capturer.reset();  // its thread reads this context's memory: stopped first
    for (auto& [b, g] : graphs) cudaGraphExecDestroy(g);
    gemms.clear();
    convs.clear();
    gemm_ops.clear();
    conv_ops.clear();
    if (range) range->shapes.clear();
    if (dnn) cudnnDestroy(dnn);
    if (lt) cublasLtDestroy(lt);
    if (error_host) cudaFreeHost(const_cast<int32_t*>(error_host));
    if (staging_free) cudaEventSynchronize(staging_free);
    if (staging) cudaFreeHost(staging);
    if (staging_free) cudaEventDestroy(staging_free);
    if (engine_done) cudaEventDestroy(engine_done);
    if (own_stream) cudaStreamDestroy(own_stream);
  }

  void* ptr(const BufferRef& r) const {
    if (r.region != kArenaRegion) return constants[static_cast<size_t>(r.region)]->bytes() + r.offset;
    // Input slots are the caller's alone for the whole run (the memory plan
    // never lends their bytes), so a bound one can be swapped whole.
    for (size_t i = 0; i < bound.size(); ++i)
      if (bound[i] && r.offset >= plan.inputs[i].offset && r.offset < plan.inputs[i].offset + plan.inputs[i].nbytes())
        return bound[i] + (r.offset - plan.inputs[i].offset);
    return arena.bytes() + r.offset;
  }

  // Makes `b` the bindings the next launches use (kernel arguments resolved
  // again when they change; GEMM and convolution pointers are resolved as
  // steps are enqueued).
  void bind(const std::vector<uint8_t*>& b) {
    if (b == bound) return;
    bound = b;
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      if (plan.steps[i].kind != Step::Kind::kKernel) continue;
      kernel_args[i].clear();
      for (const BufferRef& r : plan.steps[i].kernel.args) kernel_args[i].push_back(ptr(r));
    }
  }

  // The device memory engine input `i` lies in for this launch.
  uint8_t* input_memory(size_t i) const { return bound[i] ? bound[i] : arena.bytes() + plan.inputs[i].offset; }

  // Enqueues every step on `stream`.
  Status enqueue(cudaStream_t stream) {
    KILN_CUDNN_TRY(cudnnSetStream(dnn, stream));
    for (size_t i = 0; i < plan.steps.size(); ++i) KILN_TRY(enqueue_step(i, stream));
    return Status::ok();
  }

  Status enqueue_step(size_t i, cudaStream_t stream) {
    {
      const Step& s = plan.steps[i];
      switch (s.kind) {
        case Step::Kind::kKernel: {
          const cudaError_t e = launch_kernel(kernels[static_cast<size_t>(s.kernel.kernel)], s.kernel, kernel_args[i],
                                              kernel_dims[i], stream, early_launch);
          KILN_TRY(cuda_status(e, "cudaLaunchKernel").with_context("layer '" + s.layer + "'"));
          break;
        }
        case Step::Kind::kGemm: {
          const GemmLaunch& g = s.gemm;
          KILN_TRY(gemms[i]
                       ->run(ptr(g.a), ptr(g.b), ptr(g.c), g.has_bias ? ptr(g.bias) : nullptr, workspace.get(),
                             workspace.nbytes(), stream)
                       .with_context("layer '" + s.layer + "'"));
          break;
        }
        case Step::Kind::kConv: {
          const ConvLaunch& c = s.conv;
          KILN_TRY(convs[i]
                       ->run(ptr(c.x), ptr(c.w), c.shape.has_bias ? ptr(c.bias) : nullptr,
                             c.shape.has_residual ? ptr(c.z) : nullptr, ptr(c.y), workspace.get(), workspace.nbytes())
                       .with_context("layer '" + s.layer + "'"));
          break;
        }
      }
    }
    return Status::ok();
  }

  // Times every step alone (no graph) and prints the slowest to stderr, at
  // the engine's first launch: what KILN_CUDA_PROFILE=1 asks for, to see where an engine's time goes
  // (KILN_CUDA_PROFILE=all: every step, in order, first).
  Status profile_steps(cudaStream_t stream) {
    KILN_CUDNN_TRY(cudnnSetStream(dnn, stream));
    std::vector<std::pair<float, size_t>> times;
    float total = 0;
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(float ms, time_on_stream(stream, 2, 5, [&] { return enqueue_step(i, stream); }));
      times.emplace_back(ms, i);
      total += ms;
    }
    // Totals by kind, the matrix-vector kernels apart (named "<layer> gemv").
    std::map<std::string, std::pair<int, float>> by_kind;
    for (const auto& [ms, i] : times) {
      const Step& s = plan.steps[i];
      std::string kind = s.kind == Step::Kind::kGemm   ? "cuBLASLt gemm"
                         : s.kind == Step::Kind::kConv ? "cuDNN conv"
                                                       : "kernel";
      if (s.layer.size() > 5 && s.layer.compare(s.layer.size() - 5, 5, " gemv") == 0) kind = "gemv kernel";
      by_kind[kind].first += 1;
      by_kind[kind].second += ms;
    }
    if (profile_all) {
      std::fprintf(stderr, "kiln: %s: every step in order:\n", what.c_str());
      for (const auto& [ms, i] : times)
        std::fprintf(stderr, "  %4zu %8.4f ms  %-32s %s\n", i, ms, plan.steps[i].layer.c_str(),
                     plan.steps[i].kind == Step::Kind::kKernel
                         ? plan.kernel_names[static_cast<size_t>(plan.steps[i].kernel.kernel)].c_str()
                         : "library call");
    }
    std::sort(times.rbegin(), times.rend());
    std::fprintf(stderr, "kiln: %s: %zu steps, %.4f ms summed one by one:", what.c_str(), times.size(), total);
    for (const auto& [kind, nt] : by_kind)
      std::fprintf(stderr, " %s %d in %.4f ms;", kind.c_str(), nt.first, nt.second);
    std::fprintf(stderr, " slowest:\n");
    for (size_t k = 0; k < std::min<size_t>(25, times.size()); ++k) {
      const Step& s = plan.steps[times[k].second];
      const char* kind = s.kind == Step::Kind::kGemm ? "gemm" : s.kind == Step::Kind::kConv ? "conv" : "kernel";
      std::string detail = s.kind == Step::Kind::kGemm   ? s.gemm.shape.to_string()
                           : s.kind == Step::Kind::kConv ? s.conv.shape.to_string()
                                                         : plan.kernel_names[static_cast<size_t>(s.kernel.kernel)];
      std::fprintf(stderr, "  %8.4f ms  %-6s %-28s %s\n", times[k].first, kind, s.layer.c_str(), detail.c_str());
    }
    return Status::ok();
  }

  // Step by step, checking the error word after each step and printing the
  // first values of every kernel argument of the step that set it
  // (KILN_CUDA_DEBUG=1): for finding which layer reads bad data.
  Status debug_run(cudaStream_t stream) {
    KILN_CUDNN_TRY(cudnnSetStream(dnn, stream));
    KILN_CUDA_TRY(cudaStreamSynchronize(stream));
    for (const IoSlot& io : plan.inputs) {
      int64_t v[4] = {};
      cudaMemcpy(v, input_memory(static_cast<size_t>(&io - plan.inputs.data())),
                 std::min<size_t>(sizeof v, static_cast<size_t>(io.nbytes())), cudaMemcpyDeviceToHost);
      std::fprintf(stderr, "kiln: before step 0, slot '%s' at %lld: %lld %lld %lld %lld\n", io.name.c_str(),
                   static_cast<long long>(io.offset), (long long)v[0], (long long)v[1], (long long)v[2],
                   (long long)v[3]);
    }
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      KILN_TRY(enqueue_step(i, stream));
      int32_t code = 0;
      KILN_CUDA_TRY(cudaMemcpyAsync(&code, arena.bytes() + plan.error_offset, 4, cudaMemcpyDeviceToHost, stream));
      KILN_CUDA_TRY(cudaStreamSynchronize(stream));
      if (code == 0) continue;
      const Step& s = plan.steps[i];
      std::fprintf(stderr, "kiln: step %zu (layer '%s') set error code %d\n", i, s.layer.c_str(), code);
      for (size_t a = 0; a < kernel_args[i].size(); ++a) {
        int64_t v[8] = {};
        cudaMemcpy(v, kernel_args[i][a], sizeof v, cudaMemcpyDeviceToHost);
        const BufferRef& r = s.kernel.args[a];
        std::fprintf(stderr, "  arg %zu region %d offset %lld: %lld %lld %lld %lld %lld %lld %lld %lld\n", a, r.region,
                     static_cast<long long>(r.offset), (long long)v[0], (long long)v[1], (long long)v[2],
                     (long long)v[3], (long long)v[4], (long long)v[5], (long long)v[6], (long long)v[7]);
      }
      for (const IoSlot& io : plan.inputs)
        std::fprintf(stderr, "  input slot '%s' at %lld, %lld bytes\n", io.name.c_str(),
                     static_cast<long long>(io.offset), static_cast<long long>(io.nbytes()));
      break;
    }
    return Status::ok();
  }

  // A traced call (engine::StepTrace): every step enqueued alone between two
  // timing events, the stream waited for, and each step reported with its
  // device time, placed from the moment the stream, idle, began the first.
  Status traced_run(cudaStream_t stream, engine::StepTrace& trace) {
    KILN_CUDNN_TRY(cudnnSetStream(dnn, stream));
    KILN_CUDA_TRY(cudaStreamSynchronize(stream));
    std::vector<cudaEvent_t> events(2 * plan.steps.size() + 1, nullptr);
    struct Destroy {
      std::vector<cudaEvent_t>& events;
      ~Destroy() {
        for (cudaEvent_t ev : events)
          if (ev) cudaEventDestroy(ev);
      }
    } destroy{events};
    for (cudaEvent_t& ev : events) KILN_CUDA_TRY(cudaEventCreate(&ev));
    const double start_us = trace.now_us();
    KILN_CUDA_TRY(cudaEventRecord(events[0], stream));
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      KILN_CUDA_TRY(cudaEventRecord(events[2 * i + 1], stream));
      KILN_TRY(enqueue_step(i, stream));
      KILN_CUDA_TRY(cudaEventRecord(events[2 * i + 2], stream));
    }
    KILN_CUDA_TRY(cudaEventSynchronize(events.back()));
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      float before = 0, ms = 0;
      KILN_CUDA_TRY(cudaEventElapsedTime(&before, events[0], events[2 * i + 1]));
      KILN_CUDA_TRY(cudaEventElapsedTime(&ms, events[2 * i + 1], events[2 * i + 2]));
      const Step& s = plan.steps[i];
      const std::string detail = s.kind == Step::Kind::kGemm ? "cuBLASLt gemm " + s.gemm.shape.to_string()
                                 : s.kind == Step::Kind::kConv
                                     ? "cuDNN conv " + s.conv.shape.to_string()
                                     : plan.kernel_names[static_cast<size_t>(s.kernel.kernel)];
      trace.step(s.layer, detail, start_us + 1000.0 * before, 1000.0 * ms, true);
    }
    return Status::ok();
  }

  // Runs the engine's work on `stream` with the current bindings: a shape's
  // first call launches its steps one by one; later calls replay a captured
  // graph per set of bindings (captured on the context's own stream; capture
  // runs nothing, and the graph is launched on `stream` itself).
  Status launch(cudaStream_t stream, engine::StepTrace* trace) {
    if (profile && !profiled) {
      profiled = true;
      KILN_TRY(profile_steps(stream));
    }
    if (trace) return traced_run(stream, *trace);
    if (debug) return debug_run(stream);
    if (!use_graphs) return enqueue(stream);
    install_captured();
    auto it = std::find_if(graphs.begin(), graphs.end(), [&](const auto& g) { return g.first == bound; });
    if (it == graphs.end()) {
      // No call waits for a capture. A shape's first call launches its steps
      // one by one (a size seen once may never come back); when it comes
      // again with these bindings, it launches them one by one again and its
      // graph is captured on the capturer's thread (or, for cuDNN steps, once
      // the call's work is all enqueued: capture_pending, run_on); a later
      // call replays it.
      if (launched) request_capture();
      launched = true;
      return enqueue(stream);
    }
    if (it != graphs.begin()) {
      std::rotate(graphs.begin(), it, it + 1);
      it = graphs.begin();
    }
    KILN_CUDA_TRY(cudaGraphLaunch(it->second, stream));
    return Status::ok();
  }

  // Captures the active shape's steps with the current bindings as a graph
  // (nothing runs) and keeps it first among the shape's graphs. Captured on
  // the context's own stream, never a caller's: another thread may be
  // enqueueing on that one (sessions sharing the default stream), and its
  // work must neither land in this graph nor fail because the stream is
  // capturing.
  Status capture_graph() {
    run_time_work_counters().graphs_captured.fetch_add(1, std::memory_order_relaxed);
    KILN_ASSIGN_OR_RETURN(cudaGraphExec_t exec, capture_on(own_stream, [&](cudaStream_t s) { return enqueue(s); }));
    add_graph(graphs, bound, exec);
    return Status::ok();
  }

  // Keeps `exec` first among a shape's graphs (the least recently used one
  // dropped past kMaxGraphs; a second graph for the same bindings dropped).
  static void add_graph(std::vector<std::pair<std::vector<uint8_t*>, cudaGraphExec_t>>& list,
                        const std::vector<uint8_t*>& b, cudaGraphExec_t exec) {
    if (std::any_of(list.begin(), list.end(), [&](const auto& g) { return g.first == b; })) {
      cudaGraphExecDestroy(exec);
      return;
    }
    if (list.size() == kMaxGraphs) {
      cudaGraphExecDestroy(list.back().second);
      list.pop_back();
    }
    list.insert(list.begin(), {b, exec});
  }

  static std::vector<const void*> constant_memory(const std::vector<std::shared_ptr<const DeviceBuffer>>& cs) {
    std::vector<const void*> out;
    for (const auto& c : cs) out.push_back(c ? c->bytes() : nullptr);
    return out;
  }

  // Asks for the active shape's graph with the current bindings: on the
  // capturer's thread, from a copy of what its steps launch with; on this
  // thread after the call's work (capture_pending) when a step runs cuDNN.
  void request_capture() {
    std::pair<std::vector<int64_t>, std::vector<uint8_t*>> id{range ? range->active : std::vector<int64_t>{}, bound};
    if (capturing.count(id) || not_captured.count(id)) return;
    GraphCapturer::Job job;
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const Step& st = plan.steps[i];
      if (st.kind == Step::Kind::kConv) {
        capture_pending = true;
        return;
      }
      if (st.kind == Step::Kind::kKernel) {
        job.steps.emplace_back(GraphCapturer::KernelStep{kernels[static_cast<size_t>(st.kernel.kernel)], st.kernel,
                                                         kernel_args[i], kernel_dims[i]});
      } else {
        const GemmLaunch& g = st.gemm;
        job.steps.emplace_back(
            GraphCapturer::GemmStep{gemms[i], ptr(g.a), ptr(g.b), g.has_bias ? ptr(g.bias) : nullptr, ptr(g.c)});
      }
    }
    job.key = {id.first, id.second, arena_generation};
    job.keep = constants;
    job.workspace = workspace.get();
    job.workspace_bytes = workspace.nbytes();
    job.early_launch = early_launch;
    if (!capturer) capturer = std::make_unique<GraphCapturer>();
    capturing.insert(std::move(id));
    capturer->submit(std::move(job));
  }

  // Puts each graph the capturer finished with its shape, if that shape is
  // still kept with the same arena and constants (else the graph is dropped).
  void install_captured() {
    if (!capturer) return;
    for (GraphCapturer::Done& d : capturer->take()) {
      std::pair<std::vector<int64_t>, std::vector<uint8_t*>> id{d.key.shape, d.key.bound};
      capturing.erase(id);
      if (!d.exec) {
        not_captured.insert(std::move(id));
        continue;
      }
      std::vector<std::pair<std::vector<uint8_t*>, cudaGraphExec_t>>* list = nullptr;
      if (d.key.generation == arena_generation) {
        const std::vector<const void*> read = constant_memory(d.keep);
        if (!range || d.key.shape == range->active) {
          if (constant_memory(constants) == read) list = &graphs;
        } else {
          for (auto& [shape, inst] : range->shapes)
            if (shape == d.key.shape && constant_memory(inst.constants) == read) list = &inst.graphs;
        }
      }
      if (list) {
        add_graph(*list, d.key.bound, d.exec);
      } else {
        cudaGraphExecDestroy(d.exec);
      }
    }
  }

  // Waits for the graphs being captured, and puts them with their shapes.
  void finish_captures() {
    if (!capturer) return;
    capturer->wait_idle();
    install_captured();
  }

  // Whether `t` can be bound in place of an input slot: contiguous CUDA
  // memory as aligned as the arena's (kernels load 16-byte vectors; cuBLASLt
  // wants 16 bytes), holding something.
  static bool bindable(const Tensor& t) {
    return t.device().type == DeviceType::kCUDA && t.is_contiguous() && t.nbytes() > 0 &&
           reinterpret_cast<uintptr_t>(t.raw_data()) % 256 == 0;
  }

  // Makes staging ready for a call whose host copies move `bytes` (each
  // rounded up to 256): the last call's copies through it done, grown if
  // needed; past kMaxStagingBytes (or with KILN_CUDA_STAGING=0) the call
  // copies directly.
  Status begin_staging(size_t bytes) {
    staged_outputs.clear();
    staging_used = SIZE_MAX;
    if (!use_staging || bytes == 0 || bytes > kMaxStagingBytes) return Status::ok();
    if (staging_free) KILN_CUDA_TRY(cudaEventSynchronize(staging_free));
    if (bytes > staging_bytes) {
      const size_t grown = std::min(kMaxStagingBytes, std::max(bytes, 2 * staging_bytes));
      if (staging) KILN_CUDA_TRY(cudaFreeHost(staging));
      staging = nullptr;
      staging_bytes = 0;
      void* h = nullptr;
      if (cudaHostAlloc(&h, grown, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();  // no page-locked memory to spare: copy directly
        return Status::ok();
      }
      staging = static_cast<uint8_t*>(h);
      staging_bytes = grown;
    }
    if (!staging_free) KILN_CUDA_TRY(cudaEventCreateWithFlags(&staging_free, cudaEventDisableTiming));
    staging_used = 0;
    return Status::ok();
  }

  // `bytes` of this call's staging, or null when the copy goes directly.
  uint8_t* stage(size_t bytes) {
    const size_t need = staged_size(bytes);
    if (need == 0 || staging_used == SIZE_MAX || staging_used + need > staging_bytes) return nullptr;
    uint8_t* p = staging + staging_used;
    staging_used += need;
    return p;
  }

  // Copies `bytes` of host memory to `dst` on the device, through staging
  // when the call stages and the copy is small enough.
  Status copy_in(uint8_t* dst, const void* host, size_t bytes, cudaStream_t stream) {
    uint8_t* p = stage(bytes);
    if (p) std::memcpy(p, host, bytes);
    return cuda_status(cudaMemcpyAsync(dst, p ? p : host, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  }

  // Large read-only inputs are bound (read where they lie) once the same
  // memory came twice in a row; smaller ones are copied into their slots, so
  // that a caller's fresh tensors each call never need a new graph.
  static constexpr size_t kBindBytes = size_t{1} << 20;

  // Puts every input where this launch reads it. A device input the engine
  // writes in place is read and written where it lies (a session's KV cache),
  // unless another input overlaps its memory; so is a large one that stays
  // put. Every other input is copied into its slot: small device inputs with
  // one batched copy, host inputs with a copy each.
  Status place_inputs(std::span<const Tensor> inputs, const engine::RowPadding* padding, cudaStream_t stream) {
    auto padded = [&](size_t i) { return padding && padding->inputs[i]; };
    std::vector<uint8_t*> b(plan.inputs.size(), nullptr);
    std::vector<bool> written(plan.inputs.size(), false);
    for (int w : alias_input)
      if (w >= 0) written[static_cast<size_t>(w)] = true;
    last_input.resize(inputs.size(), nullptr);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!bindable(inputs[i]) || padded(i)) continue;
      const bool stays = inputs[i].nbytes() >= kBindBytes && last_input[i] == inputs[i].raw_data();
      if (written[i] || stays) b[i] = static_cast<uint8_t*>(inputs[i].raw_data());
    }
    for (size_t i = 0; i < inputs.size(); ++i) last_input[i] = inputs[i].is_cpu() ? nullptr : inputs[i].raw_data();
    for (size_t o = 0; o < alias_input.size(); ++o) {
      const int w = alias_input[o];
      if (w < 0 || !b[static_cast<size_t>(w)]) continue;
      const uint8_t* lo = b[static_cast<size_t>(w)];
      const uint8_t* hi = lo + inputs[static_cast<size_t>(w)].nbytes();
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (i == static_cast<size_t>(w) || inputs[i].is_cpu()) continue;
        const auto* a = static_cast<const uint8_t*>(inputs[i].raw_data());
        if (a < hi && lo < a + inputs[i].nbytes()) b[static_cast<size_t>(w)] = b[i] = nullptr;
      }
    }
    bind(b);
    std::vector<CopyRegion> device_copies;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (b[i]) continue;
      const IoSlot& slot = plan.inputs[i];
      if (!inputs[i].is_cpu() && !inputs[i].is_contiguous())
        return invalid_argument(what + ": input " + std::to_string(i) + " ('" + slot.name + "') is " +
                                inputs[i].type_string() + " and not contiguous");
      const Tensor t = inputs[i].is_cpu() ? inputs[i].contiguous() : inputs[i];
      const size_t given = static_cast<size_t>(t.nbytes());  // the slot's bytes, or a padded call's rows
      if (debug && t.is_cpu())
        std::fprintf(stderr, "kiln: upload input %zu '%s' %s (%lld bytes) to %lld: first %g %g\n", i, slot.name.c_str(),
                     t.type_string().c_str(), static_cast<long long>(given), static_cast<long long>(slot.offset),
                     t.value_at(0), t.numel() > 1 ? t.value_at(1) : 0.0);
      if (!t.is_cpu() && !padded(i)) {
        device_copies.push_back({arena.bytes() + slot.offset, t.raw_data(), given});
        continue;
      }
      uint8_t* dst = arena.bytes() + slot.offset;
      if (t.is_cpu())
        KILN_TRY(copy_in(dst, t.raw_data(), given, stream));
      else
        KILN_CUDA_TRY(cudaMemcpyAsync(dst, t.raw_data(), given, cudaMemcpyDefault, stream));
      if (!padded(i)) continue;
      // The rows past the caller's: its last row, then copies of what is filled
      // so far (doubling), so a bucket of any size costs a few copies.
      const size_t row = given / static_cast<size_t>(padding->rows), total = static_cast<size_t>(slot.nbytes());
      size_t filled = given;
      if (filled < total) {
        KILN_CUDA_TRY(cudaMemcpyAsync(dst + filled, dst + filled - row, row, cudaMemcpyDeviceToDevice, stream));
        filled += row;
      }
      for (size_t done = row; filled < total;) {
        const size_t n = std::min(done, total - filled);
        KILN_CUDA_TRY(cudaMemcpyAsync(dst + filled, dst + filled - done, n, cudaMemcpyDeviceToDevice, stream));
        filled += n;
        done += n;
      }
    }
    return copy_regions(device_copies, stream);
  }

  // Swaps the active shape's members with `x`'s.
  void swap_active(Instance& x) {
    std::swap(plan, x.plan);
    std::swap(constants, x.constants);
    std::swap(kernels, x.kernels);
    std::swap(gemms, x.gemms);
    std::swap(convs, x.convs);
    std::swap(kernel_args, x.kernel_args);
    std::swap(kernel_dims, x.kernel_dims);
    std::swap(bound, x.bound);
    std::swap(graphs, x.graphs);
    std::swap(last_input, x.last_input);
    std::swap(launched, x.launched);
  }

  // The GEMM and convolution descriptors and kernel arguments of the active
  // shape's steps (its constants, kernels and algorithms in place).
  Status prepare_steps() {
    if (gemm_ops.size() > kMaxOps) gemm_ops.clear();
    if (conv_ops.size() > kMaxOps) conv_ops.clear();
    gemms.clear();
    gemms.resize(plan.steps.size());
    convs.clear();
    convs.resize(plan.steps.size());
    kernel_args.assign(plan.steps.size(), {});
    kernel_dims.assign(plan.steps.size(), {});
    bound.assign(plan.inputs.size(), nullptr);
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const Step& s = plan.steps[i];
      if (s.kind == Step::Kind::kGemm) {
        std::string key = s.gemm.shape.to_string() + " algo";
        for (uint64_t w : s.gemm.algo.data) key += " " + std::to_string(w);
        std::shared_ptr<const GemmOp>& op = gemm_ops[key];
        if (!op) {
          KILN_ASSIGN_OR_RETURN(GemmOp made, GemmOp::create(lt, s.gemm.shape, s.gemm.algo));
          op = std::make_shared<const GemmOp>(std::move(made));
        }
        gemms[i] = op;
      } else if (s.kind == Step::Kind::kConv) {
        std::shared_ptr<const ConvOp>& op =
            conv_ops[s.conv.shape.to_string() + " algo " + std::to_string(s.conv.algo.algo)];
        if (!op) {
          KILN_ASSIGN_OR_RETURN(ConvOp made, ConvOp::create(dnn, s.conv.shape, s.conv.algo));
          op = std::make_shared<const ConvOp>(std::move(made));
        }
        convs[i] = op;
      } else {
        for (const BufferRef& r : s.kernel.args) kernel_args[i].push_back(ptr(r));
        if (!s.kernel.dims.empty()) {
          kernel_dims[i].assign(kMaxKernelDims, 0);
          std::copy(s.kernel.dims.begin(), s.kernel.dims.end(), kernel_dims[i].begin());
        }
      }
    }
    return Status::ok();
  }

  // Range engines: the symbol values the inputs' sizes give, in the plan's
  // symbol order; kInvalidArgument naming the input and dimension that does
  // not fit (a rank, a fixed size, a size outside its range, two inputs that
  // disagree on a symbol).
  Expected<std::vector<int64_t>> shape_of(std::span<const Tensor> inputs) const {
    const engine::Network& net = range->common->network;
    if (inputs.size() != net.num_inputs)
      return invalid_argument(what + ": the engine takes " + std::to_string(net.num_inputs) + " inputs, got " +
                              std::to_string(inputs.size()));
    ir::SymBindings b;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const ir::Value* v = net.graph.inputs()[i];
      if (v->kind != ir::ValueKind::kTensor) continue;
      if (!inputs[i].defined() || inputs[i].dim() != static_cast<int64_t>(v->type.sizes.size()))
        return invalid_argument(what + ": input " + std::to_string(i) + " ('" + v->name + "') must be " +
                                v->type.to_string() + ", got " +
                                (inputs[i].defined() ? inputs[i].type_string() : std::string("an undefined tensor")));
      for (size_t d = 0; d < v->type.sizes.size(); ++d) {
        const ir::Dim& dim = v->type.sizes[d];
        const std::string* name = &range->common->input_symbols[i][d];
        if (name->empty()) continue;
        const int64_t got = inputs[i].sizes()[d];
        const std::optional<int64_t> value = ir::solve_affine(*dim.expr, *name, got);
        if (!value)
          return invalid_argument(what + ": input " + std::to_string(i) + " ('" + v->name + "') has size " +
                                  std::to_string(got) + " in dimension " + std::to_string(d) + ", which is " +
                                  dim.expr->to_string() + " for no whole " + *name);
        auto [it, fresh] = b.try_emplace(*name, *value);
        if (!fresh && it->second != *value)
          return invalid_argument(what + ": input " + std::to_string(i) + " ('" + v->name + "') has size " +
                                  std::to_string(got) + " in dimension " + std::to_string(d) +
                                  " where an earlier input gives " + *name + " = " + std::to_string(it->second));
      }
    }
    std::vector<int64_t> key;
    for (const PlanSymbol& y : range->common->symbols) {
      auto it = b.find(y.name);
      if (it == b.end()) return internal_error(what + ": no input gives size " + y.name);
      if (it->second < y.min || it->second > y.max)
        return invalid_argument(what + ": size " + y.name + " = " + std::to_string(it->second) +
                                " is outside the range the engine was built for, [" + std::to_string(y.min) + ", " +
                                std::to_string(y.max) + "]");
      key.push_back(it->second);
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      const ir::Value* v = net.graph.inputs()[i];
      if (v->kind != ir::ValueKind::kTensor) continue;
      for (size_t d = 0; d < v->type.sizes.size(); ++d) {
        const ir::Dim& dim = v->type.sizes[d];
        Expected<int64_t> want = dim.is_static() ? Expected<int64_t>(dim.value) : dim.expr->eval(b);
        if (!want || *want != inputs[i].sizes()[d])
          return invalid_argument(what + ": input " + std::to_string(i) + " ('" + v->name + "') must be " +
                                  v->type.to_string() + ", got " + inputs[i].type_string());
      }
    }
    return key;
  }

  // Range engines: makes `key` the active shape: a shape run before is taken
  // from the cache; a new one gets its steps from the layer graph
  // (plan_for_shape), kernels from the plan's by key (compiling any the
  // build did not plan), weights in the forms it asks for, GEMM and
  // convolution algorithms chosen without timing (choose_algorithms), and a
  // larger arena when it needs one (the cached shapes then start again).
  // Waits for the engine's earlier work only for a new shape.
  Status use_shape(const std::vector<int64_t>& key) {
    RangeState& r = *range;
    RangeCommon& c = *r.common;
    if (key == r.active) return Status::ok();
    for (auto it = r.shapes.begin(); it != r.shapes.end(); ++it) {
      if (it->first != key) continue;
      Instance next = std::move(it->second);
      r.shapes.erase(it);
      swap_active(next);
      r.shapes.emplace_front(r.active, std::move(next));
      r.active = key;
      return Status::ok();
    }
    const auto start = std::chrono::steady_clock::now();
    if (c.table) return use_table_shape(key, start);
    ir::SymBindings b;
    for (size_t i = 0; i < key.size(); ++i) b[c.symbols[i].name] = key[i];
    KILN_ASSIGN_OR_RETURN(ShapePlan sp, plan_for_shape(c.network, b, c.config));
    run_time_work_counters().shapes_planned.fetch_add(1, std::memory_order_relaxed);
    const double plan_ms = ms_since(start);
    // A shape whose activations the device cannot hold is refused here, before
    // anything is compiled or freed: the engine goes on serving the shapes
    // that fit.
    if (static_cast<size_t>(sp.plan.arena_bytes) > arena.nbytes()) {
      size_t free_bytes = 0, total = 0;
      KILN_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
      const size_t need = static_cast<size_t>(sp.plan.arena_bytes);
      if (need > free_bytes + arena.nbytes()) {
        const std::string shape = shape_text(key, " = ");
        return invalid_argument(what + ": a call with " + shape + " needs " + std::to_string(need) +
                                " bytes of device memory for the engine's activations; the device has " +
                                std::to_string(free_bytes) + " bytes free (and " + std::to_string(arena.nbytes()) +
                                " in this engine's arena) of " + std::to_string(total));
      }
    }
    Instance next;
    next.plan = std::move(sp.plan);
    // Kernels by key; any the build did not plan (a size that changes a
    // kernel's form) compiled now into a library of their own, once.
    std::unique_lock<std::mutex> learned(c.mutex);
    std::vector<const KernelChoice*> missing;
    std::vector<size_t> missing_at;
    std::vector<std::string> missing_keys, missing_names;
    for (const KernelChoice& kc : sp.kernels) {
      std::string k = kernel_key(kc);
      auto it = c.kernel_by_key.find(k);
      next.kernels.push_back(it == c.kernel_by_key.end() ? nullptr : it->second);
      next.plan.kernel_names.push_back("kiln_k" + k.substr(0, 12));
      if (it != c.kernel_by_key.end()) continue;
      missing_at.push_back(next.kernels.size() - 1);
      missing.push_back(&kc);
      missing_names.push_back("kiln_r" + std::to_string(c.libraries.size()) + "_" + std::to_string(missing.size()));
      missing_keys.push_back(std::move(k));
    }
    const auto compile_start = std::chrono::steady_clock::now();
    if (!missing.empty()) {
      KILN_ASSIGN_OR_RETURN(CompiledModule m, compile_kernels(missing, missing_names, c.config.device.arch()));
      run_time_work_counters().kernels_compiled.fetch_add(missing.size(), std::memory_order_relaxed);
      cudaLibrary_t lib = nullptr;
      KILN_CUDA_TRY(cudaLibraryLoadData(&lib, m.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
      c.libraries.push_back(lib);
      for (size_t j = 0; j < missing.size(); ++j) {
        cudaKernel_t kern = nullptr;
        KILN_TRY(cuda_status(cudaLibraryGetKernel(&kern, lib, missing_names[j].c_str()), "cudaLibraryGetKernel"));
        c.kernel_by_key[missing_keys[j]] = kern;
        next.kernels[missing_at[j]] = kern;
      }
    }
    const double compile_ms = ms_since(compile_start);
    KILN_ASSIGN_OR_RETURN(next.constants, device_constants(c.weights, next.plan.constants, what));
    const auto steps_start = std::chrono::steady_clock::now();
    // The algorithms first: nothing below runs on the device, so the arena
    // is waited for only when it must grow.
    KILN_TRY(choose_algorithms(next.plan).with_context(what + ": a new shape"));
    learned.unlock();
    bool restart = false;
    if (static_cast<size_t>(next.plan.arena_bytes) > arena.nbytes()) {
      KILN_CUDA_TRY(cudaEventSynchronize(engine_done));
      // The old arena goes first (the new one may need its memory); if the
      // device cannot hold the new one after all, an arena of the old size is
      // taken back and the active shape prepared on it again.
      const size_t old_bytes = arena.nbytes();
      arena = DeviceBuffer();
      Expected<DeviceBuffer> fresh = DeviceBuffer::allocate(static_cast<size_t>(next.plan.arena_bytes));
      if (!fresh) {
        KILN_ASSIGN_OR_RETURN(arena, DeviceBuffer::allocate(old_bytes));
        ++arena_generation;
        KILN_CUDA_TRY(cudaMemsetAsync(arena.get(), 0, arena.nbytes(), own_stream));
        KILN_CUDA_TRY(cudaStreamSynchronize(own_stream));
        r.shapes.clear();
        for (auto& [bd, g] : graphs) cudaGraphExecDestroy(g);
        graphs.clear();
        KILN_TRY(prepare_steps());
        return fresh.status().with_context(what + ": a new shape");
      }
      arena = std::move(*fresh);
      ++arena_generation;
      KILN_CUDA_TRY(cudaMemsetAsync(arena.get(), 0, arena.nbytes(), own_stream));
      KILN_CUDA_TRY(cudaStreamSynchronize(own_stream));
      r.shapes.clear();
      restart = true;
    }
    swap_active(next);  // `next` holds the shape active before
    if (Status st = prepare_steps(); !st) {
      swap_active(next);
      if (restart) {  // the arena moved: the earlier shape's pointers again, its graphs captured anew
        for (auto& [bd, g] : graphs) cudaGraphExecDestroy(g);
        graphs.clear();
        (void)prepare_steps();
      }
      return st.with_context(what + ": a new shape");
    }
    if (!restart) r.shapes.emplace_front(r.active, std::move(next));
    while (r.shapes.size() + 1 > c.shapes_kept) r.shapes.pop_back();
    r.active = key;
    run_time_work_counters().shapes_prepared.fetch_add(1, std::memory_order_relaxed);
    if (c.trace) {
      const std::string shape = shape_text(key, "=");
      std::fprintf(stderr,
                   "kiln: %s: shape %s prepared in %.3f ms: steps planned %.3f ms, %zu kernel(s) compiled %.3f ms, "
                   "algorithms and descriptors %.3f ms\n",
                   what.c_str(), shape.c_str(), ms_since(start), plan_ms, missing.size(), compile_ms,
                   ms_since(steps_start));
    }
    return Status::ok();
  }

  // Loads, at load time, the library kernels a call could otherwise meet
  // first at a new size: cuBLASLt and cuDNN load a kernel when it is first
  // launched (5-20 ms on an H100 for a GEMM kernel), which a range engine's
  // first calls paid at most of their sizes. The engine runs once, on its own
  // stream with whatever its arena holds as inputs, at each shape of its table
  // whose steps bring a GEMM kernel class (algorithm, types, layouts,
  // epilogue, operand alignment) or a convolution shape the process has not
  // run yet; results are dropped, the error word cleared, and the shape at
  // opt made active again. Each class and shape is run once per process.
  Status warm_libraries() {
    RangeCommon& c = *range->common;
    if (!c.table) return Status::ok();
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int64_t> opt = range->active;
    int device = 0;
    KILN_CUDA_TRY(cudaGetDevice(&device));
    static std::mutex warmed_mutex;
    static auto* warmed = new std::set<std::string>();  // never destroyed, as the library kernels stay loaded
    size_t runs = 0;
    const size_t count = c.table->starts.size();
    for (size_t i = 0; i < count; ++i) {
      KILN_ASSIGN_OR_RETURN(CudaPlan p, c.table->shape_plan(c.header, i));
      std::vector<std::string> keys;
      for (const Step& st : p.steps) {
        if (st.kind == Step::Kind::kGemm) {
          const std::string shape = st.gemm.shape.to_string();
          auto a = c.table_algos.gemms.find(shape);
          keys.push_back(std::to_string(device) + " " +
                         gemm_kernel_class(st.gemm.shape, a == c.table_algos.gemms.end() ? nullptr : &a->second));
        } else if (st.kind == Step::Kind::kConv) {
          keys.push_back(std::to_string(device) + " " + st.conv.shape.to_string());
        }
      }
      bool fresh = false;
      {
        std::lock_guard<std::mutex> lock(warmed_mutex);
        for (const std::string& k : keys) fresh = warmed->insert(k).second || fresh;
      }
      if (!fresh) continue;
      const std::vector<int64_t> key = ShapeTable::values(c.symbols, i);
      KILN_TRY(use_shape(key).with_context("warming the libraries' kernels"));
      KILN_TRY(
          enqueue(own_stream).with_context(what + ": warming the libraries' kernels at " + shape_text(key, " = ")));
      ++runs;
    }
    KILN_CUDA_TRY(cudaStreamSynchronize(own_stream));
    if (error_host) *error_host = 0;
    if (!plan.error_layers.empty()) {
      KILN_CUDA_TRY(cudaMemsetAsync(arena.bytes() + plan.error_offset, 0, 4, own_stream));
      KILN_CUDA_TRY(cudaStreamSynchronize(own_stream));
    }
    KILN_TRY(use_shape(opt));
    if (c.trace)
      std::fprintf(stderr, "kiln: %s: the libraries' kernels warmed at %zu of %zu shapes in %.3f ms\n", what.c_str(),
                   runs, count, ms_since(start));
    return Status::ok();
  }

  // Makes every shape of a table engine's range ready on this context, when
  // the context keeps them all (shapes_kept at least the table's size): its
  // steps and descriptors, and a graph captured for calls whose inputs lie in
  // the arena (host inputs), so that no call pays for a size's first use
  // (except an engine's that writes inputs in place, below).
  // Runs when the context opens (at load for the first); no step runs (the
  // graphs are only uploaded). The shape at opt is made active again.
  Status prepare_table() {
    RangeCommon& c = *range->common;
    if (!c.table || !use_graphs || debug || profile || c.shapes_kept < c.table->starts.size()) return Status::ok();
    // An engine that writes inputs in place (a decoder's KV caches) is called
    // with that state bound where it lies (a session's device memory), and a
    // graph captured here, over the arena's own slots, would never be
    // replayed: its shapes are prepared without graphs, captured instead as
    // sizes recur with the caller's bindings.
    const bool in_place = std::any_of(alias_input.begin(), alias_input.end(), [](int in) { return in >= 0; });
    const auto start = std::chrono::steady_clock::now();
    size_t free_before = 0, total = 0;
    if (c.trace) KILN_CUDA_TRY(cudaMemGetInfo(&free_before, &total));
    const std::vector<int64_t> opt = range->active;
    const size_t count = c.table->starts.size();
    for (size_t i = 0; i < count; ++i) {
      KILN_TRY(use_shape(ShapeTable::values(c.symbols, i)).with_context("preparing the range's shapes"));
      if (!in_place && std::none_of(graphs.begin(), graphs.end(), [&](const auto& g) { return g.first == bound; }))
        KILN_TRY(capture_graph().with_context(what + ": preparing the range's shapes"));
    }
    KILN_TRY(use_shape(opt));
    if (c.trace) {
      size_t free_after = 0;
      KILN_CUDA_TRY(cudaMemGetInfo(&free_after, &total));
      std::fprintf(stderr, "kiln: %s: %zu shapes prepared %s in %.3f ms, %.1f MiB of device memory\n", what.c_str(),
                   count, in_place ? "(graphs as sizes recur)" : "with their graphs", ms_since(start),
                   (static_cast<double>(free_before) - static_cast<double>(free_after)) / (1 << 20));
    }
    return Status::ok();
  }

  // "s0=7, s1=3": a shape's symbol values, for messages.
  std::string shape_text(const std::vector<int64_t>& key, const char* equals) const {
    std::string out;
    for (size_t i = 0; i < key.size(); ++i)
      out += (i ? ", " : "") + range->common->symbols[i].name + equals + std::to_string(key[i]);
    return out;
  }

  // use_shape for an engine whose plan holds every shape's steps: the
  // shape's plan from the table, the plan's kernels, weights in the forms
  // it asks for, algorithms the build chose, all within the arena the
  // build sized for the range. Nothing is planned, compiled, timed or
  // allocated here.
  Status use_table_shape(const std::vector<int64_t>& key, std::chrono::steady_clock::time_point start) {
    RangeState& r = *range;
    RangeCommon& c = *r.common;
    Instance next;
    KILN_ASSIGN_OR_RETURN(next.plan, c.table->shape_plan(c.header, ShapeTable::index(c.symbols, key)));
    if (static_cast<size_t>(next.plan.arena_bytes) > arena.nbytes())
      return internal_error(what + ": a shape of the table needs more than the range's arena");
    const double plan_ms = ms_since(start);
    next.kernels = c.kernels;
    const size_t variant = c.table->variant(ShapeTable::index(c.symbols, key));
    if (!c.variant_constants[variant].empty() || next.plan.constants.empty()) {
      next.constants = c.variant_constants[variant];
    } else {
      KILN_ASSIGN_OR_RETURN(next.constants, device_constants(c.weights, next.plan.constants, what));
    }
    const auto steps_start = std::chrono::steady_clock::now();
    // Every algorithm from the table's, without the lock other contexts'
    // calls would wait on; one missing (never, for a plan as built) is chosen.
    auto recorded = [](const auto& algos, const std::string& shape, auto& algo) {
      auto it = algos.find(shape);
      if (it != algos.end()) algo = it->second;
      return it != algos.end();
    };
    bool all = true;
    for (Step& st : next.plan.steps) {
      if (st.kind == Step::Kind::kGemm)
        all = recorded(c.table_algos.gemms, st.gemm.shape.to_string(), st.gemm.algo) && all;
      if (st.kind == Step::Kind::kConv)
        all = recorded(c.table_algos.convs, st.conv.shape.to_string(), st.conv.algo) && all;
    }
    if (!all) {
      std::lock_guard<std::mutex> learned(c.mutex);
      KILN_TRY(choose_algorithms(next.plan).with_context(what + ": a new shape"));
    }
    swap_active(next);  // `next` holds the shape active before
    if (Status st = prepare_steps(); !st) {
      swap_active(next);
      return st.with_context(what + ": a new shape");
    }
    r.shapes.emplace_front(r.active, std::move(next));
    while (r.shapes.size() + 1 > c.shapes_kept) r.shapes.pop_back();
    r.active = key;
    run_time_work_counters().shapes_prepared.fetch_add(1, std::memory_order_relaxed);
    if (c.trace) {
      const std::string shape = shape_text(key, "=");
      std::fprintf(stderr,
                   "kiln: %s: shape %s prepared in %.3f ms from the plan's table: steps %.3f ms, "
                   "algorithms and descriptors %.3f ms\n",
                   what.c_str(), shape.c_str(), ms_since(start), plan_ms, ms_since(steps_start));
    }
    return Status::ok();
  }

  // The GEMM and convolution algorithms of a new shape's steps, none timed:
  // one remembered for the same GEMM or convolution shape (the build's, at
  // opt, or one chosen for an earlier shape), else for a GEMM the first of
  // cuBLASLt's heuristic, for a convolution the algorithm the build timed
  // for the same layer where cuDNN runs it at this size, else cuDNN's
  // heuristic. Host work only, within the workspace the plan allocated; the
  // caller holds the range's mutex.
  Status choose_algorithms(CudaPlan& p) {
    RangeCommon& c = *range->common;
    if (c.tuned.gemms.size() + c.tuned.convs.size() >
        c.built.gemms.size() + c.built.convs.size() + RangeCommon::kMaxTunedShapes)
      c.tuned = c.built;
    for (Step& s : p.steps) {
      if (s.kind == Step::Kind::kKernel) continue;
      KILN_ASSIGN_OR_RETURN(bool fresh,
                            choose_algorithm(s, lt, dnn, c.conv_algo_by_layer, c.tuned, workspace.nbytes()));
      if (fresh) run_time_work_counters().algorithms_chosen.fetch_add(1, std::memory_order_relaxed);
    }
    return Status::ok();
  }

  // The inputs against the plan's slots (a padded call's padded inputs with
  // the caller's rows), and the padding against the plan.
  Status check_inputs(std::span<const Tensor> inputs, const engine::RowPadding* padding) const {
    if (inputs.size() != plan.inputs.size())
      return invalid_argument(what + ": the engine takes " + std::to_string(plan.inputs.size()) + " inputs, got " +
                              std::to_string(inputs.size()));
    if (padding) {
      if (range) return internal_error(what + ": a padded call of an engine for a range of shapes");
      std::vector<Shape> ins, outs;
      for (const IoSlot& s : plan.inputs) ins.push_back(s.sizes);
      for (const IoSlot& s : plan.outputs) outs.push_back(s.sizes);
      KILN_TRY(padding->check(ins, outs, what));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      const IoSlot& s = plan.inputs[i];
      const Tensor& t = inputs[i];
      const Shape want = engine::RowPadding::input_sizes(padding, i, s.sizes);
      if (!t.defined() || t.dtype() != s.dtype || t.sizes() != want)
        return invalid_argument(what + ": input " + std::to_string(i) + " ('" + s.name + "') must be " +
                                std::string(dtype_name(s.dtype)) + shape_to_string(want) + ", got " +
                                (t.defined() ? t.type_string() : std::string("an undefined tensor")));
    }
    return Status::ok();
  }

  // The error an earlier call's kernels left in the error word (as the host
  // sees it), cleared; ok when none. `earlier`: the call that set it has
  // returned already (an asynchronous one).
  Status take_error(cudaStream_t stream, bool earlier) {
    if (!error_host) return Status::ok();
    const int32_t code = *error_host;
    if (code == 0) return Status::ok();
    *error_host = 0;
    KILN_CUDA_TRY(cudaMemsetAsync(arena.bytes() + plan.error_offset, 0, 4, stream));
    const std::string layer = code > 0 && static_cast<size_t>(code) <= plan.error_layers.size()
                                  ? plan.error_layers[static_cast<size_t>(code - 1)]
                                  : "unknown";
    return invalid_argument(what + (earlier ? ": an earlier call on device memory" : "") + ": layer '" + layer +
                            "': an index is out of range of the dimension it indexes");
  }
};

// An engine as load() returns it: what its contexts share (the plan as
// built, weights, kernels, a range engine's layer graph) and the contexts.
// Calls run side by side, each on a context of its own: a free one (the one
// the caller's stream used last, where free), else a new one while fewer
// than max_contexts are open, else the first one freed. One caller's calls
// on one stream keep to one context, its prepared shapes and graphs.
struct CudaEngineGroup final : engine::EngineState {
  CudaEngine base;  // the loaded plan (its cubin dropped once loaded), constants, kernels and settings; no memory
  cudaLibrary_t library = nullptr;
  std::shared_ptr<RangeCommon> range;
  size_t max_contexts = kDefaultContexts;
  struct Slot {
    std::unique_ptr<CudaEngine> context;
    bool busy = false;
    void* last_stream = nullptr;
  };
  std::mutex mutex;  // guards `contexts` (the vector and each slot's busy and last_stream) and `opening`
  std::condition_variable freed;
  std::vector<Slot> contexts;
  size_t opening = 0;  // contexts being opened (outside the lock)

  ~CudaEngineGroup() override {
    contexts.clear();  // their graphs and descriptors before the kernels they launch
    range.reset();
    if (library) cudaLibraryUnload(library);
  }

  // A context of its own for one call, returned to the engine when the lease ends.
  class Lease {
   public:
    Lease(CudaEngineGroup* g, size_t i) : g_(g), i_(i) {}
    Lease(Lease&& o) noexcept : g_(std::exchange(o.g_, nullptr)), i_(o.i_) {}
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (!g_) return;
      {
        std::lock_guard<std::mutex> lock(g_->mutex);
        g_->contexts[i_].busy = false;
      }
      g_->freed.notify_all();
    }
    CudaEngine* get() const {
      std::lock_guard<std::mutex> lock(g_->mutex);
      return g_->contexts[i_].context.get();
    }

   private:
    CudaEngineGroup* g_;
    size_t i_;
  };

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex);
    return contexts.size();
  }

  // A context for a call on `stream` (see the struct comment).
  Expected<Lease> acquire(void* stream) {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      size_t pick = contexts.size();
      for (size_t i = 0; i < contexts.size() && pick == contexts.size(); ++i)
        if (!contexts[i].busy && contexts[i].last_stream == stream) pick = i;
      for (size_t i = 0; i < contexts.size() && pick == contexts.size(); ++i)
        if (!contexts[i].busy) pick = i;
      if (pick == contexts.size() && contexts.size() + opening < max_contexts) {
        // Opened without the lock (preparing a range's shapes takes a while),
        // and taken at once by this call.
        ++opening;
        lock.unlock();
        Expected<std::unique_ptr<CudaEngine>> c = open_context();
        if (c && (*c)->range)
          if (Status st = (*c)->prepare_table(); !st) c = std::move(st);
        lock.lock();
        --opening;
        if (c) {
          contexts.push_back({std::move(*c), true, stream});
          return Lease(this, contexts.size() - 1);
        }
        if (contexts.empty()) return c.status();
        max_contexts = contexts.size() + opening;  // the device holds no more: later calls wait for a free one
        continue;
      }
      if (pick < contexts.size()) {
        contexts[pick].busy = true;
        contexts[pick].last_stream = stream;
        return Lease(this, pick);
      }
      freed.wait(lock);
    }
  }

  // Context `i` once it is free.
  Lease acquire_at(size_t i) {
    std::unique_lock<std::mutex> lock(mutex);
    freed.wait(lock, [&] { return !contexts[i].busy; });
    contexts[i].busy = true;
    return Lease(this, i);
  }

  // A new context: its own stream, arena (a range engine's: for the range's
  // largest shape), workspace, error word, library handles, and the steps of
  // the plan as built.
  Expected<std::unique_ptr<CudaEngine>> open_context() const {
    auto e = std::make_unique<CudaEngine>();
    e->what = base.what;
    e->alias_input = base.alias_input;
    e->plan = base.plan;
    e->constants = base.constants;
    e->kernels = base.kernels;
    e->use_graphs = base.use_graphs;
    e->use_staging = base.use_staging;
    e->debug = base.debug;
    e->early_launch = base.early_launch;
    e->profile = base.profile;
    e->profile_all = base.profile_all;
    const CudaPlan& p = e->plan;
    KILN_CUDA_TRY(cudaStreamCreateWithFlags(&e->own_stream, cudaStreamNonBlocking));
    KILN_CUDA_TRY(cudaEventCreateWithFlags(&e->engine_done, cudaEventDisableTiming));
    KILN_ASSIGN_OR_RETURN(e->arena, DeviceBuffer::allocate(static_cast<size_t>(p.arena_bytes)));
    // Zeroed on the context's own (non-blocking) stream and waited for: a
    // plain cudaMemset runs on the legacy default stream, which that stream
    // does not wait for, and could land after the first inputs are copied in.
    KILN_CUDA_TRY(cudaMemsetAsync(e->arena.get(), 0, e->arena.nbytes(), e->own_stream));
    KILN_CUDA_TRY(cudaStreamSynchronize(e->own_stream));
    KILN_ASSIGN_OR_RETURN(e->workspace, DeviceBuffer::allocate(std::max<size_t>(p.workspace_bytes, 256)));
    if (!p.error_layers.empty()) {
      void* h = nullptr;
      KILN_CUDA_TRY(cudaHostAlloc(&h, sizeof(int32_t), cudaHostAllocMapped));
      e->error_host = static_cast<volatile int32_t*>(h);
      *e->error_host = 0;
      KILN_CUDA_TRY(cudaHostGetDevicePointer(&e->error_host_device, h, 0));
    }
    KILN_CUBLAS_TRY(cublasLtCreate(&e->lt));
    KILN_CUDNN_TRY(cudnnCreate(&e->dnn));
    KILN_TRY(e->prepare_steps());
    if (range) {
      e->range = std::make_unique<RangeState>();
      e->range->common = range;
      for (const PlanSymbol& y : range->symbols) e->range->active.push_back(y.opt);
    }
    return e;
  }
};

// One weight's device copy, with the host weight it was made from held alive
// (so that no other host tensor can take its address while the copy exists).
struct SharedConstant {
  DeviceBuffer buffer;
  Tensor host;
};

// The device copy of host weight `w` in the form `c` asks for, shared across
// the engines of this process: the prefill and decode methods of one model,
// the shape profiles and padded batch buckets of one method, and programs
// loaded twice each bind the same weights, and keep one copy on the device.
// Keyed by the host bytes' address and size and the device form; an entry
// lives while an engine uses it.
using SharedConstantKey = std::tuple<const void*, size_t, int, std::vector<int64_t>, int, bool, bool, int64_t>;
std::mutex shared_constants_mutex;
std::map<SharedConstantKey, std::weak_ptr<SharedConstant>>& shared_constants() {
  static auto* shared = new std::map<SharedConstantKey, std::weak_ptr<SharedConstant>>();
  return *shared;
}

Expected<std::shared_ptr<const DeviceBuffer>> shared_device_constant(const Tensor& w, const DeviceConstant& c) {
  const SharedConstantKey key{
      w.raw_data(), w.nbytes(),       static_cast<int>(w.dtype()), c.sizes, static_cast<int>(c.dtype), c.channels_last,
      c.transposed, c.padded_channels};
  std::lock_guard<std::mutex> lock(shared_constants_mutex);
  auto& shared = shared_constants();
  if (auto it = shared.find(key); it != shared.end())
    if (auto s = it->second.lock()) return std::shared_ptr<const DeviceBuffer>(s, &s->buffer);
  KILN_ASSIGN_OR_RETURN(Tensor host, device_form(w, c));
  auto s = std::make_shared<SharedConstant>();
  KILN_ASSIGN_OR_RETURN(s->buffer, DeviceBuffer::allocate(static_cast<size_t>(c.nbytes())));
  KILN_CUDA_TRY(cudaMemcpy(s->buffer.get(), host.raw_data(), static_cast<size_t>(c.nbytes()), cudaMemcpyHostToDevice));
  s->host = w;
  std::erase_if(shared, [](const auto& entry) { return entry.second.expired(); });
  shared[key] = s;
  return std::shared_ptr<const DeviceBuffer>(s, &s->buffer);
}

}  // namespace

std::pair<size_t, uint64_t> device_weight_copies() {
  std::lock_guard<std::mutex> lock(shared_constants_mutex);
  std::pair<size_t, uint64_t> out{0, 0};
  for (const auto& [key, weak] : shared_constants())
    if (auto s = weak.lock()) {
      ++out.first;
      out.second += s->buffer.nbytes();
    }
  return out;
}

RunTimeWork run_time_work() {
  const RunTimeWorkCounters& c = run_time_work_counters();
  return {c.shapes_prepared.load(), c.shapes_planned.load(), c.kernels_compiled.load(), c.algorithms_chosen.load(),
          c.graphs_captured.load()};
}

namespace {

class CudaBackend final : public engine::Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& options) : options_(options) {
    target_.backend = "cuda";
    // float64 and the narrow integers only in elementwise layers, casts and
    // views (cuda_refusal says so for the rest).
    target_.dtypes = {DType::Float32, DType::Float16, DType::BFloat16, DType::Int64, DType::Int32,
                      DType::Bool,    DType::Float64, DType::Int16,    DType::Int8,  DType::UInt8};
    target_.symbolic_dims = true;  // one engine per segment serves a range of sizes (build_cuda_plan)
    target_.finite_ranges = true;  // its arena is planned for the largest size
    target_.prefers_batch_buckets = true;
    target_.implements = [](ir::OpKind op) {
      return cuda_implements(op) || ir::op_category(op) == ir::OpCategory::kCheck;
    };
    target_.refuses = [](const ir::Node& n) {
      if (ir::op_category(n.op) != ir::OpCategory::kCheck) return cuda_refusal(n);
      // An engine checks sizes where its inputs come in (the profile's ranges);
      // a check of a scalar some node computes from tensor data (a count
      // after nonzero) is not about its inputs: the host checks it.
      for (const ir::Value* v : n.operands())
        if (v->kind != ir::ValueKind::kTensor && !v->sym && v->producer)
          return std::string("a run-time check of a scalar computed from tensor data (checked on the host)");
      return std::string();
    };
    target_.passes = cuda_network_passes();
  }
  std::string_view name() const override { return "cuda"; }
  const engine::TargetInfo& target() const override { return target_; }
  std::string identity() const override {
    auto dev = current_device();
    if (!dev) return "cuda (no device)";
    return "cuda " + dev->name + " " + dev->arch() + " " + std::to_string(dev->sm_count) + " SMs, cuBLASLt " +
           std::to_string(cublasLtGetVersion()) + ", cuDNN " + std::to_string(cudnnGetVersion()) + ", NVRTC " +
           nvrtc_version();
  }
  std::string quick_identity() const override { return cuda::quick_identity(); }
  Status ready() const override { return current_device().status(); }
  bool loads_onto_device() const override { return true; }
  const engine::DeviceMemory* device_memory() const override { return &cuda_device_memory(); }
  std::string load_settings() const override {
    const Settings::Cuda c = settings().cuda;
    return "graphs=" + std::to_string(c.graphs) + ";debug=" + std::to_string(c.debug) +
           ";profile=" + std::to_string(c.profile) + ";shapes=" + c.shapes + ";pdl=" + std::to_string(c.early_launch) +
           ";staging=" + std::to_string(c.staging) + ";trace=" + std::to_string(c.trace) + ";";
  }

  Expected<std::vector<uint8_t>> build(engine::Network net, const engine::BuildOptions& options) const override {
    BuildConfig config;
    KILN_ASSIGN_OR_RETURN(config.device, current_device());
    KILN_TRY(cublaslt_loaded());
    if (config.device.major < 8)
      return unsupported("the CUDA backend needs compute capability 8.0 or newer; " + config.device.name + " has " +
                         config.device.arch());
    config.precision = options.precision;
    config.progress = options.progress;
    config.sizes_at_run_time = options_.sizes_at_run_time;
    config.symbols = options.symbols;
    config.passes = options.passes;
    if (options.passes.dump) {
      // The shapes of a range plan are emitted on several threads: one dump at a time.
      auto lock = std::make_shared<std::mutex>();
      config.passes.dump = [lock, dump = options.passes.dump](const std::string& pass, const std::string& text) {
        std::lock_guard<std::mutex> hold(*lock);
        dump(pass, text);
      };
    }
    KILN_ASSIGN_OR_RETURN(CudaPlan cp, build_cuda_plan(net, config));
    KILN_TRY(engine::canonicalize(net));
    engine::EnginePlan plan;
    plan.backend = "cuda";
    plan.memory = engine::plan_memory(net, [](const ir::Node&) { return false; });
    KILN_ASSIGN_OR_RETURN(plan.aliases, engine::in_place_aliases(net));
    net.kernels.assign(net.graph.nodes().size(), "cuda");
    plan.network = std::move(net);
    const std::string json = cp.to_json();
    plan.extra.emplace_back(kPlanSection, std::vector<uint8_t>(json.begin(), json.end()));
    plan.extra.emplace_back(kCubinSection, std::move(cp.cubin));
    if (cp.table) plan.extra.emplace_back(kShapesSection, cp.table->records);
    return engine::serialize_plan(plan);
  }

  Expected<engine::PlanMemory> plan_memory(std::span<const uint8_t> bytes) const override {
    KILN_ASSIGN_OR_RETURN(CudaEnginePlan read, read_cuda_engine_plan(bytes, "engine plan"));
    engine::PlanMemory m;
    m.arena_bytes = read.plan.arena_bytes;  // a range engine's: the most any shape of its range needs
    m.workspace_bytes = static_cast<int64_t>(std::max<size_t>(read.plan.workspace_bytes, 256));  // as load() allocates
    for (const DeviceConstant& c : read.plan.constants) m.weight_bytes += c.nbytes();
    return m;
  }

  Expected<engine::EngineHandle> load(std::span<const uint8_t> bytes, const engine::WeightLookup& weights,
                                      std::string_view what) const override {
    // Everything in the bytes is read and checked on the host before the
    // device is touched (read_cuda_engine_plan; the fuzz target fuzz_cuda_plan
    // drives the same reader).
    KILN_ASSIGN_OR_RETURN(CudaEnginePlan read, read_cuda_engine_plan(bytes, what));
    auto g = std::make_unique<CudaEngineGroup>();
    CudaEngine& e = g->base;
    e.what = std::string(what);
    e.alias_input = std::move(read.alias_input);
    e.plan = std::move(read.plan);
    const CudaPlan& p = e.plan;
    KILN_ASSIGN_OR_RETURN(DeviceInfo dev, current_device());
    KILN_TRY(cublaslt_loaded().with_context(e.what));
    if (dev.arch() != p.arch)
      return unsupported(e.what + ": the engine was built for " + p.arch + " (" + p.device_name + "); this device is " +
                         dev.name + " (" + dev.arch() + "): rebuild it here");
    const Settings::Cuda switches = settings().cuda;
    const Expected<size_t> kept_setting = shapes_kept();
    if (!kept_setting) return kept_setting.status().with_context(e.what);
    const Expected<size_t> contexts_setting = contexts_kept();
    if (!contexts_setting) return contexts_setting.status().with_context(e.what);
    g->max_contexts = *contexts_setting;
    e.use_graphs = switches.graphs;
    e.use_staging = switches.staging;
    e.early_launch = switches.early_launch;
    e.debug = switches.debug;
    e.profile = switches.profile > 0;
    e.profile_all = switches.profile == 2;
    for (const DeviceConstant& c : p.constants) {
      auto w = weights(c.name);
      if (!w) return format_error(e.what + ": constant '" + c.name + "': " + w.status().message());
      KILN_ASSIGN_OR_RETURN(std::shared_ptr<const DeviceBuffer> d, shared_device_constant(*w, c));
      e.constants.push_back(std::move(d));
    }
    if (!p.kernel_names.empty()) {
      KILN_CUDA_TRY(cudaLibraryLoadData(&g->library, p.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
      for (const std::string& k : p.kernel_names) {
        cudaKernel_t kern = nullptr;
        KILN_TRY(cuda_status(cudaLibraryGetKernel(&kern, g->library, k.c_str()), "cudaLibraryGetKernel")
                     .with_context(e.what + ": kernel " + k));
        e.kernels.push_back(kern);
      }
      // Every step passes one device pointer per parameter of its kernel,
      // then its run-time sizes when it has any (a launch reads as many
      // argument slots as the compiled kernel has parameters): the steps of
      // one kernel agree on both, and the compiled kernel's parameter after
      // the pointers is the last one, pointer-sized or a KilnDims.
      std::vector<std::pair<int64_t, bool>> params(e.kernels.size(), {-1, false});
      for (const Step& s : p.steps) {
        if (s.kind != Step::Kind::kKernel) continue;
        auto& [n, dims] = params[static_cast<size_t>(s.kernel.kernel)];
        const int64_t count = static_cast<int64_t>(s.kernel.args.size());
        if (n >= 0 && (n != count || dims != !s.kernel.dims.empty()))
          return format_error(e.what + ": layer '" + s.layer + "' passes " + std::to_string(count) + " arguments" +
                              (s.kernel.dims.empty() ? "" : " and its sizes") + " to kernel " +
                              p.kernel_names[static_cast<size_t>(s.kernel.kernel)] + ", other steps " +
                              std::to_string(n) + (dims ? " and their sizes" : ""));
        n = count;
        dims = !s.kernel.dims.empty();
      }
      for (size_t k = 0; k < e.kernels.size(); ++k) {
        const auto [n, dims] = params[k];
        const int64_t last = n + (dims ? 1 : 0);
        if (last <= 0) continue;
        const size_t want = dims ? sizeof(int64_t) * kMaxKernelDims : sizeof(void*);
        size_t offset = 0, size = 0;
        const bool fits = cudaFuncGetParamInfo(reinterpret_cast<const void*>(e.kernels[k]),
                                               static_cast<size_t>(last - 1), &offset, &size) == cudaSuccess &&
                          size == want;
        if (!fits) (void)cudaGetLastError();
        if (!fits)
          return format_error(e.what + ": kernel " + p.kernel_names[k] + " does not take the " + std::to_string(n) +
                              " device pointers" + (dims ? " and the sizes" : "") + " its steps pass");
      }
    }
    e.plan.cubin = {};  // loaded: the contexts' copies of the plan need no kernel binary
    if (!p.symbols.empty()) {
      // A range engine: what it needs to make the steps of other shapes.
      auto r = std::make_shared<RangeCommon>();
      r->network = std::move(read.common.network);
      r->symbols = p.symbols;
      for (size_t i = 0; i < r->network.num_inputs; ++i) {
        const ir::Value* v = r->network.graph.inputs()[i];
        std::vector<std::string> names(v->type.sizes.size());
        for (size_t d = 0; d < names.size(); ++d)
          if (v->kind == ir::ValueKind::kTensor && !v->type.sizes[d].is_static())
            names[d] = ir::affine_symbol(*v->type.sizes[d].expr).value_or("");
        r->input_symbols.push_back(std::move(names));
      }
      r->config.device = dev;
      r->config.precision = p.precision;
      for (const PlanSymbol& y : p.symbols) r->config.symbols[y.name] = {y.min, y.max, y.opt};
      for (const std::string& name : r->network.constant_names) {
        auto w = weights(name);
        if (!w) return format_error(e.what + ": constant '" + name + "': " + w.status().message());
        r->weights[name] = *w;
      }
      for (size_t k = 0; k < p.kernel_keys.size(); ++k) r->kernel_by_key[p.kernel_keys[k]] = e.kernels[k];
      for (const Step& st : p.steps) {  // the build's timings at opt
        if (st.kind == Step::Kind::kGemm) r->tuned.gemms.emplace(st.gemm.shape.to_string(), st.gemm.algo);
        if (st.kind == Step::Kind::kConv) {
          r->tuned.convs.emplace(st.conv.shape.to_string(), st.conv.algo);
          r->conv_algo_by_layer.emplace(st.layer, st.conv.algo.algo);
        }
      }
      if (p.table) {  // and the algorithms it chose for every other shape
        r->table = p.table;
        r->tuned.gemms.insert(p.table->gemm_algos.begin(), p.table->gemm_algos.end());
        r->tuned.convs.insert(p.table->conv_algos.begin(), p.table->conv_algos.end());
        r->kernels = e.kernels;
        r->header = p;
        r->header.steps.clear();
        r->header.table = nullptr;
        r->variant_constants.resize(p.table->variants.size());
        for (size_t v = 0; v < p.table->variants.size(); ++v) {
          if (!p.table->constants_fixed(v)) continue;
          KILN_ASSIGN_OR_RETURN(r->variant_constants[v],
                                device_constants(r->weights, p.table->variants[v].constants, e.what));
        }
      }
      r->built = r->tuned;
      if (p.table) r->table_algos = r->tuned;
      r->trace = switches.trace;
      // Unless set: every shape of a table of at most kMaxPreparedShapes, else kDefaultShapesKept.
      r->shapes_kept = *kept_setting ? *kept_setting
                       : p.table && p.table->starts.size() <= kMaxPreparedShapes
                           ? std::max(p.table->starts.size(), kDefaultShapesKept)
                           : kDefaultShapesKept;
      g->range = std::move(r);
    }
    // The kernels every call launches around the engine's own (its copies in and out).
    KILN_TRY(load_runtime_kernels().with_context(e.what));
    // The first context now: a plan the device cannot run fails the load.
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<CudaEngine> first, g->open_context());
    if (first->range) {
      KILN_TRY(first->warm_libraries());
      KILN_TRY(first->prepare_table());
    }
    g->contexts.push_back({std::move(first), false, nullptr});
    return g.release();
  }

  Status execute(const engine::ExecuteContext& context, engine::EngineHandle handle, std::span<const Tensor> inputs,
                 std::vector<Tensor>& outputs) const override {
    auto* g = static_cast<CudaEngineGroup*>(handle);
    KILN_ASSIGN_OR_RETURN(CudaEngineGroup::Lease lease, g->acquire(context.stream));
    return run_on(lease.get(), inputs, outputs, context);
  }

  // One call on one context of an engine (see Backend::execute).
  static Status run_on(CudaEngine* e, std::span<const Tensor> inputs, std::vector<Tensor>& outputs,
                       const engine::ExecuteContext& context) {
    void* stream_arg = context.stream;
    const engine::RowPadding* padding = context.padding;
    // KILN_CUDA_TRACE=2: the call's parts, each waited for, on stderr.
    const bool timed = e->range && e->range->common->trace == 2;
    const auto call_start = std::chrono::steady_clock::now();
    std::vector<int64_t> shape;
    if (e->range) {
      KILN_ASSIGN_OR_RETURN(shape, e->shape_of(inputs));
      KILN_TRY(e->use_shape(shape));
    }
    const double shape_ms = ms_since(call_start);
    KILN_TRY(e->check_inputs(inputs, padding));
    // Memory the caller gave for the outputs, checked before anything runs.
    std::vector<Tensor> given = std::move(outputs);
    outputs.clear();
    if (!given.empty()) {
      if (given.size() != e->plan.outputs.size())
        return invalid_argument(e->what + ": the engine has " + std::to_string(e->plan.outputs.size()) +
                                " outputs, got memory for " + std::to_string(given.size()));
      for (size_t o = 0; o < given.size(); ++o) {
        const IoSlot& s = e->plan.outputs[o];
        if (e->alias_input[o] >= 0) continue;
        const Tensor& t = given[o];
        if (!t.defined()) continue;  // a new host tensor
        const Shape want = engine::RowPadding::output_sizes(padding, o, s.sizes);
        if (t.dtype() != s.dtype || t.sizes() != want || !t.is_contiguous() ||
            (!t.is_cpu() && t.device().type != DeviceType::kCUDA))
          return invalid_argument(e->what + ": output " + std::to_string(o) + " ('" + s.name + "') needs contiguous " +
                                  std::string(dtype_name(s.dtype)) + shape_to_string(want) +
                                  " host or CUDA memory, got " + (t.defined() ? t.type_string() : std::string("none")));
      }
    }
    for (size_t o = 0; o < e->alias_input.size(); ++o)
      if (const int in = e->alias_input[o]; in >= 0 && !inputs[static_cast<size_t>(in)].is_contiguous())
        return invalid_argument(e->what + ": input " + std::to_string(in) + " ('" +
                                e->plan.inputs[static_cast<size_t>(in)].name +
                                "') is written in place and must be contiguous");
    // On the caller's stream (null: the device's default stream).
    cudaStream_t stream = stream_arg ? static_cast<cudaStream_t>(stream_arg)
                                     : static_cast<cudaStream_t>(cuda_device_memory().default_stream());
    KILN_CUDA_TRY(cudaStreamWaitEvent(stream, e->engine_done, 0));  // the arena's last user, on any stream
    // A bad index an earlier asynchronous call met: reported now, this call not run.
    KILN_TRY(e->take_error(stream, true));
    // Host bytes the call copies: host inputs, and outputs that may go to host memory.
    size_t host_bytes = 0;
    for (const Tensor& t : inputs)
      if (t.defined() && t.is_cpu()) host_bytes += CudaEngine::staged_size(static_cast<size_t>(t.nbytes()));
    for (size_t o = 0; o < e->plan.outputs.size(); ++o)
      if (given.empty() || !given[o].defined() || given[o].is_cpu())
        host_bytes += CudaEngine::staged_size(static_cast<size_t>(e->plan.outputs[o].nbytes()));
    KILN_TRY(e->begin_staging(host_bytes));
    // The next call may write staging once this call's copies through it are
    // done: recorded after the inputs' copies, again after the outputs' (and
    // on the way out of a call that failed between).
    struct StagingDone {
      CudaEngine* e;
      cudaStream_t stream;
      bool pending = false;
      void record() {
        if (pending) (void)cudaEventRecord(e->staging_free, stream);
        pending = false;
      }
      ~StagingDone() { record(); }
    } staging_done{e, stream};
    staging_done.pending = e->staging_used != SIZE_MAX;
    KILN_TRY(e->place_inputs(inputs, padding, stream));
    staging_done.record();
    double inputs_ms = 0, enqueue_ms = 0, device_ms = 0;
    if (timed) {
      KILN_CUDA_TRY(cudaStreamSynchronize(stream));
      inputs_ms = ms_since(call_start) - shape_ms;
    }
    const auto launch_start = std::chrono::steady_clock::now();
    KILN_TRY(e->launch(stream, context.trace).with_context(e->what));
    if (timed) {
      enqueue_ms = ms_since(launch_start);
      KILN_CUDA_TRY(cudaStreamSynchronize(stream));
      device_ms = ms_since(launch_start) - enqueue_ms;
    }
    // The outputs: device memory by one batched copy (with the error word, for
    // the host to see), host memory by copies waited for.
    bool wait = false;
    std::vector<CopyRegion> device_copies;
    if (e->error_host)
      device_copies.push_back({e->error_host_device, e->arena.bytes() + e->plan.error_offset, sizeof(int32_t)});
    for (size_t o = 0; o < e->plan.outputs.size(); ++o) {
      const IoSlot& s = e->plan.outputs[o];
      Tensor t;
      if (const int in = e->alias_input[o]; in >= 0) {
        t = inputs[static_cast<size_t>(in)];      // written in place: the caller's own tensor
        if (e->bound[static_cast<size_t>(in)]) {  // already, where it lies
          outputs.push_back(std::move(t));
          continue;
        }
      } else {
        t = given.empty() || !given[o].defined()
                ? Tensor::empty(s.dtype, engine::RowPadding::output_sizes(padding, o, s.sizes))
                : given[o];
      }
      const size_t bytes = static_cast<size_t>(t.nbytes());  // a padded call's cut outputs: the caller's rows
      if (t.is_cpu()) {
        wait = true;
        uint8_t* staged = e->stage(bytes);
        if (staged) e->staged_outputs.push_back({t.raw_data(), staged, bytes});
        staging_done.pending = staging_done.pending || staged;
        KILN_CUDA_TRY(cudaMemcpyAsync(staged ? staged : t.raw_data(), e->arena.bytes() + s.offset, bytes,
                                      cudaMemcpyDeviceToHost, stream));
      } else {
        device_copies.push_back({t.raw_data(), e->arena.bytes() + s.offset, bytes});
      }
      outputs.push_back(std::move(t));
    }
    KILN_TRY(copy_regions(device_copies, stream));
    staging_done.record();
    KILN_CUDA_TRY(cudaEventRecord(e->engine_done, stream));
    if (e->capture_pending) {  // the host captures while the device runs this call's work
      e->capture_pending = false;
      KILN_TRY(e->capture_graph().with_context(e->what));
    }
    if (timed) {
      KILN_CUDA_TRY(cudaStreamSynchronize(stream));
      std::fprintf(stderr,
                   "kiln: %s: call at %s: %.3f ms: shape %.3f, inputs in %.3f, steps enqueued %.3f and run %.3f, "
                   "outputs out %.3f\n",
                   e->what.c_str(), e->shape_text(shape, "=").c_str(), ms_since(call_start), shape_ms, inputs_ms,
                   enqueue_ms, device_ms, ms_since(launch_start) - enqueue_ms - device_ms);
    }
    if (!wait && !context.trace) return Status::ok();
    // Before anything reaches the caller's host memory (and a traced call's
    // end): this call's own error.
    KILN_CUDA_TRY(cudaStreamSynchronize(stream));
    KILN_TRY(e->take_error(stream, false));
    for (const CudaEngine::StagedOutput& o : e->staged_outputs) std::memcpy(o.dst, o.src, o.bytes);
    e->staged_outputs.clear();
    return Status::ok();
  }

  Status synchronize(engine::EngineHandle handle) const override {
    auto* g = static_cast<CudaEngineGroup*>(handle);
    Status first;
    for (size_t i = 0; i < g->size(); ++i) {
      CudaEngineGroup::Lease lease = g->acquire_at(i);
      CudaEngine* e = lease.get();
      e->finish_captures();
      Status st = cuda_status(cudaEventSynchronize(e->engine_done), "cudaEventSynchronize");
      if (st) st = e->take_error(e->own_stream, true);
      if (first && !st) first = std::move(st);
    }
    return first;
  }

  void destroy(engine::EngineHandle handle) const override { delete static_cast<CudaEngineGroup*>(handle); }

 private:
  // How many shapes a range engine keeps ready: the backend's option, else
  // KILN_CUDA_SHAPES, else 0 (load() then picks; see kDefaultShapesKept).
  Expected<size_t> shapes_kept() const {
    return count_setting(options_.shapes_kept, "KILN_CUDA_SHAPES", settings().cuda.shapes, 0, 4096,
                         "the number of shapes a range engine keeps ready");
  }

  // How many contexts an engine opens at most: the backend's option, else
  // KILN_CUDA_CONTEXTS, else kDefaultContexts.
  Expected<size_t> contexts_kept() const {
    return count_setting(options_.contexts, "KILN_CUDA_CONTEXTS", settings().cuda.contexts, kDefaultContexts, 256,
                         "the number of calls an engine runs at once");
  }

  // `option` when set (nonzero), else the setting `value` (environment
  // variable `env`) read as a count in [1, most], else `fallback`; a value
  // that is not such a count is refused naming the variable and what it counts.
  static Expected<size_t> count_setting(size_t option, const char* env, const std::string& value, size_t fallback,
                                        size_t most, const std::string& what) {
    if (option > 0) return option;
    if (value.empty()) return fallback;
    const char* v = value.c_str();
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (*end != '\0' || errno != 0 || n < 1 || n > most || v[0] == '-')
      return invalid_argument(std::string(env) + "='" + v + "': " + what + " must be an integer in [1, " +
                              std::to_string(most) + "]");
    return static_cast<size_t>(n);
  }

  CudaBackendOptions options_;
  engine::TargetInfo target_;
};

}  // namespace

std::unique_ptr<engine::Backend> make_cuda_backend(const CudaBackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace kiln::cuda
