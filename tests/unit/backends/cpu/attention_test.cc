#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "unit/backends/cpu/run_op.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using testing::B;
using testing::expect_close;
using testing::expect_error_names_node;
using testing::F;
using testing::make_tensor;
using testing::run_op;
using testing::run_op_tensor;

// Random inputs: stream 11 of testing::random_tensor.
Tensor random_tensor(DType t, Shape shape, uint32_t seed) {
  return testing::random_tensor(t, std::move(shape), seed, /*stream=*/11);
}

// Element (b, h, i, j) of a [B?, H?, R, C] tensor, where a size-1 (or missing) batch/head dim broadcasts.
double at4(const Tensor& t, int64_t b, int64_t h, int64_t i, int64_t j) {
  Shape s = t.sizes();
  while (s.size() < 4) s.insert(s.begin(), 1);
  const int64_t bb = s[0] == 1 ? 0 : b, hh = s[1] == 1 ? 0 : h, ii = s[2] == 1 ? 0 : i, jj = s[3] == 1 ? 0 : j;
  return t.value_at(((bb * s[1] + hh) * s[2] + ii) * s[3] + jj);
}

struct RefOptions {
  int64_t batch = 1, heads = 1;
  double scale = 0;  // 0: 1/sqrt(E)
  bool causal = false;
  int64_t kv_group = 1;                                                // query head h reads key/value head h / kv_group
  std::function<double(int64_t, int64_t, int64_t, int64_t)> mask_add;  // additive; -inf masks out
};

// Attention by its definition, one query row at a time. A row with every key masked gives zeros.
std::vector<double> reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, const RefOptions& o) {
  const int64_t L = q.size(-2), E = q.size(-1), S = k.size(-2), Ev = v.size(-1);
  const double scale = o.scale != 0 ? o.scale : 1 / std::sqrt(static_cast<double>(E));
  std::vector<double> out;
  for (int64_t b = 0; b < o.batch; ++b)
    for (int64_t h = 0; h < o.heads; ++h)
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> logits(static_cast<size_t>(S));
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < E; ++e) dot += at4(q, b, h, i, e) * at4(k, b, h / o.kv_group, j, e);
          double l = dot * scale;
          if (o.mask_add) l += o.mask_add(b, h, i, j);
          if (o.causal && j > i) l = -std::numeric_limits<double>::infinity();
          logits[static_cast<size_t>(j)] = l;
          mx = std::max(mx, l);
        }
        double denom = 0;
        for (double l : logits) denom += std::isinf(mx) ? 0 : std::exp(l - mx);
        for (int64_t c = 0; c < Ev; ++c) {
          double acc = 0;
          if (!std::isinf(mx))
            for (int64_t j = 0; j < S; ++j)
              acc += std::exp(logits[static_cast<size_t>(j)] - mx) / denom * at4(v, b, h / o.kv_group, j, c);
          out.push_back(acc);
        }
      }
  return out;
}

TEST(AttentionKernels, DefaultAndExplicitScale) {
  Tensor q = random_tensor(DType::Float32, {2, 3, 5, 8}, 1), k = random_tensor(DType::Float32, {2, 3, 7, 8}, 2);
  Tensor v = random_tensor(DType::Float32, {2, 3, 7, 6}, 3);
  Tensor out = run_op_tensor(OpKind::kScaledDotProductAttention, {{"query", q}, {"key", k}, {"value", v}});
  EXPECT_EQ(out.sizes(), (Shape{2, 3, 5, 6}));
  RefOptions o;
  o.batch = 2, o.heads = 3;
  expect_close(out, reference_attention(q, k, v, o), 1e-5);
  Tensor scaled =
      run_op_tensor(OpKind::kScaledDotProductAttention, {{"query", q}, {"key", k}, {"value", v}, {"scale", F(1.7)}});
  o.scale = 1.7;
  expect_close(scaled, reference_attention(q, k, v, o), 1e-5);
}

TEST(AttentionKernels, CausalIsTopLeftAligned) {
  for (auto [L, S] : {std::pair<int64_t, int64_t>{5, 7}, {7, 5}, {4, 4}}) {
    Tensor q = random_tensor(DType::Float64, {1, 2, L, 4}, 4), k = random_tensor(DType::Float64, {1, 2, S, 4}, 5);
    Tensor v = random_tensor(DType::Float64, {1, 2, S, 3}, 6);
    Tensor out = run_op_tensor(OpKind::kScaledDotProductAttention,
                               {{"query", q}, {"key", k}, {"value", v}, {"is_causal", B(true)}});
    RefOptions o;
    o.heads = 2, o.causal = true;
    expect_close(out, reference_attention(q, k, v, o), 1e-12);
    // Query row 0 sees only key 0, so its output is value row 0.
    for (int64_t c = 0; c < 3; ++c) EXPECT_NEAR(out.value_at(c), v.value_at(c), 1e-12);
  }
}

TEST(AttentionKernels, BoolMaskAndFullyMaskedRows) {
  Tensor q = random_tensor(DType::Float32, {2, 2, 4, 8}, 7), k = random_tensor(DType::Float32, {2, 2, 6, 8}, 8);
  Tensor v = random_tensor(DType::Float32, {2, 2, 6, 5}, 9);
  // [L, S] mask broadcast over batch and heads; row 2 attends to nothing.
  std::vector<double> m(24);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) m[static_cast<size_t>(i * 6 + j)] = i != 2 && (i + j) % 3 != 0;
  Tensor mask = make_tensor(DType::Bool, {4, 6}, m);
  Tensor out =
      run_op_tensor(OpKind::kScaledDotProductAttention, {{"query", q}, {"key", k}, {"value", v}, {"attn_mask", mask}});
  RefOptions o;
  o.batch = 2, o.heads = 2;
  o.mask_add = [&](int64_t, int64_t, int64_t i, int64_t j) {
    return m[static_cast<size_t>(i * 6 + j)] ? 0.0 : -std::numeric_limits<double>::infinity();
  };
  std::vector<double> want = reference_attention(q, k, v, o);
  expect_close(out, want, 1e-5);
  // PyTorch (2.5+) gives zeros, not NaN, for a query that may attend to no key.
  for (int64_t c = 0; c < 5; ++c) EXPECT_EQ(out.value_at(2 * 5 + c), 0.0);
}

TEST(AttentionKernels, FloatMaskBroadcastOverHeads) {
  Tensor q = random_tensor(DType::Float32, {2, 3, 4, 8}, 10), k = random_tensor(DType::Float32, {2, 3, 5, 8}, 11);
  Tensor v = random_tensor(DType::Float32, {2, 3, 5, 8}, 12);
  Tensor mask = random_tensor(DType::Float32, {2, 1, 4, 5}, 13);
  Tensor out =
      run_op_tensor(OpKind::kScaledDotProductAttention, {{"query", q}, {"key", k}, {"value", v}, {"attn_mask", mask}});
  RefOptions o;
  o.batch = 2, o.heads = 3;
  o.mask_add = [&](int64_t b, int64_t h, int64_t i, int64_t j) { return at4(mask, b, h, i, j); };
  expect_close(out, reference_attention(q, k, v, o), 1e-5);
  // A key-padding style mask [S] broadcasts too.
  Tensor row_mask = make_tensor(DType::Float32, {5}, {0, -1e9, 0, 0, -1e9});
  Tensor out2 = run_op_tensor(OpKind::kScaledDotProductAttention,
                              {{"query", q}, {"key", k}, {"value", v}, {"attn_mask", row_mask}});
  o.mask_add = [&](int64_t, int64_t, int64_t, int64_t j) { return row_mask.value_at(j); };
  expect_close(out2, reference_attention(q, k, v, o), 1e-5);
}

TEST(AttentionKernels, GroupedQueryAttention) {
  Tensor q = random_tensor(DType::Float32, {2, 6, 3, 8}, 14), k = random_tensor(DType::Float32, {2, 2, 5, 8}, 15);
  Tensor v = random_tensor(DType::Float32, {2, 2, 5, 4}, 16);
  Tensor out = run_op_tensor(OpKind::kScaledDotProductAttention,
                             {{"query", q}, {"key", k}, {"value", v}, {"is_causal", B(true)}, {"enable_gqa", B(true)}});
  EXPECT_EQ(out.sizes(), (Shape{2, 6, 3, 4}));
  RefOptions o;
  o.batch = 2, o.heads = 6, o.kv_group = 3, o.causal = true;
  expect_close(out, reference_attention(q, k, v, o), 1e-5);
  // Without enable_gqa the head counts must broadcast.
  expect_error_names_node(run_op(OpKind::kScaledDotProductAttention, {{"query", q}, {"key", k}, {"value", v}}));
  expect_error_names_node(run_op(
      OpKind::kScaledDotProductAttention,
      {{"query", random_tensor(DType::Float32, {2, 5, 3, 8}, 1)}, {"key", k}, {"value", v}, {"enable_gqa", B(true)}}));
}

TEST(AttentionKernels, LowerRankAndBroadcastBatch) {
  // [L, E] query against [B, S, E] keys: batch dims broadcast as in matmul.
  Tensor q = random_tensor(DType::Float32, {3, 4}, 17), k = random_tensor(DType::Float32, {2, 5, 4}, 18);
  Tensor v = random_tensor(DType::Float32, {2, 5, 2}, 19);
  Tensor out = run_op_tensor(OpKind::kScaledDotProductAttention, {{"query", q}, {"key", k}, {"value", v}});
  EXPECT_EQ(out.sizes(), (Shape{2, 3, 2}));
  RefOptions o;
  o.heads = 2;  // at4 reads the leading dim of the 3-d tensors as "heads"
  expect_close(out, reference_attention(q, k, v, o), 1e-5);
}

TEST(AttentionKernels, ReducedPrecision) {
  for (DType t : {DType::Float16, DType::BFloat16}) {
    Tensor q = random_tensor(t, {1, 2, 4, 16}, 20), k = random_tensor(t, {1, 2, 6, 16}, 21);
    Tensor v = random_tensor(t, {1, 2, 6, 8}, 22);
    Tensor mask = make_tensor(DType::Bool, {4, 6}, std::vector<double>(24, 1.0));
    Tensor out = run_op_tensor(OpKind::kScaledDotProductAttention,
                               {{"query", q}, {"key", k}, {"value", v}, {"attn_mask", mask}});
    EXPECT_EQ(out.dtype(), t);
    RefOptions o;
    o.heads = 2;
    expect_close(out, reference_attention(q, k, v, o), t == DType::Float16 ? 3e-3 : 2e-2);
  }
}

TEST(AttentionKernels, Errors) {
  Tensor q = random_tensor(DType::Float32, {1, 2, 4, 8}, 23), k = random_tensor(DType::Float32, {1, 2, 5, 8}, 24);
  Tensor v = random_tensor(DType::Float32, {1, 2, 5, 8}, 25);
  auto dropout =
      run_op(OpKind::kScaledDotProductAttention, {{"query", q}, {"key", k}, {"value", v}, {"dropout_p", F(0.1)}});
  ASSERT_FALSE(dropout.has_value());
  EXPECT_EQ(dropout.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(dropout.status().message().find("test_node"), std::string::npos);
  Tensor mask = make_tensor(DType::Bool, {4, 5}, std::vector<double>(20, 1));
  expect_error_names_node(
      run_op(OpKind::kScaledDotProductAttention,
             {{"query", q}, {"key", k}, {"value", v}, {"attn_mask", mask}, {"is_causal", B(true)}}));
  expect_error_names_node(
      run_op(OpKind::kScaledDotProductAttention,
             {{"query", q}, {"key", random_tensor(DType::Float32, {1, 2, 5, 7}, 1)}, {"value", v}}));
  expect_error_names_node(
      run_op(OpKind::kScaledDotProductAttention,
             {{"query", q}, {"key", k}, {"value", random_tensor(DType::Float32, {1, 2, 6, 8}, 1)}}));
  expect_error_names_node(
      run_op(OpKind::kScaledDotProductAttention,
             {{"query", q}, {"key", k}, {"value", v}, {"attn_mask", make_tensor(DType::Bool, {4, 4}, {})}}));
  expect_error_names_node(
      run_op(OpKind::kScaledDotProductAttention, {{"query", q}, {"key", k.to(DType::Float64)}, {"value", v}}));
  expect_error_names_node(
      run_op(OpKind::kScaledDotProductAttention,
             {{"query", q}, {"key", k}, {"value", v}, {"attn_mask", make_tensor(DType::Int64, {4, 5}, {})}}));
}

}  // namespace
}  // namespace kiln::cpu
