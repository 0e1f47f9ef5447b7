// 1-d and 2-d convolutions, plain and transposed: conv1d, conv2d (int or
// string padding), convolution, conv_transpose1d, conv_transpose2d.
//
// Everything runs as a 2-d convolution (a 1-d one has height 1). A plain
// convolution unfolds each group's input into columns (im2col) and multiplies
// by the group's weight with one GEMM; a transposed one multiplies by the
// transposed weight and scatters the columns back (col2im). float16 and
// bfloat16 compute in float32 and round once on store.
#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

// Geometry of one convolution, always in 2-d form (index 0 = height, 1 = width).
struct ConvSpec {
  int64_t spatial = 2;  // 1 or 2 as the op was written
  bool transposed = false;
  std::array<int64_t, 2> stride{1, 1}, pad_lo{0, 0}, pad_hi{0, 0}, dilation{1, 1}, out_pad{0, 0};
  int64_t groups = 1;
};

// An int list of length 1 (repeated) or `n`.
Expected<std::vector<int64_t>> spatial_ints(const KernelArgs& a, const char* name, int64_t fallback, int64_t n) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> v, a.ints(name, std::vector<int64_t>{fallback}));
  if (v.size() == 1) v.assign(static_cast<size_t>(n), v[0]);
  if (static_cast<int64_t>(v.size()) != n)
    return a.error("'" + std::string(name) + "' needs 1 or " + std::to_string(n) + " values, got " +
                   shape_to_string(v));
  return v;
}

// Places a 1-d or 2-d list into the 2-d form (a 1-d value goes to the width).
std::array<int64_t, 2> to2d(const std::vector<int64_t>& v, int64_t fill) {
  return v.size() == 1 ? std::array<int64_t, 2>{fill, v[0]} : std::array<int64_t, 2>{v[0], v[1]};
}

// Reads stride, padding (ints or "same"/"valid"), dilation, output_padding and groups.
Status read_spec(const KernelArgs& a, const Tensor& weight, ConvSpec& s) {
  const int64_t n = s.spatial;
  KILN_ASSIGN_OR_RETURN(auto stride, spatial_ints(a, "stride", 1, n));
  KILN_ASSIGN_OR_RETURN(auto dilation, spatial_ints(a, "dilation", 1, n));
  KILN_ASSIGN_OR_RETURN(s.groups, a.int_arg("groups", 1));
  s.stride = to2d(stride, 1);
  s.dilation = to2d(dilation, 1);
  const ir::Arg* pad_arg = a.node().find("padding");
  if (pad_arg && std::holds_alternative<std::string>(*pad_arg)) {
    const std::string mode = std::get<std::string>(*pad_arg);
    if (mode == "same") {
      for (int64_t st : stride)
        if (st != 1) return a.error("padding='same' needs stride 1, got stride " + shape_to_string(stride));
      // PyTorch puts the odd element of the total padding on the high side.
      for (int64_t i = 0; i < n; ++i) {
        const int64_t d = 2 - n + i;
        const int64_t total = s.dilation[d] * (weight.size(2 + i) - 1);
        s.pad_lo[d] = total / 2;
        s.pad_hi[d] = total - total / 2;
      }
    } else if (mode != "valid") {
      return a.error("padding must be 'same', 'valid' or a list of ints, got '" + mode + "'");
    }
  } else {
    KILN_ASSIGN_OR_RETURN(auto pad, spatial_ints(a, "padding", 0, n));
    s.pad_lo = s.pad_hi = to2d(pad, 0);
  }
  if (s.transposed) {
    KILN_ASSIGN_OR_RETURN(auto op, spatial_ints(a, "output_padding", 0, n));
    s.out_pad = to2d(op, 0);
  }
  // The bound keeps every output-size expression inside int64.
  constexpr int64_t kMaxParam = int64_t{1} << 24;
  for (int d = 0; d < 2; ++d) {
    if (s.stride[d] <= 0 || s.dilation[d] <= 0 || s.pad_lo[d] < 0 || s.out_pad[d] < 0)
      return a.error("stride and dilation must be positive and padding non-negative, got stride " +
                     shape_to_string(stride) + ", dilation " + shape_to_string(dilation));
    if (s.stride[d] > kMaxParam || s.dilation[d] > kMaxParam || s.pad_hi[d] > kMaxParam || s.out_pad[d] > kMaxParam)
      return a.error("stride, padding, dilation or output_padding is implausibly large");
    if (s.transposed && s.out_pad[d] >= s.stride[d] && s.out_pad[d] >= s.dilation[d])
      return a.error("output_padding must be smaller than either stride or dilation");
  }
  if (s.groups <= 0) return a.error("groups must be positive, got " + std::to_string(s.groups));
  return Status::ok();
}

template <typename T>
void add_bias(T* out, const T* bias, int64_t batch, int64_t channels, int64_t plane) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c) {
      T* p = out + (b * channels + c) * plane;
      for (int64_t i = 0; i < plane; ++i) p[i] += bias[c];
    }
}

// x [N, C, H, W], w [Cout, C/g, KH, KW] -> out [N, Cout, OH, OW], all contiguous.
template <typename T>
Status conv_forward(const T* x, const T* w, T* out, const ConvSpec& s, const Shape& xs, const Shape& ws,
                    const Shape& os) {
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  const int64_t Cout = ws[0], Cg = ws[1], KH = ws[2], KW = ws[3], OH = os[2], OW = os[3];
  const int64_t Og = Cout / s.groups, K = Cg * KH * KW, P = OH * OW;
  const bool direct = KH == 1 && KW == 1 && s.stride == std::array<int64_t, 2>{1, 1} &&
                      s.pad_lo == std::array<int64_t, 2>{0, 0} && s.pad_hi == std::array<int64_t, 2>{0, 0};
  std::vector<T> cols(direct ? 0 : static_cast<size_t>(K * P));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < s.groups; ++g) {
      const T* xg = x + (n * C + g * Cg) * H * W;
      const T* src = xg;
      if (!direct) {
        for (int64_t c = 0; c < Cg; ++c)
          for (int64_t ki = 0; ki < KH; ++ki)
            for (int64_t kj = 0; kj < KW; ++kj) {
              T* row = cols.data() + ((c * KH + ki) * KW + kj) * P;
              for (int64_t oh = 0; oh < OH; ++oh) {
                const int64_t ih = oh * s.stride[0] - s.pad_lo[0] + ki * s.dilation[0];
                for (int64_t ow = 0; ow < OW; ++ow) {
                  const int64_t iw = ow * s.stride[1] - s.pad_lo[1] + kj * s.dilation[1];
                  row[oh * OW + ow] = ih >= 0 && ih < H && iw >= 0 && iw < W ? xg[(c * H + ih) * W + iw] : T(0);
                }
              }
            }
        src = cols.data();
      }
      KILN_TRY(gemm(false, false, Og, P, K, T(1), w + g * Og * K, K, src, P, T(0), out + (n * Cout + g * Og) * P, P));
    }
  return Status::ok();
}

// x [N, C, H, W], w [C, Cout/g, KH, KW] -> out [N, Cout, OH, OW] (zero-filled on entry), all contiguous.
template <typename T>
Status conv_transposed(const T* x, const T* w, T* out, const ConvSpec& s, const Shape& xs, const Shape& ws,
                       const Shape& os) {
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  const int64_t Og = ws[1], KH = ws[2], KW = ws[3], Cout = os[1], OH = os[2], OW = os[3];
  const int64_t Cg = C / s.groups, Kc = Og * KH * KW, P = H * W;
  std::vector<T> cols(static_cast<size_t>(Kc * P));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < s.groups; ++g) {
      // cols [Kc, P] = W_g^T [Kc, Cg] x X_g [Cg, P]
      KILN_TRY(
          gemm(true, false, Kc, P, Cg, T(1), w + g * Cg * Kc, Kc, x + (n * C + g * Cg) * P, P, T(0), cols.data(), P));
      T* og = out + (n * Cout + g * Og) * OH * OW;
      for (int64_t c = 0; c < Og; ++c)
        for (int64_t ki = 0; ki < KH; ++ki)
          for (int64_t kj = 0; kj < KW; ++kj) {
            const T* row = cols.data() + ((c * KH + ki) * KW + kj) * P;
            for (int64_t ih = 0; ih < H; ++ih) {
              const int64_t oh = ih * s.stride[0] - s.pad_lo[0] + ki * s.dilation[0];
              if (oh < 0 || oh >= OH) continue;
              for (int64_t iw = 0; iw < W; ++iw) {
                const int64_t ow = iw * s.stride[1] - s.pad_lo[1] + kj * s.dilation[1];
                if (ow >= 0 && ow < OW) og[(c * OH + oh) * OW + ow] += row[ih * W + iw];
              }
            }
          }
    }
  return Status::ok();
}

// Checks shapes, computes the output shape and runs the convolution.
// `unbatched_ok`: the functional forms accept an input without the batch dim.
Status run_conv(KernelArgs& a, const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias, ConvSpec s,
                bool unbatched_ok) {
  const int64_t nd = s.spatial;
  if (!is_floating(input.dtype()))
    return a.error("convolution needs a floating-point input, got " + input.type_string());
  if (weight.dtype() != input.dtype() || (bias && bias->dtype() != input.dtype()))
    return a.error("input " + input.type_string() + ", weight " + weight.type_string() +
                   (bias ? ", bias " + bias->type_string() : std::string()) + " must have one dtype");
  if (weight.dim() != nd + 2)
    return a.error("weight must have rank " + std::to_string(nd + 2) + ", got " + weight.type_string());
  const bool unbatched = unbatched_ok && input.dim() == nd + 1;
  if (input.dim() != nd + 2 && !unbatched)
    return a.error("input must have rank " + std::to_string(nd + 2) +
                   (unbatched_ok ? " (or " + std::to_string(nd + 1) + " unbatched)" : std::string()) + ", got " +
                   input.type_string());
  KILN_TRY(read_spec(a, weight, s));
  // Everything in 2-d form: [N, C, H, W] and [O, I, KH, KW].
  Shape xs = input.sizes(), ws = weight.sizes();
  if (unbatched) xs.insert(xs.begin(), 1);
  if (nd == 1) {
    xs.insert(xs.begin() + 2, 1);
    ws.insert(ws.begin() + 2, 1);
  }
  const int64_t N = xs[0], C = xs[1];
  int64_t Cout;
  if (!s.transposed) {
    if (C != ws[1] * s.groups || ws[0] % s.groups != 0)
      return a.error("input " + input.type_string() + " does not fit weight " + weight.type_string() + " with groups=" +
                     std::to_string(s.groups) + ": expected " + std::to_string(ws[1] * s.groups) + " input channels");
    Cout = ws[0];
  } else {
    if (C != ws[0] || ws[0] % s.groups != 0)
      return a.error("input " + input.type_string() + " does not fit transposed weight " + weight.type_string() +
                     " with groups=" + std::to_string(s.groups) + ": expected " + std::to_string(ws[0]) +
                     " input channels");
    Cout = ws[1] * s.groups;
  }
  if (bias && (bias->dim() != 1 || bias->size(0) != Cout))
    return a.error("bias must be [" + std::to_string(Cout) + "], got " + bias->type_string());
  Shape os = {N, Cout, 0, 0};
  for (int d = 0; d < 2; ++d) {
    const int64_t in = xs[2 + d], k = ws[2 + d], eff = s.dilation[d] * (k - 1) + 1;
    if (!s.transposed) {
      if (in + s.pad_lo[d] + s.pad_hi[d] < eff)
        return a.error("kernel " + weight.type_string() + " (dilated size " + std::to_string(eff) +
                       ") is larger than the padded input " + input.type_string());
      os[2 + d] = (in + s.pad_lo[d] + s.pad_hi[d] - eff) / s.stride[d] + 1;
    } else {
      os[2 + d] = (in - 1) * s.stride[d] - 2 * s.pad_lo[d] + eff + s.out_pad[d];
      if (os[2 + d] <= 0) return a.error("transposed convolution of " + input.type_string() + " gives an empty output");
    }
  }
  if (!checked_numel(os).has_value())
    return a.error("output shape " + shape_to_string(os) + " of " + input.type_string() + " overflows int64");
  const DType ct = input.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor x = input.to(ct).contiguous(), w = weight.to(ct).contiguous();
  Tensor out = Tensor::zeros(ct, os);
  Status st;
  visit_dtype(ct, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      st = s.transposed ? conv_transposed(x.data<T>(), w.data<T>(), out.data<T>(), s, xs, ws, os)
                        : conv_forward(x.data<T>(), w.data<T>(), out.data<T>(), s, xs, ws, os);
      if (st.is_ok() && bias) add_bias(out.data<T>(), bias->to(ct).contiguous().data<T>(), N, Cout, os[2] * os[3]);
    }
  });
  if (!st.is_ok()) return std::move(st).with_context(a.node().describe());
  Shape final_shape = os;
  if (nd == 1) final_shape.erase(final_shape.begin() + 2);
  if (unbatched) final_shape.erase(final_shape.begin());
  a.set_output(0, out.reshape(final_shape).to(input.dtype()));
  return Status::ok();
}

Status conv_functional(KernelArgs& a, int64_t spatial, bool transposed) {
  KILN_ASSIGN_OR_RETURN(Tensor input, a.tensor("input"));
  KILN_ASSIGN_OR_RETURN(Tensor weight, a.tensor("weight"));
  KILN_ASSIGN_OR_RETURN(auto bias, a.optional_tensor("bias"));
  ConvSpec s;
  s.spatial = spatial;
  s.transposed = transposed;
  return run_conv(a, input, weight, bias, s, /*unbatched_ok=*/true);
}

Status conv1d(KernelArgs& a) { return conv_functional(a, 1, false); }
Status conv2d(KernelArgs& a) { return conv_functional(a, 2, false); }
Status conv_transpose1d(KernelArgs& a) { return conv_functional(a, 1, true); }
Status conv_transpose2d(KernelArgs& a) { return conv_functional(a, 2, true); }

// aten.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups).
Status convolution(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor input, a.tensor("input"));
  KILN_ASSIGN_OR_RETURN(Tensor weight, a.tensor("weight"));
  KILN_ASSIGN_OR_RETURN(auto bias, a.optional_tensor("bias"));
  KILN_ASSIGN_OR_RETURN(bool transposed, a.bool_arg("transposed", false));
  if (weight.dim() == 5) return convolution3d(a, input, weight, bias, transposed);
  if (weight.dim() != 3 && weight.dim() != 4)
    return unsupported(a.node().describe() + ": only 1-d, 2-d and 3-d convolutions are supported, got weight " +
                       weight.type_string());
  ConvSpec s;
  s.spatial = weight.dim() - 2;
  s.transposed = transposed;
  return run_conv(a, input, weight, bias, s, /*unbatched_ok=*/false);
}

}  // namespace

void register_conv_kernels(KernelRegistry& r) {
  r.add(ir::OpKind::kConv1d, &conv1d);
  r.add(ir::OpKind::kConv2d, &conv2d);
  r.add(ir::OpKind::kConv1dPadding, &conv1d);
  r.add(ir::OpKind::kConv2dPadding, &conv2d);
  r.add(ir::OpKind::kConvTranspose1d, &conv_transpose1d);
  r.add(ir::OpKind::kConvTranspose2d, &conv_transpose2d);
  r.add(ir::OpKind::kConvolution, &convolution);
}

}  // namespace kiln::cpu
