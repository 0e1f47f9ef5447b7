// The CUDA builder's layers, gathers and index writes: embedding rows, torch.gather and torch.index, index_copy and
// index_put.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string_view>

#include "backends/cuda/cuda_layers.h"

namespace kiln::cuda::layers {

Status emit_gather_rows(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  const bool emb = n.op == OpKind::kEmbedding;
  KILN_ASSIGN_OR_RETURN(TRef table, b.ref(value_arg(n, emb ? "weight" : "self")));
  KILN_ASSIGN_OR_RETURN(table, b.contiguous(table, n.name, dt));
  KILN_ASSIGN_OR_RETURN(TRef idx, b.ref(value_arg(n, emb ? "indices" : "index")));
  KILN_ASSIGN_OR_RETURN(idx, b.contiguous(idx, n.name));
  if (table.sizes.empty()) return invalid_argument("rows gathered from a 0-d table");
  const int64_t rows = prod(idx.sizes);
  const size_t d = emb ? 0 : static_cast<size_t>(norm_dim(int_arg(n, "dim").value_or(0), table.sizes.size()));
  const int64_t table_rows = table.sizes[d];
  const int64_t outer = prod(table.sizes, 0, d), cols = prod(table.sizes, d + 1);
  TRef o = b.new_tensor(dt, static_sizes(out));
  const int code = b.add_error_layer(n.name);
  // Along the first dim: rows of a table; along another: one gather per outer slice.
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, d == 0 ? gather_rows_kernel(dt, idx.dtype, rows, table_rows, cols, code)
                                                  : index_select_kernel(dt, idx.dtype, outer, table_rows, rows, cols, code));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, table.buf, idx.buf, b.error_word()}));
  b.bind(out, o);
  return Status::ok();
}

namespace {

// torch.index (x[i, j], x[:, i]): index tensors for consecutive dims of
// self, Nones before and after them; nullopt when the indices are not of
// that form (a bool mask, whose result size depends on the data, or index
// tensors apart).
struct IndexRead {
  int64_t first = 0;
  std::vector<const ir::Value*> indices;
};

// The indices of torch.index or index_put: Tensor?[] (Nones among them) or
// Tensor[] (none), as the program spells it.
std::vector<std::optional<ir::Value*>> index_list(const ir::Node& n) {
  std::vector<std::optional<ir::Value*>> all;
  const ir::Arg* arg = n.find("indices");
  if (const auto* opt = arg ? std::get_if<std::vector<std::optional<ir::Value*>>>(arg) : nullptr) all = *opt;
  if (const auto* plain = arg ? std::get_if<std::vector<ir::Value*>>(arg) : nullptr)
    all.assign(plain->begin(), plain->end());
  return all;
}

std::optional<IndexRead> index_read(const ir::Node& n) {
  const std::vector<std::optional<ir::Value*>> all = index_list(n);
  const auto* list = &all;
  const ir::Value* self = value_arg(n, "self");
  if (list->empty() || !self || self->kind != ir::ValueKind::kTensor || n.outputs.size() != 1) return std::nullopt;
  IndexRead r;
  size_t k = 0;
  while (k < list->size() && !(*list)[k]) ++k;
  r.first = static_cast<int64_t>(k);
  for (; k < list->size() && (*list)[k]; ++k) {
    const ir::Value* v = *(*list)[k];
    if (v->kind != ir::ValueKind::kTensor || (v->type.dtype != DType::Int64 && v->type.dtype != DType::Int32))
      return std::nullopt;
    r.indices.push_back(v);
  }
  for (; k < list->size(); ++k)
    if ((*list)[k]) return std::nullopt;
  if (r.indices.empty() || list->size() > self->type.sizes.size()) return std::nullopt;
  return r;
}

// The index tensors of `r` as layouts over the indexed space `space` (each
// broadcast to `bshape`, the indices' sizes, which sit in space from r.first;
// stride 0 along every other dim), with their buffers.
struct IndexOperands {
  std::vector<StridedLayout> layouts;
  std::vector<BufferRef> bufs;
};
Expected<IndexOperands> index_operands(Builder& b, const IndexRead& r, const std::vector<int64_t>& space,
                                       const std::vector<int64_t>& bshape) {
  IndexOperands ops;
  for (const ir::Value* v : r.indices) {
    KILN_ASSIGN_OR_RETURN(TRef t, b.ref(v));
    KILN_ASSIGN_OR_RETURN(TRef wide, expanded(t, bshape));
    StridedLayout l{t.dtype, space, std::vector<int64_t>(space.size(), 0)};
    for (size_t d = 0; d < bshape.size(); ++d) l.strides[static_cast<size_t>(r.first) + d] = wide.strides[d];
    ops.layouts.push_back(std::move(l));
    ops.bufs.push_back(t.buf);
  }
  return ops;
}

// Launches an index kernel: `a` (the output read into, or the values), self, the indices, the error word.
Status launch_index(Builder& b, const std::string& layer, GeneratedKernel k, BufferRef a, BufferRef self,
                    const IndexOperands& ops) {
  std::vector<BufferRef> all{a, self};
  all.insert(all.end(), ops.bufs.begin(), ops.bufs.end());
  all.push_back(b.error_word());
  return b.launch(layer, std::move(k), all);
}

Status emit_index(Builder& b, const ir::Node& n) {
  auto r = index_read(n);
  if (!r) return unsupported(n.name + ": an index other than tensors for consecutive dims");
  const ir::Value* out = n.outputs[0];
  const std::vector<int64_t> sizes = static_sizes(out);
  const DType dt = b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  if (x.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  }
  const int64_t count = static_cast<int64_t>(r->indices.size());
  const int64_t index_rank = static_cast<int64_t>(sizes.size()) - static_cast<int64_t>(x.sizes.size()) + count;
  if (index_rank < 0) return invalid_argument(n.name + ": its result has fewer dims than the index leaves");
  const std::vector<int64_t> bshape(sizes.begin() + r->first, sizes.begin() + r->first + index_rank);
  KILN_ASSIGN_OR_RETURN(IndexOperands ops, index_operands(b, *r, sizes, bshape));
  TRef o = b.new_tensor(dt, sizes);
  const int code = b.add_error_layer(n.name);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k,
                        index_kernel(o.layout(), x.layout(), ops.layouts, r->first, index_rank, code));
  KILN_TRY(launch_index(b, n.name, std::move(k), o.buf, x.buf, ops));
  b.bind(out, o);
  return Status::ok();
}

}  // namespace

Status emit_gather(Builder& b, const ir::Node& n) {
  if (n.op == OpKind::kIndexTensor) return emit_index(b, n);
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  if (x.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  }
  KILN_ASSIGN_OR_RETURN(TRef idx, b.ref(value_arg(n, "index")));
  const int64_t dim = norm_dim(int_arg(n, "dim").value_or(0), x.sizes.size());
  TRef o = b.new_tensor(dt, static_sizes(out));
  const int code = b.add_error_layer(n.name);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, gather_kernel(o.layout(), x.layout(), idx.layout(), dim, code));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf, idx.buf, b.error_word()}));
  b.bind(out, o);
  return Status::ok();
}

namespace {

// A write of rows at positions along one dim: index_copy or kiln.cache_write
// (a position out of range is an error). index_put, which counts negative
// positions from the end, never comes here (emit_index_put).
struct IndexWrite {
  const ir::Value* self = nullptr;
  const ir::Value* index = nullptr;
  const ir::Value* source = nullptr;
  int64_t dim = 0;
  std::vector<int64_t> rows;  // the source's sizes as written: self's with dim's size the index count
};

std::optional<IndexWrite> index_write(const ir::Node& n) {
  IndexWrite w;
  w.self = value_arg(n, "self");
  if (!w.self || n.outputs.size() != 1) return std::nullopt;
  const size_t rank = std::max<size_t>(1, w.self->type.sizes.size());
  w.index = value_arg(n, "index");
  w.source = value_arg(n, "source");
  w.dim = norm_dim(int_arg(n, "dim").value_or(0), rank);
  if (!w.index || !w.source || w.index->type.sizes.size() > 1 || w.dim < 0 || w.dim >= static_cast<int64_t>(rank))
    return std::nullopt;
  w.rows = w.self->type.sizes.empty() ? std::vector<int64_t>{1} : static_sizes(w.self);
  w.rows[static_cast<size_t>(w.dim)] = w.index->type.sizes.empty() ? 1 : w.index->type.sizes[0].value;
  // The source: exactly the rows, or the rows without leading 1s.
  std::vector<int64_t> src = static_sizes(w.source);
  if (src.empty()) src = {1};
  if (src.size() > w.rows.size()) return std::nullopt;
  const size_t lead = w.rows.size() - src.size();
  for (size_t d = 0; d < w.rows.size(); ++d)
    if (d < lead ? w.rows[d] != 1 : w.rows[d] != src[d - lead]) return std::nullopt;
  return w;
}

// The sizes the shapes broadcast to (aligned right), or nullopt.
std::optional<std::vector<int64_t>> broadcast_all(const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes)
    for (size_t k = 0; k < s.size(); ++k) {
      int64_t& o = out[rank - s.size() + k];
      if (s[k] != 1 && o != 1 && s[k] != o) return std::nullopt;
      if (o == 1) o = s[k];
    }
  return out;
}

// index_put with index tensors for consecutive dims (Nones around them),
// values broadcast to the indexed sizes: self copied, then each value
// written (or, with accumulate, added atomically) at its indices.
Status emit_index_put(Builder& b, const ir::Node& n) {
  std::optional<IndexRead> r = index_read(n);
  if (!r) return unsupported(n.name + ": an index_put other than index tensors for consecutive dims");
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  TRef dst = b.new_tensor(dt, static_sizes(out));
  if (dst.sizes != x.sizes) return invalid_argument(n.name + ": index_put's result differs from self in size");
  KILN_ASSIGN_OR_RETURN(GeneratedKernel ck, copy_kernel(dst.layout(), x.layout()));
  KILN_TRY(b.launch(n.name, std::move(ck), {dst.buf, x.buf}));
  // The indexed space: self's dims before the indices, their broadcast sizes, self's dims after.
  std::vector<std::vector<int64_t>> index_shapes;
  for (const ir::Value* v : r->indices) index_shapes.push_back(static_sizes(v));
  std::optional<std::vector<int64_t>> bshape = broadcast_all(index_shapes);
  if (!bshape) return invalid_argument(n.name + ": its index tensors do not broadcast together");
  const auto first = static_cast<size_t>(r->first), count = r->indices.size();
  std::vector<int64_t> space(dst.sizes.begin(), dst.sizes.begin() + static_cast<std::ptrdiff_t>(first));
  space.insert(space.end(), bshape->begin(), bshape->end());
  space.insert(space.end(), dst.sizes.begin() + static_cast<std::ptrdiff_t>(first + count), dst.sizes.end());
  KILN_ASSIGN_OR_RETURN(IndexOperands ops, index_operands(b, *r, space, *bshape));
  KILN_ASSIGN_OR_RETURN(TRef values, b.ref(value_arg(n, "values")));
  KILN_ASSIGN_OR_RETURN(values, b.contiguous(values, n.name, dt));
  KILN_ASSIGN_OR_RETURN(TRef wide_values, expanded(values, space));
  if (prod(space) > 0) {
    const int code = b.add_error_layer(n.name);
    KILN_ASSIGN_OR_RETURN(
        GeneratedKernel k,
        index_kernel(wide_values.layout(), dst.layout(), ops.layouts, r->first, static_cast<int64_t>(bshape->size()),
                     code, bool_arg(n, "accumulate") ? IndexAccess::kAccumulate : IndexAccess::kPut));
    KILN_TRY(launch_index(b, n.name, std::move(k), values.buf, dst.buf, ops));
  }
  b.bind(out, dst);
  return Status::ok();
}

}  // namespace

// index_copy / index_put (into a copy of self) and kiln.cache_write (into the
// engine input slot of self itself: the caller's cache, written in place).
Status emit_index_copy(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  if (n.op == OpKind::kIndexPut) return emit_index_put(b, n);  // negative positions count from the end there
  std::optional<IndexWrite> w = index_write(n);
  if (!w) return unsupported("not a write of rows at positions");
  const bool in_place = n.op == OpKind::kCacheWrite;
  TRef dst;
  if (in_place) {
    std::optional<TRef> slot = b.input_slot(w->self);
    if (!slot) return internal_error("writes in place into '" + w->self->name + "', which is not an engine input");
    dst = *slot;
  } else {
    KILN_ASSIGN_OR_RETURN(TRef x, b.ref(w->self));
    dst = b.new_tensor(b.compute_dtype(out->type.dtype), static_sizes(out));
    KILN_ASSIGN_OR_RETURN(GeneratedKernel ck, copy_kernel(dst.layout(), x.layout()));
    KILN_TRY(b.launch(n.name, std::move(ck), {dst.buf, x.buf}));
  }
  KILN_ASSIGN_OR_RETURN(TRef src, b.ref(w->source));
  KILN_ASSIGN_OR_RETURN(src, b.contiguous(src, n.name, dst.dtype));
  KILN_ASSIGN_OR_RETURN(TRef idx, b.ref(w->index));
  KILN_ASSIGN_OR_RETURN(idx, b.contiguous(idx, n.name));
  const std::vector<int64_t>& rows = w->rows;
  const std::vector<int64_t> dsizes = dst.sizes.empty() ? std::vector<int64_t>{1} : dst.sizes;
  const auto d = static_cast<size_t>(w->dim);
  if (dsizes.size() != rows.size() || prod(src.sizes) != prod(rows) || prod(idx.sizes) != rows[d])
    return invalid_argument("the rows written, self and the index do not fit together");
  const int code = b.add_error_layer(n.name);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, index_copy_kernel(dst.dtype, idx.dtype, prod(rows, 0, d), rows[d],
                                                             prod(rows, d + 1), dsizes[d], code));
  KILN_TRY(b.launch(n.name, std::move(k), {dst.buf, src.buf, idx.buf, b.error_word()}));
  if (in_place && b.compute_dtype(dst.dtype) != dst.dtype) {
    KILN_ASSIGN_OR_RETURN(TRef cast, b.contiguous(dst, n.name, b.compute_dtype(dst.dtype)));
    b.bind(out, cast);
  } else {
    b.bind(out, dst);
  }
  return Status::ok();
}

namespace {

// A scatter-family node read: what lands where, and how it combines.
struct ScatterForm {
  const ir::Value* self = nullptr;
  const ir::Value* index = nullptr;
  const ir::Value* src = nullptr;  // null: `value` lands everywhere
  double value = 0;
  int64_t dim = 0;
  ScatterOp op = ScatterOp::kPut;
  bool include_self = true;
  bool along = false;  // index_add / index_reduce: a 1-d index of slices along dim
  double alpha = 1;
};

// `n` read as a scatter into `f`, or why it cannot be.
std::string scatter_form(const ir::Node& n, ScatterForm& f) {
  f.self = value_arg(n, "self");
  f.index = value_arg(n, "index");
  const bool value = n.op == OpKind::kScatterValue || n.op == OpKind::kScatterValueReduce;
  f.along = n.op == OpKind::kIndexAdd || n.op == OpKind::kIndexReduce;
  f.src = value ? nullptr : value_arg(n, f.along ? "source" : "src");
  if (!f.self || !f.index || (!value && !f.src) || n.outputs.size() != 1) return "a scatter without its operands";
  if (value) {
    std::optional<double> v = double_arg(n, "value");
    if (!v) return "a scatter of a value that is not a number";
    f.value = *v;
    // Into integers the value truncates (as the CPU kernels convert it), into bool it is its truth.
    if (f.self->type.dtype == DType::Bool) {
      f.value = f.value != 0 ? 1 : 0;
    } else if (!floating(f.self->type.dtype)) {
      if (!std::isfinite(f.value) || std::fabs(f.value) > 9.0e15)
        return "a scatter of a value an integer tensor cannot hold exactly";
      f.value = std::trunc(f.value);
    }
  }
  const std::string reduce = string_arg(n, "reduce");
  switch (n.op) {
    case OpKind::kScatterSrc:
    case OpKind::kScatterValue: f.op = ScatterOp::kPut; break;
    case OpKind::kScatterAdd:
    case OpKind::kIndexAdd: f.op = ScatterOp::kAdd; break;
    case OpKind::kScatterReduce:
    case OpKind::kScatterValueReduce:
      if (reduce != "add" && reduce != "multiply") return "scatter with reduce '" + reduce + "'";
      f.op = reduce == "add" ? ScatterOp::kAdd : ScatterOp::kMul;
      break;
    case OpKind::kScatterReduceTwo:
    case OpKind::kIndexReduce:
      if (reduce == "sum" && n.op == OpKind::kScatterReduceTwo) {
        f.op = ScatterOp::kAdd;
      } else if (reduce == "prod" || reduce == "mean" || reduce == "amax" || reduce == "amin") {
        f.op = reduce == "prod"   ? ScatterOp::kMul
               : reduce == "mean" ? ScatterOp::kMean
               : reduce == "amax" ? ScatterOp::kMax
                                  : ScatterOp::kMin;
      } else {
        return std::string(ir::op_target(n.op)) + " with reduce '" + reduce + "'";
      }
      f.include_self = bool_arg(n, "include_self", true);
      break;
    default: return "not a scatter";
  }
  if (n.op == OpKind::kIndexAdd) f.alpha = double_arg(n, "alpha").value_or(1);
  const size_t r = std::max<size_t>(1, rank(f.self));
  if (r > 8) return "a scatter into more than 8 dims";
  const std::optional<int64_t> dim = int_arg(n, "dim");
  if (!dim) return "a scatter along a dim that is not a number";
  f.dim = norm_dim(*dim, r);
  if (f.dim < 0 || f.dim >= static_cast<int64_t>(r)) return "a scatter along a dim self lacks";
  const DType it = f.index->type.dtype;
  if (it != DType::Int64 && !(f.along && it == DType::Int32)) return "a scatter with indices that are not int64";
  if (f.src && f.src->type.dtype != f.self->type.dtype) return "a scatter of values whose dtype differs from self's";
  if (f.self->type.dtype == DType::Bool && f.op != ScatterOp::kPut) return "a scatter reducing bool elements";
  if (f.along ? rank(f.index) > 1 || std::max<size_t>(1, rank(f.src)) != r
              : std::max<size_t>(1, rank(f.index)) != r || (f.src && std::max<size_t>(1, rank(f.src)) != r))
    return "a scatter whose index, values and self differ in rank";
  return "";
}

// A value's sizes and strides with a 0-d tensor as [1].
std::vector<int64_t> at_least_1d(const std::vector<int64_t>& v, int64_t one) {
  return v.empty() ? std::vector<int64_t>{one} : v;
}

// The scatter's phases into dst (see emit_scatter).
Status launch_scatter(Builder& b, const std::string& layer, const ScatterForm& f, const ScatterShape& s,
                      const TRef& dst, const TRef& src, const TRef& idx) {
  const int code = b.add_error_layer(layer);
  BufferRef count = b.error_word();  // read by Mean only
  if (f.op == ScatterOp::kMean) {
    TRef c = b.new_tensor(DType::Int32, dst.sizes.empty() ? std::vector<int64_t>{1} : dst.sizes);
    KILN_ASSIGN_OR_RETURN(GeneratedKernel fk, fill_kernel(c.layout(), f.include_self ? 1 : 0));
    KILN_TRY(b.launch(layer, std::move(fk), {c.buf}));
    count = c.buf;
  }
  const std::vector<BufferRef> args{dst.buf, src.buf, idx.buf, count, b.error_word()};
  if (f.op != ScatterOp::kPut && !f.include_self) {
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k0, scatter_kernel(s, f.op, 0, code));
    KILN_TRY(b.launch(layer, std::move(k0), args));
  }
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k1, scatter_kernel(s, f.op, 1, code));
  KILN_TRY(b.launch(layer, std::move(k1), args));
  if (f.op == ScatterOp::kMean) {
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k2, scatter_kernel(s, f.op, 2, code));
    KILN_TRY(b.launch(layer, std::move(k2), args));
  }
  return Status::ok();
}

}  // namespace

// scatter, scatter_add, scatter_reduce, index_add, index_reduce: self
// copied, then the values land (phase 0 clears their places for a reduction
// without self, phase 2 divides mean's sums).
std::string scatter_refusal(const ir::Node& n) {
  ScatterForm f;
  return scatter_form(n, f);
}

Status emit_scatter(Builder& b, const ir::Node& n) {
  ScatterForm f;
  if (std::string why = scatter_form(n, f); !why.empty()) return unsupported(n.name + ": " + why);
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(f.self));
  const TRef result = b.new_tensor(dt, static_sizes(out));
  if (result.sizes != x.sizes) return invalid_argument(n.name + ": the result differs from self in size");
  // 16-bit reductions combine in float32, rounded once at the end as the CPU kernels do.
  const bool wide = f.op != ScatterOp::kPut && (dt == DType::Float16 || dt == DType::BFloat16);
  const DType work = wide ? DType::Float32 : dt;
  const TRef dst = wide ? b.new_tensor(work, result.sizes) : result;
  KILN_ASSIGN_OR_RETURN(GeneratedKernel ck, copy_kernel(dst.layout(), x.layout()));
  KILN_TRY(b.launch(n.name, std::move(ck), {dst.buf, x.buf}));
  const std::vector<int64_t> self_sizes = at_least_1d(dst.sizes, 1);
  const size_t r = self_sizes.size(), d = static_cast<size_t>(f.dim);
  KILN_ASSIGN_OR_RETURN(TRef idx, b.ref(f.index));
  TRef src;
  if (f.src) {
    KILN_ASSIGN_OR_RETURN(src, b.ref(f.src));
    if (src.dtype != work) {
      KILN_ASSIGN_OR_RETURN(src, b.contiguous(src, n.name, work));
    }
  } else {
    src = b.new_tensor(work, {1});
    KILN_ASSIGN_OR_RETURN(GeneratedKernel fk, fill_kernel(src.layout(), f.value));
    KILN_TRY(b.launch(n.name, std::move(fk), {src.buf}));
  }
  ScatterShape s;
  s.dtype = work;
  s.index_dtype = idx.dtype;
  s.dim = f.dim;
  s.extent = self_sizes[d];
  s.dst_numel = prod(self_sizes);
  s.alpha = f.alpha;
  s.dst_strides = contiguous_strides_of(self_sizes);
  const std::vector<int64_t> src_sizes = f.src ? at_least_1d(src.sizes, 1) : std::vector<int64_t>(r, 1);
  s.src_strides = f.src ? at_least_1d(src.strides, 1) : std::vector<int64_t>(r, 0);
  if (f.along) {
    // Slice i of the source lands in slice index[i] of self along dim.
    s.space = src_sizes;
    s.index_strides.assign(r, 0);
    s.index_strides[d] = idx.strides.empty() ? 0 : idx.strides[0];
    for (size_t k = 0; k < r; ++k)
      if (k == d ? src_sizes[k] != prod(idx.sizes) : src_sizes[k] != self_sizes[k])
        return invalid_argument(n.name + ": the source's slices do not fit self and the index");
  } else {
    s.space = at_least_1d(idx.sizes, 1);
    s.index_strides = at_least_1d(idx.strides, 1);
    for (size_t k = 0; k < r; ++k)
      if ((k != d && s.space[k] > self_sizes[k]) || (f.src && s.space[k] > src_sizes[k]))
        return invalid_argument(n.name + ": the index is larger than self or the values at dim " + std::to_string(k));
  }
  b.bind(out, result);
  if (prod(s.space) > 0) KILN_TRY(launch_scatter(b, n.name, f, s, dst, src, idx));
  if (wide) {
    KILN_ASSIGN_OR_RETURN(GeneratedKernel back, copy_kernel(result.layout(), dst.layout()));
    KILN_TRY(b.launch(n.name, std::move(back), {result.buf, dst.buf}));
  }
  return Status::ok();
}

// Embedding rows and index_select along any dim by integer indices.
std::string gather_rows_refusal(const ir::Node& n) {
  const ir::Value* idx = value_arg(n, n.op == OpKind::kEmbedding ? "indices" : "index");
  if (!idx || (idx->type.dtype != DType::Int64 && idx->type.dtype != DType::Int32)) return "non-integer indices";
  if (rank(value_arg(n, n.op == OpKind::kEmbedding ? "weight" : "self")) < 1) return "rows of a 0-d table";
  if (n.op == OpKind::kIndexSelect) {
    const ir::Value* x = value_arg(n, "self");
    if (norm_dim(int_arg(n, "dim").value_or(0), rank(x)) < 0) return "index_select along a dim the input lacks";
    if (rank(idx) != 1) return "index_select with an index that is not 1-d";
  }
  return "";
}

// torch.gather and torch.index with integer index tensors for consecutive dims.
std::string gather_refusal(const ir::Node& n) {
  if (n.op == OpKind::kIndexTensor) {
    const std::optional<IndexRead> r = index_read(n);
    if (!r)
      return "index with a bool mask (its result's size depends on the data) or with index tensors for dims that "
             "are not consecutive";
    if (r->indices.size() > 4) return "index with more than 4 index tensors";
    if (rank(value_arg(n, "self")) > 6) return "index into more than 6 dims";
    return "";
  }
  const ir::Value* idx = value_arg(n, "index");
  const ir::Value* x = value_arg(n, "self");
  if (!idx || !x || (idx->type.dtype != DType::Int64 && idx->type.dtype != DType::Int32))
    return "gather with non-integer indices";
  if (rank(idx) != rank(x) || rank(x) == 0) return "gather whose index rank differs from the input's";
  if (bool_arg(n, "sparse_grad")) return "gather with sparse_grad";
  return "";
}

// Rows written at positions along one dim (index_copy, index_put, cache
// writes); index_put with integer index tensors for consecutive dims.
std::string index_copy_refusal(const ir::Node& n) {
  if (n.op == OpKind::kIndexPut) {
    const std::optional<IndexRead> r = index_read(n);
    if (!r)
      return "index_put with a bool mask (the count it writes depends on the data) or with index tensors for dims "
             "that are not consecutive";
    if (r->indices.size() > 4) return "index_put with more than 4 index tensors";
    const ir::Value* self = value_arg(n, "self");
    if (rank(self) > 6) return "index_put into more than 6 dims";
    const ir::Value* values = value_arg(n, "values");
    if (!values || values->kind != ir::ValueKind::kTensor || values->type.dtype != self->type.dtype)
      return "index_put of values whose dtype differs from self's";
    size_t index_rank = 0;
    for (const ir::Value* v : r->indices) index_rank = std::max(index_rank, v->type.sizes.size());
    if (values->type.sizes.size() > self->type.sizes.size() - r->indices.size() + index_rank)
      return "index_put of values with more dims than the places they are written to";
    if (bool_arg(n, "accumulate") &&
        !(is_floating(self->type.dtype) || self->type.dtype == DType::Int64 || self->type.dtype == DType::Int32))
      return "index_put accumulating into " + std::string(dtype_name(self->type.dtype)) +
             " (atomic adds take floats, int64 and int32)";
    return "";
  }
  std::optional<IndexWrite> w = index_write(n);
  if (!w) return "index writes other than rows at positions along one dim (one position index, Nones before it)";
  if (w->index->type.dtype != DType::Int64 && w->index->type.dtype != DType::Int32)
    return "index writes with non-integer indices";
  if (w->source->type.dtype != w->self->type.dtype) return "index writes of mixed dtypes";
  return "";
}

// ---- searchsorted, bucketize, histc

// Insertion points (searchsorted, bucketize) of values in a sorted sequence
// of the same dtype; histc; isin.
std::string search_refusal(const ir::Node& n) {
  if (n.op == OpKind::kIsinTensorTensor) {
    const ir::Value* e = value_arg(n, "elements");
    const ir::Value* t = value_arg(n, "test_elements");
    if (!e || !t || (e->type.dtype == DType::Int64) != (t->type.dtype == DType::Int64))
      return "isin of int64 with another dtype";
    return "";
  }
  if (n.op == OpKind::kHistc) {
    const ir::Value* x = value_arg(n, "self");
    const auto lo = double_arg(n, "min"), hi = double_arg(n, "max");
    if (!x || !floating(x->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype)
      return "histc of a non-floating tensor or to another dtype";
    if (!int_arg(n, "bins") || *int_arg(n, "bins") <= 0) return "histc without a positive number of bins";
    if (!lo || !hi || *lo > *hi) return "histc without numbers min <= max";
    return "";
  }
  const bool bucketize = n.op == OpKind::kBucketizeTensor;
  const ir::Value* seq = value_arg(n, bucketize ? "boundaries" : "sorted_sequence");
  const ir::Value* x = value_arg(n, "self");
  if (!seq || !x || seq->type.dtype != x->type.dtype || x->type.dtype == DType::Bool)
    return "insertion points of values of another dtype than the sequence's";
  if (seq->type.sizes.empty()) return "insertion points in a 0-d sequence";
  if (seq->type.sizes.size() != 1) {
    if (seq->type.sizes.size() != x->type.sizes.size()) return "a sequence of another rank than the values'";
    for (size_t k = 0; k + 1 < x->type.sizes.size(); ++k)
      if (seq->type.sizes[k].to_string() != x->type.sizes[k].to_string())
        return "a sequence whose leading dims are not the values'";
  }
  if (const ir::Value* s = value_arg(n, "sorter"); s && s->type.dtype != DType::Int64)
    return "a sorter other than int64";
  if (const auto* side = std::get_if<std::string>(n.find("side")); side && *side != "left" && *side != "right")
    return "a side other than 'left' or 'right'";
  return "";
}

Status emit_search(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  if (n.op == OpKind::kIsinTensorTensor) {
    KILN_ASSIGN_OR_RETURN(TRef e, b.ref(value_arg(n, "elements")));
    KILN_ASSIGN_OR_RETURN(e, b.contiguous(e, n.name));
    KILN_ASSIGN_OR_RETURN(TRef t, b.ref(value_arg(n, "test_elements")));
    KILN_ASSIGN_OR_RETURN(t, b.contiguous(t, n.name));
    TRef o = b.new_tensor(DType::Bool, static_sizes(out));
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k,
                          isin_kernel(e.dtype, t.dtype, prod(e.sizes), prod(t.sizes), bool_arg(n, "invert")));
    KILN_TRY(b.launch(n.name, std::move(k), {o.buf, e.buf, t.buf}));
    b.bind(out, o);
    return Status::ok();
  }
  if (n.op == OpKind::kHistc) {
    const ir::Value* xv = value_arg(n, "self");
    KILN_ASSIGN_OR_RETURN(TRef x, b.ref(xv));
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name));
    const int64_t bins = *int_arg(n, "bins");
    TRef counts = b.new_tensor(DType::Int64, {bins});
    TRef range = b.new_tensor(DType::Float64, {2});
    KILN_ASSIGN_OR_RETURN(GeneratedKernel zero, fill_kernel(counts.layout(), 0.0));
    KILN_TRY(b.launch(n.name, std::move(zero), {counts.buf}));
    KILN_ASSIGN_OR_RETURN(GeneratedKernel r,
                          histogram_range_kernel(x.dtype, *double_arg(n, "min"), *double_arg(n, "max"), prod(x.sizes)));
    KILN_TRY(b.launch(n.name, std::move(r), {range.buf, x.buf}));
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k,
                          histogram_kernel(x.dtype, bins, prod(x.sizes), xv->type.dtype == DType::Float32));
    KILN_TRY(b.launch(n.name, std::move(k), {counts.buf, range.buf, x.buf}));
    KILN_ASSIGN_OR_RETURN(TRef o, b.contiguous(counts, n.name, b.compute_dtype(out->type.dtype)));
    b.bind(out, o);
    return Status::ok();
  }
  const bool bucketize = n.op == OpKind::kBucketizeTensor;
  KILN_ASSIGN_OR_RETURN(TRef seq, b.ref(value_arg(n, bucketize ? "boundaries" : "sorted_sequence")));
  KILN_ASSIGN_OR_RETURN(seq, b.contiguous(seq, n.name));
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "self")));
  KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, seq.dtype));
  bool right = bool_arg(n, "right");
  if (const auto* side = std::get_if<std::string>(n.find("side"))) right = *side == "right";
  const ir::Value* sorter_v = bucketize ? nullptr : value_arg(n, "sorter");
  const int64_t len = seq.sizes.back();
  const int64_t per_row = seq.sizes.size() == 1 ? 0 : (x.sizes.empty() ? 1 : x.sizes.back());
  TRef o = b.new_tensor(out->type.dtype, static_sizes(out));
  const int code = b.add_error_layer(n.name);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, search_sorted_kernel(out->type.dtype, seq.dtype, len, per_row, prod(x.sizes),
                                                                right, sorter_v != nullptr, code));
  if (sorter_v) {
    KILN_ASSIGN_OR_RETURN(TRef sorter, b.ref(sorter_v));
    KILN_ASSIGN_OR_RETURN(sorter, b.contiguous(sorter, n.name));
    KILN_TRY(b.launch(n.name, std::move(k), {o.buf, seq.buf, x.buf, sorter.buf, b.error_word()}));
  } else {
    KILN_TRY(b.launch(n.name, std::move(k), {o.buf, seq.buf, x.buf, b.error_word()}));
  }
  b.bind(out, o);
  return Status::ok();
}

// ---- grid_sampler

// Bilinear, nearest and bicubic (2-D) sampling with zeros, border or
// reflection padding, of batched 4-D and 5-D floating inputs.
std::string grid_sampler_refusal(const ir::Node& n) {
  const ir::Value* x = value_arg(n, "input");
  const ir::Value* g = value_arg(n, "grid");
  if (!x || !g || !floating(x->type.dtype) || !floating(g->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype)
    return "grid sampling of non-floating tensors";
  const size_t r = x->type.sizes.size();
  if ((r != 4 && r != 5) || g->type.sizes.size() != r) return "grid sampling of other than 4-D or 5-D inputs";
  const auto mode = int_arg(n, "interpolation_mode"), padding = int_arg(n, "padding_mode");
  if (!mode || !padding || *mode < 0 || *mode > 2 || (r == 5 && *mode == 2) || *padding < 0 || *padding > 2)
    return "a grid sampling mode other than bilinear, nearest, bicubic (2-D) with zeros, border or reflection padding";
  return "";
}

Status emit_grid_sampler(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "input")));
  KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  KILN_ASSIGN_OR_RETURN(TRef g, b.ref(value_arg(n, "grid")));
  KILN_ASSIGN_OR_RETURN(g, b.contiguous(g, n.name));
  if (g.sizes.empty() || g.sizes[0] != x.sizes[0] || g.sizes.back() != static_cast<int64_t>(x.sizes.size()) - 2)
    return invalid_argument("grid " + shape_to_string(g.sizes) + " does not match input " + shape_to_string(x.sizes));
  const int64_t points = prod(g.sizes, 1, g.sizes.size() - 1);
  TRef o = b.new_tensor(dt, static_sizes(out));
  KILN_ASSIGN_OR_RETURN(
      GeneratedKernel k,
      grid_sampler_kernel(dt, g.dtype, x.sizes, points, static_cast<int>(*int_arg(n, "interpolation_mode")),
                          static_cast<int>(*int_arg(n, "padding_mode")), bool_arg(n, "align_corners")));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf, g.buf}));
  b.bind(out, o);
  return Status::ok();
}

}  // namespace kiln::cuda::layers
