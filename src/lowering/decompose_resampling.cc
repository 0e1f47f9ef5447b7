// Resampling to static sizes: upsample_nearest{1,2,3}d and nearest-exact as
// index_select with index tables computed here as ATen computes them (in
// float); linear, bilinear, trilinear and bicubic as weighted sums of
// index_selects, one dim at a time from the last (ATen's order).
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

// The source scale ATen uses for one dim: 1 / factor when a scale factor is
// given (factor > 0), else in / out; (in - 1) / (out - 1) with align_corners.
// In float, as ATen's kernels compute it for float tensors.
float resample_scale(int64_t in, int64_t out, double factor, bool align_corners) {
  if (align_corners) return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  return factor > 0 ? static_cast<float>(1.0 / factor) : static_cast<float>(in) / static_cast<float>(out);
}

// `x` resampled along `dim` (to `out` entries): sum over taps k of
// index_select(x, dim, idx[k]) * w[k], w shaped to broadcast along `dim`.
ir::Value* taps(Nodes& b, ir::Value* x, int64_t dim, const std::vector<std::vector<int64_t>>& idx,
                const std::vector<std::vector<float>>& w) {
  ir::TensorType t = x->type;
  const int64_t out = static_cast<int64_t>(idx[0].size());
  t.sizes[static_cast<size_t>(dim)] = ir::Dim::of(out);
  std::vector<int64_t> wshape(t.sizes.size() - static_cast<size_t>(dim), 1);
  wshape[0] = out;
  ir::Value* acc = nullptr;
  for (size_t k = 0; k < idx.size(); ++k) {
    ir::Value* g =
        b.add(OpKind::kIndexSelect, {{"self", x}, {"dim", dim}, {"index", b.constant(index_table(idx[k]))}}, t);
    if (w.empty()) return g;
    Tensor wt = Tensor::zeros(DType::Float32, wshape);
    std::copy(w[k].begin(), w[k].end(), wt.data<float>());
    ir::Value* term = b.binary(OpKind::kMulTensor, g, b.constant(wt.to(t.dtype)), t.dtype);
    acc = acc ? b.binary(OpKind::kAddTensor, acc, term, t.dtype) : term;
  }
  return acc;
}

// upsample_* and _upsample_nearest_exact*: each spatial dim (the last 1, 2 or
// 3) resampled from the last, to the output's static sizes.
Expected<bool> upsample(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, n.op == OpKind::kUpsampleBilinear2dAaDefault ? "self" : "input");
  if (!x || n.outputs.size() != 1 || !is_floating(x->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype)
    return false;
  int spatial = 0;
  enum class Mode { kNearest, kNearestExact, kLinear, kCubic, kLinearAntialiased } mode = Mode::kNearest;
  switch (n.op) {
    case OpKind::kUpsampleNearest1d: spatial = 1; break;
    case OpKind::kUpsampleNearest2d: spatial = 2; break;
    case OpKind::kUpsampleNearest3d: spatial = 3; break;
    case OpKind::kUpsampleNearestExact1d: spatial = 1, mode = Mode::kNearestExact; break;
    case OpKind::kUpsampleNearestExact2d: spatial = 2, mode = Mode::kNearestExact; break;
    case OpKind::kUpsampleNearestExact3d: spatial = 3, mode = Mode::kNearestExact; break;
    case OpKind::kUpsampleLinear1d: spatial = 1, mode = Mode::kLinear; break;
    case OpKind::kUpsampleBilinear2d: spatial = 2, mode = Mode::kLinear; break;
    case OpKind::kUpsampleTrilinear3d: spatial = 3, mode = Mode::kLinear; break;
    case OpKind::kUpsampleBicubic2d: spatial = 2, mode = Mode::kCubic; break;
    case OpKind::kUpsampleBilinear2dAa:
    case OpKind::kUpsampleBilinear2dAaDefault: spatial = 2, mode = Mode::kLinearAntialiased; break;
    default: return false;
  }
  const auto in = static_sizes(x->type);
  const auto out = static_sizes(n.outputs[0]->type);
  if (!in || !out || in->size() != out->size() || in->size() != static_cast<size_t>(spatial) + 2) return false;
  bool align_corners = false;
  if (mode == Mode::kLinear || mode == Mode::kCubic || mode == Mode::kLinearAntialiased) {
    const auto a = bool_value(n, "align_corners");
    if (!a) return false;
    align_corners = *a;
  }
  std::optional<std::vector<double>> factors;
  if (n.op == OpKind::kUpsampleBilinear2dAaDefault) {
    // scales_h / scales_w: each optional (0: from the sizes).
    std::vector<double> f;
    for (const char* name : {"scales_h", "scales_w"}) {
      if (absent(n, name)) {
        f.push_back(0.0);
        continue;
      }
      const double* v = std::get_if<double>(n.find(name));
      if (!v) return false;
      f.push_back(*v);
    }
    if (f[0] > 0 || f[1] > 0) factors = f;
  } else if (!absent(n, "scale_factors")) {
    const auto* f = std::get_if<std::vector<double>>(n.find("scale_factors"));
    if (!f || f->size() != static_cast<size_t>(spatial)) return false;
    factors = *f;
  }
  Nodes b(ctx, n);
  ir::Value* y = x;
  for (int s = spatial - 1; s >= 0; --s) {
    const size_t dim = 2 + static_cast<size_t>(s);
    const int64_t isz = (*in)[dim], osz = (*out)[dim];
    if (isz == osz && mode != Mode::kCubic && mode != Mode::kLinearAntialiased &&
        !(mode == Mode::kLinear && !align_corners && factors))
      continue;
    if (isz <= 0 || osz <= 0) return false;
    const double factor = factors ? (*factors)[static_cast<size_t>(s)] : 0.0;
    std::vector<std::vector<int64_t>> idx;
    std::vector<std::vector<float>> w;
    if (mode == Mode::kNearest || mode == Mode::kNearestExact) {
      const float scale = resample_scale(isz, osz, factor, false);
      idx.assign(1, std::vector<int64_t>(static_cast<size_t>(osz)));
      for (int64_t o = 0; o < osz; ++o) {
        const float src =
            mode == Mode::kNearest ? static_cast<float>(o) * scale : (static_cast<float>(o) + 0.5f) * scale;
        idx[0][static_cast<size_t>(o)] = std::min(static_cast<int64_t>(std::floor(src)), isz - 1);
      }
    } else if (mode == Mode::kLinear) {
      const float scale = resample_scale(isz, osz, factor, align_corners);
      idx.assign(2, std::vector<int64_t>(static_cast<size_t>(osz)));
      w.assign(2, std::vector<float>(static_cast<size_t>(osz)));
      for (int64_t o = 0; o < osz; ++o) {
        const float src = align_corners ? scale * static_cast<float>(o)
                                        : std::max(scale * (static_cast<float>(o) + 0.5f) - 0.5f, 0.0f);
        const int64_t i0 = std::min(static_cast<int64_t>(src), isz - 1);
        const int64_t i1 = i0 + (i0 < isz - 1 ? 1 : 0);
        const float l1 = std::min(src - static_cast<float>(i0), 1.0f);
        idx[0][static_cast<size_t>(o)] = i0;
        idx[1][static_cast<size_t>(o)] = i1;
        w[0][static_cast<size_t>(o)] = 1.0f - l1;
        w[1][static_cast<size_t>(o)] = l1;
      }
    } else if (mode == Mode::kLinearAntialiased) {
      // ATen's antialiased bilinear (as Pillow's resampling): output o reads the
      // inputs within `support` of its center scale * (o + 0.5), each weighted
      // by the triangle filter stretched by the scale when shrinking, the
      // weights normalized to sum to 1; align_corners only changes the scale.
      const float scale = resample_scale(isz, osz, factor, align_corners);
      const float support = scale >= 1.0f ? scale : 1.0f;
      const float invscale = scale >= 1.0f ? 1.0f / scale : 1.0f;
      const int64_t most = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
      idx.assign(static_cast<size_t>(most), std::vector<int64_t>(static_cast<size_t>(osz)));
      w.assign(static_cast<size_t>(most), std::vector<float>(static_cast<size_t>(osz), 0.0f));
      for (int64_t o = 0; o < osz; ++o) {
        const float center = scale * (static_cast<float>(o) + 0.5f);
        const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5f), 0);
        const int64_t size =
            std::clamp<int64_t>(std::min<int64_t>(static_cast<int64_t>(center + support + 0.5f), isz) - lo, 0, most);
        float total = 0.0f;
        for (int64_t j = 0; j < most; ++j) {
          idx[static_cast<size_t>(j)][static_cast<size_t>(o)] = std::min(lo + j, isz - 1);
          if (j >= size) continue;
          const float t = std::abs((static_cast<float>(j + lo) - center + 0.5f) * invscale);
          const float v = t < 1.0f ? 1.0f - t : 0.0f;
          w[static_cast<size_t>(j)][static_cast<size_t>(o)] = v;
          total += v;
        }
        if (total != 0.0f)
          for (int64_t j = 0; j < size; ++j) w[static_cast<size_t>(j)][static_cast<size_t>(o)] /= total;
      }
    } else {
      // Keys' cubic convolution with A = -0.75, taps clamped to the edge.
      const float scale = resample_scale(isz, osz, factor, align_corners);
      const float A = -0.75f;
      auto near = [&](float t) { return ((A + 2) * t - (A + 3)) * t * t + 1; };
      auto far = [&](float t) { return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A; };
      idx.assign(4, std::vector<int64_t>(static_cast<size_t>(osz)));
      w.assign(4, std::vector<float>(static_cast<size_t>(osz)));
      for (int64_t o = 0; o < osz; ++o) {
        const float src = align_corners ? scale * static_cast<float>(o) : scale * (static_cast<float>(o) + 0.5f) - 0.5f;
        const float f = std::floor(src);
        const float t = src - f;
        const float c[4] = {far(t + 1.0f), near(t), near(1.0f - t), far(2.0f - t)};
        for (int k = 0; k < 4; ++k) {
          idx[static_cast<size_t>(k)][static_cast<size_t>(o)] =
              std::clamp<int64_t>(static_cast<int64_t>(f) - 1 + k, 0, isz - 1);
          w[static_cast<size_t>(k)][static_cast<size_t>(o)] = c[k];
        }
      }
    }
    y = taps(b, y, static_cast<int64_t>(dim), idx, w);
  }
  if (y == x) y = b.add(OpKind::kClone, {{"self", x}}, x->type);
  return b.done(y);
}

constexpr Decomposition kResamplingDecompositions[] = {
    {OpKind::kUpsampleNearest1d, &upsample},      {OpKind::kUpsampleNearest2d, &upsample},
    {OpKind::kUpsampleNearest3d, &upsample},      {OpKind::kUpsampleNearestExact1d, &upsample},
    {OpKind::kUpsampleNearestExact2d, &upsample}, {OpKind::kUpsampleNearestExact3d, &upsample},
    {OpKind::kUpsampleLinear1d, &upsample},       {OpKind::kUpsampleBilinear2d, &upsample},
    {OpKind::kUpsampleBilinear2dAa, &upsample},   {OpKind::kUpsampleBilinear2dAaDefault, &upsample},
    {OpKind::kUpsampleTrilinear3d, &upsample},    {OpKind::kUpsampleBicubic2d, &upsample},
};

}  // namespace

std::span<const Decomposition> resampling_decompositions() { return kResamplingDecompositions; }

}  // namespace kiln::lowering
