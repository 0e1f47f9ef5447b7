// The .kiln program file: round trip, and every kind of damage refused with
// a message, whether the checksums catch it or the validation behind them.
#include "program/kiln_file.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "base/section_file.h"
#include "compiler/compiler.h"
#include "frontend/pt2_loader.h"
#include "ir/printer.h"
#include "lowering/pipeline.h"
#include "runtime/executable.h"

namespace kiln::program {
namespace {

using nlohmann::json;

const std::string kFixture = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/nonzero_middle.pt2";

CompiledProgram compile_fixture() {
  auto m = frontend::load_pt2(kFixture);
  EXPECT_TRUE(m.has_value()) << m.status().message();
  EXPECT_TRUE(lowering::run_pipeline(*m, lowering::default_pipeline()).is_ok());
  auto p = compiler::compile_module(std::move(*m), {});
  EXPECT_TRUE(p.has_value()) << p.status().message();
  return std::move(*p);
}

const std::vector<uint8_t>& good_bytes() {
  static const std::vector<uint8_t> bytes = [] {
    auto b = serialize_program(compile_fixture());
    EXPECT_TRUE(b.has_value());
    return *b;
  }();
  return bytes;
}

// Rewrites one section of a good file (the others kept), with valid checksums.
std::vector<uint8_t> with_section(const std::string& name, const std::function<void(std::string&)>& edit) {
  auto f = SectionFile::parse(good_bytes(), kProgramMagic, kProgramVersion, "good");
  EXPECT_TRUE(f.has_value());
  SectionFileWriter w(kProgramMagic, kProgramVersion);
  for (const std::string& n : f->names()) {
    auto b = f->section(n);
    std::string s(b->begin(), b->end());
    if (n == name) edit(s);
    EXPECT_TRUE(w.add(n, std::vector<uint8_t>(s.begin(), s.end())).is_ok());
  }
  return w.finish();
}

std::vector<uint8_t> with_program_json(const std::function<void(json&)>& edit) {
  return with_section("program", [&](std::string& s) {
    json j = json::parse(s);
    edit(j);
    s = j.dump();
  });
}

void expect_refused(const std::vector<uint8_t>& bytes, const std::string& needle) {
  auto p = parse_program(bytes, nullptr, "bad.kiln");
  ASSERT_FALSE(p.has_value()) << "accepted a file that should mention: " << needle;
  EXPECT_EQ(p.status().code(), ErrorCode::kFormat) << p.status().message();
  EXPECT_NE(p.status().message().find("bad.kiln"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find(needle), std::string::npos) << p.status().message();
}

TEST(KilnFile, RoundTripKeepsGraphSignatureWeightsAndSegments) {
  CompiledProgram a = compile_fixture();
  auto bytes = serialize_program(a);
  ASSERT_TRUE(bytes.has_value());
  auto b = parse_program(*bytes, nullptr, "mem.kiln");
  ASSERT_TRUE(b.has_value()) << b.status().message();
  std::string why;
  EXPECT_TRUE(ir::graphs_equal(a.module.graph, b->module.graph, &why)) << why;
  EXPECT_EQ(ir::print_graph(a.module.graph), ir::print_graph(b->module.graph));
  ASSERT_EQ(a.module.input_specs.size(), b->module.input_specs.size());
  for (size_t i = 0; i < a.module.input_specs.size(); ++i) {
    EXPECT_EQ(a.module.input_specs[i].kind, b->module.input_specs[i].kind);
    EXPECT_EQ(a.module.input_specs[i].target, b->module.input_specs[i].target);
  }
  ASSERT_EQ(a.module.weights.size(), b->module.weights.size());
  for (const auto& [name, t] : a.module.weights) {
    const Tensor& u = b->module.weights.at(name);
    ASSERT_EQ(t.sizes(), u.sizes()) << name;
    ASSERT_EQ(t.dtype(), u.dtype()) << name;
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.value_at(i), u.value_at(i)) << name;
  }
  ASSERT_EQ(a.segments.size(), b->segments.size());
  for (size_t i = 0; i < a.segments.size(); ++i) {
    EXPECT_EQ(a.segments[i].kind, b->segments[i].kind);
    EXPECT_EQ(a.segments[i].nodes, b->segments[i].nodes);
    EXPECT_EQ(a.segments[i].inputs, b->segments[i].inputs);
    EXPECT_EQ(a.segments[i].outputs, b->segments[i].outputs);
    EXPECT_EQ(a.segments[i].reasons, b->segments[i].reasons);
    EXPECT_EQ(a.segments[i].plan, b->segments[i].plan);
  }
  EXPECT_EQ(a.module.symbols.size(), b->module.symbols.size());
  // Deterministic: the same program gives the same bytes.
  EXPECT_EQ(*bytes, *serialize_program(*b));
}

TEST(KilnFile, WeightsAreStoredOnceAndOnlyWhenUsed) {
  CompiledProgram a = compile_fixture();
  for (const auto& [name, t] : a.module.weights) {
    bool used = false;
    for (size_t i = 0; i < a.module.input_specs.size(); ++i)
      if (a.module.input_specs[i].target == name) used = true;
    EXPECT_TRUE(used) << "weight '" << name << "' is stored but no graph input reads it";
  }
  // Engine plans refer to weights by name; they never hold the bytes.
  size_t weight_bytes = 0;
  for (const auto& [name, t] : a.module.weights) weight_bytes += t.nbytes();
  size_t plan_bytes = 0;
  for (const auto& s : a.segments) plan_bytes += s.plan.size();
  EXPECT_GT(weight_bytes, 0u);
  EXPECT_LT(good_bytes().size(), weight_bytes + plan_bytes + 64 * 1024);
}

TEST(KilnFile, EveryTruncationIsRefused) {
  const auto& good = good_bytes();
  for (size_t n = 0; n < good.size(); n += (n < 512 ? 1 : 97)) {
    std::span<const uint8_t> cut(good.data(), n);
    auto p = parse_program(cut, nullptr, "cut.kiln");
    ASSERT_FALSE(p.has_value()) << "accepted the first " << n << " bytes";
    EXPECT_EQ(p.status().code(), ErrorCode::kFormat);
  }
}

TEST(KilnFile, EveryAlteredByteIsRefused) {
  std::vector<uint8_t> b = good_bytes();
  for (size_t i = 0; i < b.size(); i += (i < 512 ? 1 : 13)) {
    b[i] ^= 0x20;
    auto p = parse_program(b, nullptr, "flip.kiln");
    ASSERT_FALSE(p.has_value()) << "accepted a flip at byte " << i;
    b[i] ^= 0x20;
  }
}

// Behind the checksums: files whose bytes are consistent but whose contents are not.
TEST(KilnFile, InconsistentContentsAreRefused) {
  expect_refused(with_program_json([](json& j) { j["segments"][0]["nodes"][0] = 100000; }), "out of range");
  expect_refused(with_program_json([](json& j) { j["segments"][0]["inputs"][0] = -1; }), "out of range");
  expect_refused(with_program_json([](json& j) {
                   j["segments"][1]["nodes"] = json::array();
                   j["segments"][1]["reasons"] = json::array();
                 }),
                 "in no segment");
  expect_refused(with_program_json([](json& j) {
                   j["segments"][1]["nodes"].push_back(0);
                   j["segments"][1]["reasons"].push_back("x");
                 }),
                 "also in segment");
  expect_refused(with_program_json([](json& j) { j["segments"][1]["reasons"].push_back("x"); }), "fallback reasons");
  expect_refused(with_program_json([](json& j) { j["segments"][0]["kind"] = "magic"; }), "unknown kind");
  expect_refused(with_program_json([](json& j) { j["segments"][0]["plan"] = "plan.9"; }), "plan.9");
  expect_refused(with_program_json([](json& j) { j["weights"][0]["offset"] = 1 << 30; }), "outside the weights");
  expect_refused(with_program_json([](json& j) { j["weights"][0]["nbytes"] = 3; }), "do not hold its sizes");
  expect_refused(with_program_json([](json& j) { j["weights"][0]["dtype"] = "float7"; }), "float7");
  expect_refused(with_program_json([](json& j) { j["weights"].erase(0); }), "is missing");
  expect_refused(with_program_json([](json& j) { j["weights"][0]["sizes"] = {1, 2, 3, 4}; }), "");
  expect_refused(with_program_json([](json& j) { j["inputs"].erase(0); }), "signature");
  expect_refused(with_program_json([](json& j) { j["inputs"][0]["kind"] = "ghost"; }), "ghost");
  expect_refused(with_program_json([](json& j) { j.erase("device"); }), "device");
  expect_refused(with_program_json([](json& j) { j["format"] = "something else"; }), "not a kiln program");
  expect_refused(with_section("graph", [](std::string& s) { s = "graph(%x: float32[2]) {\n  garbage\n"; }), "graph");
  expect_refused(with_section("program", [](std::string& s) { s = "[1, 2"; }), "JSON");
}

// A well-formed file whose segments read values before they exist is refused when it is made runnable.
TEST(KilnFile, SegmentsOutOfDataflowOrderAreRefused) {
  auto bytes = with_program_json([](json& j) {
    std::swap(j["segments"][0], j["segments"][1]);
    j["segments"][0]["plan"] = "plan.1";
    j["segments"][1].erase("plan");
    j["segments"][1]["plan"] = "plan.0";
  });
  auto p = parse_program(bytes, nullptr, "order.kiln");
  ASSERT_TRUE(p.has_value()) << p.status().message();
  auto e = runtime::Executable::load(std::move(*p), "order.kiln");
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.status().message().find("before it"), std::string::npos) << e.status().message();
}

TEST(KilnFile, UnknownBackendIsRefusedWhenLoading) {
  auto bytes = with_program_json([](json& j) { j["segments"][0]["backend"] = "tpu"; });
  auto p = parse_program(bytes, nullptr, "tpu.kiln");
  ASSERT_TRUE(p.has_value()) << p.status().message();
  auto e = runtime::Executable::load(std::move(*p), "tpu.kiln");
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.status().message().find("'tpu'"), std::string::npos) << e.status().message();
}

// Seeded random damage behind valid checksums (bytes changed, inserted or
// dropped in the graph text and the program JSON): each file is refused with
// an error or loads into a runnable program; nothing crashes.
TEST(KilnFile, RandomDamageBehindValidChecksumsNeverCrashes) {
  std::mt19937 rng(20261129);
  int refused = 0, loaded = 0;
  for (int round = 0; round < 400; ++round) {
    const std::string section = round % 2 ? "graph" : "program";
    auto bytes = with_section(section, [&](std::string& s) {
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !s.empty(); ++e) {
        const size_t pos = rng() % s.size();
        switch (rng() % 3) {
          case 0: s[pos] = static_cast<char>(" %:,[](){}0123456789-x\"\n"[rng() % 24]); break;
          case 1: s.insert(pos, 1, static_cast<char>("0123456789-,%"[rng() % 13])); break;
          default: s.erase(pos, 1 + rng() % 8); break;
        }
      }
    });
    auto p = parse_program(bytes, nullptr, "fuzz.kiln");
    if (!p) {
      ++refused;
      EXPECT_NE(p.status().message().find("fuzz.kiln"), std::string::npos) << p.status().message();
      continue;
    }
    auto e = runtime::Executable::load(std::move(*p), "fuzz.kiln");
    e.has_value() ? ++loaded : ++refused;
  }
  EXPECT_GT(refused, 0);
  EXPECT_EQ(refused + loaded, 400);
}

}  // namespace
}  // namespace kiln::program
