// Scatter kernels: the functional forms of writing through a view
// (select_scatter, slice_scatter, as_strided_scatter) and of index_copy /
// index_put. Each returns a fresh tensor: a copy of self with src written in,
// except cache_write, the engine layer that writes into self in place.
#include <algorithm>
#include <numeric>
#include <string>

#include "backends/cpu/advanced_index.h"
#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

// Writes src into `view` (a view of a fresh output), which must have src's shape.
Status write_view(const KernelArgs& a, const Tensor& view, const Tensor& src, const char* what) {
  if (view.sizes() != src.sizes())
    return a.error(std::string("expected src to have a size equal to the ") + what + " of self: src size " +
                   shape_to_string(src.sizes()) + ", " + what + " size " + shape_to_string(view.sizes()));
  copy_into(view, src);
  return Status::ok();
}

Status select_scatter(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor src, a.tensor("src"));
  if (self.dim() == 0) return a.error("select_scatter cannot be applied to a 0-dim tensor");
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  KILN_ASSIGN_OR_RETURN(int64_t index, a.int_arg("index"));
  const int64_t size = self.size(d);
  if (index < -size || index >= size)
    return a.error("select_scatter: index " + std::to_string(index) + " out of range for tensor of size " +
                   shape_to_string(self.sizes()) + " at dimension " + std::to_string(d));
  Tensor out = cast_copy(self, self.dtype());
  KILN_TRY(write_view(a, select_view(out, d, index < 0 ? index + size : index), src, "slice"));
  a.set_output(0, out);
  return Status::ok();
}

Status slice_scatter(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor src, a.tensor("src"));
  if (self.dim() == 0) return a.error("slice_scatter cannot be applied to a 0-dim tensor");
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> start, a.optional_int("start"));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> end, a.optional_int("end"));
  KILN_ASSIGN_OR_RETURN(int64_t step, a.int_arg("step"));
  if (step <= 0) return a.error("slice step must be positive, got " + std::to_string(step));
  const auto [s, e] = clamp_slice(start, end, self.size(d));
  Tensor out = cast_copy(self, self.dtype());
  KILN_TRY(write_view(a, slice_view(out, d, s, e, step), src, "slice"));
  a.set_output(0, out);
  return Status::ok();
}

// A fresh copy of t that keeps t's strides when they are a permutation of a
// dense layout (as clone(memory_format=preserve) does), else contiguous.
Tensor clone_preserving_layout(const Tensor& t) {
  const size_t nd = t.sizes().size();
  std::vector<size_t> order(nd);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return t.strides()[x] < t.strides()[y]; });
  int64_t expected = 1;
  bool dense = true;
  for (size_t i : order) {
    if (t.sizes()[i] == 1) continue;
    dense = dense && t.strides()[i] == expected;
    expected *= t.sizes()[i];
  }
  if (!dense || t.is_contiguous() || t.numel() == 0) return cast_copy(t, t.dtype());
  // Strides of the dense layout: size-1 dims take the stride of their place in the order.
  Shape strides(nd);
  int64_t acc = 1;
  for (size_t i : order) {
    strides[i] = acc;
    acc *= t.sizes()[i];
  }
  Tensor flat = Tensor::zeros(t.dtype(), {t.numel()});
  Tensor out = flat.as_strided(t.sizes(), std::move(strides), 0);
  copy_into(out, t);
  return out;
}

Status as_strided_scatter(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor src, a.tensor("src"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, a.ints("size"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> stride, a.ints("stride"));
  Tensor out = clone_preserving_layout(self);
  KILN_ASSIGN_OR_RETURN(int64_t offset, a.int_arg("storage_offset", out.storage_offset()));
  auto view = Tensor::from_storage(out.storage(), out.dtype(), size, stride, offset);
  if (!view.has_value()) return a.error("as_strided_scatter: " + view.status().message());
  KILN_TRY(write_view(a, *view, src, "strided view"));
  a.set_output(0, out);
  return Status::ok();
}

// Writes source[..., i, ...] into out[..., index[i], ...] along `self`'s dim
// (out is self itself or a copy of it), checking shapes and every index first.
Status index_copy_into(const KernelArgs& a, const char* op, const Tensor& self, const Tensor& out) {
  KILN_ASSIGN_OR_RETURN(Tensor index, a.tensor("index"));
  KILN_ASSIGN_OR_RETURN(Tensor source, a.tensor("source"));
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  const std::string o(op);
  if (index.dim() > 1) return a.error(o + ": index should have dimension 1 or 0, got " + index.type_string());
  if (index.dtype() != DType::Int64) return a.error(o + ": expected an int64 index, got " + index.type_string());
  if (source.dtype() != self.dtype())
    return a.error(o + ": self and source must have the same dtype, got self " + self.type_string() + " and source " +
                   source.type_string());
  // Treat 0-d self/source as 1-d of one element.
  auto as_1d = [](const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; };
  Tensor dst = as_1d(out), src = as_1d(source);
  if (dst.dim() != src.dim())
    return a.error(o + ": source " + source.type_string() + " and self " + self.type_string() +
                   " must have the same number of dimensions");
  const int64_t n = index.numel();
  if (src.size(d) != n)
    return a.error(o + ": number of indices (" + std::to_string(n) + ") should be equal to source.size(" +
                   std::to_string(d) + ") (" + std::to_string(src.size(d)) + ")");
  for (int64_t k = 0; k < dst.dim(); ++k)
    if (k != d && dst.size(k) != src.size(k))
      return a.error(o + ": source " + source.type_string() + " and self " + self.type_string() +
                     " must have the same slice shapes (mismatch at dimension " + std::to_string(k) + ")");
  Tensor ix = cast_copy(index, DType::Int64);
  for (int64_t i = 0; i < n; ++i) {  // every index checked before anything is written
    const int64_t v = ix.data<int64_t>()[i];
    if (v < 0 || v >= dst.size(d))
      return a.error(o + ": index " + std::to_string(v) + " is out of bounds for dimension " + std::to_string(d) +
                     " with size " + std::to_string(dst.size(d)));
  }
  for (int64_t i = 0; i < n; ++i) copy_into(select_view(dst, d, ix.data<int64_t>()[i]), select_view(src, d, i));
  return Status::ok();
}

// index_copy(self, dim, index, source): out[..., index[i], ...] = source[..., i, ...] along dim.
Status index_copy(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  Tensor out = cast_copy(self, self.dtype());
  KILN_TRY(index_copy_into(a, "index_copy", self, out));
  a.set_output(0, out);
  return Status::ok();
}

// cache_write(self, dim, index, source): index_copy written into self itself,
// which is also the result (the engine input it aliases is the caller's cache).
Status cache_write(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_TRY(index_copy_into(a, "cache_write", self, self));
  a.set_output(0, self);
  return Status::ok();
}

// index_put(self, indices, values, accumulate=False): out[indices] = values (or += values).
Status index_put(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<std::optional<Tensor>> indices, a.optional_tensors("indices"));
  KILN_ASSIGN_OR_RETURN(Tensor values, a.tensor("values"));
  KILN_ASSIGN_OR_RETURN(bool accumulate, a.bool_arg("accumulate"));
  Tensor out = cast_copy(self, self.dtype());
  auto plan = plan_advanced_index(out, indices);
  if (!plan.has_value()) return a.error("index_put: " + plan.status().message());
  if (!can_expand(values.sizes(), plan->result_shape))
    return a.error("shape mismatch: value tensor of shape " + shape_to_string(values.sizes()) +
                   " cannot be broadcast to indexing result of shape " + shape_to_string(plan->result_shape));
  Tensor v = expand_to(cast_to(values, self.dtype()), plan->result_shape);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* op = out.data<T>();
    const T* vp = v.data<T>();
    size_t k = 0;
    for_each_offsets<1>(v.sizes(), {v.strides()}, [&](const std::array<int64_t, 1>& o) {
      const int64_t dst = plan->offsets[k++];
      if (!accumulate) {
        op[dst] = vp[o[0]];
      } else if constexpr (std::is_same_v<T, bool>) {
        op[dst] = op[dst] || vp[o[0]];
      } else if constexpr (std::is_integral_v<T>) {
        op[dst] = static_cast<T>(static_cast<uint64_t>(op[dst]) + static_cast<uint64_t>(vp[o[0]]));
      } else {
        op[dst] = convert<T>(load(op[dst]) + load(vp[o[0]]));
      }
    });
  });
  a.set_output(0, out);
  return Status::ok();
}

}  // namespace

void register_scatter_kernels(KernelRegistry& r) {
  using ir::OpKind;
  r.add(OpKind::kSelectScatter, &select_scatter);
  r.add(OpKind::kSliceScatter, &slice_scatter);
  r.add(OpKind::kAsStridedScatter, &as_strided_scatter);
  r.add(OpKind::kIndexCopy, &index_copy);
  r.add(OpKind::kCacheWrite, &cache_write);
  r.add(OpKind::kIndexPut, &index_put);
}

}  // namespace kiln::cpu
