// Process-wide switches of kiln's libraries. The libraries never read the
// environment: the CLI and the Python package fill these from kiln's
// environment variables at their edge (docs/CLI.md lists them), and an
// application that embeds kiln sets what it wants with set_settings().
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

struct Settings {
  // The disk cache directory a compile uses unless it names one
  // (default_cache_dir(); the CLI: KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln,
  // else $HOME/.cache/kiln). Empty: none.
  std::string cache_dir;
  // The key of the random stream random ops draw from (KILN_SEED).
  uint64_t seed = 0;
  // Engines on a device kept loaded for reuse by later loads of the same
  // plan, at most this many and this many MiB (KILN_HOT_ENGINES,
  // KILN_HOT_ENGINE_MB); 0 engines: none kept.
  uint64_t hot_engines = 8;
  uint64_t hot_engine_mb = 4096;

  // The CUDA backend's switches, read when an engine is built or loaded.
  struct Cuda {
    bool graphs = true;         // replay captured graphs (KILN_CUDA_GRAPHS=0: launch step by step)
    bool staging = true;        // host copies through page-locked staging (KILN_CUDA_STAGING=0: off)
    bool early_launch = false;  // programmatic dependent launch of every kernel (KILN_CUDA_PDL=1)
    bool debug = false;         // step by step, naming the step that trips an index check (KILN_CUDA_DEBUG=1)
    int profile = 0;            // time each step alone at the first launch: 1, or 2 every step in order too
                                // (KILN_CUDA_PROFILE=1 / all)
    int trace = 0;              // 1: each new shape's preparation and each tuning, timed; 2: each call's
                                // parts too (KILN_CUDA_TRACE)
    // Counts as given (checked where they are used; an error names the
    // variable): shapes a range engine keeps ready (KILN_CUDA_SHAPES), calls an
    // engine runs at once (KILN_CUDA_CONTEXTS), shapes a range's build plans
    // at most (KILN_CUDA_SHAPE_TABLE). Empty: the default.
    std::string shapes, contexts, shape_table;
    // cuBLASLt's path (KILN_CUBLASLT), else looked for in `library_path`
    // (the dynamic loader's LD_LIBRARY_PATH), beside NVRTC and cuDNN, and in
    // the toolkit kiln was built with.
    std::string cublaslt, library_path;
    // CUDA_VISIBLE_DEVICES is set: the devices CUDA sees are not all the
    // machine has, so the program cache's cheap device identity is not used.
    bool visible_devices_set = false;
  } cuda;
};

// The settings in force (a copy).
Settings settings();
// Replaces them; engines built or loaded later read the new ones.
void set_settings(Settings s);

}  // namespace kiln
