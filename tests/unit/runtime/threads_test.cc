// The threading contract (kiln.h): one Program is shared by any number of
// sessions on any threads; each session is used by one thread at a time.
// Many sessions of one program on many threads give exactly the results of
// the same calls made serially.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "base/safetensors.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

const std::string kFixtures = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";

// Every step of the fixture's calls on one fresh session: the outputs and the final buffers.
std::vector<Tensor> run_all(const std::shared_ptr<const Program>& p, const SafetensorsFile& io) {
  Session s(p);
  std::vector<Tensor> got;
  for (int k = 0;; ++k) {
    const std::string pre = "step" + std::to_string(k) + ".";
    std::vector<Tensor> in;
    for (int i = 0; io.find(pre + "input." + std::to_string(i)); ++i)
      in.push_back(*io.find(pre + "input." + std::to_string(i)));
    if (in.empty()) break;
    auto out = s.run(in);
    if (!out) {
      ADD_FAILURE() << out.status().message();
      return got;
    }
    for (Tensor& t : *out) got.push_back(t.contiguous());
  }
  for (const std::string& b : p->mutated_buffers()) got.push_back(s.buffer(b)->contiguous());
  return got;
}

bool bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].dtype() != b[i].dtype() || a[i].sizes() != b[i].sizes() ||
        std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].nbytes()) != 0)
      return false;
  return true;
}

TEST(Threads, ManySessionsOfOneProgramMatchSerialRuns) {
  for (const char* name : {"llama_generate", "cache_writes", "bert_dynseq", "conv_state"}) {
    auto p = compile(kFixtures + name + ".pt2");
    ASSERT_TRUE(p.has_value()) << p.status().message();
    auto io = read_safetensors(kFixtures + name + ".io.safetensors");
    ASSERT_TRUE(io.has_value());
    const std::vector<Tensor> serial = run_all(*p, *io);
    ASSERT_FALSE(serial.empty());
    constexpr int kThreads = 8, kRepeats = 3;
    std::vector<int> matches(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        for (int r = 0; r < kRepeats; ++r) matches[t] += bitwise_equal(run_all(*p, *io), serial);
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(matches[t], kRepeats) << name << ", thread " << t;
  }
}

}  // namespace
}  // namespace kiln
