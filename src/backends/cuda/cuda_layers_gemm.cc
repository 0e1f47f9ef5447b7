// The CUDA builder's layers, matrix products: cuBLASLt GEMMs with fused bias and activation, and matrix-vector kernels
// for few rows.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string_view>

#include "backends/cuda/cuda_layers.h"

namespace kiln::cuda::layers {

namespace {

struct MatLayout {
  bool trans = false;
  int64_t ld = 0;
};

std::optional<MatLayout> mat_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  if (sc == 1 && (rows == 1 || sr >= cols)) return MatLayout{false, rows == 1 ? cols : sr};
  if (sr == 1 && (cols == 1 || sc >= rows)) return MatLayout{true, cols == 1 ? rows : sc};
  return std::nullopt;
}

// The single batch stride of `t`'s leading dims (those before the last two), or nullopt.
std::optional<int64_t> batch_stride(const TRef& t) {
  const size_t nb = t.sizes.size() - 2;
  int64_t stride = 0, expect = -1;
  for (size_t d = nb; d-- > 0;) {
    if (t.sizes[d] == 1) continue;
    if (expect < 0) {
      stride = t.strides[d];
      expect = stride * t.sizes[d];
      continue;
    }
    if (stride == 0 ? t.strides[d] != 0 : t.strides[d] != expect) return std::nullopt;
    expect = t.strides[d] * t.sizes[d];
  }
  return stride;
}

// The first columns of a gate/up product's two halves (fold_silu_gate), each
// `width` wide, inside the product's `product_width` columns.
Status check_gate_up(const std::vector<int64_t>& gate_up, int64_t width, int64_t product_width) {
  if (gate_up.size() != 2) return internal_error("a gate and up product without its two halves");
  for (int64_t start : gate_up)
    if (start < 0 || start + width > product_width)
      return invalid_argument("a gate or up half from column " + std::to_string(start) + " of " +
                              std::to_string(width) + " columns past the product's " + std::to_string(product_width));
  return Status::ok();
}

// A matrix-vector kernel's epilogue: the GEMM epilogue's activation, or with
// `gate_up` silu(gate) * up over the product's halves, `width` columns of
// output (the halves checked by check_gate_up).
void set_gemv_epilogue(GemvShape& gv, GemmEpilogue ep, const std::vector<int64_t>* gate_up, int64_t width) {
  gv.activation = ep == GemmEpilogue::kBiasRelu ? "relu" : (ep == GemmEpilogue::kBiasGelu ? "gelu" : "none");
  if (!gate_up) return;
  gv.activation = "swiglu";
  gv.n = gv.ldc = width;
  gv.gate_row = (*gate_up)[0];
  gv.up_row = (*gate_up)[1];
}

// `gate_up` (a gated MLP's gate and up products made one, fold_silu_gate):
// the first columns of the product's gate and up halves; `out` is then
// silu(gate) * up, as wide as each half.
Status emit_gemm(Builder& b, const std::string& layer, TRef A, TRef B, const ir::Value* out, const TRef* bias,
                 GemmEpilogue ep, float alpha, const std::vector<int64_t>* gate_up) {
  const std::vector<int64_t> out_sizes = static_sizes(out);
  std::vector<int64_t> sizes = out_sizes;  // the product's
  if (gate_up) {
    if (sizes.empty() || B.sizes.size() < 2) return internal_error("a gate and up product without its two halves");
    sizes.back() = B.sizes.back();
    KILN_TRY(check_gate_up(*gate_up, out_sizes.back(), sizes.back()));
  }
  const DType dt = b.compute_dtype(out->type.dtype);
  if (A.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(A, b.contiguous(A, layer, dt));
  }
  if (B.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(B, b.contiguous(B, layer, dt));
  }
  const size_t rank = sizes.size();
  if (rank < 2 || A.sizes.size() < 2 || B.sizes.size() < 2)
    return invalid_argument("a matrix product of " + shape_to_string(A.sizes) + " and " + shape_to_string(B.sizes) +
                            " exported as " + shape_to_string(sizes));
  const int64_t M = sizes[rank - 2], N = sizes[rank - 1], K = A.sizes.back();
  std::vector<int64_t> batch(sizes.begin(), sizes.end() - 2);
  const int64_t nbatch = prod(batch);
  auto full = [&](const TRef& t, int64_t r, int64_t c) {
    std::vector<int64_t> s = batch;
    s.push_back(r);
    s.push_back(c);
    return expanded(t, s);
  };
  KILN_ASSIGN_OR_RETURN(A, full(A, M, K));
  KILN_ASSIGN_OR_RETURN(B, full(B, K, N));
  // cuBLASLt is asked for algorithms that need kGemmMinAlignment (run() checks
  // it), and the matrix-vector kernel loads 16 bytes at a time: a view at an
  // odd offset is copied (a copy that contiguous() makes is aligned already).
  KILN_ASSIGN_OR_RETURN(A, b.aligned(A, layer, static_cast<int64_t>(kGemmMinAlignment)));
  KILN_ASSIGN_OR_RETURN(B, b.aligned(B, layer, static_cast<int64_t>(kGemmMinAlignment)));
  GemmLaunch g;
  GemmShape& s = g.shape;
  s.dtype = dt;
  s.allow_tf32 = b.allow_tf32();
  s.n = N;
  s.k = K;
  s.alpha = alpha;
  s.epilogue = ep;
  s.ldc = N;
  // Fold the batch into M when B is shared by every batch entry and A's rows run on.
  auto sb = batch_stride(B);
  bool folded = false;
  if (sb && *sb == 0 && nbatch > 1) {
    std::vector<int64_t> rs(A.sizes.begin(), A.sizes.end() - 1), rst(A.strides.begin(), A.strides.end() - 1);
    if (A.strides.back() == 1) {
      if (auto st = view_strides(rs, rst, {nbatch * M})) {
        s.m = nbatch * M;
        s.lda = std::max<int64_t>((*st)[0], K);
        s.trans_a = false;
        s.batch = 1;
        folded = true;
      }
    }
  }
  auto setup = [&](TRef& t, int64_t r, int64_t c, bool& trans, int64_t& ld, int64_t& bs) -> Status {
    auto ml = mat_layout(r, c, t.strides[t.strides.size() - 2], t.strides.back());
    auto st = batch_stride(t);
    if (!ml || !st) {
      KILN_ASSIGN_OR_RETURN(t, b.contiguous(t, layer));
      ml = mat_layout(r, c, t.strides[t.strides.size() - 2], t.strides.back());
      st = batch_stride(t);
    }
    trans = ml->trans;
    ld = ml->ld;
    bs = *st;
    return Status::ok();
  };
  if (!folded) {
    s.m = M;
    s.batch = nbatch;
    KILN_TRY(setup(A, M, K, s.trans_a, s.lda, s.batch_stride_a));
    s.batch_stride_c = M * N;
  }
  KILN_TRY(setup(B, K, N, s.trans_b, s.ldb, s.batch_stride_b));
  if (folded) s.batch_stride_b = 0;
  g.a = A.buf;
  g.b = B.buf;
  if (bias) {
    g.bias = bias->buf;
    g.has_bias = true;
  }
  KILN_TRY(s.validate().with_context(layer));
  // A few rows against a weight stored as rows of k (a decoder's one token
  // through a linear layer): a generated matrix-vector kernel streams the
  // weight at memory bandwidth, where cuBLASLt's GEMM tiles waste most of it.
  GemvShape gv;
  gv.dtype = dt;
  gv.m = s.m;
  gv.n = s.n;
  gv.k = s.k;
  gv.lda = s.lda;
  gv.ldw = s.ldb;
  gv.ldc = s.ldc;
  gv.alpha = s.alpha;
  gv.has_bias = bias != nullptr;
  set_gemv_epilogue(gv, ep, nullptr, 0);
  if (s.batch == 1 && !s.trans_a && s.trans_b && s.beta == 0.0f && !s.allow_tf32 && gemv_fits(gv)) {
    // With gate_up: both halves in one pass over the activations, silu(gate) * up written.
    set_gemv_epilogue(gv, ep, gate_up, out_sizes.back());
    const TRef C = b.new_tensor(dt, gate_up ? out_sizes : sizes);
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k, gemv_kernel(gv));
    std::vector<BufferRef> args{C.buf, A.buf, B.buf};
    if (bias) args.push_back(bias->buf);
    KILN_TRY(b.launch(layer + " gemv", std::move(k), args));
    b.bind(out, C);
    return Status::ok();
  }
  const TRef C = b.new_tensor(dt, sizes);
  g.c = C.buf;
  if (bias) {
    b.add_gemm(layer, g, {&A, &B, &C, bias});
  } else {
    b.add_gemm(layer, g, {&A, &B, &C});
  }
  if (gate_up) {  // the product, then silu(gate) * up over its halves
    const size_t last = sizes.size() - 1;
    engine::ElementwiseProgram prog;
    prog.num_inputs = 2;
    prog.instrs.push_back({OpKind::kSiluMul, {0, 1}, {}, ""});
    return emit_program_on(
        b, layer + " silu_mul", prog,
        {narrowed(C, last, (*gate_up)[0], out_sizes.back()), narrowed(C, last, (*gate_up)[1], out_sizes.back())}, out);
  }
  b.bind(out, C);
  return Status::ok();
}

// A few rows times a constant [k, n] weight stored as FP8 rows
// (Builder::fp8_rows_constant): the activations made contiguous (16-byte
// aligned, as every arena tensor is), then one matrix-vector kernel.
Status emit_gemv_fp8(Builder& b, const std::string& layer, TRef A, const ir::Value* w, const ir::Value* out,
                     const TRef* bias, GemmEpilogue ep, float alpha, const std::vector<int64_t>* gate_up) {
  const DType dt = b.compute_dtype(out->type.dtype);
  const std::vector<int64_t> out_sizes = static_sizes(out);
  const int64_t K = w->type.sizes[0].value, N = w->type.sizes[1].value;
  if (A.sizes.empty() || A.sizes.back() != K)
    return invalid_argument("a matrix product of " + shape_to_string(A.sizes) + " and a [" + std::to_string(K) +
                            ", " + std::to_string(N) + "] weight");
  KILN_ASSIGN_OR_RETURN(A, b.contiguous(A, layer, dt));
  KILN_ASSIGN_OR_RETURN(A, b.aligned(A, layer, 16));
  if (gate_up) KILN_TRY(check_gate_up(*gate_up, out_sizes.back(), N));
  GemvShape gv;
  gv.dtype = dt;
  gv.m = prod(A.sizes) / K;
  gv.n = gv.ldc = N;
  gv.k = gv.lda = gv.ldw = K;
  gv.alpha = alpha;
  gv.has_bias = bias != nullptr;
  gv.fp8_weights = true;
  set_gemv_epilogue(gv, ep, gate_up, out_sizes.back());
  if (!gemv_fits(gv))
    return unsupported("an FP8 matrix-vector product of " + std::to_string(gv.m) + " rows, k " + std::to_string(K));
  KILN_ASSIGN_OR_RETURN(auto q, b.fp8_rows_constant(w));
  const TRef C = b.new_tensor(dt, out_sizes);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, gemv_kernel(gv));
  std::vector<BufferRef> args{C.buf, A.buf, q.first, q.second};
  if (bias) args.push_back(bias->buf);
  KILN_TRY(b.launch(layer + " gemv", std::move(k), args));
  b.bind(out, C);
  return Status::ok();
}

}  // namespace

Status emit_matmul(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  const ir::Value *a = nullptr, *w = nullptr;
  bool w_transposed = false;
  float alpha = 1.0f;
  const ir::Value* bias_v = value_arg(n, "kiln_bias");
  switch (n.op) {
    case OpKind::kMm:
    case OpKind::kBmm:
      a = value_arg(n, "self");
      w = value_arg(n, "mat2");
      break;
    case OpKind::kMatmul:
      a = value_arg(n, "self");
      w = value_arg(n, "other");
      break;
    case OpKind::kLinear:
      a = value_arg(n, "input");
      w = value_arg(n, "weight");
      w_transposed = true;
      if (!bias_v) bias_v = value_arg(n, "bias");
      break;
    case OpKind::kAddmm:
      a = value_arg(n, "mat1");
      w = value_arg(n, "mat2");
      bias_v = value_arg(n, "self");
      alpha = static_cast<float>(double_arg(n, "alpha").value_or(1.0));
      break;
    default: return internal_error("not a GEMM layer");
  }
  if (!a || !w) return internal_error("GEMM layer without operands");
  KILN_ASSIGN_OR_RETURN(TRef A, b.ref(a));
  // Empty products: an empty result computes nothing; a sum over no terms is zeros.
  if (const std::vector<int64_t> sizes = static_sizes(out);
      prod(sizes) == 0 || (!A.sizes.empty() && A.sizes.back() == 0)) {
    if (bias_v && prod(sizes) > 0) return unsupported("a product over an empty dim with a bias");
    TRef o = b.new_tensor(dt, sizes);
    if (prod(sizes) > 0) {
      KILN_ASSIGN_OR_RETURN(GeneratedKernel zero, fill_kernel(o.layout(), 0.0));
      KILN_TRY(b.launch(n.name, std::move(zero), {o.buf}));
    }
    b.bind(out, o);
    return Status::ok();
  }
  // A weight stored k x n (a linear layer's weight transposed while lowering)
  // feeding few rows: store it n x k on the device instead, so that the
  // matrix-vector kernel streams whole rows of it (emit_gemm). Asked for
  // before any plain use, so the plain copy is never uploaded.
  const std::vector<int64_t> out_sizes = static_sizes(out);
  const bool few_rows_of_constant = !w_transposed && b.is_constant(w) && w->type.sizes.size() == 2 &&
                                    w->type.sizes[1].is_static() && w->type.sizes[1].value > 0 && !out_sizes.empty() &&
                                    out_sizes.back() > 0 && prod(out_sizes) / out_sizes.back() <= kGemvMaxRows;
  GemmEpilogue ep = GemmEpilogue::kNone;
  std::optional<TRef> bias;
  if (bias_v) {
    KILN_ASSIGN_OR_RETURN(TRef br, b.ref(bias_v));
    if (br.dtype != dt) {
      KILN_ASSIGN_OR_RETURN(br, b.contiguous(br, n.name, dt));
    }
    KILN_ASSIGN_OR_RETURN(br, b.contiguous(br, n.name));
    KILN_ASSIGN_OR_RETURN(br, b.aligned(br, n.name, static_cast<int64_t>(kGemmMinAlignment)));
    bias = br;
    ep = string_arg(n, "kiln_act") == "relu" ? GemmEpilogue::kBiasRelu : GemmEpilogue::kBias;
  }
  const std::optional<std::vector<int64_t>> gate_up = ints_arg(n, "kiln_gate_up");
  // --precision fp8w: such a weight (k a multiple of 16) is stored as FP8
  // rows with a scale each, and the matrix-vector kernel reads those.
  if (few_rows_of_constant && b.config().precision == Precision::kFp8w && w->type.sizes[0].is_static() &&
      w->type.sizes[0].value % 16 == 0) {
    return emit_gemv_fp8(b, n.name, A, w, out, bias ? &*bias : nullptr, ep, alpha, gate_up ? &*gate_up : nullptr);
  }
  TRef W;
  if (few_rows_of_constant) {
    KILN_ASSIGN_OR_RETURN(W, b.constant(w, b.compute_dtype(w->type.dtype), false, /*transposed_matrix=*/true));
  } else {
    KILN_ASSIGN_OR_RETURN(W, b.ref(w));
  }
  if (w_transposed) {
    std::swap(W.sizes[0], W.sizes[1]);
    std::swap(W.strides[0], W.strides[1]);
  }
  return emit_gemm(b, n.name, A, W, out, bias ? &*bias : nullptr, ep, alpha, gate_up ? &*gate_up : nullptr);
}

// Matrix products of floating 2-D and batched operands.
std::string gemm_refusal(const ir::Node& n) {
  const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  for (const ir::Value* v : n.operands())
    if (v->kind == ir::ValueKind::kTensor && !floating(v->type.dtype)) return "integer matrix products";
  const ir::Value* a = value_arg(n, n.op == OpKind::kLinear ? "input" : n.op == OpKind::kAddmm ? "mat1" : "self");
  const ir::Value* w = value_arg(n, n.op == OpKind::kLinear ? "weight" : n.op == OpKind::kMatmul ? "other" : "mat2");
  if (rank(a) < 2 || rank(w) < 2 || rank(out) < 2) return "matrix products with a 1-D operand or result";
  if (n.op == OpKind::kLinear && rank(w) != 2) return "linear with a weight that is not 2-D";
  if (n.op == OpKind::kAddmm) {
    if (double_arg(n, "beta").value_or(1.0) != 1.0) return "addmm with beta != 1";
    const ir::Value* bias = value_arg(n, "self");
    const ir::Dim* width = rank(out) == 2 ? &out->type.sizes[1] : nullptr;
    const ir::Dim* last = bias && rank(bias) > 0 ? &bias->type.sizes.back() : nullptr;
    if (!bias || !width || !last || rank(bias) > 2 || (rank(bias) == 2 && bias->type.sizes[0].value != 1) ||
        last->to_string() != width->to_string())
      return "addmm whose bias is not a row of the output's width";
  }
  if (n.op == OpKind::kLinear) {
    const ir::Value* bias = value_arg(n, "bias");
    if (bias && rank(bias) != 1) return "linear whose bias is not 1-D";
  }
  if ((n.op == OpKind::kLinear  ? value_arg(n, "bias")
       : n.op == OpKind::kAddmm ? value_arg(n, "self")
                                : nullptr) &&
      a->type.sizes.back().is_static() && a->type.sizes.back().value == 0)
    return "a product over an empty dim with a bias";
  return "";
}

}  // namespace kiln::cuda::layers
