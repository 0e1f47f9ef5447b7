// The .pt2 loader on real archives: signature, weights from both configs,
// shared storage, symbols, and errors that name what is wrong.
#include "frontend/pt2_loader.h"

#include <gtest/gtest.h>

namespace kiln::frontend {
namespace {

const std::string kDir = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";

TEST(Pt2Loader, TiedWeightsShareOneStorage) {
  auto m = load_pt2(kDir + "gpt2.pt2");
  ASSERT_TRUE(m.has_value()) << m.status().message();
  const Tensor& wte = m->weights.at("lm.transformer.wte.weight");
  const Tensor& head = m->weights.at("lm.lm_head.weight");
  EXPECT_EQ(wte.storage().get(), head.storage().get());
  EXPECT_EQ(wte.sizes(), head.sizes());
}

TEST(Pt2Loader, NonPersistentBuffersComeFromTheConstantsFolder) {
  auto m = load_pt2(kDir + "llama_decode.pt2");
  ASSERT_TRUE(m.has_value()) << m.status().message();
  bool saw_nonpersistent = false;
  for (const ir::InputSpec& s : m->input_specs) {
    if (s.kind != ir::InputSpec::Kind::kBuffer) continue;
    ASSERT_TRUE(m->weights.count(s.target)) << s.target;
    saw_nonpersistent |= !s.persistent;
  }
  EXPECT_TRUE(saw_nonpersistent);
  const Tensor& cache = m->weights.at("inner.key_cache_0");
  EXPECT_EQ(cache.dim(), 4);
}

TEST(Pt2Loader, BothDialectsAndSignatures) {
  auto train = load_pt2(kDir + "conv_state.pt2");
  auto aten = load_pt2(kDir + "conv_state.aten.pt2");
  ASSERT_TRUE(train.has_value() && aten.has_value());
  EXPECT_EQ(train->dialect, "TRAINING");
  EXPECT_EQ(aten->dialect, "ATEN");
  // The training graph writes buffers in place and returns only user outputs;
  // the ATen graph returns buffer mutations first.
  for (const auto& s : train->output_specs) EXPECT_EQ(s.kind, ir::OutputSpec::Kind::kUserOutput);
  ASSERT_GE(aten->output_specs.size(), 3u);
  EXPECT_EQ(aten->output_specs[0].kind, ir::OutputSpec::Kind::kBufferMutation);
  EXPECT_EQ(aten->output_specs[1].kind, ir::OutputSpec::Kind::kBufferMutation);
  EXPECT_EQ(aten->output_specs.back().kind, ir::OutputSpec::Kind::kUserOutput);
  EXPECT_EQ(train->torch_version.rfind("2.11", 0), 0u) << train->torch_version;
}

TEST(Pt2Loader, SymbolsCarryTheirRangesAndInputsTheirSymbolicSizes) {
  auto m = load_pt2(kDir + "bert_dynseq.pt2");
  ASSERT_TRUE(m.has_value()) << m.status().message();
  ASSERT_EQ(m->symbols.size(), 1u);
  const auto& [name, range] = *m->symbols.begin();
  EXPECT_EQ(range.min, 2);
  EXPECT_EQ(range.max, 32);
  bool symbolic_input = false;
  for (size_t i = 0; i < m->input_specs.size(); ++i)
    if (m->input_specs[i].kind == ir::InputSpec::Kind::kUserInput)
      for (const ir::Dim& d : m->graph.inputs()[i]->type.sizes)
        symbolic_input |= !d.is_static() && d.expr->to_string() == name;
  EXPECT_TRUE(symbolic_input);
}

TEST(Pt2Loader, JsonErrorsNameTheSource) {
  auto bad = parse_exported_program_json("{\"graph_module\": 3", "x.json");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("x.json: malformed JSON at byte"), std::string::npos);
  auto schema = parse_exported_program_json(R"({"schema_version": {"major": 7, "minor": 0}})", "old.json");
  ASSERT_FALSE(schema.has_value());
  EXPECT_NE(schema.status().message().find("schema version 7"), std::string::npos);
  auto no_graph = parse_exported_program_json(R"({"schema_version": {"major": 8, "minor": 17}})", "g.json");
  ASSERT_FALSE(no_graph.has_value());
  EXPECT_NE(no_graph.status().message().find("missing graph"), std::string::npos);
  // A number too large for a double is an error, not an escaping exception (found by fuzz_pt2_json).
  auto huge = parse_exported_program_json(R"({"schema_version": {"major": 1e5555555555555555555}})", "n.json");
  ASSERT_FALSE(huge.has_value());
  EXPECT_EQ(huge.status().code(), ErrorCode::kFormat);
  EXPECT_NE(huge.status().message().find("n.json: malformed JSON"), std::string::npos) << huge.status().message();
}

TEST(Pt2Loader, NotAnArchive) {
  auto m = load_pt2(kDir + "manifest.json");
  ASSERT_FALSE(m.has_value());
  EXPECT_NE(m.status().message().find("manifest.json"), std::string::npos);
}

}  // namespace
}  // namespace kiln::frontend
