// The compile stage: a .pt2 read once, lowered once per shape profile and
// padded batch bucket (each from its own copy of the module as read, since a
// profile that fixes a size changes what lowering folds), partitioned, and an
// engine built for each supported segment. What it produces
// (program::CompiledMethod) is what a .kiln file holds; the runtime loads it
// and runs it (runtime/program.cc, runtime/executable.h) and never lowers.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "ir/graph.h"
#include "kiln/compiler.h"
#include "partition/partition.h"
#include "program/compiled_program.h"
#include "program/engine_cache.h"

namespace kiln::compiler {

// Method `name` of the .pt2 at `path`, compiled once per shape profile
// (`options.compile.shapes`): `name`, then `name@1`, `name@2`, ...; a profile
// compiled as padded batch buckets gives one method per bucket size. Appends
// them to `out`. The archive is read once.
Status compile_method_file(const std::string& name, const std::string& path, const LoadOptions& options,
                           std::vector<program::CompiledMethod>& out);

struct CompileSettings {
  std::string device = "cpu";
  Precision precision = Precision::kFp32;  // engine::BuildOptions::precision
  // Where built plans are looked up and stored (null: build every engine).
  std::shared_ptr<program::EngineCache> cache;
  partition::PartitionOptions partition;
  std::function<void(const std::string&)> progress;
  bool allow_fallback = false;  // CompileOptions::allow_fallback
  bool build_engines = true;    // CompileOptions::build_engines
  // Backend network passes after which `dump` receives each engine's network
  // (LoadOptions::print_after). An engine is then built, not taken from the cache.
  std::vector<std::string> print_after;
  std::function<void(const std::string& pass, const std::string& ir_text)> dump;
  // Network passes the backend skips (CompileOptions::disabled_passes).
  std::vector<std::string> disabled_passes;
};

// Partitions `m` (already lowered) with the converter registry's capability
// checks for the device's backend, converts and builds every engine segment.
Expected<program::CompiledProgram> compile_module(ir::Module m, const CompileSettings& settings);

// The engine cache key material of `net` built by `backend` (see engine_cache.h):
// kiln's version, the backend's identity, the plan format version, the
// precision, the backend's network passes named in `disabled_passes`, the
// network's full text (layers, edges, attributes, constant names, shapes and
// dtypes) and the shape profile: min, opt and max of every symbol the
// network's sizes use, from `symbols`.
std::string engine_cache_key(const engine::Backend& backend, const engine::Network& net, Precision precision,
                             const std::map<std::string, ir::SymbolRange>& symbols = {},
                             const std::vector<std::string>& disabled_passes = {});

}  // namespace kiln::compiler
