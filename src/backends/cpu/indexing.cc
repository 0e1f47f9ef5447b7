// Data movement kernels: cat, stack, index_select, index.Tensor, gather,
// embedding, tril/triu, repeat, constant_pad_nd, nonzero, cumsum and
// pixel_shuffle. Results are fresh contiguous tensors.
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "backends/cpu/advanced_index.h"
#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

Status set(KernelArgs& a, Tensor t) {
  a.set_output(0, std::move(t));
  return Status::ok();
}

// Integer index tensors: int64 or int32 (as index_select and embedding accept).
bool is_index_dtype(DType t) { return t == DType::Int64 || t == DType::Int32; }

// ---- cat / stack

Status cat(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> tensors, a.tensors("tensors"));
  if (tensors.empty()) return a.error("cat expects a non-empty list of tensors");
  DType dtype = tensors[0].dtype();
  for (const Tensor& t : tensors) dtype = promote_types(dtype, t.dtype());
  // Legacy behaviour: 1-d tensors with no elements are skipped whatever the other shapes.
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.dim() == 0)
      return a.error("zero-dimensional tensor (at position " + std::to_string(i) + ") cannot be concatenated");
    if (t.dim() == 1 && t.size(0) == 0) continue;
    parts.push_back(t);
  }
  if (parts.empty()) return set(a, Tensor::zeros(dtype, {0}));
  const Tensor& ref = parts[0];
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", ref.dim()));
  Shape shape = ref.sizes();
  shape[d] = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = parts[i];
    if (t.dim() != ref.dim())
      return a.error("tensors must have the same number of dimensions: got " + ref.type_string() + " and " +
                     t.type_string());
    for (int64_t k = 0; k < t.dim(); ++k)
      if (k != d && t.size(k) != ref.size(k))
        return a.error("sizes of tensors must match except in dimension " + std::to_string(d) + ": got " +
                       ref.type_string() + " and " + t.type_string());
    shape[d] += t.size(d);
  }
  if (auto n = checked_numel(shape); !n.has_value()) return a.error("cat: " + n.status().message());
  Tensor out = Tensor::zeros(dtype, shape);
  int64_t offset = 0;
  for (const Tensor& t : parts) {
    copy_into(slice_view(out, d, offset, offset + t.size(d)), t);
    offset += t.size(d);
  }
  return set(a, out);
}

Status stack(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> tensors, a.tensors("tensors"));
  if (tensors.empty()) return a.error("stack expects a non-empty list of tensors");
  const Tensor& ref = tensors[0];
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", ref.dim() + 1));
  DType dtype = ref.dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].sizes() != ref.sizes())
      return a.error("stack expects each tensor to be equal size, but got " + ref.type_string() + " at entry 0 and " +
                     tensors[i].type_string() + " at entry " + std::to_string(i));
    dtype = promote_types(dtype, tensors[i].dtype());
  }
  Shape shape = ref.sizes();
  shape.insert(shape.begin() + d, static_cast<int64_t>(tensors.size()));
  if (auto n = checked_numel(shape); !n.has_value()) return a.error("stack: " + n.status().message());
  Tensor out = Tensor::zeros(dtype, shape);
  for (size_t i = 0; i < tensors.size(); ++i) copy_into(select_view(out, d, static_cast<int64_t>(i)), tensors[i]);
  return set(a, out);
}

// ---- index_select / index / gather / embedding

// Reads a 1-d or 0-d index tensor as int64 values in [0, size).
Expected<std::vector<int64_t>> read_positions(const KernelArgs& a, const Tensor& index, int64_t size, const char* op) {
  if (index.dim() > 1) return a.error(std::string(op) + ": index must be 0-d or 1-d, got " + index.type_string());
  if (!is_index_dtype(index.dtype()))
    return a.error(std::string(op) + ": expected an int32 or int64 index, got " + index.type_string());
  Tensor ix = cast_copy(index, DType::Int64);
  std::vector<int64_t> out(ix.data<int64_t>(), ix.data<int64_t>() + ix.numel());
  for (int64_t v : out)
    if (v < 0 || v >= size)
      return a.error(std::string(op) + ": index " + std::to_string(v) + " is out of range for a dimension of size " +
                     std::to_string(size));
  return out;
}

Status index_select(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor index, a.tensor("index"));
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  if (self.dim() == 0) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pos, read_positions(a, index, 1, "index_select"));
    if (pos.size() != 1) return a.error("index_select: an index into a 0-d tensor must have exactly one value");
    return set(a, cast_copy(self, self.dtype()));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pos, read_positions(a, index, self.size(d), "index_select"));
  Shape shape = self.sizes();
  shape[d] = static_cast<int64_t>(pos.size());
  if (auto n = checked_numel(shape); !n.has_value()) return a.error("index_select: " + n.status().message());
  Tensor out = Tensor::zeros(self.dtype(), shape);
  for (size_t i = 0; i < pos.size(); ++i)
    copy_into(select_view(out, d, static_cast<int64_t>(i)), select_view(self, d, pos[i]));
  return set(a, out);
}

Status index_tensor(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<std::optional<Tensor>> indices, a.optional_tensors("indices"));
  auto plan = plan_advanced_index(self, indices);
  if (!plan.has_value()) return a.error("index: " + plan.status().message());
  Tensor out = Tensor::zeros(self.dtype(), plan->result_shape);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* sp = self.data<T>();
    T* op = out.data<T>();
    for (size_t k = 0; k < plan->offsets.size(); ++k) op[k] = sp[plan->offsets[k]];
  });
  return set(a, out);
}

Status gather(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor index, a.tensor("index"));
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  if (index.dtype() != DType::Int64 && index.dtype() != DType::Int32)
    return a.error("gather: expected an int64 or int32 index, got " + index.type_string());
  // 0-d tensors act as 1-d tensors of one element; int32 indices are read as int64.
  auto as_1d = [](const Tensor& t) { return t.dim() == 0 ? t.as_strided({1}, {1}, t.storage_offset()) : t; };
  const Tensor src = as_1d(self), ix = as_1d(index.dtype() == DType::Int64 ? index : cast_copy(index, DType::Int64));
  if (ix.dim() != src.dim())
    return a.error("gather: index " + index.type_string() + " must have the same number of dimensions as self " +
                   self.type_string());
  for (int64_t k = 0; k < src.dim(); ++k)
    if (k != d && ix.size(k) > src.size(k))
      return a.error("gather: index " + index.type_string() + " must not be larger than self " + self.type_string() +
                     " apart from dimension " + std::to_string(d));
  Tensor out = Tensor::zeros(self.dtype(), index.sizes());
  const int64_t size = src.size(d);
  const int64_t* ip = ix.data<int64_t>();
  bool ok = true;
  int64_t bad = 0;
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* sp = src.data<T>();
    T* op = out.data<T>();
    int64_t k = 0;
    for_each_index(ix.sizes(), [&](const std::vector<int64_t>& idx) {
      int64_t ioff = 0, soff = 0;
      for (size_t j = 0; j < idx.size(); ++j) {
        ioff += idx[j] * ix.strides()[j];
        if (static_cast<int64_t>(j) != d) soff += idx[j] * src.strides()[j];
      }
      const int64_t v = ip[ioff];
      if (v < 0 || v >= size) {  // gather does not wrap negative indices
        if (ok) bad = v;
        ok = false;
        ++k;
        return;
      }
      op[k++] = sp[soff + v * src.strides()[d]];
    });
  });
  if (!ok)
    return a.error("gather: index " + std::to_string(bad) + " is out of bounds for dimension " + std::to_string(d) +
                   " with size " + std::to_string(size));
  return set(a, out);
}

Status embedding(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor weight, a.tensor("weight"));
  KILN_ASSIGN_OR_RETURN(Tensor indices, a.tensor("indices"));
  if (weight.dim() != 2) return a.error("embedding: weight must be 2-D, got " + weight.type_string());
  if (!is_index_dtype(indices.dtype()))
    return a.error("embedding: expected int32 or int64 indices, got " + indices.type_string());
  Tensor flat = cast_copy(indices, DType::Int64);
  const int64_t rows = weight.size(0), n = flat.numel();
  Shape shape = indices.sizes();
  shape.push_back(weight.size(1));
  if (auto numel = checked_numel(shape); !numel.has_value()) return a.error("embedding: " + numel.status().message());
  Tensor out = Tensor::zeros(weight.dtype(), shape);
  Tensor out2d = out.as_strided({n, weight.size(1)}, {weight.size(1), 1}, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = flat.data<int64_t>()[i];
    if (v < 0 || v >= rows)
      return a.error("embedding: index " + std::to_string(v) + " is out of range for a weight with " +
                     std::to_string(rows) + " rows");
    copy_into(select_view(out2d, 0, i), select_view(weight, 0, v));
  }
  return set(a, out);
}

// ---- tril / triu / repeat / constant_pad_nd

template <bool kLower>
Status triangle(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t diagonal, a.int_arg("diagonal"));
  if (self.dim() < 2)
    return a.error(std::string(kLower ? "tril" : "triu") + " needs a tensor of at least 2 dimensions, got " +
                   self.type_string());
  Tensor out = cast_copy(self, self.dtype());
  const size_t r = static_cast<size_t>(self.dim()) - 2, c = r + 1;
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* op = out.data<T>();
    int64_t k = 0;
    for_each_index(out.sizes(), [&](const std::vector<int64_t>& idx) {
      const int64_t rel = idx[c] - idx[r];
      const bool keep = kLower ? rel <= diagonal : rel >= diagonal;
      if (!keep) op[k] = T{};
      ++k;
    });
  });
  return set(a, out);
}

Status repeat(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> repeats, a.ints("repeats"));
  if (static_cast<int64_t>(repeats.size()) < self.dim())
    return a.error("number of dimensions of repeat dims " + shape_to_string(repeats) +
                   " can not be smaller than number of dimensions of tensor " + self.type_string());
  const size_t lead = repeats.size() - self.sizes().size();
  Shape in_sizes(lead, 1), in_strides(lead, 0), shape(repeats.size());
  in_sizes.insert(in_sizes.end(), self.sizes().begin(), self.sizes().end());
  in_strides.insert(in_strides.end(), self.strides().begin(), self.strides().end());
  for (size_t i = 0; i < repeats.size(); ++i) {
    if (repeats[i] < 0) return a.error("repeats " + shape_to_string(repeats) + " must not be negative");
    shape[i] = in_sizes[i] * repeats[i];
  }
  auto numel = checked_numel(shape);
  if (!numel.has_value()) return a.error("repeat: " + numel.status().message());
  Tensor out = Tensor::zeros(self.dtype(), shape);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* sp = self.data<T>();
    T* op = out.data<T>();
    int64_t k = 0;
    for_each_index(shape, [&](const std::vector<int64_t>& idx) {
      int64_t off = 0;
      for (size_t j = 0; j < idx.size(); ++j) off += (idx[j] % in_sizes[j]) * in_strides[j];
      op[k++] = sp[off];
    });
  });
  return set(a, out);
}

Status constant_pad_nd(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pad, a.ints("pad"));
  KILN_ASSIGN_OR_RETURN(Scalar value, a.scalar("value"));
  if (pad.size() % 2 != 0) return a.error("length of pad must be even, got " + shape_to_string(pad));
  if (static_cast<int64_t>(pad.size() / 2) > self.dim())
    return a.error("length of pad " + shape_to_string(pad) +
                   " should be no more than twice the number of dimensions of the input " + self.type_string());
  // pad = (left of last dim, right of last dim, left of the one before, ...).
  Shape shape = self.sizes();
  std::vector<int64_t> left(self.dim(), 0), right(self.dim(), 0);
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const int64_t d = self.dim() - 1 - static_cast<int64_t>(i);
    left[d] = pad[2 * i];
    right[d] = pad[2 * i + 1];
    shape[d] = self.size(d) + left[d] + right[d];
    if (shape[d] < 0)
      return a.error("the input size " + std::to_string(self.size(d)) + ", plus negative padding " +
                     std::to_string(left[d]) + " and " + std::to_string(right[d]) +
                     " resulted in a negative output size");
  }
  if (auto n = checked_numel(shape); !n.has_value()) return a.error("constant_pad_nd: " + n.status().message());
  auto fill_value = scalar_to_dtype(value, self.dtype());
  if (!fill_value.has_value()) return a.error(fill_value.status().message());
  const Tensor& fill = *fill_value;
  Tensor out = Tensor::zeros(self.dtype(), shape);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::fill(out.data<T>(), out.data<T>() + out.numel(), *fill.data<T>());
  });
  // Copy the part of self that survives (negative padding crops).
  Tensor src = self, dst = out;
  for (int64_t d = 0; d < self.dim(); ++d) {
    const int64_t s0 = std::max<int64_t>(0, -left[d]), t0 = std::max<int64_t>(0, left[d]);
    const int64_t len = self.size(d) - s0 - std::max<int64_t>(0, -right[d]);
    if (len <= 0) return set(a, out);
    src = slice_view(src, d, s0, s0 + len);
    dst = slice_view(dst, d, t0, t0 + len);
  }
  copy_into(dst, src);
  return set(a, out);
}

enum class PadMode { kReflect, kReplicate, kCircular };

// Padding that repeats self's own elements: `pad` as constant_pad_nd's,
// each padded dim's output index o reading input index o - left mirrored
// about the edges (reflect, the edge itself not repeated), clamped to them
// (replicate) or wrapped (circular).
Status mode_pad(KernelArgs& a, const Tensor& self, const std::vector<int64_t>& pad, PadMode mode) {
  const char* name = mode == PadMode::kReflect ? "reflect" : mode == PadMode::kReplicate ? "replicate" : "circular";
  if (pad.size() % 2 != 0) return a.error("length of pad must be even, got " + shape_to_string(pad));
  if (static_cast<int64_t>(pad.size() / 2) > self.dim())
    return a.error("length of pad " + shape_to_string(pad) + " is more than twice the rank of " + self.type_string());
  const int64_t rank = self.dim();
  Shape shape = self.sizes();
  std::vector<std::vector<int64_t>> offsets(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    const size_t k = static_cast<size_t>(rank - 1 - d);  // pad pair of dim d, if any
    const int64_t lo = 2 * k < pad.size() ? pad[2 * k] : 0, hi = 2 * k < pad.size() ? pad[2 * k + 1] : 0;
    const int64_t n = self.size(d);
    if ((lo < 0 || hi < 0) && mode != PadMode::kReplicate)
      return a.error(std::string(name) + " padding " + shape_to_string(pad) +
                     " is negative (constant and replicate modes crop)");
    if (n + lo + hi < 0)
      return a.error("the input size " + std::to_string(n) + " of dimension " + std::to_string(d) + ", padded by " +
                     std::to_string(lo) + " and " + std::to_string(hi) + ", is negative");
    const bool padded = lo != 0 || hi != 0;
    if (padded && n == 0)
      return a.error(std::string(name) + " padding of dimension " + std::to_string(d) + " of " + self.type_string() +
                     ", which is empty");
    if (padded && mode == PadMode::kReflect && (lo >= n || hi >= n))
      return a.error("reflect padding " + shape_to_string(pad) + " must be less than dimension " + std::to_string(d) +
                     " of " + self.type_string());
    if (padded && mode == PadMode::kCircular && (lo > n || hi > n))
      return a.error("circular padding " + shape_to_string(pad) + " must be at most dimension " + std::to_string(d) +
                     " of " + self.type_string());
    shape[d] = n + lo + hi;
    for (int64_t o = 0; o < shape[d]; ++o) {
      int64_t i = o - lo;
      if (mode == PadMode::kReflect) {
        if (i < 0) i = -i;
        if (i >= n) i = 2 * (n - 1) - i;
      } else if (mode == PadMode::kReplicate) {
        i = std::clamp<int64_t>(i, 0, n - 1);
      } else {
        i = ((i % n) + n) % n;
      }
      offsets[static_cast<size_t>(d)].push_back(i * self.strides()[d]);
    }
  }
  if (auto n = checked_numel(shape); !n.has_value())
    return a.error(std::string(name) + " pad: " + n.status().message());
  Tensor out = Tensor::zeros(self.dtype(), shape);
  if (out.numel() == 0) return set(a, out);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = self.data<T>();
    T* dst = out.data<T>();
    // Row-major over the output, the source offset kept as a sum per dim.
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    int64_t at = 0;
    for (int64_t d = 0; d < rank; ++d) at += offsets[static_cast<size_t>(d)][0];
    for (int64_t k = 0; k < out.numel(); ++k) {
      dst[k] = src[at];
      for (int64_t d = rank - 1; d >= 0; --d) {
        const auto& off = offsets[static_cast<size_t>(d)];
        int64_t& i = idx[static_cast<size_t>(d)];
        at -= off[static_cast<size_t>(i)];
        if (++i < shape[d]) {
          at += off[static_cast<size_t>(i)];
          break;
        }
        i = 0;
        at += off[0];
      }
    }
  });
  return set(a, out);
}

// aten.pad(self, pad, mode, value): constant mode is constant_pad_nd's.
Status pad_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pad, a.ints("pad"));
  KILN_ASSIGN_OR_RETURN(std::string mode, a.string_arg("mode"));
  if (mode == "constant") return constant_pad_nd(a);
  if (mode == "reflect") return mode_pad(a, self, pad, PadMode::kReflect);
  if (mode == "replicate") return mode_pad(a, self, pad, PadMode::kReplicate);
  if (mode == "circular") return mode_pad(a, self, pad, PadMode::kCircular);
  return a.error("pad mode '" + mode + "' (constant, reflect, replicate or circular)");
}

// reflection_padNd / replication_padNd(self, padding): N padded trailing dims
// of an input of rank N + 1 or N + 2.
template <PadMode kMode, int64_t kDims>
Status named_pad_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pad, a.ints("padding"));
  if (static_cast<int64_t>(pad.size()) != 2 * kDims || (self.dim() != kDims + 1 && self.dim() != kDims + 2))
    return a.error("padding of " + std::to_string(kDims) + " dims takes " + std::to_string(2 * kDims) +
                   " sizes and an input of rank " + std::to_string(kDims + 1) + " or " + std::to_string(kDims + 2) +
                   ", got " + shape_to_string(pad) + " and " + self.type_string());
  return mode_pad(a, self, pad, kMode);
}

// ---- nonzero / cumsum / pixel_shuffle

Status nonzero(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  Tensor m = cast_copy(self, DType::Bool);
  const bool* mp = m.data<bool>();
  std::vector<int64_t> coords;
  int64_t n = 0, k = 0;
  for_each_index(m.sizes(), [&](const std::vector<int64_t>& idx) {
    if (mp[k++]) {
      coords.insert(coords.end(), idx.begin(), idx.end());
      ++n;
    }
  });
  Tensor out = Tensor::zeros(DType::Int64, {n, self.dim()});
  std::copy(coords.begin(), coords.end(), out.data<int64_t>());
  return set(a, out);
}

// nonzero_static(self, size, fill_value): nonzero's first `size` rows, the
// rest filled with fill_value (a fixed output size).
Status nonzero_static(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t size, a.int_arg("size"));
  KILN_ASSIGN_OR_RETURN(int64_t fill, a.int_arg("fill_value"));
  if (size < 0) return a.error("nonzero_static: size must be non-negative, got " + std::to_string(size));
  Tensor m = cast_copy(self, DType::Bool);
  const bool* mp = m.data<bool>();
  Tensor out = Tensor::zeros(DType::Int64, {size, self.dim()});
  int64_t* o = out.data<int64_t>();
  std::fill(o, o + out.numel(), fill);
  int64_t n = 0, k = 0;
  for_each_index(m.sizes(), [&](const std::vector<int64_t>& idx) {
    if (mp[k++] && n < size) std::copy(idx.begin(), idx.end(), o + (n++) * self.dim());
  });
  return set(a, out);
}

// masked_select(self, mask): the elements of self where mask (both broadcast)
// holds, in row-major order, as a 1-d tensor.
Status masked_select(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor mask, a.tensor("mask"));
  if (mask.dtype() != DType::Bool) return a.error("masked_select takes a bool mask, got " + mask.type_string());
  auto shape = broadcast_shapes(self.sizes(), mask.sizes());
  if (!shape) return a.error("self " + self.type_string() + " and mask " + mask.type_string() + " do not broadcast");
  const Tensor x = expand_to(self, *shape), m = expand_to(mask, *shape);
  std::vector<int64_t> picked;
  const bool* mp = m.data<bool>();
  for_each_offsets<2>(*shape, {x.strides(), m.strides()}, [&](const std::array<int64_t, 2>& o) {
    if (mp[o[1]]) picked.push_back(o[0]);
  });
  Tensor out = Tensor::zeros(self.dtype(), {static_cast<int64_t>(picked.size())});
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* op = out.data<T>();
    for (size_t i = 0; i < picked.size(); ++i) op[i] = xp[picked[i]];
  });
  return set(a, out);
}

// flip(self, dims): each of dims read back to front (a dim named twice is an error, as in ATen).
Status flip(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, a.ints("dims"));
  const int64_t nd = self.dim();
  std::vector<bool> flipped(static_cast<size_t>(std::max<int64_t>(nd, 1)), false);
  for (int64_t d : dims) {
    const int64_t k = d < 0 ? d + std::max<int64_t>(nd, 1) : d;
    if (k < 0 || k >= std::max<int64_t>(nd, 1))
      return a.error("flip: dim " + std::to_string(d) + " is out of range for " + self.type_string());
    if (flipped[static_cast<size_t>(k)]) return a.error("flip: dim " + std::to_string(k) + " appears more than once");
    flipped[static_cast<size_t>(k)] = true;
  }
  const Tensor in = self.contiguous();
  Tensor out = Tensor::zeros(self.dtype(), self.sizes());
  const int64_t n = in.numel(), width = static_cast<int64_t>(dtype_size(self.dtype()));
  const auto* src = static_cast<const uint8_t*>(in.raw_data());
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  std::vector<int64_t> stride(static_cast<size_t>(nd), 1);
  for (int64_t d = nd - 1; d > 0; --d)
    stride[static_cast<size_t>(d - 1)] = stride[static_cast<size_t>(d)] * self.size(d);
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = i, j = 0;
    for (int64_t d = 0; d < nd; ++d) {
      const int64_t c = r / stride[static_cast<size_t>(d)];
      r %= stride[static_cast<size_t>(d)];
      j += (flipped[static_cast<size_t>(d)] ? self.size(d) - 1 - c : c) * stride[static_cast<size_t>(d)];
    }
    std::memcpy(dst + i * width, src + j * width, static_cast<size_t>(width));
  }
  return set(a, out);
}

Status pixel_shuffle(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t r, a.int_arg("upscale_factor"));
  if (self.dim() < 3)
    return a.error("pixel_shuffle expects input to have at least 3 dimensions, got " + self.type_string());
  if (r <= 0) return a.error("pixel_shuffle expects a positive upscale_factor, got " + std::to_string(r));
  const int64_t nd = self.dim(), c = self.size(-3), h = self.size(-2), w = self.size(-1);
  if (c % (r * r) != 0)
    return a.error(
        "pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
        "upscale_factor, but input " +
        self.type_string() + " and upscale_factor " + std::to_string(r));
  const int64_t oc = c / (r * r);
  const int64_t sc = self.strides()[nd - 3], sh = self.strides()[nd - 2], sw = self.strides()[nd - 1];
  // in[..., oc*r*r + i*r + j, y, x] seen as [..., oc, y, i, x, j] = out[..., oc, y*r + i, x*r + j].
  Shape sizes(self.sizes().begin(), self.sizes().end() - 3), strides(self.strides().begin(), self.strides().end() - 3);
  Shape out_shape = sizes;
  sizes.insert(sizes.end(), {oc, h, r, w, r});
  strides.insert(strides.end(), {sc * r * r, sh, sc * r, sw, sc});
  out_shape.insert(out_shape.end(), {oc, h * r, w * r});
  Tensor out = Tensor::zeros(self.dtype(), out_shape);
  copy_into(out.as_strided(sizes, contiguous_strides(sizes), 0),
            self.as_strided(sizes, strides, self.storage_offset()));
  return set(a, out);
}

// ---- diff(self, n=1, dim=-1, prepend=None, append=None): x[1:] - x[:-1]
// along dim, n times, after concatenating prepend and append. Bool tensors
// use inequality (logical xor), as PyTorch does.
Status diff(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t n, a.int_arg("n"));
  if (self.dim() == 0) return a.error("diff expects a tensor with at least one dimension");
  if (n < 0) return a.error("order must be non-negative, got " + std::to_string(n));
  KILN_ASSIGN_OR_RETURN(int64_t dim, a.dim_arg("dim", self.dim()));
  KILN_ASSIGN_OR_RETURN(auto prepend, a.optional_tensor("prepend"));
  KILN_ASSIGN_OR_RETURN(auto append, a.optional_tensor("append"));
  std::vector<Tensor> parts;
  if (prepend) parts.push_back(*prepend);
  parts.push_back(self);
  if (append) parts.push_back(*append);
  for (Tensor& x : parts) {
    if (x.dtype() != self.dtype() || x.dim() != self.dim())
      return a.error("prepend/append must have the dtype and rank of self, got " + x.type_string());
    for (int64_t d = 0; d < self.dim(); ++d)
      if (d != dim && x.size(d) != self.size(d))
        return a.error("prepend/append " + x.type_string() + " does not match self " + self.type_string());
    x = x.contiguous();
  }
  // Concatenate along dim.
  Shape sizes = self.sizes();
  sizes[static_cast<size_t>(dim)] = 0;
  for (const Tensor& p : parts) sizes[static_cast<size_t>(dim)] += p.size(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= sizes[static_cast<size_t>(d)];
  for (int64_t d = dim + 1; d < self.dim(); ++d) inner *= sizes[static_cast<size_t>(d)];
  Tensor cur = Tensor::zeros(self.dtype(), sizes);
  const size_t item = dtype_size(self.dtype());
  int64_t at = 0;
  for (const Tensor& p : parts) {
    const int64_t len = p.size(dim);
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(static_cast<uint8_t*>(cur.raw_data()) + ((o * sizes[static_cast<size_t>(dim)] + at) * inner) * item,
                  static_cast<const uint8_t*>(p.raw_data()) + (o * len * inner) * item,
                  static_cast<size_t>(len * inner) * item);
    at += len;
  }
  for (int64_t k = 0; k < n && cur.size(dim) > 0; ++k) {
    const int64_t len = cur.size(dim);
    Shape next = cur.sizes();
    next[static_cast<size_t>(dim)] = len - 1;
    Tensor out = Tensor::zeros(self.dtype(), next);
    visit_dtype(self.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = cur.data<T>();
      T* y = out.data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j + 1 < len; ++j)
          for (int64_t i = 0; i < inner; ++i) {
            const T hi = x[(o * len + j + 1) * inner + i], lo = x[(o * len + j) * inner + i];
            T& dst = y[(o * (len - 1) + j) * inner + i];
            if constexpr (std::is_same_v<T, bool>)
              dst = hi != lo;
            else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
              dst = T(static_cast<float>(hi) - static_cast<float>(lo));
            else
              dst = static_cast<T>(hi - lo);
          }
    });
    cur = out;
  }
  return set(a, cur);
}

}  // namespace

// embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
// per_sample_weights, include_last_offset, padding_idx) and its internal
// forms -> (output, offset2bag, bag_size, max_indices): per bag (a run of
// indices starting at each offset; rows of a 2-d indices without offsets) the
// sum (mode 0, weighted per sample when given), mean (1) or maximum (2) of the
// weight rows; indices equal to padding_idx are skipped; an empty bag is zeros.
Status embedding_bag(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor weight, a.tensor("weight"));
  KILN_ASSIGN_OR_RETURN(Tensor indices, a.tensor("indices"));
  KILN_ASSIGN_OR_RETURN(std::optional<Tensor> offsets, a.optional_tensor("offsets"));
  KILN_ASSIGN_OR_RETURN(int64_t mode, a.int_arg("mode", 0));
  KILN_ASSIGN_OR_RETURN(std::optional<Tensor> psw, a.optional_tensor("per_sample_weights"));
  KILN_ASSIGN_OR_RETURN(bool include_last, a.bool_arg("include_last_offset", false));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> padding, a.optional_int("padding_idx"));
  if (weight.dim() != 2 || !is_floating(weight.dtype()))
    return a.error("embedding_bag: weight must be a 2-d floating tensor, got " + weight.type_string());
  if (!is_integral(indices.dtype()))
    return a.error("embedding_bag: indices must be integers, got " + indices.type_string());
  if (mode < 0 || mode > 2) return a.error("embedding_bag: mode must be 0 (sum), 1 (mean) or 2 (max)");
  if (psw && mode != 0) return a.error("embedding_bag: per_sample_weights need mode 'sum'");
  const int64_t rows = weight.size(0), D = weight.size(1);
  if (padding && *padding < 0) {
    // The public op takes a negative padding_idx counted from the end; the
    // internal ones write -1 for none.
    padding =
        a.node().op == ir::OpKind::kEmbeddingBagPaddingIdx ? std::optional<int64_t>(*padding + rows) : std::nullopt;
  }
  const Tensor idx = cast_copy(indices, DType::Int64);
  std::vector<int64_t> starts;
  int64_t n = idx.numel();
  if (indices.dim() == 2) {
    for (int64_t b = 0; b < indices.size(0); ++b) starts.push_back(b * indices.size(1));
  } else {
    if (!offsets || offsets->dim() != 1) return a.error("embedding_bag: 1-d indices need 1-d offsets");
    const Tensor off = cast_copy(*offsets, DType::Int64);
    for (int64_t i = 0; i < off.numel(); ++i) starts.push_back(off.data<int64_t>()[i]);
    if (include_last && !starts.empty()) starts.pop_back();
  }
  const int64_t bags = static_cast<int64_t>(starts.size());
  for (int64_t b = 0; b < bags; ++b)
    if (starts[b] < 0 || starts[b] > n || (b > 0 && starts[b] < starts[b - 1]))
      return a.error("embedding_bag: offsets must be non-decreasing and within the indices");
  const Tensor w = cast_copy(weight, DType::Float64);
  const Tensor pw = psw ? cast_copy(*psw, DType::Float64) : Tensor();
  Tensor out = Tensor::zeros(DType::Float64, {bags, D});
  Tensor offset2bag = Tensor::zeros(DType::Int64, {n});
  Tensor bag_size = Tensor::zeros(DType::Int64, {bags});
  Tensor max_idx = Tensor::zeros(DType::Int64, mode == 2 ? Shape{bags, D} : Shape{bags});
  for (int64_t b = 0; b < bags; ++b) {
    const int64_t end = b + 1 < bags ? starts[b + 1] : (indices.dim() == 2 ? starts[b] + indices.size(1) : n);
    double* o = out.data<double>() + b * D;
    int64_t count = 0;
    for (int64_t i = starts[b]; i < end; ++i) {
      const int64_t r = idx.data<int64_t>()[i];
      offset2bag.data<int64_t>()[i] = b;
      if (r < 0 || r >= rows)
        return a.error("embedding_bag: index " + std::to_string(r) + " is out of range for " + std::to_string(rows) +
                       " rows");
      if (padding && r == *padding) continue;
      const double* row = w.data<double>() + r * D;
      const double scale = psw ? pw.data<double>()[i] : 1.0;
      for (int64_t d = 0; d < D; ++d) {
        if (mode == 2) {
          if (count == 0 || row[d] > o[d]) {
            o[d] = row[d];
            max_idx.data<int64_t>()[b * D + d] = r;
          }
        } else {
          o[d] += scale * row[d];
        }
      }
      ++count;
    }
    if (mode == 1 && count > 0)
      for (int64_t d = 0; d < D; ++d) o[d] /= static_cast<double>(count);
    bag_size.data<int64_t>()[b] = count;
  }
  a.set_output(0, out.to(weight.dtype()));
  if (a.node().outputs.size() > 1) {
    a.set_output(1, offset2bag);
    a.set_output(2, bag_size);
    a.set_output(3, max_idx);
  }
  return Status::ok();
}

void register_indexing_kernels(KernelRegistry& r) {
  for (ir::OpKind k : {ir::OpKind::kEmbeddingBag, ir::OpKind::kEmbeddingBagPaddingIdx,
                       ir::OpKind::kEmbeddingBagInternal, ir::OpKind::kEmbeddingBagForwardOnly})
    r.add(k, &embedding_bag);
  using ir::OpKind;
  r.add(OpKind::kCat, &cat);
  r.add(OpKind::kStack, &stack);
  r.add(OpKind::kIndexSelect, &index_select);
  r.add(OpKind::kIndexTensor, &index_tensor);
  r.add(OpKind::kGather, &gather);
  r.add(OpKind::kEmbedding, &embedding);
  r.add(OpKind::kTril, &triangle<true>);
  r.add(OpKind::kTriu, &triangle<false>);
  r.add(OpKind::kRepeat, &repeat);
  r.add(OpKind::kConstantPadNd, &constant_pad_nd);
  r.add(OpKind::kPad, &pad_kernel);
  r.add(OpKind::kReflectionPad1d, &named_pad_kernel<PadMode::kReflect, 1>);
  r.add(OpKind::kReflectionPad2d, &named_pad_kernel<PadMode::kReflect, 2>);
  r.add(OpKind::kReflectionPad3d, &named_pad_kernel<PadMode::kReflect, 3>);
  r.add(OpKind::kReplicationPad1d, &named_pad_kernel<PadMode::kReplicate, 1>);
  r.add(OpKind::kReplicationPad2d, &named_pad_kernel<PadMode::kReplicate, 2>);
  r.add(OpKind::kReplicationPad3d, &named_pad_kernel<PadMode::kReplicate, 3>);
  r.add(OpKind::kNonzero, &nonzero);
  r.add(OpKind::kNonzeroStatic, &nonzero_static);
  r.add(OpKind::kMaskedSelect, &masked_select);
  r.add(OpKind::kFlip, &flip);
  r.add(OpKind::kPixelShuffle, &pixel_shuffle);
  r.add(OpKind::kDiff, &diff);
}

}  // namespace kiln::cpu
