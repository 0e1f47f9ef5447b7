// kiln: load, inspect, run and check PyTorch programs exported by torch.export.
#include <cstring>
#include <iostream>

#include "cli.h"
#include "environment/environment.h"

namespace kiln::cli {

Expected<Args> parse_args(int argc, char** argv, int first, const std::vector<std::string>& valued,
                          const std::vector<std::string>& flags) {
  Args a;
  auto known = [](const std::vector<std::string>& l, const std::string& n) {
    for (const auto& x : l)
      if (x == n) return true;
    return false;
  };
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "-o") s = "--output";
    if (!s.starts_with("--")) {
      a.positional.push_back(s);
      continue;
    }
    std::string name = s.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (known(flags, name)) {
      if (has_value) return invalid_argument("option --" + name + " takes no value");
      a.options[name];
      continue;
    }
    if (!known(valued, name)) return invalid_argument("unknown option --" + name);
    if (!has_value) {
      if (i + 1 >= argc) return invalid_argument("option --" + name + " needs a value");
      value = argv[++i];
    }
    a.options[name].push_back(value);
  }
  return a;
}

Expected<double> parse_double(const std::string& option, const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v >= 0))
    return invalid_argument("--" + option + " needs a non-negative number, got '" + text + "'");
  return v;
}

int fail(const Status& s) {
  // A broken file says how it is broken first, e.g. "kiln: error: truncated: model.kiln: ...".
  std::cerr << "kiln: error: ";
  if (s.code() == ErrorCode::kFormat && s.fault() != FileFault::kMalformed) std::cerr << file_fault_name(s.fault()) << ": ";
  std::cerr << s.message() << "\n";
  return kExitError;
}

}  // namespace kiln::cli

namespace {

constexpr const char* kUsage =
    "usage: kiln <command> [options]\n"
    "\n"
    "commands:\n"
    "  compile MODEL.pt2 -o OUT.kiln [COMPILE OPTIONS]\n"
    "  compile A.pt2 B.pt2 --method a --method b -o OUT.kiln [COMPILE OPTIONS]\n"
    "      lower, partition and build engines; write the program (one method per model,\n"
    "      sharing buffers by name) as a .kiln file\n"
    "  check MODEL IO.safetensors [COMPILE OPTIONS] [--rtol R] [--atol A] [--verbose]\n"
    "      run MODEL on the inputs recorded in IO and compare with the recorded outputs;\n"
    "      exit 0 when all match, 1 on a mismatch, 2 on an error\n"
    "  run MODEL --inputs IN.safetensors --outputs OUT.safetensors [COMPILE OPTIONS]\n"
    "      run once on input.<i> tensors and write output.<j> tensors\n"
    "  bench MODEL [--inputs IN.safetensors] [--outputs OUT.safetensors] [--iters N] [--warmup N]\n"
    "        [--threads T] [--json FILE] [--trace FILE] [COMPILE OPTIONS]\n"
    "      build time, latency median and p90, throughput; on CUDA the engine is timed with\n"
    "      CUDA events on device-resident inputs, and end to end from host tensors as well;\n"
    "      --trace writes one more call as a Chrome trace (Perfetto, chrome://tracing)\n"
    "  inspect MODEL [--partition] [--dot FILE] [--print-ir] [--print-after PASS|all] [COMPILE OPTIONS]\n"
    "      inputs, outputs, buffers, dynamic dimensions, the op histogram; --partition\n"
    "      lists every segment and why each fallback node is not in an engine; --dot draws it\n"
    "  generate MODEL --prompt-ids 1,2,3 --max-new-tokens N [--eos-id K] [COMPILE OPTIONS]\n"
    "      greedy decoding with a decoder step (token ids [1, T], cache positions [T] -> logits)\n"
    "      whose KV caches are buffers; prints the new token ids and the time per token\n"
    "\n"
    "MODEL is a .pt2 archive (compiled on the fly) or a .kiln program.\n"
    "compile options (for a .pt2):\n"
    "  --device cpu|cuda|null       engine backend (null: no engines, everything falls back)\n"
    "  --precision fp32|tf32|fp16|bf16|fp8w   engine precision (float32 models converted at build time;\n"
    "                         fp8w: the weights of matrix-vector products (a decoder's one token) stored as\n"
    "                         FP8 e4m3 with a scale per output channel, activations as exported)\n"
    "  --shape NAME:MIN,OPT,MAX     range of an input's shape, e.g. x:1x3x224x224,8x3x224x224,16x3x224x224\n"
    "  --cache-dir DIR | --no-cache engine cache (default ~/.cache/kiln); kiln inspect --cache DIR lists it\n"
    "  --min-block-size N           engine segments need N compute nodes (default 5)\n"
    "  --fallback-ops a,b           keep these ops out of engines (aten.relu.default, aten.relu or relu)\n"
    "  --disable-pass NAME          skip a lowering pass or a backend network pass (repeatable; to find\n"
    "                               which rewrite changes a result; an unknown name lists the passes)\n"
    "  --require-full-compilation   fail if any node would fall back\n"
    "  --allow-fallback             run a segment the device cannot build for the program's range of\n"
    "                               sizes (a dynamic size with no maximum) on the CPU reference kernels\n"
    "                               instead of stopping with an error\n"
    "  --method NAME                the method of a multi-method program to run, check, bench or inspect\n";

}  // namespace

int main(int argc, char** argv) {
  // The one place the CLI's libraries learn the environment (kiln/settings.h).
  kiln::set_settings(kiln::settings_from_environment());
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::cout << kUsage;
    return argc < 2 ? kiln::cli::kExitError : kiln::cli::kExitOk;
  }
  std::string cmd = argv[1];
  if (cmd == "compile") return kiln::cli::run_compile(argc, argv);
  if (cmd == "check") return kiln::cli::run_check(argc, argv);
  if (cmd == "run") return kiln::cli::run_run(argc, argv);
  if (cmd == "inspect") return kiln::cli::run_inspect(argc, argv);
  if (cmd == "bench") return kiln::cli::run_bench(argc, argv);
  if (cmd == "generate") return kiln::cli::run_generate(argc, argv);
  std::cerr << "kiln: error: unknown command '" << cmd << "'\n" << kUsage;
  return kiln::cli::kExitError;
}
