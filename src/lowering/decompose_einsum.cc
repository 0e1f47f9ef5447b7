// einsum of static sizes: sums, permutes and one bmm per operand pair.
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

// einsum(equation, tensors) for floating operands of one dtype and static
// sizes, no label repeated within an operand, equal sizes for a label
// everywhere (no broadcasting of 1s): labels no later operand or the output
// needs are summed away, then operands are contracted left to right as one
// bmm each (batch labels, left labels, contracted labels / right labels),
// and the result permuted to the output's order.
struct Labeled {
  ir::Value* v = nullptr;
  std::vector<int> labels;
};

std::optional<std::vector<int>> einsum_labels(const std::string& term, size_t rank, size_t ell_rank) {
  std::vector<int> out;
  size_t named = 0;
  bool ellipsis = false;
  for (size_t i = 0; i < term.size(); ++i) {
    const char c = term[i];
    if (c == '.') {
      if (ellipsis || term.compare(i, 3, "...") != 0) return std::nullopt;
      ellipsis = true;
      i += 2;
      out.push_back(-1);  // placeholder
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      out.push_back(std::isupper(static_cast<unsigned char>(c)) ? c - 'A' : 26 + (c - 'a'));
      ++named;
    } else {
      return std::nullopt;
    }
  }
  if (!ellipsis) {
    if (rank != SIZE_MAX && named != rank) return std::nullopt;
    return out;
  }
  const size_t here = rank == SIZE_MAX ? ell_rank : rank - named;
  if (rank != SIZE_MAX && rank < named) return std::nullopt;
  std::vector<int> full;
  for (int l : out) {
    if (l != -1) {
      full.push_back(l);
      continue;
    }
    for (size_t j = 0; j < here; ++j) full.push_back(100 + static_cast<int>(ell_rank - here + j));
  }
  return full;
}

Expected<bool> einsum(PatternContext& ctx, ir::Node& n) {
  const auto* eq = std::get_if<std::string>(n.find("equation"));
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  if (!eq || !ins || ins->empty() || n.outputs.size() != 1) return false;
  const DType dt = n.outputs[0]->type.dtype;
  if (!is_floating(dt)) return false;
  std::string e;
  for (char c : *eq)
    if (c != ' ') e += c;
  const size_t arrow = e.find("->");
  const std::string lhs = e.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ins->size()) return false;
  // The ellipsis covers the most dims any operand gives it.
  size_t ell_rank = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    size_t named = 0;
    for (char c : terms[i]) named += std::isalpha(static_cast<unsigned char>(c)) ? 1 : 0;
    const size_t rank = (*ins)[i]->type.sizes.size();
    if (terms[i].find("...") != std::string::npos && rank >= named) ell_rank = std::max(ell_rank, rank - named);
  }
  std::map<int, int64_t> size_of;
  std::vector<Labeled> ops;
  std::map<int, int> count;
  for (size_t i = 0; i < terms.size(); ++i) {
    ir::Value* v = (*ins)[i];
    const auto vs = static_sizes(v->type);
    if (v->type.dtype != dt || !vs) return false;
    const auto labels = einsum_labels(terms[i], vs->size(), ell_rank);
    if (!labels || labels->size() != vs->size()) return false;
    for (size_t k = 0; k < labels->size(); ++k) {
      if (std::count(labels->begin(), labels->end(), (*labels)[k]) > 1) return false;  // a diagonal
      const auto [it, fresh] = size_of.emplace((*labels)[k], (*vs)[k]);
      if (!fresh && it->second != (*vs)[k]) return false;  // broadcasting: not taken here
      ++count[(*labels)[k]];
    }
    ops.push_back({v, *labels});
  }
  std::vector<int> out_labels;
  if (arrow == std::string::npos) {
    for (const auto& [l, c] : count)
      if (l >= 100) out_labels.push_back(l);
    for (const auto& [l, c] : count)
      if (l < 100 && c == 1) out_labels.push_back(l);
  } else {
    const auto o = einsum_labels(e.substr(arrow + 2), SIZE_MAX, ell_rank);
    if (!o) return false;
    out_labels = *o;
    for (int l : out_labels)
      if (!size_of.count(l) || std::count(out_labels.begin(), out_labels.end(), l) > 1) return false;
  }
  Nodes b(ctx, n);
  auto type_of_labels = [&](const std::vector<int>& ls) {
    std::vector<int64_t> s;
    for (int l : ls) s.push_back(size_of[l]);
    return static_type(dt, s);
  };
  auto has = [](const std::vector<int>& ls, int l) { return std::find(ls.begin(), ls.end(), l) != ls.end(); };
  // Sums away the labels of `t` not in `keep`.
  auto sum_out = [&](Labeled t, const std::vector<int>& keep) {
    std::vector<int64_t> dims;
    std::vector<int> left;
    for (size_t k = 0; k < t.labels.size(); ++k) {
      if (has(keep, t.labels[k]))
        left.push_back(t.labels[k]);
      else
        dims.push_back(static_cast<int64_t>(k));
    }
    if (dims.empty()) return t;
    t.v = b.add(OpKind::kSumDimIntList, {{"self", t.v}, {"dim", dims}, {"keepdim", false}}, type_of_labels(left));
    t.labels = left;
    return t;
  };
  auto permuted = [&](const Labeled& t, const std::vector<int>& order) {
    std::vector<int64_t> perm;
    bool identity = true;
    for (size_t k = 0; k < order.size(); ++k) {
      const auto at = std::find(t.labels.begin(), t.labels.end(), order[k]) - t.labels.begin();
      perm.push_back(at);
      identity = identity && at == static_cast<int64_t>(k);
    }
    if (identity) return t.v;
    return b.add(OpKind::kPermute, {{"self", t.v}, {"dims", perm}}, type_of_labels(order));
  };
  auto product = [&](const std::vector<int>& ls) {
    int64_t p = 1;
    for (int l : ls) p *= size_of[l];
    return p;
  };
  Labeled cur = ops[0];
  for (size_t i = 1; i <= ops.size(); ++i) {
    std::vector<int> needed = out_labels;  // by the output and the operands after i
    for (size_t j = i + 1; j < ops.size(); ++j) needed.insert(needed.end(), ops[j].labels.begin(), ops[j].labels.end());
    if (i == ops.size()) {
      cur = sum_out(cur, needed);
      break;
    }
    Labeled next = ops[i];
    std::vector<int> keep_cur = needed, keep_next = needed;
    keep_cur.insert(keep_cur.end(), next.labels.begin(), next.labels.end());
    keep_next.insert(keep_next.end(), cur.labels.begin(), cur.labels.end());
    cur = sum_out(cur, keep_cur);
    next = sum_out(next, keep_next);
    std::vector<int> batch, left, contract, right;
    for (int l : cur.labels) {
      if (!has(next.labels, l))
        left.push_back(l);
      else if (has(needed, l))
        batch.push_back(l);
      else
        contract.push_back(l);
    }
    for (int l : next.labels)
      if (!has(cur.labels, l)) right.push_back(l);
    std::vector<int> a_order = batch, b_order = batch;
    a_order.insert(a_order.end(), left.begin(), left.end());
    a_order.insert(a_order.end(), contract.begin(), contract.end());
    b_order.insert(b_order.end(), contract.begin(), contract.end());
    b_order.insert(b_order.end(), right.begin(), right.end());
    const int64_t B = product(batch), L = product(left), C = product(contract), R = product(right);
    ir::Value* a3 =
        b.add(OpKind::kReshape, {{"self", permuted(cur, a_order)}, {"shape", std::vector<int64_t>{B, L, C}}},
              static_type(dt, {B, L, C}));
    ir::Value* b3 =
        b.add(OpKind::kReshape, {{"self", permuted(next, b_order)}, {"shape", std::vector<int64_t>{B, C, R}}},
              static_type(dt, {B, C, R}));
    ir::Value* mm = b.add(OpKind::kBmm, {{"self", a3}, {"mat2", b3}}, static_type(dt, {B, L, R}));
    std::vector<int> labels = batch;
    labels.insert(labels.end(), left.begin(), left.end());
    labels.insert(labels.end(), right.begin(), right.end());
    const ir::TensorType t = type_of_labels(labels);
    cur = {b.add(OpKind::kReshape, {{"self", mm}, {"shape", *static_sizes(t)}}, t), labels};
  }
  if (cur.labels.size() != out_labels.size()) return false;
  ir::Value* result = permuted(cur, out_labels);
  if (result == cur.v && ops.size() == 1 && cur.v == ops[0].v)
    result = b.add(OpKind::kClone, {{"self", cur.v}}, cur.v->type);
  if (!same_sizes(result->type.sizes, b.out().sizes)) return false;
  return b.done(result);
}

constexpr Decomposition kEinsumDecompositions[] = {
    {OpKind::kEinsum, &einsum},
};

}  // namespace

std::span<const Decomposition> einsum_decompositions() { return kEinsumDecompositions; }

}  // namespace kiln::lowering
