// The CUDA builder's layers, per op family: what each family cannot take
// (an empty string when it can) beside its emitter, one file per family
// (cuda_layers_<family>.cc), and what they share (cuda_layer_args.cc).
// Internal to the CUDA backend; cuda_builder.h declares the dispatch
// (cuda_implements, cuda_refusal, emit_layer).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cuda/cuda_builder.h"

namespace kiln::cuda::layers {

using ir::OpKind;

// ---- a node's arguments (cuda_layer_args.cc)

// The value argument `name` of `n`, or null.
const ir::Value* value_arg(const ir::Node& n, std::string_view name);
// The readers below read an argument `n` does not give as the default its
// op's schema declares (ir::argument_or_default); nullopt, `def`, "" or true
// (is_none) when there is neither.
std::optional<int64_t> int_arg(const ir::Node& n, std::string_view name);
std::optional<double> double_arg(const ir::Node& n, std::string_view name);
bool bool_arg(const ir::Node& n, std::string_view name, bool def = false);
std::string string_arg(const ir::Node& n, std::string_view name);
bool is_none(const ir::Node& n, std::string_view name);
// A list of integers (static sizes or numbers), or nullopt.
std::optional<std::vector<int64_t>> ints_arg(const ir::Node& n, std::string_view name);
// The sizes of `v` (every one static in a network specialized to a shape).
std::vector<int64_t> static_sizes(const ir::Value* v);
// `v`'s rank; 0 for null.
size_t rank(const ir::Value* v);
int64_t norm_dim(int64_t d, size_t rank);
// The product of v[from, to).
int64_t prod(const std::vector<int64_t>& v, size_t from = 0, size_t to = SIZE_MAX);
bool floating(DType t);

// ---- layouts of tensors already placed (cuda_layer_args.cc)

std::vector<int64_t> contiguous_strides_of(const std::vector<int64_t>& sizes);
// PyTorch's rule for a view with new sizes over old strides, or nullopt when
// the layout needs a copy.
std::optional<std::vector<int64_t>> view_strides(const std::vector<int64_t>& old_sizes,
                                                 const std::vector<int64_t>& old_strides,
                                                 const std::vector<int64_t>& new_sizes);
// `in` with new sizes: a view where the strides allow one, else a contiguous copy (a step of `layer`).
Expected<TRef> reshaped(Builder& b, const TRef& in, const std::vector<int64_t>& sizes, const std::string& layer);
// `in` narrowed along `dim` to `size` elements from `start`, every `step`-th.
TRef narrowed(const TRef& in, size_t dim, int64_t start, int64_t size, int64_t step = 1);
// Whether `from` broadcasts to `to` (aligned right: each size equal or 1).
bool broadcasts_to(const std::vector<int64_t>& from, const std::vector<int64_t>& to);
// `t` broadcast to `sizes` (aligned right; stride 0 on broadcast dims), or
// kInvalidArgument when it does not broadcast to them.
Expected<TRef> expanded(const TRef& t, const std::vector<int64_t>& sizes);
// Whether strides lay out `sizes` densely in some dim order (no gaps, no overlap).
bool dense_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);

// ---- the families

// Views, identities, casts, concatenation, constant padding (cuda_layers_views.cc).
Status emit_view(Builder& b, const ir::Node& n);
std::string identity_refusal(const ir::Node& n);
std::string cast_refusal(const ir::Node& n);
Status emit_cast(Builder& b, const ir::Node& n);
std::string cat_refusal(const ir::Node& n);
Status emit_cat(Builder& b, const ir::Node& n);
// as_strided that reads a freshly computed tensor's elements in their own
// order (strides contiguous for its sizes, unit dims aside; no offset): a
// reshape (ATen's decompositions of pools emit it).
std::string as_strided_refusal(const ir::Node& n);
std::string pad_refusal(const ir::Node& n);
Status emit_pad(Builder& b, const ir::Node& n);

// Elementwise programs and the like (cuda_layers_elementwise.cc).
std::string elementwise_refusal(const ir::Node& n);
Status emit_elementwise(Builder& b, const ir::Node& n);
// `prog` over `operands` (each converted to the compute dtype and broadcast
// to out's sizes) into a new tensor bound to `out`: one kernel.
Status emit_program(Builder& b, const std::string& layer, const engine::ElementwiseProgram& prog,
                    const std::vector<const ir::Value*>& operands, const ir::Value* out);
Status emit_program_on(Builder& b, const std::string& layer, const engine::ElementwiseProgram& prog,
                       std::vector<TRef> operands, const ir::Value* out);
// One elementwise op over tensors of any dtypes, promoted as PyTorch does,
// for what the programs above do not take (cuda_layers_pointwise.cc).
bool pointwise_implements(ir::OpKind op);
std::string pointwise_refusal(const ir::Node& n);
Status emit_pointwise(Builder& b, const ir::Node& n);
std::string copy_into_refusal(const ir::Node& n);
Status emit_copy_into(Builder& b, const ir::Node& n);
std::string arange_refusal(const ir::Node& n);
Status emit_arange(Builder& b, const ir::Node& n);

// Matrix products (cuda_layers_gemm.cc).
std::string gemm_refusal(const ir::Node& n);
Status emit_matmul(Builder& b, const ir::Node& n);

// Convolutions (cuda_layers_conv.cc).
std::string conv_refusal(const ir::Node& n);
Status emit_conv(Builder& b, const ir::Node& n);

// Norms, softmax, GroupNorm, reductions, pooling (cuda_layers_rows.cc).
std::string row_refusal(const ir::Node& n);
Status emit_row(Builder& b, const ir::Node& n);
Status emit_group_norm(Builder& b, const ir::Node& n);
std::string reduce_refusal(const ir::Node& n);
Status emit_reduce(Builder& b, const ir::Node& n);
std::string pool_refusal(const ir::Node& n);
Status emit_pool(Builder& b, const ir::Node& n);
Status emit_pool3d(Builder& b, const ir::Node& n);
std::string segment_reduce_refusal(const ir::Node& n);
std::string order_refusal(const ir::Node& n);
Status emit_order(Builder& b, const ir::Node& n);
Status emit_segment_reduce(Builder& b, const ir::Node& n);
// searchsorted, bucketize, histc (cuda_layers_indexing.cc).
std::string search_refusal(const ir::Node& n);
Status emit_search(Builder& b, const ir::Node& n);
// grid_sampler (cuda_layers_indexing.cc).
std::string grid_sampler_refusal(const ir::Node& n);
Status emit_grid_sampler(Builder& b, const ir::Node& n);

// Attention and the rotary embedding (cuda_layers_attention.cc).
std::string attention_refusal(const ir::Node& n);
Status emit_attention(Builder& b, const ir::Node& n);
Status emit_rotary(Builder& b, const ir::Node& n);

// Gathers and index writes (cuda_layers_indexing.cc).
std::string gather_rows_refusal(const ir::Node& n);
Status emit_gather_rows(Builder& b, const ir::Node& n);
std::string gather_refusal(const ir::Node& n);
Status emit_gather(Builder& b, const ir::Node& n);
std::string index_copy_refusal(const ir::Node& n);
Status emit_index_copy(Builder& b, const ir::Node& n);
// scatter, scatter_add, scatter_reduce, index_add and index_reduce.
std::string scatter_refusal(const ir::Node& n);
Status emit_scatter(Builder& b, const ir::Node& n);

}  // namespace kiln::cuda::layers
