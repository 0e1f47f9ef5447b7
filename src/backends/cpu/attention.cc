// aten.scaled_dot_product_attention(query, key, value, attn_mask=None,
//     dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False)
//
// query [..., L, E], key [..., S, E], value [..., S, Ev] -> [..., L, Ev].
// Batch dims broadcast as in torch.matmul; with enable_gqa each key/value
// head serves Hq/Hkv consecutive query heads (repeat_interleave on dim -3).
// Per batch entry: scores = scale * Q K^T (+ mask), softmax over keys, times V,
// with both products on OpenBLAS. float16/bfloat16 compute in float32.
//
// Fully masked rows: since PyTorch 2.5 the math backend normalizes scores with
// _safe_softmax, so a query row that may attend to no key gives 0 rather than
// NaN (exported ATen-dialect graphs spell this out as where(all -inf, 0,
// softmax)). kiln gives 0 as well.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

// Maps a flat index over the broadcast batch shape to an element offset in one contiguous operand.
struct BatchIndexer {
  std::vector<int64_t> strides;  // per broadcast batch dim; 0 where the operand broadcasts
  int64_t group = 1;             // GQA: the last batch dim index is divided by this

  BatchIndexer(const Shape& batch, const Shape& own_batch, int64_t matrix_elems, int64_t gqa_group) : group(gqa_group) {
    strides.assign(batch.size(), 0);
    int64_t acc = matrix_elems;
    const size_t off = batch.size() - own_batch.size();
    for (size_t i = own_batch.size(); i-- > 0;) {
      if (own_batch[i] != 1 || (gqa_group > 1 && i + 1 == own_batch.size())) strides[off + i] = acc;
      acc *= own_batch[i];
    }
  }

  int64_t offset(const Shape& batch, int64_t flat) const {
    int64_t off = 0;
    for (size_t d = batch.size(); d-- > 0;) {
      int64_t i = flat % batch[d];
      flat /= batch[d];
      if (d + 1 == batch.size()) i /= group;
      off += i * strides[d];
    }
    return off;
  }
};

struct Dims {
  int64_t L, S, E, Ev;
};

// Softmax over each row of scores [L, S] in place; a row with no finite maximum (all -inf) becomes 0.
template <typename T>
void safe_softmax_rows(T* scores, int64_t L, int64_t S) {
  for (int64_t i = 0; i < L; ++i) {
    T* row = scores + i * S;
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < S; ++j)
      if (!(row[j] <= mx)) mx = row[j];  // a NaN takes over and spreads to the row, as in PyTorch
    if (mx == -std::numeric_limits<T>::infinity()) {
      std::fill(row, row + S, T(0));
      continue;
    }
    double sum = 0;
    for (int64_t j = 0; j < S; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += static_cast<double>(row[j]);
    }
    const T inv = static_cast<T>(1.0 / sum);
    for (int64_t j = 0; j < S; ++j) row[j] *= inv;
  }
}

template <typename T>
Status attend(const T* q, const T* k, const T* v, const Tensor* mask, T* out, const Shape& batch,
              const BatchIndexer& qi, const BatchIndexer& ki, const BatchIndexer& vi, const BatchIndexer& mi,
              const Dims& d, T scale, bool causal) {
  int64_t nb = 1;
  for (int64_t s : batch) nb *= s;
  std::vector<T> scores(static_cast<size_t>(d.L * d.S));
  for (int64_t b = 0; b < nb; ++b) {
    KILN_TRY(gemm(false, true, d.L, d.S, d.E, scale, q + qi.offset(batch, b), d.E, k + ki.offset(batch, b), d.E, T(0),
                  scores.data(), d.S));
    if (mask) {
      const int64_t mo = mi.offset(batch, b);
      for (int64_t i = 0; i < d.L * d.S; ++i) {
        if (mask->dtype() == DType::Bool) {
          if (!mask->data<bool>()[mo + i]) scores[static_cast<size_t>(i)] = -std::numeric_limits<T>::infinity();
        } else {
          scores[static_cast<size_t>(i)] += mask->data<T>()[mo + i];
        }
      }
    }
    if (causal)  // top-left aligned: query i sees keys j <= i
      for (int64_t i = 0; i < d.L; ++i)
        for (int64_t j = i + 1; j < d.S; ++j)
          scores[static_cast<size_t>(i * d.S + j)] = -std::numeric_limits<T>::infinity();
    safe_softmax_rows(scores.data(), d.L, d.S);
    KILN_TRY(gemm(false, false, d.L, d.Ev, d.S, T(1), scores.data(), d.S, v + vi.offset(batch, b), d.Ev, T(0),
                  out + b * d.L * d.Ev, d.Ev));
  }
  return Status::ok();
}

Status scaled_dot_product_attention(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor q, a.tensor("query"));
  KILN_ASSIGN_OR_RETURN(Tensor k, a.tensor("key"));
  KILN_ASSIGN_OR_RETURN(Tensor v, a.tensor("value"));
  KILN_ASSIGN_OR_RETURN(auto mask, a.optional_tensor("attn_mask"));
  KILN_ASSIGN_OR_RETURN(double dropout_p, a.float_arg("dropout_p", 0.0));
  KILN_ASSIGN_OR_RETURN(bool is_causal, a.bool_arg("is_causal", false));
  KILN_ASSIGN_OR_RETURN(auto scale_arg, a.optional_float("scale"));
  KILN_ASSIGN_OR_RETURN(bool enable_gqa, a.bool_arg("enable_gqa", false));

  if (!is_floating(q.dtype()) || k.dtype() != q.dtype() || v.dtype() != q.dtype())
    return a.error("query, key and value must share one floating-point dtype, got " + q.type_string() + ", " +
                   k.type_string() + ", " + v.type_string());
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
    return a.error("query, key and value need rank >= 2, got " + q.type_string() + ", " + k.type_string() + ", " +
                   v.type_string());
  const Dims d{q.size(-2), k.size(-2), q.size(-1), v.size(-1)};
  if (k.size(-1) != d.E || v.size(-2) != d.S)
    return a.error("shapes do not fit: query " + q.type_string() + " [..., L, E], key " + k.type_string() +
                   " [..., S, E], value " + v.type_string() + " [..., S, Ev]");
  if (dropout_p != 0.0)
    return unsupported(a.node().describe() + ": dropout_p=" + std::to_string(dropout_p) +
                       " is not supported (inference only); export the model in eval() mode");
  if (is_causal && mask) return a.error("attn_mask must not be given together with is_causal=True");
  if (mask && mask->dtype() != DType::Bool && !is_floating(mask->dtype()))
    return a.error("attn_mask must be bool or floating-point, got " + mask->type_string());

  Shape qb(q.sizes().begin(), q.sizes().end() - 2), kb(k.sizes().begin(), k.sizes().end() - 2),
      vb(v.sizes().begin(), v.sizes().end() - 2);
  int64_t kgroup = 1, vgroup = 1;
  if (enable_gqa) {
    if (q.dim() < 3 || k.dim() < 3 || v.dim() < 3)
      return a.error("enable_gqa needs query, key and value with a heads dim (rank >= 3)");
    const int64_t hq = qb.back(), hk = kb.back(), hv = vb.back();
    if (hk <= 0 || hv <= 0 || hq % hk != 0 || hq % hv != 0)
      return a.error("enable_gqa: query heads " + std::to_string(hq) + " must be a multiple of key heads " +
                     std::to_string(hk) + " and value heads " + std::to_string(hv));
    kgroup = hq / hk;
    vgroup = hq / hv;
    kb.back() = vb.back() = hq;  // as after repeat_interleave
  }
  auto batch = broadcast_shapes(qb, kb);
  if (batch) batch = broadcast_shapes(*batch, vb);
  if (!batch)
    return a.error("batch dims of query " + q.type_string() + ", key " + k.type_string() + " and value " +
                   v.type_string() + " do not broadcast");
  Shape scores_shape = *batch, out_check = *batch;
  scores_shape.insert(scores_shape.end(), {d.L, d.S});
  out_check.insert(out_check.end(), {d.L, d.Ev});
  if (!checked_numel(scores_shape).has_value() || !checked_numel(out_check).has_value())
    return a.error("broadcast batch " + shape_to_string(*batch) + " is too large");
  if (mask) {
    auto ms = broadcast_shapes(mask->sizes(), scores_shape);
    if (!ms || *ms != scores_shape)
      return a.error("attn_mask " + mask->type_string() + " does not broadcast to the scores' shape " +
                     shape_to_string(scores_shape));
  }
  const double scale = scale_arg.value_or(1.0 / std::sqrt(static_cast<double>(d.E)));

  // Undo the GQA widening for the indexers: they map a query head to its key/value head.
  if (enable_gqa) {
    kb.back() = k.size(-3);
    vb.back() = v.size(-3);
  }
  const BatchIndexer qi(*batch, qb, d.L * d.E, 1), ki(*batch, kb, d.S * d.E, kgroup),
      vi(*batch, vb, d.S * d.Ev, vgroup);
  Shape mb;
  std::optional<BatchIndexer> mi;
  const DType ct = q.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor mask_c;
  if (mask) {
    // Broadcast the mask's trailing [L, S] dims, keep its batch dims (broadcast via the indexer).
    Shape own = mask->sizes();
    while (own.size() < 2) own.insert(own.begin(), 1);
    mb.assign(own.begin(), own.end() - 2);
    Shape target = mb;
    target.insert(target.end(), {d.L, d.S});
    const size_t off = target.size() - static_cast<size_t>(mask->dim());
    Shape strides(target.size(), 0);
    for (size_t i = 0; i < static_cast<size_t>(mask->dim()); ++i)
      strides[off + i] = mask->sizes()[i] == 1 ? 0 : mask->strides()[i];
    Tensor expanded = mask->as_strided(target, strides, mask->storage_offset());
    mask_c = (mask->dtype() == DType::Bool ? expanded : expanded.to(ct)).contiguous();
    mi.emplace(*batch, mb, d.L * d.S, 1);
  }
  Tensor qc = q.to(ct).contiguous(), kc = k.to(ct).contiguous(), vc = v.to(ct).contiguous();
  Shape out_shape = *batch;
  out_shape.insert(out_shape.end(), {d.L, d.Ev});
  Tensor out = Tensor::zeros(ct, out_shape);
  const BatchIndexer no_mask(*batch, {}, 0, 1);
  Status st;
  visit_dtype(ct, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
      st = attend<T>(qc.data<T>(), kc.data<T>(), vc.data<T>(), mask ? &mask_c : nullptr, out.data<T>(), *batch, qi, ki,
                     vi, mi ? *mi : no_mask, d, static_cast<T>(scale), is_causal);
  });
  if (!st.is_ok()) return std::move(st).with_context(a.node().describe());
  a.set_output(0, out.to(q.dtype()));
  return Status::ok();
}

}  // namespace

void register_attention_kernels(KernelRegistry& r) {
  r.add(ir::OpKind::kScaledDotProductAttention, &scaled_dot_product_attention);
}

}  // namespace kiln::cpu
