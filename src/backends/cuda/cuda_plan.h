// What the CUDA engine builder decides, as load() reads it back from the
// plan's sections "cuda.plan" (JSON) and "cuda.cubin" (the NVRTC-compiled
// kernels of the engine, loaded as they are: loading compiles nothing).
//
// Memory: one device arena per engine holds every intermediate tensor, the
// engine's inputs (copied in) and its outputs, at offsets fixed at build
// time; weights live in device constants converted once at load (dtype for
// --precision, channels-last order for convolution filters).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/conv.h"
#include "backends/cuda/gemm.h"
#include "engine/plan.h"
#include "kiln/dtype.h"
#include "kiln/status.h"

namespace kiln::cuda {

constexpr int kArenaRegion = -1;

// The engine plan sections the CUDA backend adds (engine/plan.h).
constexpr const char* kPlanSection = "cuda.plan";
constexpr const char* kCubinSection = "cuda.cubin";

// Where a tensor's first element lives: the arena (region -1) or device
// constant `region`, plus a byte offset.
struct BufferRef {
  int region = kArenaRegion;
  int64_t offset = 0;
  bool operator==(const BufferRef&) const = default;
};

struct DeviceConstant {
  std::string name;  // the program weight it is made from
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes;
  bool channels_last = false;  // a 4-D filter stored K x R x S x C
  bool transposed = false;     // a 2-D [r, c] matrix stored as its transpose (c rows of r)
  // A channels-last filter stored with this many input channels, zeros past
  // sizes[1] (a convolution over zero-padded channels); 0: sizes[1].
  int64_t padded_channels = 0;
  // Bytes on the device (padded channels included); meaningful once check() holds.
  int64_t nbytes() const;
  // Whether this description is one load() can make: sizes in range (their
  // bytes too), channels-last and padded channels on 4-D filters only, a
  // transpose on 2-D matrices only. kFormat naming the constant otherwise.
  Status check() const;
};

// An engine input or output: a contiguous tensor in the arena.
struct IoSlot {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes;
  int64_t offset = 0;  // in the arena
  int64_t nbytes() const;  // meaningful once CudaPlan::validate() holds
};

struct KernelLaunch {
  int kernel = 0;  // index into CudaPlan::kernel_names
  std::array<uint32_t, 3> grid{1, 1, 1};
  std::array<uint32_t, 3> block{1, 1, 1};
  uint32_t shared_bytes = 0;
  std::vector<BufferRef> args;  // device pointers, in the kernel's parameter order
  // The sizes the kernel reads at run time (its KilnDims parameter after the
  // pointers, kernel_source.h); empty when every size is compiled in.
  std::vector<int64_t> dims;
};

struct GemmLaunch {
  GemmShape shape;
  GemmAlgo algo;
  BufferRef a, b, c, bias;
  bool has_bias = false;
};

struct ConvLaunch {
  ConvShape shape;
  ConvAlgo algo;
  BufferRef x, w, bias, z, y;
};

struct Step {
  enum class Kind { kKernel, kGemm, kConv } kind = Kind::kKernel;
  std::string layer;  // the layer it implements, for messages and inspect
  KernelLaunch kernel;
  GemmLaunch gemm;
  ConvLaunch conv;
};

// A size symbol a plan for a range of shapes serves: every value from min to
// max, tuned at opt.
struct PlanSymbol {
  std::string name;
  int64_t min = 1, opt = 1, max = 1;
  bool operator==(const PlanSymbol&) const = default;
};

struct CudaPlan {
  // The device it was built for; load() refuses another architecture.
  std::string device_name;
  std::string arch;  // "sm_90"
  int sm_count = 0;
  std::string precision;  // fp32 | tf32 | fp16 | bf16
  int64_t arena_bytes = 0;
  int64_t error_offset = 0;               // int32 error word in the arena set by kernels that check indices
  std::vector<std::string> error_layers;  // error code k (1-based) names layer error_layers[k-1]
  std::vector<DeviceConstant> constants;
  std::vector<IoSlot> inputs, outputs;
  std::vector<std::string> kernel_names;
  std::vector<Step> steps;
  std::vector<uint8_t> cubin;
  size_t workspace_bytes = 0;  // shared cuBLASLt / cuDNN workspace
  // A plan for a range of shapes (symbols not empty): the steps, slots and
  // constants above are those of the shape at every symbol's opt; the engine
  // makes the steps of other shapes from the layer graph when first called
  // with them (plan_for_shape), finding their kernels among these by
  // kernel_keys (one per kernel name). arena_bytes is the most any of the
  // shapes the build planned needs.
  std::vector<PlanSymbol> symbols;
  std::vector<std::string> kernel_keys;

  std::string to_json() const;
  // Parses and validates (every reference inside the arena or a constant,
  // kernel indices, sizes): kFormat naming what is wrong.
  static Expected<CudaPlan> from_json(std::string_view text, std::span<const uint8_t> cubin);
  Status validate() const;
};

// Everything load() reads from a CUDA engine plan's bytes before it touches
// the device: the common plan (layer graph, aliases), the CUDA plan, and the
// engine output each input is written into in place.
struct CudaEnginePlan {
  engine::EnginePlan common;
  CudaPlan plan;
  std::vector<int> alias_input;  // per engine output: the engine input it is written into in place, or -1
};

// The symbol values a range plan's stored steps are for (every symbol at opt); empty for a fixed-shape plan.
ir::SymBindings opt_bindings(const CudaPlan& plan);

// Reads and checks a whole CUDA engine plan on the host (no device needed):
// the section file, the CUDA sections (CudaPlan::from_json), and that the two
// agree — as many input and output slots as the layer graph has, each of its
// dtype and static sizes, and every in-place output in its input's slot.
// kFormat naming `what` and the first thing that does not hold.
Expected<CudaEnginePlan> read_cuda_engine_plan(std::span<const uint8_t> bytes, std::string_view what);

}  // namespace kiln::cuda
