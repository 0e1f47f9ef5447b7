// torch.nn.functional's and torch's composites written in core ops: the graph
// after the pass holds only core ops, and running it gives each op's
// definition, computed here in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "decompose_helpers.h"

namespace kiln::lowering {
namespace {

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.value_at(i));
  return v;
}

Tensor filled(DType dt, const Shape& sizes, const std::vector<double>& v) {
  Tensor t = Tensor::zeros(DType::Float64, sizes);
  for (size_t i = 0; i < v.size(); ++i) t.data<double>()[i] = v[i];
  return t.to(dt);
}

TEST(DecomposeNn, LossesFollowTheirDefinitions) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[2, 3], %t: float32[2, 3], %logits: float32[2, 3], %cls: int64[2], %w: float32[3]) {
  %mse: float32[] = aten.mse_loss.default(self=%x, target=%t)
  %l1: float32[2, 3] = aten.l1_loss.default(self=%x, target=%t, reduction=0)
  %smooth: float32[] = aten.smooth_l1_loss.default(self=%x, target=%t, reduction=2, beta=0.5)
  %huber: float32[2, 3] = aten.huber_loss.default(self=%x, target=%t, reduction=0, delta=0.5)
  %bce: float32[2, 3] = aten.binary_cross_entropy_with_logits.default(self=%x, target=%t, reduction=0)
  %ce: float32[] = aten.cross_entropy_loss.default(self=%logits, target=%cls, weight=%w, ignore_index=-100)
  %ce_none: float32[2] = aten.cross_entropy_loss.default(self=%logits, target=%cls, reduction=0, ignore_index=2, label_smoothing=0.2)
  return (%mse, %l1, %smooth, %huber, %bce, %ce, %ce_none)
}
)",
                            &ops);
  expect_only_core_ops(ops, {"aten.abs.default", "aten.log_softmax.int"});  // of floats, over the last dim: core ops
  const std::vector<double> xs{-1.5, 0.2, 0.9, 2.5, -0.1, 0.4}, ts{0.5, 0.3, 0.1, 0.25, 0.9, 1.0};
  const std::vector<double> zs{1.0, -2.0, 0.5, 0.25, 3.0, -1.0}, ws{0.5, 2.0, 1.5};
  const std::vector<int64_t> cls{1, 2};
  Tensor c = Tensor::zeros(DType::Int64, {2});
  c.data<int64_t>()[0] = cls[0];
  c.data<int64_t>()[1] = cls[1];
  auto out = run(m, {filled(DType::Float32, {2, 3}, xs), filled(DType::Float32, {2, 3}, ts),
                     filled(DType::Float32, {2, 3}, zs), c, filled(DType::Float32, {3}, ws)});
  ASSERT_EQ(out.size(), 7u);
  double mse = 0, smooth = 0;
  for (int i = 0; i < 6; ++i) {
    const double x = static_cast<float>(xs[i]), t = static_cast<float>(ts[i]), d = x - t, z = std::fabs(d);
    mse += d * d / 6;
    smooth += z < 0.5 ? 0.5 * d * d / 0.5 : z - 0.25;
    EXPECT_NEAR(out[1].value_at(i), z, 1e-6);
    EXPECT_NEAR(out[3].value_at(i), z < 0.5 ? 0.5 * d * d : 0.5 * (z - 0.25), 1e-6);
    // -[t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))]
    const double s = 1 / (1 + std::exp(-x));
    EXPECT_NEAR(out[4].value_at(i), -(t * std::log(s) + (1 - t) * std::log(1 - s)), 1e-5);
  }
  EXPECT_NEAR(out[0].item(), mse, 1e-5);
  EXPECT_NEAR(out[2].item(), smooth, 1e-5);
  // Cross entropy per sample: -log softmax(z)[c] (weighted mean), and smoothed.
  double num = 0, den = 0;
  std::vector<double> logp(6);
  for (int r = 0; r < 2; ++r) {
    double sum = 0;
    for (int k = 0; k < 3; ++k) sum += std::exp(static_cast<float>(zs[r * 3 + k]));
    for (int k = 0; k < 3; ++k) logp[r * 3 + k] = static_cast<float>(zs[r * 3 + k]) - std::log(sum);
    num += -ws[cls[r]] * logp[r * 3 + cls[r]];
    den += ws[cls[r]];
  }
  EXPECT_NEAR(out[5].item(), num / den, 1e-5);
  // Sample 0 (class 1): 0.8 nll + 0.2 / 3 * -sum(log p); sample 1 is ignored (class 2).
  const double smooth0 = -(logp[0] + logp[1] + logp[2]);
  EXPECT_NEAR(out[6].value_at(0), 0.8 * -logp[1] + 0.2 / 3 * smooth0, 1e-5);
  EXPECT_EQ(out[6].value_at(1), 0.0);
}

// Nearest and bilinear resampling against ATen's index rules worked out here.
// Antialiased bilinear, by hand: 4 inputs to 2 (scale 2) reads, for output 0
// (center 1), inputs 0..2 weighted by the triangle filter stretched twice,
// 0.75 / 0.75 / 0.25 normalized to 3/7, 3/7, 1/7; output 1 (center 3) inputs
// 1..3 at 1/7, 3/7, 3/7. The height (1 to 1) passes through.
TEST(DecomposeNn, AntialiasedBilinearWeighsEveryInputUnderTheStretchedFilter) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[1, 1, 1, 4]) {
  %v: float32[1, 1, 1, 2] = aten._upsample_bilinear2d_aa.vec(input=%x, output_size=[1, 2], align_corners=false, scale_factors=None)
  %d: float32[1, 1, 1, 2] = aten._upsample_bilinear2d_aa.default(self=%x, output_size=[1, 2], align_corners=false, scales_h=None, scales_w=None)
  return (%v, %d)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  auto out = run(m, {filled(DType::Float32, {1, 1, 1, 4}, {1, 2, 4, 8})});
  ASSERT_EQ(out.size(), 2u);
  for (const Tensor& t : out) {
    EXPECT_NEAR(t.value_at(0), (3 * 1 + 3 * 2 + 1 * 4) / 7.0, 1e-6);
    EXPECT_NEAR(t.value_at(1), (1 * 2 + 3 * 4 + 3 * 8) / 7.0, 1e-6);
  }
}

TEST(DecomposeNn, UpsamplingPicksAndWeighsTheSourcesATenPicks) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[1, 1, 2, 3]) {
  %near: float32[1, 1, 4, 6] = aten.upsample_nearest2d.vec(input=%x, output_size=[4, 6], scale_factors=None)
  %near5: float32[1, 1, 2, 5] = aten.upsample_nearest2d.vec(input=%x, output_size=[2, 5], scale_factors=None)
  %bil: float32[1, 1, 4, 6] = aten.upsample_bilinear2d.vec(input=%x, output_size=None, align_corners=false, scale_factors=[2.0, 2.0])
  %bila: float32[1, 1, 3, 5] = aten.upsample_bilinear2d.vec(input=%x, output_size=[3, 5], align_corners=true, scale_factors=None)
  return (%near, %near5, %bil, %bila)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  const std::vector<double> xs{1, 2, 4, -3, 0.5, 8};
  auto out = run(m, {filled(DType::Float32, {1, 1, 2, 3}, xs)});
  ASSERT_EQ(out.size(), 4u);
  auto x = [&](int64_t h, int64_t w) { return xs[h * 3 + w]; };
  for (int h = 0; h < 4; ++h)
    for (int w = 0; w < 6; ++w) EXPECT_EQ(out[0].value_at(h * 6 + w), x(h / 2, w / 2));
  for (int w = 0; w < 5; ++w) EXPECT_EQ(out[1].value_at(5 + w), x(1, std::min<int64_t>(w * 3 / 5, 2)));
  // align_corners=false: src = max((dst + 0.5) / 2 - 0.5, 0), neighbours clamped at the edge.
  auto lin = [](int64_t dst, int64_t in, double scale, bool aligned, int64_t* i0, int64_t* i1) {
    const double src = aligned ? scale * dst : std::max(scale * (dst + 0.5) - 0.5, 0.0);
    *i0 = std::min<int64_t>(static_cast<int64_t>(src), in - 1);
    *i1 = std::min(*i0 + 1, in - 1);
    return src - *i0;
  };
  for (int o = 2; o < 4; ++o) {
    const bool aligned = o == 3;
    const int64_t oh = aligned ? 3 : 4, ow = aligned ? 5 : 6;
    for (int64_t h = 0; h < oh; ++h)
      for (int64_t w = 0; w < ow; ++w) {
        int64_t h0, h1, w0, w1;
        const double lh = lin(h, 2, aligned ? 0.5 : 0.5, aligned, &h0, &h1);
        const double lw = lin(w, 3, aligned ? 0.5 : 0.5, aligned, &w0, &w1);
        const double top = x(h0, w0) * (1 - lw) + x(h0, w1) * lw;
        const double bottom = x(h1, w0) * (1 - lw) + x(h1, w1) * lw;
        EXPECT_NEAR(out[static_cast<size_t>(o)].value_at(h * ow + w), top * (1 - lh) + bottom * lh, 1e-5)
            << o << ": " << h << "," << w;
      }
  }
}

TEST(DecomposeNn, ShapeCompositesMoveTheRightElements) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[2, 3], %v: float32[3], %u: float32[2]) {
  %roll: float32[2, 3] = aten.roll.default(self=%x, shifts=[1], dims=[1])
  %roll_flat: float32[2, 3] = aten.roll.default(self=%x, shifts=[-2])
  %rot: float32[3, 2] = aten.rot90.default(self=%x, k=1, dims=[0, 1])
  %rep: float32[2, 6] = aten.repeat_interleave.self_int(self=%x, repeats=2, dim=1)
  %gx: float32[3, 2], %gy: float32[3, 2] = aten.meshgrid.indexing(tensors=[%v, %u], indexing="ij")
  %emb: float32[4, 4] = aten.diag_embed.default(self=%v, offset=-1, dim1=0, dim2=1)
  %cross: float32[2, 3] = aten.linalg_cross.default(self=%x, other=%v)
  %vstack: float32[3, 3] = aten.vstack.default(tensors=[%x, %v])
  return (%roll, %roll_flat, %rot, %rep, %gx, %gy, %emb, %cross, %vstack)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  const std::vector<double> xs{1, 2, 3, 4, 5, 6}, vs{7, -8, 9}, us{10, 11};
  auto out = run(m, {filled(DType::Float32, {2, 3}, xs), filled(DType::Float32, {3}, vs), filled(DType::Float32, {2}, us)});
  ASSERT_EQ(out.size(), 9u);
  auto x = [&](int r, int c) { return xs[r * 3 + c]; };
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(out[0].value_at(r * 3 + c), x(r, (c + 2) % 3));
      EXPECT_EQ(out[1].value_at(r * 3 + c), xs[(r * 3 + c + 2) % 6]);
      // rot90 once counterclockwise: out[i][j] = x[j][n - 1 - i]
      EXPECT_EQ(out[2].value_at(c * 2 + r), x(r, 2 - c));
      EXPECT_EQ(out[3].value_at(r * 6 + 2 * c), x(r, c));
      EXPECT_EQ(out[3].value_at(r * 6 + 2 * c + 1), x(r, c));
      EXPECT_EQ(out[4].value_at(c * 2 + r), vs[c]);
      EXPECT_EQ(out[5].value_at(c * 2 + r), us[r]);
      EXPECT_EQ(out[8].value_at(r * 3 + c), x(r, c));
      EXPECT_EQ(out[8].value_at(6 + c), vs[c]);
    }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(out[6].value_at(i * 4 + j), i == j + 1 ? vs[j] : 0.0) << i << "," << j;
  for (int r = 0; r < 2; ++r) {
    const double a0 = x(r, 0), a1 = x(r, 1), a2 = x(r, 2);
    EXPECT_EQ(out[7].value_at(r * 3 + 0), a1 * vs[2] - a2 * vs[1]);
    EXPECT_EQ(out[7].value_at(r * 3 + 1), a2 * vs[0] - a0 * vs[2]);
    EXPECT_EQ(out[7].value_at(r * 3 + 2), a0 * vs[1] - a1 * vs[0]);
  }
}

// flip as index_selects of reversed positions: over two dims, a negative dim,
// an integer tensor, and a dim of size 1 (a copy).
TEST(DecomposeNn, FlipReversesEachDimItNames) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[2, 3, 4], %i: int64[5], %o: float32[1, 3]) {
  %a: float32[2, 3, 4] = aten.flip.default(self=%x, dims=[0, -1])
  %b: int64[5] = aten.flip.default(self=%i, dims=[0])
  %c: float32[1, 3] = aten.flip.default(self=%o, dims=[0])
  return (%a, %b, %c)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  EXPECT_EQ(ops.count("aten.flip.default"), 0u);
  std::vector<double> xs(24), os{1, 2, 3};
  for (int k = 0; k < 24; ++k) xs[k] = k;
  Tensor iv = Tensor::zeros(DType::Int64, {5});
  for (int k = 0; k < 5; ++k) iv.data<int64_t>()[k] = 10 * k - 7;
  auto out = run(m, {filled(DType::Float32, {2, 3, 4}, xs), iv, filled(DType::Float32, {1, 3}, os)});
  ASSERT_EQ(out.size(), 3u);
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) EXPECT_EQ(out[0].value_at((a * 3 + b) * 4 + c), xs[((1 - a) * 3 + b) * 4 + (3 - c)]);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(out[1].value_at(k), 10 * (4 - k) - 7);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(out[2].value_at(k), os[k]);
}

// combinations in itertools' order, without and with replacement, against
// the positions enumerated here by brute force.
TEST(DecomposeNn, CombinationsListThePositionsInOrder) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[5]) {
  %a: float32[10, 2] = aten.combinations.default(self=%x)
  %b: float32[35, 3] = aten.combinations.default(self=%x, r=3, with_replacement=true)
  return (%a, %b)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  const std::vector<double> xs{10, 11, 12, 13, 14};
  auto out = run(m, {filled(DType::Float32, {5}, xs)});
  ASSERT_EQ(out.size(), 2u);
  std::vector<double> want_a, want_b;
  for (int i = 0; i < 5; ++i)
    for (int j = i + 1; j < 5; ++j) want_a.insert(want_a.end(), {xs[i], xs[j]});
  for (int i = 0; i < 5; ++i)
    for (int j = i; j < 5; ++j)
      for (int k = j; k < 5; ++k) want_b.insert(want_b.end(), {xs[i], xs[j], xs[k]});
  EXPECT_EQ(values_of(out[0]), want_a);
  EXPECT_EQ(values_of(out[1]), want_b);
}

// baddbmm as bmm, scaled and added (beta 0 ignores a NaN in self); stack as
// unsqueezes and a cat; repeat as an expand between reshapes; diff as slices
// and subtractions; softmax over another dim between transposes.
TEST(DecomposeNn, BaddbmmStackRepeatDiffAndSoftmaxOverAnotherDim) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(
      R"(graph(%s: float32[2, 2, 3], %b1: float32[2, 2, 4], %b2: float32[2, 4, 3], %r: float32[3], %x: float32[2, 3], %y: float32[2, 3], %i: int64[3, 2], %p: float32[2, 1]) {
  %bad: float32[2, 2, 3] = aten.baddbmm.default(self=%s, batch1=%b1, batch2=%b2, beta=0.5, alpha=2)
  %bad0: float32[2, 2, 3] = aten.baddbmm.default(self=%s, batch1=%b1, batch2=%b2, beta=0)
  %bad_row: float32[2, 2, 3] = aten.baddbmm.default(self=%r, batch1=%b1, batch2=%b2)
  %st0: float32[2, 2, 3] = aten.stack.default(tensors=[%x, %y])
  %st2: float32[2, 3, 2] = aten.stack.default(tensors=[%x, %y], dim=-1)
  %rep: float32[2, 2, 9] = aten.repeat.default(self=%x, repeats=[2, 1, 3])
  %rep1: float32[1, 2, 3] = aten.repeat.default(self=%x, repeats=[1, 1, 1])
  %d1: float32[2, 2] = aten.diff.default(self=%x)
  %d2: float32[2, 3] = aten.diff.default(self=%x, n=2, dim=-1, prepend=%p, append=%p)
  %di: int64[2, 2] = aten.diff.default(self=%i, n=1, dim=0)
  %sm: float32[2, 2, 3] = aten._softmax.default(self=%s, dim=0, half_to_float=false)
  %lsm: float32[2, 2, 3] = aten.log_softmax.int(self=%s, dim=1)
  %sm_last: float32[2, 2, 3] = aten.softmax.int(self=%s, dim=-1)
  return (%bad, %bad0, %bad_row, %st0, %st2, %rep, %rep1, %d1, %d2, %di, %sm, %lsm, %sm_last)
}
)",
      &ops);
  expect_only_core_ops(ops,
                       {"aten._softmax.default", "aten.log_softmax.int", "aten.softmax.int"});  // over the last dim
  EXPECT_EQ(ops["aten.bmm.default"], 3);
  EXPECT_EQ(ops["aten.transpose.int"], 4);  // two around each softmax over another dim
  EXPECT_EQ(ops["aten._softmax.default"] + ops["aten.log_softmax.int"] + ops["aten.softmax.int"], 3);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> ss(12), b1s(16), b2s(24), rs{0.5, -1.5, 2.25}, xs{1, -2.5, 4, 0.5, 3, -7}, ys(6), ps{10, -10};
  for (int k = 0; k < 12; ++k) ss[k] = 0.25 * (k - 5);
  ss[4] = nan;  // baddbmm with beta 0 never reads it
  for (int k = 0; k < 16; ++k) b1s[k] = 0.5 * ((k * 7) % 5 - 2);
  for (int k = 0; k < 24; ++k) b2s[k] = 0.25 * ((k * 3) % 7 - 3);
  for (int k = 0; k < 6; ++k) ys[k] = 100 + k;
  Tensor is = Tensor::zeros(DType::Int64, {3, 2});
  const std::vector<int64_t> ivs{5, -3, 9, 40, -2, 7};
  std::copy(ivs.begin(), ivs.end(), is.data<int64_t>());
  auto out = run(
      m, {filled(DType::Float32, {2, 2, 3}, ss), filled(DType::Float32, {2, 2, 4}, b1s),
          filled(DType::Float32, {2, 4, 3}, b2s), filled(DType::Float32, {3}, rs), filled(DType::Float32, {2, 3}, xs),
          filled(DType::Float32, {2, 3}, ys), is, filled(DType::Float32, {2, 1}, ps)});
  ASSERT_EQ(out.size(), 13u);
  // Inputs are multiples of 1/4 with few terms: every product and sum is exact in float.
  for (int bt = 0; bt < 2; ++bt)
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 3; ++c) {
        double prod = 0;
        for (int k = 0; k < 4; ++k) prod += b1s[bt * 8 + r * 4 + k] * b2s[bt * 12 + k * 3 + c];
        const int o = bt * 6 + r * 3 + c;
        if (o == 4) {
          EXPECT_TRUE(std::isnan(out[0].value_at(o)));
        } else {
          EXPECT_EQ(out[0].value_at(o), 0.5 * ss[o] + 2 * prod) << o;
        }
        EXPECT_EQ(out[1].value_at(o), prod) << o;
        EXPECT_EQ(out[2].value_at(o), rs[c] + prod) << o;
      }
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(out[3].value_at(r * 3 + c), xs[r * 3 + c]);
      EXPECT_EQ(out[3].value_at(6 + r * 3 + c), ys[r * 3 + c]);
      EXPECT_EQ(out[4].value_at(r * 6 + c * 2), xs[r * 3 + c]);
      EXPECT_EQ(out[4].value_at(r * 6 + c * 2 + 1), ys[r * 3 + c]);
      EXPECT_EQ(out[6].value_at(r * 3 + c), xs[r * 3 + c]);
    }
  for (int a = 0; a < 2; ++a)  // rep[a][r][c] = x[r % 2][c % 3]
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 9; ++c) EXPECT_EQ(out[5].value_at(a * 18 + r * 9 + c), xs[r * 3 + c % 3]);
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) EXPECT_EQ(out[7].value_at(r * 2 + c), xs[r * 3 + c + 1] - xs[r * 3 + c]);
    // [p, x0, x1, x2, p]: second differences
    const std::vector<double> row{ps[r], xs[r * 3], xs[r * 3 + 1], xs[r * 3 + 2], ps[r]};
    for (int c = 0; c < 3; ++c) EXPECT_EQ(out[8].value_at(r * 3 + c), row[c + 2] - 2 * row[c + 1] + row[c]);
  }
  EXPECT_EQ(out[9].dtype(), DType::Int64);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(out[9].value_at(k), static_cast<double>(ivs[k + 2] - ivs[k]));
  // Softmax over dim 0 (pairs 6 apart), log_softmax over dim 1 (pairs 3 apart), of finite entries.
  std::vector<double> fs = ss;
  fs[4] = 0.75;
  Tensor sf = filled(DType::Float32, {2, 2, 3}, fs);
  auto out2 = run(m, {sf, filled(DType::Float32, {2, 2, 4}, b1s), filled(DType::Float32, {2, 4, 3}, b2s),
                      filled(DType::Float32, {3}, rs), filled(DType::Float32, {2, 3}, xs),
                      filled(DType::Float32, {2, 3}, ys), is, filled(DType::Float32, {2, 1}, ps)});
  ASSERT_EQ(out2.size(), 13u);
  for (int k = 0; k < 12; ++k) {
    const double v = static_cast<float>(fs[k]);
    const double a = static_cast<float>(fs[k % 6]), b = static_cast<float>(fs[k % 6 + 6]);
    EXPECT_NEAR(out2[10].value_at(k), std::exp(v) / (std::exp(a) + std::exp(b)), 1e-6);
    const int base = (k / 6) * 6 + k % 3;
    const double p = static_cast<float>(fs[base]), q = static_cast<float>(fs[base + 3]);
    EXPECT_NEAR(out2[11].value_at(k), v - std::log(std::exp(p) + std::exp(q)), 1e-6);
  }
}

TEST(DecomposeNn, NanReductionsCountsAndClosenessFollowTheirDefinitions) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[2, 3], %y: float32[2, 3]) {
  %nansum: float32[2] = aten.nansum.default(self=%x, dim=[1])
  %nanmean: float32[2] = aten.nanmean.default(self=%x, dim=[1])
  %count: int64[3] = aten.count_nonzero.default(self=%x, dim=0)
  %close: bool[2, 3] = aten.isclose.default(self=%x, other=%y, rtol=0.1, atol=0.0, equal_nan=true)
  %pw: float32[2] = aten.pairwise_distance.default(x1=%x, x2=%y, p=1.0)
  return (%nansum, %nanmean, %count, %close, %pw)
}
)",
                            &ops);
  expect_only_core_ops(ops, {"aten.abs.default"});  // of floats: a core op
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> xs{1, nan, 3, 0, 0, 6}, ys{1.05, nan, 4, 0, 1, 5.5};
  auto out = run(m, {filled(DType::Float32, {2, 3}, xs), filled(DType::Float32, {2, 3}, ys)});
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].value_at(0), 4.0);
  EXPECT_EQ(out[0].value_at(1), 6.0);
  EXPECT_EQ(out[1].value_at(0), 2.0);
  EXPECT_EQ(out[1].value_at(1), 2.0);
  EXPECT_EQ(out[2].dtype(), DType::Int64);
  EXPECT_EQ(out[2].value_at(0), 1.0);
  EXPECT_EQ(out[2].value_at(1), 1.0);  // NaN is not zero
  EXPECT_EQ(out[2].value_at(2), 2.0);
  const std::vector<double> close{1, 1, 0, 1, 0, 1};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[3].value_at(i), close[static_cast<size_t>(i)]) << i;
  // |x - y + 1e-6| summed over the row (NaN propagates into row 0).
  EXPECT_TRUE(std::isnan(out[4].value_at(0)));
  const double row1 = std::fabs(0 - 0 + 1e-6) + std::fabs(0 - 1 + 1e-6) + std::fabs(6 - 5.5 + 1e-6);
  EXPECT_NEAR(out[4].value_at(1), row1, 1e-5);
}

TEST(DecomposeNn, MaxPoolWithUnreadIndicesBecomesMaxPool) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[1, 1, 4, 4]) {
  %v: float32[1, 1, 2, 2], %i: int64[1, 1, 2, 2] = aten.max_pool2d_with_indices.default(self=%x, kernel_size=[2, 2], stride=[2, 2])
  %w: float32[1, 1, 2, 2], %j: int64[1, 1, 2, 2] = aten.max_pool2d_with_indices.default(self=%x, kernel_size=[2, 2], stride=[2, 2])
  return (%v, %w, %j)
}
)",
                            &ops);
  EXPECT_EQ(ops["aten.max_pool2d.default"], 1);
  EXPECT_EQ(ops["aten.max_pool2d_with_indices.default"], 1);  // its indices are returned: kept
  auto out = run(m, {filled(DType::Float32, {1, 1, 4, 4}, {1, 5, 2, 0, 3, 4, 9, 8, -1, -2, 6, 7, 0, -3, 5, 4})});
  ASSERT_EQ(out.size(), 3u);
  for (size_t o : {0u, 1u}) EXPECT_EQ(values_of(out[o]), (std::vector<double>{5, 9, 0, 7})) << o;
  EXPECT_EQ(values_of(out[2]), (std::vector<double>{1, 6, 12, 11}));
}

// Batch norm in training (the batch's statistics, the saved mean and inverse
// std, the running statistics moved by momentum toward the unbiased variance)
// and in evaluation with statistics that are not constants, against the
// definitions computed here in double.
TEST(DecomposeNn, BatchNormsFollowTheirDefinitions) {
  std::map<std::string, int> ops;
  ir::Module m =
      decomposed(R"(graph(%x: float32[4, 3, 2], %w: float32[3], %b: float32[3], %rm: float32[3], %rv: float32[3]) {
  %y: float32[4, 3, 2], %mean: float32[3], %rstd: float32[3], %nm: float32[3], %nv: float32[3] = aten._native_batch_norm_legit_functional.default(input=%x, weight=%w, bias=%b, running_mean=%rm, running_var=%rv, training=true, momentum=0.1, eps=1e-05)
  %e: float32[4, 3, 2], %e1: float32[0], %e2: float32[0] = aten._native_batch_norm_legit_no_training.default(input=%x, weight=%w, bias=%b, running_mean=%rm, running_var=%rv, momentum=0.1, eps=1e-05)
  %u: float32[4, 3, 2], %um: float32[3], %us: float32[3], %ur: uint8[0], %unm: float32[3], %unv: float32[3] = aten._batch_norm_with_update_functional.default(input=%x, weight=%w, bias=%b, running_mean=%rm, running_var=%rv, momentum=0.1, eps=1e-05)
  return (%y, %mean, %rstd, %nm, %nv, %e, %e1, %ur, %u)
}
)",
                 &ops);
  EXPECT_EQ(ops["aten._native_batch_norm_legit_functional.default"], 0);
  EXPECT_EQ(ops["aten._native_batch_norm_legit_no_training.default"], 0);
  // The placeholders returned (statistics in evaluation, the reserve) are empty tensors of their types.
  EXPECT_EQ(ops["aten._batch_norm_with_update_functional.default"], 0);
  std::vector<double> xv(24);
  for (size_t i = 0; i < xv.size(); ++i)
    xv[i] = std::sin(static_cast<double>(i) * 1.7) * 2 + 0.1 * static_cast<double>(i);
  const std::vector<double> w{1.5, -0.5, 2}, b{0.1, 0.2, -0.3}, rm{0.5, -1, 0}, rv{2, 0.5, 1};
  auto out = run(m, {filled(DType::Float32, {4, 3, 2}, xv), filled(DType::Float32, {3}, w),
                     filled(DType::Float32, {3}, b), filled(DType::Float32, {3}, rm), filled(DType::Float32, {3}, rv)});
  ASSERT_EQ(out.size(), 9u);
  EXPECT_EQ(out[6].sizes(), Shape{0});
  EXPECT_EQ(out[6].dtype(), DType::Float32);
  EXPECT_EQ(out[7].sizes(), Shape{0});
  EXPECT_EQ(out[7].dtype(), DType::UInt8);
  EXPECT_EQ(values_of(out[8]), values_of(out[0]));
  for (int64_t c = 0; c < 3; ++c) {
    double mu = 0, m2 = 0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t i = 0; i < 2; ++i) mu += xv[static_cast<size_t>((n * 3 + c) * 2 + i)] / 8;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t i = 0; i < 2; ++i) m2 += std::pow(xv[static_cast<size_t>((n * 3 + c) * 2 + i)] - mu, 2);
    const double rs = 1 / std::sqrt(m2 / 8 + 1e-5), ers = 1 / std::sqrt(rv[c] + 1e-5);
    EXPECT_NEAR(out[1].value_at(c), mu, 1e-5) << c;
    EXPECT_NEAR(out[2].value_at(c), rs, 1e-4 * rs) << c;
    EXPECT_NEAR(out[3].value_at(c), 0.9 * rm[c] + 0.1 * mu, 1e-5) << c;
    EXPECT_NEAR(out[4].value_at(c), 0.9 * rv[c] + 0.1 * m2 / 7, 1e-5) << c;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t i = 0; i < 2; ++i) {
        const int64_t k = (n * 3 + c) * 2 + i;
        const double v = xv[static_cast<size_t>(k)];
        EXPECT_NEAR(out[0].value_at(k), (v - mu) * rs * w[c] + b[c], 1e-4) << k;
        EXPECT_NEAR(out[5].value_at(k), (v - rm[c]) * ers * w[c] + b[c], 1e-4) << k;
      }
  }
}

// max_unpool writes each value at its index within its plane of zeros; a max
// pool's gradient adds each gradient at its index within its input plane
// (repeats summed). Both as scatters into zeros.
TEST(DecomposeNn, MaxUnpoolAndMaxPoolGradientsScatterIntoZeros) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(
      R"(graph(%x: float32[1, 2, 1, 2], %i: int64[1, 2, 1, 2], %g: float32[1, 2, 1, 2], %s: float32[1, 2, 2, 2], %j: int64[1, 2, 1, 2]) {
  %u: float32[1, 2, 2, 3] = aten.max_unpool2d.default(self=%x, indices=%i, output_size=[2, 3])
  %d: float32[1, 2, 2, 2] = aten.max_pool2d_with_indices_backward.default(grad_output=%g, self=%s, kernel_size=[2, 2], stride=[1, 1], padding=[0, 0], dilation=[1, 1], ceil_mode=false, indices=%j)
  return (%u, %d)
}
)",
      &ops);
  EXPECT_EQ(ops["aten.max_unpool2d.default"], 0);
  EXPECT_EQ(ops["aten.max_pool2d_with_indices_backward.default"], 0);
  const Tensor x = filled(DType::Float32, {1, 2, 1, 2}, {1, 2, 3, 4});
  const Tensor i = filled(DType::Int64, {1, 2, 1, 2}, {5, 0, 3, 1});
  const Tensor j = filled(DType::Int64, {1, 2, 1, 2}, {2, 0, 3, 3});  // plane 1 repeats position 3
  const Tensor g = filled(DType::Float32, {1, 2, 1, 2}, {0.5, 1.5, 2, 4});
  const Tensor self = Tensor::zeros(DType::Float32, {1, 2, 2, 2});
  auto out = run(m, {x, i, g, self, j});
  ASSERT_EQ(out.size(), 2u);
  std::vector<double> unpooled(12, 0.0), grads(8, 0.0);
  for (int64_t p = 0; p < 2; ++p)
    for (int64_t e = 0; e < 2; ++e) {
      unpooled[static_cast<size_t>(p * 6 + i.data<int64_t>()[p * 2 + e])] = x.value_at(p * 2 + e);
      grads[static_cast<size_t>(p * 4 + j.data<int64_t>()[p * 2 + e])] += g.value_at(p * 2 + e);
    }
  EXPECT_EQ(values_of(out[0]), unpooled);
  EXPECT_EQ(values_of(out[1]), grads);
}

// native_layer_norm whose statistics are read: the mean and inverse std of
// each row over the normalized dims (kept as size-1 dims) and the output.
TEST(DecomposeNn, NativeLayerNormWithReadStatisticsFollowsItsDefinition) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[2, 4], %w: float32[4], %b: float32[4]) {
  %y: float32[2, 4], %mean: float32[2, 1], %rstd: float32[2, 1] = aten.native_layer_norm.default(input=%x, normalized_shape=[4], weight=%w, bias=%b, eps=1e-05)
  return (%y, %mean, %rstd)
}
)",
                            &ops);
  EXPECT_EQ(ops["aten.native_layer_norm.default"], 0);
  const std::vector<double> xv{1, -2, 3, 0.5, 4, 4, -6, 2}, w{1, 2, -1, 0.5}, b{0, 0.1, 0.2, 0.3};
  auto out =
      run(m, {filled(DType::Float32, {2, 4}, xv), filled(DType::Float32, {4}, w), filled(DType::Float32, {4}, b)});
  ASSERT_EQ(out.size(), 3u);
  ASSERT_EQ(out[1].sizes(), (Shape{2, 1}));
  for (int64_t r = 0; r < 2; ++r) {
    double mu = 0, m2 = 0;
    for (int64_t j = 0; j < 4; ++j) mu += xv[static_cast<size_t>(r * 4 + j)] / 4;
    for (int64_t j = 0; j < 4; ++j) m2 += std::pow(xv[static_cast<size_t>(r * 4 + j)] - mu, 2) / 4;
    const double rs = 1 / std::sqrt(m2 + 1e-5);
    EXPECT_NEAR(out[1].value_at(r), mu, 1e-6);
    EXPECT_NEAR(out[2].value_at(r), rs, 1e-5 * rs);
    for (int64_t j = 0; j < 4; ++j)
      EXPECT_NEAR(out[0].value_at(r * 4 + j), (xv[static_cast<size_t>(r * 4 + j)] - mu) * rs * w[j] + b[j], 1e-5);
  }
}

// A weight that may not fit the normalized dims (a dynamic size against a
// static one) leaves native_layer_norm as it is, for its kernel to check.
TEST(DecomposeNn, NativeLayerNormWithAWeightThatMayNotFitIsLeft) {
  std::map<std::string, int> ops;
  (void)decomposed(R"(graph(%x: float32[2, s0], %w: float32[4], %b: float32[4]) {
  %y: float32[2, s0], %mean: float32[2, 1], %rstd: float32[2, 1] = aten.native_layer_norm.default(input=%x, normalized_shape=[4], weight=%w, bias=%b, eps=1e-05)
  return (%y, %mean, %rstd)
}
)",
                   &ops);
  EXPECT_EQ(ops["aten.native_layer_norm.default"], 1);
}

TEST(DecomposeNn, SliceScatterOfStaticBoundsIsIndexCopy) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[2, 5], %y: float32[2, 2]) {
  %s: float32[2, 5] = aten.slice_scatter.default(self=%x, src=%y, dim=1, start=1, end=9223372036854775807, step=2)
  %t: float32[2, 5] = aten.slice_scatter.default(self=%x, src=%y, dim=-1, start=-2)
  return (%s, %t)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  EXPECT_EQ(ops["aten.index_copy.default"], 2);
  auto out = run(m, {filled(DType::Float32, {2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), filled(DType::Float32, {2, 2}, {-1, -2, -3, -4})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{0, -1, 2, -2, 4, 5, -3, 7, -4, 9}));
  EXPECT_EQ(values_of(out[1]), (std::vector<double>{0, 1, 2, -1, -2, 5, 6, 7, -3, -4}));
}

TEST(DecomposeNn, EinsumSplitsAndGathersFollowTheirDefinitions) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%a: float32[2, 3, 4], %b: float32[2, 4, 5], %v: float32[4], %i: int64[2, 3, 1]) {
  %bmm: float32[2, 3, 5] = aten.einsum.default(equation="bij,bjk->bik", tensors=[%a, %b])
  %contract: float32[3, 5] = aten.einsum.default(equation="bij , bjk -> ik", tensors=[%a, %b])
  %vec: float32[2, 3] = aten.einsum.default(equation="...j,j", tensors=[%a, %v])
  %trans: float32[4, 3, 2] = aten.einsum.default(equation="bij->jib", tensors=[%a])
  %p0: float32[2, 2, 4], %p1: float32[2, 1, 4] = aten.tensor_split.sections(self=%a, sections=2, dim=1)
  %h0: float32[2, 1, 4], %h1: float32[2, 2, 4] = aten.hsplit.array(self=%a, indices=[1])
  %take: float32[2, 3, 1] = aten.take_along_dim.default(self=%a, indices=%i, dim=2)
  %cd: float32[2, 3, 3] = aten.cdist.default(x1=%a, x2=%a, p=2.0)
  %hamming: float32[2, 3, 3] = aten.cdist.default(x1=%a, x2=%a, p=0.0, compute_mode=None)
  return (%bmm, %contract, %vec, %trans, %p0, %p1, %h0, %h1, %take, %cd, %hamming)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  std::vector<double> av(24), bv(40), vv{0.5, -1, 2, 0.25};
  for (int k = 0; k < 24; ++k) av[k] = std::sin(0.7 * k) * 2;
  for (int k = 0; k < 40; ++k) bv[k] = std::cos(1.3 * k);
  const std::vector<double> iv{3, 0, 2, 1, 1, 0};
  Tensor idx = Tensor::zeros(DType::Int64, {2, 3, 1});
  for (int k = 0; k < 6; ++k) idx.data<int64_t>()[k] = static_cast<int64_t>(iv[k]);
  auto out = run(m, {filled(DType::Float32, {2, 3, 4}, av), filled(DType::Float32, {2, 4, 5}, bv),
                     filled(DType::Float32, {4}, vv), idx});
  ASSERT_EQ(out.size(), 11u);
  auto a = [&](int b, int i, int j) { return static_cast<double>(static_cast<float>(av[(b * 3 + i) * 4 + j])); };
  auto bb = [&](int b, int j, int k) { return static_cast<double>(static_cast<float>(bv[(b * 4 + j) * 5 + k])); };
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 5; ++k) {
      double total = 0;
      for (int b = 0; b < 2; ++b) {
        double s = 0;
        for (int j = 0; j < 4; ++j) s += a(b, i, j) * bb(b, j, k);
        EXPECT_NEAR(out[0].value_at((b * 3 + i) * 5 + k), s, 1e-5);
        total += s;
      }
      EXPECT_NEAR(out[1].value_at(i * 5 + k), total, 1e-5);
    }
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i) {
      double s = 0;
      for (int j = 0; j < 4; ++j) {
        s += a(b, i, j) * vv[j];
        EXPECT_EQ(out[3].value_at((j * 3 + i) * 2 + b), a(b, i, j));
        const Tensor& piece = i < 2 ? out[4] : out[5];
        EXPECT_EQ(piece.value_at((b * (i < 2 ? 2 : 1) + (i < 2 ? i : 0)) * 4 + j), a(b, i, j));
        const Tensor& h = i < 1 ? out[6] : out[7];
        EXPECT_EQ(h.value_at((b * (i < 1 ? 1 : 2) + (i < 1 ? 0 : i - 1)) * 4 + j), a(b, i, j));
      }
      EXPECT_NEAR(out[2].value_at(b * 3 + i), s, 1e-5);
      EXPECT_EQ(out[8].value_at(b * 3 + i), a(b, i, static_cast<int>(iv[b * 3 + i])));
      for (int r = 0; r < 3; ++r) {
        double d = 0;
        for (int j = 0; j < 4; ++j) d += (a(b, i, j) - a(b, r, j)) * (a(b, i, j) - a(b, r, j));
        EXPECT_NEAR(out[9].value_at((b * 3 + i) * 3 + r), std::sqrt(d), 1e-5);
        int differ = 0;
        for (int j = 0; j < 4; ++j) differ += a(b, i, j) != a(b, r, j) ? 1 : 0;
        EXPECT_EQ(out[10].value_at((b * 3 + i) * 3 + r), differ);
      }
    }
}

}  // namespace
}  // namespace kiln::lowering
