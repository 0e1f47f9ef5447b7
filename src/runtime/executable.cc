#include "runtime/executable.h"

#include <algorithm>

#include "ir/sym_solve.h"
#include "kiln/runtime.h"
#include "runtime/device_copy.h"
#include "runtime/engine_hot_set.h"
#include "runtime/interpreter.h"

namespace kiln::runtime {

using partition::boolean_mask;
using partition::unique_of_flattened;

using partition::SegmentKind;

Expected<std::unique_ptr<Executable>> Executable::load(program::CompiledProgram p, std::string_view what,
                                                       bool load_engines) {
  auto e = std::unique_ptr<Executable>(new Executable());
  const ir::Graph& g = p.module.graph;
  const std::string w(what);
  const size_t nv = g.num_values();
  std::vector<bool> available(nv, false);
  for (const ir::Value* v : g.inputs()) available[static_cast<size_t>(v->id)] = true;
  std::vector<int> last_reader(nv, -1);
  // Invariant 4: the program's results and every engine's outputs in the one canonical order.
  const ir::OutputOrder order(p.module);
  if (!order.program_outputs_ordered())
    return format_error(w +
                        ": the program's outputs are not in kiln's order (buffer mutations first, in buffer "
                        "order); recompile it");

  for (size_t si = 0; si < p.segments.size(); ++si) {
    const program::SegmentRecord& s = p.segments[si];
    const std::string where = w + ", segment " + std::to_string(si);
    if (s.kind == SegmentKind::kEngine) {
      for (int v : s.inputs) {
        if (!available[static_cast<size_t>(v)])
          return format_error(where + ": engine input '" + g.value(static_cast<size_t>(v))->name +
                              "' is not computed before the segment runs");
        last_reader[static_cast<size_t>(v)] = static_cast<int>(si);
      }
      const engine::Backend* backend = program::builtin_backends().find(s.backend);
      if (backend == nullptr)
        return unsupported(where + ": the engine was built for backend '" + s.backend +
                           "', which this kiln does not have");
      for (int v : s.outputs) available[static_cast<size_t>(v)] = true;
      std::vector<const ir::Value*> outs;
      for (int v : s.outputs) outs.push_back(g.value(static_cast<size_t>(v)));
      if (!order.ordered(outs))
        return format_error(where +
                            ": the engine's outputs are not in kiln's order (buffer mutations first, in "
                            "buffer order); recompile it");
    } else {
      std::vector<bool> produced(nv, false);
      for (size_t k = 0; k < s.nodes.size(); ++k) {
        const ir::Node& n = *g.nodes()[static_cast<size_t>(s.nodes[k])];
        for (const ir::Value* v : n.operands()) {
          if (!available[static_cast<size_t>(v->id)])
            return format_error(where + ": " + n.describe() + " reads '" + v->name + "' before it is computed");
          last_reader[static_cast<size_t>(v->id)] = static_cast<int>(si);
        }
        if (!cpu::cpu_kernels().find(n.op))
          return unsupported(where + ": " + n.describe() + " has no CPU kernel to fall back on");
        for (const ir::Value* v : n.outputs)
          available[static_cast<size_t>(v->id)] = produced[static_cast<size_t>(v->id)] = true;
      }
      for (int v : s.outputs)
        if (!produced[static_cast<size_t>(v)])
          return format_error(where + ": output '" + g.value(static_cast<size_t>(v))->name + "' is not computed by it");
    }
  }
  e->last_segment_reader_ = last_reader;
  for (const ir::Value* v : g.outputs()) {
    if (!available[static_cast<size_t>(v->id)])
      return format_error(w + ": program output '" + v->name + "' is computed by no segment");
    last_reader[static_cast<size_t>(v->id)] = static_cast<int>(p.segments.size());
  }
  // A padded batch bucket: its graph inputs the caller gives with fewer rows,
  // and the graph outputs cut to the caller's rows.
  e->padded_input_.assign(nv, false);
  e->cut_factor_.assign(nv, 0);
  if (p.padded) {
    for (size_t i = 0, u = 0; i < p.module.input_specs.size(); ++i)
      if (p.module.input_specs[i].kind == ir::InputSpec::Kind::kUserInput) {
        if (std::find(p.padded->inputs.begin(), p.padded->inputs.end(), static_cast<int>(u)) != p.padded->inputs.end())
          e->padded_input_[static_cast<size_t>(g.inputs()[i]->id)] = true;
        ++u;
      }
    for (size_t i = 0; i < g.outputs().size() && i < p.padded->output_factors.size(); ++i) {
      int64_t& c = e->cut_factor_[static_cast<size_t>(g.outputs()[i]->id)];
      if (p.padded->output_factors[i] <= 0 || (c != 0 && c != p.padded->output_factors[i]))
        c = -1;  // kept whole, or two outputs that cut it differently: cut at the end
      else
        c = p.padded->output_factors[i];
    }
  }
  e->release_after_.resize(p.segments.size());
  for (size_t v = 0; v < nv; ++v)
    if (last_reader[v] >= 0 && static_cast<size_t>(last_reader[v]) < p.segments.size())
      e->release_after_[static_cast<size_t>(last_reader[v])].push_back(static_cast<int>(v));
  KILN_ASSIGN_OR_RETURN(e->buffer_writes_, program::classify_buffer_writes(p, w));
  e->written_in_place_.assign(g.outputs().size(), false);
  e->read_by_segment_.assign(nv, false);
  for (const program::SegmentRecord& s : p.segments) {
    if (s.kind == SegmentKind::kEngine)
      for (int v : s.inputs) e->read_by_segment_[static_cast<size_t>(v)] = true;
    else
      for (int ni : s.nodes)
        for (const ir::Value* v : g.nodes()[static_cast<size_t>(ni)]->operands())
          e->read_by_segment_[static_cast<size_t>(v->id)] = true;
  }
  e->user_output_.assign(nv, false);
  for (size_t i = 0; i < p.module.output_specs.size() && i < g.outputs().size(); ++i)
    if (p.module.output_specs[i].kind == ir::OutputSpec::Kind::kUserOutput)
      e->user_output_[static_cast<size_t>(g.outputs()[i]->id)] = true;
  e->value_in_place_.assign(nv, false);
  for (const program::BufferWrite& bw : e->buffer_writes_)
    if (bw.in_place) {
      e->written_in_place_[static_cast<size_t>(bw.output)] = true;
      e->value_in_place_[static_cast<size_t>(g.outputs()[static_cast<size_t>(bw.output)]->id)] = true;
    }
  {
    std::vector<int> uses(nv, 0);
    for (const ir::Value* v : g.outputs()) ++uses[static_cast<size_t>(v->id)];
    const bool engine_last = !p.segments.empty() && p.segments.back().kind == SegmentKind::kEngine;
    for (const ir::Value* v : g.outputs()) {
      const size_t id = static_cast<size_t>(v->id);
      const bool last = engine_last && std::find(p.segments.back().outputs.begin(), p.segments.back().outputs.end(),
                                                 v->id) != p.segments.back().outputs.end();
      e->takes_output_memory_.push_back(last && uses[id] == 1 && !e->value_in_place_[id]);
    }
  }
  e->p_ = std::move(p);
  e->what_ = w;
  if (load_engines) KILN_TRY(e->ensure_engines());
  return e;
}

Status Executable::ensure_engines() const {
  std::call_once(engines_once_, [this] {
    const ir::Module& m = p_.module;
    engine::WeightLookup weights = [&m](const std::string& name) -> Expected<Tensor> {
      auto it = m.weights.find(name);
      if (it == m.weights.end()) return not_found("the program has no weight '" + name + "'");
      return it->second;
    };
    std::vector<std::shared_ptr<engine::Engine>> engines;
    for (size_t si = 0; si < p_.segments.size(); ++si) {
      const program::SegmentRecord& s = p_.segments[si];
      if (s.kind != SegmentKind::kEngine) {
        engines.push_back(nullptr);
        continue;
      }
      if (s.plan.empty()) {
        engines_status_ = unsupported(what_ + ", segment " + std::to_string(si) +
                                      ": the engine was not built (the program was compiled for its partition only)");
        return;
      }
      const engine::Backend* backend = program::builtin_backends().find(s.backend);  // checked by load()
      bool reused = false;
      auto e =
          EngineHotSet::instance().load(*backend, s.plan, weights, what_ + ", segment " + std::to_string(si), &reused);
      if (!e) {
        engines_status_ = e.status();
        return;
      }
      engines.push_back(std::move(*e));
    }
    engines_ = std::move(engines);
  });
  return engines_status_;
}

namespace {

// The value in `slot` in host memory: a tensor on a device is copied across
// in `stream`'s order (and the slot keeps the host copy for later readers).
Status bring_to_host(engine::RtValue& slot, void* stream) {
  const Tensor* t = std::get_if<Tensor>(&slot);
  if (!t || !t->defined() || t->is_cpu()) return Status::ok();
  const engine::DeviceMemory* m = device_memory_of(t->device());
  if (!m) return unsupported("no backend of this kiln runs on " + t->device().to_string());
  Tensor host = Tensor::empty(t->dtype(), t->sizes());
  const Tensor src = t->contiguous();
  KILN_TRY(m->copy_all({&host, 1}, {&src, 1}, stream));
  slot = std::move(host);
  return Status::ok();
}

// Binds the size symbols of `v`'s declared sizes that `value` (a tensor) gives.
void learn_symbols(const ir::Value& v, const engine::RtValue& value, ir::SymBindings& symbols) {
  const Tensor* t = std::get_if<Tensor>(&value);
  if (!t || !t->defined() || v.kind != ir::ValueKind::kTensor || t->dim() != static_cast<int64_t>(v.type.sizes.size()))
    return;
  for (size_t d = 0; d < v.type.sizes.size(); ++d)
    if (const ir::Dim& dim = v.type.sizes[d]; !dim.is_static())
      if (std::optional<std::string> name = ir::affine_symbol(*dim.expr))
        if (std::optional<int64_t> size = ir::solve_affine(*dim.expr, t->sizes()[d])) symbols.emplace(*name, *size);
}

// A bool argument of `n` (`fallback` when absent).
bool bool_arg(const ir::Node& n, const char* name, bool fallback) {
  const ir::Arg* a = n.find(name);
  const bool* b = a ? std::get_if<bool>(a) : nullptr;
  return b ? *b : fallback;
}

// Whether an engine segment is called with an empty tensor.
bool has_empty_input(const program::SegmentRecord& s, const std::vector<engine::RtValue>& env) {
  for (int v : s.inputs)
    if (const Tensor* t = std::get_if<Tensor>(&env[static_cast<size_t>(v)]); t && t->defined() && t->numel() == 0)
      return true;
  return false;
}

// A node outside the engines. With `on_device`, a selection of device
// tensors (nonzero, x[mask], masked_select without broadcasting, unique) runs on their device (only its row count comes
// to the host) and ops that read only sizes leave device tensors where they
// are (device_fallback); everything else reads host copies of its operands
// and writes host memory.
Status run_fallback_node(const ir::Node& n, std::vector<engine::RtValue>& env, void* stream, bool on_device) {
  const DeviceFallback how = on_device ? device_fallback(n) : DeviceFallback::kHost;
  if (how == DeviceFallback::kSizes) return run_node(n, env, cpu::cpu_kernels());
  if (how == DeviceFallback::kSelect) {
    auto device_tensor = [&](const ir::Value* v) -> const Tensor* {
      const Tensor* t = std::get_if<Tensor>(&env[static_cast<size_t>(v->id)]);
      return t && t->defined() && !t->is_cpu() && t->is_contiguous() ? t : nullptr;
    };
    if (unique_of_flattened(n)) {
      const ir::Arg* self = n.find("self");
      const Tensor* x = self && std::get_if<ir::Value*>(self) ? device_tensor(std::get<ir::Value*>(*self)) : nullptr;
      const engine::DeviceMemory* memory = x ? device_memory_of(x->device()) : nullptr;
      if (memory) {
        // As ATen: an output not asked for is an empty tensor.
        const bool inverse = bool_arg(n, "return_inverse", false), counts = bool_arg(n, "return_counts", false);
        Expected<std::vector<Tensor>> u =
            memory->unique(*x, n.op == ir::OpKind::kUnique2, inverse, counts, stream);
        if (u) {
          for (size_t o = 0; o < 3; ++o) {
            Tensor t = (*u)[o];
            if (!t.defined()) {
              KILN_ASSIGN_OR_RETURN(t, memory->empty(DType::Int64, Shape{0}, stream));
            }
            env[static_cast<size_t>(n.outputs[o]->id)] = std::move(t);
          }
          return Status::ok();
        }
        if (u.status().code() != ErrorCode::kUnsupported) return u.status().with_context(n.describe());
      }
    }
    const bool select = n.op == ir::OpKind::kMaskedSelect;
    const ir::Value* mask = select ? std::get<ir::Value*>(*n.find("mask")) : boolean_mask(n);
    const Tensor* x = device_tensor(mask ? std::get<ir::Value*>(*n.find("self")) : n.operands()[0]);
    const Tensor* m = mask ? device_tensor(mask) : x;
    const engine::DeviceMemory* memory = x && m && x->device() == m->device() ? device_memory_of(x->device()) : nullptr;
    if (memory && !unique_of_flattened(n) && (!select || x->sizes() == m->sizes())) {
      // masked_select: the rows of the flattened tensor under the flattened mask.
      auto flat = [](const Tensor& t) { return t.as_strided({t.numel()}, {1}, t.storage_offset()); };
      Expected<Tensor> picked = select ? memory->masked_rows(flat(*x), flat(*m), stream)
                                : mask ? memory->masked_rows(*x, *m, stream)
                                       : memory->nonzero(*x, stream);
      if (picked) {
        env[static_cast<size_t>(n.outputs[0]->id)] = std::move(*picked);
        return Status::ok();
      }
      if (picked.status().code() != ErrorCode::kUnsupported) return picked.status().with_context(n.describe());
    }
  }
  for (const ir::Value* v : n.operands()) KILN_TRY(bring_to_host(env[static_cast<size_t>(v->id)], stream));
  return run_node(n, env, cpu::cpu_kernels());
}

}  // namespace

namespace {

// An engine's steps into a call's trace, on the host's track or its device's.
class TraceSteps final : public engine::StepTrace {
 public:
  TraceSteps(Trace* trace, std::string device) : trace_(trace), device_(std::move(device)) {}
  double now_us() const override { return trace_->now_us(); }
  void step(std::string_view name, std::string_view detail, double start_us, double duration_us,
            bool on_device) override {
    trace_->add({std::string(name), std::string(detail), on_device ? device_ : "host", start_us, duration_us});
  }

 private:
  Trace* trace_;
  std::string device_;
};

// Waits for the device work that fallback node `n` left on `stream` (a
// traced node's slice ends when its work does).
Status wait_for_outputs(const ir::Node& n, const std::vector<engine::RtValue>& env, void* stream) {
  for (const ir::Value* v : n.outputs)
    if (const Tensor* t = std::get_if<Tensor>(&env[static_cast<size_t>(v->id)]); t && t->defined() && !t->is_cpu())
      if (const engine::DeviceMemory* m = device_memory_of(t->device())) KILN_TRY(m->synchronize(stream));
  return Status::ok();
}

}  // namespace

Status Executable::synchronize() const {
  if (!engines_status_ || engines_.empty()) return Status::ok();
  for (const auto& e : engines_)
    if (e) KILN_TRY(e->backend().synchronize(e->handle()));
  return Status::ok();
}

Expected<std::vector<engine::RtValue>> Executable::run(std::vector<engine::RtValue> graph_inputs,
                                                       const RunOptions& options) const {
  const ir::Graph& g = p_.module.graph;
  if (graph_inputs.size() != g.inputs().size())
    return invalid_argument("the program graph takes " + std::to_string(g.inputs().size()) + " inputs, got " +
                            std::to_string(graph_inputs.size()));
  KILN_TRY(ensure_engines());
  void* stream = options.stream;
  std::vector<engine::RtValue> env(g.num_values());
  // The size symbols the inputs give, and those values computed on the way
  // give (a count nonzero found): device outputs of engines whose sizes are
  // symbolic are sized by them.
  ir::SymBindings symbols;
  for (size_t i = 0; options.keep_on_device && i < graph_inputs.size(); ++i)
    learn_symbols(*g.inputs()[i], graph_inputs[i], symbols);
  for (size_t i = 0; i < graph_inputs.size(); ++i)
    env[static_cast<size_t>(g.inputs()[i]->id)] = std::move(graph_inputs[i]);
  // Memory given for values of the last segment: value id -> tensor.
  std::vector<const Tensor*> given_for(options.output_memory.empty() ? 0 : g.num_values(), nullptr);
  for (size_t i = 0; i < options.output_memory.size() && i < takes_output_memory_.size(); ++i)
    if (options.output_memory[i].defined() && takes_output_memory_[i])
      given_for[static_cast<size_t>(g.outputs()[i]->id)] = &options.output_memory[i];

  // A padded call: the graph inputs that still have the caller's rows (an
  // engine pads its own copy; anything else reads a host copy padded here).
  const int64_t rows = options.rows;
  if (rows >= 0 && !p_.padded) return internal_error("a padded call of a program that is not a padded batch bucket");
  if (rows >= 0 && rows > p_.padded->size)
    return invalid_argument("a padded call of " + std::to_string(rows) + " rows; the bucket holds " +
                            std::to_string(p_.padded->size));
  std::vector<bool> unpadded;  // per value id; empty outside a padded call
  if (rows >= 0) unpadded = padded_input_;
  auto still_unpadded = [&](int v) { return !unpadded.empty() && unpadded[static_cast<size_t>(v)]; };
  auto pad_here = [&](int v) -> Status {
    if (!still_unpadded(v)) return Status::ok();
    engine::RtValue& slot = env[static_cast<size_t>(v)];
    KILN_TRY(bring_to_host(slot, stream));
    slot = engine::pad_rows(engine::rt_value_to_tensor(slot), p_.padded->size);
    unpadded[static_cast<size_t>(v)] = false;
    return Status::ok();
  };
  engine::RowPadding padding;
  padding.rows = rows;

  std::vector<Tensor> ins, outs;
  for (size_t si = 0; si < p_.segments.size(); ++si) {
    const program::SegmentRecord& s = p_.segments[si];
    if (s.kind == SegmentKind::kEngine) {
      const engine::DeviceMemory* device = engines_[si]->backend().device_memory();
      if (device && has_empty_input(s, env)) {
        // A size of 0 (nonzero found nothing): no kernel launches on empty
        // tensors; the reference kernels make the empty results on the host.
        for (int v : s.inputs) KILN_TRY(pad_here(v));
        for (int ni : s.nodes) KILN_TRY(run_fallback_node(*g.nodes()[static_cast<size_t>(ni)], env, stream, false));
        for (int v : release_after_[si]) env[static_cast<size_t>(v)] = std::monostate{};
        continue;
      }
      // The engine pads the inputs that have the caller's rows, and cuts the
      // outputs no later segment reads.
      padding.inputs.clear();
      padding.output_factors.clear();
      bool pads = false;
      if (rows >= 0) {
        for (int v : s.inputs) {
          padding.inputs.push_back(still_unpadded(v));
          pads = pads || still_unpadded(v);
        }
        for (int v : s.outputs) {
          const int64_t c = last_segment_reader_[static_cast<size_t>(v)] <= static_cast<int>(si)
                                ? std::max<int64_t>(cut_factor_[static_cast<size_t>(v)], 0)
                                : 0;
          padding.output_factors.push_back(c);
          pads = pads || c > 0;
        }
      }
      ins.clear();
      for (int v : s.inputs) {
        if (!device) KILN_TRY(bring_to_host(env[static_cast<size_t>(v)], stream));
        ins.push_back(engine::rt_value_to_tensor(env[static_cast<size_t>(v)]));
      }
      // Device outputs: memory on the engine's device for each (none for a
      // buffer's new value the engine writes where the buffer lies).
      outs.clear();
      if (options.keep_on_device && device) {
        for (size_t o = 0; o < s.outputs.size(); ++o) {
          const int v = s.outputs[o];
          const ir::Value& val = *g.value(static_cast<size_t>(v));
          Shape sizes;
          bool fixed = val.kind == ir::ValueKind::kTensor;
          for (const ir::Dim& d : val.type.sizes) {
            Expected<int64_t> n = d.is_static() ? Expected<int64_t>(d.value) : d.expr->eval(symbols);
            fixed = fixed && n.has_value();
            sizes.push_back(n.has_value() ? *n : 0);
          }
          if (fixed) sizes = engine::RowPadding::output_sizes(&padding, o, std::move(sizes));
          if (!fixed) {  // sizes known only once it runs (set by data): host memory, as the engine gives it
            outs.clear();
            break;
          }
          // Written where the buffer lies: no memory for it.
          if (value_in_place_[static_cast<size_t>(v)]) {
            outs.emplace_back();
            continue;
          }
          // A user output only the caller reads, wanted in host memory: the
          // caller's memory for it, or a new host tensor.
          const bool to_host = options.user_outputs_on_host && user_output_[static_cast<size_t>(v)] &&
                               !read_by_segment_[static_cast<size_t>(v)];
          if (!given_for.empty() && given_for[static_cast<size_t>(v)]) {
            const Tensor& m = *given_for[static_cast<size_t>(v)];
            if (m.dtype() == val.type.dtype && m.sizes() == sizes && m.is_contiguous() &&
                (to_host ? m.is_cpu() : !m.is_cpu() && m.device() == device->device())) {
              outs.push_back(m);
              continue;
            }
          }
          if (to_host) {
            outs.emplace_back();
            continue;
          }
          KILN_ASSIGN_OR_RETURN(Tensor t, device->empty(val.type.dtype, sizes, stream));
          outs.push_back(std::move(t));
        }
      }
      const double start_us = options.trace ? options.trace->now_us() : 0;
      TraceSteps steps(options.trace, device ? std::string(engines_[si]->backend().name()) : "host");
      KILN_TRY(engines_[si]->execute({stream, pads ? &padding : nullptr, options.trace ? &steps : nullptr}, ins, outs));
      if (options.trace)
        options.trace->add(
            {"engine " + std::to_string(si),
             std::string(engines_[si]->backend().name()) + ", " + std::to_string(s.nodes.size()) + " nodes", "host",
             start_us, options.trace->now_us() - start_us});
      if (outs.size() != s.outputs.size())
        return internal_error("segment " + std::to_string(si) + ": the engine returned " + std::to_string(outs.size()) +
                              " outputs, the program expects " + std::to_string(s.outputs.size()));
      for (size_t o = 0; o < outs.size(); ++o) {
        const ir::Value& v = *g.value(static_cast<size_t>(s.outputs[o]));
        env[static_cast<size_t>(v.id)] = engine::tensor_to_rt_value(v.kind, outs[o]);
      }
      ins.clear();
      outs.clear();
    } else {
      for (size_t k = 0; k < s.nodes.size(); ++k) {
        const ir::Node& n = *g.nodes()[static_cast<size_t>(s.nodes[k])];
        for (const ir::Value* v : n.operands()) KILN_TRY(pad_here(v->id));
        const double start_us = options.trace ? options.trace->now_us() : 0;
        KILN_TRY(run_fallback_node(n, env, stream, options.keep_on_device));
        if (options.trace) {
          KILN_TRY(wait_for_outputs(n, env, stream));
          options.trace->add({std::string(ir::op_target(n.op)),
                              "fallback node " + n.name + (k < s.reasons.size() ? ": " + s.reasons[k] : ""), "host",
                              start_us, options.trace->now_us() - start_us});
        }
        if (options.keep_on_device)
          for (const ir::Value* v : n.outputs) learn_symbols(*v, env[static_cast<size_t>(v->id)], symbols);
      }
    }
    for (int v : release_after_[si]) env[static_cast<size_t>(v)] = std::monostate{};
  }
  std::vector<engine::RtValue> out;
  out.reserve(g.outputs().size());
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const ir::Value* v = g.outputs()[i];
    out.push_back(env[static_cast<size_t>(v->id)]);
    // A padded call's outputs not cut by their engine: the caller's rows, a view.
    const int64_t c = rows >= 0 ? p_.padded->output_factors.at(i) : 0;
    const Tensor* t = c > 0 ? std::get_if<Tensor>(&out.back()) : nullptr;
    if (t && t->defined() && t->dim() > 0 && t->sizes()[0] != rows * c) {
      Shape sizes = t->sizes();
      sizes[0] = rows * c;
      out.back() = t->as_strided(sizes, t->strides(), t->storage_offset());
    }
  }
  return out;
}

}  // namespace kiln::runtime
