// The front half of the compile stage: a .pt2 read once, then per shape
// profile (and per padded batch bucket) a copy of the module narrowed to its
// ranges, lowered, and handed to compile_module.
#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include "backends/cpu/kernel.h"
#include "compiler/compiler.h"
#include "frontend/pt2_loader.h"
#include "lowering/pass.h"
#include "lowering/pipeline.h"

namespace kiln::compiler {

namespace {

std::string ms_since(std::chrono::steady_clock::time_point t) {
  return std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count());
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

// One profile (`options.compile.shapes`) of the module read from `path`
// (`m`, a copy of its own), lowered, partitioned and built.
Expected<program::CompiledProgram> compile_profile(ir::Module m, const std::string& path, const LoadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  // The profile first: a dimension it fixes (min == max) is static from here
  // on, so lowering folds the sizes computed from it and static backends take it.
  const CompileOptions& co = options.compile;
  KILN_TRY_CTX(apply_shape_profiles(m, co.shapes), path);
  KILN_TRY_CTX(lowering::specialize_symbols(m), path);
  std::string slow;  // passes that took a noticeable part of it
  lowering::PipelineOptions po;
  po.disabled = co.disabled_passes;
  po.print_after = options.print_after;
  po.dump = options.dump;
  po.timed = [&slow](const std::string& pass, double ms) {
    if (ms >= 10) slow += (slow.empty() ? "" : ", ") + pass + " " + std::to_string(static_cast<int>(ms)) + " ms";
  };
  po.keep_ops = options.compile.fallback_ops;
  KILN_TRY_CTX(lowering::run_pipeline(m, lowering::default_pipeline(), po), path);
  if (options.compile.progress)
    options.compile.progress("lowered in " + ms_since(start) + " ms" + (slow.empty() ? "" : " (" + slow + ")"));

  // Every op must have a kernel (fallback runs on them): say which ones do not, with their nodes.
  std::string missing;
  std::set<ir::OpKind> seen;
  for (const auto& n : m.graph.nodes())
    if (!cpu::cpu_kernels().find(n->op) && seen.insert(n->op).second)
      missing += (missing.empty() ? "" : ", ") + std::string(ir::op_target(n->op)) + " (node '" + n->name + "')";
  if (!missing.empty()) return unsupported(path + ": no CPU kernel for " + missing);
  CompileSettings cs;
  cs.device = co.device;
  cs.precision = co.precision;
  if (!co.cache_dir.empty()) cs.cache = program::engine_cache_for(co.cache_dir);
  cs.partition.min_block_size = co.min_block_size;
  cs.partition.fallback_ops = co.fallback_ops;
  cs.partition.require_full_compilation = co.require_full_compilation;
  cs.progress = co.progress;
  cs.allow_fallback = co.allow_fallback;
  cs.build_engines = co.build_engines;
  cs.print_after = options.print_after;
  cs.dump = options.dump;
  cs.disabled_passes = co.disabled_passes;
  if (!co.build_engines) cs.cache.reset();  // nothing is built, nothing is stored
  auto compiled = compile_module(std::move(m), cs);
  if (!compiled) return std::move(compiled).status().with_context(path);
  return compiled;
}


// The most sizes one range is compiled for as padded batch buckets.
constexpr int64_t kMaxBucketSize = 4096;

// How one profile is compiled as padded batch buckets (CompileOptions::batch_buckets).
struct BucketPlan {
  program::PaddedBatch batch;              // size set per bucket
  std::vector<int64_t> sizes;              // ascending
  std::vector<ShapeProfile> fixed_shapes;  // the profile's shapes for inputs that the symbol does not size
  std::vector<std::pair<std::string, std::vector<ir::Dim>>> row_inputs;  // inputs the symbol sizes, their dims
};

// The padded batch buckets for compiling the module read from `path` with
// one profile (`options.compile.shapes`), or nullopt to compile the profile
// as it is.
Expected<std::optional<BucketPlan>> plan_buckets(const ir::Module& read, const std::string& path,
                                                 const LoadOptions& options) {
  const CompileOptions& co = options.compile;
  if (co.batch_buckets == BatchBuckets::kOff) return std::optional<BucketPlan>();
  const bool forced = co.batch_buckets == BatchBuckets::kOn;
  if (!forced) {
    const engine::Backend* backend = program::builtin_backends().find(co.device);
    // Backends that take sizes known at run time serve the range as it is,
    // unless buckets are faster there; "null" builds nothing.
    if (backend == nullptr || (backend->target().symbolic_dims && !backend->target().prefers_batch_buckets) ||
        backend->name() == "null")
      return std::optional<BucketPlan>();
  }
  ir::Module m = ir::clone_module(read);
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
  po.disabled = co.disabled_passes;
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

// Each pass CompileOptions::disabled_passes names is a lowering pass a
// program can do without or one of the device backend's network passes.
Status check_disabled_passes(const CompileOptions& co) {
  const engine::Backend* backend = program::builtin_backends().find(co.device);
  if (backend == nullptr) return Status::ok();  // compile_module names the device
  for (const std::string& name : co.disabled_passes) {
    const auto& lowering = lowering::default_pipeline();
    auto pass = std::find_if(lowering.begin(), lowering.end(), [&](const auto& p) { return p.name == name; });
    if (pass != lowering.end()) {
      if (pass->required)
        return invalid_argument("pass '" + name + "' cannot be disabled: a program needs it (" + pass->description +
                                ")");
      continue;
    }
    const auto& network = backend->target().passes;
    if (std::any_of(network.begin(), network.end(), [&](const auto& p) { return p.name == name; })) continue;
    std::set<std::string> optional;
    for (const auto& p : lowering)
      if (!p.required) optional.insert(p.name);
    std::string known;
    for (const std::string& n : optional) known += (known.empty() ? "" : ", ") + n;
    std::string own;
    for (const auto& p : network) own += (own.empty() ? "" : ", ") + p.name;
    return invalid_argument("no pass '" + name + "' to disable (lowering: " + known + "; " + co.device +
                            " network passes: " + (own.empty() ? "none" : own) + ")");
  }
  return Status::ok();
}

}  // namespace

Status compile_method_file(const std::string& name, const std::string& path, const LoadOptions& options,
                           std::vector<program::CompiledMethod>& out) {
  KILN_TRY(check_disabled_passes(options.compile));
  KILN_ASSIGN_OR_RETURN(std::vector<std::vector<ShapeProfile>> profiles, group_profiles(options.compile.shapes));
  // Read once; each profile and bucket lowers a copy of its own.
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(const ir::Module read, frontend::load_pt2(path));
  if (options.compile.progress) options.compile.progress("read in " + ms_since(start) + " ms");
  size_t method = 0;
  for (size_t k = 0; k < profiles.size(); ++k) {
    LoadOptions o = options;
    o.compile.shapes = profiles[k];
    const std::string label = "profile " + std::to_string(k);
    if (profiles.size() > 1 && options.compile.progress)
      o.compile.progress = [&options, label](const std::string& m) { options.compile.progress(label + ": " + m); };
    auto plan = plan_buckets(read, path, o);
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
      const std::string method_name = program::profile_method_name(name, method++);
      std::string what = label + " (method " + method_name + ")";
      if (size) {
        ob.compile.shapes = bucket_shapes(**plan, *size);
        what = label + ", bucket " + std::to_string(*size) + " (method " + method_name + ")";
        if (options.compile.progress)
          ob.compile.progress = [&options, what](const std::string& m) { options.compile.progress(what + ": " + m); };
      }
      auto compiled = compile_profile(ir::clone_module(read), path, ob);
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

}  // namespace kiln::compiler
