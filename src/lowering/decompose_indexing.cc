// Indexing composites of torch, in core ops: take, take_along_dim, diag,
// diag_embed, diagflat, diagonal_copy, cartesian_prod and combinations of
// static sizes (an index_select of a position table), argwhere (nonzero),
// slice_scatter of static bounds and select_scatter of a constant index as
// index_copy at constant positions, tril and triu (a constant mask).
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

// take(x, index) = the flattened x at index (negative from the end), shaped as index.
Expected<bool> take(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* idx = PatternContext::tensor_arg(n, "index");
  const auto sizes = x ? static_sizes(x->type) : std::nullopt;
  const auto isizes = idx ? static_sizes(idx->type) : std::nullopt;
  if (!x || !idx || idx->type.dtype != DType::Int64 || n.outputs.size() != 1 || !sizes || !isizes) return false;
  int64_t total = 1, count = 1;
  for (int64_t s : *sizes) total *= s;
  for (int64_t s : *isizes) count *= s;
  Nodes b(ctx, n);
  ir::Value* flat = b.add(OpKind::kReshape, {{"self", x}, {"shape", std::vector<int64_t>{total}}},
                          static_type(x->type.dtype, {total}));
  ir::Value* i = b.add(OpKind::kReshape, {{"self", idx}, {"shape", std::vector<int64_t>{count}}},
                       static_type(DType::Int64, {count}));
  ir::Value* wrapped = b.add(OpKind::kAddTensor, {{"self", i}, {"other", total}}, i->type);
  i = b.add(OpKind::kWhere, {{"condition", b.compare(OpKind::kLtScalar, i, 0.0)}, {"self", wrapped}, {"other", i}},
            i->type);
  ir::Value* g = b.add(OpKind::kIndexSelect, {{"self", flat}, {"dim", int64_t{0}}, {"index", i}},
                       static_type(x->type.dtype, {count}));
  return b.done(b.add(OpKind::kReshape, {{"self", g}, {"shape", *isizes}}, b.out()));
}

// take_along_dim(x, idx, dim): gather of x and idx broadcast but for dim; no dim: of the flattened x.
Expected<bool> take_along_dim(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* idx = PatternContext::tensor_arg(n, "indices");
  const auto xs = x ? static_sizes(x->type) : std::nullopt;
  const auto is = idx ? static_sizes(idx->type) : std::nullopt;
  if (!x || !idx || idx->type.dtype != DType::Int64 || n.outputs.size() != 1 || !xs || !is) return false;
  Nodes b(ctx, n);
  if (absent(n, "dim")) {
    int64_t total = 1, count = 1;
    for (int64_t v : *xs) total *= v;
    for (int64_t v : *is) count *= v;
    ir::Value* fx = b.add(OpKind::kReshape, {{"self", x}, {"shape", std::vector<int64_t>{total}}},
                          static_type(x->type.dtype, {total}));
    ir::Value* fi = b.add(OpKind::kReshape, {{"self", idx}, {"shape", std::vector<int64_t>{count}}},
                          static_type(DType::Int64, {count}));
    return b.done(b.add(OpKind::kGather, {{"self", fx}, {"dim", int64_t{0}}, {"index", fi}}, b.out()));
  }
  const auto dim = int_value(n, "dim");
  if (!dim || xs->size() != is->size()) return false;
  const int64_t d = norm_dim(*dim, xs->size());
  if (d < 0) return false;
  std::vector<int64_t> xt = *xs, it = *is;
  for (size_t i = 0; i < xs->size(); ++i) {
    if (static_cast<int64_t>(i) == d) continue;
    const int64_t a = (*xs)[i], c = (*is)[i];
    if (a != c && a != 1 && c != 1) return false;
    xt[i] = it[i] = std::max(a, c);
  }
  ir::Value* ex = xt == *xs ? x : b.add(OpKind::kExpand, {{"self", x}, {"size", xt}}, static_type(x->type.dtype, xt));
  ir::Value* ei =
      it == *is ? idx : b.add(OpKind::kExpand, {{"self", idx}, {"size", it}}, static_type(DType::Int64, it));
  return b.done(b.add(OpKind::kGather, {{"self", ex}, {"dim", d}, {"index", ei}}, b.out()));
}

// slice_scatter with bounds known at compile time (functionalize writes
// `x[:, a:b] = y` as one) is index_copy at the slice's positions, a constant
// index; engines write index_copy in place.
Expected<bool> slice_scatter(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* src = PatternContext::tensor_arg(n, "src");
  if (!x || !src || n.outputs.size() != 1 || src->type.dtype != x->type.dtype || x->type.sizes.empty()) return false;
  const auto dim = int_value(n, "dim");
  const int64_t d = dim ? norm_dim(*dim, x->type.sizes.size()) : -1;
  if (d < 0 || !x->type.sizes[static_cast<size_t>(d)].is_static()) return false;
  const int64_t len = x->type.sizes[static_cast<size_t>(d)].value;
  const auto step = int_value(n, "step");
  std::optional<int64_t> start = int64_t{0}, end = len;
  if (!absent(n, "start")) start = int_value(n, "start");
  if (!absent(n, "end")) end = int_value(n, "end");
  if (!start || !end || !step || *step <= 0) return false;
  auto clamp = [len](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + len : v, 0, len); };
  const int64_t s0 = clamp(*start), e0 = std::max(s0, clamp(*end));
  std::vector<int64_t> idx;
  for (int64_t i = s0; i < e0; i += *step) idx.push_back(i);
  if (src->type.sizes.size() != x->type.sizes.size() || !src->type.sizes[static_cast<size_t>(d)].is_static() ||
      src->type.sizes[static_cast<size_t>(d)].value != static_cast<int64_t>(idx.size()))
    return false;
  Nodes b(ctx, n);
  if (idx.empty()) return b.done(b.add(OpKind::kClone, {{"self", x}}, x->type));
  return b.done(b.add(OpKind::kIndexCopy,
                      {{"self", x}, {"dim", d}, {"index", b.constant(index_table(idx))}, {"source", src}}, b.out()));
}

// select_scatter(self, src, dim, index) with the index known at compile time:
// index_copy of src, a unit dim inserted at dim, at that one position.
Expected<bool> select_scatter(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* src = PatternContext::tensor_arg(n, "src");
  const auto dim = int_value(n, "dim");
  const auto index = int_value(n, "index");
  if (!x || !src || !dim || !index || n.outputs.size() != 1 || src->type.dtype != x->type.dtype ||
      x->type.sizes.empty() || src->type.sizes.size() + 1 != x->type.sizes.size())
    return false;
  const int64_t d = norm_dim(*dim, x->type.sizes.size());
  if (d < 0 || !x->type.sizes[static_cast<size_t>(d)].is_static()) return false;
  const int64_t len = x->type.sizes[static_cast<size_t>(d)].value;
  if (*index < -len || *index >= len) return false;
  const int64_t at = *index < 0 ? *index + len : *index;
  Nodes b(ctx, n);
  ir::Value* s = b.unsqueezed(src, {d});
  return b.done(b.add(OpKind::kIndexCopy,
                      {{"self", x}, {"dim", d}, {"index", b.constant(index_table({at}))}, {"source", s}}, b.out()));
}

// tril(x, k) / triu(x, k) with static last two dims: zeros where a
// constant [rows, cols] mask says the entry is above (below) diagonal k.
Expected<bool> triangle(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto k = int_value(n, "diagonal", 0);
  const size_t rank = x ? x->type.sizes.size() : 0;
  if (!x || !k || rank < 2 || n.outputs.size() != 1 || n.outputs[0]->type.dtype != x->type.dtype) return false;
  const ir::Dim& r = x->type.sizes[rank - 2];
  const ir::Dim& c = x->type.sizes[rank - 1];
  // The mask is stored in the program: at most 4 MiB of it.
  if (!r.is_static() || !c.is_static() || r.value * c.value > (int64_t{1} << 22)) return false;
  const bool lower = n.op == OpKind::kTril;
  Tensor mask = Tensor::zeros(DType::Bool, {r.value, c.value});
  for (int64_t i = 0; i < r.value; ++i)
    for (int64_t j = 0; j < c.value; ++j) mask.data<bool>()[i * c.value + j] = lower ? j - i > *k : j - i < *k;
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kMaskedFillScalar, {{"self", x}, {"mask", b.constant(mask)}, {"value", 0.0}}, b.out()));
}

// argwhere is nonzero.
Expected<bool> argwhere(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kNonzero, {{"self", x}}, b.out()));
}

// combinations(x [n], r, with_replacement) as torch.combinations gives them
// (itertools' order: lexicographic in the positions): one index_select of a
// table of the C * r positions, viewed [C, r].
Expected<bool> combinations(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto r = int_value(n, "r");
  const auto with_replacement = bool_value(n, "with_replacement");
  if (!x || n.outputs.size() != 1 || !r || !with_replacement) return false;
  // torch.export leaves the count an unbacked size (u0); it is known here.
  const auto xs = static_sizes(x->type);
  const auto& os = n.outputs[0]->type.sizes;
  if (!xs || xs->size() != 1 || os.size() != 2 || !os[1].is_static() || os[1].value != *r || *r < 1) return false;
  const int64_t len = (*xs)[0];
  const bool again = *with_replacement;  // a position may repeat
  std::vector<int64_t> table, pos(static_cast<size_t>(*r), 0);
  if (!again)
    for (int64_t k = 0; k < *r; ++k) pos[static_cast<size_t>(k)] = k;
  constexpr int64_t kMostEntries = int64_t{1} << 20;
  while (len > 0 && pos.back() < len && static_cast<int64_t>(table.size()) < kMostEntries) {
    table.insert(table.end(), pos.begin(), pos.end());
    int64_t k = *r - 1;  // the last position that can still move on
    while (k >= 0 && pos[static_cast<size_t>(k)] >= len - (again ? 1 : *r - k)) --k;
    if (k < 0) break;
    ++pos[static_cast<size_t>(k)];
    for (int64_t j = k + 1; j < *r; ++j)
      pos[static_cast<size_t>(j)] = pos[static_cast<size_t>(j - 1)] + (again ? 0 : 1);
  }
  const int64_t count = static_cast<int64_t>(table.size()) / *r;
  if (count == 0 || static_cast<int64_t>(table.size()) >= kMostEntries || (os[0].is_static() && os[0].value != count))
    return false;
  Nodes b(ctx, n);
  ir::Value* picked =
      b.add(OpKind::kIndexSelect, {{"self", x}, {"dim", int64_t{0}}, {"index", b.constant(index_table(table))}},
            static_type(x->type.dtype, {count * *r}));
  return b.done(b.add(OpKind::kView, {{"self", picked}, {"size", std::vector<int64_t>{count, *r}}},
                      static_type(x->type.dtype, {count, *r})));
}

// cartesian_prod(tensors): every combination as rows (meshgrid "ij", flattened, stacked).
Expected<bool> cartesian_prod(PatternContext& ctx, ir::Node& n) {
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  if (!ins || ins->empty() || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  if (ins->size() == 1) return b.done(b.add(OpKind::kClone, {{"self", (*ins)[0]}}, b.out()));
  std::vector<int64_t> grid;
  for (ir::Value* v : *ins) {
    const auto vs = static_sizes(v->type);
    if (!vs || vs->size() != 1 || v->type.dtype != (*ins)[0]->type.dtype) return false;
    grid.push_back((*vs)[0]);
  }
  int64_t total = 1;
  for (int64_t g : grid) total *= g;
  std::vector<ir::Value*> cols;
  for (size_t i = 0; i < ins->size(); ++i) {
    std::vector<int64_t> shape(grid.size(), 1);
    shape[i] = grid[i];
    const DType dt = (*ins)[i]->type.dtype;
    ir::Value* v = b.add(OpKind::kView, {{"self", (*ins)[i]}, {"size", shape}}, static_type(dt, shape));
    v = b.add(OpKind::kExpand, {{"self", v}, {"size", grid}}, static_type(dt, grid));
    cols.push_back(
        b.add(OpKind::kReshape, {{"self", v}, {"shape", std::vector<int64_t>{total}}}, static_type(dt, {total})));
  }
  return b.done(b.add(OpKind::kStack, {{"tensors", cols}, {"dim", int64_t{1}}}, b.out()));
}

// diag_embed(x, offset, dim1, dim2): the last dim of x on a diagonal of two
// new dims: x padded to m = n + |offset|, expanded over an [m, m] grid and
// kept where the grid's diagonal is, then the two dims moved to dim1, dim2.
ir::Value* diag_embed_of(Nodes& b, ir::Value* x, int64_t offset, int64_t dim1, int64_t dim2,
                         const ir::TensorType& out) {
  const auto sizes = static_sizes(x->type);
  if (!sizes || sizes->empty()) return nullptr;
  const size_t rank = sizes->size() + 1;
  const int64_t d1 = norm_dim(dim1, rank), d2 = norm_dim(dim2, rank);
  if (d1 < 0 || d2 < 0 || d1 == d2) return nullptr;
  const int64_t len = sizes->back(), m = len + std::abs(offset);
  const DType dt = x->type.dtype;
  std::vector<int64_t> padded = *sizes;
  padded.back() = m;
  ir::Value* p = x;
  if (offset != 0)
    p = b.add(OpKind::kConstantPadNd, {{"self", x}, {"pad", std::vector<int64_t>{0, std::abs(offset)}}, {"value", 0.0}},
              static_type(dt, padded));
  // offset >= 0: out[i, i + offset] = x[i] (x along rows); offset < 0: out[j - offset, j] = x[j] (along columns).
  p = b.unsqueezed(p, {static_cast<int64_t>(offset >= 0 ? rank - 1 : rank - 2)});
  std::vector<int64_t> grid(sizes->begin(), sizes->end() - 1);
  grid.push_back(m);
  grid.push_back(m);
  ir::Value* e = b.add(OpKind::kExpand, {{"self", p}, {"size", grid}}, static_type(dt, grid));
  Tensor off = Tensor::zeros(DType::Bool, {m, m});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < m; ++j) off.data<bool>()[i * m + j] = j - i != offset;
  ir::Value* y = b.add(OpKind::kMaskedFillScalar, {{"self", e}, {"mask", b.constant(off)}, {"value", 0.0}}, e->type);
  std::vector<int64_t> perm(rank);
  int64_t next = 0;
  for (size_t f = 0; f < rank; ++f)
    perm[f] = static_cast<int64_t>(f) == d1   ? static_cast<int64_t>(rank) - 2
              : static_cast<int64_t>(f) == d2 ? static_cast<int64_t>(rank) - 1
                                              : next++;
  bool identity = true;
  for (size_t f = 0; f < rank; ++f) identity = identity && perm[f] == static_cast<int64_t>(f);
  if (identity) return y;
  return b.add(OpKind::kPermute, {{"self", y}, {"dims", perm}}, out);
}

Expected<bool> diag_embed(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto offset = int_value(n, "offset");
  const auto d1 = int_value(n, "dim1"), d2 = int_value(n, "dim2");
  if (!x || n.outputs.size() != 1 || !offset || !d1 || !d2) return false;
  Nodes b(ctx, n);
  return b.done(diag_embed_of(b, x, *offset, *d1, *d2, b.out()));
}

// diag(x, k): a vector on the k-th diagonal of a matrix, or a matrix's k-th
// diagonal (a copy); diagflat(x, k): the flattened x on the k-th diagonal.
Expected<bool> diag(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto k = int_value(n, n.op == OpKind::kDiag ? "diagonal" : "offset", 0);
  const auto sizes = x ? static_sizes(x->type) : std::nullopt;
  if (!x || n.outputs.size() != 1 || !k || !sizes) return false;
  Nodes b(ctx, n);
  if (n.op == OpKind::kDiagflat && sizes->size() != 1) {
    int64_t total = 1;
    for (int64_t s : *sizes) total *= s;
    x = b.add(OpKind::kReshape, {{"self", x}, {"shape", std::vector<int64_t>{total}}},
              static_type(x->type.dtype, {total}));
  } else if (sizes->size() == 2 && n.op == OpKind::kDiag) {
    ir::Value* d =
        b.add(OpKind::kDiagonal, {{"self", x}, {"offset", *k}, {"dim1", int64_t{0}}, {"dim2", int64_t{1}}}, b.out());
    return b.done(b.add(OpKind::kClone, {{"self", d}}, b.out()));
  } else if (sizes->size() != 1) {
    return false;
  }
  return b.done(diag_embed_of(b, x, *k, 0, 1, b.out()));
}

// diagonal_copy = a copy of the diagonal view.
Expected<bool> diagonal_copy(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  std::vector<ir::NamedArg> args{{"self", x}};
  for (const char* a : {"offset", "dim1", "dim2"})
    if (const ir::Arg* v = n.find(a)) args.push_back({a, *v});
  return b.done(b.add(OpKind::kClone, {{"self", b.add(OpKind::kDiagonal, std::move(args), b.out())}}, b.out()));
}

constexpr Decomposition kIndexingDecompositions[] = {
    {OpKind::kDiagonalCopy, &diagonal_copy},
    {OpKind::kDiagEmbed, &diag_embed},
    {OpKind::kDiag, &diag},
    {OpKind::kDiagflat, &diag},
    {OpKind::kTake, &take},
    {OpKind::kSliceScatter, &slice_scatter},
    {OpKind::kSelectScatter, &select_scatter},
    {OpKind::kTril, &triangle},
    {OpKind::kTriu, &triangle},
    {OpKind::kTakeAlongDim, &take_along_dim},
    {OpKind::kCartesianProd, &cartesian_prod},
    {OpKind::kArgwhere, &argwhere},
    {OpKind::kCombinations, &combinations},
};

}  // namespace

std::span<const Decomposition> indexing_decompositions() { return kIndexingDecompositions; }

}  // namespace kiln::lowering
