// The hot set of loaded engines: an engine is reused for the same backend,
// plan and weight bytes, never for new weights; capacity and least-recent
// order bound it; backends that do not load onto a device of their own keep
// nothing. A CPU backend that claims a device of its own stands in for CUDA.
#include "runtime/engine_hot_set.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>

#include "backends/cpu/cpu_backend.h"
#include "support/network_text.h"

namespace kiln::runtime {
namespace {

using kiln::testing::network_from;

// The CPU backend, claiming a device of its own, counting loads.
class CountingBackend final : public engine::Backend {
 public:
  std::string_view name() const override { return "counting"; }
  const engine::TargetInfo& target() const override { return cpu_->target(); }
  bool loads_onto_device() const override { return true; }
  std::string load_settings() const override { return settings; }
  Expected<std::vector<uint8_t>> build(engine::Network n, const engine::BuildOptions& o) const override {
    return cpu_->build(std::move(n), o);
  }
  Expected<engine::EngineHandle> load(std::span<const uint8_t> plan, const engine::WeightLookup& w,
                                      std::string_view what) const override {
    ++loads;
    return cpu_->load(plan, w, what);
  }
  Status execute(const engine::ExecuteContext& c, engine::EngineHandle e, std::span<const Tensor> in,
                 std::vector<Tensor>& out) const override {
    return cpu_->execute(c, e, in, out);
  }
  void destroy(engine::EngineHandle e) const override { cpu_->destroy(e); }
  mutable std::atomic<int> loads{0};
  std::string settings = "graphs on";

 private:
  std::unique_ptr<engine::Backend> cpu_ = cpu::make_cpu_backend();
};

constexpr const char* kNet = R"(graph(%x: float32[2, 3], %w: float32[3, 2]) {
  %y: float32[2, 2] = aten.mm.default(self=%x, mat2=%w)
  return (%y)
}
)";

Tensor filled(std::vector<int64_t> sizes, float start) {
  Tensor t = Tensor::zeros(DType::Float32, sizes);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

engine::WeightLookup lookup(std::map<std::string, Tensor> weights) {
  return [weights](const std::string& name) -> Expected<Tensor> {
    auto it = weights.find(name);
    if (it == weights.end()) return not_found("no weight '" + name + "'");
    return it->second;
  };
}

// x [[0,1,2],[3,4,5]] times w.
std::vector<float> run(const engine::Engine& e) {
  std::vector<Tensor> in{filled({2, 3}, 0)}, out;
  EXPECT_TRUE(e.execute(in, out));
  std::vector<float> v;
  if (out.size() == 1)
    for (int64_t i = 0; i < out[0].numel(); ++i) v.push_back(out[0].data<float>()[i]);
  return v;
}

class HotSet : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = backend_.build(network_from(kNet, 1, {"w"}), {});
    ASSERT_TRUE(p.has_value()) << p.status().message();
    plan_ = std::move(*p);
  }
  CountingBackend backend_;
  std::vector<uint8_t> plan_;
};

TEST_F(HotSet, EqualWeightsReuseTheEngineNewWeightsLoadANewOne) {
  EngineHotSet set(4);
  bool reused = true;
  auto a = set.load(backend_, plan_, lookup({{"w", filled({3, 2}, 1)}}), "a", &reused);
  ASSERT_TRUE(a.has_value()) << a.status().message();
  EXPECT_FALSE(reused);
  // Equal bytes in other memory (another load of the same program) are the same weights.
  auto b = set.load(backend_, plan_, lookup({{"w", filled({3, 2}, 1)}}), "b", &reused);
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(reused);
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(backend_.loads, 1);
  // w = [[1,2],[3,4],[5,6]]: x w = [[13,16],[40,52]].
  EXPECT_EQ(run(**b), (std::vector<float>{13, 16, 40, 52}));

  // One changed weight value: a new engine, computing with the new weights.
  Tensor w2 = filled({3, 2}, 1);
  w2.data<float>()[5] = 7;
  auto c = set.load(backend_, plan_, lookup({{"w", w2}}), "c", &reused);
  ASSERT_TRUE(c.has_value());
  EXPECT_FALSE(reused);
  EXPECT_NE(a->get(), c->get());
  EXPECT_EQ(run(**c), (std::vector<float>{13, 18, 40, 57}));
  EXPECT_EQ(run(**a), (std::vector<float>{13, 16, 40, 52}));
  // Another plan with the same weights is another engine.
  auto other = backend_.build(network_from(R"(graph(%x: float32[2, 3], %w: float32[3, 2]) {
  %y: float32[2, 2] = aten.mm.default(self=%x, mat2=%w)
  %z: float32[2, 2] = aten.relu.default(self=%y)
  return (%z)
}
)",
                                           1, {"w"}),
                              {});
  ASSERT_TRUE(other.has_value());
  ASSERT_TRUE(set.load(backend_, *other, lookup({{"w", filled({3, 2}, 1)}}), "d", &reused).has_value());
  EXPECT_FALSE(reused);
  EXPECT_EQ(backend_.loads, 3);
  EXPECT_EQ(set.stats().reused, 1);
  EXPECT_EQ(set.stats().loaded, 3);
  EXPECT_EQ(set.stats().kept, 3u);
}

TEST_F(HotSet, CapacityKeepsTheMostRecentlyUsedAndZeroKeepsNothing) {
  EngineHotSet set(2);
  bool reused = false;
  auto weights = [](float start) { return lookup({{"w", filled({3, 2}, start)}}); };
  for (float s : {1.f, 2.f, 1.f, 3.f, 2.f, 1.f}) ASSERT_TRUE(set.load(backend_, plan_, weights(s), "x", &reused));
  // 1 and 2 load; 1 is reused, so 2 is the least recent and leaves when 3
  // loads; 2 loads again and 1 leaves; 1 loads again.
  EXPECT_EQ(backend_.loads, 5);
  EXPECT_EQ(set.stats().reused, 1);
  EXPECT_EQ(set.stats().kept, 2u);
  set.set_capacity(0);
  EXPECT_EQ(set.stats().kept, 0u);
  ASSERT_TRUE(set.load(backend_, plan_, weights(1), "x", &reused));
  ASSERT_TRUE(set.load(backend_, plan_, weights(1), "x", &reused));
  EXPECT_FALSE(reused);
  EXPECT_EQ(backend_.loads, 7);
}

TEST_F(HotSet, TheWeightBudgetBoundsWhatIsKept) {
  EngineHotSet set(8, 30);  // one engine's 24 bytes of weights fit, two do not
  bool reused = false;
  ASSERT_TRUE(set.load(backend_, plan_, lookup({{"w", filled({3, 2}, 1)}}), "a", &reused));
  EXPECT_EQ(set.stats().kept_bytes, 24u);
  ASSERT_TRUE(set.load(backend_, plan_, lookup({{"w", filled({3, 2}, 2)}}), "b", &reused));
  EXPECT_EQ(set.stats().kept, 1u);
  ASSERT_TRUE(set.load(backend_, plan_, lookup({{"w", filled({3, 2}, 2)}}), "b again", &reused));
  EXPECT_TRUE(reused);
  ASSERT_TRUE(set.load(backend_, plan_, lookup({{"w", filled({3, 2}, 1)}}), "a again", &reused));
  EXPECT_FALSE(reused) << "the engine beyond the budget was kept";
  set.set_capacity(8, 20);  // no engine fits
  EXPECT_EQ(set.stats().kept, 0u);
  ASSERT_TRUE(set.load(backend_, plan_, lookup({{"w", filled({3, 2}, 1)}}), "a", &reused));
  EXPECT_EQ(set.stats().kept, 0u);
}

TEST_F(HotSet, AnEngineLoadedUnderOtherLoadSettingsIsNotReused) {
  EngineHotSet set(8);
  bool reused = false;
  ASSERT_TRUE(set.load(backend_, plan_, lookup({{"w", filled({3, 2}, 1)}}), "a", &reused));
  backend_.settings = "graphs off";
  ASSERT_TRUE(set.load(backend_, plan_, lookup({{"w", filled({3, 2}, 1)}}), "b", &reused));
  EXPECT_FALSE(reused);
  backend_.settings = "graphs on";
  ASSERT_TRUE(set.load(backend_, plan_, lookup({{"w", filled({3, 2}, 1)}}), "c", &reused));
  EXPECT_TRUE(reused);
  EXPECT_EQ(backend_.loads, 2);
}

TEST_F(HotSet, AnEngineOutOfTheSetLivesWhileAProgramUsesIt) {
  EngineHotSet set(1);
  bool reused = false;
  auto a = set.load(backend_, plan_, lookup({{"w", filled({3, 2}, 1)}}), "a", &reused);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(set.load(backend_, plan_, lookup({{"w", filled({3, 2}, 2)}}), "b", &reused));
  EXPECT_EQ(set.stats().kept, 1u);
  EXPECT_EQ(run(**a), (std::vector<float>{13, 16, 40, 52}));
}

TEST_F(HotSet, BackendsWithoutADeviceOfTheirOwnKeepNothing) {
  EngineHotSet set(4);
  auto cpu = cpu::make_cpu_backend();
  bool reused = true;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(set.load(*cpu, plan_, lookup({{"w", filled({3, 2}, 1)}}), "cpu", &reused));
    EXPECT_FALSE(reused);
  }
  EXPECT_EQ(set.stats().kept, 0u);
}

TEST_F(HotSet, AMissingWeightIsTheBackendsErrorAndNothingIsKept) {
  EngineHotSet set(4);
  bool reused = true;
  auto e = set.load(backend_, plan_, lookup({}), "no weights", &reused);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.status().message().find("'w'"), std::string::npos) << e.status().message();
  EXPECT_EQ(set.stats().kept, 0u);
}

}  // namespace
}  // namespace kiln::runtime
