// kiln inspect MODEL: what the program takes, returns, keeps and computes.
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <set>

#include "cli.h"
#include "kiln/cache.h"
#include "kiln/kiln.h"

namespace kiln::cli {

namespace {

// Bytes as MiB with two decimals ("12.50 MiB").
std::string mib(int64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::string dims(const TensorSpec& s) {
  std::string out = std::string(dtype_name(s.dtype)) + "[";
  for (size_t i = 0; i < s.dims.size(); ++i) out += (i ? ", " : "") + s.dims[i];
  return out + "]";
}

}  // namespace

// kiln inspect --cache DIR: the cache's entries (engine plans and whole programs) and totals.
int inspect_cache(const std::string& dir) {
  auto stats = kiln::inspect_cache(dir);
  if (!stats) return fail(stats.status());
  size_t programs = 0;
  for (const auto& e : stats->entries) programs += e.kind == "program";
  std::printf(
      "engine cache %s: %zu entries (%zu engine plans, %zu programs), %llu bytes; engine plans: %lld hits, %lld "
      "misses; programs: %lld hits, %lld misses; %lld damaged entries discarded\n",
      dir.c_str(), stats->entries.size(), stats->entries.size() - programs, programs,
      static_cast<unsigned long long>(stats->bytes), static_cast<long long>(stats->hits),
      static_cast<long long>(stats->misses), static_cast<long long>(stats->program_hits),
      static_cast<long long>(stats->program_misses), static_cast<long long>(stats->discarded));
  if (!stats->entries.empty())
    std::printf("%-32s  %-7s  %12s  %-20s  %6s  %s\n", "key", "kind", "bytes", "last use (UTC)", "hits", "what");
  for (const auto& e : stats->entries) {
    const std::time_t t = static_cast<std::time_t>(e.last_use / 1000);
    char when[32] = "-";
    if (std::tm tm{}; t > 0 && gmtime_r(&t, &tm)) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    std::printf("%-32s  %-7s  %12llu  %-20s  %6lld  %s\n", e.key.c_str(), e.kind.c_str(),
                static_cast<unsigned long long>(e.bytes), when,
                static_cast<long long>(e.hits), e.summary.c_str());
  }
  return kExitOk;
}

int run_inspect(int argc, char** argv) {
  auto args = parse_args(argc, argv, 2, with({"print-after", "cache", "dot"}, kCompileValued),
                         with({"print-ir", "partition"}, kCompileFlags));
  if (!args) return fail(args.status());
  if (auto dir = args->get("cache")) {
    if (!args->positional.empty()) return fail(invalid_argument("usage: kiln inspect --cache DIR"));
    return inspect_cache(*dir);
  }
  if (args->positional.size() != 1)
    return fail(invalid_argument(
        "usage: kiln inspect MODEL [--partition] [--dot FILE] [--print-ir] [--print-after PASS] [compile options]"));
  auto options = load_options(*args, false);
  if (!options) return fail(options.status());
  LoadOptions opts = *options;
  opts.load_engines = false;
  // Where the device cannot be used, --partition still shows the partition
  // its backend would make (capability needs no device), building nothing.
  std::string not_built;
  if ((args->flag("partition") || args->get("dot")) && !is_program_file(args->positional[0]))
    if (Status ready = device_ready(opts.compile.device); !ready && ready.code() != ErrorCode::kInvalidArgument) {
      opts.compile.build_engines = false;
      not_built = ready.message();
    }
  if (auto it = args->options.find("print-after"); it != args->options.end()) {
    opts.print_after = it->second;
    opts.dump = [](const std::string& pass, const std::string& text) {
      std::printf("# IR after %s\n%s\n", pass.c_str(), text.c_str());
    };
  }
  auto loaded = load_model(args->positional[0], *args, opts);
  if (!loaded) return fail(loaded.status());
  const Program& whole = **loaded;
  const std::vector<std::string> names = whole.method_names();
  if (names.size() > 1 && !args->get("method")) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    std::printf("methods (%zu): %s (buffers are shared by name)\n", names.size(), list.c_str());
  }
  const bool each = names.size() > 1 && !args->get("method");
  if (auto path = args->get("dot")) {  // every method drawn, one graph after another
    std::string text;
    for (const std::string& name : each ? names : std::vector<std::string>{names[0]})
      text += (each ? whole.method(name) : &whole)->partition_dot();
    std::ofstream f(*path, std::ios::binary);
    f << text;
    if (!f.flush()) return fail(io_error("cannot write " + *path));
  }
  for (const std::string& name : each ? names : std::vector<std::string>{names[0]}) {
    const Program& p = each ? *whole.method(name) : whole;
    if (each) std::printf("\n== method %s\n", name.c_str());
    std::printf("program %s\n", p.source().c_str());
    std::printf("  exported by torch %s, %s dialect\n", p.torch_version().c_str(), p.dialect().c_str());
    std::printf("inputs (%zu)\n", p.inputs().size());
    const std::set<std::string> written(p.mutated_inputs().begin(), p.mutated_inputs().end());
    for (const auto& s : p.inputs())
      std::printf("  %-32s %s%s\n", s.name.c_str(), dims(s).c_str(),
                  written.count(s.name) ? "  written in place (the caller's tensor gets the new value)" : "");
    std::printf("outputs (%zu)\n", p.outputs().size());
    for (const auto& s : p.outputs()) std::printf("  %-32s %s\n", s.name.c_str(), dims(s).c_str());
    std::set<std::string> mutated(p.mutated_buffers().begin(), p.mutated_buffers().end());
    std::printf("buffers (%zu)\n", p.buffers().size());
    for (const auto& s : p.buffers()) {
      // A buffer the archive also names otherwise: every name on its line.
      std::string names;
      for (const std::string& n : p.names_of(s.name)) names += (names.empty() ? "" : " = ") + n;
      std::printf("  %-32s %-28s %s%s\n", names.c_str(), dims(s).c_str(),
                  !mutated.count(s.name)              ? "read only"
                  : p.buffer_updated_in_place(s.name) ? "written in place by its engine (aliased)"
                                                      : "written, copied back after each call",
                  names.find(" = ") != std::string::npos ? " (one storage, several names)" : "");
    }
    std::printf("weights: %zu parameters and constants, %lld bytes with buffers\n", p.weights().size(),
                static_cast<long long>(p.weight_bytes()));
    for (const auto& s : p.weights())
      if (auto all = p.names_of(s.name); all.size() > 1) {
        std::string names;
        for (const std::string& n : all) names += (names.empty() ? "" : " = ") + n;
        std::printf("  %s (one storage, several names)\n", names.c_str());
      }
    std::printf("dynamic dimensions (%zu)\n", p.symbols().size());
    for (const auto& s : p.symbols())
      std::printf("  %-8s [%lld, %s]\n", s.name.c_str(), static_cast<long long>(s.min),
                  s.max == INT64_MAX ? "inf" : std::to_string(s.max).c_str());
    auto hist = p.op_histogram();
    int total = 0;
    for (const auto& [op, n] : hist) total += n;
    std::printf("ops after lowering (%d nodes, %zu kinds)\n", total, hist.size());
    for (const auto& [op, n] : hist) std::printf("  %5d  %s\n", n, op.c_str());
    int engines = 0;
    for (const auto& seg : p.segments()) engines += seg.engine;
    std::printf("segments: %zu (%d engine, %zu fallback) on device %s\n", p.segments().size(), engines,
                p.segments().size() - static_cast<size_t>(engines), p.device().c_str());
    int64_t arena = 0, workspace = 0, device_weights = 0;
    for (const auto& seg : p.segments()) {
      arena += seg.arena_bytes;
      workspace += seg.workspace_bytes;
      device_weights += seg.weight_bytes;
    }
    if (arena + workspace + device_weights > 0) {
      int64_t state = 0;
      for (const auto& b : p.buffers()) {
        int64_t n = static_cast<int64_t>(dtype_size(b.dtype));
        for (const std::string& d : b.dims)
          n *= d.find_first_not_of("0123456789") == std::string::npos && !d.empty() ? std::stoll(d) : 0;
        state += n;
      }
      std::printf(
          "device memory of the engines: %s (arena %s%s, workspace %s, weights %s); each session adds its "
          "state, %s\n",
          mib(arena + workspace + device_weights).c_str(), mib(arena).c_str(),
          p.symbols().empty() ? "" : " for the largest shape of each range", mib(workspace).c_str(),
          mib(device_weights).c_str(), mib(state).c_str());
    }
    if (args->flag("partition")) std::printf("\n%s", p.partition_report().c_str());
    if (args->flag("partition") && !not_built.empty()) std::printf("no engine was built: %s\n", not_built.c_str());
    if (args->flag("print-ir")) std::printf("\n%s", p.ir_text().c_str());
  }
  return kExitOk;
}

}  // namespace kiln::cli
