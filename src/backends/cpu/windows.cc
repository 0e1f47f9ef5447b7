// Kernels over sliding windows and their inverses: im2col (the patches
// nn.Unfold takes), max_unpool2d / max_unpool3d (values written back at the
// positions max pooling took them from) and adaptive_max_pool2d (the largest
// entry of each adaptive bin, with its position; NaN wins, as in ATen).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

Expected<std::vector<int64_t>> pair_arg(const KernelArgs& a, std::string_view name, size_t n) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> v, a.ints(name));
  if (v.size() == 1) v.assign(n, v[0]);
  if (v.size() != n)
    return a.error("argument '" + std::string(name) + "' must have " + std::to_string(n) + " values, got " +
                   std::to_string(v.size()));
  return v;
}

// im2col(self [N, C, H, W] or [C, H, W], kernel_size, dilation, padding,
// stride) -> [N, C kh kw, L]: column (c, i, j) of window l holds the input at
// (l's row * sh - ph + i dh, l's column * sw - pw + j dw), 0 in the padding.
Status im2col(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dim() != 3 && self.dim() != 4)
    return a.error("im2col takes [N, C, H, W] or [C, H, W], got " + self.type_string());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> k, pair_arg(a, "kernel_size", 2));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dil, pair_arg(a, "dilation", 2));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pad, pair_arg(a, "padding", 2));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> st, pair_arg(a, "stride", 2));
  for (size_t i = 0; i < 2; ++i)
    if (k[i] <= 0 || dil[i] <= 0 || st[i] <= 0 || pad[i] < 0)
      return a.error("im2col: kernel_size, dilation and stride must be positive and padding non-negative");
  const bool batched = self.dim() == 4;
  const Tensor x =
      batched ? self.contiguous() : self.contiguous().reshape({1, self.size(0), self.size(1), self.size(2)});
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t oh = (h + 2 * pad[0] - dil[0] * (k[0] - 1) - 1) / st[0] + 1;
  const int64_t ow = (w + 2 * pad[1] - dil[1] * (k[1] - 1) - 1) / st[1] + 1;
  if (oh <= 0 || ow <= 0) return a.error("im2col: the kernel does not fit the padded input " + self.type_string());
  const int64_t rows = c * k[0] * k[1], cols = oh * ow;
  Tensor out = Tensor::zeros(x.dtype(), {n, rows, cols});
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    for (int64_t b = 0; b < n; ++b)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t ch = r / (k[0] * k[1]), i = r / k[1] % k[0], j = r % k[1];
        for (int64_t y = 0; y < oh; ++y)
          for (int64_t z = 0; z < ow; ++z) {
            const int64_t sy = y * st[0] - pad[0] + i * dil[0], sx = z * st[1] - pad[1] + j * dil[1];
            if (sy < 0 || sy >= h || sx < 0 || sx >= w) continue;
            o[(b * rows + r) * cols + y * ow + z] = in[((b * c + ch) * h + sy) * w + sx];
          }
      }
  });
  a.set_output(0, batched ? out : out.reshape({rows, cols}));
  return Status::ok();
}

// max_unpool2d(self, indices, output_size) and max_unpool3d(self, indices,
// output_size, stride, padding): zeros of the output's spatial size per
// plane, each value written at its index within the plane.
Status max_unpool(KernelArgs& a, size_t spatial) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor indices, a.tensor("indices"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, a.ints("output_size"));
  const int64_t rank = static_cast<int64_t>(spatial);
  if (size.size() != spatial)
    return a.error("output_size must have " + std::to_string(spatial) + " values, got " + std::to_string(size.size()));
  if (self.dim() != rank + 1 && self.dim() != rank + 2)
    return a.error("max_unpool takes a tensor of " + std::to_string(rank + 1) + " or " + std::to_string(rank + 2) +
                   " dims, got " + self.type_string());
  if (indices.sizes() != self.sizes() || indices.dtype() != DType::Int64)
    return a.error("indices must be int64 of the input's sizes " + self.type_string() + ", got " +
                   indices.type_string());
  Shape out_shape(self.sizes().begin(), self.sizes().end() - rank);
  int64_t plane_out = 1, plane_in = 1;
  for (size_t i = 0; i < spatial; ++i) {
    out_shape.push_back(size[i]);
    plane_out *= size[i];
    plane_in *= self.size(self.dim() - rank + static_cast<int64_t>(i));
  }
  const Tensor x = self.contiguous(), idx = indices.contiguous();
  Tensor out = Tensor::zeros(x.dtype(), out_shape);
  const int64_t planes = x.numel() / std::max<int64_t>(plane_in, 1);
  const int64_t* ip = idx.data<int64_t>();
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t e = 0; e < plane_in; ++e) {
      const int64_t at = ip[p * plane_in + e];
      if (at < 0 || at >= plane_out)
        return a.error("max_unpool: index " + std::to_string(at) + " is outside an output plane of " +
                       std::to_string(plane_out) + " elements");
    }
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t e = 0; e < plane_in; ++e) o[p * plane_out + ip[p * plane_in + e]] = in[p * plane_in + e];
  });
  a.set_output(0, out);
  return Status::ok();
}

Status max_unpool2d(KernelArgs& a) { return max_unpool(a, 2); }
Status max_unpool3d(KernelArgs& a) { return max_unpool(a, 3); }

// adaptive_max_pool2d(self, output_size): bin i covers [floor(i in / out),
// ceil((i + 1) in / out)); values and the flat index within the input plane.
Status adaptive_max_pool2d(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, pair_arg(a, "output_size", 2));
  if (self.dim() != 3 && self.dim() != 4)
    return a.error("adaptive_max_pool2d takes [N, C, H, W] or [C, H, W], got " + self.type_string());
  if (!is_floating(self.dtype()))
    return a.error("adaptive_max_pool2d takes a floating tensor, got " + self.type_string());
  const int64_t h = self.size(self.dim() - 2), w = self.size(self.dim() - 1);
  const int64_t oh = size[0], ow = size[1];
  if (oh <= 0 || ow <= 0 || h <= 0 || w <= 0)
    return a.error("adaptive_max_pool2d: empty input or output sizes " + self.type_string());
  Shape shape(self.sizes().begin(), self.sizes().end() - 2);
  shape.push_back(oh);
  shape.push_back(ow);
  const Tensor x = self.contiguous();
  Tensor values = Tensor::zeros(x.dtype(), shape);
  Tensor indices = Tensor::zeros(DType::Int64, shape);
  const int64_t planes = x.numel() / (h * w);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_v<decltype(load(T{}))>) {
      const T* in = x.data<T>();
      T* v = values.data<T>();
      int64_t* ix = indices.data<int64_t>();
      for (int64_t p = 0; p < planes; ++p)
        for (int64_t i = 0; i < oh; ++i) {
          const int64_t y0 = i * h / oh, y1 = ((i + 1) * h + oh - 1) / oh;
          for (int64_t j = 0; j < ow; ++j) {
            const int64_t x0 = j * w / ow, x1 = ((j + 1) * w + ow - 1) / ow;
            auto best = load(in[p * h * w + y0 * w + x0]);
            int64_t at = y0 * w + x0;
            for (int64_t y = y0; y < y1; ++y)
              for (int64_t z = x0; z < x1; ++z) {
                const auto e = load(in[p * h * w + y * w + z]);
                if (e > best || std::isnan(e)) {
                  best = e;
                  at = y * w + z;
                }
              }
            v[(p * oh + i) * ow + j] = convert<T>(best);
            ix[(p * oh + i) * ow + j] = at;
          }
        }
    }
  });
  a.set_output(0, values);
  a.set_output(1, indices);
  return Status::ok();
}

}  // namespace

// max_pool2d_with_indices_backward(grad_output, self, ..., indices): zeros
// of self's shape, each gradient added at its index within its plane (a
// position several windows chose gets their sum).
Status max_pool2d_backward(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor grad, a.tensor("grad_output"));
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor indices, a.tensor("indices"));
  if (self.dim() != 3 && self.dim() != 4) return a.error("self must be 3-d or 4-d, got " + self.type_string());
  if (grad.sizes() != indices.sizes() || grad.dim() != self.dim() || indices.dtype() != DType::Int64)
    return a.error("grad_output " + grad.type_string() + " and indices " + indices.type_string() + " do not match");
  if (!is_floating(grad.dtype())) return a.error("grad_output must be floating-point, got " + grad.type_string());
  const int64_t plane_in = self.size(-1) * self.size(-2), plane_out = grad.size(-1) * grad.size(-2);
  const int64_t planes = plane_out == 0 ? 0 : grad.numel() / plane_out;
  const Tensor g = cast_copy(grad, DType::Float64), idx = indices.contiguous();
  Tensor out = Tensor::zeros(DType::Float64, self.sizes());
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t e = 0; e < plane_out; ++e) {
      const int64_t at = idx.data<int64_t>()[p * plane_out + e];
      if (at < 0 || at >= plane_in)
        return a.error("index " + std::to_string(at) + " is outside an input plane of " + std::to_string(plane_in) +
                       " elements");
      out.data<double>()[p * plane_in + at] += g.data<double>()[p * plane_out + e];
    }
  a.set_output(0, out.to(grad.dtype()));
  return Status::ok();
}

void register_window_kernels(KernelRegistry& r) {
  r.add(ir::OpKind::kMaxPool2dWithIndicesBackward, &max_pool2d_backward);
  r.add(ir::OpKind::kIm2col, &im2col);
  r.add(ir::OpKind::kMaxUnpool2d, &max_unpool2d);
  r.add(ir::OpKind::kMaxUnpool3d, &max_unpool3d);
  r.add(ir::OpKind::kAdaptiveMaxPool2d, &adaptive_max_pool2d);
}

}  // namespace kiln::cpu
