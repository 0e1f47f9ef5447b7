// 2-d pooling: max_pool2d (with and without indices), avg_pool2d and
// adaptive_avg_pool2d, on [N, C, H, W] or unbatched [C, H, W] inputs.
//
// Window placement, output sizes (ceil_mode included) and divisors follow
// PyTorch's CPU kernels. Averages are computed in double and rounded once.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

// An int list of length 1 (repeated) or 2; `fallback` when the argument is left out.
Expected<std::array<int64_t, 2>> pair_arg(const KernelArgs& a, const char* name, std::optional<int64_t> fallback) {
  std::optional<std::vector<int64_t>> fb;
  if (fallback) fb = std::vector<int64_t>{*fallback};
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> v, a.ints(name, fb));
  if (v.size() == 1) return std::array<int64_t, 2>{v[0], v[0]};
  if (v.size() != 2) return a.error("'" + std::string(name) + "' needs 1 or 2 values, got " + shape_to_string(v));
  return std::array<int64_t, 2>{v[0], v[1]};
}

// Planes of a pooling input: [N*C, H, W] (unbatched inputs have N = 1).
struct Planes {
  int64_t count = 0, H = 0, W = 0;
  Shape lead;  // the dims before H, W
};

Expected<Planes> planes_of(const KernelArgs& a, const Tensor& x) {
  if (x.dim() != 3 && x.dim() != 4)
    return a.error("pooling needs a [N, C, H, W] or [C, H, W] input, got " + x.type_string());
  Planes p;
  p.lead.assign(x.sizes().begin(), x.sizes().end() - 2);
  p.count = 1;
  for (int64_t s : p.lead) p.count *= s;
  p.H = x.size(-2);
  p.W = x.size(-1);
  return p;
}

Shape out_shape(const Planes& p, int64_t oh, int64_t ow) {
  Shape s = p.lead;
  s.push_back(oh);
  s.push_back(ow);
  return s;
}

// PyTorch's pooling_output_shape.
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  // With ceil_mode the last window must start inside the input or its left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// The bound keeps every window and output-size expression inside int64.
constexpr int64_t kMaxParam = int64_t{1} << 24;

struct PoolSpec {
  std::array<int64_t, 2> k{}, stride{}, pad{}, dilation{1, 1};
  bool ceil_mode = false;
  int64_t OH = 0, OW = 0;
};

Status read_pool_spec(const KernelArgs& a, const Planes& p, bool with_dilation, PoolSpec& s) {
  KILN_ASSIGN_OR_RETURN(s.k, pair_arg(a, "kernel_size", std::nullopt));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> st, a.ints("stride"));
  if (st.empty()) {
    s.stride = s.k;  // an empty stride means the kernel size
  } else {
    KILN_ASSIGN_OR_RETURN(s.stride, pair_arg(a, "stride", std::nullopt));
  }
  KILN_ASSIGN_OR_RETURN(s.pad, pair_arg(a, "padding", 0));
  if (with_dilation) {
    KILN_ASSIGN_OR_RETURN(s.dilation, pair_arg(a, "dilation", 1));
  }
  KILN_ASSIGN_OR_RETURN(s.ceil_mode, a.bool_arg("ceil_mode"));
  for (int d = 0; d < 2; ++d) {
    if (s.k[d] <= 0 || s.stride[d] <= 0 || s.dilation[d] <= 0 || s.pad[d] < 0)
      return a.error("kernel_size, stride and dilation must be positive and padding non-negative");
    if (s.k[d] > kMaxParam || s.stride[d] > kMaxParam || s.dilation[d] > kMaxParam)
      return a.error("kernel_size, stride or dilation is implausibly large");
    const int64_t eff = s.dilation[d] * (s.k[d] - 1) + 1;
    if (s.pad[d] > eff / 2)
      return a.error("padding " + std::to_string(s.pad[d]) + " is more than half the kernel size " +
                     std::to_string(eff));
  }
  s.OH = pooled_size(p.H, s.k[0], s.pad[0], s.stride[0], s.dilation[0], s.ceil_mode);
  s.OW = pooled_size(p.W, s.k[1], s.pad[1], s.stride[1], s.dilation[1], s.ceil_mode);
  if (s.OH < 1 || s.OW < 1)
    return a.error("input planes " + std::to_string(p.H) + "x" + std::to_string(p.W) + " give an output of size " +
                   std::to_string(s.OH) + "x" + std::to_string(s.OW) + ", which is too small");
  return Status::ok();
}

// ---- max pooling

template <typename T>
void max_pool_planes(const T* x, T* out, int64_t* idx, const Planes& p, const PoolSpec& s) {
  for (int64_t c = 0; c < p.count; ++c) {
    const T* plane = x + c * p.H * p.W;
    for (int64_t oh = 0; oh < s.OH; ++oh)
      for (int64_t ow = 0; ow < s.OW; ++ow) {
        int64_t h0 = oh * s.stride[0] - s.pad[0], w0 = ow * s.stride[1] - s.pad[1];
        const int64_t h1 = std::min(h0 + (s.k[0] - 1) * s.dilation[0] + 1, p.H);
        const int64_t w1 = std::min(w0 + (s.k[1] - 1) * s.dilation[1] + 1, p.W);
        while (h0 < 0) h0 += s.dilation[0];
        while (w0 < 0) w0 += s.dilation[1];
        // PyTorch starts from -inf at the window's first in-bounds position; a NaN always takes over.
        int64_t best = h0 * p.W + w0;
        T best_v = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                        : std::numeric_limits<T>::lowest();
        for (int64_t h = h0; h < h1; h += s.dilation[0])
          for (int64_t w = w0; w < w1; w += s.dilation[1]) {
            const T v = plane[h * p.W + w];
            bool take = v > best_v;
            if constexpr (std::is_floating_point_v<T>) take = take || std::isnan(v);
            if (take) {
              best_v = v;
              best = h * p.W + w;
            }
          }
        const int64_t o = (c * s.OH + oh) * s.OW + ow;
        out[o] = best_v;
        if (idx) idx[o] = best;
      }
  }
}

Status max_pool(KernelArgs& a, bool with_indices) {
  KILN_ASSIGN_OR_RETURN(Tensor input, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Planes p, planes_of(a, input));
  PoolSpec s;
  KILN_TRY(read_pool_spec(a, p, /*with_dilation=*/true, s));
  if (input.dtype() == DType::Bool) return a.error("max_pool2d does not take bool inputs");
  // Floats widen to float32 or double exactly, so the maximum is exact; integers keep their type.
  const DType ct = input.dtype() == DType::Float64 || !is_floating(input.dtype()) ? input.dtype() : DType::Float32;
  Tensor x = input.to(ct).contiguous();
  Tensor out = Tensor::zeros(ct, out_shape(p, s.OH, s.OW));
  Tensor idx = Tensor::zeros(DType::Int64, out_shape(p, s.OH, s.OW));
  visit_dtype(ct, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
      max_pool_planes(x.data<T>(), out.data<T>(), idx.data<int64_t>(), p, s);
  });
  a.set_output(0, out.to(input.dtype()));
  if (with_indices) a.set_output(1, idx);
  return Status::ok();
}

Status max_pool2d(KernelArgs& a) { return max_pool(a, false); }
Status max_pool2d_with_indices(KernelArgs& a) { return max_pool(a, true); }

// ---- average pooling

Status avg_pool2d(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor input, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Planes p, planes_of(a, input));
  PoolSpec s;
  KILN_TRY(read_pool_spec(a, p, /*with_dilation=*/false, s));
  KILN_ASSIGN_OR_RETURN(bool count_include_pad, a.bool_arg("count_include_pad"));
  KILN_ASSIGN_OR_RETURN(auto divisor_override, a.optional_int("divisor_override"));
  if (divisor_override && *divisor_override == 0) return a.error("divisor_override must not be zero");
  const bool integral = input.dtype() == DType::Int64;
  if (!is_floating(input.dtype()) && !integral)
    return a.error("avg_pool2d needs a floating-point or int64 input, got " + input.type_string());
  Tensor x = input.to(integral ? DType::Int64 : DType::Float64).contiguous();
  Tensor out = Tensor::zeros(x.dtype(), out_shape(p, s.OH, s.OW));
  for (int64_t c = 0; c < p.count; ++c)
    for (int64_t oh = 0; oh < s.OH; ++oh)
      for (int64_t ow = 0; ow < s.OW; ++ow) {
        int64_t h0 = oh * s.stride[0] - s.pad[0], w0 = ow * s.stride[1] - s.pad[1];
        int64_t h1 = std::min(h0 + s.k[0], p.H + s.pad[0]), w1 = std::min(w0 + s.k[1], p.W + s.pad[1]);
        const int64_t pool_size = (h1 - h0) * (w1 - w0);  // counts padding, not the ceil_mode overhang
        h0 = std::max<int64_t>(h0, 0);
        w0 = std::max<int64_t>(w0, 0);
        h1 = std::min(h1, p.H);
        w1 = std::min(w1, p.W);
        const int64_t o = (c * s.OH + oh) * s.OW + ow;
        if (h0 >= h1 || w0 >= w1) continue;  // the window holds only padding: 0
        const int64_t divisor = divisor_override    ? *divisor_override
                                : count_include_pad ? pool_size
                                                    : (h1 - h0) * (w1 - w0);
        if (integral) {
          const int64_t* plane = x.data<int64_t>() + c * p.H * p.W;
          int64_t sum = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) sum += plane[h * p.W + w];
          out.data<int64_t>()[o] = sum / divisor;
        } else {
          const double* plane = x.data<double>() + c * p.H * p.W;
          double sum = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) sum += plane[h * p.W + w];
          out.data<double>()[o] = sum / static_cast<double>(divisor);
        }
      }
  a.set_output(0, out.to(input.dtype()));
  return Status::ok();
}

// adaptive_avg_pool2d(self, output_size): bin i covers [floor(i*in/out), ceil((i+1)*in/out)).
Status adaptive_avg_pool2d(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor input, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Planes p, planes_of(a, input));
  KILN_ASSIGN_OR_RETURN(auto os, pair_arg(a, "output_size", std::nullopt));
  if (!is_floating(input.dtype()))
    return a.error("adaptive_avg_pool2d needs a floating-point input, got " + input.type_string());
  if (os[0] < 0 || os[1] < 0 || os[0] > kMaxParam || os[1] > kMaxParam ||
      !checked_numel(out_shape(p, os[0], os[1])).has_value())
    return a.error("output_size " + shape_to_string(os) + " is out of range");
  if ((p.H == 0 || p.W == 0) && os[0] * os[1] > 0)
    return a.error("adaptive_avg_pool2d of empty planes " + input.type_string() + " has no values to average");
  Tensor x = input.to(DType::Float64).contiguous();
  Tensor out = Tensor::zeros(DType::Float64, out_shape(p, os[0], os[1]));
  for (int64_t c = 0; c < p.count; ++c) {
    const double* plane = x.data<double>() + c * p.H * p.W;
    for (int64_t oh = 0; oh < os[0]; ++oh) {
      const int64_t h0 = oh * p.H / os[0], h1 = ((oh + 1) * p.H + os[0] - 1) / os[0];
      for (int64_t ow = 0; ow < os[1]; ++ow) {
        const int64_t w0 = ow * p.W / os[1], w1 = ((ow + 1) * p.W + os[1] - 1) / os[1];
        double sum = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) sum += plane[h * p.W + w];
        out.data<double>()[(c * os[0] + oh) * os[1] + ow] = sum / static_cast<double>((h1 - h0) * (w1 - w0));
      }
    }
  }
  a.set_output(0, out.to(input.dtype()));
  return Status::ok();
}

}  // namespace

void register_pool_kernels(KernelRegistry& r) {
  r.add(ir::OpKind::kMaxPool2d, &max_pool2d);
  r.add(ir::OpKind::kMaxPool2dWithIndices, &max_pool2d_with_indices);
  r.add(ir::OpKind::kAvgPool2d, &avg_pool2d);
  r.add(ir::OpKind::kAdaptiveAvgPool2d, &adaptive_avg_pool2d);
  r.add(ir::OpKind::kAdaptiveAvgPool2dInternal, &adaptive_avg_pool2d);
}

}  // namespace kiln::cpu
