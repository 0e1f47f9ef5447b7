#include <algorithm>
#include <map>
#include <set>

#include "engine/value.h"
#include "kiln/runtime.h"
#include "runtime/device_copy.h"
#include "runtime/interpreter.h"
#include "runtime/program_impl.h"

namespace kiln {

namespace {

std::string dims_text(const ir::TensorType& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.sizes.size(); ++i) s += (i ? ", " : "") + t.sizes[i].to_string();
  return s + "]";
}

// Checks user inputs against the program's declared types and binds symbols
// (into `bound`).
Status check_inputs(const ir::Module& m, const std::vector<const ir::Value*>& decl, const std::vector<Tensor>& inputs,
                    ir::SymBindings& bound) {
  if (inputs.size() != decl.size())
    return invalid_argument("the program takes " + std::to_string(decl.size()) + " inputs, got " +
                            std::to_string(inputs.size()));
  std::map<std::string, std::string> bound_by;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Value* v = decl[i];
    const Tensor& t = inputs[i];
    std::string who = "input '" + v->name + "' (input " + std::to_string(i) + ")";
    if (!t.defined()) return invalid_argument(who + " is missing");
    if (t.dtype() != v->type.dtype)
      return invalid_argument(who + ": expected dtype " + std::string(dtype_name(v->type.dtype)) + ", got " +
                              t.type_string());
    if (static_cast<size_t>(t.dim()) != v->type.sizes.size())
      return invalid_argument(who + ": expected " + std::to_string(v->type.sizes.size()) + " dimensions " +
                              dims_text(v->type) + ", got " + t.type_string());
    for (size_t d = 0; d < v->type.sizes.size(); ++d) {
      const ir::Dim& dim = v->type.sizes[d];
      int64_t actual = t.sizes()[d];
      if (dim.is_static()) {
        if (actual != dim.value)
          return invalid_argument(who + ": dimension " + std::to_string(d) + " must be " + std::to_string(dim.value) +
                                  ", got " + t.type_string());
        continue;
      }
      if (dim.expr->kind() != ir::SymExpr::Kind::kSymbol) continue;  // checked once all symbols are bound
      const std::string& sym = dim.expr->name();
      auto it = bound.find(sym);
      if (it != bound.end() && it->second != actual)
        return invalid_argument(who + ": dimension " + std::to_string(d) + " is " + std::to_string(actual) + " but " +
                                bound_by[sym] + " set symbol " + sym + " to " + std::to_string(it->second));
      if (auto r = m.symbols.find(sym); r != m.symbols.end() && (actual < r->second.min || actual > r->second.max))
        return invalid_argument(who + ": dimension " + std::to_string(d) + " is " + std::to_string(actual) +
                                ", outside the range [" + std::to_string(r->second.min) + ", " +
                                (r->second.max == INT64_MAX ? std::string("inf") : std::to_string(r->second.max)) +
                                "] of dynamic dimension " + sym);
      bound[sym] = actual;
      bound_by[sym] = who + " dimension " + std::to_string(d);
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Value* v = decl[i];
    for (size_t d = 0; d < v->type.sizes.size(); ++d) {
      const ir::Dim& dim = v->type.sizes[d];
      if (dim.is_static() || dim.expr->kind() == ir::SymExpr::Kind::kSymbol) continue;
      auto want = dim.expr->eval(bound);
      if (want.has_value() && *want != inputs[i].sizes()[d])
        return invalid_argument("input '" + v->name + "' (input " + std::to_string(i) + "): dimension " +
                                std::to_string(d) + " must be " + dim.expr->to_string() + " = " +
                                std::to_string(*want) + ", got " + std::to_string(inputs[i].sizes()[d]));
    }
  }
  return Status::ok();
}

}  // namespace

namespace {

// The device a program's engines run on, where they have one of their own
// (the first such engine segment of any method), else the host.
Device engines_device(const Program& program) {
  for (const std::string& name : program.method_names())
    for (const program::SegmentRecord& seg : program_impl(*program.method(name)).exec->program().segments) {
      if (seg.kind != partition::SegmentKind::kEngine) continue;
      const engine::Backend* b = program::builtin_backends().find(seg.backend);
      if (b && b->device_memory()) return b->device_memory()->device();
    }
  return Device::cpu();
}

// A copy of `t` of its own, where `t` lies.
Expected<Tensor> duplicate(const Tensor& t) {
  if (t.is_cpu()) return t.clone();
  const engine::DeviceMemory* m = runtime::device_memory_of(t.device());
  if (!m) return unsupported("no backend of this kiln runs on " + t.device().to_string());
  KILN_ASSIGN_OR_RETURN(Tensor copy, m->empty(t.dtype(), t.sizes()));
  KILN_TRY(copy_tensor(copy, t));
  return copy;
}

}  // namespace

struct Session::State {
  std::shared_ptr<const Program> program;
  std::map<std::string, Tensor, std::less<>> buffers;
  std::set<std::string, std::less<>> bound;  // buffers whose memory the caller gave (bind_buffer)
  Device state_device;
  // The session's own stream, made at its first call from host tensors to
  // host tensors: such calls of different sessions run side by side.
  std::shared_ptr<void> own_stream;
  void* last_stream = nullptr;  // the stream of the last call with device work
  bool pending = false;         // a call's device work may still be running
};

Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Device Session::state_device() const { return s_->state_device; }
const Program& Session::program() const { return *s_->program; }

Session::Session(std::shared_ptr<const Program> program) : s_(std::make_unique<State>()) {
  s_->program = std::move(program);
  s_->state_device = engines_device(*s_->program);
  // The first fill allocates every buffer: one the device cannot hold (or
  // copy into) starts in host memory, so nothing here can fail.
  (void)reset();
}

Session::~Session() { (void)synchronize(); }

Status Session::reset() {
  // After the calls so far (a device-side error they left is what a reset clears).
  (void)synchronize();
  const engine::DeviceMemory* device = runtime::device_memory_of(s_->state_device);
  // Every method's buffers: methods share them by name (Program checked that they agree).
  std::set<std::string> done;
  for (const std::string& name : s_->program->method_names()) {
    const ir::Module& m = s_->program->method(name)->impl_->module();
    for (const ir::InputSpec& s : m.input_specs) {
      if (s.kind != ir::InputSpec::Kind::kBuffer || !done.insert(s.target).second) continue;
      const Tensor& initial = m.weights.at(s.target);
      if (auto it = s_->buffers.find(s.target); it != s_->buffers.end()) {
        // Into the memory it has (the caller's, when bound).
        KILN_TRY(copy_tensor(it->second, initial).with_context("buffer '" + s.target + "'"));
        continue;
      }
      Tensor memory;
      if (device)
        if (auto d = device->empty(initial.dtype(), initial.sizes()); d && copy_tensor(*d, initial).is_ok())
          memory = std::move(*d);
      s_->buffers[s.target] = memory.defined() ? memory : initial.clone();
    }
  }
  return Status::ok();
}

Status Session::bind_buffer(std::string_view fqn, const Tensor& memory) {
  const std::string_view kept = s_->program->canonical_name(fqn);  // any name of the buffer
  auto it = s_->buffers.find(kept);
  if (it == s_->buffers.end()) return not_found("the program has no buffer '" + std::string(fqn) + "'");
  if (!memory.defined() || memory.dtype() != it->second.dtype() || memory.sizes() != it->second.sizes())
    return invalid_argument("buffer '" + std::string(fqn) + "' is " + it->second.type_string() + ", got " +
                            (memory.defined() ? memory.type_string() : std::string("an undefined tensor")));
  if (!memory.is_contiguous())
    return invalid_argument("buffer '" + std::string(fqn) + "': the bound tensor must be contiguous");
  if (!memory.is_cpu() && !runtime::device_memory_of(memory.device()))
    return unsupported("buffer '" + std::string(fqn) + "': the bound tensor lies on " + memory.device().to_string() +
                       ", where no backend of this kiln runs");
  for (const auto& [name, t] : s_->buffers)
    if (name != kept && t.storage() == memory.storage())
      return invalid_argument("buffer '" + std::string(fqn) + "': the bound tensor shares memory with buffer '" + name +
                              "'");
  it->second = memory;
  s_->bound.insert(std::string(kept));
  return Status::ok();
}

Expected<Tensor> Session::buffer(std::string_view fqn) const {
  auto it = s_->buffers.find(s_->program->canonical_name(fqn));
  if (it == s_->buffers.end()) return not_found("the program has no buffer '" + std::string(fqn) + "'");
  return it->second;
}

Status Session::set_buffer(std::string_view fqn, const Tensor& value) {
  const std::string_view kept = s_->program->canonical_name(fqn);  // any name of the buffer
  auto it = s_->buffers.find(kept);
  if (it == s_->buffers.end()) return not_found("the program has no buffer '" + std::string(fqn) + "'");
  bool read = false;
  for (const std::string& name : s_->program->method_names())
    read = read || !s_->program->method(name)->impl_->unread_buffers.count(kept);
  if (!read)
    return invalid_argument("buffer '" + std::string(fqn) +
                            "' is not read by the compiled program: it was folded into the weights when compiling "
                            "(read-only buffers such as batch-norm statistics are frozen), so setting it would "
                            "change nothing; change it in the model and export again");
  if (value.dtype() != it->second.dtype() || value.sizes() != it->second.sizes())
    return invalid_argument("buffer '" + std::string(fqn) + "' is " + it->second.type_string() + ", got " +
                            value.type_string());
  // Into the memory it has (the caller's, when bound), wherever each lies,
  // after the calls so far.
  if (s_->pending)
    if (const engine::DeviceMemory* device = runtime::device_memory_of(s_->state_device))
      KILN_TRY(device->synchronize(s_->last_stream));
  return copy_tensor(it->second, value).with_context("buffer '" + std::string(fqn) + "'");
}

namespace {

// The program graph's inputs for one call: user inputs, the session's buffers, weights.
// The program's user inputs, in call order, and the symbols they bind, once
// `inputs` passed check_inputs.
struct CheckedInputs {
  std::vector<const ir::Value*> decl;
  ir::SymBindings bound;
};
Expected<CheckedInputs> checked_user_inputs(const ir::Module& m, const std::vector<Tensor>& inputs) {
  CheckedInputs c;
  for (size_t i = 0; i < m.input_specs.size(); ++i)
    if (m.input_specs[i].kind == ir::InputSpec::Kind::kUserInput) c.decl.push_back(m.graph.inputs()[i]);
  KILN_TRY(check_inputs(m, c.decl, inputs, c.bound));
  return c;
}

// The method that runs `inputs`: `p` (method `method` of `program`), or the
// first of its shape profiles (method@1, method@2, ...) that takes them; NAME@k
// named directly is that method alone. A run of padded batch buckets (methods
// of one range, smallest size first) takes them in its place in that order:
// its smallest bucket that holds their rows, padded. When none does, the
// error gives every profile's objection.
struct Profile {
  const Program* program = nullptr;
  std::vector<const ir::Value*> user_inputs;
  int64_t rows = -1;      // a padded batch bucket: the caller's rows (-1: not padded)
  ir::SymBindings bound;  // the symbols the inputs bind (none for a bucket: its sizes are static)
};

const std::optional<program::PaddedBatch>& padded_of(const Program* q) {
  return program_impl(*q).exec->program().padded;
}

// The rows `inputs` have along the padded dimension of bucket `pad`, or -1 when
// they do not agree or an input has no dimension 0 (`why` says which).
int64_t padded_rows(const program::PaddedBatch& pad, const Program* q, const std::vector<Tensor>& inputs,
                    std::string& rows_of) {
  int64_t b = -1;
  for (int i : pad.inputs) {
    const size_t u = static_cast<size_t>(i);
    if (u >= inputs.size() || !inputs[u].defined() || inputs[u].dim() == 0) return -1;
    const int64_t n = inputs[u].sizes()[0];
    if (b >= 0 && n != b) {
      rows_of = "the inputs of padded batch buckets have " + std::to_string(b) + " and " + std::to_string(n) + " rows";
      return -1;
    }
    b = n;
  }
  rows_of = "input '" + q->inputs()[static_cast<size_t>(pad.inputs[0])].name + "' (input " +
            std::to_string(pad.inputs[0]) + "): dimension 0 is " + std::to_string(b);
  return b;
}

// Whether bucket `q` takes `inputs` once padded to its size: every input's
// type as the method declares it, the padded inputs' dimension 0 aside (no
// data is read). The reason when not.
Status fits_padded(const Program* q, const program::PaddedBatch& pad, const std::vector<Tensor>& inputs) {
  const std::vector<TensorSpec>& decl = q->inputs();
  if (decl.size() != inputs.size())
    return invalid_argument("the method takes " + std::to_string(decl.size()) + " inputs, got " +
                            std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool padded = std::find(pad.inputs.begin(), pad.inputs.end(), static_cast<int>(i)) != pad.inputs.end();
    if (!inputs[i].defined() || inputs[i].dtype() != decl[i].dtype ||
        static_cast<size_t>(inputs[i].dim()) != decl[i].dims.size())
      return invalid_argument("input '" + decl[i].name + "' (input " + std::to_string(i) + ") must be " +
                              std::string(dtype_name(decl[i].dtype)) + " of rank " +
                              std::to_string(decl[i].dims.size()));
    for (size_t d = padded ? 1 : 0; d < decl[i].dims.size(); ++d)
      if (decl[i].dims[d] != std::to_string(inputs[i].sizes()[d]))
        return invalid_argument("input '" + decl[i].name + "' (input " + std::to_string(i) + "): dimension " +
                                std::to_string(d) + " must be " + decl[i].dims[d] + ", got " +
                                std::to_string(inputs[i].sizes()[d]));
  }
  return Status::ok();
}

Expected<Profile> select_profile(const Program& program, const Program* p, std::string_view method,
                                 const std::vector<Tensor>& inputs) {
  Expected<CheckedInputs> checked = checked_user_inputs(program_impl(*p).module(), inputs);
  if (checked) return Profile{p, std::move(checked->decl), -1, std::move(checked->bound)};
  if (method.find('@') != std::string_view::npos || !program.method(profile_method_name(method, 1)))
    return checked.status();
  std::vector<const Program*> methods;
  for (size_t k = 0;; ++k) {
    const Program* q = program.method(profile_method_name(method, k));
    if (q == nullptr) break;
    methods.push_back(q);
  }
  std::string why;
  auto add = [&why](const std::string& text) { why += (why.empty() ? "" : "; ") + text; };
  for (size_t k = 0; k < methods.size();) {
    const Program* q = methods[k];
    const auto& pad = padded_of(q);
    if (!pad) {
      Expected<CheckedInputs> c = k == 0 ? std::move(checked) : checked_user_inputs(program_impl(*q).module(), inputs);
      if (c) return Profile{q, std::move(c->decl), -1, std::move(c->bound)};
      add("method " + profile_method_name(method, k) + ": " + c.status().message());
      ++k;
      continue;
    }
    // A run of buckets of one range, ascending: the smallest that holds the rows.
    size_t end = k;
    std::string sizes;
    while (end < methods.size() && padded_of(methods[end]) && padded_of(methods[end])->symbol == pad->symbol &&
           padded_of(methods[end])->min == pad->min && padded_of(methods[end])->max == pad->max) {
      sizes += (sizes.empty() ? "" : ", ") + std::to_string(padded_of(methods[end])->size);
      ++end;
    }
    std::string rows_of;
    const int64_t b = padded_rows(*pad, q, inputs, rows_of);
    std::string objection;
    if (b >= pad->min && b <= pad->max) {
      for (size_t j = k; j < end; ++j) {
        const program::PaddedBatch& bucket = *padded_of(methods[j]);
        if (bucket.size < b) continue;
        if (Status fit = fits_padded(methods[j], bucket, inputs); !fit) {
          objection = "; padded to " + std::to_string(bucket.size) + ": " + fit.message();
          continue;
        }
        Profile chosen{methods[j], {}, b};
        const ir::Module& m = program_impl(*methods[j]).module();
        for (size_t i = 0; i < m.input_specs.size(); ++i)
          if (m.input_specs[i].kind == ir::InputSpec::Kind::kUserInput)
            chosen.user_inputs.push_back(m.graph.inputs()[i]);
        return chosen;
      }
    }
    add((rows_of.empty() ? std::string("the inputs") : rows_of) +
        (b >= pad->min && b <= pad->max
             ? ""
             : ", outside the range [" + std::to_string(pad->min) + ", " + std::to_string(pad->max) + "]") +
        " that padded batch buckets serve (compiled for " + sizes + ")" + objection);
    k = end;
  }
  return Status(ErrorCode::kInvalidArgument,
                "no shape profile of method '" + std::string(method) + "' takes these inputs: " + why);
}

std::vector<engine::RtValue> assemble_graph_inputs(const ir::Module& m,
                                                   const std::map<std::string, Tensor, std::less<>>& buffers,
                                                   const std::vector<Tensor>& inputs) {
  std::vector<engine::RtValue> graph_inputs(m.graph.inputs().size());
  size_t u = 0;
  for (size_t i = 0; i < m.input_specs.size(); ++i) {
    const ir::InputSpec& s = m.input_specs[i];
    if (s.kind == ir::InputSpec::Kind::kUserInput)
      graph_inputs[i] = inputs[u++];
    else if (s.kind == ir::InputSpec::Kind::kBuffer)
      graph_inputs[i] = buffers.at(s.target);
    else
      graph_inputs[i] = m.weights.at(s.target);
  }
  return graph_inputs;
}

}  // namespace

namespace {

// The dtype and sizes of each user output of a call of `chosen` (a padded
// batch bucket's cut to the caller's rows); an output whose sizes the
// inputs' sizes do not determine has none, and `unknown` says why.
struct OutputShape {
  OutputType type;
  std::string unknown;
};
std::vector<OutputShape> output_shapes(const Profile& chosen) {
  const ir::Module& m = program_impl(*chosen.program).module();
  const std::optional<program::PaddedBatch>& pad = padded_of(chosen.program);
  std::vector<OutputShape> shapes;
  for (size_t i = 0; i < m.output_specs.size(); ++i) {
    if (m.output_specs[i].kind != ir::OutputSpec::Kind::kUserOutput) continue;
    const ir::Value* v = m.graph.outputs()[i];
    OutputShape s{{v->type.dtype, {}}, {}};
    for (size_t d = 0; d < v->type.sizes.size() && s.unknown.empty(); ++d) {
      const ir::Dim& dim = v->type.sizes[d];
      Expected<int64_t> n = dim.is_static() ? Expected<int64_t>(dim.value) : dim.expr->eval(chosen.bound);
      if (!n.has_value())
        s.unknown = "output '" + v->name + "' (output " + std::to_string(shapes.size()) + "): dimension " +
                    std::to_string(d) + " is " + dim.expr->to_string() + ", which the inputs' sizes do not determine";
      else
        s.type.sizes.push_back(*n);
    }
    if (s.unknown.empty() && chosen.rows >= 0 && pad->output_factors.at(i) > 0)
      s.type.sizes.at(0) = chosen.rows * pad->output_factors[i];
    shapes.push_back(std::move(s));
  }
  return shapes;
}

// The caller's memory for the user outputs (RunOptions::outputs) against
// what the call gives: count, contiguity, and the dtype and sizes where the
// inputs' sizes determine them (the others are checked once they are known).
Status check_output_memory(const Profile& chosen, const std::vector<Tensor>& memory) {
  const std::vector<OutputShape> shapes = output_shapes(chosen);
  if (memory.size() != shapes.size())
    return invalid_argument("memory for outputs: the program has " + std::to_string(shapes.size()) + " outputs, got " +
                            std::to_string(memory.size()));
  for (size_t k = 0; k < memory.size(); ++k) {
    const Tensor& t = memory[k];
    const std::string who = "memory for output " + std::to_string(k);
    if (!t.defined()) return invalid_argument(who + " is missing");
    if (!t.is_contiguous()) return invalid_argument(who + " is not contiguous");
    if (t.dtype() != shapes[k].type.dtype || (shapes[k].unknown.empty() && t.sizes() != shapes[k].type.sizes))
      return invalid_argument(who + " is " + t.type_string() + ", the call gives " +
                              std::string(dtype_name(shapes[k].type.dtype)) +
                              (shapes[k].unknown.empty() ? shape_to_string(shapes[k].type.sizes)
                                                         : std::string(" of sizes the data sets")));
  }
  return Status::ok();
}

// Copies result `src` into the caller's memory `dst` (same dtype and sizes,
// contiguous) on `stream`: between device memory only enqueued, anything
// with a host side complete on return.
Status copy_into(const Tensor& dst, const Tensor& src, void* stream) {
  if (dst.dtype() != src.dtype() || dst.sizes() != src.sizes())
    return invalid_argument("the call gives " + src.type_string() + ", the memory for it is " + dst.type_string());
  if (dst.is_cpu() && src.is_cpu()) {
    Tensor into = dst;  // a view of the same memory
    into.copy_from(src);
    return Status::ok();
  }
  const Device d = dst.is_cpu() ? src.device() : dst.device();
  const engine::DeviceMemory* dm = runtime::device_memory_of(d);
  if (!dm) return unsupported("no backend of this kiln runs on " + d.to_string());
  if ((!src.is_cpu() && src.device() != d)) return copy_tensor(dst, src);
  const Tensor from = src.contiguous();
  return dm->copy_all({&dst, 1}, {&from, 1}, stream);
}

}  // namespace

Expected<std::vector<OutputType>> Session::output_types(const std::vector<Tensor>& inputs) const {
  KILN_ASSIGN_OR_RETURN(Profile chosen,
                        select_profile(*s_->program, s_->program.get(), s_->program->impl_->method_name, inputs));
  std::vector<OutputType> types;
  for (OutputShape& s : output_shapes(chosen)) {
    if (!s.unknown.empty()) return unsupported(s.unknown);
    types.push_back(std::move(s.type));
  }
  return types;
}

Expected<std::vector<Tensor>> Session::run(const std::vector<Tensor>& inputs) {
  return run(s_->program->impl_->method_name, inputs, RunOptions{});
}

Expected<std::vector<Tensor>> Session::run(const std::vector<Tensor>& inputs, const RunOptions& options) {
  return run(s_->program->impl_->method_name, inputs, options);
}

Expected<std::vector<Tensor>> Session::run(std::string_view method, const std::vector<Tensor>& inputs) {
  return run(method, inputs, RunOptions{});
}

Status Session::synchronize() {
  if (!s_ || !s_->pending || !s_->program) return Status::ok();  // moved from, or nothing queued
  s_->pending = false;
  if (const engine::DeviceMemory* device = runtime::device_memory_of(s_->state_device))
    KILN_TRY(device->synchronize(s_->last_stream));
  for (const std::string& name : s_->program->method_names())
    KILN_TRY(program_impl(*s_->program->method(name)).exec->synchronize());
  return Status::ok();
}

Expected<std::vector<Tensor>> Session::run(std::string_view method, const std::vector<Tensor>& inputs,
                                           const RunOptions& options) {
  const Program* p = s_->program->method(method);
  if (p == nullptr) {
    std::string names;
    for (const std::string& n : s_->program->method_names()) names += (names.empty() ? "" : ", ") + n;
    return not_found("the program has no method '" + std::string(method) + "' (methods: " + names + ")");
  }
  const double start_us = options.trace ? options.trace->now_us() : 0;
  KILN_ASSIGN_OR_RETURN(Profile chosen, select_profile(*s_->program, p, method, inputs));
  p = chosen.program;
  const ir::Module& m = p->impl_->module();
  const std::vector<const ir::Value*>& user_decl = chosen.user_inputs;
  // An input that lies in a buffer's memory would be read while the call
  // writes that buffer (in place, or copied back): refused before anything runs.
  for (size_t i = 0; i < inputs.size(); ++i)
    for (const auto& [name, b] : s_->buffers)
      if (inputs[i].storage() == b.storage())
        return invalid_argument("input '" + user_decl[i]->name + "' (input " + std::to_string(i) +
                                ") shares memory with buffer '" + name + "', which the call may write; pass a copy");
  // Where the outputs go: into the caller's memory, else onto the device of
  // the first input on one, else into host memory.
  const std::vector<Tensor>& given = options.outputs;
  if (!given.empty()) KILN_TRY(check_output_memory(chosen, given));
  Device outputs_on = given.empty() ? Device::cpu() : given[0].device();
  for (const Tensor& t : inputs)
    if (given.empty() && t.defined() && !t.is_cpu()) {
      outputs_on = t.device();
      break;
    }
  // The call's device work goes on its stream (the device's default stream
  // unless the caller names one): engines, the memory they allocate, copies.
  const engine::DeviceMemory* device = runtime::device_memory_of(s_->state_device);
  if (!device && !outputs_on.is_cpu()) device = runtime::device_memory_of(outputs_on);
  void* stream = options.stream ? options.stream : device ? device->default_stream() : nullptr;
  // A call that waits for its results anyway (host tensors in and out) runs
  // on the session's own stream, beside other sessions' calls, unless the
  // caller bound device memory as a buffer (work on that memory keeps the
  // default stream's order). It returns complete: the buffers the session
  // keeps on the device are up to date for any stream that reads them next.
  bool own = false;
  if (device && !options.stream && outputs_on.is_cpu() &&
      std::all_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return !t.defined() || t.is_cpu(); }) &&
      std::all_of(given.begin(), given.end(), [](const Tensor& t) { return t.is_cpu(); }) &&
      std::all_of(s_->buffers.begin(), s_->buffers.end(),
                  [&](const auto& b) { return b.second.is_cpu() || !s_->bound.count(b.first); })) {
    if (!s_->own_stream) s_->own_stream = device->new_stream();
    if (s_->own_stream) {
      stream = s_->own_stream.get();
      own = true;
    }
  }
  // The session's calls in order when they change streams.
  if (device && s_->pending && stream != s_->last_stream) KILN_TRY(device->synchronize(s_->last_stream));
  runtime::Executable::RunOptions run_options;
  run_options.stream = stream;
  run_options.keep_on_device = !s_->state_device.is_cpu() || !outputs_on.is_cpu();
  run_options.user_outputs_on_host = outputs_on.is_cpu();
  run_options.rows = chosen.rows;  // a padded batch bucket: its engines pad and cut
  run_options.trace = options.trace;
  // Buffers copied back that lie on the device, and the caller's memory for
  // user outputs: the last engine writes their values straight into them. The
  // call's device work is pending from here (synchronize() waits for it).
  const std::vector<bool>& in_place = p->impl_->exec->written_in_place();
  if (device) {
    run_options.output_memory.resize(m.output_specs.size());
    for (size_t i = 0, k = 0; i < m.output_specs.size(); ++i) {
      const ir::OutputSpec& s = m.output_specs[i];
      if (s.kind == ir::OutputSpec::Kind::kUserOutput) {
        if (k < given.size()) run_options.output_memory[i] = given[k];
        ++k;
      } else if (s.kind == ir::OutputSpec::Kind::kBufferMutation && !in_place[i]) {
        if (const Tensor& b = s_->buffers.at(s.target); !b.is_cpu()) run_options.output_memory[i] = b;
      }
    }
    s_->last_stream = stream;
    s_->pending = true;
  }
  KILN_ASSIGN_OR_RETURN(auto results, p->impl_->exec->run(assemble_graph_inputs(m, s_->buffers, inputs), run_options));

  // Commit the copy-back buffers only after the whole call succeeded (the
  // in-place ones were written by their engines as the call ran, and so were
  // those the last engine wrote into their memory).
  std::vector<Tensor> user_outputs;
  std::vector<std::pair<std::string, Tensor>> new_buffers;
  for (size_t i = 0; i < m.output_specs.size(); ++i) {
    const ir::OutputSpec& s = m.output_specs[i];
    const engine::RtValue& r = results[i];
    if (s.kind == ir::OutputSpec::Kind::kUserOutput) {
      Tensor t = engine::rt_value_to_tensor(r);
      if (!t.defined()) return internal_error("output " + std::to_string(i) + " has no value");
      if (t.device() != outputs_on) {
        if (outputs_on.is_cpu()) {
          const engine::DeviceMemory* dm = runtime::device_memory_of(t.device());
          if (!dm) return unsupported("no backend of this kiln runs on " + t.device().to_string());
          Tensor host = Tensor::empty(t.dtype(), t.sizes());
          const Tensor src = t.contiguous();
          KILN_TRY(dm->copy_all({&host, 1}, {&src, 1}, stream));
          t = host;
        } else {
          const engine::DeviceMemory* dm = runtime::device_memory_of(outputs_on);
          if (!dm) return unsupported("no backend of this kiln runs on " + outputs_on.to_string());
          KILN_ASSIGN_OR_RETURN(Tensor host, to_host(t));
          KILN_ASSIGN_OR_RETURN(t, dm->empty(host.dtype(), host.sizes(), stream));
          const Tensor src = host.contiguous();
          KILN_TRY(dm->copy_all({&t, 1}, {&src, 1}, stream));
        }
      }
      if (!given.empty()) {  // into the caller's memory, unless the engine wrote it there
        const Tensor& into = given.at(user_outputs.size());
        if (t.storage() != into.storage() || t.raw_data() != into.raw_data())
          KILN_TRY(copy_into(into, t, stream).with_context("output " + std::to_string(user_outputs.size())));
        user_outputs.push_back(into);
        continue;
      }
      user_outputs.push_back(t.is_cpu() ? t.contiguous() : t);
      continue;
    }
    const Tensor* t = std::get_if<Tensor>(&r);
    if (!t) return internal_error("mutation output for '" + s.target + "' is not a tensor");
    if (s.kind == ir::OutputSpec::Kind::kBufferMutation) {
      const Tensor& old = s_->buffers.at(s.target);
      if (t->sizes() != old.sizes())
        return internal_error("the new value of buffer '" + s.target + "' is " + t->type_string() + ", the buffer is " +
                              old.type_string());
      if (in_place[i]) {  // the engine wrote it where it lies
        if (t->storage() != old.storage())
          return internal_error("buffer '" + s.target + "' should have been written in place by its engine");
        continue;
      }
      if (!run_options.output_memory.empty() && run_options.output_memory[i].defined() &&
          t->storage() == old.storage() && t->raw_data() == old.raw_data())
        continue;  // the last engine wrote it into the buffer's memory
      // Copied back below; a value that shares the buffer's memory is copied out first.
      if (t->storage() == old.storage()) {
        if (device) KILN_TRY(device->synchronize(stream));
        KILN_ASSIGN_OR_RETURN(Tensor own, duplicate(*t));
        new_buffers.emplace_back(s.target, std::move(own));
      } else {
        new_buffers.emplace_back(s.target, *t);
      }
    } else {
      // A mutated user input: write into the caller's tensor, as eager PyTorch does.
      bool written = false;
      if (device) KILN_TRY(device->synchronize(stream));  // copy_tensor works on the default stream
      for (size_t k = 0; k < user_decl.size(); ++k)
        if (user_decl[k]->name == s.target) {
          KILN_TRY(copy_tensor(inputs[k], *t).with_context("input '" + s.target + "'"));
          written = true;
        }
      if (!written) return internal_error("the program writes input '" + s.target + "', which it does not take");
    }
  }
  // Into each buffer's own memory, wherever each lies: device to device in one
  // batch (one wait for a decoder's many counters), anything else one by one.
  std::vector<Tensor> to, from;
  for (auto& [name, t] : new_buffers) {
    Tensor& b = s_->buffers.at(name);
    if (device && !b.is_cpu() && !t.is_cpu() && b.device() == t.device() && t.dtype() == b.dtype() &&
        t.is_contiguous()) {
      to.push_back(b);
      from.push_back(t);
      continue;
    }
    KILN_TRY(copy_tensor(b, t).with_context("buffer '" + name + "'"));
  }
  if (!to.empty()) KILN_TRY(device->copy_all(to, from, stream).with_context("copying back buffers"));
  if ((own || options.trace) && s_->pending) {
    s_->pending = false;
    KILN_TRY(device->synchronize(stream));
  }
  if (options.trace)
    options.trace->add({"call " + p->impl_->method_name, std::to_string(inputs.size()) + " inputs", "host", start_us,
                        options.trace->now_us() - start_us});
  return user_outputs;
}

}  // namespace kiln
