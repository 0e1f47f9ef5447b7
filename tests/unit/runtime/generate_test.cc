// kiln::generate against greedy decoding written out by hand over the same
// program's session calls (each token the first maximum of the last logits,
// fed back with its position), and its stop at the end-of-sequence token.
#include <gtest/gtest.h>

#include "kiln/compiler.h"
#include "kiln/llm.h"

namespace kiln {
namespace {

const std::string kModel = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/llama_generate.pt2";

Tensor scalar_ids(std::vector<int64_t> v, Shape sizes) {
  Tensor t = Tensor::zeros(DType::Int64, std::move(sizes));
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

// Greedy decoding by hand: the prompt one token a call, then each new token
// the argmax of the last logits (the first of equal maxima).
std::vector<int64_t> by_hand(const std::shared_ptr<const Program>& p, const std::vector<int64_t>& prompt, int n) {
  Session s(p);
  std::vector<int64_t> out;
  int64_t pos = 0, next = -1;
  auto step = [&](int64_t token) {
    auto r = s.run({scalar_ids({token}, {1, 1}), scalar_ids({pos++}, {1})});
    EXPECT_TRUE(r.has_value()) << r.status().message();
    const Tensor logits = (*r)[0];
    const float* x = logits.data<float>();
    int64_t best = 0;
    for (int64_t i = 1; i < logits.numel(); ++i)
      if (x[i] > x[best]) best = i;
    next = best;
  };
  for (int64_t t : prompt) step(t);
  for (int k = 0; k < n; ++k) {
    out.push_back(next);
    if (k + 1 < n) step(next);
  }
  return out;
}

TEST(Generate, GreedyTokensAreTheHandWrittenLoopsAndStopAtEos) {
  auto p = compile(kModel);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  const std::vector<int64_t> prompt{1, 2, 3};
  const std::vector<int64_t> want = by_hand(*p, prompt, 12);
  Session s(*p);
  GenerateOptions o;
  o.max_new_tokens = 12;
  std::vector<int64_t> streamed;
  o.on_token = [&](int64_t t) { streamed.push_back(t); };
  auto g = generate(s, prompt, o);
  ASSERT_TRUE(g.has_value()) << g.status().message();
  EXPECT_EQ(g->tokens, want);
  EXPECT_EQ(streamed, want);
  EXPECT_EQ(g->token_ms.size() + 1, want.size());
  EXPECT_FALSE(g->on_device);

  // Stopping at the fifth token's value: the tokens up to its first appearance.
  const int64_t eos = want[4];
  const size_t first = static_cast<size_t>(std::find(want.begin(), want.end(), eos) - want.begin());
  Session again(*p);
  o.eos_id = eos;
  o.on_token = nullptr;
  auto stopped = generate(again, prompt, o);
  ASSERT_TRUE(stopped.has_value()) << stopped.status().message();
  EXPECT_EQ(stopped->tokens, std::vector<int64_t>(want.begin(), want.begin() + static_cast<long>(first) + 1));

  // A prompt and new tokens past the cache (32 positions) are refused.
  Session small(*p);
  o.eos_id.reset();
  auto too_long = generate(small, std::vector<int64_t>(40, 1), o);
  ASSERT_FALSE(too_long.has_value());
  EXPECT_FALSE(too_long.status().message().empty());
}

}  // namespace
}  // namespace kiln
