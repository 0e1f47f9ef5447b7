#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "ir/graph.h"
#include "ir/ops.h"
#include "ir/printer.h"
#include "kiln/runtime.h"
#include "partition/partition.h"
#include "program/compiled_program.h"
#include "program/kiln_file.h"
#include "runtime/executable.h"
#include "runtime/program_impl.h"

namespace kiln {

namespace {

TensorSpec spec_of(const ir::Value* v, std::string name, std::string kind) {
  TensorSpec s;
  s.name = std::move(name);
  s.dtype = v->type.dtype;
  for (const ir::Dim& d : v->type.sizes) s.dims.push_back(d.to_string());
  s.kind = std::move(kind);
  return s;
}

}  // namespace

Program::Program() : impl_(std::make_unique<Impl>()) {}
Program::~Program() = default;

namespace {

// The signature, symbols and segments as the public API shows them.
void describe(Program::Impl& im) {
  const ir::Module& m = im.module();
  std::set<const ir::Value*> read;
  for (const auto& n : m.graph.nodes())
    for (const ir::Value* v : n->operands()) read.insert(v);
  for (const ir::Value* v : m.graph.outputs()) read.insert(v);
  for (size_t i = 0; i < m.input_specs.size(); ++i) {
    const ir::InputSpec& s = m.input_specs[i];
    const ir::Value* v = m.graph.inputs()[i];
    switch (s.kind) {
      case ir::InputSpec::Kind::kUserInput: im.inputs.push_back(spec_of(v, v->name, "user_input")); break;
      case ir::InputSpec::Kind::kBuffer:
        im.buffers.push_back(spec_of(v, s.target, "buffer"));
        if (!read.count(v)) im.unread_buffers.insert(s.target);
        break;
      case ir::InputSpec::Kind::kParameter: im.weights.push_back(spec_of(v, s.target, "parameter")); break;
      case ir::InputSpec::Kind::kConstant: im.weights.push_back(spec_of(v, s.target, "constant")); break;
    }
  }
  for (size_t i = 0; i < m.output_specs.size(); ++i) {
    const ir::OutputSpec& s = m.output_specs[i];
    const ir::Value* v = m.graph.outputs()[i];
    if (s.kind == ir::OutputSpec::Kind::kUserOutput)
      im.outputs.push_back(spec_of(v, v->name, "user_output"));
    else if (s.kind == ir::OutputSpec::Kind::kBufferMutation)
      im.mutated.push_back(s.target);
    else
      im.mutated_inputs.push_back(s.target);
  }
  for (const auto& [name, range] : m.symbols) im.symbols.push_back({name, range.min, range.max});
  for (const program::SegmentRecord& r : im.exec->program().segments) {
    SegmentInfo si;
    si.engine = r.kind == partition::SegmentKind::kEngine;
    si.backend = r.backend;
    si.plan_bytes = r.plan.size();
    si.from_cache = r.from_cache;
    if (si.engine)
      if (const engine::Backend* b = program::builtin_backends().find(r.backend))
        if (auto mem = b->plan_memory(r.plan)) {
          si.arena_bytes = mem->arena_bytes;
          si.workspace_bytes = mem->workspace_bytes;
          si.weight_bytes = mem->weight_bytes;
        }
    si.num_nodes = static_cast<int>(r.nodes.size());
    si.num_inputs = static_cast<int>(r.inputs.size());
    si.num_outputs = static_cast<int>(r.outputs.size());
    for (size_t k = 0; k < r.nodes.size(); ++k) {
      const ir::Node& n = *m.graph.nodes()[static_cast<size_t>(r.nodes[k])];
      ++si.ops[std::string(ir::op_target(n.op))];
      if (!si.engine)
        si.fallback.push_back({n.name, std::string(ir::op_target(n.op)), k < r.reasons.size() ? r.reasons[k] : ""});
    }
    im.segments.push_back(std::move(si));
  }
}

}  // namespace

namespace {

std::string type_text(const Tensor& t) { return t.type_string(); }

// Methods share state and weights by name: a buffer must have one dtype,
// shape and initial value in every method that has it; a parameter, buffer or
// constant of equal bytes is kept once in memory (constants folded per method
// may differ under one name and then stay apart).
Status share_by_name(std::vector<program::CompiledMethod>& methods, const std::string& what) {
  std::map<std::string, std::pair<Tensor, std::string>> first;  // fqn -> (tensor, method)
  for (program::CompiledMethod& cm : methods) {
    ir::Module& m = cm.program.module;
    for (const ir::InputSpec& s : m.input_specs) {
      if (s.kind == ir::InputSpec::Kind::kUserInput) continue;
      Tensor& t = m.weights.at(s.target);
      // Constants folded per method share a name only when they share bytes too.
      const std::string key = (s.kind == ir::InputSpec::Kind::kConstant ? "constant " : "") + s.target;
      auto [it, inserted] = first.try_emplace(key, t, cm.name);
      if (inserted) continue;
      const Tensor& other = it->second.first;
      if (t.same_bytes(other)) {
        t = other;  // one copy in memory (and one on a device: engines share copies of one host weight)
        continue;
      }
      if (s.kind == ir::InputSpec::Kind::kBuffer)
        return invalid_argument(
            what + ": buffer '" + s.target + "' is " + type_text(t) + " in method '" + cm.name + "' and " +
            type_text(other) + " in method '" + it->second.second + "'" +
            (t.dtype() == other.dtype() && t.sizes() == other.sizes() ? " with other initial values" : "") +
            "; methods share buffers by name");
    }
  }
  return Status::ok();
}

// Every method's other names of its tensors (merge_storage_aliases), as one
// map: an alias names one tensor in every method that has it, and is not a
// name another method keeps.
Expected<std::map<std::string, std::string, std::less<>>> merge_aliases(
    const std::vector<program::CompiledMethod>& methods, const std::string& what) {
  std::map<std::string, std::string, std::less<>> all;
  std::map<std::string, std::string> kept;  // name -> a method that keeps it
  for (const program::CompiledMethod& cm : methods)
    for (const ir::InputSpec& s : cm.program.module.input_specs)
      if (s.kind != ir::InputSpec::Kind::kUserInput) kept.emplace(s.target, cm.name);
  for (const program::CompiledMethod& cm : methods)
    for (const auto& [alias, target] : cm.program.module.aliases) {
      if (auto k = kept.find(alias); k != kept.end())
        return invalid_argument(what + ": '" + alias + "' is another name of '" + target + "' in method '" + cm.name +
                                "' but a tensor of its own in method '" + k->second + "'");
      auto [it, inserted] = all.emplace(alias, target);
      if (!inserted && it->second != target)
        return invalid_argument(what + ": '" + alias + "' names '" + it->second + "' in one method and '" + target +
                                "' in method '" + cm.name + "'");
    }
  return all;
}

Expected<std::unique_ptr<Program::Impl>> make_impl(program::CompiledMethod cm, const std::string& what,
                                                   bool load_engines) {
  auto im = std::make_unique<Program::Impl>();
  im->method_name = cm.name;
  KILN_ASSIGN_OR_RETURN(im->exec, runtime::Executable::load(std::move(cm.program), what, load_engines));
  describe(*im);
  return im;
}

}  // namespace

Expected<std::shared_ptr<const Program>> Program::assemble(std::vector<program::CompiledMethod> methods,
                                                           const std::string& what, bool load_engines) {
  if (methods.empty()) return invalid_argument(what + ": a program has at least one method");
  KILN_TRY(share_by_name(methods, what));
  KILN_ASSIGN_OR_RETURN(auto aliases, merge_aliases(methods, what));
  std::shared_ptr<Program> p(new Program());
  for (size_t k = 0; k < methods.size(); ++k) {
    const std::string w = methods.size() == 1 ? what : what + ", method '" + methods[k].name + "'";
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Impl> im, make_impl(std::move(methods[k]), w, load_engines));
    im->aliases = aliases;
    if (k == 0) {
      p->impl_ = std::move(im);
    } else {
      std::unique_ptr<Program> other(new Program());
      other->impl_ = std::move(im);
      p->impl_->others.push_back(std::move(other));
    }
  }
  return std::shared_ptr<const Program>(std::move(p));
}

Expected<std::shared_ptr<const Program>> assemble_program(std::vector<program::CompiledMethod> methods,
                                                          const std::string& what, bool load_engines) {
  return Program::assemble(std::move(methods), what, load_engines);
}

Expected<std::shared_ptr<const Program>> Program::load(const std::string& path, bool load_engines) {
  if (!is_program_file(path)) {
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      std::fclose(f);
      return invalid_argument(path +
                              " is not a compiled program (.kiln); a .pt2 archive is compiled by kiln::compile "
                              "(kiln/compiler.h) or `kiln compile`");
    }
  }
  KILN_ASSIGN_OR_RETURN(std::vector<program::CompiledMethod> methods, program::load_program_methods(path));
  return assemble(std::move(methods), path, load_engines);
}

Status Program::save(const std::string& path) const {
  std::vector<program::MethodRef> refs{{impl_->method_name, &impl_->exec->program()}};
  for (const auto& o : impl_->others) refs.push_back({o->impl_->method_name, &o->impl_->exec->program()});
  for (const program::MethodRef& r : refs)
    for (const program::SegmentRecord& s : r.program->segments)
      if (s.kind == partition::SegmentKind::kEngine && s.plan.empty())
        return invalid_argument(path +
                                ": the program's engines were not built (it was compiled for its partition "
                                "only); compile it with engines to save it");
  return program::save_program(refs, path);
}

std::vector<std::string> Program::method_names() const {
  std::vector<std::string> names{impl_->method_name};
  for (const auto& o : impl_->others) names.push_back(o->impl_->method_name);
  return names;
}

const Program* Program::method(std::string_view name) const {
  if (name == impl_->method_name) return this;
  for (const auto& o : impl_->others)
    if (o->impl_->method_name == name) return o.get();
  return nullptr;
}

const std::vector<SegmentInfo>& Program::segments() const { return impl_->segments; }
const std::string& Program::device() const { return impl_->exec->program().device; }

namespace {

// The values a call with host inputs moves between the device the program's
// engines run on and the host: what a fallback segment (or an engine on the
// host) reads from device engines or device state, what a device engine reads
// from the host, and user outputs handed back in host memory. Empty for a
// program with no engine on a device of its own. Mirrors Executable::run: a
// value copied to the host for one reader stays there for later readers.
std::string describe_crossings(const program::CompiledProgram& cp) {
  const ir::Graph& g = cp.module.graph;
  auto on_device = [](const program::SegmentRecord& r) {
    if (r.kind != partition::SegmentKind::kEngine) return false;
    const engine::Backend* b = program::builtin_backends().find(r.backend);
    return b && b->device_memory();
  };
  bool any = false;
  for (const program::SegmentRecord& r : cp.segments) any = any || on_device(r);
  if (!any) return "";
  constexpr int kHost = -2, kState = -1;  // else: the device segment that made it
  std::vector<int> where(g.num_values(), kHost);
  for (size_t i = 0; i < cp.module.input_specs.size() && i < g.inputs().size(); ++i)
    if (cp.module.input_specs[i].kind == ir::InputSpec::Kind::kBuffer)
      where[static_cast<size_t>(g.inputs()[i]->id)] = kState;
  std::string lines;
  int count = 0;
  int64_t bytes = 0;
  auto cross = [&](const ir::Value& v, const std::string& how) {
    int64_t n = static_cast<int64_t>(dtype_size(v.type.dtype));
    for (const ir::Dim& d : v.type.sizes) n *= d.is_static() ? d.value : 1;
    lines += "  %" + v.name + " " + v.type.to_string() + " " + how + "\n";
    ++count;
    bytes += n;
  };
  auto from = [](int w) { return w == kState ? std::string("device state") : "segment " + std::to_string(w); };
  for (size_t si = 0; si < cp.segments.size(); ++si) {
    const program::SegmentRecord& r = cp.segments[si];
    const std::string seg = "segment " + std::to_string(si);
    if (r.kind != partition::SegmentKind::kEngine) {
      // Node by node, as Executable::run: ops that read only sizes leave
      // device tensors where they are, and a selection (nonzero, x[mask],
      // unique) of device tensors runs on the device, its row count (8 bytes) the only
      // thing that comes across.
      for (int ni : r.nodes) {
        const ir::Node& n = *g.nodes()[static_cast<size_t>(ni)];
        const runtime::DeviceFallback how = runtime::device_fallback(n);
        if (how == runtime::DeviceFallback::kSizes) continue;
        bool on_device = how == runtime::DeviceFallback::kSelect;
        for (const ir::Value* v : n.operands())
          on_device = on_device && (v->kind != ir::ValueKind::kTensor || where[static_cast<size_t>(v->id)] != kHost);
        if (on_device) {
          lines += "  the row count of %" + n.outputs[0]->name + " int64 device -> host, from " +
                   std::string(ir::op_target(n.op)) + " '" + n.name + "' (" + seg + "), which runs on the device\n";
          ++count;
          bytes += 8;
          for (const ir::Value* v : n.outputs) where[static_cast<size_t>(v->id)] = static_cast<int>(si);
          continue;
        }
        for (const ir::Value* v : n.operands()) {
          int& w = where[static_cast<size_t>(v->id)];
          if (v->kind != ir::ValueKind::kTensor || w == kHost) continue;
          cross(*v, "device -> host, from " + from(w) + " to " + seg + " (fallback)");
          w = kHost;
        }
        for (const ir::Value* v : n.outputs) where[static_cast<size_t>(v->id)] = kHost;
      }
      continue;
    }
    std::vector<int> reads = r.inputs;
    std::sort(reads.begin(), reads.end());
    reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
    const bool device = on_device(r);
    for (int id : reads) {
      const ir::Value& v = *g.value(static_cast<size_t>(id));
      int& w = where[static_cast<size_t>(id)];
      if (v.kind != ir::ValueKind::kTensor || (w == kHost) != device) continue;
      if (device) {
        cross(v, "host -> device, read by " + seg);
      } else {
        cross(v, "device -> host, from " + from(w) + " to " + seg + " (" +
                     (r.kind == partition::SegmentKind::kEngine ? r.backend : std::string("fallback")) + ")");
        w = kHost;
      }
    }
    for (int id : r.outputs) where[static_cast<size_t>(id)] = device ? static_cast<int>(si) : kHost;
  }
  for (size_t i = 0; i < cp.module.output_specs.size() && i < g.outputs().size(); ++i) {
    const ir::Value& v = *g.outputs()[i];
    const int w = where[static_cast<size_t>(v.id)];
    const ir::OutputSpec::Kind k = cp.module.output_specs[i].kind;
    if (k == ir::OutputSpec::Kind::kUserOutput && w != kHost && v.kind == ir::ValueKind::kTensor)
      cross(v, "device -> host, from " + from(w) + ", returned to the caller");
    else if (k == ir::OutputSpec::Kind::kBufferMutation && w == kHost && v.kind == ir::ValueKind::kTensor)
      cross(v, "host -> device, the new value of buffer '" + cp.module.output_specs[i].target + "'");
  }
  return "values that cross between the device and the host in a call with host inputs: " + std::to_string(count) +
         (count ? ", " + std::to_string(bytes) + " bytes\n" + lines : std::string("\n"));
}

}  // namespace

std::string Program::partition_report() const {
  const program::CompiledProgram& cp = impl_->exec->program();
  const ir::Graph& g = cp.module.graph;
  partition::Partition part;
  for (const program::SegmentRecord& r : cp.segments) {
    partition::Segment s;
    s.kind = r.kind;
    for (int n : r.nodes) s.nodes.push_back(g.nodes()[static_cast<size_t>(n)].get());
    for (int v : r.inputs) s.inputs.push_back(g.value(static_cast<size_t>(v)));
    for (int v : r.outputs) s.outputs.push_back(g.value(static_cast<size_t>(v)));
    s.reasons = r.reasons;
    part.segments.push_back(std::move(s));
  }
  return partition::describe_partition(cp.module, part) + describe_crossings(cp);
}

namespace {

// `s` inside a Graphviz double-quoted string.
std::string dot_quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// A tensor value's bytes: a number, or an expression of the sizes.
std::string value_bytes(const ir::Value& v) {
  int64_t known = static_cast<int64_t>(dtype_size(v.type.dtype));
  std::string symbolic;
  for (const ir::Dim& d : v.type.sizes) {
    if (d.is_static()) {
      known *= d.value;
    } else {
      symbolic += " * " + (d.expr->kind() == ir::SymExpr::Kind::kSymbol ? d.to_string() : "(" + d.to_string() + ")");
    }
  }
  return std::to_string(known) + symbolic + " bytes";
}

}  // namespace

std::string Program::partition_dot() const {
  const program::CompiledProgram& cp = impl_->exec->program();
  const ir::Graph& g = cp.module.graph;
  std::map<const ir::Node*, size_t> index;
  for (size_t i = 0; i < g.nodes().size(); ++i) index[g.nodes()[i].get()] = i;
  // Where each node runs: an engine's on its backend's device or the host; a
  // fallback node on the host, but the ones the runtime runs on the device
  // (Executable: selections of device values) there, and size reads nowhere
  // (they read no data).
  enum Place { kHost, kDevice, kSizes };
  std::vector<int> segment_of(g.nodes().size(), -1);
  std::vector<Place> place(g.nodes().size(), kHost);
  std::vector<bool> device_engine(cp.segments.size(), false);
  for (size_t si = 0; si < cp.segments.size(); ++si) {
    const program::SegmentRecord& r = cp.segments[si];
    const engine::Backend* b =
        r.kind == partition::SegmentKind::kEngine ? program::builtin_backends().find(r.backend) : nullptr;
    device_engine[si] = b && b->device_memory();
  }
  const bool any_device = std::find(device_engine.begin(), device_engine.end(), true) != device_engine.end();
  for (size_t si = 0; si < cp.segments.size(); ++si) {
    const program::SegmentRecord& r = cp.segments[si];
    for (int n : r.nodes) {
      segment_of[static_cast<size_t>(n)] = static_cast<int>(si);
      if (r.kind == partition::SegmentKind::kEngine) {
        place[static_cast<size_t>(n)] = device_engine[si] ? kDevice : kHost;
        continue;
      }
      const runtime::DeviceFallback how = runtime::device_fallback(*g.nodes()[static_cast<size_t>(n)]);
      place[static_cast<size_t>(n)] = how == runtime::DeviceFallback::kSizes                  ? kSizes
                                      : how == runtime::DeviceFallback::kSelect && any_device ? kDevice
                                                                                              : kHost;
    }
  }
  std::string out = "digraph " + dot_quoted(source()) + " {\n  label=" +
                    dot_quoted(source() + " for " + device() + " (parameters and constants not drawn)") +
                    ";\n  node [shape=box, style=filled, fillcolor=white, fontsize=10];\n";
  // Graph inputs drawn: user inputs (host memory) and buffers (kept on the device by a device program).
  std::vector<int> input_place(g.num_values(), -1);
  for (size_t i = 0; i < g.inputs().size() && i < cp.module.input_specs.size(); ++i) {
    const ir::InputSpec& s = cp.module.input_specs[i];
    if (s.kind != ir::InputSpec::Kind::kUserInput && s.kind != ir::InputSpec::Kind::kBuffer) continue;
    const ir::Value& v = *g.inputs()[i];
    const bool buffer = s.kind == ir::InputSpec::Kind::kBuffer;
    input_place[static_cast<size_t>(v.id)] = buffer && any_device ? kDevice : kHost;
    out += "  v" + std::to_string(v.id) + " [shape=ellipse, label=" +
           dot_quoted(std::string(buffer ? "buffer " : "input ") + "%" + v.name + "\n" + v.type.to_string()) + "];\n";
  }
  for (size_t si = 0; si < cp.segments.size(); ++si) {
    const program::SegmentRecord& r = cp.segments[si];
    const bool engine = r.kind == partition::SegmentKind::kEngine;
    out += "  subgraph cluster_" + std::to_string(si) + " {\n    label=" +
           dot_quoted("segment " + std::to_string(si) + ": " +
                      (engine ? "engine (" + r.backend + ")" : std::string("fallback"))) +
           ";\n    style=filled;\n    fillcolor=" +
           (engine ? (device_engine[si] ? "\"#dbe8fb\"" : "\"#e3f1e3\"") : "\"#fbe0dd\"") + ";\n";
    for (size_t k = 0; k < r.nodes.size(); ++k) {
      const ir::Node& n = *g.nodes()[static_cast<size_t>(r.nodes[k])];
      std::string label = n.name + "\n" + std::string(ir::op_target(n.op));
      for (const ir::Value* v : n.outputs)
        if (v->kind == ir::ValueKind::kTensor) label += "\n" + v->type.to_string();
      std::string attrs;
      if (!engine && k < r.reasons.size() && !r.reasons[k].empty()) {
        label += "\nwhy: " + r.reasons[k];
        if (place[static_cast<size_t>(r.nodes[k])] == kDevice) label += "\n(runs on the device)";
        attrs = ", fillcolor=\"#f4b6ae\", tooltip=" + dot_quoted(r.reasons[k]);
      }
      out += "    n" + std::to_string(r.nodes[k]) + " [label=" + dot_quoted(label) + attrs + "];\n";
    }
    out += "  }\n";
  }
  // An edge for value `v` from `from` (in segment `from_segment`, running at
  // `from_place`) to `to`: between segments it carries the value, its type
  // and bytes; red where the value moves between the device and the host.
  auto edge = [&](const std::string& from, int from_segment, int from_place, const std::string& to, int to_segment,
                  int to_place, const ir::Value& v) {
    std::string attrs;
    const bool moves = from_place != to_place && from_place != kSizes && to_place != kSizes;
    if (v.kind == ir::ValueKind::kTensor && (from_segment != to_segment || moves)) {
      attrs = " [label=" + dot_quoted("%" + v.name + " " + v.type.to_string() + "\n" + value_bytes(v));
      if (moves) attrs += ", color=red, fontcolor=red, penwidth=2";
      attrs += "]";
    }
    out += "  " + from + " -> " + to + attrs + ";\n";
  };
  auto source_of = [&](const ir::Value& v, std::string& name, int& segment, int& at) {
    if (v.producer) {
      const size_t p = index.at(v.producer);
      name = "n" + std::to_string(p);
      segment = segment_of[p];
      at = place[p];
      return true;
    }
    if (input_place[static_cast<size_t>(v.id)] < 0) return false;  // a parameter or constant, not drawn
    name = "v" + std::to_string(v.id);
    segment = -1;
    at = input_place[static_cast<size_t>(v.id)];
    return true;
  };
  // Each value a node reads, once per reader.
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    std::set<const ir::Value*> seen;
    for (const ir::Value* v : g.nodes()[i]->operands()) {
      std::string from;
      int from_segment = -1, from_place = kHost;
      if (!seen.insert(v).second || !source_of(*v, from, from_segment, from_place)) continue;
      edge(from, from_segment, from_place, "n" + std::to_string(i), segment_of[i], place[i], *v);
    }
  }
  // Outputs, returned in host memory (new values of buffers stay where buffers are).
  for (size_t i = 0; i < g.outputs().size() && i < cp.module.output_specs.size(); ++i) {
    const ir::OutputSpec& s = cp.module.output_specs[i];
    const ir::Value& v = *g.outputs()[i];
    const bool buffer = s.kind == ir::OutputSpec::Kind::kBufferMutation;
    const std::string what = s.kind == ir::OutputSpec::Kind::kUserOutput ? "output " + std::to_string(i)
                             : buffer                                    ? "buffer " + s.target
                                                                         : "input " + s.target;
    out +=
        "  o" + std::to_string(i) + " [shape=ellipse, label=" + dot_quoted(what + "\n" + v.type.to_string()) + "];\n";
    std::string from;
    int from_segment = -1, from_place = kHost;
    if (source_of(v, from, from_segment, from_place))
      edge(from, from_segment, from_place, "o" + std::to_string(i), -2, buffer && any_device ? kDevice : kHost, v);
  }
  return out + "}\n";
}

const std::vector<TensorSpec>& Program::inputs() const { return impl_->inputs; }
const std::vector<TensorSpec>& Program::outputs() const { return impl_->outputs; }
const std::vector<TensorSpec>& Program::buffers() const { return impl_->buffers; }
const std::vector<TensorSpec>& Program::weights() const { return impl_->weights; }
const std::vector<SymbolInfo>& Program::symbols() const { return impl_->symbols; }
const std::vector<std::string>& Program::mutated_buffers() const { return impl_->mutated; }
const std::vector<std::string>& Program::mutated_inputs() const { return impl_->mutated_inputs; }
bool Program::buffer_updated_in_place(std::string_view fqn) const {
  fqn = canonical_name(fqn);
  for (const program::BufferWrite& w : impl_->exec->buffer_writes())
    if (w.buffer == fqn) return w.in_place;
  return false;
}
const std::map<std::string, std::string, std::less<>>& Program::aliases() const { return impl_->aliases; }
std::string_view Program::canonical_name(std::string_view name) const {
  auto it = impl_->aliases.find(name);
  return it == impl_->aliases.end() ? name : std::string_view(it->second);
}
std::vector<std::string> Program::names_of(std::string_view name) const {
  const std::string_view kept = canonical_name(name);
  std::vector<std::string> names{std::string(kept)};
  for (const auto& [alias, target] : impl_->aliases)
    if (target == kept) names.push_back(alias);
  return names;
}
std::string Program::dialect() const { return impl_->module().dialect; }
std::string Program::torch_version() const { return impl_->module().torch_version; }
const std::string& Program::source() const { return impl_->module().source; }

int64_t Program::weight_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, t] : impl_->module().weights) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

std::string Program::ir_text() const { return ir::print_graph(impl_->module().graph); }

Status device_ready(std::string_view device) {
  const engine::Backend* backend = program::builtin_backends().find(std::string(device));
  if (backend == nullptr) return invalid_argument("unknown device '" + std::string(device) + "'");
  Status s = backend->ready();
  if (s.is_ok()) return s;
  return Status(s.code(), "device '" + std::string(device) + "' cannot be used on this machine: " + s.message());
}

std::map<std::string, int> Program::op_histogram() const {
  std::map<std::string, int> h;
  for (const auto& n : impl_->module().graph.nodes()) ++h[std::string(ir::op_target(n->op))];
  return h;
}

}  // namespace kiln
