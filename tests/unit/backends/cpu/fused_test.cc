// kiln.attention, kiln.silu_mul and kiln.conv_act against references: a
// naive attention computed here, and the unfused reference kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>

#include "backends/cpu/broadcast.h"
#include "unit/backends/cpu/op_test_helpers.h"

namespace kiln::cpu::testing {
namespace {

using ir::OpKind;

// softmax(q k^T * scale + mask) v in double, broadcasting batch dims of
// q [..., L, E], k [..., S, E], v [..., S, Ev] and the mask to [..., L, S].
std::vector<double> naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask, double scale,
                                    bool causal, Shape& out_shape) {
  const int64_t L = q.size(-2), E = q.size(-1), S = k.size(-2), Ev = v.size(-1);
  Shape batch =
      *broadcast_shapes(Shape(q.sizes().begin(), q.sizes().end() - 2), Shape(k.sizes().begin(), k.sizes().end() - 2));
  batch = *broadcast_shapes(batch, Shape(v.sizes().begin(), v.sizes().end() - 2));
  Shape qs = batch, ks = batch, vs = batch, ms = batch;
  qs.insert(qs.end(), {L, E});
  ks.insert(ks.end(), {S, E});
  vs.insert(vs.end(), {S, Ev});
  ms.insert(ms.end(), {L, S});
  const Tensor qe = expand_to(q, qs).contiguous(), ke = expand_to(k, ks).contiguous(),
               ve = expand_to(v, vs).contiguous();
  Tensor me;
  if (mask) me = expand_to(*mask, ms).contiguous();
  int64_t nb = 1;
  for (int64_t b : batch) nb *= b;
  std::vector<double> out;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(static_cast<size_t>(S));
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += qe.value_at((b * L + i) * E + e) * ke.value_at((b * S + j) * E + e);
        double x = dot * scale;
        if (mask) {
          const double m = me.value_at((b * L + i) * S + j);
          x = mask->dtype() == DType::Bool ? (m != 0 ? x : -INFINITY) : x + m;
        }
        if (causal && j > i) x = -INFINITY;
        s[static_cast<size_t>(j)] = x;
        mx = std::max(mx, x);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::isinf(mx) ? 0 : std::exp(x - mx));
      for (int64_t c = 0; c < Ev; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j)
          if (sum > 0) acc += s[static_cast<size_t>(j)] / sum * ve.value_at((b * S + j) * Ev + c);
        out.push_back(acc);
      }
    }
  out_shape = batch;
  out_shape.insert(out_shape.end(), {L, Ev});
  return out;
}

void check_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<Tensor> mask,
                     std::optional<double> scale, bool causal) {
  std::vector<std::pair<std::string, OpArg>> args = {{"query", q}, {"key", k}, {"value", v}};
  if (mask) args.push_back({"attn_mask", *mask});
  if (scale) args.push_back({"scale", F(*scale)});
  if (causal) args.push_back({"is_causal", B(true)});
  Tensor got = run_op_tensor(OpKind::kAttention, args);
  Shape want_shape;
  const std::vector<double> want = naive_attention(
      q, k, v, mask ? &*mask : nullptr, scale.value_or(1.0 / std::sqrt(double(q.size(-1)))), causal, want_shape);
  EXPECT_EQ(got.sizes(), want_shape);
  expect_close(got, want, 1e-5);
}

TEST(FusedAttention, MatchesNaiveAttentionWithoutMask) {
  check_attention(random_tensor(DType::Float32, {2, 3, 4, 5}, 1, 1), random_tensor(DType::Float32, {2, 3, 6, 5}, 1, 2),
                  random_tensor(DType::Float32, {2, 3, 6, 7}, 1, 3), std::nullopt, std::nullopt, false);
  check_attention(random_tensor(DType::Float32, {4, 5}, 2, 1), random_tensor(DType::Float32, {6, 5}, 2, 2),
                  random_tensor(DType::Float32, {6, 3}, 2, 3), std::nullopt, 0.7, false);
}

TEST(FusedAttention, MatchesNaiveAttentionWithFloatAndBoolMasks) {
  const Tensor q = random_tensor(DType::Float32, {2, 3, 4, 5}, 3, 1);
  const Tensor k = random_tensor(DType::Float32, {2, 3, 6, 5}, 3, 2);
  const Tensor v = random_tensor(DType::Float32, {2, 3, 6, 7}, 3, 3);
  check_attention(q, k, v, random_tensor(DType::Float32, {4, 6}, 3, 4, 2.0), 0.25, false);
  // Bool mask broadcast over batch and query rows; keys 1 and 4 hidden.
  Tensor keep = Tensor::zeros(DType::Bool, {1, 3, 1, 6});
  for (int64_t i = 0; i < keep.numel(); ++i) keep.data<bool>()[i] = i % 6 != 1 && i % 6 != 4;
  check_attention(q, k, v, keep, std::nullopt, false);
}

TEST(FusedAttention, CausalAndBroadcastBatchDims) {
  check_attention(random_tensor(DType::Float32, {2, 3, 5, 4}, 4, 1), random_tensor(DType::Float32, {1, 3, 5, 4}, 4, 2),
                  random_tensor(DType::Float32, {2, 1, 5, 6}, 4, 3), std::nullopt, std::nullopt, true);
  check_attention(random_tensor(DType::Float32, {3, 2, 4}, 5, 1), random_tensor(DType::Float32, {1, 7, 4}, 5, 2),
                  random_tensor(DType::Float32, {7, 2}, 5, 3), random_tensor(DType::Float32, {3, 1, 7}, 5, 4),
                  std::nullopt, false);
}

TEST(FusedAttention, RowWithNoVisibleKeyGivesZero) {
  Tensor hide = Tensor::zeros(DType::Bool, {2, 3});  // row 0 sees nothing, row 1 sees key 2
  hide.data<bool>()[5] = true;
  Tensor got = run_op_tensor(OpKind::kAttention, {{"query", random_tensor(DType::Float32, {2, 4}, 6, 1)},
                                                  {"key", random_tensor(DType::Float32, {3, 4}, 6, 2)},
                                                  {"value", iota(DType::Float32, {3, 2})},
                                                  {"attn_mask", hide}});
  expect_close(got, {0, 0, 4, 5}, 1e-6);
}

TEST(FusedAttention, RefusesDropout) {
  const Tensor t = random_tensor(DType::Float32, {2, 4}, 7, 1);
  expect_error(OpKind::kAttention, {{"query", t}, {"key", t}, {"value", t}, {"dropout_p", F(0.1)}}, "dropout_p");
}

TEST(FusedSiluMul, IsSiluTimesB) {
  const Tensor a = random_tensor(DType::Float32, {3, 8}, 8, 1, 4.0);
  const Tensor b = random_tensor(DType::Float32, {8}, 8, 2);  // broadcast over rows
  Tensor got = run_op_tensor(OpKind::kSiluMul, {{"a", a}, {"b", b}});
  std::vector<double> want;
  for (int64_t i = 0; i < 24; ++i) {
    const double x = a.value_at(i);
    want.push_back(x / (1 + std::exp(-x)) * b.value_at(i % 8));
  }
  EXPECT_EQ(got.sizes(), (Shape{3, 8}));
  expect_close(got, want, 1e-6);
}

TEST(FusedSiluMul, RoundsLikeTheTwoOpsInReducedPrecision) {
  for (DType dt : {DType::BFloat16, DType::Float16, DType::Float32}) {
    const Tensor a = random_tensor(dt, {4, 16}, 9, 1, 6.0);
    const Tensor b = random_tensor(dt, {4, 16}, 9, 2, 3.0);
    Tensor silu = run_op_tensor(OpKind::kSilu, {{"self", a}});
    Tensor want = run_op_tensor(OpKind::kMulTensor, {{"self", silu}, {"other", b}});
    Tensor got = run_op_tensor(OpKind::kSiluMul, {{"a", a}, {"b", b}});
    ASSERT_EQ(got.dtype(), dt);
    EXPECT_EQ(values(got), values(want)) << dtype_name(dt);
  }
}

TEST(FusedSiluMul, RefusesMixedDtypes) {
  expect_error(OpKind::kSiluMul,
               {{"a", random_tensor(DType::Float16, {2}, 1, 1)}, {"b", random_tensor(DType::Float32, {2}, 1, 2)}},
               "dtype");
}

TEST(FusedConvAct, EqualsConvolutionThenActivation) {
  const Tensor x = random_tensor(DType::Float32, {2, 4, 6, 6}, 10, 1, 2.0);
  const Tensor w = random_tensor(DType::Float32, {6, 2, 3, 3}, 10, 2);
  const Tensor b = random_tensor(DType::Float32, {6}, 10, 3);
  const std::vector<std::pair<std::string, OpArg>> conv = {
      {"input", x},           {"weight", w},           {"bias", b},     {"stride", Ints({2, 1})},
      {"padding", Ints({1})}, {"dilation", Ints({1})}, {"groups", I(2)}};
  auto conv_out = run_op(OpKind::kConvolution, conv);
  ASSERT_TRUE(conv_out.has_value()) << conv_out.status().message();
  const Tensor c = output(*conv_out, 0);
  struct Case {
    const char* name;
    OpKind op;
    std::vector<std::pair<std::string, OpArg>> extra;
  };
  const std::vector<Case> cases = {
      {"relu", OpKind::kRelu, {}},       {"hardtanh", OpKind::kHardtanh, {{"min_val", F(0.0)}, {"max_val", F(6.0)}}},
      {"silu", OpKind::kSilu, {}},       {"hardswish", OpKind::kHardswish, {}},
      {"gelu", OpKind::kGelu, {}},       {"gelu_tanh", OpKind::kGelu, {{"approximate", S("tanh")}}},
      {"sigmoid", OpKind::kSigmoid, {}},
  };
  for (const Case& cs : cases) {
    std::vector<std::pair<std::string, OpArg>> act = {{"self", c}};
    std::vector<std::pair<std::string, OpArg>> fused = conv;
    fused.push_back({"activation", S(cs.name)});
    for (const auto& e : cs.extra) {
      act.push_back(e);
      if (e.first != "approximate") fused.push_back(e);
    }
    Tensor want = run_op_tensor(cs.op, act);
    Tensor got = run_op_tensor(OpKind::kConvAct, fused);
    EXPECT_EQ(got.sizes(), want.sizes()) << cs.name;
    EXPECT_EQ(values(got), values(want)) << cs.name;
  }
}

TEST(FusedConvAct, OneDimensionalAndDefaultHardtanhBounds) {
  const Tensor x = random_tensor(DType::Float32, {1, 2, 9}, 11, 1, 3.0);
  const Tensor w = random_tensor(DType::Float32, {3, 2, 2}, 11, 2);
  Tensor c = run_op_tensor(OpKind::kConv1d, {{"input", x}, {"weight", w}});
  Tensor want = run_op_tensor(OpKind::kHardtanh, {{"self", c}});
  Tensor got = run_op_tensor(OpKind::kConvAct, {{"input", x}, {"weight", w}, {"activation", S("hardtanh")}});
  EXPECT_EQ(values(got), values(want));
}

TEST(FusedConvAct, RefusesUnknownActivationAndTransposed) {
  const Tensor x = random_tensor(DType::Float32, {1, 2, 4, 4}, 12, 1);
  const Tensor w = random_tensor(DType::Float32, {2, 2, 1, 1}, 12, 2);
  expect_error(OpKind::kConvAct, {{"input", x}, {"weight", w}, {"activation", S("tanh")}}, "unknown activation");
  expect_error(OpKind::kConvAct, {{"input", x}, {"weight", w}, {"transposed", B(true)}, {"activation", S("relu")}},
               "transposed");
}

}  // namespace
}  // namespace kiln::cpu::testing
