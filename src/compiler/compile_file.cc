// compile_to_file (kiln/cache.h): a program compiled and written to a file,
// through the program cache when the options name a cache directory.
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "kiln/cache.h"
#include "program/compiled_program.h"
#include "program/program_cache.h"

namespace kiln {

namespace {

// The program cache key material of compiling `models` with `options`, or
// empty when the program cache does not apply: no cache directory, an
// unknown device (the compile names it), a source that is already a program,
// or a source that cannot be read (the compile names it).
Expected<std::string> program_key(const std::vector<MethodFile>& models, const LoadOptions& options) {
  const CompileOptions& c = options.compile;
  if (c.cache_dir.empty()) return std::string();
  const engine::Backend* backend = program::builtin_backends().find(c.device);
  if (backend == nullptr) return std::string();
  std::vector<program::ProgramSource> sources;
  for (const MethodFile& m : models) {
    if (is_program_file(m.path)) return std::string();
    sources.push_back({m.name.empty() ? "forward" : m.name, m.path});
  }
  // Every setting that changes what is written, in a fixed order.
  std::string settings = "device " + c.device + "\nprecision " + std::string(name_of(c.precision)) +
                         "\nmin-block-size " + std::to_string(c.min_block_size) + "\nrequire-full-compilation " +
                         (c.require_full_compilation ? "yes" : "no") + "\nbatch-buckets " +
                         std::string(name_of(c.batch_buckets)) + "\nallow-fallback " +
                         (c.allow_fallback ? "yes" : "no") + "\n";
  for (const std::string& op : c.fallback_ops) settings += "fallback-op " + op + "\n";
  for (const std::string& pass : std::set<std::string>(c.disabled_passes.begin(), c.disabled_passes.end()))
    settings += "disable-pass " + pass + "\n";
  auto dims = [](const std::vector<int64_t>& d) {
    std::string t;
    for (int64_t v : d) t += (t.empty() ? "" : "x") + std::to_string(v);
    return t;
  };
  for (const ShapeProfile& p : c.shapes)
    settings += "shape " + p.input + ":" + dims(p.min) + "," + dims(p.opt) + "," + dims(p.max) + "\n";
  auto key = program::program_cache_key(sources, settings, *backend);
  if (!key && key.status().code() == ErrorCode::kNotFound) return std::string();
  return key;
}

}  // namespace

Expected<CompileResult> compile_to_file(const std::vector<MethodFile>& models, const LoadOptions& options,
                                        const std::string& out) {
  if (models.empty()) return invalid_argument("compile_to_file: no model to compile");
  if (models.size() > 1 || !models[0].name.empty())
    for (const MethodFile& m : models)
      if (m.name.empty()) return invalid_argument("compile_to_file: several models need a method name each");
  LoadOptions o = options;
  o.load_engines = false;  // written to a file, not run here
  CompileResult result;
  // Reads, lowers, builds and saves; what the cache stores.
  auto build = [&](const std::string& path) -> Expected<ProgramSummary> {
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const Program> program, models.size() == 1 && models[0].name.empty()
                                                                      ? kiln::compile(models[0].path, o)
                                                                      : compile_methods(models, o));
    const auto save_start = std::chrono::steady_clock::now();
    KILN_TRY(program->save(path));
    if (o.compile.progress)
      o.compile.progress("saved in " +
                         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::steady_clock::now() - save_start)
                                            .count()) +
                         " ms");
    ProgramSummary summary;
    summary.methods = program->method_names();
    for (const std::string& name : summary.methods)
      for (const SegmentInfo& s : program->method(name)->segments()) {
        ++summary.segments;
        summary.engines += s.engine;
        summary.plan_bytes += static_cast<int64_t>(s.plan_bytes);
        if (!s.engine) summary.fallback_nodes += s.num_nodes;
        result.engines_from_cache += s.engine && s.from_cache;
      }
    return summary;
  };
  const auto key_start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(const std::string key, program_key(models, o));
  if (!key.empty() && o.compile.progress)
    o.compile.progress("program cache key in " +
                       std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::steady_clock::now() - key_start)
                                          .count()) +
                       " ms");
  if (key.empty()) {
    KILN_ASSIGN_OR_RETURN(result.summary, build(out));
    return result;
  }
  program::CacheOptions co;
  co.dir = o.compile.cache_dir;
  KILN_ASSIGN_OR_RETURN(
      result.summary, program::ProgramCache(co).place(key, out, build, o.compile.progress, &result.from_program_cache));
  if (result.from_program_cache) result.engines_from_cache = result.summary.engines;
  return result;
}

}  // namespace kiln
