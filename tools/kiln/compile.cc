// kiln compile MODEL.pt2 -o OUT.kiln: lower, partition, build engines, save.
// Also the compile options the other commands share.
#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli.h"
#include "kiln/cache.h"
#include "kiln/kiln.h"

namespace kiln::cli {

namespace {

// "x:1x3x224x224,8x3x224x224,16x3x224x224" -> {x, min, opt, max}.
Expected<ShapeProfile> parse_shape_profile(const std::string& text) {
  const std::string usage =
      "--shape needs NAME:MIN,OPT,MAX with each shape written like 1x3x224x224, got '" + text + "'";
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return invalid_argument(usage);
  ShapeProfile p;
  p.input = text.substr(0, colon);
  std::vector<std::vector<int64_t>> shapes;
  std::string rest = text.substr(colon + 1);
  size_t start = 0;
  while (start <= rest.size()) {
    const size_t comma = rest.find(',', start);
    const std::string part = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::vector<int64_t> dims;
    size_t s = 0;
    while (s <= part.size()) {
      const size_t x = part.find('x', s);
      const std::string num = part.substr(s, x == std::string::npos ? std::string::npos : x - s);
      if (num.empty() || num.size() > 18 || num.find_first_not_of("0123456789") != std::string::npos)
        return invalid_argument(usage);
      dims.push_back(std::stoll(num));
      if (x == std::string::npos) break;
      s = x + 1;
    }
    shapes.push_back(std::move(dims));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (shapes.size() != 3) return invalid_argument(usage);
  p.min = shapes[0];
  p.opt = shapes[1];
  p.max = shapes[2];
  return p;
}

}  // namespace

const std::vector<std::string> kCompileValued = {"device",    "min-block-size", "fallback-ops",
                                                 "precision", "cache-dir",      "shape",
                                                 "method",    "batch-buckets",  "disable-pass"};
const std::vector<std::string> kCompileFlags = {"require-full-compilation", "allow-fallback", "no-cache"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Expected<LoadOptions> load_options(const Args& a, bool progress) {
  LoadOptions o;
  CompileOptions& c = o.compile;
  if (auto d = a.get("device")) c.device = *d;
  if (auto d = a.get("cache-dir")) {
    if (a.flag("no-cache")) return invalid_argument("--cache-dir and --no-cache contradict each other");
    c.cache_dir = *d;
  } else if (!a.flag("no-cache")) {
    c.cache_dir = default_cache_dir();
  }
  if (auto it = a.options.find("shape"); it != a.options.end()) {
    for (const std::string& text : it->second) {
      auto profile = parse_shape_profile(text);
      if (!profile) return profile.status();
      c.shapes.push_back(std::move(*profile));
    }
  }
  if (auto p = a.get("precision")) {
    Expected<Precision> precision = parse_precision(*p);
    if (!precision) return invalid_argument("--" + precision.status().message());
    c.precision = *precision;
  }
  if (auto b = a.get("batch-buckets")) {
    Expected<BatchBuckets> buckets = parse_batch_buckets(*b);
    if (!buckets) return invalid_argument("--" + buckets.status().message());
    c.batch_buckets = *buckets;
  }
  if (auto m = a.get("min-block-size")) {
    char* end = nullptr;
    long v = std::strtol(m->c_str(), &end, 10);
    if (m->empty() || *end != '\0' || v < 1 || v > 1000000)
      return invalid_argument("--min-block-size needs a whole number from 1, got '" + *m + "'");
    c.min_block_size = static_cast<int>(v);
  }
  if (auto it = a.options.find("fallback-ops"); it != a.options.end())
    for (const std::string& list : it->second) {
      size_t start = 0;
      while (start <= list.size()) {
        size_t comma = list.find(',', start);
        if (comma == std::string::npos) comma = list.size();
        std::string op = list.substr(start, comma - start);
        if (op.empty()) return invalid_argument("--fallback-ops has an empty entry in '" + list + "'");
        c.fallback_ops.push_back(op);
        start = comma + 1;
      }
    }
  if (auto it = a.options.find("disable-pass"); it != a.options.end()) c.disabled_passes = it->second;
  c.require_full_compilation = a.flag("require-full-compilation");
  c.allow_fallback = a.flag("allow-fallback");
  if (c.allow_fallback && c.require_full_compilation)
    return invalid_argument("--allow-fallback and --require-full-compilation contradict each other");
  if (progress) c.progress = [](const std::string& m) { std::fprintf(stderr, "kiln: %s\n", m.c_str()); };
  return o;
}

Expected<std::shared_ptr<const Program>> load_program(const std::string& path, const Args& a, LoadOptions options) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<const Program> p, compile(path, options));
  if (auto d = a.get("device"); d && *d != p->device())
    return invalid_argument(path + " was compiled for device '" + p->device() + "', not '" + *d +
                            "'; compile it again with --device " + *d);
  return p;
}

Expected<std::shared_ptr<const Program>> load_model(const std::string& path, const Args& a, LoadOptions options) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<const Program> p, load_program(path, a, std::move(options)));
  auto name = a.get("method");
  if (!name) return p;
  const Program* m = p->method(*name);
  if (m == nullptr) {
    std::string names;
    for (const std::string& n : p->method_names()) names += (names.empty() ? "" : ", ") + n;
    return invalid_argument(path + " has no method '" + *name + "' (methods: " + names + ")");
  }
  return std::shared_ptr<const Program>(p, m);  // keeps the whole program alive
}

int run_compile(int argc, char** argv) {
  auto args = parse_args(argc, argv, 2, with({"output"}, kCompileValued), kCompileFlags);
  if (!args) return fail(args.status());
  auto out = args->get("output");
  if (args->positional.empty() || !out)
    return fail(invalid_argument(
        "usage: kiln compile MODEL.pt2 -o OUT.kiln [compile options]\n"
        "       kiln compile A.pt2 B.pt2 --method a --method b -o OUT.kiln   (one program of several methods)"));
  std::vector<std::string> method_names;
  if (auto it = args->options.find("method"); it != args->options.end()) method_names = it->second;
  if (args->positional.size() > 1 && method_names.size() != args->positional.size())
    return fail(invalid_argument("kiln compile: " + std::to_string(args->positional.size()) + " models need " +
                                 std::to_string(args->positional.size()) +
                                 " --method names (one per model, in order), got " +
                                 std::to_string(method_names.size())));
  if (args->positional.size() == 1 && method_names.size() > 1)
    return fail(invalid_argument("kiln compile: one model takes at most one --method name"));
  auto options = load_options(*args, true);
  if (!options) return fail(options.status());
  const auto start = std::chrono::steady_clock::now();
  std::string models;
  for (const std::string& m : args->positional) models += (models.empty() ? "" : " + ") + m;
  std::fprintf(stderr, "kiln: compiling %s for %s\n", models.c_str(), options->compile.device.c_str());
  std::vector<MethodFile> files;
  for (size_t i = 0; i < args->positional.size(); ++i)
    files.push_back({method_names.empty() ? std::string() : method_names[i], args->positional[i]});
  // A .kiln program written again: compiled for the device an explicit --device names.
  if (files.size() == 1 && files[0].name.empty() && args->get("device") && is_program_file(files[0].path))
    if (auto p = load_program(files[0].path, *args, *options); !p) return fail(p.status());
  auto compiled = compile_to_file(files, *options, *out);
  if (!compiled) return fail(compiled.status());
  const ProgramSummary* summary = &compiled->summary;
  const int64_t cached_engines = compiled->engines_from_cache;
  const bool from_cache = compiled->from_program_cache;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string methods;
  if (summary->methods.size() > 1)
    for (const std::string& n : summary->methods) methods += (methods.empty() ? " (methods " : ", ") + n;
  if (!methods.empty()) methods += ")";
  std::printf("wrote %s%s: %lld segments (%lld engines, %lld bytes of plans), %lld nodes in fallback, %.2f s\n",
              out->c_str(), methods.c_str(), static_cast<long long>(summary->segments),
              static_cast<long long>(summary->engines), static_cast<long long>(summary->plan_bytes),
              static_cast<long long>(summary->fallback_nodes), secs);
  if (summary->fallback_nodes > 0)
    std::printf("run `kiln inspect %s --partition` to see why each node falls back\n", out->c_str());
  std::printf("engines: %lld built, %lld from cache%s\n", static_cast<long long>(summary->engines - cached_engines),
              static_cast<long long>(cached_engines), from_cache ? " (the whole program from the cache)" : "");
  return kExitOk;
}

}  // namespace kiln::cli
