// What the CUDA builder's layers share: reading a node's arguments (an
// argument not given reads as its op's schema default), and layouts (views,
// broadcasts) of tensors already placed.
#include <algorithm>
#include <numeric>

#include "backends/cuda/cuda_layers.h"
#include "ir/op_schema.h"

namespace kiln::cuda::layers {

const ir::Value* value_arg(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = n.find(name);
  if (!a) return nullptr;
  const auto* v = std::get_if<ir::Value*>(a);
  return v ? *v : nullptr;
}

std::optional<int64_t> int_arg(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = ir::argument_or_default(n, name);
  if (!a) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(a)) return *i;
  if (const auto* b = std::get_if<bool>(a)) return *b ? 1 : 0;
  return std::nullopt;
}

std::optional<double> double_arg(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = ir::argument_or_default(n, name);
  if (!a) return std::nullopt;
  if (const auto* d = std::get_if<double>(a)) return *d;
  if (const auto* i = std::get_if<int64_t>(a)) return static_cast<double>(*i);
  return std::nullopt;
}

bool bool_arg(const ir::Node& n, std::string_view name, bool def) {
  const ir::Arg* a = ir::argument_or_default(n, name);
  if (!a) return def;
  if (const auto* b = std::get_if<bool>(a)) return *b;
  if (const auto* i = std::get_if<int64_t>(a)) return *i != 0;
  return def;
}

std::string string_arg(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = ir::argument_or_default(n, name);
  if (!a) return "";
  const auto* s = std::get_if<std::string>(a);
  return s ? *s : "";
}

bool is_none(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = ir::argument_or_default(n, name);
  return !a || std::holds_alternative<ir::NoneArg>(*a);
}

std::optional<std::vector<int64_t>> ints_arg(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = ir::argument_or_default(n, name);
  if (!a) return std::nullopt;
  if (const auto* v = std::get_if<std::vector<int64_t>>(a)) return *v;
  if (const auto* i = std::get_if<int64_t>(a)) return std::vector<int64_t>{*i};
  if (const auto* s = std::get_if<std::vector<ir::SymInt>>(a)) {
    std::vector<int64_t> out;
    for (const auto& x : *s) {
      if (!std::holds_alternative<int64_t>(x)) return std::nullopt;
      out.push_back(std::get<int64_t>(x));
    }
    return out;
  }
  return std::nullopt;
}

std::vector<int64_t> static_sizes(const ir::Value* v) {
  std::vector<int64_t> s;
  for (const ir::Dim& d : v->type.sizes) s.push_back(d.value);
  return s;
}

int64_t norm_dim(int64_t d, size_t rank) { return d < 0 ? d + static_cast<int64_t>(rank) : d; }

int64_t prod(const std::vector<int64_t>& v, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < std::min(to, v.size()); ++i) p *= v[i];
  return p;
}

std::vector<int64_t> contiguous_strides_of(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) st[d - 1] = st[d] * std::max<int64_t>(sizes[d], 1);
  return st;
}

// PyTorch's rule for a view with new sizes over old strides, or nullopt when
// the layout needs a copy.
std::optional<std::vector<int64_t>> view_strides(const std::vector<int64_t>& old_sizes,
                                                 const std::vector<int64_t>& old_strides,
                                                 const std::vector<int64_t>& new_sizes) {
  if (old_sizes.empty()) return std::vector<int64_t>(new_sizes.size(), 1);
  const int64_t numel = prod(old_sizes);
  if (numel == 0) return contiguous_strides_of(new_sizes);
  std::vector<int64_t> ns(new_sizes.size(), 0);
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t td = static_cast<int64_t>(old_sizes.size()) - 1; td >= 0; --td) {
    tensor_numel *= old_sizes[static_cast<size_t>(td)];
    if (td == 0 || (old_sizes[static_cast<size_t>(td - 1)] != 1 &&
                    old_strides[static_cast<size_t>(td - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[static_cast<size_t>(view_d)] == 1)) {
        ns[static_cast<size_t>(view_d)] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[static_cast<size_t>(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_base_stride = old_strides[static_cast<size_t>(td - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return ns;
}

Expected<TRef> reshaped(Builder& b, const TRef& in, const std::vector<int64_t>& sizes, const std::string& layer) {
  if (auto st = view_strides(in.sizes, in.strides, sizes)) {
    TRef r = in;
    r.sizes = sizes;
    r.strides = *st;
    return r;
  }
  KILN_ASSIGN_OR_RETURN(TRef c, b.contiguous(in, layer));
  c.sizes = sizes;
  c.strides = contiguous_strides_of(sizes);
  return c;
}

TRef narrowed(const TRef& in, size_t dim, int64_t start, int64_t size, int64_t step) {
  TRef r = in;
  r.buf.offset += start * in.strides[dim] * static_cast<int64_t>(dtype_size(in.dtype));
  r.sizes[dim] = size;
  r.strides[dim] *= step;
  return r;
}

// Whether `from` broadcasts to `to` (aligned right: each size equal or 1).
bool broadcasts_to(const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d)
    if (from[d] != to[lead + d] && from[d] != 1) return false;
  return true;
}

// `t` broadcast to `sizes` (aligned right; stride 0 on broadcast dims), or
// kInvalidArgument when it does not broadcast to them (sizes from a .pt2's
// tensor_meta that disagree with the operand).
Expected<TRef> expanded(const TRef& t, const std::vector<int64_t>& sizes) {
  if (!broadcasts_to(t.sizes, sizes))
    return invalid_argument(shape_to_string(t.sizes) + " does not broadcast to " + shape_to_string(sizes));
  TRef r = t;
  r.sizes = sizes;
  r.strides.assign(sizes.size(), 0);
  const size_t lead = sizes.size() - t.sizes.size();
  for (size_t d = 0; d < t.sizes.size(); ++d)
    r.strides[lead + d] = (t.sizes[d] == 1 && sizes[lead + d] != 1) ? 0 : t.strides[d];
  return r;
}

// Whether strides lay out `sizes` densely in some dim order (no gaps, no overlap).
bool dense_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t expect = 1;
  for (size_t d : order) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expect) return false;
    expect *= sizes[d];
  }
  return true;
}

bool floating(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16 || t == DType::Float64;
}

size_t rank(const ir::Value* v) { return v ? v->type.sizes.size() : 0; }

}  // namespace kiln::cuda::layers
