// Shape composites of torch, in core ops: roll, rot90, new_full,
// atleast_{1,2,3}d, stack (unsqueezes and a cat), hstack, vstack, dstack,
// column_stack, repeat of static sizes (an expand between reshapes), diff
// (slices and subtractions, prepend and append joined by a cat), softmax and
// log_softmax over a dim other than the last (between two transposes),
// meshgrid, repeat_interleave of an int, pixel_shuffle and pixel_unshuffle
// (a view, a permute and a reshape), linalg_diagonal (diagonal), channel_shuffle,
// mH, matrix_H, numpy_T, real, resolve_conj, resolve_neg, conj_physical (of
// real tensors), unsafe_chunk,
// unsafe_split; tensor_split, hsplit, vsplit, dsplit, split_with_sizes_copy,
// unfold_copy, as_strided_copy, flip of static sizes (index_selects of
// reversed positions), unfold along a static dim (an index_select of every
// window's positions), im2col of static sizes (two index_selects), fftshift and ifftshift (rolls by half).
//
// A node whose arguments a decomposition does not cover (symbolic sizes where
// it needs static ones, complex dtypes) is left as it is, and partitioning
// names it.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "lowering/decompose.h"

namespace kiln::lowering {

namespace {

using ir::OpKind;

// roll(x, shifts, dims): each dim the concatenation of its last `shift`
// entries and the rest; no dims: the flattened tensor rolled, reshaped back.
Expected<bool> roll(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto shifts = int_list(n, "shifts");
  const auto dims = int_list(n, "dims");
  const auto sizes = x ? static_sizes(x->type) : std::nullopt;
  if (!x || n.outputs.size() != 1 || !shifts || !dims || !sizes) return false;
  Nodes b(ctx, n);
  auto roll_dim = [&](ir::Value* v, const std::vector<int64_t>& vs, int64_t d, int64_t shift) {
    const int64_t size = vs[static_cast<size_t>(d)];
    const int64_t s = size == 0 ? 0 : ((shift % size) + size) % size;
    if (s == 0) return v;
    auto part = [&](int64_t start, int64_t end) {
      std::vector<int64_t> ps = vs;
      ps[static_cast<size_t>(d)] = end - start;
      return b.add(OpKind::kSliceTensor, {{"self", v}, {"dim", d}, {"start", start}, {"end", end}},
                   static_type(v->type.dtype, ps));
    };
    std::vector<ir::Value*> parts{part(size - s, size), part(0, size - s)};
    return b.add(OpKind::kCat, {{"tensors", parts}, {"dim", d}}, v->type);
  };
  ir::Value* y = x;
  if (dims->empty()) {
    if (shifts->size() != 1) return false;
    int64_t total = 1;
    for (int64_t s : *sizes) total *= s;
    ir::Value* flat = b.add(OpKind::kReshape, {{"self", x}, {"shape", std::vector<int64_t>{total}}},
                            static_type(x->type.dtype, {total}));
    y = roll_dim(flat, {total}, 0, (*shifts)[0]);
    y = b.add(OpKind::kReshape, {{"self", y}, {"shape", *sizes}}, x->type);
  } else {
    if (shifts->size() != dims->size()) return false;
    for (size_t i = 0; i < dims->size(); ++i) {
      const int64_t d = norm_dim((*dims)[i], sizes->size());
      if (d < 0) return false;
      y = roll_dim(y, *sizes, d, (*shifts)[i]);
    }
  }
  if (y == x) y = b.add(OpKind::kClone, {{"self", x}}, x->type);
  return b.done(y);
}

// rot90(x, k, dims): k = 1: flip dims[1] then transpose; 2: flip both; 3: flip dims[0] then transpose.
Expected<bool> rot90(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto k = int_value(n, "k");
  const auto dims = int_list(n, "dims");
  if (!x || n.outputs.size() != 1 || !k || !dims || dims->size() != 2) return false;
  const int64_t d0 = norm_dim((*dims)[0], x->type.sizes.size()), d1 = norm_dim((*dims)[1], x->type.sizes.size());
  if (d0 < 0 || d1 < 0 || d0 == d1) return false;
  const int64_t turns = ((*k % 4) + 4) % 4;
  Nodes b(ctx, n);
  if (turns == 0) return b.done(b.add(OpKind::kClone, {{"self", x}}, x->type));
  if (turns == 2) return b.done(b.add(OpKind::kFlip, {{"self", x}, {"dims", std::vector<int64_t>{d0, d1}}}, x->type));
  ir::Value* f = b.add(OpKind::kFlip, {{"self", x}, {"dims", std::vector<int64_t>{turns == 1 ? d1 : d0}}}, x->type);
  return b.done(b.add(OpKind::kTranspose, {{"self", f}, {"dim0", d0}, {"dim1", d1}}, n.outputs[0]->type));
}

// new_full(x, size, value) = full(size, value) in the result's dtype.
Expected<bool> new_full(PatternContext& ctx, ir::Node& n) {
  const auto size = int_list(n, "size");
  const ir::Arg* value = n.find("fill_value");
  if (!size || !value || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kFull, {{"size", *size}, {"fill_value", *value}, {"dtype", b.out().dtype}}, b.out()));
}

// atleast_nd(x): a 0-d tensor as [1, ...], a 1-d [n] as [1, n] (2-d) or
// [1, n, 1] (3-d), a 2-d [m, n] as [m, n, 1] (3-d); others as they are.
ir::Value* at_least(Nodes& b, ir::Value* x, size_t rank) {
  const size_t r = x->type.sizes.size();
  if (r >= rank) return x;
  if (rank == 1) return b.unsqueezed(x, {0});
  if (rank == 2) return b.unsqueezed(x, r == 0 ? std::vector<int64_t>{0, 0} : std::vector<int64_t>{0});
  if (r == 0) return b.unsqueezed(x, {0, 0, 0});
  if (r == 1) return b.unsqueezed(x, {0, 2});
  return b.unsqueezed(x, {2});
}

Expected<bool> atleast(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1) return false;
  const size_t rank = n.op == OpKind::kAtleast1d ? 1 : n.op == OpKind::kAtleast2d ? 2 : 3;
  Nodes b(ctx, n);
  ir::Value* y = at_least(b, x, rank);
  if (y == x) y = b.add(OpKind::kAlias, {{"self", x}}, x->type);
  return b.done(y);
}

// hstack, vstack, dstack, column_stack: a cat of the tensors made 1-, 2- or
// 3-d (column_stack: vectors as columns).
Expected<bool> stack_like(PatternContext& ctx, ir::Node& n) {
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  if (!ins || ins->empty() || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  std::vector<ir::Value*> parts;
  int64_t dim = 0;
  for (ir::Value* v : *ins) {
    switch (n.op) {
      case OpKind::kHstack: parts.push_back(at_least(b, v, 1)); break;
      case OpKind::kVstack: parts.push_back(at_least(b, v, 2)); break;
      case OpKind::kDstack: parts.push_back(at_least(b, v, 3)); break;
      default:
        parts.push_back(v->type.sizes.size() == 0   ? b.unsqueezed(v, {0, 1})
                        : v->type.sizes.size() == 1 ? b.unsqueezed(v, {1})
                                                    : v);
    }
  }
  if (n.op == OpKind::kHstack) dim = parts[0]->type.sizes.size() == 1 ? 0 : 1;
  if (n.op == OpKind::kDstack) dim = 2;
  if (n.op == OpKind::kColumnStack) dim = 1;
  return b.done(b.add(OpKind::kCat, {{"tensors", parts}, {"dim", dim}}, b.out()));
}

// stack(tensors, dim): each tensor with a unit dim inserted at dim, joined
// along it (sizes may be symbolic).
Expected<bool> stack(PatternContext& ctx, ir::Node& n) {
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  const auto dim = int_value(n, "dim");
  if (!ins || ins->empty() || !dim || n.outputs.size() != 1) return false;
  const int64_t d = norm_dim(*dim, (*ins)[0]->type.sizes.size() + 1);
  if (d < 0) return false;
  Nodes b(ctx, n);
  std::vector<ir::Value*> parts;
  for (ir::Value* v : *ins) {
    if (v->type.dtype != b.out().dtype || v->type.sizes.size() != (*ins)[0]->type.sizes.size()) return false;
    parts.push_back(b.unsqueezed(v, {d}));
  }
  return b.done(b.add(OpKind::kCat, {{"tensors", parts}, {"dim", d}}, b.out()));
}

// repeat(x, repeats) of static sizes: x viewed with leading unit dims to
// len(repeats) dims and a unit dim before each repeated one, expanded there
// to its count, and the pairs merged.
Expected<bool> repeat(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto reps = int_list(n, "repeats");
  const auto sx = x ? static_sizes(x->type) : std::nullopt;
  if (!sx || !reps || reps->size() < sx->size() || n.outputs.size() != 1 || n.outputs[0]->type.dtype != x->type.dtype)
    return false;
  std::vector<int64_t> padded(reps->size() - sx->size(), 1);
  padded.insert(padded.end(), sx->begin(), sx->end());
  std::vector<int64_t> viewed, wide, merged;
  bool repeated = false;
  for (size_t i = 0; i < reps->size(); ++i) {
    const int64_t r = (*reps)[i];
    if (r < 0) return false;
    if (r != 1) {
      viewed.push_back(1);
      wide.push_back(r);
      repeated = true;
    }
    viewed.push_back(padded[i]);
    wide.push_back(padded[i]);
    merged.push_back(r * padded[i]);
  }
  const DType dt = x->type.dtype;
  if (!same_sizes(static_type(dt, merged).sizes, n.outputs[0]->type.sizes)) return false;
  Nodes b(ctx, n);
  ir::Value* v = b.reshape(x, viewed);
  if (!repeated) return b.done(b.add(OpKind::kClone, {{"self", v}}, b.out()));
  ir::Value* e = b.add(OpKind::kExpand, {{"self", v}, {"size", wide}}, static_type(dt, wide));
  return b.done(b.reshape(e, merged));
}

// diff(x, n, dim, prepend, append): prepend, x and append joined along dim
// (of static size), then n times the later entries minus the earlier ones.
// Bool tensors (whose diff is an exclusive or) and n reaching the length
// (an empty result) are left as they are.
Expected<bool> diff(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto order = int_value(n, "n");
  const auto dim = int_value(n, "dim");
  if (!x || !order || *order < 0 || !dim || n.outputs.size() != 1 || x->type.dtype == DType::Bool ||
      n.outputs[0]->type.dtype != x->type.dtype)
    return false;
  const size_t rank = x->type.sizes.size();
  const int64_t d = norm_dim(*dim, rank);
  if (d < 0) return false;
  std::vector<ir::Value*> parts;
  int64_t length = 0;
  for (const char* arg : {"prepend", "self", "append"}) {
    if (absent(n, arg)) continue;
    ir::Value* v = PatternContext::tensor_arg(n, arg);
    if (!v || v->type.dtype != x->type.dtype || v->type.sizes.size() != rank) return false;
    const ir::Dim& len = v->type.sizes[static_cast<size_t>(d)];
    if (!len.is_static()) return false;
    for (size_t k = 0; k < rank; ++k)
      if (static_cast<int64_t>(k) != d && !same_dim(v->type.sizes[k], x->type.sizes[k])) return false;
    parts.push_back(v);
    length += len.value;
  }
  if (*order >= length) return false;
  Nodes b(ctx, n);
  ir::Value* v = parts[0];
  if (parts.size() > 1) {
    ir::TensorType joined = x->type;
    joined.sizes[static_cast<size_t>(d)] = ir::Dim::of(length);
    v = b.add(OpKind::kCat, {{"tensors", parts}, {"dim", d}}, joined);
  }
  for (int64_t k = 0; k < *order; ++k, --length)
    v = b.binary(OpKind::kSubTensor, b.slice(v, d, 1, length), b.slice(v, d, 0, length - 1), x->type.dtype);
  if (!same_sizes(v->type.sizes, b.out().sizes)) return false;
  if (*order == 0) v = b.add(OpKind::kClone, {{"self", v}}, b.out());
  return b.done(v);
}

// softmax / log_softmax over a dim other than the last: that dim swapped with
// the last, the op over the last, swapped back (each row holds the same
// numbers, so the result is the same; engines take softmax over the last dim).
Expected<bool> softmax_other_dim(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto dim = int_value(n, "dim");
  if (!x || !dim || n.outputs.size() != 1 || !is_floating(x->type.dtype) ||
      bool_value(n, "half_to_float", false) != false)
    return false;
  const size_t rank = x->type.sizes.size();
  const int64_t d = norm_dim(*dim, rank), last = static_cast<int64_t>(rank) - 1;
  if (d < 0 || d == last) return false;
  Nodes b(ctx, n);
  auto swapped = [&](ir::Value* v, DType dt) {
    ir::TensorType t{dt, v->type.sizes};
    std::swap(t.sizes[static_cast<size_t>(d)], t.sizes[static_cast<size_t>(last)]);
    return b.add(OpKind::kTranspose, {{"self", v}, {"dim0", d}, {"dim1", last}}, t);
  };
  std::vector<ir::NamedArg> args = n.args;
  for (ir::NamedArg& a : args) {
    if (a.name == "self") a.value = swapped(x, x->type.dtype);
    if (a.name == "dim") a.value = last;
  }
  ir::TensorType rows = x->type;
  std::swap(rows.sizes[static_cast<size_t>(d)], rows.sizes[static_cast<size_t>(last)]);
  rows.dtype = b.out().dtype;
  return b.done(swapped(b.add(n.op, std::move(args), rows), b.out().dtype));
}

// meshgrid(tensors, indexing): each 0- or 1-d tensor viewed along its own dim
// (the first two swapped for "xy") and expanded to the grid.
Expected<bool> meshgrid(PatternContext& ctx, ir::Node& n) {
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  std::string indexing = "ij";
  if (n.op == OpKind::kMeshgridIndexing) {
    const auto* s = std::get_if<std::string>(n.find("indexing"));
    if (!s || (*s != "ij" && *s != "xy")) return false;
    indexing = *s;
  }
  if (!ins || ins->empty() || ins->size() != n.outputs.size()) return false;
  const size_t k = ins->size();
  const auto grid = static_sizes(n.outputs[0]->type);
  if (!grid || grid->size() != k) return false;
  Nodes b(ctx, n);
  std::vector<ir::Value*> outs;
  for (size_t i = 0; i < k; ++i) {
    ir::Value* v = (*ins)[i];
    if (v->type.sizes.size() > 1) return false;
    size_t pos = i;
    if (indexing == "xy" && k >= 2 && i < 2) pos = 1 - i;
    std::vector<int64_t> shape(k, 1);
    shape[pos] = (*grid)[pos];
    ir::Value* col = b.add(OpKind::kView, {{"self", v}, {"size", shape}}, static_type(v->type.dtype, shape));
    outs.push_back(b.add(OpKind::kExpand, {{"self", col}, {"size", *grid}}, n.outputs[i]->type));
  }
  for (size_t i = 0; i < k; ++i) ctx.replace_uses(n.outputs[i], outs[i]);
  return true;
}

// repeat_interleave(x, repeats, dim): each entry along dim repeated `repeats`
// times in place: unsqueeze after dim, expand, merge (no dim: of the flattened x).
Expected<bool> repeat_interleave(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto repeats = int_value(n, "repeats");
  auto sizes = x ? static_sizes(x->type) : std::nullopt;
  if (!x || n.outputs.size() != 1 || !repeats || *repeats < 0 || !sizes) return false;
  Nodes b(ctx, n);
  ir::Value* y = x;
  int64_t d = 0;
  if (absent(n, "dim")) {
    int64_t total = 1;
    for (int64_t s : *sizes) total *= s;
    sizes = std::vector<int64_t>{total};
    y = b.add(OpKind::kReshape, {{"self", x}, {"shape", *sizes}}, static_type(x->type.dtype, *sizes));
  } else {
    const auto given = int_value(n, "dim");
    d = given ? norm_dim(*given, sizes->size()) : -1;
    if (d < 0) return false;
  }
  std::vector<int64_t> wide = *sizes;
  wide.insert(wide.begin() + d + 1, *repeats);
  y = b.unsqueezed(y, {d + 1});
  y = b.add(OpKind::kExpand, {{"self", y}, {"size", wide}}, static_type(x->type.dtype, wide));
  std::vector<int64_t> merged = *sizes;
  merged[static_cast<size_t>(d)] *= *repeats;
  return b.done(b.add(OpKind::kReshape, {{"self", y}, {"shape", merged}}, b.out()));
}

// pixel_shuffle(x, r): [.., C r r, H, W] -> [.., C, r, r, H, W] -> [.., C, H, r, W, r] -> [.., C, H r, W r];
// pixel_unshuffle(x, r): [.., C, H r, W r] -> [.., C, H, r, W, r] -> [.., C, r, r, H, W] -> [.., C r r, H, W].
// Either is a view splitting the last three dims, a permute and a reshape.
Expected<bool> pixel_shuffle(PatternContext& ctx, ir::Node& n) {
  const bool up = n.op == OpKind::kPixelShuffle;
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto r = int_value(n, up ? "upscale_factor" : "downscale_factor");
  const auto sizes = x ? static_sizes(x->type) : std::nullopt;
  const auto out = n.outputs.size() == 1 ? static_sizes(n.outputs[0]->type) : std::nullopt;
  if (!x || !out || !r || *r <= 0 || !sizes || sizes->size() < 3) return false;
  const size_t lead = sizes->size() - 3;
  const int64_t c = (*sizes)[lead], h = (*sizes)[lead + 1], w = (*sizes)[lead + 2];
  if (up ? c % (*r * *r) != 0 : h % *r != 0 || w % *r != 0) return false;
  std::vector<int64_t> split(sizes->begin(), sizes->begin() + static_cast<int64_t>(lead));
  const std::vector<int64_t> tail =
      up ? std::vector<int64_t>{c / (*r * *r), *r, *r, h, w} : std::vector<int64_t>{c, h / *r, *r, w / *r, *r};
  split.insert(split.end(), tail.begin(), tail.end());
  std::vector<int64_t> perm;
  for (size_t i = 0; i < lead; ++i) perm.push_back(static_cast<int64_t>(i));
  const int64_t l = static_cast<int64_t>(lead);
  const std::vector<int64_t> moved =
      up ? std::vector<int64_t>{l, l + 3, l + 1, l + 4, l + 2} : std::vector<int64_t>{l, l + 2, l + 4, l + 1, l + 3};
  perm.insert(perm.end(), moved.begin(), moved.end());
  std::vector<int64_t> permuted;
  for (int64_t p : perm) permuted.push_back(split[static_cast<size_t>(p)]);
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* y = b.add(OpKind::kView, {{"self", x}, {"size", split}}, static_type(dt, split));
  y = b.add(OpKind::kPermute, {{"self", y}, {"dims", perm}}, static_type(dt, permuted));
  return b.done(b.add(OpKind::kReshape, {{"self", y}, {"shape", *out}}, b.out()));
}

// linalg_diagonal(A, offset, dim1 = -2, dim2 = -1) is diagonal with those arguments.
Expected<bool> linalg_diagonal(PatternContext& ctx, ir::Node& n) {
  ir::Value* a = PatternContext::tensor_arg(n, "A");
  const auto offset = int_value(n, "offset", 0);
  const auto d1 = int_value(n, "dim1", -2);
  const auto d2 = int_value(n, "dim2", -1);
  if (!a || n.outputs.size() != 1 || !offset || !d1 || !d2) return false;
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kDiagonal, {{"self", a}, {"offset", *offset}, {"dim1", *d1}, {"dim2", *d2}}, b.out()));
}

// channel_shuffle(x, g): [N, C, ...] -> [N, g, C / g, ...] -> transpose(1, 2) -> [N, C, ...].
Expected<bool> channel_shuffle(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto g = int_value(n, "groups");
  const auto sizes = x ? static_sizes(x->type) : std::nullopt;
  if (!x || n.outputs.size() != 1 || !g || *g <= 0 || !sizes || sizes->size() < 2 || (*sizes)[1] % *g != 0)
    return false;
  std::vector<int64_t> split{(*sizes)[0], *g, (*sizes)[1] / *g};
  split.insert(split.end(), sizes->begin() + 2, sizes->end());
  std::vector<int64_t> swapped = split;
  std::swap(swapped[1], swapped[2]);
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* y = b.add(OpKind::kView, {{"self", x}, {"size", split}}, static_type(dt, split));
  y = b.add(OpKind::kTranspose, {{"self", y}, {"dim0", int64_t{1}}, {"dim1", int64_t{2}}}, static_type(dt, swapped));
  return b.done(b.add(OpKind::kReshape, {{"self", y}, {"shape", *sizes}}, b.out()));
}

// mH, matrix_H (of real tensors): the last two dims swapped; numpy_T: every dim reversed.
Expected<bool> transposed(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1) return false;
  const int64_t rank = static_cast<int64_t>(x->type.sizes.size());
  Nodes b(ctx, n);
  if (n.op == OpKind::kNumpyT) {
    std::vector<int64_t> perm(static_cast<size_t>(rank));
    for (int64_t i = 0; i < rank; ++i) perm[static_cast<size_t>(i)] = rank - 1 - i;
    return b.done(b.add(OpKind::kPermute, {{"self", x}, {"dims", perm}}, b.out()));
  }
  if (rank < 2 || (n.op == OpKind::kMatrixH && rank != 2)) return false;
  return b.done(b.add(OpKind::kTranspose, {{"self", x}, {"dim0", rank - 2}, {"dim1", rank - 1}}, b.out()));
}

// real, resolve_conj, resolve_neg, conj_physical of a real tensor: the tensor.
Expected<bool> real_identity(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || n.outputs[0]->type.dtype != x->type.dtype) return false;
  Nodes b(ctx, n);
  const bool copy = n.op == OpKind::kConjPhysical || n.op == OpKind::kConjPhysicalInternal;
  return b.done(b.add(copy ? OpKind::kClone : OpKind::kAlias, {{"self", x}}, x->type));
}

// unsafe_chunk and unsafe_split are chunk and split (no aliasing checks to skip here).
Expected<bool> unsafe_split(PatternContext&, ir::Node& n) {
  n.op = n.op == OpKind::kUnsafeChunk ? OpKind::kChunk : OpKind::kSplitTensor;
  return true;
}

// The (start, end) pieces along `dim` of a size-`len` dim that a split op asks for.
std::optional<std::vector<std::pair<int64_t, int64_t>>> split_pieces(const ir::Node& n, int64_t len) {
  std::vector<int64_t> bounds;  // the split points
  auto from_indices = [&](const std::vector<int64_t>& idx) {
    for (int64_t i : idx) bounds.push_back(std::clamp<int64_t>(i < 0 ? i + len : i, 0, len));
  };
  switch (n.op) {
    case OpKind::kTensorSplitSections:
    case OpKind::kHsplitInt:
    case OpKind::kVsplitInt:
    case OpKind::kDsplitInt: {
      const auto k = int_value(n, "sections");
      if (!k || *k <= 0) return std::nullopt;
      if (n.op != OpKind::kTensorSplitSections && len % *k != 0) return std::nullopt;
      int64_t at = 0;
      for (int64_t i = 0; i + 1 < *k; ++i) {
        at += len / *k + (i < len % *k ? 1 : 0);
        bounds.push_back(at);
      }
      break;
    }
    case OpKind::kSplitWithSizesCopy: {
      const auto sizes = int_list(n, "split_sizes");
      if (!sizes) return std::nullopt;
      int64_t at = 0;
      for (size_t i = 0; i + 1 < sizes->size(); ++i) bounds.push_back(at += (*sizes)[i]);
      break;
    }
    default: {
      const auto idx = int_list(n, "indices");
      if (!idx) return std::nullopt;
      from_indices(*idx);
    }
  }
  std::vector<std::pair<int64_t, int64_t>> pieces;
  int64_t start = 0;
  for (int64_t e : bounds) {
    pieces.emplace_back(start, std::max(start, e));
    start = std::max(start, e);
  }
  pieces.emplace_back(start, len);
  return pieces;
}

// tensor_split, hsplit, vsplit, dsplit (views) and split_with_sizes_copy: one
// slice per output along the op's dim.
Expected<bool> split_like(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.empty()) return false;
  const size_t rank = x->type.sizes.size();
  int64_t d = 0;
  switch (n.op) {
    case OpKind::kHsplitInt:
    case OpKind::kHsplitArray: d = rank >= 2 ? 1 : 0; break;
    case OpKind::kVsplitInt:
    case OpKind::kVsplitArray:
      if (rank < 2) return false;
      break;
    case OpKind::kDsplitInt:
    case OpKind::kDsplitArray:
      if (rank < 3) return false;
      d = 2;
      break;
    default: {
      const auto given = int_value(n, "dim");
      d = given ? norm_dim(*given, rank) : -1;
    }
  }
  if (d < 0 || static_cast<size_t>(d) >= rank || !x->type.sizes[static_cast<size_t>(d)].is_static()) return false;
  const auto pieces = split_pieces(n, x->type.sizes[static_cast<size_t>(d)].value);
  if (!pieces || pieces->size() != n.outputs.size()) return false;
  Nodes b(ctx, n);
  std::vector<ir::Value*> outs;
  for (size_t i = 0; i < pieces->size(); ++i) {
    const auto [start, end] = (*pieces)[i];
    ir::Value* v =
        b.add(OpKind::kSliceTensor, {{"self", x}, {"dim", d}, {"start", start}, {"end", end}}, n.outputs[i]->type);
    if (n.op == OpKind::kSplitWithSizesCopy) v = b.add(OpKind::kClone, {{"self", v}}, v->type);
    outs.push_back(v);
  }
  for (size_t i = 0; i < outs.size(); ++i) ctx.replace_uses(n.outputs[i], outs[i]);
  return true;
}

// unfold_copy / as_strided_copy: a copy of the view.
Expected<bool> view_copy(PatternContext& ctx, ir::Node& n) {
  if (!PatternContext::tensor_arg(n, "self") || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  ir::Value* v = b.add(n.op == OpKind::kUnfoldCopy ? OpKind::kUnfold : OpKind::kAsStrided, n.args, b.out());
  return b.done(b.add(OpKind::kClone, {{"self", v}}, b.out()));
}

// fftshift(x, dim) and ifftshift(x, dim) over static sizes: a roll by n // 2
// (fftshift) or -(n // 2) (ifftshift) along each dim, every dim when None.
Expected<bool> fftshift(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto sizes = x ? static_sizes(x->type) : std::nullopt;
  if (!sizes || n.outputs.size() != 1) return false;
  std::vector<int64_t> dims;
  if (absent(n, "dim")) {
    for (size_t d = 0; d < sizes->size(); ++d) dims.push_back(static_cast<int64_t>(d));
  } else if (const auto list = int_list(n, "dim")) {
    dims = *list;
  } else if (const auto one = int_value(n, "dim")) {
    dims = {*one};
  } else {
    return false;
  }
  std::vector<int64_t> shifts;
  for (int64_t& d : dims) {
    d = norm_dim(d, sizes->size());
    if (d < 0) return false;
    const int64_t half = (*sizes)[static_cast<size_t>(d)] / 2;
    shifts.push_back(n.op == OpKind::kFftFftshift ? half : -half);
  }
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kRoll, {{"self", x}, {"shifts", shifts}, {"dims", dims}}, b.out()));
}

// unfold(x, dimension, size, step) along a dim of static size: an
// index_select of every window's positions (window f holds f * step + j),
// viewed [.., windows, size, ..] and the window's dim moved last, as the view
// orders it (a gather every backend runs; after functionalization nothing
// writes through the view).
Expected<bool> unfold(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto dim = int_value(n, "dimension");
  const auto size = int_value(n, "size");
  const auto step = int_value(n, "step");
  if (!x || n.outputs.size() != 1 || !dim || !size || !step || *size < 0 || *step < 1) return false;
  const size_t rank = x->type.sizes.size();
  if (rank == 0) {  // a 0-d tensor is one window of size 1 (or none of size 0)
    if (*size > 1 || n.outputs[0]->type.sizes.size() != 1) return false;
    Nodes b(ctx, n);
    return b.done(*size == 1
                      ? b.reshape(x, {1})
                      : b.add(OpKind::kEmpty, {{"size", std::vector<int64_t>{0}}, {"dtype", x->type.dtype}}, b.out()));
  }
  const int64_t d = norm_dim(*dim, rank);
  if (d < 0 || !x->type.sizes[static_cast<size_t>(d)].is_static()) return false;
  const int64_t len = x->type.sizes[static_cast<size_t>(d)].value;
  if (*size > len) return false;
  const int64_t windows = (len - *size) / *step + 1;
  std::vector<int64_t> positions;
  for (int64_t f = 0; f < windows; ++f)
    for (int64_t j = 0; j < *size; ++j) positions.push_back(f * *step + j);
  Nodes b(ctx, n);
  ir::TensorType picked = x->type;
  picked.sizes[static_cast<size_t>(d)] = ir::Dim::of(windows * *size);
  ir::Value* v =
      b.add(OpKind::kIndexSelect, {{"self", x}, {"dim", d}, {"index", b.constant(index_table(positions))}}, picked);
  ir::TensorType split = x->type;  // [.., windows, size, ..]
  split.sizes[static_cast<size_t>(d)] = ir::Dim::of(windows);
  split.sizes.insert(split.sizes.begin() + d + 1, ir::Dim::of(*size));
  const auto sizes = static_sizes(split);
  if (!sizes) return false;
  v = b.add(OpKind::kView, {{"self", v}, {"size", *sizes}}, split);
  if (static_cast<size_t>(d) + 1 == rank) return b.done(v);
  std::vector<int64_t> perm;
  for (int64_t i = 0; i <= static_cast<int64_t>(rank); ++i)
    if (i != d + 1) perm.push_back(i);
  perm.push_back(d + 1);
  return b.done(b.add(OpKind::kPermute, {{"self", v}, {"dims", perm}}, b.out()));
}

// im2col(x, kernel_size, dilation, padding, stride) of static sizes: x
// padded, then two index_selects (rows oh * sh + i * dh for every tap i and
// output row oh, columns likewise), viewed [N, C, kh, OH, kw, OW], permuted to
// [N, C, kh, kw, OH, OW] and reshaped [N, C kh kw, OH OW] (unbatched: no N).
Expected<bool> im2col(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto sizes = x ? static_sizes(x->type) : std::nullopt;
  const auto k = int_list(n, "kernel_size"), dil = int_list(n, "dilation"), pad = int_list(n, "padding"),
             st = int_list(n, "stride");
  const auto out = n.outputs.size() == 1 ? static_sizes(n.outputs[0]->type) : std::nullopt;
  if (!x || !sizes || (sizes->size() != 3 && sizes->size() != 4) || !k || !dil || !pad || !st || !out ||
      k->size() != 2 || dil->size() != 2 || pad->size() != 2 || st->size() != 2)
    return false;
  const bool batched = sizes->size() == 4;
  const int64_t N = batched ? (*sizes)[0] : 1, C = (*sizes)[sizes->size() - 3];
  const int64_t H = (*sizes)[sizes->size() - 2] + 2 * (*pad)[0], W = sizes->back() + 2 * (*pad)[1];
  const int64_t kh = (*k)[0], kw = (*k)[1];
  if (kh < 1 || kw < 1 || (*st)[0] < 1 || (*st)[1] < 1 || (*dil)[0] < 1 || (*dil)[1] < 1) return false;
  const int64_t OH = (H - (*dil)[0] * (kh - 1) - 1) / (*st)[0] + 1, OW = (W - (*dil)[1] * (kw - 1) - 1) / (*st)[1] + 1;
  std::vector<int64_t> want{C * kh * kw, OH * OW};
  if (batched) want.insert(want.begin(), N);
  if (OH < 1 || OW < 1 || *out != want) return false;
  std::vector<int64_t> rows, cols;
  for (int64_t i = 0; i < kh; ++i)
    for (int64_t o = 0; o < OH; ++o) rows.push_back(o * (*st)[0] + i * (*dil)[0]);
  for (int64_t j = 0; j < kw; ++j)
    for (int64_t o = 0; o < OW; ++o) cols.push_back(o * (*st)[1] + j * (*dil)[1]);
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* v = batched ? x : b.unsqueezed(x, {0});
  if ((*pad)[0] != 0 || (*pad)[1] != 0)
    v = b.add(OpKind::kConstantPadNd,
              {{"self", v}, {"pad", std::vector<int64_t>{(*pad)[1], (*pad)[1], (*pad)[0], (*pad)[0]}}, {"value", 0.0}},
              static_type(dt, {N, C, H, W}));
  v = b.add(OpKind::kIndexSelect, {{"self", v}, {"dim", int64_t{2}}, {"index", b.constant(index_table(rows))}},
            static_type(dt, {N, C, kh * OH, W}));
  v = b.add(OpKind::kIndexSelect, {{"self", v}, {"dim", int64_t{3}}, {"index", b.constant(index_table(cols))}},
            static_type(dt, {N, C, kh * OH, kw * OW}));
  v = b.add(OpKind::kView, {{"self", v}, {"size", std::vector<int64_t>{N, C, kh, OH, kw, OW}}},
            static_type(dt, {N, C, kh, OH, kw, OW}));
  v = b.add(OpKind::kPermute, {{"self", v}, {"dims", std::vector<int64_t>{0, 1, 2, 4, 3, 5}}},
            static_type(dt, {N, C, kh, kw, OH, OW}));
  return b.done(b.add(OpKind::kReshape, {{"self", v}, {"shape", *out}}, b.out()));
}

// flip(x, dims) along dims of static size: an index_select of the reversed
// positions per dim (a gather every backend runs; the CUDA engines have no
// flip layer of their own).
Expected<bool> flip(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto dims = int_list(n, "dims");
  if (!x || n.outputs.size() != 1 || !dims) return false;
  const auto sizes = static_sizes(x->type);
  if (!sizes) return false;
  const size_t rank = sizes->size();
  std::vector<bool> flipped(rank, false);
  for (int64_t d : *dims) {
    const int64_t nd = norm_dim(d, std::max<size_t>(rank, 1));
    if (nd < 0 || nd >= static_cast<int64_t>(std::max<size_t>(rank, 1)) || (rank > 0 && flipped[nd])) return false;
    if (rank > 0) flipped[static_cast<size_t>(nd)] = true;
  }
  Nodes b(ctx, n);
  ir::Value* y = x;
  for (size_t d = 0; d < rank; ++d) {
    if (!flipped[d] || (*sizes)[d] <= 1) continue;
    std::vector<int64_t> reversed((*sizes)[d]);
    for (int64_t i = 0; i < (*sizes)[d]; ++i) reversed[static_cast<size_t>(i)] = (*sizes)[d] - 1 - i;
    y = b.add(OpKind::kIndexSelect,
              {{"self", y}, {"dim", static_cast<int64_t>(d)}, {"index", b.constant(index_table(reversed))}}, b.out());
  }
  if (y == x) y = b.add(OpKind::kClone, {{"self", x}}, b.out());  // nothing moves: a copy, as flip makes
  return b.done(y);
}

constexpr Decomposition kShapeDecompositions[] = {
    {OpKind::kRoll, &roll},
    {OpKind::kRot90, &rot90},
    {OpKind::kNewFull, &new_full},
    {OpKind::kAtleast1d, &atleast},
    {OpKind::kAtleast2d, &atleast},
    {OpKind::kAtleast3d, &atleast},
    {OpKind::kHstack, &stack_like},
    {OpKind::kVstack, &stack_like},
    {OpKind::kDstack, &stack_like},
    {OpKind::kColumnStack, &stack_like},
    {OpKind::kStack, &stack},
    {OpKind::kRepeat, &repeat},
    {OpKind::kDiff, &diff},
    {OpKind::kSoftmax, &softmax_other_dim},
    {OpKind::kSoftmaxInternal, &softmax_other_dim},
    {OpKind::kLogSoftmax, &softmax_other_dim},
    {OpKind::kLogSoftmaxInternal, &softmax_other_dim},
    {OpKind::kMeshgridIndexing, &meshgrid},
    {OpKind::kMeshgrid, &meshgrid},
    {OpKind::kRepeatInterleaveSelfInt, &repeat_interleave},
    {OpKind::kPixelUnshuffle, &pixel_shuffle},
    {OpKind::kPixelShuffle, &pixel_shuffle},
    {OpKind::kIm2col, &im2col},
    {OpKind::kLinalgDiagonal, &linalg_diagonal},
    {OpKind::kChannelShuffle, &channel_shuffle},
    {OpKind::kMH, &transposed},
    {OpKind::kMatrixH, &transposed},
    {OpKind::kNumpyT, &transposed},
    {OpKind::kReal, &real_identity},
    {OpKind::kResolveConj, &real_identity},
    {OpKind::kResolveNeg, &real_identity},
    {OpKind::kConjPhysical, &real_identity},
    {OpKind::kConjPhysicalInternal, &real_identity},
    {OpKind::kUnsafeChunk, &unsafe_split},
    {OpKind::kUnsafeSplitTensor, &unsafe_split},
    {OpKind::kTensorSplitSections, &split_like},
    {OpKind::kTensorSplitIndices, &split_like},
    {OpKind::kHsplitInt, &split_like},
    {OpKind::kHsplitArray, &split_like},
    {OpKind::kVsplitInt, &split_like},
    {OpKind::kVsplitArray, &split_like},
    {OpKind::kDsplitInt, &split_like},
    {OpKind::kDsplitArray, &split_like},
    {OpKind::kSplitWithSizesCopy, &split_like},
    {OpKind::kUnfoldCopy, &view_copy},
    {OpKind::kUnfold, &unfold},
    {OpKind::kFftFftshift, &fftshift},
    {OpKind::kFftIfftshift, &fftshift},
    {OpKind::kAsStridedCopy, &view_copy},
    {OpKind::kFlip, &flip},
};

}  // namespace

std::span<const Decomposition> shape_decompositions() { return kShapeDecompositions; }

}  // namespace kiln::lowering
