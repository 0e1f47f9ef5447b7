// View kernels: the result shares the input's storage with new sizes,
// strides and offset, as in eager PyTorch (graphs here are functional, so
// aliasing is never observed). view/reshape copy only when the input's
// layout cannot be viewed with the new shape.
#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

std::string list_to_string(const std::vector<int64_t>& v) { return shape_to_string(v); }

// Resolves a single -1 in `shape` so that it holds `numel` elements.
Expected<Shape> infer_size(const KernelArgs& a, std::vector<int64_t> shape, int64_t numel) {
  std::optional<size_t> infer;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer) return a.error("only one dimension can be inferred in shape " + list_to_string(shape));
      infer = i;
    } else if (shape[i] < 0) {
      return a.error("invalid shape dimension " + std::to_string(shape[i]) + " in " + list_to_string(shape));
    } else {
      if (shape[i] != 0 && known > std::numeric_limits<int64_t>::max() / shape[i])
        return a.error("shape " + list_to_string(shape) + " overflows int64");
      known *= shape[i];
    }
  }
  if (infer) {
    if (known == 0)
      return a.error("cannot reshape a tensor of " + std::to_string(numel) + " elements into shape " +
                     list_to_string(shape) + " because the unspecified dimension size -1 can be any value");
    if (numel % known != 0)
      return a.error("shape " + list_to_string(shape) + " is invalid for input of size " + std::to_string(numel));
    shape[*infer] = numel / known;
  } else if (known != numel) {
    return a.error("shape " + list_to_string(shape) + " is invalid for input of size " + std::to_string(numel));
  }
  return Shape(shape);
}

// Strides that view a tensor of (sizes, strides) as `shape`, or nullopt when
// the layout does not allow it (ATen's computeStride).
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& shape) {
  if (sizes.empty()) return Shape(shape.size(), 1);
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  if (numel == 0 && sizes == shape) return strides;
  Shape out(shape.size());
  if (numel == 0) return contiguous_strides(shape);
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// `self` with `shape`: a view when possible, else a contiguous copy.
Tensor reshape_to(const Tensor& self, Shape shape) {
  if (auto st = view_strides(self.sizes(), self.strides(), shape))
    return self.as_strided(std::move(shape), std::move(*st), self.storage_offset());
  Tensor c = cast_copy(self, self.dtype());
  Shape st = contiguous_strides(shape);
  return c.as_strided(std::move(shape), std::move(st), 0);
}

Status set(KernelArgs& a, Tensor t) {
  a.set_output(0, std::move(t));
  return Status::ok();
}

// view / _unsafe_view / reshape(self, size).
Status view(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  std::string_view name = a.node().find("shape") ? "shape" : "size";  // reshape names it `shape`
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, a.ints(name));
  KILN_ASSIGN_OR_RETURN(Shape shape, infer_size(a, size, self.numel()));
  return set(a, reshape_to(self, std::move(shape)));
}

Status flatten(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t start, a.dim_arg("start_dim", self.dim()));
  KILN_ASSIGN_OR_RETURN(int64_t end, a.dim_arg("end_dim", self.dim()));
  if (start > end) return a.error("flatten() has invalid args: start_dim cannot come after end_dim");
  if (self.dim() == 0) return set(a, reshape_to(self, {1}));
  Shape shape(self.sizes().begin(), self.sizes().begin() + start);
  int64_t n = 1;
  for (int64_t d = start; d <= end; ++d) n *= self.size(d);
  shape.push_back(n);
  shape.insert(shape.end(), self.sizes().begin() + end + 1, self.sizes().end());
  return set(a, reshape_to(self, std::move(shape)));
}

Status permute(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, a.ints("dims"));
  if (static_cast<int64_t>(dims.size()) != self.dim())
    return a.error("permute dims " + list_to_string(dims) + " do not match the rank of self " + self.type_string());
  Shape sizes(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    auto d = wrap_dim(dims[i], self.dim());
    if (!d) return a.error(dim_out_of_range(dims[i], self.dim()));
    if (seen[*d]) return a.error("permute dims " + list_to_string(dims) + " repeat a dimension");
    seen[*d] = true;
    sizes[i] = self.sizes()[*d];
    strides[i] = self.strides()[*d];
  }
  return set(a, self.as_strided(std::move(sizes), std::move(strides), self.storage_offset()));
}

Tensor swap_dims(const Tensor& self, int64_t d0, int64_t d1) {
  Shape sizes = self.sizes(), strides = self.strides();
  if (self.dim() > 0) {
    std::swap(sizes[d0], sizes[d1]);
    std::swap(strides[d0], strides[d1]);
  }
  return self.as_strided(std::move(sizes), std::move(strides), self.storage_offset());
}

Status transpose(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t d0, a.dim_arg("dim0", self.dim()));
  KILN_ASSIGN_OR_RETURN(int64_t d1, a.dim_arg("dim1", self.dim()));
  return set(a, swap_dims(self, d0, d1));
}

Status t(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dim() > 2) return a.error("t() expects a tensor with <= 2 dimensions, got " + self.type_string());
  return set(a, self.dim() == 2 ? swap_dims(self, 0, 1) : swap_dims(self, 0, 0));
}

// `self` restricted to [start, start + length) along dim `d` (in range).
Tensor narrow_view(const Tensor& self, int64_t d, int64_t start, int64_t length) {
  return slice_view(self, d, start, start + length);
}

Status select(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dim() == 0) return a.error("select() cannot be applied to a 0-dim tensor");
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  KILN_ASSIGN_OR_RETURN(int64_t index, a.int_arg("index"));
  const int64_t size = self.size(d);
  if (index < -size || index >= size)
    return a.error("select(): index " + std::to_string(index) + " out of range for tensor of size " +
                   shape_to_string(self.sizes()) + " at dimension " + std::to_string(d));
  return set(a, select_view(self, d, index < 0 ? index + size : index));
}

Status slice(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dim() == 0) return a.error("slice() cannot be applied to a 0-dim tensor");
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> start_arg, a.optional_int("start"));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> end_arg, a.optional_int("end"));
  KILN_ASSIGN_OR_RETURN(int64_t step, a.int_arg("step"));
  if (step <= 0) return a.error("slice step must be positive, got " + std::to_string(step));
  const auto [start, end] = clamp_slice(start_arg, end_arg, self.size(d));
  return set(a, slice_view(self, d, start, end, step));
}

Status narrow(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dim() == 0) return a.error("narrow() cannot be applied to a 0-dim tensor");
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  KILN_ASSIGN_OR_RETURN(int64_t start, a.int_arg("start"));
  KILN_ASSIGN_OR_RETURN(int64_t length, a.int_arg("length"));
  const int64_t size = self.size(d);
  if (start < -size || start > size)
    return a.error("narrow(): start " + std::to_string(start) + " is out of range for dimension " + std::to_string(d) +
                   " of size " + std::to_string(size));
  if (start < 0) start += size;
  if (length < 0 || start > size - length)
    return a.error("narrow(): start (" + std::to_string(start) + ") + length (" + std::to_string(length) +
                   ") exceeds dimension size (" + std::to_string(size) + ")");
  return set(a, narrow_view(self, d, start, length));
}

Status unsqueeze(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim, a.int_arg("dim"));
  auto d = wrap_dim(dim, self.dim() + 1);
  if (!d) return a.error(dim_out_of_range(dim, self.dim() + 1));
  Shape sizes = self.sizes(), strides = self.strides();
  const int64_t stride = *d >= self.dim() ? 1 : sizes[*d] * strides[*d];
  sizes.insert(sizes.begin() + *d, 1);
  strides.insert(strides.begin() + *d, stride);
  return set(a, self.as_strided(std::move(sizes), std::move(strides), self.storage_offset()));
}

// Drops the dims marked in `drop` that have size 1.
Tensor squeeze_dims(const Tensor& self, const std::vector<bool>& drop) {
  Shape sizes, strides;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (drop[d] && self.size(d) == 1) continue;
    sizes.push_back(self.size(d));
    strides.push_back(self.strides()[d]);
  }
  return self.as_strided(std::move(sizes), std::move(strides), self.storage_offset());
}

// squeeze(self) / squeeze.dim(self, dim) / squeeze.dims(self, dim).
Status squeeze(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  std::vector<bool> drop(self.dim(), a.node().op == ir::OpKind::kSqueeze);
  if (a.node().op != ir::OpKind::kSqueeze) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, a.ints("dim"));
    std::vector<bool> seen(std::max<int64_t>(self.dim(), 1), false);
    for (int64_t dim : dims) {
      auto d = wrap_dim(dim, self.dim());
      if (!d) return a.error(dim_out_of_range(dim, self.dim()));
      if (seen[*d]) return a.error("dim " + std::to_string(*d) + " appears multiple times in the list of dims");
      seen[*d] = true;
      if (self.dim() > 0) drop[*d] = true;
    }
  }
  return set(a, squeeze_dims(self, drop));
}

Expected<Tensor> expand_view(const KernelArgs& a, const Tensor& self, const std::vector<int64_t>& size) {
  if (static_cast<int64_t>(size.size()) < self.dim())
    return a.error("the number of sizes provided (" + std::to_string(size.size()) +
                   ") must be greater or equal to the number of dimensions in the tensor " + self.type_string());
  const size_t lead = size.size() - self.sizes().size();
  Shape sizes(size.size()), strides(size.size(), 0);
  for (size_t i = 0; i < size.size(); ++i) {
    const int64_t want = size[i];
    if (i < lead) {
      if (want < 0)
        return a.error("the expanded size " + std::to_string(want) + " is not allowed in a leading, new dimension");
      sizes[i] = want;
      continue;
    }
    const int64_t have = self.sizes()[i - lead];
    if (want == -1 || want == have) {
      sizes[i] = have;
      strides[i] = self.strides()[i - lead];
    } else if (have == 1 && want >= 0) {
      sizes[i] = want;
    } else {
      return a.error("the expanded size of the tensor (" + std::to_string(want) + ") must match the existing size (" +
                     std::to_string(have) + ") at non-singleton dimension " + std::to_string(i) + "; target sizes " +
                     list_to_string(size) + ", tensor sizes " + shape_to_string(self.sizes()));
    }
  }
  if (auto n = checked_numel(sizes); !n.has_value()) return a.error("expand: " + n.status().message());
  return self.as_strided(std::move(sizes), std::move(strides), self.storage_offset());
}

Status expand(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, a.ints("size"));
  KILN_ASSIGN_OR_RETURN(Tensor out, expand_view(a, self, size));
  return set(a, std::move(out));
}

Status expand_as(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor other, a.tensor("other"));
  KILN_ASSIGN_OR_RETURN(Tensor out, expand_view(a, self, other.sizes()));
  return set(a, std::move(out));
}

Status alias(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  return set(a, self.as_strided(self.sizes(), self.strides(), self.storage_offset()));
}

Status as_strided(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, a.ints("size"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> stride, a.ints("stride"));
  KILN_ASSIGN_OR_RETURN(int64_t offset, a.int_arg("storage_offset", self.storage_offset()));
  auto view = Tensor::from_storage(self.storage(), self.dtype(), size, stride, offset);
  if (!view.has_value()) return a.error("as_strided: " + view.status().message());
  return set(a, std::move(*view));
}

// diagonal(self, offset, dim1, dim2): the elements (i, i + offset) of dims
// dim1 and dim2 as a new last dim, the other dims in order; a view.
Status diagonal(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dim() < 2) return a.error("diagonal takes a tensor of at least 2 dims, got " + self.type_string());
  KILN_ASSIGN_OR_RETURN(int64_t offset, a.int_arg("offset"));
  KILN_ASSIGN_OR_RETURN(int64_t d1, a.dim_arg("dim1", self.dim()));
  KILN_ASSIGN_OR_RETURN(int64_t d2, a.dim_arg("dim2", self.dim()));
  if (d1 == d2) return a.error("diagonal dimensions cannot be identical: " + std::to_string(d1));
  const int64_t s1 = self.size(d1), s2 = self.size(d2);
  const int64_t len = std::max<int64_t>(0, offset >= 0 ? std::min(s1, s2 - offset) : std::min(s1 + offset, s2));
  int64_t start = self.storage_offset();
  if (len > 0) start += offset >= 0 ? offset * self.strides()[static_cast<size_t>(d2)] : -offset * self.strides()[static_cast<size_t>(d1)];
  Shape sizes, strides;
  for (int64_t k = 0; k < self.dim(); ++k) {
    if (k == d1 || k == d2) continue;
    sizes.push_back(self.size(k));
    strides.push_back(self.strides()[static_cast<size_t>(k)]);
  }
  sizes.push_back(len);
  strides.push_back(self.strides()[static_cast<size_t>(d1)] + self.strides()[static_cast<size_t>(d2)]);
  auto view = Tensor::from_storage(self.storage(), self.dtype(), sizes, strides, start);
  if (!view.has_value()) return a.error("diagonal: " + view.status().message());
  return set(a, std::move(*view));
}

// unfold(self, dimension, size, step): the windows of `size` entries every
// `step` along `dimension` (which then counts the windows) as a new last dim; a view.
Status unfold(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t size, a.int_arg("size"));
  KILN_ASSIGN_OR_RETURN(int64_t step, a.int_arg("step"));
  if (step <= 0) return a.error("unfold: step must be positive, got " + std::to_string(step));
  if (self.dim() == 0) {
    if (size > 1) return a.error("unfold: size " + std::to_string(size) + " exceeds a 0-d tensor's 1 element");
    return set(a, self.as_strided({size}, {1}, self.storage_offset()));
  }
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dimension", self.dim()));
  if (size < 0 || size > self.size(d))
    return a.error("unfold: size " + std::to_string(size) + " does not fit dim " + std::to_string(d) + " of " +
                   self.type_string());
  Shape sizes = self.sizes(), strides = self.strides();
  sizes[static_cast<size_t>(d)] = (self.size(d) - size) / step + 1;
  strides[static_cast<size_t>(d)] = self.strides()[static_cast<size_t>(d)] * step;
  sizes.push_back(size);
  strides.push_back(self.strides()[static_cast<size_t>(d)]);
  return set(a, self.as_strided(std::move(sizes), std::move(strides), self.storage_offset()));
}

Status unflatten(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dim() == 0) return a.error("unflatten() cannot be applied to a 0-dim tensor");
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> sizes_arg, a.ints("sizes"));
  if (sizes_arg.empty()) return a.error("unflatten: sizes must be non-empty");
  KILN_ASSIGN_OR_RETURN(Shape inner, infer_size(a, sizes_arg, self.size(d)));
  Shape sizes(self.sizes().begin(), self.sizes().begin() + d);
  Shape strides(self.strides().begin(), self.strides().begin() + d);
  Shape inner_strides(inner.size());
  int64_t acc = self.strides()[d];
  for (size_t i = inner.size(); i-- > 0;) {
    inner_strides[i] = acc;
    acc *= inner[i];
  }
  sizes.insert(sizes.end(), inner.begin(), inner.end());
  strides.insert(strides.end(), inner_strides.begin(), inner_strides.end());
  sizes.insert(sizes.end(), self.sizes().begin() + d + 1, self.sizes().end());
  strides.insert(strides.end(), self.strides().begin() + d + 1, self.strides().end());
  return set(a, self.as_strided(std::move(sizes), std::move(strides), self.storage_offset()));
}

// Emits consecutive narrow views of the given lengths along `d`, one per node output.
Status emit_pieces(KernelArgs& a, const Tensor& self, int64_t d, const std::vector<int64_t>& lengths) {
  if (lengths.size() != a.node().outputs.size())
    return a.error("splitting " + self.type_string() + " along dim " + std::to_string(d) + " gives " +
                   std::to_string(lengths.size()) + " pieces but the node has " +
                   std::to_string(a.node().outputs.size()) + " outputs");
  int64_t start = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    a.set_output(i, narrow_view(self, d, start, lengths[i]));
    start += lengths[i];
  }
  return Status::ok();
}

// Lengths of pieces of `split_size` (the last may be shorter) covering `dim_size`.
std::vector<int64_t> split_lengths(int64_t dim_size, int64_t split_size) {
  const int64_t n = split_size == 0 ? 1 : std::max<int64_t>((dim_size + split_size - 1) / split_size, 1);
  std::vector<int64_t> lengths(n, split_size);
  lengths.back() = dim_size - split_size * (n - 1);
  return lengths;
}

Status split(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dim() == 0) return a.error("split() cannot be applied to a 0-dim tensor");
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  KILN_ASSIGN_OR_RETURN(int64_t split_size, a.int_arg("split_size"));
  const int64_t size = self.size(d);
  if (split_size < 0 || (split_size == 0 && size != 0))
    return a.error("split_size can only be 0 if dimension size is 0, and cannot be negative; got " +
                   std::to_string(split_size) + " for dimension size " + std::to_string(size));
  return emit_pieces(a, self, d, split_lengths(size, split_size));
}

Status split_with_sizes(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dim() == 0) return a.error("split_with_sizes() cannot be applied to a 0-dim tensor");
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, a.ints("split_sizes"));
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) return a.error("split_sizes " + list_to_string(sizes) + " has a negative entry");
    total += s;
  }
  if (total != self.size(d))
    return a.error("split_sizes " + list_to_string(sizes) + " must sum to the dimension size " +
                   std::to_string(self.size(d)) + " of dim " + std::to_string(d));
  return emit_pieces(a, self, d, sizes);
}

Status chunk(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dim() == 0) return a.error("chunk() cannot be applied to a 0-dim tensor");
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  KILN_ASSIGN_OR_RETURN(int64_t chunks, a.int_arg("chunks"));
  if (chunks <= 0) return a.error("chunk expects 'chunks' to be greater than 0, got " + std::to_string(chunks));
  const int64_t size = self.size(d);
  const int64_t split_size = (size + chunks - 1) / chunks;
  if (split_size == 0 && size == 0) return emit_pieces(a, self, d, std::vector<int64_t>(chunks, 0));
  return emit_pieces(a, self, d, split_lengths(size, split_size));
}

Status unbind(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dim() == 0) return a.error("unbind() cannot be applied to a 0-dim tensor");
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  const int64_t n = self.size(d);
  if (static_cast<size_t>(n) != a.node().outputs.size())
    return a.error("unbind of " + self.type_string() + " along dim " + std::to_string(d) + " gives " +
                   std::to_string(n) + " tensors but the node has " + std::to_string(a.node().outputs.size()) +
                   " outputs");
  for (int64_t i = 0; i < n; ++i) a.set_output(static_cast<size_t>(i), select_view(self, d, i));
  return Status::ok();
}

}  // namespace

void register_view_kernels(KernelRegistry& r) {
  using ir::OpKind;
  r.add(OpKind::kView, &view);
  r.add(OpKind::kDiagonal, &diagonal);
  r.add(OpKind::kUnfold, &unfold);
  r.add(OpKind::kUnsafeView, &view);
  r.add(OpKind::kReshape, &view);
  r.add(OpKind::kFlatten, &flatten);
  r.add(OpKind::kPermute, &permute);
  r.add(OpKind::kTranspose, &transpose);
  r.add(OpKind::kT, &t);
  r.add(OpKind::kSelectInt, &select);
  r.add(OpKind::kSliceTensor, &slice);
  r.add(OpKind::kNarrow, &narrow);
  r.add(OpKind::kUnsqueeze, &unsqueeze);
  r.add(OpKind::kSqueeze, &squeeze);
  r.add(OpKind::kSqueezeDim, &squeeze);
  r.add(OpKind::kSqueezeDims, &squeeze);
  r.add(OpKind::kExpand, &expand);
  r.add(OpKind::kExpandAs, &expand_as);
  r.add(OpKind::kAlias, &alias);
  r.add(OpKind::kDetach, &alias);
  r.add(OpKind::kAsStrided, &as_strided);
  r.add(OpKind::kUnflatten, &unflatten);
  r.add(OpKind::kSplitTensor, &split);
  r.add(OpKind::kSplitWithSizes, &split_with_sizes);
  r.add(OpKind::kChunk, &chunk);
  r.add(OpKind::kUnbind, &unbind);
}

}  // namespace kiln::cpu
