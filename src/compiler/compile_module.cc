#include <algorithm>
#include <chrono>
#include <map>
#include <set>

// The back half of the compile stage: a lowered module partitioned by what
// the device's backend takes, each engine segment converted and built (or
// taken from the engine cache).
#include "compiler/compiler.h"
#include "convert/registry.h"
#include "engine/plan.h"
#include "ir/printer.h"

namespace kiln::compiler {

using program::CompiledProgram;
using program::SegmentRecord;

namespace {

// Drops parameters and constants that no node reads any more (after folding),
// so that a program stores each weight it uses once and nothing else.
void drop_unused_weights(ir::Module& m) {
  std::set<const ir::Value*> used;
  for (const auto& n : m.graph.nodes())
    for (const ir::Value* v : n->operands()) used.insert(v);
  for (const ir::Value* v : m.graph.outputs()) used.insert(v);
  std::vector<ir::Value*> inputs;
  std::vector<ir::InputSpec> specs;
  std::set<std::string> keep;
  for (size_t i = 0; i < m.graph.inputs().size(); ++i) {
    const ir::InputSpec& s = m.input_specs[i];
    const bool weight = s.kind == ir::InputSpec::Kind::kParameter || s.kind == ir::InputSpec::Kind::kConstant;
    if (weight && !used.count(m.graph.inputs()[i])) continue;
    inputs.push_back(m.graph.inputs()[i]);
    specs.push_back(s);
    if (s.kind != ir::InputSpec::Kind::kUserInput) keep.insert(s.target);
  }
  m.graph.inputs() = std::move(inputs);
  m.input_specs = std::move(specs);
  for (auto it = m.weights.begin(); it != m.weights.end();)
    it = keep.count(it->first) ? std::next(it) : m.weights.erase(it);
}

// Renumbers `m.graph`'s values densely, keeping the signature; compiled
// programs and .kiln files index values by id.
Status canonicalize_module(ir::Module& m) { return m.graph.compact(); }

// The first symbol with no finite maximum (m.symbols) that sizes a value
// segment `s` reads or computes, or "".
std::string unbounded_symbol(const ir::Module& m, const partition::Segment& s) {
  auto check = [&](const ir::Value* v) -> std::string {
    std::vector<std::string> names;
    for (const ir::Dim& d : v->type.sizes)
      if (!d.is_static()) d.expr->collect_symbols(names);
    if (v->sym) v->sym->collect_symbols(names);
    for (const std::string& n : names)
      if (auto it = m.symbols.find(n); it == m.symbols.end() || it->second.max == INT64_MAX) return n;
    return "";
  };
  for (const ir::Value* v : s.inputs)
    if (std::string n = check(v); !n.empty()) return n;
  for (const ir::Node* n : s.nodes)
    for (const ir::Value* v : n->outputs)
      if (std::string u = check(v); !u.empty()) return u;
  return "";
}

// What to give for a dynamic size with no finite maximum: each user input it
// sizes, and a --shape range for the first (min as exported, opt and max
// examples), e.g. "; input 'input_ids' [1, s0] has no maximum on dimension
// 1: give one, e.g. --shape input_ids:1x2,1x128,1x2048".
std::string range_hint(const ir::Module& m) {
  std::string hint;
  for (const auto& [sym, range] : m.symbols) {
    if (range.max != INT64_MAX) continue;
    for (size_t i = 0; i < m.input_specs.size(); ++i) {
      if (m.input_specs[i].kind != ir::InputSpec::Kind::kUserInput) continue;
      const ir::Value* v = m.graph.inputs()[i];
      int dim = -1;
      for (size_t d = 0; d < v->type.sizes.size() && dim < 0; ++d)
        if (!v->type.sizes[d].is_static() && v->type.sizes[d].to_string() == sym) dim = static_cast<int>(d);
      if (dim < 0) continue;
      const int64_t lo = std::max<int64_t>(range.min, 1);
      const int64_t opt = std::max<int64_t>(lo, 128), hi = std::max<int64_t>(opt, 2048);
      auto shape = [&](int64_t at) {
        std::string t;
        for (size_t d = 0; d < v->type.sizes.size(); ++d) {
          const ir::Dim& s = v->type.sizes[d];
          const int64_t n = static_cast<int>(d) == dim ? at : s.is_static() ? s.value : lo;
          t += (t.empty() ? "" : "x") + std::to_string(n);
        }
        return t;
      };
      hint += "; input '" + v->name + "' " + v->type.to_string() + " has no maximum on dimension " +
              std::to_string(dim) + " (" + sym + "): give a range, e.g. --shape " + v->name + ":" + shape(lo) + "," +
              shape(opt) + "," + shape(hi);
      return hint;
    }
  }
  return hint;
}

}  // namespace

std::string engine_cache_key(const engine::Backend& backend, const engine::Network& net, Precision precision,
                             const std::map<std::string, ir::SymbolRange>& symbols,
                             const std::vector<std::string>& disabled_passes) {
  // Everything that changes the plan; weights do not (plans bind them by name at load).
  std::string key = "kiln " + std::string(KILN_VERSION_STRING) + " engine, backend " + backend.identity() +
                    ", plan format " + std::to_string(engine::kPlanVersion) + ", precision " +
                    std::string(name_of(precision)) + "\n";
  // The backend's network passes left out (in the target's order).
  for (const engine::NetworkPass& p : backend.target().passes)
    if (std::find(disabled_passes.begin(), disabled_passes.end(), p.name) != disabled_passes.end())
      key += "without network pass " + p.name + "\n";
  key += net.to_text();
  // The shape profile it is built for: the range (and tuning size) of every symbol its layers are sized by.
  std::set<std::string> used;
  auto note = [&](const ir::Value* v) {
    std::vector<std::string> names;
    for (const ir::Dim& d : v->type.sizes)
      if (!d.is_static()) d.expr->collect_symbols(names);
    used.insert(names.begin(), names.end());
  };
  for (const ir::Value* v : net.graph.inputs()) note(v);
  for (const auto& n : net.graph.nodes())
    for (const ir::Value* v : n->outputs) note(v);
  for (const std::string& s : used) {
    auto it = symbols.find(s);
    if (it == symbols.end()) continue;
    key += "symbol " + s + " min " + std::to_string(it->second.min) + " opt " + std::to_string(it->second.opt) +
           " max " + std::to_string(it->second.max) + "\n";
  }
  return key;
}

Expected<CompiledProgram> compile_module(ir::Module m, const CompileSettings& settings) {
  const engine::Backend* backend = program::builtin_backends().find(settings.device);
  if (backend == nullptr) {
    std::string names;
    for (const std::string& n : program::builtin_backends().names()) names += (names.empty() ? "" : ", ") + n;
    return invalid_argument("unknown device '" + settings.device + "' (this kiln has: " + names + ")");
  }
  if (m.input_specs.size() != m.graph.inputs().size())
    return internal_error("module signature does not match its graph inputs");
  // Asking for a device means its engines or an error: never a program that
  // quietly runs everything on the CPU reference kernels.
  if (settings.build_engines)
    if (Status ready = backend->ready(); !ready)
      return Status(ready.code(), "device '" + settings.device + "' cannot be used on this machine: " +
                                      ready.message() + " (compile for another device, or where it can be used)");
  drop_unused_weights(m);
  KILN_TRY(canonicalize_module(m));

  const convert::ConverterRegistry& converters = convert::builtin_converters();
  const engine::TargetInfo& target = backend->target();
  auto capable = [&](const ir::Node& n) { return converters.check(n, target); };
  partition::PartitionOptions po = settings.partition;
  po.fallback_on_device = backend->loads_onto_device();
  KILN_ASSIGN_OR_RETURN(partition::Partition part, partition::partition_by_capability(m, capable, po));

  std::map<const ir::Node*, int> node_index;
  for (size_t i = 0; i < m.graph.nodes().size(); ++i) node_index[m.graph.nodes()[i].get()] = static_cast<int>(i);

  CompiledProgram p;
  p.device = settings.device;
  int engines = 0;
  for (const auto& s : part.segments) engines += s.kind == partition::SegmentKind::kEngine;
  int built = 0;
  for (size_t si = 0; si < part.segments.size(); ++si) {
    const partition::Segment& s = part.segments[si];
    SegmentRecord r;
    r.kind = s.kind;
    for (const ir::Node* n : s.nodes) r.nodes.push_back(node_index.at(n));
    for (const ir::Value* v : s.inputs) r.inputs.push_back(v->id);
    for (const ir::Value* v : s.outputs) r.outputs.push_back(v->id);
    r.reasons = s.reasons;
    // A segment sized by a symbol with no maximum, on a backend whose engines
    // need one: an error naming the input and a range, or (allow_fallback)
    // fallback saying why. Decided before any build, with or without a device.
    if (s.kind == partition::SegmentKind::kEngine && target.finite_ranges) {
      const std::string unbounded = unbounded_symbol(m, s);
      if (!unbounded.empty()) {
        const std::string why = "size " + unbounded + " has no finite range, and backend '" +
                                std::string(backend->name()) + "' builds engines for a range of sizes";
        if (!settings.allow_fallback)
          return unsupported("segment " + std::to_string(si) + " (" + std::to_string(s.nodes.size()) +
                             " nodes) cannot be built: " + why + range_hint(m) +
                             " (or --allow-fallback to run it on the CPU reference kernels)");
        if (settings.progress) settings.progress("segment " + std::to_string(si) + " falls back: " + why);
        r.kind = partition::SegmentKind::kFallback;
        r.reasons.assign(r.nodes.size(), "in a segment backend '" + std::string(backend->name()) +
                                             "' cannot build for its range of sizes: " + why);
        p.segments.push_back(std::move(r));
        continue;
      }
    }
    if (s.kind == partition::SegmentKind::kEngine && !settings.build_engines) {
      // Partition only: the segment as the backend takes it, with no plan.
      KILN_TRY_CTX(convert::convert_segment(m, s, converters, target).status(), "segment " + std::to_string(si));
      r.backend = std::string(backend->name());
    } else if (s.kind == partition::SegmentKind::kEngine) {
      ++built;
      const std::string what = "engine " + std::to_string(built) + "/" + std::to_string(engines) + " (segment " +
                               std::to_string(si) + ", " + std::to_string(s.nodes.size()) + " nodes) for " +
                               std::string(backend->name());
      auto net = convert::convert_segment(m, s, converters, target);
      if (!net) return std::move(net).status().with_context("segment " + std::to_string(si));
      // A segment sized by symbols: a backend may refuse the range (no finite
      // range, a size no input gives), and its nodes then fall back.
      bool symbolic = false;
      for (size_t i = 0; i < net->graph.num_values(); ++i) {
        const ir::Value* v = net->graph.value(i);
        symbolic = symbolic || v->kind == ir::ValueKind::kSymInt;
        for (const ir::Dim& d : v->type.sizes) symbolic = symbolic || !d.is_static();
      }
      engine::BuildOptions bo;
      bo.progress = settings.progress;
      bo.precision = settings.precision;
      bo.symbols = m.symbols;
      bo.passes.disabled = settings.disabled_passes;
      bo.passes.print_after = settings.print_after;
      if (settings.dump)
        bo.passes.dump = [&](const std::string& pass, const std::string& text) {
          settings.dump(pass + " in " + what, text);
        };
      auto build = [&]() {
        if (settings.progress) settings.progress("building " + what);
        return backend->build(std::move(*net), bo);
      };
      Expected<std::vector<uint8_t>> plan = std::vector<uint8_t>{};
      if (settings.cache && !(settings.dump && !settings.print_after.empty())) {
        const auto start = std::chrono::steady_clock::now();
        const std::string key =
            engine_cache_key(*backend, *net, settings.precision, m.symbols, settings.disabled_passes);
        plan = settings.cache->get_or_build(key, build, settings.progress, &r.from_cache);
        if (plan && r.from_cache && settings.progress)
          settings.progress(what + " from the engine cache in " +
                            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::chrono::steady_clock::now() - start)
                                               .count()) +
                            " ms");
      } else {
        plan = build();
      }
      if (!plan && symbolic && plan.status().code() == ErrorCode::kUnsupported && !settings.allow_fallback)
        return Status(ErrorCode::kUnsupported,
                      what + " cannot be built for the program's range of sizes: " + plan.status().message() +
                          range_hint(m) + " (or --allow-fallback to run it on the CPU reference kernels)");
      if (!plan && symbolic && plan.status().code() == ErrorCode::kUnsupported) {
        if (settings.progress) settings.progress(what + " falls back: " + plan.status().message());
        r.kind = partition::SegmentKind::kFallback;
        r.reasons.assign(r.nodes.size(), "in a segment backend '" + std::string(backend->name()) +
                                             "' cannot build for its range of sizes: " + plan.status().message());
        p.segments.push_back(std::move(r));
        continue;
      }
      if (!plan) return std::move(plan).status().with_context("segment " + std::to_string(si));
      r.backend = std::string(backend->name());
      r.plan = std::move(*plan);
    }
    p.segments.push_back(std::move(r));
  }
  p.module = std::move(m);
  // The post-build check: every mutated buffer is written in place or copied back.
  if (settings.build_engines) KILN_TRY(program::classify_buffer_writes(p, "the compiled program").status());
  return p;
}

}  // namespace kiln::compiler
