// The engine backend interface: a small ABI around an opaque engine handle.
//
//   build    network -> plan bytes (the backend's engine builder)
//   load     plan bytes + weights -> an executable engine (deserialize)
//   execute  engine + inputs -> outputs, on a stream
//   destroy  releases everything load created
//
// The compiler calls build; the runtime calls load, execute and destroy. A
// new backend (CUDA, ...) implements this class and registers itself in
// register_builtin_backends(); nothing in the compiler changes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/network.h"
#include "kiln/dtype.h"
#include "kiln/options.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln::engine {

// What a backend's engines can take; the converter registry reads it when it
// answers whether a node can go into an engine for this backend.
struct TargetInfo {
  std::string backend;         // "cpu", "cuda", "null"
  std::vector<DType> dtypes;   // tensor dtypes its layers accept
  bool symbolic_dims = false;  // layers may have sizes known only at run time
  // An engine sized by a symbol needs the symbol's maximum (memory is planned
  // for the largest size of the range): a segment sized by an unbounded one
  // is not built.
  bool finite_ranges = false;
  // Padded batch buckets (--batch-buckets auto) serve a dynamic batch faster
  // than its engines for a range do: each bucket is a fixed-shape engine.
  bool prefers_batch_buckets = false;
  // The backend implements this op as a layer (the converter still decides
  // attributes, shapes and dtypes).
  std::function<bool(ir::OpKind)> implements;
  // For a node of an implemented op: why the backend cannot build this node
  // (its attributes, ranks or dtypes), or an empty string when it can. May be empty.
  std::function<std::string(const ir::Node&)> refuses;
  // The passes the backend's build runs over each engine's network, in order.
  std::vector<NetworkPass> passes;
};

struct BuildOptions {
  // Called with short progress messages while a plan is built (may be empty).
  std::function<void(const std::string&)> progress;
  // Numeric precision of the engine (kiln/options.h). Backends without a choice ignore it.
  Precision precision = Precision::kFp32;
  // The range of every symbol the network's sizes use (min, max, and opt,
  // the size to tune for): a backend that takes symbolic sizes builds one
  // engine serving all of them.
  std::map<std::string, ir::SymbolRange> symbols;
  // The network passes' context: passes disabled, shown (--print-after) and
  // timed; names of lowering passes are ignored here.
  ir::PassContext passes;
};

// Returns the weight named `name` (a parameter, constant or folded constant),
// or an error naming it when the program has no such weight.
using WeightLookup = std::function<Expected<Tensor>(const std::string& name)>;

// What load() creates; each backend derives its own engine type from this
// and casts back in execute/destroy. Opaque to everything else.
struct EngineState {
  virtual ~EngineState() = default;
};
using EngineHandle = EngineState*;

// A call with fewer rows than the engine was built for (a padded batch
// bucket, program::PaddedBatch): the caller's padded inputs hold `rows` rows
// along dimension 0 where the engine's hold more, and the engine's rows past
// them repeat the caller's last row (a real row: zeros could be an
// out-of-range index or a divisor); its cut outputs hold the caller's rows
// only (`rows` times the output's factor).
struct RowPadding {
  int64_t rows = 0;
  std::vector<bool> inputs;             // per engine input: padded along dimension 0
  std::vector<int64_t> output_factors;  // per engine output: c (rows * c rows), 0 = whole

  // The sizes the caller's tensor for engine input `i` (or output `o`) has,
  // of the engine's `sizes`; `padding` may be null (the engine's own sizes).
  static Shape input_sizes(const RowPadding* padding, size_t i, Shape sizes);
  static Shape output_sizes(const RowPadding* padding, size_t o, Shape sizes);
  // That the padding names every input and output of an engine of these
  // sizes and fits them (kInternal / kInvalidArgument naming `what`).
  Status check(std::span<const Shape> engine_inputs, std::span<const Shape> engine_outputs,
               std::string_view what) const;
};

// `t` (host memory, `rows` rows along dimension 0) grown to `size` rows, the
// rows past its own repeating its last: a new contiguous host tensor.
Tensor pad_rows(const Tensor& t, int64_t size);

// Where a traced call reports the steps its engines run (kiln bench
// --trace): each step's name (its layer), what it is (a kernel's name, a
// library call's shape), and when it ran, in microseconds on the trace's own
// clock (now_us()). Host steps are timed on the host; device steps by the
// device's timers, placed from the moment the engine started them. A traced
// engine may run its steps one by one to time them (no graph), so a traced
// call is slower than an untraced one: trace a call apart from timed ones.
class StepTrace {
 public:
  virtual ~StepTrace() = default;
  virtual double now_us() const = 0;
  virtual void step(std::string_view name, std::string_view detail, double start_us, double duration_us,
                    bool on_device) = 0;
};

// How one engine call runs (see Backend::execute).
struct ExecuteContext {
  void* stream = nullptr;
  const RowPadding* padding = nullptr;
  StepTrace* trace = nullptr;
};

// A backend's own device memory and the copies to, from and within it: how
// the runtime keeps values (session state, values between engines) on a
// device and moves them across. Backends that compute in host memory have
// none (Backend::device_memory() is null).
//
// Streams. Work on the device is ordered on streams (a cudaStream_t for
// CUDA). Every allocation belongs to a stream: it is made and freed in that
// stream's order, so memory a call frees is reused only by work ordered after
// everything that call enqueued. A null stream means the device's default
// stream (default_stream()), on which every call without a stream of its own
// runs, in one order.

// Waits for the work a stream held when the fence was made.
class Fence {
 public:
  virtual ~Fence() = default;
  virtual Status wait() = 0;
  // Milliseconds of device time between `earlier` and this fence, both from
  // timed_fence() on one stream of one device, once this one is reached
  // (waits for it). For benchmarks.
  virtual Expected<double> ms_since(const Fence& earlier) const {
    (void)earlier;
    return unsupported("this fence was not made for timing");
  }
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual Device device() const = 0;
  // The stream calls without a stream of their own use (never null).
  virtual void* default_stream() const = 0;
  // A new stream of this device's, released when the last copy of the
  // pointer goes (after the work on it): a session's own, for calls that
  // wait for their results anyway and so can run beside other sessions'.
  // Null where the device has no streams of its own to give.
  virtual std::shared_ptr<void> new_stream() const { return nullptr; }
  // A contiguous tensor of `dtype` and `sizes` in the device's memory (its
  // contents unspecified), freed when its last view goes, in `stream`'s order
  // (null: the default stream; the tensor is then ready for any stream on
  // return). kInternal (naming the bytes) when the device is out of memory,
  // after cached blocks went back to the device.
  virtual Expected<Tensor> empty(DType dtype, const Shape& sizes, void* stream = nullptr) const = 0;
  // A host tensor in page-locked memory, which copy_to_host_async fills
  // without a wait.
  virtual Expected<Tensor> empty_pinned(DType dtype, const Shape& sizes) const = 0;
  // Copies `src`'s elements into `dst`: the same dtype and sizes, both
  // contiguous, each in host memory or this device's. Complete on return
  // (ordered after everything enqueued on the default stream before it).
  virtual Status copy(const Tensor& dst, const Tensor& src) const { return copy_all({&dst, 1}, {&src, 1}); }
  // copy() for each pair in turn, ordered on `stream` (null: the default
  // stream, waited for once: a call's copied-back buffers cost one wait, not
  // one each). With a stream given, copies between device tensors are only
  // enqueued; any copy with a host side is complete on return.
  virtual Status copy_all(std::span<const Tensor> dsts, std::span<const Tensor> srcs, void* stream = nullptr) const = 0;
  // Enqueues a copy of device tensor `src` into `dst` (from empty_pinned) on
  // `stream`; wait on a fence made after it before reading `dst`.
  virtual Status copy_to_host_async(const Tensor& dst, const Tensor& src, void* stream) const = 0;
  // A fence for everything enqueued on `stream` so far.
  virtual Expected<std::unique_ptr<Fence>> fence(void* stream) const = 0;
  // A fence that also marks the time the device reaches it (Fence::ms_since).
  virtual Expected<std::unique_ptr<Fence>> timed_fence(void* stream) const = 0;
  // Waits for everything enqueued on `stream` (null: the default stream).
  virtual Status synchronize(void* stream) const = 0;
  // Writes into `out` (int64, one element per row of `x`) the index of the
  // largest element of each row of `x` (contiguous [rows, n], floating):
  // the first one of equal maxima, a NaN above any number, as torch.argmax.
  // Enqueued on `stream`. For greedy decoding on the device: the logits never
  // leave it.
  virtual Status argmax_rows(const Tensor& x, const Tensor& out, void* stream) const = 0;
  // torch.nonzero(x) of a contiguous tensor in this device's memory: int64
  // [count, x.dim()] in this device's memory, the indices of x's nonzero
  // elements in row-major order. Only the count comes to the host (a wait
  // for `stream`'s work so far); the indices are enqueued on `stream`.
  // kUnsupported where the device has no such kernel (the caller then runs
  // the reference kernel on a host copy).
  virtual Expected<Tensor> nonzero(const Tensor& x, void* stream) const {
    (void)x;
    (void)stream;
    return unsupported("nonzero on the device");
  }
  // x[mask] (boolean-mask indexing) of a contiguous tensor in this device's
  // memory, `mask` (bool, contiguous, here too) of x's leading sizes: the
  // rows of x under true mask elements, in order, [count, x's other sizes]
  // in this device's memory. Only the count comes to the host, as for
  // nonzero. kUnsupported where the device has no such kernel.
  virtual Expected<Tensor> masked_rows(const Tensor& x, const Tensor& mask, void* stream) const {
    (void)x;
    (void)mask;
    (void)stream;
    return unsupported("boolean-mask indexing on the device");
  }
  // torch.unique (`sorted`: _unique2's ascending values) or
  // unique_consecutive of the flattened contiguous tensor x in this device's
  // memory: {values [groups] of x's dtype, inverse (each element's group, x's
  // sizes, int64; undefined unless `inverse`), counts [groups] int64
  // (undefined unless `counts`)}, in this device's memory. -0.0 equals 0.0
  // and every NaN is a value of its own, after every number, as in the
  // reference kernels. Only the group count comes to the host, as for
  // nonzero. kUnsupported where the device has no such kernel.
  virtual Expected<std::vector<Tensor>> unique(const Tensor& x, bool sorted, bool inverse, bool counts,
                                               void* stream) const {
    (void)x;
    (void)sorted;
    (void)inverse;
    (void)counts;
    (void)stream;
    return unsupported("unique on the device");
  }
};

// Device memory of one engine: its activation arena (an engine serving a
// shape range plans it for the largest shape), its GEMM and convolution
// workspace, and the device copies of its weights (shared with any other
// engine of the process that uses the same weight in the same form).
struct PlanMemory {
  int64_t arena_bytes = 0;
  int64_t workspace_bytes = 0;
  int64_t weight_bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual const TargetInfo& target() const = 0;
  // Everything about where plans are built and run that changes a plan
  // (device model, compute capability, library versions), for engine cache keys.
  virtual std::string identity() const { return std::string(name()); }
  // An identity that changes whenever identity() would, told without starting
  // the device's runtime (for a cache of whole programs, whose hit must cost
  // less than that start); empty when the backend cannot tell it cheaply.
  virtual std::string quick_identity() const { return identity(); }
  // Whether this machine can build and run the backend's engines: ok, or the
  // reason (the device and its driver's answer). Capability (target()) never
  // needs the device; building, loading and running do.
  virtual Status ready() const { return Status::ok(); }
  // Whether load() copies weights onto a device of the backend's own (so a
  // loaded engine is worth keeping for reuse: runtime/engine_hot_set.h).
  virtual bool loads_onto_device() const { return false; }
  // The device's memory, for backends that compute on a device of their own
  // (null for those that compute in host memory).
  virtual const DeviceMemory* device_memory() const { return nullptr; }
  // Settings load() reads from outside the plan (environment switches), as
  // text: an engine loaded under other settings is not reused for this load.
  virtual std::string load_settings() const { return ""; }

  // Builds an engine plan for `network` (fusion, kernel choice, memory plan)
  // and serializes it. `network` may be rewritten in place (it is consumed).
  //   network: a verified Network (see network.h)
  //   options: progress reporting
  // Returns the plan bytes (a self-describing, checksummed file image) or
  // kUnsupported naming the layer the backend cannot build.
  virtual Expected<std::vector<uint8_t>> build(Network network, const BuildOptions& options) const = 0;

  // Deserializes `plan` into an executable engine.
  //   plan:    bytes from build(); validated completely (magic, version,
  //            checksums, every reference) before anything is allocated
  //   weights: resolves the plan's constants by name; tensors are borrowed,
  //            not copied, when the backend can use them in place
  //   what:    names the plan in messages ("model.kiln, segment 2")
  // Returns a handle that stays valid until destroy(); kFormat on a bad plan.
  virtual Expected<EngineHandle> load(std::span<const uint8_t> plan, const WeightLookup& weights,
                                      std::string_view what) const = 0;

  // Runs the engine once.
  //   context: the call's stream (a cudaStream_t for CUDA; null: the
  //            device's default stream; ignored on CPU), its row padding
  //            (null, or a call with fewer rows than the engine was built
  //            for, a padded batch bucket: the padded inputs and cut outputs
  //            have the caller's rows, see RowPadding; the engine pads and
  //            cuts them itself, where it computes) and its trace (null, or
  //            where each step the engine runs is reported, see StepTrace)
  //   engine:  a handle from load(); execute may be called from several
  //            threads at once on one handle
  //   inputs:  one tensor per engine input, in binding order (symbolic
  //            scalars travel as 0-d int64 / float64 / bool tensors), each in
  //            host memory or, on a backend with device_memory(), that
  //            device's memory (read where it lies, and written there when
  //            the engine writes that input in place)
  //   outputs: on entry either empty, and then replaced by new host tensors,
  //            or one entry per engine output, in binding order: contiguous
  //            memory (host, or the backend's device) the output is written
  //            into, or an undefined tensor for a new host tensor; an output
  //            the engine writes into an input in place is that input itself,
  //            whatever its entry held
  // Inputs (count, dtype, sizes) and the memory given for outputs are checked
  // before anything runs; errors name the engine and the layer that failed.
  // When any output goes to host memory, every result is where it belongs
  // when execute returns. When every output lies in device memory (given, or
  // written into an input in place) the work is only enqueued on the stream:
  // results are ready in that stream's order, and a device-side error (an
  // index out of range) is reported by a later call of the engine or by
  // synchronize(). A traced call is complete on return.
  //   A device input is read where it lies when the engine writes it in place
  //   (or when it is large and was bound the same way the call before);
  //   other inputs are copied into the engine's own memory as the call is
  //   enqueued, so the caller may reuse them once it returns.
  virtual Status execute(const ExecuteContext& context, EngineHandle engine, std::span<const Tensor> inputs,
                         std::vector<Tensor>& outputs) const = 0;

  // Waits for the engine's enqueued work and reports a device-side error
  // that an asynchronous call left (kInvalidArgument naming the layer).
  virtual Status synchronize(EngineHandle engine) const { return Status::ok(); }
  // Releases the engine; `engine` may be null.
  virtual void destroy(EngineHandle engine) const = 0;

  // The device memory an engine loaded from `plan` holds, read from the plan
  // alone (no device needed). kUnsupported for backends that compute in
  // host memory.
  virtual Expected<PlanMemory> plan_memory(std::span<const uint8_t> plan) const {
    (void)plan;
    return unsupported("backend '" + std::string(name()) + "' keeps no device memory");
  }

};

// Owns an engine handle and destroys it with its backend.
class Engine {
 public:
  Engine(const Backend* backend, EngineHandle handle) : backend_(backend), handle_(handle) {}
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  Engine(Engine&& o) noexcept : backend_(o.backend_), handle_(o.handle_) { o.handle_ = nullptr; }
  Engine& operator=(Engine&& o) noexcept {
    if (this != &o) {
      if (handle_) backend_->destroy(handle_);
      backend_ = o.backend_;
      handle_ = o.handle_;
      o.handle_ = nullptr;
    }
    return *this;
  }
  ~Engine() {
    if (handle_) backend_->destroy(handle_);
  }
  Status execute(const ExecuteContext& context, std::span<const Tensor> inputs, std::vector<Tensor>& outputs) const {
    return backend_->execute(context, handle_, inputs, outputs);
  }
  Status execute(std::span<const Tensor> inputs, std::vector<Tensor>& outputs, void* stream = nullptr,
                 const RowPadding* padding = nullptr) const {
    return backend_->execute(ExecuteContext{stream, padding, nullptr}, handle_, inputs, outputs);
  }
  const Backend& backend() const { return *backend_; }
  EngineHandle handle() const { return handle_; }

 private:
  const Backend* backend_;
  EngineHandle handle_;
};

// Backends by name. Registration is explicit (register_builtin_backends), never
// from static initializers.
class BackendRegistry {
 public:
  void add(std::unique_ptr<Backend> backend);
  const Backend* find(std::string_view name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
};

// A backend that takes nothing: every capability answer is no, build and load
// refuse. The skeleton of a backend and a test double for the compiler.
std::unique_ptr<Backend> make_null_backend();

}  // namespace kiln::engine
