// kiln's compiler: a .pt2 archive written by torch.export.save (PyTorch
// 2.9+) lowered, partitioned and built into a Program (kiln/runtime.h) to
// run or save as a .kiln file. Links kiln::compiler (which brings
// kiln::runtime); kiln/cache.h compiles to files through kiln's caches.
//
//   kiln::LoadOptions options;
//   options.compile.device = "cuda";
//   auto program = kiln::compile("model.pt2", options);
//   if (program) (*program)->save("model.kiln");
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/options.h"
#include "kiln/runtime.h"

namespace kiln {

// How a .pt2 program is compiled: partitioned into engine segments for a
// device's backend and fallback segments that run on the reference kernels.
// A shape range for one user input: every dimension's smallest, typical (the
// size engines tune for) and largest value. A dynamic dimension takes the
// range (overriding the exported one); a static one must equal all three.
struct ShapeProfile {
  std::string input;  // user input name
  std::vector<int64_t> min, opt, max;
};

struct CompileOptions {
  std::string device = "cpu";  // engine backend: "cpu", "null" (no engines), "cuda" where built
  // Engine precision (kiln/options.h). The CPU backend computes as exported.
  Precision precision = Precision::kFp32;
  // Engine cache directory: built plans are stored there and reused by any
  // later compile (any process) of a segment with the same key; empty: no
  // cache. The CLI defaults it to the user's cache directory.
  std::string cache_dir;
  // Input shape ranges (kiln compile --shape NAME:MIN,OPT,MAX). Several
  // profiles: the k-th range given for an input belongs to profile k, and an
  // input given once keeps its range in every profile (e.g. decode 1..1 and
  // prefill 2..512 for a token input). Each profile is compiled on its own
  // (engines built for it, kernel choices at its OPT) and stored as methods
  // NAME, NAME@1, NAME@2, ... in profile order: one per profile, or one per
  // bucket size for a profile made into padded batch buckets (batch_buckets),
  // so NAME@k is profile k when no profile has buckets. A call of NAME runs
  // the first profile that takes the inputs.
  std::vector<ShapeProfile> shapes;
  // Padded batch buckets, for a profile whose one dynamic size is the leading
  // dimension of its inputs: kAuto (on backends that build static shapes
  // only, CUDA), kOn (any backend) or kOff. The profile is compiled for
  // sizes min, the powers of two between, opt and max; a call with b rows
  // runs the smallest size >= b with its inputs padded and its outputs cut
  // back to b rows. Only programs whose output rows depend on the same input
  // rows alone get buckets (kOn refuses any other; kAuto says why and
  // compiles the range as it is).
  BatchBuckets batch_buckets = BatchBuckets::kAuto;
  // Engine segments with fewer compute nodes stay in fallback.
  int min_block_size = 5;
  // Passes to skip, by name: lowering passes (kiln inspect --help lists them;
  // those a program needs cannot be) and the backend's network passes (CPU:
  // fuse-elementwise; CUDA: fold-epilogues, fuse-elementwise). Both caches
  // key on them. For finding which rewrite changes a result or a speed.
  std::vector<std::string> disabled_passes;
  // Ops forced out of engines: "aten.relu.default", "aten.relu" or "relu".
  std::vector<std::string> fallback_ops;
  // Any node that cannot go into an engine is an error naming it.
  bool require_full_compilation = false;
  // A segment the backend takes node by node but cannot build for the
  // program's range of sizes (on CUDA: a dynamic size with no finite
  // maximum) is an error naming the input and a --shape range that would
  // build. true: such a segment runs on the CPU reference kernels instead,
  // and the partition says why.
  bool allow_fallback = false;
  // false: partition and convert only, and build no engine (what `kiln
  // inspect --partition` shows where the device cannot be used). The engine
  // segments of such a program hold no plan: it cannot run or be saved.
  bool build_engines = true;
  // Receives short progress messages while engines are built.
  std::function<void(const std::string& message)> progress;
};

struct LoadOptions {
  // Passes after which to hand the IR text to `dump` ("all" for every pass):
  // lowering passes (the program's graph), and backend network passes (each
  // engine's network, which is then built rather than taken from the engine cache).
  std::vector<std::string> print_after;
  std::function<void(const std::string& pass, const std::string& ir_text)> dump;
  // Used when the file is a .pt2 (a .kiln file is already compiled).
  CompileOptions compile;
  // false: engine plans are not loaded onto their device until the first
  // run (for compiling to a file or inspecting); a plan that cannot be
  // loaded then fails that run.
  bool load_engines = true;
};

// Whether kiln's IR knows the ATen op `target` ("aten.add.Tensor"), whether
// or not a backend implements it (the Python package asks before export
// decides what to keep whole).
bool is_known_op(std::string_view target);

// Compiles the .pt2 archive at `path` (options.compile) into a program with
// its engines loaded (unless options.load_engines is false); a compiled .kiln
// file given here is loaded as Program::load does. Errors name the file, the
// archive entry, section, node or tensor at fault.
Expected<std::shared_ptr<const Program>> compile(const std::string& path, const LoadOptions& options = {});

// One program of several methods, each compiled from its own .pt2 (e.g. a
// decoder's prefill and decode exported from one model). Methods share
// buffers by name (one dtype, shape and initial value each) and keep
// parameters of equal bytes once; a session runs any method in any order
// on the same state.
struct MethodFile {
  std::string name;  // "prefill"
  std::string path;  // "prefill.pt2"
};
Expected<std::shared_ptr<const Program>> compile_methods(const std::vector<MethodFile>& files,
                                                         const LoadOptions& options = {});

}  // namespace kiln
