// 3-d windows: conv3d (int or string padding), conv_transpose3d, convolution
// with three spatial dims, avg_pool3d, max_pool3d (with indices),
// adaptive_avg_pool3d and adaptive_max_pool3d; and grid_sampler in 2-d and 3-d.
//
// Direct loops in float64, each result rounded once to the input's dtype:
// a reference, not a fast path (3-d convolutions on CUDA are not engine
// layers). Window placement, output sizes, ceil_mode and divisors follow
// PyTorch's CPU kernels; an input without a batch dim gets one and loses it again.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"
#include "backends/cuda/kernels/grid_sample.cuh"

namespace kiln::cpu {

namespace {

using Dims3 = std::array<int64_t, 3>;

// [N, C, D, H, W] as float64 (a 4-d input gets a batch of one).
struct Volume {
  Tensor d;
  bool unbatched = false;
  int64_t N = 0, C = 0;
  Dims3 size{};
  const double* at(int64_t n, int64_t c) const { return d.data<double>() + (n * C + c) * size[0] * size[1] * size[2]; }
};

Expected<Volume> read_volume(const KernelArgs& a, const Tensor& t, const char* what) {
  if (t.dim() != 4 && t.dim() != 5)
    return a.error(std::string(what) + " must be 4-d or 5-d ([N,] C, D, H, W), got " + t.type_string());
  if (!is_floating(t.dtype())) return a.error(std::string(what) + " must be floating-point, got " + t.type_string());
  Volume v;
  v.unbatched = t.dim() == 4;
  Shape batched{1};
  batched.insert(batched.end(), t.sizes().begin(), t.sizes().end());
  const Tensor b = v.unbatched ? t.reshape(batched) : t;
  v.d = cast_copy(b, DType::Float64);
  v.N = b.size(0);
  v.C = b.size(1);
  v.size = {b.size(2), b.size(3), b.size(4)};
  return v;
}

// The result [N, C, D, H, W] back in `dtype`, without the batch dim when the input had none.
Tensor finish(Tensor out, const Volume& v, DType dtype) {
  Tensor r = out.to(dtype);
  if (v.unbatched) r = r.reshape(Shape(r.sizes().begin() + 1, r.sizes().end()));
  return r;
}

Expected<Dims3> triple(const KernelArgs& a, const char* name, std::optional<int64_t> fallback,
                       std::optional<Dims3> empty_means = std::nullopt) {
  std::optional<std::vector<int64_t>> fb;
  if (fallback) fb = std::vector<int64_t>{*fallback};
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> v, a.ints(name, fb));
  if (v.empty() && empty_means) return *empty_means;
  if (v.size() == 1) v.assign(3, v[0]);
  if (v.size() != 3) return a.error("'" + std::string(name) + "' needs 1 or 3 values, got " + shape_to_string(v));
  return Dims3{v[0], v[1], v[2]};
}

// ---- convolution

struct Conv3 {
  Dims3 stride{1, 1, 1}, pad_lo{}, pad_hi{}, dilation{1, 1, 1}, out_pad{};
  int64_t groups = 1;
  bool transposed = false;
};

Status read_conv(const KernelArgs& a, const Tensor& weight, Conv3& s) {
  KILN_ASSIGN_OR_RETURN(s.stride, triple(a, "stride", 1));
  KILN_ASSIGN_OR_RETURN(s.dilation, triple(a, "dilation", 1));
  KILN_ASSIGN_OR_RETURN(s.groups, a.int_arg("groups", 1));
  const ir::Arg* pad_arg = a.node().find("padding");
  if (pad_arg && std::holds_alternative<std::string>(*pad_arg)) {
    const std::string mode = std::get<std::string>(*pad_arg);
    if (mode == "same") {
      for (int64_t st : s.stride)
        if (st != 1) return a.error("padding='same' needs stride 1");
      // The odd element of the total padding goes on the high side.
      for (int i = 0; i < 3; ++i) {
        const int64_t total = s.dilation[i] * (weight.size(2 + i) - 1);
        s.pad_lo[i] = total / 2;
        s.pad_hi[i] = total - total / 2;
      }
    } else if (mode != "valid") {
      return a.error("padding must be 'same', 'valid' or a list of ints, got '" + mode + "'");
    }
  } else {
    KILN_ASSIGN_OR_RETURN(s.pad_lo, triple(a, "padding", 0));
    s.pad_hi = s.pad_lo;
  }
  if (s.transposed) {
    KILN_ASSIGN_OR_RETURN(s.out_pad, triple(a, "output_padding", 0));
  }
  for (int i = 0; i < 3; ++i)
    if (s.stride[i] <= 0 || s.dilation[i] <= 0 || s.pad_lo[i] < 0 || s.out_pad[i] < 0 || s.stride[i] > (1 << 24) ||
        s.dilation[i] > (1 << 24) || s.pad_hi[i] > (1 << 24))
      return a.error("stride and dilation must be positive and padding non-negative (and plausible)");
  if (s.groups <= 0) return a.error("groups must be positive, got " + std::to_string(s.groups));
  return Status::ok();
}

Status run_conv3d(KernelArgs& a, const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                  Conv3& s) {
  if (weight.dim() != 5) return a.error("a 3-d convolution needs a 5-d weight, got " + weight.type_string());
  KILN_TRY(read_conv(a, weight, s));
  KILN_ASSIGN_OR_RETURN(Volume v, read_volume(a, input, "input"));
  const int64_t G = s.groups;
  const Dims3 k{weight.size(2), weight.size(3), weight.size(4)};
  // plain: weight [Cout, C/g, k...]; transposed: weight [C, Cout/g, k...]
  const int64_t Cin = v.C;
  if (s.transposed ? weight.size(0) != Cin : weight.size(1) * G != Cin)
    return a.error("weight " + weight.type_string() + " does not match the input's " + std::to_string(Cin) +
                   " channels (groups " + std::to_string(G) + ")");
  if (Cin % G != 0) return a.error("groups must divide the input channels");
  const int64_t Cout = s.transposed ? weight.size(1) * G : weight.size(0);
  if (!s.transposed && Cout % G != 0) return a.error("groups must divide the output channels");
  if (bias && bias->numel() != Cout)
    return a.error("bias " + bias->type_string() + " should have " + std::to_string(Cout) + " elements");
  Dims3 o{};
  for (int i = 0; i < 3; ++i) {
    o[i] = s.transposed ? (v.size[i] - 1) * s.stride[i] - s.pad_lo[i] - s.pad_hi[i] + s.dilation[i] * (k[i] - 1) +
                              s.out_pad[i] + 1
                        : (v.size[i] + s.pad_lo[i] + s.pad_hi[i] - s.dilation[i] * (k[i] - 1) - 1) / s.stride[i] + 1;
    if (o[i] <= 0 && v.size[i] > 0) return a.error("the input is too small for the kernel: " + input.type_string());
    o[i] = std::max<int64_t>(o[i], 0);
  }
  const Tensor w = cast_copy(weight, DType::Float64);
  const double* wp = w.data<double>();
  const Tensor bd = bias ? cast_copy(*bias, DType::Float64) : Tensor();
  Tensor out = Tensor::zeros(DType::Float64, {v.N, Cout, o[0], o[1], o[2]});
  double* op = out.data<double>();
  const int64_t Cg = Cin / G, Og = Cout / G, kvol = k[0] * k[1] * k[2], ovol = o[0] * o[1] * o[2];
  for (int64_t n = 0; n < v.N; ++n)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t ci = 0; ci < Cg; ++ci) {
        const int64_t c = g * Cg + ci;
        const double* x = v.at(n, c);
        for (int64_t oi = 0; oi < Og; ++oi) {
          const int64_t oc = g * Og + oi;
          const double* wk = s.transposed ? wp + (c * Og + oi) * kvol : wp + (oc * Cg + ci) * kvol;
          double* y = op + (n * Cout + oc) * ovol;
          for (int64_t kz = 0; kz < k[0]; ++kz)
            for (int64_t ky = 0; ky < k[1]; ++ky)
              for (int64_t kx = 0; kx < k[2]; ++kx) {
                const double wv = wk[(kz * k[1] + ky) * k[2] + kx];
                if (s.transposed) {
                  // input position i lands on output i * stride - pad + k * dilation
                  for (int64_t iz = 0; iz < v.size[0]; ++iz) {
                    const int64_t z = iz * s.stride[0] - s.pad_lo[0] + kz * s.dilation[0];
                    if (z < 0 || z >= o[0]) continue;
                    for (int64_t iy = 0; iy < v.size[1]; ++iy) {
                      const int64_t yy = iy * s.stride[1] - s.pad_lo[1] + ky * s.dilation[1];
                      if (yy < 0 || yy >= o[1]) continue;
                      for (int64_t ix = 0; ix < v.size[2]; ++ix) {
                        const int64_t xx = ix * s.stride[2] - s.pad_lo[2] + kx * s.dilation[2];
                        if (xx < 0 || xx >= o[2]) continue;
                        y[(z * o[1] + yy) * o[2] + xx] += wv * x[(iz * v.size[1] + iy) * v.size[2] + ix];
                      }
                    }
                  }
                } else {
                  for (int64_t z = 0; z < o[0]; ++z) {
                    const int64_t iz = z * s.stride[0] - s.pad_lo[0] + kz * s.dilation[0];
                    if (iz < 0 || iz >= v.size[0]) continue;
                    for (int64_t yy = 0; yy < o[1]; ++yy) {
                      const int64_t iy = yy * s.stride[1] - s.pad_lo[1] + ky * s.dilation[1];
                      if (iy < 0 || iy >= v.size[1]) continue;
                      for (int64_t xx = 0; xx < o[2]; ++xx) {
                        const int64_t ix = xx * s.stride[2] - s.pad_lo[2] + kx * s.dilation[2];
                        if (ix < 0 || ix >= v.size[2]) continue;
                        y[(z * o[1] + yy) * o[2] + xx] += wv * x[(iz * v.size[1] + iy) * v.size[2] + ix];
                      }
                    }
                  }
                }
              }
        }
      }
  if (bias)
    for (int64_t n = 0; n < v.N; ++n)
      for (int64_t c = 0; c < Cout; ++c)
        for (int64_t i = 0; i < ovol; ++i) op[(n * Cout + c) * ovol + i] += bd.data<double>()[c];
  a.set_output(0, finish(out, v, input.dtype()));
  return Status::ok();
}

// conv3d(input, weight, bias, stride, padding (ints or 'same'/'valid'), dilation, groups)
Status conv3d(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor input, a.tensor("input"));
  KILN_ASSIGN_OR_RETURN(Tensor weight, a.tensor("weight"));
  KILN_ASSIGN_OR_RETURN(auto bias, a.optional_tensor("bias"));
  Conv3 s;
  return run_conv3d(a, input, weight, bias, s);
}

// conv_transpose3d(input, weight, bias, stride, padding, output_padding, groups, dilation)
Status conv_transpose3d(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor input, a.tensor("input"));
  KILN_ASSIGN_OR_RETURN(Tensor weight, a.tensor("weight"));
  KILN_ASSIGN_OR_RETURN(auto bias, a.optional_tensor("bias"));
  Conv3 s;
  s.transposed = true;
  return run_conv3d(a, input, weight, bias, s);
}

// ---- pooling

int64_t pooled(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return std::max<int64_t>(out, 0);
}

struct Pool3 {
  Dims3 k{}, stride{}, pad{}, dilation{1, 1, 1}, out{};
  bool ceil_mode = false;
};

Expected<Pool3> read_pool(const KernelArgs& a, const Volume& v, bool dilation) {
  Pool3 p;
  KILN_ASSIGN_OR_RETURN(p.k, triple(a, "kernel_size", std::nullopt));
  // stride omitted or empty: the kernel size.
  p.stride = p.k;
  if (a.has("stride")) {
    KILN_ASSIGN_OR_RETURN(p.stride, triple(a, "stride", std::nullopt, p.k));
  }
  KILN_ASSIGN_OR_RETURN(p.pad, triple(a, "padding", 0));
  if (dilation) {
    KILN_ASSIGN_OR_RETURN(p.dilation, triple(a, "dilation", 1));
  }
  KILN_ASSIGN_OR_RETURN(p.ceil_mode, a.bool_arg("ceil_mode"));
  for (int i = 0; i < 3; ++i) {
    if (p.k[i] <= 0 || p.stride[i] <= 0 || p.dilation[i] <= 0 || p.pad[i] < 0)
      return a.error("kernel_size, stride and dilation must be positive and padding non-negative");
    if (p.pad[i] * 2 > p.k[i]) return a.error("padding should be at most half of the kernel size");
    p.out[i] = pooled(v.size[i], p.k[i], p.pad[i], p.stride[i], p.dilation[i], p.ceil_mode);
  }
  return p;
}

// Calls f(x, position, q) for every output position of every (n, c) volume
// of `v`, x being that volume's elements and q counting the outputs in order.
template <typename F>
void for_each_output(const Volume& v, const Dims3& o, F&& f) {
  int64_t q = 0;
  for (int64_t n = 0; n < v.N; ++n)
    for (int64_t c = 0; c < v.C; ++c) {
      const double* x = v.at(n, c);
      for (int64_t z = 0; z < o[0]; ++z)
        for (int64_t y = 0; y < o[1]; ++y)
          for (int64_t w = 0; w < o[2]; ++w) f(x, Dims3{z, y, w}, q++);
    }
}

// max_pool3d(self, kernel_size, stride, padding, dilation, ceil_mode) [-> (out, indices)]
Status max_pool3d(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Volume v, read_volume(a, self, "self"));
  KILN_ASSIGN_OR_RETURN(Pool3 p, read_pool(a, v, true));
  const Dims3& o = p.out;
  Tensor out = Tensor::zeros(DType::Float64, {v.N, v.C, o[0], o[1], o[2]});
  Tensor idx = Tensor::zeros(DType::Int64, {v.N, v.C, o[0], o[1], o[2]});
  for_each_output(v, o, [&](const double* x, const Dims3& at_out, int64_t q) {
    const int64_t z = at_out[0], y = at_out[1], w = at_out[2];
    // As ATen: from -inf at the window's first in-bounds position, every NaN taking over (the last wins).
    Dims3 first{};
    for (int i = 0; i < 3; ++i) {
      first[i] = at_out[i] * p.stride[i] - p.pad[i];
      while (first[i] < 0) first[i] += p.dilation[i];
    }
    double best = -std::numeric_limits<double>::infinity();
    int64_t arg = (first[0] * v.size[1] + first[1]) * v.size[2] + first[2];
    for (int64_t kz = 0; kz < p.k[0]; ++kz) {
      const int64_t iz = z * p.stride[0] - p.pad[0] + kz * p.dilation[0];
      if (iz < 0 || iz >= v.size[0]) continue;
      for (int64_t ky = 0; ky < p.k[1]; ++ky) {
        const int64_t iy = y * p.stride[1] - p.pad[1] + ky * p.dilation[1];
        if (iy < 0 || iy >= v.size[1]) continue;
        for (int64_t kx = 0; kx < p.k[2]; ++kx) {
          const int64_t ix = w * p.stride[2] - p.pad[2] + kx * p.dilation[2];
          if (ix < 0 || ix >= v.size[2]) continue;
          const int64_t at = (iz * v.size[1] + iy) * v.size[2] + ix;
          if (x[at] > best || std::isnan(x[at])) {
            best = x[at];
            arg = at;
          }
        }
      }
    }
    out.data<double>()[q] = best;
    idx.data<int64_t>()[q] = arg;
  });
  a.set_output(0, finish(out, v, self.dtype()));
  if (a.node().op == ir::OpKind::kMaxPool3dWithIndices) {
    if (v.unbatched) idx = idx.reshape(Shape(idx.sizes().begin() + 1, idx.sizes().end()));
    a.set_output(1, idx);
  }
  return Status::ok();
}

// avg_pool3d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
Status avg_pool3d(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Volume v, read_volume(a, self, "self"));
  KILN_ASSIGN_OR_RETURN(Pool3 p, read_pool(a, v, false));
  KILN_ASSIGN_OR_RETURN(bool include_pad, a.bool_arg("count_include_pad"));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> divisor, a.optional_int("divisor_override"));
  if (divisor && *divisor == 0) return a.error("divisor_override must not be zero");
  const Dims3& o = p.out;
  Tensor out = Tensor::zeros(DType::Float64, {v.N, v.C, o[0], o[1], o[2]});
  for_each_output(v, o, [&](const double* x, const Dims3& at, int64_t q) {
    Dims3 lo{}, hi{};
    int64_t pool = 1;
    for (int i = 0; i < 3; ++i) {
      lo[i] = at[i] * p.stride[i] - p.pad[i];
      hi[i] = std::min(lo[i] + p.k[i], v.size[i] + p.pad[i]);
      pool *= hi[i] - lo[i];  // counts padding, not the ceil_mode overhang
      lo[i] = std::max<int64_t>(lo[i], 0);
      hi[i] = std::min(hi[i], v.size[i]);
    }
    double sum = 0;
    for (int64_t iz = lo[0]; iz < hi[0]; ++iz)
      for (int64_t iy = lo[1]; iy < hi[1]; ++iy)
        for (int64_t ix = lo[2]; ix < hi[2]; ++ix) sum += x[(iz * v.size[1] + iy) * v.size[2] + ix];
    const int64_t div = divisor ? *divisor : include_pad ? pool : (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
    out.data<double>()[q] = sum / static_cast<double>(div);
  });
  a.set_output(0, finish(out, v, self.dtype()));
  return Status::ok();
}

// adaptive_avg_pool3d / _adaptive_avg_pool3d(self, output_size); adaptive_max_pool3d -> (out, indices)
Status adaptive_pool3d(KernelArgs& a) {
  const bool max = a.node().op == ir::OpKind::kAdaptiveMaxPool3d;
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Volume v, read_volume(a, self, "self"));
  KILN_ASSIGN_OR_RETURN(Dims3 o, triple(a, "output_size", std::nullopt));
  for (int i = 0; i < 3; ++i)
    if (o[i] < 0) return a.error("output_size must be non-negative");
  for (int i = 0; i < 3; ++i)
    if (v.size[i] == 0 && v.N * v.C > 0) return a.error("adaptive pooling of an empty spatial dim");
  Tensor out = Tensor::zeros(DType::Float64, {v.N, v.C, o[0], o[1], o[2]});
  Tensor idx = Tensor::zeros(DType::Int64, {v.N, v.C, o[0], o[1], o[2]});
  auto start = [](int64_t i, int64_t in, int64_t out) { return (i * in) / out; };
  auto end = [](int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; };
  for_each_output(v, o, [&](const double* x, const Dims3& at, int64_t q) {
    Dims3 lo{}, hi{};
    for (int i = 0; i < 3; ++i) {
      lo[i] = start(at[i], v.size[i], o[i]);
      hi[i] = end(at[i], v.size[i], o[i]);
    }
    double acc = max ? -std::numeric_limits<double>::infinity() : 0.0;
    int64_t arg = (lo[0] * v.size[1] + lo[1]) * v.size[2] + lo[2];
    for (int64_t iz = lo[0]; iz < hi[0]; ++iz)
      for (int64_t iy = lo[1]; iy < hi[1]; ++iy)
        for (int64_t ix = lo[2]; ix < hi[2]; ++ix) {
          const int64_t k = (iz * v.size[1] + iy) * v.size[2] + ix;
          if (!max) {
            acc += x[k];
          } else if (x[k] > acc || std::isnan(x[k])) {
            acc = x[k];
            arg = k;
          }
        }
    if (!max) acc /= static_cast<double>((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]));
    out.data<double>()[q] = acc;
    idx.data<int64_t>()[q] = arg;
  });
  a.set_output(0, finish(out, v, self.dtype()));
  if (max) {
    if (v.unbatched) idx = idx.reshape(Shape(idx.sizes().begin() + 1, idx.sizes().end()));
    a.set_output(1, idx);
  }
  return Status::ok();
}

// ---- grid sampling

// grid_sampler / grid_sampler_2d / grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners)
// interpolation 0 bilinear (trilinear in 3-d), 1 nearest, 2 bicubic (2-d); padding 0 zeros, 1 border, 2 reflection.
Status grid_sampler(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor input, a.tensor("input"));
  KILN_ASSIGN_OR_RETURN(Tensor grid, a.tensor("grid"));
  KILN_ASSIGN_OR_RETURN(int64_t mode, a.int_arg("interpolation_mode"));
  KILN_ASSIGN_OR_RETURN(int64_t padding, a.int_arg("padding_mode"));
  KILN_ASSIGN_OR_RETURN(bool align, a.bool_arg("align_corners"));
  const bool three = input.dim() == 5;
  if (input.dim() != 4 && !three) return a.error("grid_sampler takes a 4-d or 5-d input, got " + input.type_string());
  if (grid.dim() != input.dim() || grid.size(0) != input.size(0) || grid.size(-1) != input.dim() - 2)
    return a.error("grid " + grid.type_string() + " does not match input " + input.type_string());
  if (!is_floating(input.dtype()) || !is_floating(grid.dtype())) return a.error("grid_sampler takes floating tensors");
  if (mode < 0 || mode > 2 || (three && mode == 2))
    return a.error("interpolation_mode " + std::to_string(mode) + " is not supported here");
  if (padding < 0 || padding > 2) return a.error("padding_mode must be 0, 1 or 2, got " + std::to_string(padding));
  // Everything as 3-d: a 2-d input is depth 1, sampled at depth 0.
  const int64_t N = input.size(0), C = input.size(1);
  const Dims3 in{three ? input.size(2) : 1, input.size(-2), input.size(-1)};
  const Dims3 out{three ? grid.size(1) : 1, grid.size(-3), grid.size(-2)};
  const Tensor x = cast_copy(input, DType::Float64), g = cast_copy(grid, DType::Float64);
  Shape shape{N, C};
  if (three) shape.push_back(out[0]);
  shape.push_back(out[1]);
  shape.push_back(out[2]);
  Tensor o = Tensor::zeros(DType::Float64, shape);
  const int64_t ivol = in[0] * in[1] * in[2], ovol = out[0] * out[1] * out[2], gd = three ? 3 : 2;
  auto value = [&](const double* plane, int64_t z, int64_t y, int64_t xx) {
    if (z < 0 || z >= in[0] || y < 0 || y >= in[1] || xx < 0 || xx >= in[2]) return 0.0;
    return plane[(z * in[1] + y) * in[2] + xx];
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < ovol; ++p) {
      const double* gp = g.data<double>() + (n * ovol + p) * gd;
      const double gx = gp[0], gy = gp[1], gz = three ? gp[2] : 0.0;
      for (int64_t c = 0; c < C; ++c) {
        const double* plane = x.data<double>() + (n * C + c) * ivol;
        auto at = [&](long long z, long long y, long long xx) { return value(plane, z, y, xx); };
        const double r = grid_sample::sample(at, gx, gy, gz, in[0], in[1], in[2], static_cast<int>(mode),
                                             static_cast<int>(padding), align, three);
        o.data<double>()[(n * C + c) * ovol + p] = r;
      }
    }
  a.set_output(0, o.to(input.dtype()));
  return Status::ok();
}

}  // namespace

// convolution.default with a 5-d weight (conv.cc hands it over).
Status convolution3d(KernelArgs& a, const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                     bool transposed) {
  Conv3 s;
  s.transposed = transposed;
  return run_conv3d(a, input, weight, bias, s);
}

void register_volume_kernels(KernelRegistry& r) {
  using K = ir::OpKind;
  for (K k : {K::kConv3d, K::kConv3dPadding}) r.add(k, &conv3d);
  r.add(K::kConvTranspose3d, &conv_transpose3d);
  for (K k : {K::kMaxPool3d, K::kMaxPool3dWithIndices}) r.add(k, &max_pool3d);
  r.add(K::kAvgPool3d, &avg_pool3d);
  for (K k : {K::kAdaptiveAvgPool3d, K::kAdaptiveAvgPool3dInternal, K::kAdaptiveMaxPool3d}) r.add(k, &adaptive_pool3d);
  for (K k : {K::kGridSampler, K::kGridSampler2d, K::kGridSampler3d}) r.add(k, &grid_sampler);
}

}  // namespace kiln::cpu
