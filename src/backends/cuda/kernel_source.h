// The kernels kiln launches per layer: templates in real CUDA sources
// (src/backends/cuda/kernels/*.cuh, embedded into the library and seen by
// NVRTC as "kiln/<file>.cuh"), instantiated by name expression, except the
// fused elementwise programs, whose text is generated here from the program. A kernel's parameters are its tensors'
// device pointers, in the order each generator documents. Every size, stride and count a kernel reads is one of its
// `dims`: compiled in as a literal (the compiler then turns index arithmetic into multiplies and shifts) or read at run
// time from one more parameter, a KilnDims passed by value after the pointers. A template reads size i as D::at(i,
// kd...) with D = kiln::Sizes<mask, values...>; text reads it as KD(i), which kernel_definition() defines. Values the
// code's structure depends on (register array extents, unroll counts, shared memory tiles) are template arguments or
// literals. All of an engine's kernels are compiled together with NVRTC when the plan is built (nvrtc_compile.h).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/elementwise_program.h"
#include "kiln/dtype.h"
#include "kiln/status.h"

namespace kiln::cuda {

// A tensor as a kernel sees it: element type, logical sizes and element strides.
struct StridedLayout {
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t numel() const;
  bool is_contiguous() const;
};

// One kernel: either an instance of a kernel template, `templ` from header
// `header` with template arguments `targs` and then its sizes (a
// kiln::Sizes), or text: `source` defines `extern "C" __global__ void
// KILN_KERNEL(<pointers> KILN_DIMS)` reading its sizes as KD(i). `dims` are
// the sizes' values for this launch. Join kernels into a module with
// kernel_definition() and kernel_instance(), never by editing `source`.
struct GeneratedKernel {
  std::string source;
  std::string header;              // "kiln/gemv.cuh"
  std::string templ;               // "kiln::gemv"
  std::vector<std::string> targs;  // template arguments before the sizes
  std::array<uint32_t, 3> grid{1, 1, 1};
  std::array<uint32_t, 3> block{1, 1, 1};
  uint32_t shared_bytes = 0;
  std::vector<int64_t> dims;

  bool is_template() const { return !templ.empty(); }
  // What the kernel is apart from its sizes: its text, or its template and
  // arguments (launches of one layer at two shapes are paired by it).
  std::string identity() const;
};

// The most sizes a kernel reads at run time (KilnDims holds this many int64).
constexpr size_t kMaxKernelDims = 64;

// Definitions every generated kernel relies on (types, loads, stores, rounding, KilnDims).
const std::string& kernel_prelude();

// `k` defined as the kernel `name`, for a module that starts with
// kernel_prelude(): KD(i) is the literal k.dims[i], or, where runtime[i]
// (missing entries: false), the value the launch passes in the KilnDims
// parameter, which the kernel then takes after its pointers. Preprocessor
// definitions around the source, so the text itself is never edited.
// kInvalidArgument when more than kMaxKernelDims sizes are run-time values.
Expected<std::string> kernel_definition(const GeneratedKernel& k, const std::string& name,
                                        const std::vector<bool>& runtime);

// The name expression that instantiates template kernel `k` with its sizes
// literal or, where runtime[i], read at run time (then KilnDims is its last
// parameter): "kiln::gemv<float, 1, 1, 0, kiln::Sizes<0x0ULL, 4096LL, ...>>".
// kInvalidArgument when `k` is text or a run-time size is beyond kMaxKernelDims.
Expected<std::string> kernel_instance(const GeneratedKernel& k, const std::vector<bool>& runtime);

// The C++ element type name used in generated code ("float", "__half", ...).
Expected<std::string> device_type_name(DType dtype);

// out = program(inputs...), every input broadcast to out's sizes through its
// strides (stride 0 on broadcast dims). Params: out, then inputs in order.
// All tensors have out's dtype (float32, float64, float16 or bfloat16).
Expected<GeneratedKernel> elementwise_kernel(const engine::ElementwiseProgram& program, const StridedLayout& out,
                                             const std::vector<StridedLayout>& inputs);

// An exact literal of `v` in generated code of compute type float
// (compute Float32) or double (Float64): its bit pattern, so inf, nan and
// every digit survive.
std::string compute_literal(double v, DType compute);
// `v` stored into dtype `t` and read back (a Python number converted to a
// 16-bit or 32-bit float tensor's dtype); unchanged for other dtypes.
double rounded_to_dtype(double v, DType t);

// One pointwise op over tensors of any dtypes (kiln/pointwise.cuh): each
// input converted to `compute` (Float64, Float32, Int64 or Int32: double,
// float, long long, int) as a0, a1, ...; `expr` (C++ over them, of the
// compute type or bool) converted to out's dtype. Every input at out's sizes
// through its strides; input k is first converted to via[k] where that is
// not its own dtype (torch's cast to the promoted dtype). Params: out, then
// inputs in order.
Expected<GeneratedKernel> pointwise_kernel(const std::string& expr, DType compute, const StridedLayout& out,
                                           const std::vector<StridedLayout>& inputs, const std::vector<DType>& via);

// out = in converted to out's dtype (any of kiln's dtypes; bool as 0/1), both of
// the same logical sizes with their own strides. Params: out, in.
Expected<GeneratedKernel> copy_kernel(const StridedLayout& out, const StridedLayout& in);

// out = `value` stored in out's dtype (floating: rounded through float32;
// integer or bool: the integer it is). Params: out.
Expected<GeneratedKernel> fill_kernel(const StridedLayout& out, double value);

// Per row of `cols` contiguous elements (rows = numel / cols), all contiguous
// (kiln/rows.cuh). Statistics are computed in float32 (float64 for f64).
enum class RowOp { kLayerNorm, kRmsNorm, kSoftmax, kLogSoftmax };
// Norms: norm_rows_kernel's (block per row). Softmax and log-softmax take no
// weight or bias; Params: out, in.
Expected<GeneratedKernel> row_kernel(RowOp op, DType dtype, int64_t rows, int64_t cols, double eps, bool has_weight,
                                     bool has_bias);

// LayerNorm or RMSNorm over rows (rows x cols, contiguous), optionally of the
// sum of two inputs: a residual add folded into the norm, rounded to the
// dtype as the add would leave it, and written out as well when the sum has
// other users. Statistics in float32 (float64 for f64).
struct NormRows {
  RowOp op = RowOp::kLayerNorm;  // kLayerNorm or kRmsNorm
  DType dtype = DType::Float32;
  int64_t rows = 0, cols = 0;
  double eps = 1e-5;
  bool has_weight = false, has_bias = false;
  bool residual = false;   // the row is in + in2
  bool write_sum = false;  // in + in2 is written to sum_out (needs residual)
  // One warp per row holding it in registers, 16-byte loads and stores: the
  // caller vouches for 16-byte-aligned pointers (norm_rows_vector_fits
  // must hold). Otherwise a block per row reads the inputs on every pass.
  bool vectorized = false;
};
// The most 16-byte vectors of a row one lane of the warp holds.
constexpr int64_t kNormVectorsPerLane = 8;
bool norm_rows_vector_fits(DType dtype, int64_t cols);
// Params: out, in, in2, sum_out, weight, bias (each of length cols in the
// same dtype): those the flags leave out are passed as `out`, never read
// (norm_rows_args).
Expected<GeneratedKernel> norm_rows_kernel(const NormRows& p);
// The parameters of a norm_rows_kernel launch in order, `out` in the place of
// each one absent.
template <typename Ref>
std::vector<Ref> norm_rows_args(const Ref& out, const Ref& in, const Ref* in2, const Ref* sum_out, const Ref* weight,
                                const Ref* bias) {
  return {out, in, in2 ? *in2 : out, sum_out ? *sum_out : out, weight ? *weight : out, bias ? *bias : out};
}

// out[o] = reduce over the reduced index space of in. `kept` and `reduced` give
// sizes and input strides of the kept (in out's row-major order) and reduced dims.
// Params: out (contiguous), in.
enum class ReduceOp { kSum, kMean, kMax, kMin, kProd };
struct ReduceDims {
  std::vector<int64_t> kept_sizes, kept_strides;
  std::vector<int64_t> reduced_sizes, reduced_strides;
};
Expected<GeneratedKernel> reduce_kernel(ReduceOp op, DType dtype, const ReduceDims& dims);
// var (and with `with_mean` the mean) of a floating tensor over the reduced
// dims, divided by max(0, n - correction), laid out as reduce. Params: var,
// mean (written with with_mean), in.
Expected<GeneratedKernel> var_kernel(DType dtype, const ReduceDims& dims, double correction, bool with_mean);
// The same over integer or bool tensors (`in`): sums to int64, max and min
// in `in`'s type (`out`), exact. Params: out, in.
Expected<GeneratedKernel> reduce_int_kernel(ReduceOp op, DType out, DType in, const ReduceDims& dims);

// argmax (is_max) or argmin over the reduced dims of `in` (any dtype), as int64: the row-major index among the reduced
// dims of the first extreme, a NaN counting as the extreme. Laid out as reduce_kernel's. Params: out (int64,
// contiguous), in.
Expected<GeneratedKernel> arg_reduce_kernel(bool is_max, DType in, const ReduceDims& dims);
// Inclusive cumsum along the middle dim of contiguous [outer, len, inner]
// tensors, accumulated as torch's CPU kernel does (float for 16-bit floats,
// double for float32 and float64, wrapping int64 for integers and bool, which give int64).
// Params: out, in.
enum class ScanOp { kSum = 0, kProd = 1, kLogSumExp = 2 };
Expected<GeneratedKernel> cumsum_kernel(DType out, DType in, int64_t outer, int64_t len, int64_t inner,
                                        ScanOp op = ScanOp::kSum);

// 2-D pooling over NCHW-indexed tensors of any strides. Params: out, in.
struct PoolParams {
  enum class Kind { kMax, kAvg, kAdaptiveAvg } kind = Kind::kMax;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool count_include_pad = true;
  int64_t divisor_override = 0;  // 0: none
};
Expected<GeneratedKernel> pool2d_kernel(const PoolParams& p, const StridedLayout& out, const StridedLayout& in);

// Pooling over 3 spatial dims of a logical [N, C, D, H, W] input of any
// strides (2-D pools: D 1 with a unit window), outputs contiguous
// [N, C, OD, OH, OW]; the max kinds with the flat index of each maximum in
// its plane when `indices`. Params: out, [indices,] in.
struct Pool3dParams {
  enum class Kind { kMax, kAvg, kAdaptiveAvg, kAdaptiveMax } kind = Kind::kMax;
  std::array<int64_t, 3> k{1, 1, 1}, stride{1, 1, 1}, pad{0, 0, 0}, dilation{1, 1, 1};
  bool count_include_pad = true;
  int64_t divisor_override = 0;  // 0: none
};
Expected<GeneratedKernel> pool3d_kernel(const Pool3dParams& p, const StridedLayout& out, const StridedLayout& in,
                                        bool indices);

// Insertion points of n values (contiguous) in the rows of a contiguous
// [rows, len] sorted sequence of the same dtype (per_row 0: one row for every
// value; else per_row values per row), into int64 or int32 out; with a sorter
// (int64, the sequence's sizes) giving the entries' order. Params: out, seq,
// values, [sorter,] error.
Expected<GeneratedKernel> search_sorted_kernel(DType out, DType dtype, int64_t len, int64_t per_row, int64_t n,
                                               bool right, bool sorter, int error_code);

// isin of n contiguous elements in n_test contiguous test elements (bool
// out). Params: out, elements, tests.
Expected<GeneratedKernel> isin_kernel(DType elements, DType tests, int64_t n, int64_t n_test, bool invert);

// histc in two kernels: its range (the given [lo, hi] when lo < hi, else the
// data's finite range; one block; params: range (2 doubles), in), then the
// 64-bit counts (zeroed before) of n contiguous values in `bins` bins, each
// bin computed in float (`single`, as ATen for float32) or double (params:
// counts, range, in).
Expected<GeneratedKernel> histogram_range_kernel(DType dtype, double lo, double hi, int64_t n);
Expected<GeneratedKernel> histogram_kernel(DType dtype, int64_t bins, int64_t n, bool single);

// grid_sampler over contiguous tensors (kiln/grid_sample.cuh): in
// [N, C, (D,) H, W] of `dtype`, grid [N, points..., 2 or 3] of `grid_dtype`,
// out [N, C, points...] of `dtype`. Params: out, in, grid.
Expected<GeneratedKernel> grid_sampler_kernel(DType dtype, DType grid_dtype, const std::vector<int64_t>& in_sizes,
                                              int64_t points, int mode, int padding, bool align_corners);

// segment_reduce over contiguous data [outer, len, inner] into
// [outer, segments, inner]: reduce 0 sum, 1 mean, 2 max, 3 min, 4 prod;
// segment bounds from int64 lengths (segments entries) or offsets
// (segments + 1). Params: out, data, lengths or offsets, error.
Expected<GeneratedKernel> segment_reduce_kernel(DType dtype, int reduce, bool offsets, std::optional<double> initial,
                                                int64_t outer, int64_t len, int64_t inner, int64_t segments,
                                                int error_code);

// Ordering along one dim of a contiguous [outer, len, inner] tensor (len at
// most 2048), one block per slice: mode 0 the first k in (descending) order,
// 1 the k-th smallest, 2 the median, 3 the NaN-skipping median (values and
// int64 positions). Params: values, indices, in.
Expected<GeneratedKernel> order_kernel(DType dtype, int mode, bool descending, int64_t outer, int64_t len,
                                       int64_t inner, int64_t k);

// Scaled dot-product attention: q [B, H, L, E], k [B, Hk, S, E], v [B, Hk, S, Ev]
// (H a multiple of Hk: grouped-query heads share a key/value head), optional
// mask broadcast to [B, H, L, S] through its strides (bool: true keeps; float:
// added to the scores), causal (keys after the query position masked). Softmax
// in float32. Params: out ([B, H, L, Ev] contiguous), q, k, v, then mask if any.
struct AttentionParams {
  StridedLayout q, k, v;
  bool has_mask = false;
  StridedLayout mask;  // sizes [B, H, L, S] (expanded), strides with 0 on broadcast dims
  bool causal = false;
  double scale = 1.0;
};
Expected<GeneratedKernel> attention_kernel(const AttentionParams& p);

// The same attention on tensor cores, FlashAttention-style (the scores never
// leave the SM; softmax statistics in float32, P rounded to the input dtype
// for P v): float16 or bfloat16 q, k, v and out, one head size E for keys and
// values, a multiple of 16 up to 128, unit last strides and even other
// strides, 4-byte-aligned pointers. `out` may have any such strides (e.g.
// [B, L, H, E] storage seen as [B, H, L, E]). Params: out, q, k, v, then mask.
bool flash_attention_fits(const AttentionParams& p, const StridedLayout& out);
Expected<GeneratedKernel> flash_attention_kernel(const AttentionParams& p, const StridedLayout& out, int sm_count = 0);

// The same attention for a few query rows per key head (a decode step: L
// below 16 and G * L at most 16 rows), FlashDecoding-style: the first kernel
// splits the keys into chunks of 64, a block per (chunk, key head, batch)
// writing partial softmax states to `part` (float32, decode_attention_part_floats
// of them); the second merges them into out. A chunk the mask hides from every
// row reads no keys or values. float32 (head sizes up to 64), float16 and
// bfloat16 (up to 128); unit last strides. Params: part, q, k, v, then mask;
// then out, part.
bool decode_attention_fits(const AttentionParams& p, const StridedLayout& out);
int64_t decode_attention_part_floats(const AttentionParams& p);
Expected<std::array<GeneratedKernel, 2>> decode_attention_kernels(const AttentionParams& p, const StridedLayout& out);

// Rows of a table picked by indices: out[i, :] = table[index[i], :] with `rows`
// indices (int64 or int32, contiguous) into a contiguous [table_rows, cols]
// table. An index outside [-table_rows, table_rows) sets *error to `error_code`
// and writes zeros. Params: out, table, index, error (int32).
Expected<GeneratedKernel> gather_rows_kernel(DType dtype, DType index_dtype, int64_t rows, int64_t table_rows,
                                             int64_t cols, int error_code);

// index_select along a dim other than the first: out[o, j, :] =
// table[o, index[j], :] for a contiguous table [outer, table_rows, cols] and
// `count` indices; out of range as gather_rows. Params: out, table, index, error.
Expected<GeneratedKernel> index_select_kernel(DType dtype, DType index_dtype, int64_t outer, int64_t table_rows,
                                              int64_t count, int64_t cols, int error_code);

// Softmax over the rows of attention scores [B*H*L, S] (contiguous, dtype of
// `dtype`), with an optional mask broadcast to [B, H, L, S] through its strides
// (bool: false masks out; float: added) and causal (top-left aligned) masking;
// fully masked rows become zeros. float32 inside. Params: out, scores, then mask.
Expected<GeneratedKernel> attention_softmax_kernel(DType dtype, int64_t B, int64_t H, int64_t L, int64_t S,
                                                   const StridedLayout* mask, bool causal);

// A [N, C, H, W] tensor of any strides into channels-last storage of P >= C
// channels, zeros in channels C..P-1 (a convolution's input padded to a
// channel count its tensor-core kernels take). Params: out, in.
Expected<GeneratedKernel> pad_channels_kernel(const StridedLayout& in, int64_t padded_channels);

// Convolution patches as rows of a matrix: out[(n*OH + oh)*OW + ow][(r*S + s)*C + c] =
// in[n, c, oh*sh - ph + r*dh, ow*sw - pw + s*dw] (zero outside the image), in of any
// strides (logical NCHW), out contiguous [N*OH*OW, R*S*C]. Params: out, in.
struct Im2colParams {
  int64_t r = 1, s = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, oh = 1, ow = 1;
};
Expected<GeneratedKernel> im2col_kernel(const Im2colParams& p, const StridedLayout& in);

// torch.gather: out[c] = in[c with c[dim] replaced by index[c]] for every
// coordinate c of index's sizes (out and index share sizes; any strides). An
// index outside [-in.sizes[dim], in.sizes[dim]) sets *error to error_code and
// writes zero. Params: out, in, index, error (int32).
// kiln.rotary: out = round(x * cos) + round(rotate_half(x) * sin), rounded, over
// out's sizes (out contiguous; x, cos and sin strided, cos and sin expanded to
// out's sizes with zero strides). The last dim is even. Params: out, x, cos, sin.
Expected<GeneratedKernel> rotary_kernel(const StridedLayout& out, const StridedLayout& x, const StridedLayout& cos,
                                        const StridedLayout& sin);

// HF-style RMSNorm of a 16-bit model in one pass per row (rows x cols,
// contiguous): y = to_T(x * rsqrt(mean(x^2) + eps)) computed in float32, then
// out = to_T(weight * y), rounding as the separate ops do. Params: out, in, weight.
Expected<GeneratedKernel> rms_norm_cast_kernel(DType dtype, int64_t rows, int64_t cols, double eps);

Expected<GeneratedKernel> gather_kernel(const StridedLayout& out, const StridedLayout& in, const StridedLayout& index,
                                        int64_t dim, int error_code);

// torch.index with index tensors for `count` consecutive dims of `in` from
// `first` (Nones around them keep those dims whole): out has in's dims
// before `first`, then the indices' broadcast sizes (`index_rank` dims), then
// in's dims after first + count. Each index layout is given at out's sizes
// (zero strides where it does not vary). An index outside [-size, size) of
// its dim sets *error to error_code and writes zero. Params: out, in, each
// index, error (int32).
//
// With `put`, index_put into `in` (self, written in place): `out` is the
// values, given at the indexed sizes (broadcast through zero strides), each
// written to self at its indices (or, with `accumulate`, added atomically:
// float32, float64, the 16-bit floats, int64 and int32). An index out of
// range sets the error word and writes nothing. Params: values, self, each
// index, error.
enum class IndexAccess { kRead, kPut, kAccumulate };
Expected<GeneratedKernel> index_kernel(const StridedLayout& out, const StridedLayout& in,
                                       const std::vector<StridedLayout>& indices, int64_t first, int64_t index_rank,
                                       int error_code, IndexAccess access = IndexAccess::kRead);

// out = cond ? a : b (torch.where): cond a bool layout, a and b layouts of
// out's dtype (or, for a floating out, of any floating dtype, converted), all
// three of out's sizes (broadcast through zero strides).
// Params: out, cond, a, b.
Expected<GeneratedKernel> where_kernel(const StridedLayout& out, const StridedLayout& cond, const StridedLayout& a,
                                       const StridedLayout& b);

// Floating comparison out = a OP b (OP "<", "<=", ">", ">=", "==" or "!=",
// out bool): a and b float32, float16 or bfloat16 layouts (of any two of
// these) at out's sizes, compared in float; without b the number `scalar`,
// rounded to a's dtype first. Params: out, a[, b].
Expected<GeneratedKernel> compare_kernel(const std::string& op, const StridedLayout& out, const StridedLayout& a,
                                         const StridedLayout* b, double scalar);

// Integer arithmetic out = a OP b (OP "+", "-" or "*", wrapping, with b times
// `alpha` for + and -: torch's add/sub) or comparison (OP "<", "<=", ">",
// ">=", "==" or "!=", out bool); a and b are int64 or int32 layouts of one
// dtype and out's sizes (broadcast through zero strides), or without b the
// constant `scalar` in its place. Params: out, a[, b].
Expected<GeneratedKernel> integer_binary_kernel(const std::string& op, const StridedLayout& out,
                                                const StridedLayout& a, const StridedLayout* b, int64_t scalar,
                                                int64_t alpha);

// A transposed convolution's output from a GEMM's columns (kiln/im2col.cuh's
// col2im): n images of h x w in, k channels of oh x ow out, an r x s filter,
// its strides, padding and dilation, with a bias when has_bias.
// Params: out, cols, bias.
struct Col2imParams {
  DType dtype = DType::Float32;
  int64_t n = 1, k = 1, h = 1, w = 1, oh = 1, ow = 1, r = 1, s = 1;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool has_bias = false;
};
Expected<GeneratedKernel> col2im_kernel(const Col2imParams& p);

// A pad that reads past the edges (kiln/index.cuh's pad_edges): out
// (contiguous) from in of the same rank, each dim's `before` pad (negative:
// cropped) reflected (mode 0), replicated (1) or wrapped (2) back inside.
// Params: out, in.
Expected<GeneratedKernel> pad_edges_kernel(const StridedLayout& out, const StridedLayout& in,
                                           const std::vector<int64_t>& before, int mode);

// torch.scatter, scatter_add, scatter_reduce, index_add and index_reduce
// (kiln/index.cuh's scatter): over `space`, each src element (through
// src_strides; all 0 for a value) lands in dst (through dst_strides) at its
// coordinates with dim's replaced by the index's entry there (through
// index_strides); an entry outside [0, extent) sets *error to error_code.
// Phase 0 puts the op's identity where values land (a reduction without
// self), 1 combines, 2 divides Mean's sums by their counts over dst's
// `dst_numel` elements. Put takes float32, the 16-bit floats, int64, int32
// and bool; the reductions all but bool. Params: dst, src, index, count
// (int32, Mean), error.
enum class ScatterOp { kPut = 0, kAdd = 1, kMul = 2, kMax = 3, kMin = 4, kMean = 5 };
struct ScatterShape {
  DType dtype = DType::Float32, index_dtype = DType::Int64;
  std::vector<int64_t> space, index_strides, src_strides, dst_strides;
  int64_t dim = 0, extent = 0, dst_numel = 0;
  double alpha = 1;  // Add's scale of each value
};
Expected<GeneratedKernel> scatter_kernel(const ScatterShape& s, ScatterOp op, int phase, int error_code);

// index_copy's scatter: out[o, index[j], i] = src[o, j, i] with src viewed as
// [outer, count, inner] (contiguous) and out as [outer, out_dim, inner]
// (contiguous); index has `count` int64 or int32 entries. An index outside
// [0, out_dim) sets *error to error_code and writes nothing for that row.
// Params: out, src, index, error (int32).
Expected<GeneratedKernel> index_copy_kernel(DType dtype, DType index_dtype, int64_t outer, int64_t count,
                                            int64_t inner, int64_t out_dim, int error_code);

// torch.arange for integers: out[i] = start + i * step (wrapping) for i < n,
// out int64 or int32 and contiguous. Params: out.
Expected<GeneratedKernel> arange_kernel(DType dtype, int64_t n, int64_t start, int64_t step);

// out[0] = value, an int64 0-d tensor (a size an engine gives back). Params: out.
Expected<GeneratedKernel> scalar_fill_kernel(int64_t value);

// Matrix-vector products for few rows (a decoder's one token): row-major
// c (m x n) = act(alpha * a (m x k) * w^T + bias), w stored as n rows of k
// (a linear layer's weight). Warps stream w's rows once with 16-byte loads,
// accumulate in float32 and, when n is small, split k among the warps of a
// block. Needs k, lda and ldw multiples of 16 bytes' worth of elements and
// a, w 16-byte aligned (gemv_fits). Params: c, a, w, then bias (if has_bias).
// Activation "swiglu": a gated MLP's gate and up products at once, c's column
// j = silu(gate_j) * up_j with gate_j the product with w's row gate_row + j
// (and its bias element) and up_j with row up_row + j; n is c's width.
struct GemvShape {
  DType dtype = DType::BFloat16;  // float32, float16 or bfloat16: a, w, c and bias
  int64_t m = 1, n = 0, k = 0;
  int64_t lda = 0, ldw = 0, ldc = 0;  // in elements
  float alpha = 1.0f;
  bool has_bias = false;
  std::string activation = "none";   // "none", "relu", "gelu" (tanh approximation, as cuBLASLt's) or "swiglu"
  int64_t gate_row = 0, up_row = 0;  // "swiglu": the first rows of w (and bias elements) of gate and up
  // w stored as FP8 e4m3 bytes with a float32 scale per row
  // (DeviceConstant::fp8_rows): params c, a, w, scales, then bias; k and ldw
  // multiples of 16.
  bool fp8_weights = false;
};
// The largest m gemv_kernel takes.
constexpr int64_t kGemvMaxRows = 8;
// Whether gemv_kernel takes `s` (sizes, dtype, vector alignment of k and the leading dimensions).
bool gemv_fits(const GemvShape& s);
Expected<GeneratedKernel> gemv_kernel(const GemvShape& s);

}  // namespace kiln::cuda
