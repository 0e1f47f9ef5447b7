// The CUDA builder's layers, attention (flash, chunked for decoding, row-wise, or GEMMs and a softmax) and the
// rotary embedding.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string_view>

#include "backends/cuda/cuda_layers.h"

namespace kiln::cuda::layers {

namespace {

// The stride of a [B, H] pair of dims walked as one batch index b*H + h, if there is one.
std::optional<int64_t> pair_stride(int64_t B, int64_t H, int64_t sb, int64_t sh) {
  if (H == 1) return B == 1 ? 0 : sb;
  if (B == 1 || sb == sh * H) return sh;
  return std::nullopt;
}

// Attention as cuBLASLt batched GEMMs around a generated masked softmax:
// scores = scale * Q K^T, P = softmax(scores + mask), O = P V. Taken when q, k
// and v are matrices with one batch stride over [B, Hk] and the scores fit in
// 64 MiB; otherwise the fused kernel runs. With grouped-query heads (Hk key
// heads for H = G * Hk query heads), the G query heads of a key head are the
// rows of one product: batch B * Hk, G * L rows, and the scores keep the
// [B, H, L, S] order the softmax expects. Returns whether it emitted the layer.
Expected<bool> attention_as_gemms(Builder& b, const std::string& layer, TRef q, TRef k, TRef v,
                                  const AttentionParams& p, const BufferRef* mask, const TRef& o) {
  const int64_t B = q.sizes[0], H = q.sizes[1], L = q.sizes[2], E = q.sizes[3];
  const int64_t Hk = k.sizes[1], S = k.sizes[2], Ev = v.sizes[3];
  const DType dt = q.dtype;
  if (Hk < 1 || H % Hk != 0 || v.sizes[1] != Hk) return false;
  const int64_t G = H / Hk;
  if (B * H * L * S * static_cast<int64_t>(dtype_size(dt)) > (int64_t{64} << 20)) return false;
  // The row stride of q's G * L rows per key head, when there is one.
  auto q_rows = [&](const TRef& t) -> std::optional<int64_t> {
    if (G * L == 1) return E;
    if (G == 1) return t.strides[2];
    if (L == 1) return t.strides[1];
    if (t.strides[1] == L * t.strides[2]) return t.strides[2];
    return std::nullopt;
  };
  // Operands the batched GEMMs cannot walk as they are ([B, S, H, E] storage
  // seen as [B, H, S, E] with B > 1, misaligned views) are copied contiguous first.
  for (TRef* t : {&q, &k, &v}) {
    const int64_t group = t == &q ? G : 1;
    if (t->strides[3] != 1 || t->buf.offset % 16 != 0 || !pair_stride(B, Hk, t->strides[0], group * t->strides[1]) ||
        (t == &q && !q_rows(*t))) {
      TRef c = b.new_tensor(t->dtype, t->sizes);
      KILN_ASSIGN_OR_RETURN(GeneratedKernel ck, copy_kernel(c.layout(), t->layout()));
      KILN_TRY(b.launch(layer + " contiguous", std::move(ck), {c.buf, t->buf}));
      *t = c;
    }
  }
  auto sq = pair_stride(B, Hk, q.strides[0], G * q.strides[1]);
  auto sk = pair_stride(B, Hk, k.strides[0], k.strides[1]);
  auto sv = pair_stride(B, Hk, v.strides[0], v.strides[1]);
  auto lq = q_rows(q);
  if (!sq || !sk || !sv || !lq) return internal_error("attention operands without a batch stride after copying");
  TRef scores = b.new_tensor(dt, {B * H, L, S});
  GemmLaunch g1;
  GemmShape& s1 = g1.shape;
  s1.dtype = dt;
  s1.allow_tf32 = b.allow_tf32();
  s1.m = G * L, s1.n = S, s1.k = E, s1.batch = B * Hk;
  s1.lda = *lq;
  s1.trans_b = true;
  s1.ldb = S == 1 ? E : k.strides[2];
  s1.ldc = S;
  s1.batch_stride_a = *sq, s1.batch_stride_b = *sk, s1.batch_stride_c = G * L * S;
  s1.alpha = static_cast<float>(p.scale);
  g1.a = q.buf, g1.b = k.buf, g1.c = scores.buf;
  if (!s1.validate()) return false;
  b.add_gemm(layer + " scores", g1, {&q, &k, &scores});
  TRef probs = b.new_tensor(dt, {B * H, L, S});
  KILN_ASSIGN_OR_RETURN(GeneratedKernel sm,
                        attention_softmax_kernel(dt, B, H, L, S, p.has_mask ? &p.mask : nullptr, p.causal));
  std::vector<BufferRef> sargs{probs.buf, scores.buf};
  if (p.has_mask) sargs.push_back(*mask);
  KILN_TRY(b.launch(layer + " softmax", std::move(sm), sargs));
  GemmLaunch g2;
  GemmShape& s2 = g2.shape;
  s2.dtype = dt;
  s2.allow_tf32 = b.allow_tf32();
  s2.m = G * L, s2.n = Ev, s2.k = S, s2.batch = B * Hk;
  s2.lda = S;
  s2.ldb = S == 1 ? Ev : v.strides[2];
  s2.ldc = Ev;
  s2.batch_stride_a = G * L * S, s2.batch_stride_b = *sv, s2.batch_stride_c = G * L * Ev;
  g2.a = probs.buf, g2.b = v.buf, g2.c = o.buf;
  KILN_TRY(s2.validate().with_context(layer));
  b.add_gemm(layer + " values", g2, {&probs, &v, &o});
  return true;
}

}  // namespace

Status emit_attention(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  AttentionParams p;
  TRef q, k, v;
  for (auto [name, slot] : {std::pair{"query", &q}, std::pair{"key", &k}, std::pair{"value", &v}}) {
    KILN_ASSIGN_OR_RETURN(*slot, b.ref(value_arg(n, name)));
    if (slot->dtype != dt) {
      KILN_ASSIGN_OR_RETURN(*slot, b.contiguous(*slot, n.name, dt));
    }
  }
  p.q = q.layout();
  p.k = k.layout();
  p.v = v.layout();
  std::optional<TRef> mask;
  if (const ir::Value* mv = value_arg(n, "attn_mask")) {
    KILN_ASSIGN_OR_RETURN(TRef m, b.ref(mv));
    if (m.dtype != DType::Bool && m.dtype != dt) {
      KILN_ASSIGN_OR_RETURN(m, b.contiguous(m, n.name, dt));
    }
    const std::vector<int64_t> ms{q.sizes[0], q.sizes[1], q.sizes[2], k.sizes[2]};
    KILN_ASSIGN_OR_RETURN(m, expanded(m, ms));
    p.has_mask = true;
    p.mask = m.layout();
    mask = m;
  }
  p.causal = bool_arg(n, "is_causal");
  p.scale = double_arg(n, "scale").value_or(1.0 / std::sqrt(static_cast<double>(q.sizes[3])));
  const std::vector<int64_t> os = static_sizes(out);
  // 16-bit attention over several query rows runs on the tensor cores in one
  // kernel that reads q, k and v through their strides and writes [B, L, H, E]
  // storage, so the usual transpose back to [B, L, H * E] is a view. (A few
  // rows per head, a decode step, take the chunked kernels below.)
  if (os.size() == 4 && os[2] >= 16 && q.buf.offset % 4 == 0 && k.buf.offset % 4 == 0 && v.buf.offset % 4 == 0 &&
      flash_attention_fits(p, {dt, os, {os[2] * os[1] * os[3], os[3], os[1] * os[3], 1}})) {
    TRef fo = b.new_tensor(dt, {os[0], os[2], os[1], os[3]});
    fo.sizes = os;
    fo.strides = {os[2] * os[1] * os[3], os[3], os[1] * os[3], 1};
    KILN_ASSIGN_OR_RETURN(GeneratedKernel kern, flash_attention_kernel(p, fo.layout(), b.config().device.sm_count));
    std::vector<BufferRef> fargs{fo.buf, q.buf, k.buf, v.buf};
    if (mask) fargs.push_back(mask->buf);
    KILN_TRY(b.launch(n.name, std::move(kern), fargs));
    b.bind(out, fo);
    return Status::ok();
  }
  TRef o = b.new_tensor(dt, os);
  // A few query rows per key head (a decode step): the keys in chunks spread
  // over the GPU, then one merge; a chunk the mask hides is never read.
  if (decode_attention_fits(p, o.layout())) {
    TRef part = b.new_tensor(DType::Float32, {decode_attention_part_floats(p)});
    KILN_ASSIGN_OR_RETURN(auto dk, decode_attention_kernels(p, o.layout()));
    std::vector<BufferRef> dargs{part.buf, q.buf, k.buf, v.buf};
    if (mask) dargs.push_back(mask->buf);
    KILN_TRY(b.launch(n.name + " chunks", std::move(dk[0]), dargs));
    KILN_TRY(b.launch(n.name + " merge", std::move(dk[1]), {o.buf, part.buf}));
    b.bind(out, o);
    return Status::ok();
  }
  std::vector<BufferRef> args{o.buf, q.buf, k.buf, v.buf};
  if (mask) args.push_back(mask->buf);
  if (Expected<bool> done = attention_as_gemms(b, n.name, q, k, v, p, args.size() > 4 ? &args[4] : nullptr, o);
      !done.has_value()) {
    return done.status();
  } else if (*done) {
    b.bind(out, o);
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(GeneratedKernel kern, attention_kernel(p));
  KILN_TRY(b.launch(n.name, std::move(kern), args));
  b.bind(out, o);
  return Status::ok();
}

Status emit_rotary(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  const std::vector<int64_t> os = static_sizes(out);
  std::vector<TRef> ops;
  for (const char* name : {"input", "cos", "sin"}) {
    KILN_ASSIGN_OR_RETURN(TRef r, b.ref(value_arg(n, name)));
    if (r.dtype != dt) {
      KILN_ASSIGN_OR_RETURN(r, b.contiguous(r, n.name, dt));
    }
    KILN_ASSIGN_OR_RETURN(r, expanded(r, os));
    ops.push_back(r);
  }
  TRef o = b.new_tensor(dt, os);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k,
                        rotary_kernel(o.layout(), ops[0].layout(), ops[1].layout(), ops[2].layout()));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, ops[0].buf, ops[1].buf, ops[2].buf}));
  b.bind(out, o);
  return Status::ok();
}

// Scaled dot-product attention of 4-D floating q, k and v, without dropout.
std::string attention_refusal(const ir::Node& n) {
  for (const char* name : {"query", "key", "value"}) {
    const ir::Value* v = value_arg(n, name);
    if (rank(v) != 4) return "attention with q, k and v that are not 4-D";
    if (!floating(v->type.dtype) || v->type.dtype == DType::Float64) return "attention in this dtype";
    if (v->type.sizes[3].value > 256) return "attention head size above 256";
  }
  if (double_arg(n, "dropout_p").value_or(0.0) != 0.0) return "attention with dropout";
  if (const ir::Value* m = value_arg(n, "attn_mask"); m && rank(m) > 4) return "attention mask of rank > 4";
  return "";
}

}  // namespace kiln::cuda::layers
