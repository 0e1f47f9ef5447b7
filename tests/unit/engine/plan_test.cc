#include "engine/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/section_file.h"
#include "ir/printer.h"

namespace kiln::engine {
namespace {

using nlohmann::json;

bool computes(const ir::Node& n) { return ir::op_category(n.op) == ir::OpCategory::kCompute; }

// One engine input x, three constants; an output that is a view, another
// written into x in place.
EnginePlan small_plan() {
  EnginePlan plan;
  plan.backend = "cpu";
  auto g = ir::parse_graph(R"(graph(%x: float32[2, 4], %w: float32[4, 4], %b: float32[4], %i: int64[1]) {
  %mm: float32[2, 4] = aten.mm.default(self=%x, mat2=%w)
  %a: float32[2, 4] = aten.add.Tensor(self=%mm, other=%b)
  %r: float32[2, 4] = aten.relu.default(self=%a)
  %v: float32[8] = aten.view.default(self=%r, size=[8])
  %s: float32[1, 4] = aten.slice.Tensor(self=%a, dim=0, start=0, end=1, step=1)
  %c: float32[2, 4] = kiln.cache_write(self=%x, dim=0, index=%i, source=%s)
  return (%v, %c)
}
)");
  EXPECT_TRUE(g.has_value()) << g.status().message();
  if (g.has_value()) plan.network.graph = std::move(*g);
  plan.network.num_inputs = 1;
  plan.network.constant_names = {"fc.weight", "fc.bias", "row"};
  plan.network.kernels = {"test.gemm", "test.add", "test.relu", "test.view", "test.view", "test.cache_write"};
  plan.memory = plan_memory(plan.network, computes);
  plan.aliases = {{1, 0}};
  plan.extra = {{"cpu.blob", {0, 1, 2, 255, 7}}, {"cpu.empty", {}}};
  return plan;
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

TEST(EnginePlan, RoundTripKeepsEverything) {
  const EnginePlan plan = small_plan();
  ASSERT_TRUE(plan.network.verify().is_ok());
  ASSERT_GT(plan.memory.arena_bytes, 0);  // mm is placed
  const std::vector<uint8_t> bytes = serialize_plan(plan);
  auto back = deserialize_plan(bytes, "cpu", "test plan");
  ASSERT_TRUE(back.has_value()) << back.status().message();

  EXPECT_EQ(back->backend, "cpu");
  std::string why;
  EXPECT_TRUE(ir::graphs_equal(back->network.graph, plan.network.graph, &why)) << why;
  EXPECT_EQ(ir::print_graph(back->network.graph), ir::print_graph(plan.network.graph));
  EXPECT_EQ(back->network.num_inputs, 1u);
  EXPECT_EQ(back->network.constant_names, plan.network.constant_names);
  EXPECT_EQ(back->network.kernels, plan.network.kernels);
  EXPECT_EQ(back->memory.offset, plan.memory.offset);
  EXPECT_EQ(back->memory.last_use, plan.memory.last_use);
  EXPECT_EQ(back->memory.arena_bytes, plan.memory.arena_bytes);
  EXPECT_EQ(back->memory.unshared_bytes, plan.memory.unshared_bytes);
  ASSERT_EQ(back->aliases.size(), 1u);
  EXPECT_EQ(back->aliases[0].output, 1);
  EXPECT_EQ(back->aliases[0].input, 0);
  EXPECT_EQ(back->extra, plan.extra);

  // Serializing what was read gives the same bytes.
  EXPECT_EQ(serialize_plan(*back), bytes);
}

TEST(EnginePlan, PlanOfAnotherBackendIsRefused) {
  const std::vector<uint8_t> bytes = serialize_plan(small_plan());
  auto r = deserialize_plan(bytes, "cuda", "test plan");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), ErrorCode::kFormat);
  EXPECT_TRUE(contains(r.status().message(), "'cpu'") && contains(r.status().message(), "'cuda'") &&
              contains(r.status().message(), "test plan"))
      << r.status().message();
}

TEST(EnginePlan, EveryTruncationIsRefused) {
  const std::vector<uint8_t> bytes = serialize_plan(small_plan());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = deserialize_plan(std::span<const uint8_t>(bytes.data(), n), "cpu", "cut plan");
    ASSERT_FALSE(r.has_value()) << "cut at " << n;
    EXPECT_EQ(r.status().code(), ErrorCode::kFormat) << "cut at " << n << ": " << r.status().message();
  }
}

TEST(EnginePlan, EveryFlippedByteIsRefused) {
  const std::vector<uint8_t> bytes = serialize_plan(small_plan());
  for (uint8_t mask : {uint8_t{0x01}, uint8_t{0xff}}) {
    for (size_t i = 0; i < bytes.size(); ++i) {
      std::vector<uint8_t> bad = bytes;
      bad[i] ^= mask;
      auto r = deserialize_plan(bad, "cpu", "flipped plan");
      ASSERT_FALSE(r.has_value()) << "byte " << i << " ^ " << int(mask);
      // A newer format version is unsupported; everything else is malformed.
      EXPECT_TRUE(r.status().code() == ErrorCode::kFormat || r.status().code() == ErrorCode::kUnsupported)
          << "byte " << i << ": " << r.status().to_string();
      EXPECT_FALSE(r.status().message().empty());
    }
  }
}

// The plan's sections with some replaced or dropped, written again with
// correct checksums.
std::vector<uint8_t> rebuild(const std::vector<uint8_t>& bytes, const std::map<std::string, std::string>& replace,
                             const std::vector<std::string>& drop = {}) {
  auto f = SectionFile::parse(bytes, kPlanMagic, kPlanVersion, "original");
  EXPECT_TRUE(f.has_value()) << f.status().message();
  if (!f.has_value()) return {};
  SectionFileWriter w(kPlanMagic, kPlanVersion);
  for (const std::string& name : f->names()) {
    if (std::find(drop.begin(), drop.end(), name) != drop.end()) continue;
    auto it = replace.find(name);
    std::vector<uint8_t> section;
    if (it != replace.end()) {
      section.assign(it->second.begin(), it->second.end());
    } else {
      auto s = f->section(name);
      EXPECT_TRUE(s.has_value());
      if (s.has_value()) section.assign(s->begin(), s->end());
    }
    EXPECT_TRUE(w.add(name, std::move(section)).is_ok());
  }
  return w.finish();
}

json section_json(const std::vector<uint8_t>& bytes, const char* name) {
  auto f = SectionFile::parse(bytes, kPlanMagic, kPlanVersion, "original");
  EXPECT_TRUE(f.has_value());
  auto s = f->section(name);
  EXPECT_TRUE(s.has_value());
  return json::parse(s->begin(), s->end());
}

class EnginePlanStructure : public ::testing::Test {
 protected:
  void SetUp() override {
    bytes_ = serialize_plan(small_plan());
    meta_ = section_json(bytes_, "meta");
    memory_ = section_json(bytes_, "memory");
  }

  // A file whose meta is `meta` must be refused with kFormat naming `mentions`.
  void expect_meta_refused(const json& meta, std::string_view mentions) {
    expect_refused(rebuild(bytes_, {{"meta", meta.dump()}}), mentions);
  }
  void expect_refused(const std::vector<uint8_t>& file, std::string_view mentions) {
    auto r = deserialize_plan(file, "cpu", "rebuilt plan");
    ASSERT_FALSE(r.has_value()) << "accepted; wanted an error naming " << mentions;
    EXPECT_EQ(r.status().code(), ErrorCode::kFormat) << r.status().to_string();
    EXPECT_TRUE(contains(r.status().message(), mentions)) << r.status().message() << "\nshould name " << mentions;
    EXPECT_TRUE(contains(r.status().message(), "rebuilt plan")) << r.status().message();
  }

  std::vector<uint8_t> bytes_;
  json meta_, memory_;
};

TEST_F(EnginePlanStructure, UnchangedRebuildIsAccepted) {
  // The rebuilt files below differ from a good one only where each test says.
  auto r = deserialize_plan(rebuild(bytes_, {{"meta", meta_.dump()}, {"memory", memory_.dump()}}), "cpu", "rebuilt");
  ASSERT_TRUE(r.has_value()) << r.status().message();
}

TEST_F(EnginePlanStructure, MoreInputsThanTheGraphHas) {
  json m = meta_;
  m["num_inputs"] = 4;
  expect_meta_refused(m, "4 inputs");
  m["num_inputs"] = -1;
  expect_meta_refused(m, "-1 inputs");
  m["num_inputs"] = "1";
  expect_meta_refused(m, "num_inputs");
  // Counts that fit the graph but not the constants.
  m["num_inputs"] = 2;
  expect_meta_refused(m, "constants");
}

TEST_F(EnginePlanStructure, KernelListOfTheWrongLength) {
  json m = meta_;
  m["kernels"] = {"a", "b", "c"};
  expect_meta_refused(m, "kernel");
  m["kernels"] = {"a", "b", "c", "d", "e"};
  expect_meta_refused(m, "kernel");
  m["kernels"] = {"a", "b", "c", 4};
  expect_meta_refused(m, "kernels");
  m.erase("kernels");
  expect_meta_refused(m, "kernels");
}

TEST_F(EnginePlanStructure, AliasOutOfRange) {
  json m = meta_;
  m["aliases"] = json::array({json::array({2, 0})});  // two outputs
  expect_meta_refused(m, "alias of output 2");
  m["aliases"] = json::array({json::array({0, 1})});  // one engine input; input 1 is a constant
  expect_meta_refused(m, "into input 1");
  m["aliases"] = json::array({json::array({-1, 0})});
  expect_meta_refused(m, "out of range");
  m["aliases"] = json::array({json::array({0})});
  expect_meta_refused(m, "aliases");
  m["aliases"] = json::array({json::array({0, "0"})});
  expect_meta_refused(m, "aliases");
}

// An alias index past int's range must not wrap into range.
TEST_F(EnginePlanStructure, AliasIndexPastIntRange) {
  json m = meta_;
  m["aliases"] = json::array({json::array({int64_t{1} << 32, 0})});
  expect_meta_refused(m, "out of range");
}

TEST_F(EnginePlanStructure, ConstantsAndBackendMustBeWellTyped) {
  json m = meta_;
  m["constants"] = {"fc.weight", 3};
  expect_meta_refused(m, "constants");
  m = meta_;
  m["constants"] = {"fc.weight"};
  expect_meta_refused(m, "constants");
  m = meta_;
  m["backend"] = 1;
  expect_meta_refused(m, "backend");
  expect_refused(rebuild(bytes_, {{"meta", "{\"backend\": \"cpu\""}}), "meta");
  expect_refused(rebuild(bytes_, {{"meta", "[1, 2]"}}), "meta");
}

TEST_F(EnginePlanStructure, LayersThatDoNotParse) {
  expect_refused(rebuild(bytes_, {{"layers", "graph(%x: float32[2]) {\n  return (%nope)\n}\n"}}), "layer graph");
  expect_refused(rebuild(bytes_, {{"layers", ""}}), "layer graph");
  expect_refused(
      rebuild(bytes_,
              {{"layers",
                "graph(%x: float32[2, 4]) {\n  %y: float32[2, 4] = aten.nope.default(self=%x)\n  return (%y)\n}\n"}}),
      "layer graph");
  // A layer graph that parses but does not match the meta's counts.
  expect_refused(rebuild(bytes_, {{"layers", "graph(%x: float32[2, 4]) {\n  return (%x)\n}\n"}}), "inputs");
}

TEST_F(EnginePlanStructure, MemoryPlanThatDoesNotFitTheLayers) {
  json mem = memory_;
  mem["offset"].erase(mem["offset"].size() - 1);
  expect_refused(rebuild(bytes_, {{"memory", mem.dump()}}), "memory plan");
  mem = memory_;
  for (auto& o : mem["offset"])
    if (o.get<int64_t>() >= 0) o = memory_["arena_bytes"].get<int64_t>() + 64;
  expect_refused(rebuild(bytes_, {{"memory", mem.dump()}}), "offset");
  mem = memory_;
  mem["arena_bytes"] = "64";
  expect_refused(rebuild(bytes_, {{"memory", mem.dump()}}), "arena_bytes");
  mem = memory_;
  mem["last_use"] = {1, 2};
  expect_refused(rebuild(bytes_, {{"memory", mem.dump()}}), "memory plan");
  // An arena larger than all its values apart would be an allocation sized by the file alone.
  mem = memory_;
  mem["arena_bytes"] = int64_t{1} << 41;
  expect_refused(rebuild(bytes_, {{"memory", mem.dump()}}), "need at most");
  expect_refused(rebuild(bytes_, {{"memory", "not json"}}), "memory");
}

// A missing section is a malformed plan: kFormat naming the section.
TEST_F(EnginePlanStructure, MissingSectionIsAFormatError) {
  expect_refused(rebuild(bytes_, {}, {"memory"}), "memory");
  expect_refused(rebuild(bytes_, {}, {"layers"}), "layers");
  expect_refused(rebuild(bytes_, {}, {"meta"}), "meta");
}

TEST_F(EnginePlanStructure, MissingSectionIsRefused) {
  for (const char* name : {"meta", "layers", "memory"}) {
    auto r = deserialize_plan(rebuild(bytes_, {}, {name}), "cpu", "rebuilt plan");
    ASSERT_FALSE(r.has_value()) << name;
    EXPECT_TRUE(contains(r.status().message(), name)) << r.status().message();
  }
}

}  // namespace
}  // namespace kiln::engine
