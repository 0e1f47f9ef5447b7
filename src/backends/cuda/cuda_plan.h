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
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/conv.h"
#include "backends/cuda/gemm.h"
#include "engine/plan.h"
#include "kiln/dtype.h"
#include "kiln/options.h"
#include "kiln/status.h"

namespace kiln::cuda {

constexpr int kArenaRegion = -1;

// The engine plan sections the CUDA backend adds (engine/plan.h).
constexpr const char* kPlanSection = "cuda.plan";
constexpr const char* kCubinSection = "cuda.cubin";
// A range plan's table of every shape's numbers (ShapeTable::records).
constexpr const char* kShapesSection = "cuda.shapes";

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
  // A 2-D [r, c] matrix stored transposed as c rows of r FP8 (e4m3) values,
  // each row scaled to the format's range: c * r bytes, padded to 16, then
  // the c row scales as float32 (a row's value is its byte's value times its
  // scale). dtype is uint8 and `transposed` holds. fp8_scales_offset() is
  // where the scales start.
  bool fp8_rows = false;
  // Bytes on the device (padded channels included); meaningful once check() holds.
  int64_t nbytes() const;
  // Whether this description is one load() can make: sizes in range (their
  // bytes too), channels-last and padded channels on 4-D filters only, a
  // transpose on 2-D matrices only. kFormat naming the constant otherwise.
  Status check() const;
  int64_t fp8_scales_offset() const { return (sizes.at(0) * sizes.at(1) + 15) / 16 * 16; }
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

struct ShapeTable;

// The most shapes a plan's shape table may hold.
constexpr uint64_t kMaxTableShapes = uint64_t{1} << 16;

struct CudaPlan {
  // The device it was built for; load() refuses another architecture.
  std::string device_name;
  std::string arch;  // "sm_90"
  int sm_count = 0;
  Precision precision = Precision::kFp32;  // written by its name (name_of)
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
  // A range plan whose build planned every shape of its range (few enough of
  // them): each shape's steps, made at build, so that a call at any size
  // takes them from here (shape_plan) instead of planning. Null otherwise.
  std::shared_ptr<const ShapeTable> table;

  std::string to_json() const;
  // Parses and validates (every reference inside the arena or a constant,
  // kernel indices, sizes): kFormat naming what is wrong. `shapes`: the
  // kShapesSection bytes of a plan with a table.
  static Expected<CudaPlan> from_json(std::string_view text, std::span<const uint8_t> cubin,
                                      std::span<const uint8_t> shapes = {});
  Status validate() const;
};

// Every integer of a plan that a shape can change, in one fixed order:
// arena and error word, constants' and slots' sizes and offsets, and each
// step's launch sizes, run-time sizes, GEMM and convolution shapes and
// operand offsets. What is not visited (step kinds, kernels, dtypes, flags,
// names) is the plan's structure. `f` is called with each by reference; a
// value too large for its field (a grid) sets `*overflow`.
void visit_plan_numbers(CudaPlan& plan, const std::function<void(int64_t&)>& f, bool* overflow = nullptr);

// The steps of every shape of a range plan, made at build: shapes whose
// plans differ only in numbers share a variant (the plan of the first of
// them), and each shape keeps the numbers of its variant that vary.
struct ShapeTable {
  // Steps, slots, constants, error word and arena of each variant's first
  // shape; the header fields and kernel list are the plan's.
  std::vector<CudaPlan> variants;
  // Per variant: the positions (visit_plan_numbers order) whose values
  // differ among its shapes.
  std::vector<std::vector<uint32_t>> varying;
  // Per shape, every symbol from its min to its max, the last symbol
  // fastest: its variant, then the variant's varying numbers, each as its
  // difference from the variant's value (varints, zigzag for the
  // differences).
  std::vector<uint8_t> records;
  // The algorithm of every GEMM and convolution shape of the range, by the
  // shape's to_string().
  std::map<std::string, GemmAlgo> gemm_algos;
  std::map<std::string, ConvAlgo> conv_algos;

  // Made by parse() and add(): where each shape's record starts, and each
  // variant's numbers.
  std::vector<uint32_t> starts;
  std::vector<std::vector<int64_t>> numbers;

  // How many shapes the symbols' ranges hold (saturating), and a shape's
  // place among them (its symbol values in the plan's order, each in range).
  static uint64_t count(std::span<const PlanSymbol> symbols);
  static size_t index(std::span<const PlanSymbol> symbols, std::span<const int64_t> values);
  // The symbol values of the shape at `index` (index's inverse).
  static std::vector<int64_t> values(std::span<const PlanSymbol> symbols, size_t index);
  // What makes two plans one variant: everything but their numbers and
  // algorithms, as text.
  static std::string structure(const CudaPlan& plan);
  // Appends the next shape's plan (the plans in index order), given its
  // structure() when known already; records stay unencoded until finish().
  void add(CudaPlan plan);
  void add(CudaPlan plan, std::string structure);
  void finish();
  // Reads records (set with the variants and varying positions) into starts,
  // checking every record's variant and its numbers: kFormat otherwise.
  Status parse(size_t shapes);
  // The plan of shape `index`: `base`'s header and kernels with its
  // variant's steps and its numbers, validated.
  Expected<CudaPlan> shape_plan(const CudaPlan& base, size_t index) const;
  // The variant of shape `index` (< starts.size()).
  size_t variant(size_t index) const;
  // Whether every shape of variant `v` has the variant's device constants
  // (no size of theirs varies).
  bool constants_fixed(size_t v) const;

 private:
  std::vector<std::pair<uint32_t, std::vector<int64_t>>> pending_;  // add() before finish(): variant, numbers
  std::map<std::string, uint32_t> variant_of_;                      // structure text -> variant, while adding
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
