// Kernels that order the values along one dim: sort and argsort (stable,
// NaN after every number, as ATen orders it; descending puts NaN first),
// msort, topk, kthvalue, median and nanmedian (the lower of the two middle
// values; median is NaN where a NaN is, nanmedian skips NaNs), and
// searchsorted / bucketize (the insertion point of each value in a sorted
// sequence), histc, isin, and unique / unique_consecutive.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

// The strided walk over the slices along one dim of a contiguous tensor.
struct Slices {
  int64_t outer = 1, len = 1, inner = 1;
  Slices(const Tensor& t, int64_t d) {
    for (int64_t k = 0; k < d; ++k) outer *= t.size(k);
    for (int64_t k = d + 1; k < t.dim(); ++k) inner *= t.size(k);
    len = t.dim() == 0 ? 1 : t.size(d);
  }
  int64_t count() const { return outer * inner; }
  // The offset of element j of slice s.
  int64_t at(int64_t s, int64_t j) const { return (s / inner * len + j) * inner + s % inner; }
};

template <typename T>
bool is_nan_value(T v) {
  if constexpr (std::is_floating_point_v<decltype(load(v))>) {
    return std::isnan(load(v));
  } else {
    return false;
  }
}

// a before b in ascending order, NaN after every number.
template <typename T>
bool ascending(T a, T b) {
  if (is_nan_value(a)) return false;
  if (is_nan_value(b)) return true;
  return load(a) < load(b);
}

// The positions of slice `s` of `p` in sorted order (stable).
template <typename T>
void order_slice(const T* p, const Slices& sl, int64_t s, bool descending, std::vector<int64_t>& order) {
  order.resize(static_cast<size_t>(sl.len));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (descending) {
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return ascending(p[sl.at(s, b)], p[sl.at(s, a)]); });
  } else {
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return ascending(p[sl.at(s, a)], p[sl.at(s, b)]); });
  }
}

// `sizes` with dim d set to `n` (kept) or dropped.
Shape resized(const Tensor& t, int64_t d, std::optional<int64_t> n) {
  Shape s = t.sizes();
  if (t.dim() == 0) return s;
  if (n)
    s[static_cast<size_t>(d)] = *n;
  else
    s.erase(s.begin() + d);
  return s;
}

// The first `k` of each slice of `self` along d in sorted order: values and int64 indices.
Status take_ordered(KernelArgs& a, const Tensor& self, int64_t d, int64_t k, bool descending, bool want_values,
                    bool want_indices) {
  const Tensor x = self.contiguous();
  const Slices sl(x, d);
  const Shape shape = resized(x, d, k);
  Tensor values = Tensor::zeros(x.dtype(), shape);
  Tensor indices = Tensor::zeros(DType::Int64, shape);
  const Slices out(values, d);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    T* v = values.data<T>();
    int64_t* ix = indices.data<int64_t>();
    std::vector<int64_t> order;
    for (int64_t s = 0; s < sl.count(); ++s) {
      order_slice(p, sl, s, descending, order);
      for (int64_t j = 0; j < k; ++j) {
        v[out.at(s, j)] = p[sl.at(s, order[static_cast<size_t>(j)])];
        ix[out.at(s, j)] = order[static_cast<size_t>(j)];
      }
    }
  });
  size_t next = 0;
  if (want_values) a.set_output(next++, values);
  if (want_indices) a.set_output(next, indices);
  return Status::ok();
}

// sort(self, dim, descending) and sort.stable(self, stable, dim, descending): values and indices.
Status sort(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  KILN_ASSIGN_OR_RETURN(bool descending, a.bool_arg("descending"));
  return take_ordered(a, self, d, self.dim() == 0 ? 1 : self.size(d), descending, true, true);
}

Status argsort(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  KILN_ASSIGN_OR_RETURN(bool descending, a.bool_arg("descending"));
  return take_ordered(a, self, d, self.dim() == 0 ? 1 : self.size(d), descending, false, true);
}

Status msort(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  return take_ordered(a, self, 0, self.dim() == 0 ? 1 : self.size(0), false, true, false);
}

// topk(self, k, dim, largest, sorted): the k largest (smallest) in order.
Status topk(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t k, a.int_arg("k"));
  KILN_ASSIGN_OR_RETURN(int64_t d, a.dim_arg("dim", self.dim()));
  KILN_ASSIGN_OR_RETURN(bool largest, a.bool_arg("largest"));
  const int64_t len = self.dim() == 0 ? 1 : self.size(d);
  if (k < 0 || k > len)
    return a.error("topk: k (" + std::to_string(k) + ") out of range for a dim of size " + std::to_string(len));
  return take_ordered(a, self, d, k, largest, true, true);
}

// The k-th smallest (1-based) or median entry of each slice, with its index,
// reduced along d (kept as 1 with keepdim).
enum class Pick { kKth, kMedian, kNanMedian };

Status pick_kernel(KernelArgs& a, Pick pick, bool whole) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  Tensor x = self.contiguous();
  int64_t d = 0;
  bool keepdim = false;
  int64_t k = 1;
  if (whole) {
    x = x.reshape({x.numel()});
  } else {
    KILN_ASSIGN_OR_RETURN(d, a.dim_arg("dim", self.dim(), -1));
    KILN_ASSIGN_OR_RETURN(keepdim, a.bool_arg("keepdim"));
  }
  if (pick == Pick::kKth) {
    KILN_ASSIGN_OR_RETURN(k, a.int_arg("k"));
  }
  const Slices sl(x, d);
  if (sl.len == 0) return a.error("cannot take the median or k-th value of an empty dim");
  if (pick == Pick::kKth && (k < 1 || k > sl.len))
    return a.error("kthvalue: k (" + std::to_string(k) + ") out of range for a dim of size " + std::to_string(sl.len));
  const Shape shape = whole ? Shape{} : resized(x, d, keepdim ? std::optional<int64_t>(1) : std::nullopt);
  Tensor values = Tensor::zeros(x.dtype(), shape);
  Tensor indices = Tensor::zeros(DType::Int64, shape);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    std::vector<int64_t> order;
    for (int64_t s = 0; s < sl.count(); ++s) {
      int64_t nans = 0, first_nan = -1;
      for (int64_t j = 0; j < sl.len; ++j)
        if (is_nan_value(p[sl.at(s, j)])) {
          if (first_nan < 0) first_nan = j;
          ++nans;
        }
      int64_t at = 0;
      if (pick == Pick::kMedian && nans > 0) {
        at = first_nan;
      } else {
        order_slice(p, sl, s, false, order);
        const int64_t rank = pick == Pick::kKth        ? k - 1
                             : pick == Pick::kMedian   ? (sl.len - 1) / 2
                                                       : std::max<int64_t>(sl.len - nans - 1, 0) / 2;
        at = order[static_cast<size_t>(rank)];
      }
      values.data<T>()[s] = p[sl.at(s, at)];
      indices.data<int64_t>()[s] = at;
    }
  });
  a.set_output(0, values);
  if (!whole) a.set_output(1, indices);
  return Status::ok();
}

Status kthvalue(KernelArgs& a) { return pick_kernel(a, Pick::kKth, false); }
Status median_all(KernelArgs& a) { return pick_kernel(a, Pick::kMedian, true); }
Status median_dim(KernelArgs& a) { return pick_kernel(a, Pick::kMedian, false); }
Status nanmedian_all(KernelArgs& a) { return pick_kernel(a, Pick::kNanMedian, true); }
Status nanmedian_dim(KernelArgs& a) { return pick_kernel(a, Pick::kNanMedian, false); }

// The insertion point of each value of `values` in the matching row of
// `sorted` (its last dim; a 1-d sequence serves every value): the first
// position whose entry is >= the value (> with right). int64, or int32 when
// out_int32. As ATen compares (a NaN value goes after every entry).
Status insertion_points(KernelArgs& a, const Tensor& sorted_in, const Tensor& values_in, bool right, bool out_int32,
                        const std::optional<Tensor>& sorter) {
  if (sorted_in.dim() == 0) return a.error("the sorted sequence must have at least one dim");
  const int64_t len = sorted_in.size(sorted_in.dim() - 1);
  const int64_t rows = sorted_in.numel() / std::max<int64_t>(len, 1);
  const bool shared = sorted_in.dim() == 1;
  if (!shared) {
    if (values_in.dim() != sorted_in.dim())
      return a.error("the sorted sequence " + sorted_in.type_string() + " and the values " + values_in.type_string() +
                     " must have the same number of dims, or the sequence one dim");
    for (int64_t k = 0; k + 1 < values_in.dim(); ++k)
      if (values_in.size(k) != sorted_in.size(k))
        return a.error("the sorted sequence " + sorted_in.type_string() + " and the values " + values_in.type_string() +
                       " differ in dim " + std::to_string(k));
  }
  if (sorter && (sorter->sizes() != sorted_in.sizes() || sorter->dtype() != DType::Int64))
    return a.error("sorter must be int64 of the sorted sequence's sizes " + sorted_in.type_string() + ", got " +
                   sorter->type_string());
  const DType common = sorted_in.dtype() == values_in.dtype() ? sorted_in.dtype() : DType::Float64;
  const Tensor sorted = cast_copy(sorted_in, common);
  const Tensor values = cast_copy(values_in, common);
  const Tensor order = sorter ? sorter->contiguous() : Tensor();
  const int64_t per_row = values.dim() == 0 ? 1 : values.size(values.dim() - 1);
  Tensor out = Tensor::zeros(out_int32 ? DType::Int32 : DType::Int64, values.sizes());
  Status bad = Status::ok();
  visit_dtype(common, [&](auto tag) {
    using T = decltype(tag);
    const T* s = sorted.data<T>();
    const T* v = values.data<T>();
    for (int64_t i = 0; i < values.numel(); ++i) {
      const int64_t row = shared ? 0 : i / std::max<int64_t>(per_row, 1);
      if (row >= rows) break;
      const T* base = s + row * len;
      const int64_t* perm = sorter ? order.data<int64_t>() + row * len : nullptr;
      auto entry = [&](int64_t j) -> T {
        if (!perm) return base[j];
        const int64_t p = perm[j];
        if (p < 0 || p >= len) {
          if (bad.is_ok()) bad = a.error("sorter index " + std::to_string(p) + " out of range for a sequence of " +
                                         std::to_string(len));
          return base[0];
        }
        return base[p];
      };
      int64_t lo = 0, hi = len;
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        const auto e = load(entry(mid)), x = load(v[i]);
        const bool go_right = right ? !(e > x) : !(e >= x);
        if (go_right)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (out_int32)
        out.data<int32_t>()[i] = static_cast<int32_t>(lo);
      else
        out.data<int64_t>()[i] = lo;
    }
  });
  if (!bad.is_ok()) return bad;
  a.set_output(0, out);
  return Status::ok();
}

// searchsorted.Tensor(sorted_sequence, self, out_int32, right, side, sorter).
Status searchsorted(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor sorted, a.tensor("sorted_sequence"));
  KILN_ASSIGN_OR_RETURN(Tensor values, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(bool out_int32, a.bool_arg("out_int32"));
  KILN_ASSIGN_OR_RETURN(bool right, a.bool_arg("right"));
  std::optional<std::string> side;
  if (a.has("side")) {
    auto s = a.string_arg("side");
    if (s.has_value()) side = *s;
  }
  if (side) {
    if (*side != "left" && *side != "right") return a.error("side must be 'left' or 'right', got '" + *side + "'");
    if (right && *side == "left") return a.error("side 'left' contradicts right=True");
    right = *side == "right";
  }
  KILN_ASSIGN_OR_RETURN(std::optional<Tensor> sorter, a.optional_tensor("sorter"));
  return insertion_points(a, sorted, values, right, out_int32, sorter);
}

// bucketize.Tensor(self, boundaries, out_int32, right).
Status bucketize(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor values, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor boundaries, a.tensor("boundaries"));
  if (boundaries.dim() != 1) return a.error("boundaries must be 1-d, got " + boundaries.type_string());
  KILN_ASSIGN_OR_RETURN(bool out_int32, a.bool_arg("out_int32"));
  KILN_ASSIGN_OR_RETURN(bool right, a.bool_arg("right"));
  return insertion_points(a, boundaries, values, right, out_int32, std::nullopt);
}


// histc(self, bins, min, max): counts of the values in `bins` equal bins over
// [min, max] (the data's own range when both are 0; a value at max counts in
// the last bin, values outside and NaN in none), in self's floating dtype.
Status histc(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t bins, a.int_arg("bins"));
  KILN_ASSIGN_OR_RETURN(double lo, a.float_arg("min"));
  KILN_ASSIGN_OR_RETURN(double hi, a.float_arg("max"));
  if (!is_floating(self.dtype())) return a.error("histc takes a floating tensor, got " + self.type_string());
  if (bins <= 0) return a.error("histc: bins must be positive, got " + std::to_string(bins));
  if (lo > hi) return a.error("histc: max must be at least min");
  const Tensor x = cast_copy(self, DType::Float64);
  const double* p = x.data<double>();
  if (lo == hi && x.numel() > 0) {
    lo = std::numeric_limits<double>::infinity();
    hi = -lo;
    for (int64_t i = 0; i < x.numel(); ++i)
      if (std::isfinite(p[i])) {
        lo = std::min(lo, p[i]);
        hi = std::max(hi, p[i]);
      }
    if (!std::isfinite(lo)) lo = hi = 0;
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  // The bin as ATen computes it, in float for float32 input (a value on an
  // edge lands where ATen puts it).
  auto bin = [&](auto v, auto l, auto h) { return static_cast<int64_t>((v - l) * static_cast<decltype(v)>(bins) / (h - l)); };
  const bool single = self.dtype() == DType::Float32;
  std::vector<double> counts(static_cast<size_t>(bins), 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = p[i];
    if (!(v >= lo && v <= hi)) continue;
    const int64_t b = single ? bin(static_cast<float>(v), static_cast<float>(lo), static_cast<float>(hi)) : bin(v, lo, hi);
    counts[static_cast<size_t>(std::clamp<int64_t>(b, 0, bins - 1))] += 1;
  }
  Tensor out = Tensor::zeros(DType::Float64, {bins});
  std::copy(counts.begin(), counts.end(), out.data<double>());
  a.set_output(0, cast_copy(out, self.dtype()));
  return Status::ok();
}

// isin(elements, test_elements, assume_unique, invert): bool, true where an
// element equals one of test_elements (NaN equals nothing).
Status isin(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor elements, a.tensor("elements"));
  KILN_ASSIGN_OR_RETURN(Tensor tests, a.tensor("test_elements"));
  KILN_ASSIGN_OR_RETURN(bool invert, a.bool_arg("invert"));
  const Tensor e = cast_copy(elements, DType::Float64), t = cast_copy(tests, DType::Float64);
  if (elements.dtype() == DType::Int64 || tests.dtype() == DType::Int64) {
    // int64 compared exactly, not through double
    if (elements.dtype() != tests.dtype())
      return a.error("isin of " + elements.type_string() + " in " + tests.type_string() + ": give both one dtype");
  }
  // NaN equals nothing: NaN test elements are dropped (they would break the ordering) and NaN elements found nowhere.
  std::vector<double> sorted;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isnan(t.data<double>()[i])) sorted.push_back(t.data<double>()[i]);
  std::vector<int64_t> sorted_int;
  const bool exact = elements.dtype() == DType::Int64;
  if (exact) {
    const Tensor ti = tests.contiguous();
    sorted_int.assign(ti.data<int64_t>(), ti.data<int64_t>() + ti.numel());
    std::sort(sorted_int.begin(), sorted_int.end());
  }
  std::sort(sorted.begin(), sorted.end());
  Tensor out = Tensor::zeros(DType::Bool, elements.sizes());
  const Tensor ei = exact ? elements.contiguous() : Tensor();
  for (int64_t i = 0; i < e.numel(); ++i) {
    const double v = e.data<double>()[i];
    const bool found = exact ? std::binary_search(sorted_int.begin(), sorted_int.end(), ei.data<int64_t>()[i])
                             : !std::isnan(v) && std::binary_search(sorted.begin(), sorted.end(), v);
    out.data<bool>()[i] = found != invert;
  }
  a.set_output(0, out);
  return Status::ok();
}

// _unique2(self, sorted, return_inverse, return_counts): the distinct values
// in ascending order (NaNs each their own, last), each element's position
// among them (self's sizes) and each value's count; unique_consecutive(self,
// return_inverse, return_counts, dim=None): runs of equal values collapsed,
// in order. Both over the flattened tensor; the output sizes come from the data.
Status unique_kernel(KernelArgs& a, bool consecutive) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (consecutive && a.has("dim")) {
    KILN_ASSIGN_OR_RETURN(std::optional<int64_t> dim, a.optional_int("dim"));
    if (dim) return a.error("unique_consecutive along a dim is not supported; only of the flattened tensor");
  }
  const Tensor x = self.contiguous().reshape({self.numel()});
  const Slices sl(x, 0);
  Tensor values, inverse = Tensor::zeros(DType::Int64, self.sizes()), counts;
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    std::vector<int64_t> order;
    if (consecutive) {
      order.resize(static_cast<size_t>(x.numel()));
      std::iota(order.begin(), order.end(), int64_t{0});
    } else {
      order_slice(p, sl, 0, false, order);
    }
    std::vector<T> distinct;
    std::vector<int64_t> count;
    int64_t* inv = inverse.data<int64_t>();
    for (size_t j = 0; j < order.size(); ++j) {
      const T v = p[order[j]];
      const bool same = !distinct.empty() && !is_nan_value(v) && !is_nan_value(distinct.back()) &&
                        !(load(v) < load(distinct.back())) && !(load(distinct.back()) < load(v));
      if (!same) {
        distinct.push_back(v);
        count.push_back(0);
      }
      ++count.back();
      inv[order[j]] = static_cast<int64_t>(distinct.size()) - 1;
    }
    values = Tensor::zeros(x.dtype(), {static_cast<int64_t>(distinct.size())});
    std::copy(distinct.begin(), distinct.end(), values.data<T>());
    counts = Tensor::zeros(DType::Int64, {static_cast<int64_t>(count.size())});
    std::copy(count.begin(), count.end(), counts.data<int64_t>());
  });
  // As ATen: an output not asked for is an empty tensor.
  KILN_ASSIGN_OR_RETURN(bool want_inverse, a.bool_arg("return_inverse"));
  KILN_ASSIGN_OR_RETURN(bool want_counts, a.bool_arg("return_counts"));
  a.set_output(0, values);
  a.set_output(1, want_inverse ? inverse : Tensor::zeros(DType::Int64, {0}));
  a.set_output(2, want_counts ? counts : Tensor::zeros(DType::Int64, {0}));
  return Status::ok();
}

Status unique2(KernelArgs& a) { return unique_kernel(a, false); }
Status unique_consecutive(KernelArgs& a) { return unique_kernel(a, true); }
}  // namespace

void register_sort_kernels(KernelRegistry& r) {
  r.add(ir::OpKind::kSort, &sort);
  r.add(ir::OpKind::kSortStable, &sort);
  r.add(ir::OpKind::kArgsort, &argsort);
  r.add(ir::OpKind::kArgsortStable, &argsort);
  r.add(ir::OpKind::kMsort, &msort);
  r.add(ir::OpKind::kTopk, &topk);
  r.add(ir::OpKind::kKthvalue, &kthvalue);
  r.add(ir::OpKind::kMedian, &median_all);
  r.add(ir::OpKind::kMedianDim, &median_dim);
  r.add(ir::OpKind::kNanmedian, &nanmedian_all);
  r.add(ir::OpKind::kNanmedianDim, &nanmedian_dim);
  r.add(ir::OpKind::kSearchsortedTensor, &searchsorted);
  r.add(ir::OpKind::kBucketizeTensor, &bucketize);
  r.add(ir::OpKind::kHistc, &histc);
  r.add(ir::OpKind::kIsinTensorTensor, &isin);
  r.add(ir::OpKind::kUnique2, &unique2);
  r.add(ir::OpKind::kUniqueConsecutive, &unique_consecutive);
}

}  // namespace kiln::cpu
