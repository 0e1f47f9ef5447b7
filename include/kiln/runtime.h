// kiln's runtime: load a compiled program (a .kiln file), open a session,
// run it with buffers that persist across calls. Links kiln::runtime alone:
// no compiler, no lowering, no .pt2 reader.
//
//   auto program = kiln::Program::load("model.kiln");
//   if (!program) { std::cerr << program.status().message(); return 2; }
//   kiln::Session session(*program);
//   auto outputs = session.run({input});
//
// kiln/compiler.h compiles .pt2 archives into programs; kiln/llm.h decodes.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/status.h"
#include "kiln/tensor.h"
#include "kiln/trace.h"

namespace kiln {

namespace program {
struct CompiledMethod;
}

// One input, output or buffer of a program.
struct TensorSpec {
  std::string name;  // user input/output name, or buffer fqn
  DType dtype = DType::Float32;
  std::vector<std::string> dims;  // "3", or a symbol expression such as "s0"
  std::string kind;               // "user_input", "parameter", "buffer", "constant", "user_output", "buffer_mutation"
};

// The dtype and sizes of one output of a call (Session::output_types).
struct OutputType {
  DType dtype = DType::Float32;
  Shape sizes;
};

struct SymbolInfo {
  std::string name;
  int64_t min = 0;
  int64_t max = 0;  // INT64_MAX when unbounded
};

// Whether engines for `device` ("cpu", "cuda", "null") can be built and run
// on this machine: ok, or an error naming the device and why not (for CUDA,
// the driver's answer). kInvalidArgument for a device this kiln does not have.
Status device_ready(std::string_view device);

// A host copy of `t` when its elements lie on a device, `t` itself when they
// lie in host memory (an undefined tensor stays undefined).
Expected<Tensor> to_host(const Tensor& t);

// A copy of `t` in `device`'s memory (contiguous), `t` itself when it already
// lies there; kUnsupported for a device no backend of this kiln runs on.
Expected<Tensor> to_device(const Tensor& t, Device device);

// Copies `src`'s elements into `dst`, each in host memory or on a device one
// of kiln's backends runs on (a session's state on a GPU, a framework's CUDA
// tensor): the same sizes; converted between dtypes and laid out where the
// host side allows it, device sides contiguous. Complete on return.
Status copy_tensor(const Tensor& dst, const Tensor& src);

// Whether `path` holds a compiled program (a .kiln file), by its first bytes.
bool is_program_file(const std::string& path);

// A node that runs on the reference kernels instead of an engine, and why.
struct FallbackNode {
  std::string node;    // the exporter's node name
  std::string op;      // op target, e.g. "aten.nonzero.default"
  std::string reason;  // the converter registry's answer
};

// One segment of a compiled program, in execution order.
struct SegmentInfo {
  bool engine = false;
  std::string backend;      // engine segments
  size_t plan_bytes = 0;    // engine segments
  bool from_cache = false;  // engine segments: the plan came from the engine cache
  // Engine segments on a device: the memory its engine holds there once
  // loaded: the activation arena (for an engine serving a shape range, what
  // the largest shape of the range needs), the GEMM/convolution workspace
  // and the device copies of its weights (shared between engines that use
  // the same weight in the same form). 0 for host backends.
  int64_t arena_bytes = 0, workspace_bytes = 0, weight_bytes = 0;
  std::map<std::string, int> ops;  // op target -> nodes in this segment
  int num_nodes = 0;
  int num_inputs = 0, num_outputs = 0;  // values crossing the segment boundary
  std::vector<FallbackNode> fallback;   // fallback segments: every node with its reason
};

// A loaded and lowered program. Immutable once loaded: one Program may be
// shared by any number of sessions on any threads.
class Program {
 public:
  // Loads a compiled program (a .kiln file, told apart by its first bytes,
  // not its name) and, unless `load_engines` is false, its engines onto
  // their device (false: on the first run; for inspecting). A .pt2 archive
  // is compiled by kiln::compile (kiln/compiler.h, library kiln::compiler);
  // given one here, the error says so. Errors name the file and the section,
  // engine or tensor at fault.
  static Expected<std::shared_ptr<const Program>> load(const std::string& path, bool load_engines = true);

  // The methods in order ("forward" for a program from one .pt2), with the
  // extra shape profiles of each (NAME@1, NAME@2, ... after NAME; see
  // CompileOptions::shapes). Everything else this class answers is about the
  // first; method() gives the others.
  std::vector<std::string> method_names() const;
  // Method `name` (this program for the first), owned by this program; null when absent.
  const Program* method(std::string_view name) const;

  // Writes the compiled program, every method, as a .kiln file (weights once,
  // engine plans, signatures, buffers' initial values). Atomic: a failed
  // save leaves no file.
  Status save(const std::string& path) const;

  // The segments in execution order (engines and fallback).
  const std::vector<SegmentInfo>& segments() const;
  // Every segment with its ops, and each fallback node with its reason.
  std::string partition_report() const;
  // The same partition as a Graphviz graph (`dot -Tsvg`): each segment a
  // cluster (engines on a device blue, the host's fallback red), each node
  // with its op and output type, fallback nodes with their reason; user
  // inputs, buffers and outputs as ellipses (parameters and constants left
  // out). Edges between segments carry the value, its type and its bytes
  // (an expression of the sizes where they are dynamic); those between a
  // device engine and the host are drawn red.
  std::string partition_dot() const;
  const std::string& device() const;

  const std::vector<TensorSpec>& inputs() const;   // user inputs, in call order
  const std::vector<TensorSpec>& outputs() const;  // user outputs, in result order
  const std::vector<TensorSpec>& buffers() const;  // mutable state, in program order
  const std::vector<TensorSpec>& weights() const;  // parameters and constants
  // Bytes of host memory the program's weights (parameters, constants and
  // those lowering folded) and buffers' initial values take.
  int64_t weight_bytes() const;
  const std::vector<SymbolInfo>& symbols() const;  // dynamic dimensions and their ranges
  // Names of buffers the program writes (each becomes a buffer_mutation).
  const std::vector<std::string>& mutated_buffers() const;
  // Names of user inputs the program writes in place (as the eager module
  // does, e.g. x.add_(1)): Session::run writes the new value into the
  // caller's tensor.
  const std::vector<std::string>& mutated_inputs() const;
  // Whether an engine writes buffer `fqn` in place (its plan aliases the
  // engine output to the buffer's input); false for a buffer whose new value
  // is copied back after the call, or one the program does not write.
  bool buffer_updated_in_place(std::string_view fqn) const;
  // Other names of one tensor. The archive may give one tensor several names
  // (tensors over one storage with one view: non-strict export lifts a
  // module's cache as a tensor constant beside the registered buffer it is);
  // the program keeps one name, a buffer's before a parameter's before a
  // constant's. Each other name -> the name kept. Every call that takes a
  // buffer's name (Session::buffer, set_buffer, bind_buffer,
  // buffer_updated_in_place) takes any of them.
  const std::map<std::string, std::string, std::less<>>& aliases() const;
  // `name`, or the name the program keeps when `name` is another name of it.
  std::string_view canonical_name(std::string_view name) const;
  // Every name of the tensor `name` names: the name kept first, then its aliases.
  std::vector<std::string> names_of(std::string_view name) const;
  // Op target -> number of nodes, after lowering.
  std::map<std::string, int> op_histogram() const;
  std::string dialect() const;        // "TRAINING" or "ATEN" as exported
  std::string torch_version() const;  // PyTorch version that exported it
  const std::string& source() const;

  // The lowered IR as text, one node a line (`kiln inspect --print-ir`).
  std::string ir_text() const;
  ~Program();

 private:
  Program();
  static Expected<std::shared_ptr<const Program>> assemble(std::vector<program::CompiledMethod> methods,
                                                           const std::string& what, bool load_engines);
  // The compiler makes programs from the methods it compiled (runtime/program_impl.h).
  friend Expected<std::shared_ptr<const Program>> assemble_program(std::vector<program::CompiledMethod> methods,
                                                                   const std::string& what, bool load_engines);

 public:
  struct Impl;  // defined inside the library only

 private:
  std::unique_ptr<Impl> impl_;
  friend class Session;
  friend const Impl& program_impl(const Program& p);  // the library's own access (program_impl.h)
};

// How one Session::run call runs.
struct RunOptions {
  // The stream (a cudaStream_t) the call's device work is ordered on, and
  // the memory it allocates for its results; null: the device's default
  // stream, on which every call without a stream of its own runs in one
  // order (a call with every input and output in host memory, of a session
  // none of whose buffers is device memory the caller bound, returns complete,
  // its buffers' updates included, and runs on a stream of the session's own
  // instead, beside other sessions' calls);
  // cudaStreamLegacy (0x1) for CUDA's legacy default stream. Memory
  // kiln allocates on a caller's stream is freed on it: keep the stream
  // alive while the call's results live.
  void* stream = nullptr;
  // Memory for the user outputs, or empty: kiln then allocates them where the
  // outputs go (the device of the first input on one, else host memory).
  // Given, one contiguous tensor per user output in result order, of the
  // dtype and sizes the call gives (output_types() tells them from the
  // inputs' types), each in host memory or on a device one of kiln's backends
  // runs on (a framework's CUDA tensor): the call writes its results there
  // and returns these tensors. The count, dtypes and sizes are checked before
  // anything runs. A program that is one engine on the device they lie on,
  // called with every input there, writes them directly from its engine
  // (a padded batch bucket pads and cuts on the device); any other program
  // runs as without them and its results are copied in, on the call's stream.
  std::vector<Tensor> outputs;
  // Non-null: the call adds its slices to this trace (see kiln/trace.h): the
  // call, each engine and fallback node, each engine's steps. A traced call
  // is complete on return and slower than an untraced one.
  Trace* trace = nullptr;
};

// A program's state (its buffers) and calls on it. A session is used by one
// thread at a time; use one session per thread.
class Session {
 public:
  explicit Session(std::shared_ptr<const Program> program);
  // Waits for the session's device work first: its buffers are freed on the
  // device's default stream, which a call on a stream of the caller's may
  // still be using.
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  // Runs the program on user inputs given in signature order and returns the
  // user outputs. Inputs are checked (count, dtype, rank, sizes, dynamic
  // ranges) before anything runs. Each input may lie in host memory or on a
  // device one of kiln's backends runs on (a CUDA tensor borrowed with
  // Storage::borrow(..., Device::cuda())); the outputs go into the
  // caller's memory (RunOptions::outputs), else onto the device of the first
  // input that lies on one, else into host memory. Buffers copied
  // back change only when the whole call succeeds. Buffers an engine updates
  // in place (KV caches, see Program::buffer_updated_in_place) are written as
  // that engine runs: after a call that fails later on, they hold the rows
  // that call wrote.
  //   A call whose outputs lie in host memory is complete on return. A call
  // whose outputs lie on a device is only enqueued there, on the call's
  // stream (RunOptions::stream), as a framework's GPU operations are: its
  // outputs, and the buffers it updates, are ready in that stream's order
  // (reading them on the host with to_host() on the default stream waits for
  // them), and a device-side error it meets (an index out of range) is
  // reported by a later call or by synchronize().
  Expected<std::vector<Tensor>> run(const std::vector<Tensor>& inputs);
  Expected<std::vector<Tensor>> run(const std::vector<Tensor>& inputs, const RunOptions& options);
  // Runs method `method` of the program on the session's state: of a method
  // compiled with several shape profiles, the first profile whose ranges
  // hold the inputs (an error names each profile's objection when none does);
  // NAME@k runs that method only (see CompileOptions::shapes).
  Expected<std::vector<Tensor>> run(std::string_view method, const std::vector<Tensor>& inputs);
  Expected<std::vector<Tensor>> run(std::string_view method, const std::vector<Tensor>& inputs,
                                    const RunOptions& options);
  // Waits for the device work of every call so far (on the stream each ran
  // on) and reports a device-side error one of them left, naming the layer;
  // after such an error, reset() the session (its buffers may hold part of a
  // call's writes).
  Status synchronize();

  // Buffer `fqn`: the session's own memory (or the caller's, when bound), so
  // later calls update what this returns, as a module's buffer in PyTorch.
  // It lies where the session keeps its state (state_device()): reading it on
  // the host is the caller's explicit copy (to_host), as is keeping the value
  // of this moment (to_host, or clone() of a host buffer).
  Expected<Tensor> buffer(std::string_view fqn) const;
  // Copies `value` (host or device memory) into buffer `fqn` (same dtype and shape).
  Status set_buffer(std::string_view fqn, const Tensor& value);
  // Makes the caller's tensor the memory of buffer `fqn` (same dtype and
  // shape, contiguous, not shared with another buffer), in host memory or on
  // a device one of kiln's backends runs on (a framework's CUDA tensor as the
  // KV cache): engines update it in place where it lies, or the runtime
  // copies the new value into it; the caller keeps it alive and sees every
  // update. Its current contents are the buffer's value.
  Status bind_buffer(std::string_view fqn, const Tensor& memory);
  // Restores every buffer to its initial value from the program (into the
  // memory it has, bound or not); an error when a device copy fails.
  Status reset();
  // Where the session keeps the buffers it allocates itself: the device of
  // the program's engines when they run on one (CUDA: a session of a CUDA
  // program holds its state in device memory, allocated once, its initial
  // values uploaded once), else host memory. A buffer the device cannot hold
  // starts in host memory instead.
  Device state_device() const;

  const Program& program() const;

  // The dtype and sizes of each user output that a call of the program's
  // method with `inputs` returns (of the shape profile that takes them; a
  // padded batch bucket's outputs cut to the caller's rows): the memory to
  // give RunOptions::outputs. Reads the inputs' types only, never their data.
  // Inputs are checked as run() checks them; kUnsupported for an output
  // whose size depends on the inputs' values.
  Expected<std::vector<OutputType>> output_types(const std::vector<Tensor>& inputs) const;

 private:
  struct State;  // the program, the buffers and the streams (session.cc)
  std::unique_ptr<State> s_;
};

}  // namespace kiln
