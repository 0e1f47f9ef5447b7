// Matrix products: linear, matmul, mm, bmm, addmm, baddbmm.
//
// Every op becomes a batch of row-major [n, k] x [k, m] products. float32 and
// float64 go to OpenBLAS; float16 and bfloat16 are widened to float32,
// multiplied with float32 accumulation and rounded once on store; integer
// products are plain loops that wrap like PyTorch's integer accumulators.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

DType compute_type(DType t) {
  if (t == DType::Float64) return DType::Float64;
  if (is_floating(t)) return DType::Float32;
  return DType::Int64;
}

// `t` broadcast to `shape` (which it must broadcast to), as a contiguous tensor.
Tensor expand_contiguous(const Tensor& t, const Shape& shape) {
  const size_t off = shape.size() - static_cast<size_t>(t.dim());
  Shape strides(shape.size(), 0);
  for (size_t i = 0; i < static_cast<size_t>(t.dim()); ++i) strides[off + i] = t.sizes()[i] == 1 ? 0 : t.strides()[i];
  return t.as_strided(shape, strides, t.storage_offset()).contiguous();
}

// out[b] = a[b] x b[b] for contiguous [batch, n, k] x [batch, k, m] in compute type `ct`
// (trans_b: b is stored [batch, m, k]). Returns [batch, n, m] in `ct`.
Expected<Tensor> batched_product(const Tensor& a, const Tensor& b, int64_t batch, int64_t n, int64_t k, int64_t m,
                                 bool trans_b) {
  const DType ct = a.dtype();
  Tensor out = Tensor::zeros(ct, {batch, n, m});
  const int64_t ldb = trans_b ? k : m;
  for (int64_t i = 0; i < batch; ++i) {
    if (ct == DType::Float32) {
      KILN_TRY(gemm(false, trans_b, n, m, k, 1.0f, a.data<float>() + i * n * k, k, b.data<float>() + i * k * m, ldb,
                    0.0f, out.data<float>() + i * n * m, m));
    } else if (ct == DType::Float64) {
      KILN_TRY(gemm(false, trans_b, n, m, k, 1.0, a.data<double>() + i * n * k, k, b.data<double>() + i * k * m, ldb,
                    0.0, out.data<double>() + i * n * m, m));
    } else {
      const int64_t* pa = a.data<int64_t>() + i * n * k;
      const int64_t* pb = b.data<int64_t>() + i * k * m;
      int64_t* pc = out.data<int64_t>() + i * n * m;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < m; ++c) {
          uint64_t acc = 0;
          for (int64_t j = 0; j < k; ++j)
            acc +=
                static_cast<uint64_t>(pa[r * k + j]) * static_cast<uint64_t>(trans_b ? pb[c * k + j] : pb[j * m + c]);
          pc[r * m + c] = static_cast<int64_t>(acc);
        }
    }
  }
  return out;
}

// out = beta * addend + alpha * product, elementwise in the compute type; beta == 0 ignores the addend
// (NaN in it is not propagated), as in PyTorch. `addend` is already broadcast to product's shape.
void combine(Tensor& product, const std::optional<Tensor>& addend, const Scalar& alpha, const Scalar& beta) {
  const int64_t n = product.numel();
  const bool use_addend = addend && beta.to_double() != 0;
  if (product.dtype() == DType::Int64) {
    int64_t* p = product.data<int64_t>();
    const int64_t* s = use_addend ? addend->data<int64_t>() : nullptr;
    for (int64_t i = 0; i < n; ++i)
      p[i] = static_cast<int64_t>(static_cast<uint64_t>(alpha.i) * static_cast<uint64_t>(p[i]) +
                                  (s ? static_cast<uint64_t>(beta.i) * static_cast<uint64_t>(s[i]) : 0));
    return;
  }
  visit_dtype(product.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      T* p = product.data<T>();
      const T* s = use_addend ? addend->data<T>() : nullptr;
      const T al = static_cast<T>(alpha.to_double()), be = static_cast<T>(beta.to_double());
      for (int64_t i = 0; i < n; ++i) p[i] = (al == T(1) ? p[i] : al * p[i]) + (s ? be * s[i] : T(0));
    }
  });
}

Status check_operands(const KernelArgs& a, const std::vector<std::pair<const char*, const Tensor*>>& ts) {
  const DType t = ts.front().second->dtype();
  for (const auto& [name, x] : ts) {
    if (x->dtype() != t)
      return a.error("all operands must have one dtype, but '" + std::string(ts.front().first) + "' is " +
                     std::string(dtype_name(t)) + " and '" + name + "' is " + std::string(dtype_name(x->dtype())));
  }
  if (t == DType::Bool) return a.error("matrix products of bool tensors are not supported");
  return Status::ok();
}

// Generic "[..batch, n, k] x [..batch, k, m] (+ addend)" on tensors whose batch dims already match.
// `a3`, `b3`: operands viewed as [batch, n, k] / [batch, k, m] (any layout).
Expected<Tensor> product_3d(const Tensor& a3, const Tensor& b3, const std::optional<Tensor>& addend3,
                            const Scalar& alpha, const Scalar& beta, const Shape& out_shape) {
  const DType ct = compute_type(a3.dtype());
  const int64_t batch = a3.size(0), n = a3.size(1), k = a3.size(2), m = b3.size(2);
  Tensor ac = a3.to(ct).contiguous(), bc = b3.to(ct).contiguous();
  KILN_ASSIGN_OR_RETURN(Tensor prod, batched_product(ac, bc, batch, n, k, m, false));
  std::optional<Tensor> add;
  if (addend3) add = addend3->to(ct).contiguous();
  combine(prod, add, alpha, beta);
  return prod.reshape(out_shape).to(a3.dtype());
}

Status mm(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor y, a.tensor("mat2"));
  KILN_TRY(check_operands(a, {{"self", &x}, {"mat2", &y}}));
  if (x.dim() != 2 || y.dim() != 2 || x.size(1) != y.size(0))
    return a.error("mm needs [n, k] x [k, m], got " + x.type_string() + " x " + y.type_string());
  KILN_ASSIGN_OR_RETURN(
      Tensor out, product_3d(x.reshape({1, x.size(0), x.size(1)}), y.reshape({1, y.size(0), y.size(1)}), std::nullopt,
                             Scalar::of_int(1), Scalar::of_int(0), {x.size(0), y.size(1)}));
  a.set_output(0, out);
  return Status::ok();
}

Status bmm(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor y, a.tensor("mat2"));
  KILN_TRY(check_operands(a, {{"self", &x}, {"mat2", &y}}));
  if (x.dim() != 3 || y.dim() != 3 || x.size(0) != y.size(0) || x.size(2) != y.size(1))
    return a.error("bmm needs [b, n, k] x [b, k, m], got " + x.type_string() + " x " + y.type_string());
  KILN_ASSIGN_OR_RETURN(Tensor out, product_3d(x, y, std::nullopt, Scalar::of_int(1), Scalar::of_int(0),
                                               {x.size(0), x.size(1), y.size(2)}));
  a.set_output(0, out);
  return Status::ok();
}

// addmm(self, mat1, mat2, beta=1, alpha=1) and baddbmm(self, batch1, batch2, beta=1, alpha=1).
Status add_product(KernelArgs& a, bool batched) {
  const char* n1 = batched ? "batch1" : "mat1";
  const char* n2 = batched ? "batch2" : "mat2";
  KILN_ASSIGN_OR_RETURN(Tensor s, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor(n1));
  KILN_ASSIGN_OR_RETURN(Tensor y, a.tensor(n2));
  KILN_ASSIGN_OR_RETURN(Scalar beta, a.scalar("beta"));
  KILN_ASSIGN_OR_RETURN(Scalar alpha, a.scalar("alpha"));
  KILN_TRY(check_operands(a, {{"self", &s}, {n1, &x}, {n2, &y}}));
  const int64_t rank = batched ? 3 : 2;
  if (x.dim() != rank || y.dim() != rank || x.size(-1) != y.size(-2) || (batched && x.size(0) != y.size(0)))
    return a.error(std::string(batched ? "baddbmm needs [b, n, k] x [b, k, m]" : "addmm needs [n, k] x [k, m]") +
                   ", got " + x.type_string() + " x " + y.type_string());
  Shape out_shape = batched ? Shape{x.size(0), x.size(1), y.size(2)} : Shape{x.size(0), y.size(1)};
  auto bs = broadcast_shapes(s.sizes(), out_shape);
  if (!bs || *bs != out_shape)
    return a.error("'self' " + s.type_string() + " does not broadcast to the product's shape " +
                   shape_to_string(out_shape));
  Shape shape3 = batched ? out_shape : Shape{1, out_shape[0], out_shape[1]};
  Tensor x3 = batched ? x : x.reshape({1, x.size(0), x.size(1)});
  Tensor y3 = batched ? y : y.reshape({1, y.size(0), y.size(1)});
  KILN_ASSIGN_OR_RETURN(Tensor out,
                        product_3d(x3, y3, expand_contiguous(s, out_shape).reshape(shape3), alpha, beta, out_shape));
  a.set_output(0, out);
  return Status::ok();
}

Status addmm(KernelArgs& a) { return add_product(a, false); }
Status baddbmm(KernelArgs& a) { return add_product(a, true); }

// torch.matmul: 1-d operands gain a dim of size 1 that the result drops; batch dims broadcast.
Expected<Tensor> matmul_tensors(const KernelArgs& a, const Tensor& x, const Tensor& y) {
  if (x.dim() == 0 || y.dim() == 0)
    return a.error("matmul needs operands of rank >= 1, got " + x.type_string() + " and " + y.type_string());
  const bool x1 = x.dim() == 1, y1 = y.dim() == 1;
  Tensor xm = x1 ? x.as_strided({1, x.size(0)}, {0, x.strides()[0]}, x.storage_offset()) : x;
  Tensor ym = y1 ? y.as_strided({y.size(0), 1}, {y.strides()[0], 0}, y.storage_offset()) : y;
  const int64_t n = xm.size(-2), k = xm.size(-1), m = ym.size(-1);
  if (ym.size(-2) != k)
    return a.error("matmul: " + x.type_string() + " and " + y.type_string() + " have mismatched inner sizes " +
                   std::to_string(k) + " and " + std::to_string(ym.size(-2)));
  Shape xb(xm.sizes().begin(), xm.sizes().end() - 2), yb(ym.sizes().begin(), ym.sizes().end() - 2);
  auto batch = broadcast_shapes(xb, yb);
  if (!batch)
    return a.error("matmul: batch dims of " + x.type_string() + " and " + y.type_string() + " do not broadcast");
  Shape out_shape = *batch;
  if (!x1) out_shape.push_back(n);
  if (!y1) out_shape.push_back(m);
  const auto nb_or = checked_numel(*batch);
  const int64_t nb = nb_or.has_value() ? *nb_or : -1;
  if (nb < 0 || !checked_numel(out_shape).has_value() || !checked_numel(Shape{nb, n, k}).has_value() ||
      !checked_numel(Shape{nb, k, m}).has_value())
    return a.error("matmul: the broadcast operands of " + x.type_string() + " and " + y.type_string() +
                   " are too large");
  Shape xs = *batch, ys = *batch;
  xs.insert(xs.end(), {n, k});
  ys.insert(ys.end(), {k, m});
  return product_3d(expand_contiguous(xm, xs).reshape({nb, n, k}), expand_contiguous(ym, ys).reshape({nb, k, m}),
                    std::nullopt, Scalar::of_int(1), Scalar::of_int(0), out_shape);
}

Status matmul(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor y, a.tensor("other"));
  KILN_TRY(check_operands(a, {{"self", &x}, {"other", &y}}));
  KILN_ASSIGN_OR_RETURN(Tensor out, matmul_tensors(a, x, y));
  a.set_output(0, out);
  return Status::ok();
}

// linear(input [..., in], weight [out, in] or [in], bias=None): input @ weight^T + bias.
Status linear(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("input"));
  KILN_ASSIGN_OR_RETURN(Tensor w, a.tensor("weight"));
  KILN_ASSIGN_OR_RETURN(auto bias, a.optional_tensor("bias"));
  KILN_TRY(check_operands(a, {{"input", &x}, {"weight", &w}}));
  if (bias) KILN_TRY(check_operands(a, {{"input", &x}, {"bias", &*bias}}));
  if (x.dim() == 0 || (w.dim() != 1 && w.dim() != 2) || x.size(-1) != w.size(-1))
    return a.error("linear needs input [..., in] and weight [out, in], got " + x.type_string() + " and " +
                   w.type_string());
  const int64_t in = x.size(-1), out_f = w.dim() == 2 ? w.size(0) : 1;
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  const DType ct = compute_type(x.dtype());
  Shape out_shape(x.sizes().begin(), x.sizes().end() - 1);
  if (w.dim() == 2) out_shape.push_back(out_f);
  std::optional<Tensor> addend;
  if (bias) {
    auto bs = broadcast_shapes(bias->sizes(), out_shape);
    if (!bs || *bs != out_shape)
      return a.error("bias " + bias->type_string() + " does not broadcast to the output shape " +
                     shape_to_string(out_shape));
    addend = expand_contiguous(*bias, out_shape).to(ct).contiguous();
  }
  Tensor xc = x.to(ct).contiguous(), wc = w.to(ct).contiguous();
  KILN_ASSIGN_OR_RETURN(Tensor prod, batched_product(xc, wc, 1, rows, in, out_f, /*trans_b=*/true));
  combine(prod, addend, Scalar::of_int(1), Scalar::of_int(1));
  a.set_output(0, prod.reshape(out_shape).to(x.dtype()));
  return Status::ok();
}

}  // namespace

void register_linalg_kernels(KernelRegistry& r) {
  r.add(ir::OpKind::kLinear, &linear);
  r.add(ir::OpKind::kMatmul, &matmul);
  r.add(ir::OpKind::kMm, &mm);
  r.add(ir::OpKind::kBmm, &bmm);
  r.add(ir::OpKind::kAddmm, &addmm);
  r.add(ir::OpKind::kBaddbmm, &baddbmm);
}

}  // namespace kiln::cpu
