// The .pt2 loader on real archives: signature, weights from both configs,
// shared storage, symbols, and errors that name what is wrong.
#include "frontend/pt2_loader.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "frontend/zip_reader.h"

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

// autocast_regions.pt2 (training dialect) holds wrap_with_autocast and
// wrap_with_set_grad_enabled regions: they load inlined, the autocast
// region's matrix products reading bfloat16 casts of their float32 operands,
// the results under the names the graph around the region gives them.
TEST(Pt2Loader, RegionsAreInlinedWithAutocastsCasts) {
  auto m = load_pt2(kDir + "autocast_regions.pt2");
  ASSERT_TRUE(m.has_value()) << m.status().message();
  int casts_to_bf16 = 0, linears = 0;
  for (const auto& n : m->graph.nodes()) {
    EXPECT_EQ(ir::op_target(n->op).find("higher_order"), std::string_view::npos);
    if (n->op == ir::OpKind::kToCopy && n->outputs[0]->type.dtype == DType::BFloat16) ++casts_to_bf16;
    if (n->op == ir::OpKind::kLinear) {
      ++linears;
      for (const ir::NamedArg& a : n->args)
        if (auto* v = std::get_if<ir::Value*>(&a.value))
          EXPECT_EQ((*v)->type.dtype, n->outputs[0]->type.dtype) << n->name;
    }
  }
  EXPECT_EQ(linears, 2);
  // The first linear's input, weight and bias, and the 0-d float32 mean added to a bfloat16 sum (a
  // bfloat16 result); the second linear runs in a nested region with autocast off.
  EXPECT_EQ(casts_to_bf16, 4);
  std::vector<std::string> outputs;
  for (const ir::Value* v : m->graph.outputs()) outputs.push_back(v->name);
  EXPECT_EQ(outputs, (std::vector<std::string>{"add_1", "linear", "mul"}));
}

TEST(Pt2Loader, ARegionWhoseGraphDoesNotTakeItsOperandsIsAnErrorNamingTheNode) {
  auto zip = ZipArchive::open(kDir + "autocast_regions.pt2");
  ASSERT_TRUE(zip.has_value()) << zip.status().message();
  const ZipEntry* model = zip->find("autocast_regions/models/model.json");
  ASSERT_NE(model, nullptr);
  auto bytes = zip->read(*model);
  ASSERT_TRUE(bytes.has_value());
  nlohmann::json j = nlohmann::json::parse(std::string(bytes->begin(), bytes->end()));
  bool dropped = false;
  for (nlohmann::json& n : j["graph_module"]["graph"]["nodes"])
    if (n["target"] == "torch.ops.higher_order.wrap_with_autocast" && !dropped) {
      n["inputs"].erase(n["inputs"].size() - 1);  // one operand fewer than the region's graph takes
      dropped = true;
    }
  ASSERT_TRUE(dropped);
  auto bad = parse_exported_program_json(j.dump(), "regions.json");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("region graph takes 5 inputs for 4 operands"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("node 'wrap_with_autocast'"), std::string::npos) << bad.status().message();
}

}  // namespace kiln::frontend
