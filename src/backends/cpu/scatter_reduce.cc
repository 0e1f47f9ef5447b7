// The scatter family that writes element by element or slice by slice with a
// reduction: scatter (src or a value, replacing or with "add" / "multiply"),
// scatter_add, scatter_reduce, index_add, index_reduce and index_fill. Each
// returns a copy of self with the writes applied. Every index is checked
// before anything is written; positions written more than once combine in
// index order, as PyTorch's CPU kernels do.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

enum class Reduce { kReplace, kSum, kProd, kMean, kMax, kMin };

Expected<Reduce> parse_reduce(const KernelArgs& a, const std::string& name) {
  if (name == "sum" || name == "add") return Reduce::kSum;
  if (name == "prod" || name == "multiply") return Reduce::kProd;
  if (name == "mean") return Reduce::kMean;
  if (name == "amax") return Reduce::kMax;
  if (name == "amin") return Reduce::kMin;
  return a.error("unknown reduce '" + name + "' (sum, prod, mean, amax or amin; scatter takes add or multiply)");
}

// One write: out's element at `dst` takes (or combines with) src's element at
// `src` (offsets in elements; src is ignored for a value).
struct Write {
  int64_t dst, src;
};

// Applies `writes` to `out` (fresh, contiguous): `src` holds the values (or
// is a 0-d tensor of the one value), cast to out's dtype. Reductions start
// from the element of self (include_self) or from the first value written.
void apply_writes(Tensor& out, const Tensor& src, const std::vector<Write>& writes, Reduce r, bool include_self,
                  double alpha) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = opmath_t<T>;
    T* o = out.data<T>();
    const T* s = src.data<T>();
    auto value = [&](const Write& w) {
      const C v = load(s[w.src]);
      if constexpr (std::is_same_v<T, bool>) {
        return v;
      } else {
        return alpha == 1 ? v : static_cast<C>(static_cast<double>(v) * alpha);
      }
    };
    if (r == Reduce::kReplace) {
      for (const Write& w : writes) o[w.dst] = s[w.src];
      return;
    }
    const auto n = static_cast<size_t>(out.numel());
    std::vector<C> acc(n);
    std::vector<int64_t> count(n, -1);  // -1: not written
    auto combine = [r](C x, C v) -> C {
      if constexpr (std::is_same_v<T, bool>) {
        return r == Reduce::kProd || r == Reduce::kMin ? (x && v) : (x || v);
      } else {
        switch (r) {
          case Reduce::kProd: return static_cast<C>(x * v);
          case Reduce::kMax:
            if constexpr (is_float_v<C>) {
              if (std::isnan(v) || std::isnan(x)) return std::isnan(v) ? v : x;
            }
            return x < v ? v : x;
          case Reduce::kMin:
            if constexpr (is_float_v<C>) {
              if (std::isnan(v) || std::isnan(x)) return std::isnan(v) ? v : x;
            }
            return v < x ? v : x;
          default:
            if constexpr (std::is_integral_v<C>) {
              return static_cast<C>(static_cast<uint64_t>(x) + static_cast<uint64_t>(v));
            } else {
              return x + v;
            }
        }
      }
    };
    for (const Write& w : writes) {
      const auto d = static_cast<size_t>(w.dst);
      if (count[d] < 0) {
        count[d] = include_self ? 1 : 0;
        if (include_self) {
          acc[d] = combine(load(o[d]), value(w));
        } else {
          acc[d] = value(w);
        }
      } else {
        acc[d] = combine(acc[d], value(w));
      }
      ++count[d];
    }
    for (size_t d = 0; d < n; ++d) {
      if (count[d] < 0) continue;
      C v = acc[d];
      if (r == Reduce::kMean) {
        const int64_t c = count[d];  // the writes, plus self when included
        if constexpr (std::is_same_v<T, bool>) {
          v = v && c > 0;
        } else if constexpr (std::is_integral_v<C>) {
          const C q = static_cast<C>(v / c);
          v = (q * c != v && (v < 0) != (c < 0)) ? static_cast<C>(q - 1) : q;  // floor, as ATen's mean
        } else {
          v = static_cast<C>(v / static_cast<C>(c));
        }
      }
      o[d] = convert<T>(v);
    }
  });
}

// The value argument of a value overload as a 0-d tensor of `dtype`.
Expected<Tensor> value_tensor(const KernelArgs& a, std::string_view name, DType dtype) {
  if (auto t = a.tensor(name); t.has_value()) {
    if (t->numel() != 1) return a.error("the value to fill must be a 0-d tensor, got " + t->type_string());
    return cast_copy(t->reshape({}), dtype);
  }
  KILN_ASSIGN_OR_RETURN(Scalar s, a.scalar(name));
  return scalar_to_dtype(s, dtype);
}

// scatter(self, dim, index, src | value [, reduce]), scatter_add,
// scatter_reduce(self, dim, index, src, reduce, include_self): position p of
// index writes src[p] into out at p with p[dim] replaced by index[p].
Status scatter_kernel(KernelArgs& a, bool has_src, Reduce r, bool include_self) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor index, a.tensor("index"));
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  if (index.dtype() != DType::Int64) return a.error("expected an int64 index, got " + index.type_string());
  Tensor src;
  if (has_src) {
    KILN_ASSIGN_OR_RETURN(src, a.tensor("src"));
    if (src.dtype() != self.dtype())
      return a.error("self and src must have the same dtype, got " + self.type_string() + " and " +
                     src.type_string());
    src = cast_copy(src, src.dtype());  // contiguous, offsets from 0
  } else {
    KILN_ASSIGN_OR_RETURN(src, value_tensor(a, "value", self.dtype()));
  }
  Tensor out = cast_copy(self, self.dtype());
  std::vector<Write> writes;
  if (index.numel() > 0) {
    const int64_t rank = std::max<int64_t>(self.dim(), 1);
    auto dims_of = [](const Tensor& t) { return t.dim() == 0 ? Shape{1} : t.sizes(); };
    const Shape is = dims_of(index), ss = dims_of(self);
    if (static_cast<int64_t>(is.size()) != rank || (has_src && std::max<int64_t>(src.dim(), 1) != rank))
      return a.error("index " + index.type_string() + ", self " + self.type_string() +
                     (has_src ? " and src " + src.type_string() : std::string()) +
                     " must have the same number of dimensions");
    const Shape sz = has_src ? dims_of(src) : Shape{};
    for (int64_t k = 0; k < rank; ++k) {
      if ((k != d && is[k] > ss[k]) || (has_src && is[k] > sz[k]))
        return a.error("index " + index.type_string() + " is larger than self " + self.type_string() +
                       (has_src ? " or src " + src.type_string() : std::string()) + " at dimension " +
                       std::to_string(k));
    }
    Tensor ix = cast_copy(index, DType::Int64);
    const Shape out_strides = out.dim() == 0 ? Shape{1} : out.strides();
    const Shape src_strides = has_src ? (src.dim() == 0 ? Shape{1} : src.strides()) : Shape{};
    Status bad = Status::ok();
    int64_t i = 0;
    for_each_index(is, [&](const std::vector<int64_t>& p) {
      const int64_t v = ix.data<int64_t>()[i++];
      if (v < 0 || v >= ss[static_cast<size_t>(d)]) {
        if (bad.is_ok())
          bad = a.error("index " + std::to_string(v) + " is out of bounds for dimension " + std::to_string(d) +
                        " with size " + std::to_string(ss[static_cast<size_t>(d)]));
        return;
      }
      int64_t dst = 0, s = 0;
      for (size_t k = 0; k < p.size(); ++k) {
        dst += (static_cast<int64_t>(k) == d ? v : p[k]) * out_strides[k];
        if (has_src) s += p[k] * src_strides[k];
      }
      writes.push_back({dst, has_src ? s : 0});
    });
    KILN_TRY(bad);
  }
  apply_writes(out, src, writes, r, include_self, 1.0);
  a.set_output(0, out);
  return Status::ok();
}

Status scatter_src(KernelArgs& a) { return scatter_kernel(a, true, Reduce::kReplace, true); }
Status scatter_value(KernelArgs& a) { return scatter_kernel(a, false, Reduce::kReplace, true); }
Status scatter_add(KernelArgs& a) { return scatter_kernel(a, true, Reduce::kSum, true); }
template <bool kSrc>
Status scatter_with_reduce(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(std::string name, a.string_arg("reduce"));
  if (name != "add" && name != "multiply")
    return a.error("scatter takes reduce 'add' or 'multiply', got '" + name + "'");
  KILN_ASSIGN_OR_RETURN(Reduce r, parse_reduce(a, name));
  return scatter_kernel(a, kSrc, r, true);
}
Status scatter_reduce_two(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(std::string name, a.string_arg("reduce"));
  KILN_ASSIGN_OR_RETURN(Reduce r, parse_reduce(a, name));
  KILN_ASSIGN_OR_RETURN(bool include_self, a.bool_arg("include_self"));
  return scatter_kernel(a, true, r, include_self);
}

// index_add(self, dim, index, source, alpha), index_reduce(self, dim, index,
// source, reduce, include_self), index_fill(self, dim, index, value): slice i
// of source (or the value) goes to slice index[i] of out along dim.
Status index_kernel(KernelArgs& a, bool has_source, Reduce r, bool include_self, double alpha) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor index, a.tensor("index"));
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  if (index.dim() > 1) return a.error("index should have dimension 1 or 0, got " + index.type_string());
  if (index.dtype() != DType::Int64 && index.dtype() != DType::Int32)
    return a.error("expected an int64 or int32 index, got " + index.type_string());
  auto as_1d = [](const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; };
  Tensor out = cast_copy(self, self.dtype());
  Tensor dst = as_1d(out);
  Tensor src;
  Tensor ix = cast_copy(index, DType::Int64);
  const int64_t n = ix.numel(), size = dst.size(d);
  if (has_source) {
    KILN_ASSIGN_OR_RETURN(Tensor source, a.tensor("source"));
    if (source.dtype() != self.dtype())
      return a.error("self and source must have the same dtype, got " + self.type_string() + " and " +
                     source.type_string());
    src = cast_copy(as_1d(source), source.dtype());
    if (src.dim() != dst.dim() || src.size(d) != n)
      return a.error("source " + source.type_string() + " must have self's rank and " + std::to_string(n) +
                     " slices along dim " + std::to_string(d) + " (self " + self.type_string() + ")");
    for (int64_t k = 0; k < dst.dim(); ++k)
      if (k != d && src.size(k) != dst.size(k))
        return a.error("source " + source.type_string() + " and self " + self.type_string() +
                       " must have the same slice shapes (mismatch at dimension " + std::to_string(k) + ")");
  } else {
    KILN_ASSIGN_OR_RETURN(src, value_tensor(a, "value", self.dtype()));
  }
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = ix.data<int64_t>()[i];
    if (!has_source && v < 0) v += size;  // index_fill takes negative indices
    if (v < 0 || v >= size)
      return a.error("index " + std::to_string(ix.data<int64_t>()[i]) + " is out of bounds for dimension " +
                     std::to_string(d) + " with size " + std::to_string(size));
    rows[static_cast<size_t>(i)] = v;
  }
  // Element writes, slice by slice: out's slice rows[i] from source's slice i.
  std::vector<Write> writes;
  for (int64_t i = 0; i < n; ++i) {
    // element_offsets count from a view's own first element; out and src are fresh (offset 0).
    const Tensor to = select_view(dst, d, rows[static_cast<size_t>(i)]);
    const std::vector<int64_t> dst_offsets = element_offsets(to);
    std::vector<int64_t> src_offsets(dst_offsets.size(), 0);
    int64_t src_base = 0;
    if (has_source) {
      const Tensor from = select_view(src, d, i);
      src_offsets = element_offsets(from);
      src_base = from.storage_offset();
    }
    for (size_t k = 0; k < dst_offsets.size(); ++k)
      writes.push_back({to.storage_offset() + dst_offsets[k], src_base + src_offsets[k]});
  }
  apply_writes(out, src, writes, r, include_self, alpha);
  a.set_output(0, out);
  return Status::ok();
}

Status index_add(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Scalar alpha, a.scalar("alpha"));
  return index_kernel(a, true, Reduce::kSum, true, alpha.to_double());
}
Status index_reduce(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(std::string name, a.string_arg("reduce"));
  if (name == "sum") return a.error("index_reduce takes reduce prod, mean, amax or amin, got 'sum'");
  KILN_ASSIGN_OR_RETURN(Reduce r, parse_reduce(a, name));
  KILN_ASSIGN_OR_RETURN(bool include_self, a.bool_arg("include_self"));
  return index_kernel(a, true, r, include_self, 1.0);
}
Status index_fill(KernelArgs& a) { return index_kernel(a, false, Reduce::kReplace, true, 1.0); }

}  // namespace

void register_scatter_reduce_kernels(KernelRegistry& r) {
  using ir::OpKind;
  r.add(OpKind::kScatterSrc, &scatter_src);
  r.add(OpKind::kScatterValue, &scatter_value);
  r.add(OpKind::kScatterReduce, &scatter_with_reduce<true>);
  r.add(OpKind::kScatterValueReduce, &scatter_with_reduce<false>);
  r.add(OpKind::kScatterAdd, &scatter_add);
  r.add(OpKind::kScatterReduceTwo, &scatter_reduce_two);
  r.add(OpKind::kIndexAdd, &index_add);
  r.add(OpKind::kIndexReduce, &index_reduce);
  r.add(OpKind::kIndexFillScalar, &index_fill);
  r.add(OpKind::kIndexFillTensor, &index_fill);
}

}  // namespace kiln::cpu
