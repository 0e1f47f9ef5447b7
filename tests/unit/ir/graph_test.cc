// The IR graph: SSA checks (verify), deep copies (clone), and fixing symbols
// to numbers (specialize), on graphs built through the API and parsed from text.
#include "ir/graph.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "frontend/pt2_loader.h"
#include "ir/liveness.h"
#include "ir/printer.h"
#include "lowering/pipeline.h"

namespace kiln::ir {
namespace {

TensorType f32(std::vector<int64_t> sizes) {
  TensorType t;
  t.dtype = DType::Float32;
  for (int64_t s : sizes) t.sizes.push_back(Dim::of(s));
  return t;
}

TEST(Graph, VerifyAcceptsSsaAndNamesWhatIsWrong) {
  Graph g;
  Value* x = g.add_input("x", ValueKind::kTensor, f32({2, 3}));
  Node* relu = g.add_node(OpKind::kRelu, "relu", {{"self", x}}, {{"r", f32({2, 3})}});
  Node* neg = g.add_node(OpKind::kNeg, "neg", {{"self", relu->outputs[0]}}, {{"n", f32({2, 3})}});
  g.outputs().push_back(neg->outputs[0]);
  ASSERT_TRUE(g.verify().is_ok()) << g.verify().message();
  EXPECT_EQ(g.num_values(), 3u);
  for (size_t i = 0; i < g.num_values(); ++i) EXPECT_EQ(g.value(i)->id, static_cast<int>(i));
  EXPECT_EQ(relu->outputs[0]->producer, relu);

  // A use before its definition: the nodes swapped.
  std::swap(g.nodes()[0], g.nodes()[1]);
  Status s = g.verify();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("'r' before it is defined"), std::string::npos) << s.message();
  std::swap(g.nodes()[0], g.nodes()[1]);

  // An output no node defines.
  Value* stray = g.add_value("stray", ValueKind::kTensor, f32({1}));
  g.outputs().push_back(stray);
  s = g.verify();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("'stray' is never defined"), std::string::npos) << s.message();
}

TEST(Graph, CloneIsDeepAndMapsEveryValue) {
  auto parsed = parse_graph(R"(graph(%x: float32[4], %y: float32[4]) {
  %a: float32[4] = aten.add.Tensor(self=%x, other=%y)
  %b: float32[4] = aten.mul.Tensor(self=%a, other=%a)
  return (%b, %x)
}
)");
  ASSERT_TRUE(parsed.has_value()) << parsed.status().message();
  const Graph& g = *parsed;
  std::map<const Value*, Value*> map;
  Graph c = g.clone(&map);
  EXPECT_EQ(print_graph(c), print_graph(g));
  EXPECT_EQ(map.size(), g.num_values());
  for (const auto& [from, to] : map) {
    EXPECT_NE(from, to);
    EXPECT_EQ(from->name, to->name);
  }
  // The copy's nodes read the copy's values.
  for (const auto& n : c.nodes())
    for (const Value* v : n->operands()) EXPECT_EQ(c.value(static_cast<size_t>(v->id)), v);
  // Changing the copy leaves the original as it was.
  c.nodes()[1]->op = OpKind::kSubTensor;
  EXPECT_EQ(g.nodes()[1]->op, OpKind::kMulTensor);
  EXPECT_TRUE(c.verify().is_ok());
}

TEST(Graph, SpecializeFixesSymbolsInEverySize) {
  auto parsed = parse_graph(R"(graph(%x: float32[s0, 8]) {
  %a: float32[s0, 8] = aten.relu.default(self=%x)
  %b: float32[8 * s0] = aten.view.default(self=%a, size=[-1])
  return (%b)
}
)");
  ASSERT_TRUE(parsed.has_value()) << parsed.status().message();
  Graph& g = *parsed;
  ASSERT_FALSE(g.value(0)->type.sizes[0].is_static());
  ASSERT_TRUE(specialize(g, {{"s0", 3}}).is_ok());
  EXPECT_EQ(g.inputs()[0]->type.sizes[0].value, 3);
  EXPECT_EQ(g.outputs()[0]->type.sizes[0].value, 24);
  EXPECT_TRUE(g.verify().is_ok());
}

TEST(Graph, LivenessGivesEachValuesLastReaderAndWhatEachNodeReleases) {
  auto parsed = parse_graph(R"(graph(%x: float32[4], %unused: float32[4]) {
  %a: float32[4] = aten.relu.default(self=%x)
  %b: float32[4] = aten.neg.default(self=%a)
  %c: float32[4] = aten.add.Tensor(self=%a, other=%b)
  %d: float32[4] = aten.exp.default(self=%c)
  return (%d, %b)
}
)");
  ASSERT_TRUE(parsed.has_value()) << parsed.status().message();
  const Graph& g = *parsed;
  const Liveness l = liveness(g);
  auto last = [&](const char* name) {
    for (size_t v = 0; v < g.num_values(); ++v)
      if (g.value(v)->name == name) return l.last_use[v];
    return -2;
  };
  EXPECT_EQ(last("x"), 0);
  EXPECT_EQ(last("unused"), Liveness::kNeverUsed);
  EXPECT_EQ(last("a"), 2);                     // read by neg and add
  EXPECT_EQ(last("b"), Liveness::kLiveToEnd);  // a graph output
  EXPECT_EQ(last("c"), 3);
  EXPECT_EQ(last("d"), Liveness::kLiveToEnd);
  const std::vector<std::vector<int>> release = l.release_after(g.nodes().size());
  ASSERT_EQ(release.size(), 4u);
  auto names = [&](const std::vector<int>& ids) {
    std::vector<std::string> n;
    for (int v : ids) n.push_back(g.value(static_cast<size_t>(v))->name);
    return n;
  };
  EXPECT_EQ(names(release[0]), (std::vector<std::string>{"x"}));
  EXPECT_TRUE(release[1].empty());
  EXPECT_EQ(names(release[2]), (std::vector<std::string>{"a"}));
  EXPECT_EQ(names(release[3]), (std::vector<std::string>{"c"}));
}

// What compact() must give: the graph as its printed text reads back.
void expect_compacts_as_its_text_reads_back(Graph& g, const std::string& what) {
  auto reread = parse_graph(print_graph(g));
  ASSERT_TRUE(reread.has_value()) << what << ": " << reread.status().message();
  Status s = g.compact();
  ASSERT_TRUE(s.is_ok()) << what << ": " << s.message();
  ASSERT_EQ(g.num_values(), reread->num_values()) << what;
  for (size_t i = 0; i < g.num_values(); ++i) {
    const Value* a = g.value(i);
    const Value* b = reread->value(i);
    ASSERT_EQ(a->id, static_cast<int>(i)) << what;
    EXPECT_EQ(a->name, b->name) << what << ": value " << i;
    EXPECT_EQ(a->kind, b->kind) << what << ": value " << i;
    EXPECT_EQ(a->type.to_string(), b->type.to_string()) << what << ": value " << i;
    EXPECT_EQ(a->sym ? a->sym->to_string() : "", b->sym ? b->sym->to_string() : "") << what << ": value " << i;
    EXPECT_EQ(a->output_index, b->output_index) << what << ": value " << i;
    EXPECT_EQ(a->producer ? a->producer->name : "", b->producer ? b->producer->name : "") << what << ": value " << i;
  }
  EXPECT_EQ(print_graph(g), print_graph(*reread)) << what;
  EXPECT_TRUE(g.verify().is_ok()) << what;
}

TEST(Graph, CompactDropsWhatNothingDefinesAndNumbersTheRestInDefinitionOrder) {
  Graph g;
  Value* x = g.add_input("x", ValueKind::kTensor, f32({2, 3}));
  Value* dead = g.add_value("r", ValueKind::kTensor, f32({9}));  // a pass's leftover, named like a live value
  Node* relu = g.add_node(OpKind::kRelu, "relu", {{"self", x}}, {{"r", f32({2, 3})}});
  Value* n = g.add_input("", ValueKind::kSymInt);  // an input added after a node, with no name
  n->type = f32({1});                              // a scalar's tensor type: not in the text
  Node* neg = g.add_node(OpKind::kNeg, "neg", {{"self", relu->outputs[0]}}, {{"x", f32({2, 3})}});
  g.outputs().push_back(neg->outputs[0]);
  g.outputs().push_back(n);
  (void)dead;
  Value* r = relu->outputs[0];
  expect_compacts_as_its_text_reads_back(g, "built graph");
  ASSERT_EQ(g.num_values(), 4u);
  // Pointers to kept values stay valid; the ids follow inputs, then nodes.
  EXPECT_EQ(x->id, 0);
  EXPECT_EQ(n->id, 1);
  EXPECT_EQ(r->id, 2);
  EXPECT_EQ(neg->outputs[0]->id, 3);
  // Names are made unique as the printer makes them: the dead "r" (id 1) held
  // the name first, so the live one takes its old id; the unnamed input is v3.
  EXPECT_EQ(r->name, "r_2");
  EXPECT_EQ(n->name, "v3");
  EXPECT_EQ(neg->outputs[0]->name, "x_4");
  EXPECT_TRUE(n->type.sizes.empty());

  // A value defined twice is refused, and the graph is left as it was.
  Graph twice;
  Value* a = twice.add_input("a", ValueKind::kTensor, f32({1}));
  twice.inputs().push_back(a);
  Status s = twice.compact();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("'a' is defined twice"), std::string::npos) << s.message();
  EXPECT_EQ(twice.num_values(), 1u);
}

TEST(Graph, CompactGivesWhatTheTextFormReadsBackForEveryLoweredFixture) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";
  int checked = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string file = e.path().filename().string();
    if (e.path().extension() != ".pt2") continue;
    auto m = frontend::load_pt2(e.path().string());
    ASSERT_TRUE(m.has_value()) << file << ": " << m.status().message();
    // Complex values have no text form until split-complex has run.
    bool complex = false;
    for (size_t i = 0; i < m->graph.num_values(); ++i) complex = complex || is_complex(m->graph.value(i)->type.dtype);
    if (!complex) expect_compacts_as_its_text_reads_back(m->graph, file + " as loaded");
    Status st = lowering::run_pipeline(*m, lowering::default_pipeline());
    ASSERT_TRUE(st.is_ok()) << file << ": " << st.message();
    expect_compacts_as_its_text_reads_back(m->graph, file + " lowered");
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

}  // namespace
}  // namespace kiln::ir
