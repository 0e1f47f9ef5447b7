// kiln check MODEL IO.safetensors: run on recorded inputs, compare with recorded outputs.
#include <cstdio>
#include <iostream>

#include "cli.h"
#include "kiln/check.h"
#include "kiln/kiln.h"

namespace kiln::cli {

int run_check(int argc, char** argv) {
  auto args = parse_args(argc, argv, 2, with({"rtol", "atol"}, kCompileValued),
                         with({"verbose", "bind-buffers"}, kCompileFlags));
  if (!args) return fail(args.status());
  if (args->positional.size() != 2)
    return fail(invalid_argument(
        "usage: kiln check MODEL IO.safetensors [compile options] [--rtol R] [--atol A] [--bind-buffers]"));
  auto options = load_options(*args, false);
  if (!options) return fail(options.status());
  Tolerance tol;
  const bool tol_given = args->get("rtol") || args->get("atol");
  if (auto r = args->get("rtol")) {
    auto v = parse_double("rtol", *r);
    if (!v) return fail(v.status());
    tol.rtol = *v;
  }
  if (auto r = args->get("atol")) {
    auto v = parse_double("atol", *r);
    if (!v) return fail(v.status());
    tol.atol = *v;
  }
  const std::string& model = args->positional[0];
  const std::string& io_path = args->positional[1];
  auto program = load_model(model, *args, *options);
  if (!program) return fail(program.status());
  auto io = read_safetensors(io_path);
  if (!io) return fail(io.status());
  // A fixture's recorded tolerance, unless the command line sets one.
  std::string tol_from = "default";
  if (!tol_given) {
    auto recorded = manifest_tolerance(io_path, *io);
    if (!recorded) return fail(recorded.status());
    if (*recorded) {
      tol = **recorded;
      tol_from = "manifest.json, fixture " + io->metadata.at("fixture");
    }
    // Engines below fp32 round every layer's activations (kiln check --precision fp16).
    if (const Precision p = options->compile.precision; p != Precision::kFp32) {
      tol = tolerance_at_precision(tol, p);
      tol_from += ", floored for " + std::string(name_of(p)) + " engines: atol at least " +
                  (p == Precision::kFp8w ? "5e-2" : "1e-2") + " of each tensor's largest value";
    }
  } else {
    tol_from = "command line";
  }
  auto report = check_fixture(*program, *io, tol, args->flag("bind-buffers"));
  if (!report) return fail(report.status().with_context(io_path));

  std::printf("model %s (%s dialect, exported by torch %s), %d call%s\n", model.c_str(), (*program)->dialect().c_str(),
              (*program)->torch_version().c_str(), report->calls, report->calls == 1 ? "" : "s");
  for (const auto& t : report->tensors) {
    if (!t.pass || args->flag("verbose")) {
      if (t.exact)
        std::printf("  %-28s %-22s exact  %s\n", t.name.c_str(), t.got_type.c_str(), t.pass ? "ok" : t.problem.c_str());
      else
        std::printf("  %-28s %-22s max abs %.2e  max rel %.2e  %s\n", t.name.c_str(), t.got_type.c_str(), t.max_abs,
                    t.max_rel, t.pass ? "ok" : t.problem.c_str());
      if (!t.pass && t.got_type != t.want_type) std::printf("    expected %s\n", t.want_type.c_str());
    }
  }
  bool pass = report->pass();
  if (args->flag("verbose") || !pass)
    std::printf(
        "tolerance: rtol %.2g, atol %.2g (%s; float16 outputs at least 1e-3 each, bfloat16 at least "
        "rtol 0.016, atol 0.01)\n",
        tol.rtol, tol.atol, tol_from.c_str());
  std::printf("%zu tensors checked, max abs err %.1e, max rel err %.1e: %s\n", report->tensors.size(),
              report->max_abs(), report->max_rel(), pass ? "PASS" : "FAIL");
  return pass ? kExitOk : kExitMismatch;
}

}  // namespace kiln::cli
