#include "backends/cpu/advanced_index.h"

#include <string>

#include "backends/cpu/broadcast.h"

namespace kiln::cpu {

namespace {

// Row-major positions of the true elements of `mask`: one int64 [n] tensor per mask dim.
std::vector<Tensor> mask_positions(const Tensor& mask) {
  Tensor m = cast_copy(mask, DType::Bool);
  const bool* p = m.data<bool>();
  const int64_t numel = m.numel(), nd = m.dim();
  int64_t count = 0;
  for (int64_t i = 0; i < numel; ++i) count += p[i] ? 1 : 0;
  std::vector<Tensor> out;
  for (int64_t d = 0; d < nd; ++d) out.push_back(Tensor::zeros(DType::Int64, {count}));
  int64_t k = 0;
  for (int64_t i = 0; i < numel; ++i) {
    if (!p[i]) continue;
    int64_t rest = i;
    for (int64_t d = nd - 1; d >= 0; --d) {
      out[d].data<int64_t>()[k] = rest % m.size(d);
      rest /= m.size(d);
    }
    ++k;
  }
  return out;
}

// Offsets of every index of the dims `dims` of `t`, in row-major order.
std::vector<int64_t> dims_offsets(const Tensor& t, const std::vector<int64_t>& dims) {
  Shape sizes, strides;
  for (int64_t d : dims) {
    sizes.push_back(t.size(d));
    strides.push_back(t.strides()[d]);
  }
  std::vector<int64_t> out;
  for_each_offsets<1>(sizes, {strides}, [&](const std::array<int64_t, 1>& o) { out.push_back(o[0]); });
  return out;
}

}  // namespace

Expected<AdvancedIndex> plan_advanced_index(const Tensor& self, const std::vector<std::optional<Tensor>>& indices) {
  // One entry per dim of self: an integer index tensor, or none (dim kept whole).
  std::vector<std::optional<Tensor>> per_dim;
  auto too_many = [&] {
    return invalid_argument("too many indices for tensor " + self.type_string() + " of dimension " +
                            std::to_string(self.dim()));
  };
  for (size_t i = 0; i < indices.size(); ++i) {
    const std::optional<Tensor>& idx = indices[i];
    if (!idx) {
      per_dim.emplace_back(std::nullopt);
    } else if (idx->dtype() == DType::Bool || idx->dtype() == DType::UInt8) {
      if (idx->dim() == 0) return unsupported("a 0-d bool index (index " + std::to_string(i) + ") is not supported");
      const int64_t first = static_cast<int64_t>(per_dim.size());
      if (first + idx->dim() > self.dim()) return too_many();
      for (int64_t k = 0; k < idx->dim(); ++k) {
        if (idx->size(k) != self.size(first + k))
          return invalid_argument("the shape of the mask " + shape_to_string(idx->sizes()) + " at index " +
                                  std::to_string(k) + " does not match the shape of the indexed tensor " +
                                  shape_to_string(self.sizes()) + " at index " + std::to_string(first + k));
      }
      for (Tensor& t : mask_positions(*idx)) per_dim.emplace_back(std::move(t));
    } else if (idx->dtype() == DType::Int64 || idx->dtype() == DType::Int32) {
      per_dim.emplace_back(*idx);
    } else {
      return invalid_argument("tensors used as indices must be int64, int32, uint8 or bool tensors, but index " +
                              std::to_string(i) + " is " + idx->type_string());
    }
    if (static_cast<int64_t>(per_dim.size()) > self.dim()) return too_many();
  }
  per_dim.resize(static_cast<size_t>(self.dim()));

  Shape b;
  int64_t first = -1, last = -1;
  std::string shapes;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!per_dim[d]) continue;
    if (first < 0) first = d;
    last = d;
    shapes += (shapes.empty() ? "" : ", ") + shape_to_string(per_dim[d]->sizes());
    auto s = broadcast_shapes(b, per_dim[d]->sizes());
    if (!s) return invalid_argument("shape mismatch: indexing tensors could not be broadcast together: " + shapes);
    b = std::move(*s);
  }
  AdvancedIndex plan;
  if (first < 0) {
    plan.result_shape = self.sizes();
    plan.offsets = element_offsets(self);
    return plan;
  }
  bool adjacent = true;
  for (int64_t d = first; d <= last; ++d) adjacent = adjacent && per_dim[d].has_value();

  // Offset contributed by the indexed dims, per element of B.
  int64_t nb = 1;
  for (int64_t s : b) nb *= s;
  std::vector<int64_t> base(static_cast<size_t>(nb), 0);
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!per_dim[d]) continue;
    Tensor ix = expand_to(cast_to(*per_dim[d], DType::Int64), b);
    const int64_t* ip = ix.data<int64_t>();
    const int64_t size = self.size(d), stride = self.strides()[d];
    size_t k = 0;
    bool ok = true;
    int64_t bad = 0;
    for_each_offsets<1>(ix.sizes(), {ix.strides()}, [&](const std::array<int64_t, 1>& o) {
      int64_t v = ip[o[0]];
      if (v < -size || v >= size) {
        if (ok) bad = v;
        ok = false;
        ++k;
        return;
      }
      if (v < 0) v += size;
      base[k++] += v * stride;
    });
    if (!ok)
      return invalid_argument("index " + std::to_string(bad) + " is out of bounds for dimension " + std::to_string(d) +
                              " with size " + std::to_string(size));
  }

  std::vector<int64_t> before, after;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (per_dim[d]) continue;
    (adjacent && d < first ? before : after).push_back(d);
  }
  for (int64_t d : before) plan.result_shape.push_back(self.size(d));
  plan.result_shape.insert(plan.result_shape.end(), b.begin(), b.end());
  for (int64_t d : after) plan.result_shape.push_back(self.size(d));
  auto numel = checked_numel(plan.result_shape);
  if (!numel.has_value()) return numel.status();

  const std::vector<int64_t> outer = dims_offsets(self, before), inner = dims_offsets(self, after);
  plan.offsets.reserve(static_cast<size_t>(*numel));
  for (int64_t o : outer)
    for (int64_t bb : base)
      for (int64_t i : inner) plan.offsets.push_back(o + bb + i);
  return plan;
}

}  // namespace kiln::cpu
