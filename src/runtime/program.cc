#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include "backends/cpu/kernel.h"
#include "frontend/pt2_loader.h"
#include "ir/graph.h"
#include "kiln/kiln.h"
#include "lowering/pass.h"
#include "lowering/pipeline.h"
#include "partition/partition.h"
#include "program/compiled_program.h"
#include "program/kiln_file.h"
#include "runtime/executable.h"
#include "runtime/interpreter.h"
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

// Narrows (or widens) the ranges of the program's dynamic dimensions to the
// given profiles; a static dimension must equal min, opt and max.
Status apply_shape_profiles(ir::Module& m, const std::vector<ShapeProfile>& shapes) {
  std::set<std::string> seen;
  for (const ShapeProfile& p : shapes) {
    if (!seen.insert(p.input).second)
      return unsupported("--shape " + p.input + ": one profile per input is supported (it was given twice)");
    const ir::Value* input = nullptr;
    for (size_t i = 0; i < m.input_specs.size(); ++i)
      if (m.input_specs[i].kind == ir::InputSpec::Kind::kUserInput && m.graph.inputs()[i]->name == p.input)
        input = m.graph.inputs()[i];
    if (!input) {
      std::string names;
      for (size_t i = 0; i < m.input_specs.size(); ++i)
        if (m.input_specs[i].kind == ir::InputSpec::Kind::kUserInput)
          names += (names.empty() ? "" : ", ") + m.graph.inputs()[i]->name;
      return invalid_argument("--shape " + p.input + ": the program has no input of that name (inputs: " + names + ")");
    }
    const auto& dims = input->type.sizes;
    if (p.min.size() != dims.size() || p.opt.size() != dims.size() || p.max.size() != dims.size())
      return invalid_argument("--shape " + p.input + ": the input has " + std::to_string(dims.size()) +
                              " dimensions, the profile gives " + std::to_string(p.min.size()) + "/" +
                              std::to_string(p.opt.size()) + "/" + std::to_string(p.max.size()));
    for (size_t d = 0; d < dims.size(); ++d) {
      const std::string where = "--shape " + p.input + ", dimension " + std::to_string(d);
      if (!(p.min[d] <= p.opt[d] && p.opt[d] <= p.max[d]) || p.min[d] < 0)
        return invalid_argument(where + ": needs 0 <= min <= opt <= max, got " + std::to_string(p.min[d]) + ", " +
                                std::to_string(p.opt[d]) + ", " + std::to_string(p.max[d]));
      if (dims[d].is_static()) {
        if (p.min[d] != dims[d].value || p.max[d] != dims[d].value)
          return invalid_argument(where + " is static (" + std::to_string(dims[d].value) +
                                  ") in the program; its range must be exactly that, got " + std::to_string(p.min[d]) +
                                  ".." + std::to_string(p.max[d]));
        continue;
      }
      if (dims[d].expr->kind() != ir::SymExpr::Kind::kSymbol)
        return unsupported(where + " is the expression " + dims[d].expr->to_string() +
                           "; give ranges for the dimensions that are plain symbols");
      const std::string& sym = dims[d].expr->name();
      auto [it, inserted] = m.symbols.try_emplace(sym, ir::SymbolRange{p.min[d], p.max[d], p.opt[d]});
      if (!inserted) it->second = {p.min[d], p.max[d], p.opt[d]};
    }
  }
  return Status::ok();
}

// The profiles --shape describes: the k-th range given for an input belongs
// to profile k; an input given once keeps its range in every profile.
Expected<std::vector<std::vector<ShapeProfile>>> group_profiles(const std::vector<ShapeProfile>& shapes) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const ShapeProfile*>> by_input;
  for (const ShapeProfile& s : shapes) {
    if (!by_input.count(s.input)) order.push_back(s.input);
    by_input[s.input].push_back(&s);
  }
  size_t count = 1;
  for (const auto& [name, list] : by_input) count = std::max(count, list.size());
  for (const auto& [name, list] : by_input)
    if (list.size() != 1 && list.size() != count)
      return invalid_argument("--shape " + name + " is given " + std::to_string(list.size()) +
                              " times and another input " + std::to_string(count) +
                              " times: give an input's range once per profile, or once for every profile");
  std::vector<std::vector<ShapeProfile>> profiles(count);
  for (size_t k = 0; k < count; ++k)
    for (const std::string& name : order) {
      const auto& list = by_input.at(name);
      profiles[k].push_back(*list[list.size() == 1 ? 0 : k]);
    }
  return profiles;
}

Expected<program::CompiledProgram> compile_pt2(const std::string& path, const LoadOptions& options) {
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t) {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count());
  };
  auto start = Clock::now();
  KILN_ASSIGN_OR_RETURN(ir::Module m, frontend::load_pt2(path));
  const std::string read_ms = ms_since(start);
  start = Clock::now();
  // The profile first: a dimension it fixes (min == max) is static from here
  // on, so lowering folds the sizes computed from it and static backends take it.
  const CompileOptions& co = options.compile;
  KILN_TRY_CTX(apply_shape_profiles(m, co.shapes), path);
  KILN_TRY_CTX(lowering::specialize_symbols(m), path);
  std::string slow;  // passes that took a noticeable part of it
  lowering::PipelineOptions po{options.print_after, options.dump, [&slow](const std::string& pass, double ms) {
                                 if (ms >= 10)
                                   slow += (slow.empty() ? "" : ", ") + pass + " " +
                                           std::to_string(static_cast<int>(ms)) + " ms";
                               }};
  po.keep_ops = options.compile.fallback_ops;
  KILN_TRY_CTX(lowering::run_pipeline(m, lowering::default_pipeline(), po), path);
  if (options.compile.progress)
    options.compile.progress("read in " + read_ms + " ms, lowered in " + ms_since(start) + " ms" +
                             (slow.empty() ? "" : " (" + slow + ")"));

  // Every op must have a kernel (fallback runs on them): say which ones do not, with their nodes.
  auto missing = runtime::nodes_without_kernel(m.graph, cpu::cpu_kernels());
  if (!missing.empty()) {
    std::string list;
    std::set<std::string> seen;
    for (const ir::Node* n : missing)
      if (seen.insert(std::string(ir::op_target(n->op))).second)
        list += (list.empty() ? "" : ", ") + std::string(ir::op_target(n->op)) + " (node '" + n->name + "')";
    return unsupported(path + ": no CPU kernel for " + list);
  }
  program::CompileSettings cs;
  cs.device = co.device;
  cs.precision = co.precision;
  if (!co.cache_dir.empty()) cs.cache = program::engine_cache_for(co.cache_dir);
  cs.partition.min_block_size = co.min_block_size;
  cs.partition.fallback_ops = co.fallback_ops;
  cs.partition.require_full_compilation = co.require_full_compilation;
  cs.progress = co.progress;
  auto compiled = program::compile_module(std::move(m), cs);
  if (!compiled) return std::move(compiled).status().with_context(path);
  return compiled;
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
  std::shared_ptr<Program> p(new Program());
  for (size_t k = 0; k < methods.size(); ++k) {
    const std::string w = methods.size() == 1 ? what : what + ", method '" + methods[k].name + "'";
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Impl> im, make_impl(std::move(methods[k]), w, load_engines));
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

namespace {

// The most sizes one range is compiled for as padded batch buckets.
constexpr int64_t kMaxBucketSize = 4096;

// How one profile is compiled as padded batch buckets (CompileOptions::batch_buckets).
struct BucketPlan {
  program::PaddedBatch batch;              // size set per bucket
  std::vector<int64_t> sizes;              // ascending
  std::vector<ShapeProfile> fixed_shapes;  // the profile's shapes for inputs that the symbol does not size
  std::vector<std::pair<std::string, std::vector<ir::Dim>>> row_inputs;  // inputs the symbol sizes, their dims
};

// The padded batch buckets for compiling the .pt2 at `path` with one profile
// (`options.compile.shapes`), or nullopt to compile the profile as it is.
Expected<std::optional<BucketPlan>> plan_buckets(const std::string& path, const LoadOptions& options) {
  const CompileOptions& co = options.compile;
  if (co.batch_buckets == "off") return std::optional<BucketPlan>();
  const bool forced = co.batch_buckets == "on";
  if (!forced) {
    const engine::Backend* backend = program::builtin_backends().find(co.device);
    // Backends that take sizes known at run time serve the range as it is,
    // unless buckets are faster there; "null" builds nothing.
    if (backend == nullptr || (backend->target().symbolic_dims && !backend->target().prefers_batch_buckets) ||
        backend->name() == "null")
      return std::optional<BucketPlan>();
  }
  KILN_ASSIGN_OR_RETURN(ir::Module m, frontend::load_pt2(path));
  KILN_TRY_CTX(apply_shape_profiles(m, co.shapes), path);
  KILN_TRY_CTX(lowering::specialize_symbols(m), path);
  // The one symbol left free that sizes a user input.
  std::set<std::string> free;
  for (size_t i = 0; i < m.input_specs.size(); ++i) {
    if (m.input_specs[i].kind != ir::InputSpec::Kind::kUserInput) continue;
    for (const ir::Dim& d : m.graph.inputs()[i]->type.sizes)
      if (!d.is_static()) {
        std::vector<std::string> names;
        d.expr->collect_symbols(names);
        free.insert(names.begin(), names.end());
      }
  }
  auto decline = [&](const std::string& why) -> Expected<std::optional<BucketPlan>> {
    if (forced) return unsupported(path + ": --batch-buckets on: " + why);
    if (co.progress) co.progress("batch buckets not used: " + why);
    return std::optional<BucketPlan>();
  };
  if (free.empty()) return std::optional<BucketPlan>();  // every size is fixed: nothing to pad
  if (free.size() > 1) {
    std::string names;
    for (const std::string& n : free) names += (names.empty() ? "" : ", ") + n;
    return decline("the inputs have " + std::to_string(free.size()) + " dynamic sizes (" + names +
                   "); buckets take one (fix the others with --shape min = opt = max)");
  }
  const std::string symbol = *free.begin();
  auto range = m.symbols.find(symbol);
  if (range == m.symbols.end()) return decline("size " + symbol + " has no range");
  const ir::SymbolRange r = range->second;
  if (r.min < 1 || r.max > kMaxBucketSize)
    return decline("size " + symbol + " ranges over [" + std::to_string(r.min) + ", " + std::to_string(r.max) +
                   "]; buckets need 1 <= min and max <= " + std::to_string(kMaxBucketSize) +
                   " (give the range with --shape)");
  BucketPlan plan;
  plan.batch.symbol = symbol;
  plan.batch.min = r.min;
  plan.batch.max = r.max;
  std::set<std::string> row_names;
  for (size_t i = 0, u = 0; i < m.input_specs.size(); ++i) {
    if (m.input_specs[i].kind != ir::InputSpec::Kind::kUserInput) continue;
    const ir::Value* v = m.graph.inputs()[i];
    bool has = false;
    for (const ir::Dim& d : v->type.sizes) has = has || !d.is_static();
    if (has) {
      plan.batch.inputs.push_back(static_cast<int>(u));
      plan.row_inputs.emplace_back(v->name, v->type.sizes);
      row_names.insert(v->name);
    }
    ++u;
  }
  for (const ShapeProfile& p : co.shapes)
    if (!row_names.count(p.input)) plan.fixed_shapes.push_back(p);

  // The proof, on the program as lowered for the whole range.
  lowering::PipelineOptions po;
  po.keep_ops = co.fallback_ops;
  KILN_TRY_CTX(lowering::run_pipeline(m, lowering::default_pipeline(), po), path);
  if (Status s = lowering::check_batch_separable(m, symbol, &plan.batch.output_factors); !s)
    return decline(s.message());

  std::set<int64_t> sizes{r.min, r.max, std::clamp(r.opt, r.min, r.max)};
  for (int64_t p = 1; p <= r.max; p *= 2)
    if (p >= r.min) sizes.insert(p);
  plan.sizes.assign(sizes.begin(), sizes.end());
  return std::optional<BucketPlan>(std::move(plan));
}

// The shapes of bucket `size`: the profile's fixed shapes, and every input
// the symbol sizes at that size exactly.
std::vector<ShapeProfile> bucket_shapes(const BucketPlan& plan, int64_t size) {
  std::vector<ShapeProfile> shapes = plan.fixed_shapes;
  for (const auto& [name, dims] : plan.row_inputs) {
    ShapeProfile p;
    p.input = name;
    for (const ir::Dim& d : dims) p.min.push_back(d.is_static() ? d.value : size);
    p.opt = p.max = p.min;
    shapes.push_back(std::move(p));
  }
  return shapes;
}

// Method `name` from the .pt2 at `path`, compiled once per shape profile:
// `name`, then `name@1`, `name@2`, ... (see CompileOptions::shapes); a
// profile compiled as padded batch buckets takes one method per bucket size.
Status compile_profiles(const std::string& name, const std::string& path, const LoadOptions& options,
                        std::vector<program::CompiledMethod>& out) {
  KILN_ASSIGN_OR_RETURN(std::vector<std::vector<ShapeProfile>> profiles, group_profiles(options.compile.shapes));
  size_t method = 0;
  for (size_t k = 0; k < profiles.size(); ++k) {
    LoadOptions o = options;
    o.compile.shapes = profiles[k];
    const std::string label = "profile " + std::to_string(k);
    if (profiles.size() > 1 && options.compile.progress)
      o.compile.progress = [&options, label](const std::string& m) { options.compile.progress(label + ": " + m); };
    auto plan = plan_buckets(path, o);
    if (!plan) return profiles.size() == 1 ? plan.status() : plan.status().with_context(label);
    std::vector<std::optional<int64_t>> sizes{std::nullopt};
    if (*plan) {
      sizes.assign((*plan)->sizes.begin(), (*plan)->sizes.end());
      if (o.compile.progress) {
        std::string list;
        for (int64_t b : (*plan)->sizes) list += (list.empty() ? "" : ", ") + std::to_string(b);
        o.compile.progress("size " + (*plan)->batch.symbol + " in [" + std::to_string((*plan)->batch.min) + ", " +
                           std::to_string((*plan)->batch.max) + "] as padded batch buckets " + list);
      }
    }
    for (const std::optional<int64_t>& size : sizes) {
      LoadOptions ob = o;
      const std::string method_name = profile_method_name(name, method++);
      std::string what = label + " (method " + method_name + ")";
      if (size) {
        ob.compile.shapes = bucket_shapes(**plan, *size);
        what = label + ", bucket " + std::to_string(*size) + " (method " + method_name + ")";
        if (options.compile.progress)
          ob.compile.progress = [&options, what](const std::string& m) { options.compile.progress(what + ": " + m); };
      }
      auto compiled = compile_pt2(path, ob);
      if (!compiled) return profiles.size() == 1 && !size ? compiled.status() : compiled.status().with_context(what);
      program::CompiledMethod cm;
      cm.name = method_name;
      cm.program = std::move(*compiled);
      if (size) {
        cm.program.padded = (*plan)->batch;
        cm.program.padded->size = *size;
      }
      out.push_back(std::move(cm));
    }
  }
  return Status::ok();
}

}  // namespace

Expected<std::shared_ptr<const Program>> Program::load(const std::string& path, const LoadOptions& options) {
  std::vector<program::CompiledMethod> methods;
  if (program::looks_like_program_file(path)) {
    KILN_ASSIGN_OR_RETURN(methods, program::load_program_methods(path));
  } else {
    KILN_TRY(compile_profiles("forward", path, options, methods));
  }
  return assemble(std::move(methods), path, options.load_engines);
}

Expected<std::shared_ptr<const Program>> Program::load_methods(const std::vector<MethodFile>& files,
                                                               const LoadOptions& options) {
  if (files.empty()) return invalid_argument("give at least one method");
  std::vector<program::CompiledMethod> methods;
  std::string what;
  for (const MethodFile& f : files) {
    if (f.name.empty()) return invalid_argument(f.path + ": the method needs a name");
    if (f.name.find('@') != std::string::npos)
      return invalid_argument("method name '" + f.name + "': '@' is kept for shape profiles (NAME@k)");
    for (const program::CompiledMethod& m : methods)
      if (m.name == f.name) return invalid_argument("method '" + f.name + "' is given twice");
    if (program::looks_like_program_file(f.path))
      return invalid_argument(f.path + ": methods are compiled from .pt2 files (this is a compiled .kiln program)");
    KILN_TRY(compile_profiles(f.name, f.path, options, methods));
    what += (what.empty() ? "" : " + ") + f.path;
  }
  return assemble(std::move(methods), what, options.load_engines);
}

Status Program::save(const std::string& path) const {
  std::vector<program::MethodRef> refs{{impl_->method_name, &impl_->exec->program()}};
  for (const auto& o : impl_->others) refs.push_back({o->impl_->method_name, &o->impl_->exec->program()});
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
      // device tensors where they are, and a selection (nonzero, x[mask]) of
      // device tensors runs on the device, its row count (8 bytes) the only
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
          where[static_cast<size_t>(n.outputs[0]->id)] = static_cast<int>(si);
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

const std::vector<TensorSpec>& Program::inputs() const { return impl_->inputs; }
const std::vector<TensorSpec>& Program::outputs() const { return impl_->outputs; }
const std::vector<TensorSpec>& Program::buffers() const { return impl_->buffers; }
const std::vector<TensorSpec>& Program::weights() const { return impl_->weights; }
const std::vector<SymbolInfo>& Program::symbols() const { return impl_->symbols; }
const std::vector<std::string>& Program::mutated_buffers() const { return impl_->mutated; }
const std::vector<std::string>& Program::mutated_inputs() const { return impl_->mutated_inputs; }
bool Program::buffer_updated_in_place(std::string_view fqn) const {
  for (const program::BufferWrite& w : impl_->exec->buffer_writes())
    if (w.buffer == fqn) return w.in_place;
  return false;
}
std::string Program::dialect() const { return impl_->module().dialect; }
std::string Program::torch_version() const { return impl_->module().torch_version; }
const std::string& Program::source() const { return impl_->module().source; }
const ir::Module& Program::module() const { return impl_->module(); }

std::map<std::string, int> Program::op_histogram() const {
  std::map<std::string, int> h;
  for (const auto& n : impl_->module().graph.nodes()) ++h[std::string(ir::op_target(n->op))];
  return h;
}

}  // namespace kiln
