// merge_storage_aliases: weights over one storage with one view are one
// input under the name users read; the other names are aliases. Written
// through any of them, the one buffer gets every write, in program order.
#include <gtest/gtest.h>

#include "backends/cpu/kernel.h"
#include "ir/printer.h"
#include "lowering/pass.h"
#include "runtime/interpreter.h"

namespace kiln::lowering {
namespace {

using ir::InputSpec;

// A module holding a registered buffer `cache` and, over the same storage, a
// lifted constant `lifted` (what non-strict export makes of a static KV
// cache), plus a parameter `w`. The program writes the constant and reads the
// buffer after the write:
//   lifted[0] = x; return cache * w
constexpr const char* kGraph =
    R"(graph(%b_cache: float32[2, 3], %p_w: float32[2, 3], %c_lifted: float32[2, 3], %x: float32[3]) {
  %select: float32[3] = aten.select.int(self=%c_lifted, dim=0, index=0)
  %copy_: float32[3] = aten.copy_.default(self=%select, src=%x)
  %out: float32[2, 3] = aten.mul.Tensor(self=%b_cache, other=%p_w)
  return (%out)
}
)";

Expected<std::vector<Tensor>> run(const ir::Module& m, std::vector<cpu::RtValue> inputs) {
  KILN_ASSIGN_OR_RETURN(auto out, runtime::interpret(m.graph, std::move(inputs), cpu::cpu_kernels()));
  std::vector<Tensor> tensors;
  for (const cpu::RtValue& v : out) tensors.push_back(std::get<Tensor>(v));
  return tensors;
}

Tensor iota(int64_t n, float start) {
  Tensor t = Tensor::zeros(DType::Float32, {n});
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

// `cache` and `lifted` view one 6-element storage; `lifted_view` (when given)
// gives the constant another view of it instead.
ir::Module make_module(std::optional<Shape> lifted_strides = std::nullopt) {
  auto g = ir::parse_graph(kGraph);
  EXPECT_TRUE(g.has_value()) << g.status().message();
  ir::Module m;
  m.graph = std::move(*g);
  m.input_specs = {{InputSpec::Kind::kBuffer, "cache", false},
                   {InputSpec::Kind::kParameter, "w", true},
                   {InputSpec::Kind::kConstant, "lifted", true},
                   {InputSpec::Kind::kUserInput, "", true}};
  m.output_specs = {{ir::OutputSpec::Kind::kUserOutput, ""}};
  const Tensor storage = iota(6, 1.0f);
  m.weights["cache"] = *Tensor::from_storage(storage.storage(), DType::Float32, {2, 3}, {3, 1}, 0);
  m.weights["lifted"] =
      *Tensor::from_storage(storage.storage(), DType::Float32, {2, 3}, lifted_strides.value_or(Shape{3, 1}), 0);
  m.weights["w"] = iota(6, 10.0f).reshape({2, 3});
  m.source = "test";
  return m;
}

TEST(MergeStorageAliases, OneStorageOneViewIsOneBufferUnderTheBuffersName) {
  ir::Module m = make_module();
  ASSERT_TRUE(merge_storage_aliases(m).is_ok());
  ASSERT_EQ(m.input_specs.size(), 3u);
  EXPECT_EQ(m.input_specs[0].target, "cache");
  EXPECT_EQ(m.input_specs[1].target, "w");
  EXPECT_EQ(m.input_specs[2].kind, InputSpec::Kind::kUserInput);
  EXPECT_EQ(m.aliases, (std::map<std::string, std::string>{{"lifted", "cache"}}));
  EXPECT_FALSE(m.weights.count("lifted"));
  ASSERT_TRUE(m.graph.verify().is_ok());

  // The write to the constant is a write to the buffer, which the same call reads.
  ASSERT_TRUE(functionalize(m).is_ok());
  ASSERT_EQ(m.output_specs.size(), 2u);
  EXPECT_EQ(m.output_specs[0].kind, ir::OutputSpec::Kind::kBufferMutation);
  EXPECT_EQ(m.output_specs[0].target, "cache");
  const Tensor x = iota(3, -3.0f);  // -3, -2, -1
  auto out = run(m, {m.weights.at("cache"), m.weights.at("w"), x});
  ASSERT_TRUE(out.has_value()) << out.status().message();
  // cache after the write: [-3, -2, -1, 4, 5, 6]; out = cache * [10..15].
  const std::vector<float> cache = {-3, -2, -1, 4, 5, 6};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ((*out)[0].value_at(i), cache[static_cast<size_t>(i)]) << i;
    EXPECT_EQ((*out)[1].value_at(i), cache[static_cast<size_t>(i)] * static_cast<float>(10 + i)) << i;
  }
}

// The ATen dialect writes state through buffer_mutation outputs: a write
// under another name of the buffer is a write to the buffer; two writes of
// the one tensor under two names are refused.
TEST(MergeStorageAliases, ExplicitWritesNameTheOneTensor) {
  auto g = ir::parse_graph(R"(graph(%b_a: float32[3], %b_b: float32[3], %x: float32[3]) {
  %s: float32[3] = aten.add.Tensor(self=%b_b, other=%x)
  return (%s, %s)
}
)");
  ASSERT_TRUE(g.has_value()) << g.status().message();
  ir::Module m;
  m.graph = std::move(*g);
  m.input_specs = {{InputSpec::Kind::kBuffer, "a", true},
                   {InputSpec::Kind::kBuffer, "b", true},
                   {InputSpec::Kind::kUserInput, "", true}};
  m.output_specs = {{ir::OutputSpec::Kind::kBufferMutation, "b"}, {ir::OutputSpec::Kind::kUserOutput, ""}};
  const Tensor shared = iota(3, 1.0f);
  m.weights["a"] = shared;
  m.weights["b"] = shared.as_strided({3}, {1}, 0);
  ir::Module twice = ir::clone_module(m);
  ASSERT_TRUE(merge_storage_aliases(m).is_ok());
  EXPECT_EQ(m.output_specs[0].target, "a");

  twice.output_specs = {{ir::OutputSpec::Kind::kBufferMutation, "a"},
                        {ir::OutputSpec::Kind::kBufferMutation, "b"},
                        {ir::OutputSpec::Kind::kUserOutput, ""}};
  twice.graph.outputs().push_back(twice.graph.outputs().back());
  Status s = merge_storage_aliases(twice);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("'a' and 'b'"), std::string::npos) << s.message();
}

TEST(MergeStorageAliases, TiedParametersKeepTheFirstName) {
  auto g = ir::parse_graph(R"(graph(%p_a: float32[3], %p_b: float32[3], %x: float32[3]) {
  %s: float32[3] = aten.add.Tensor(self=%p_a, other=%x)
  %out: float32[3] = aten.mul.Tensor(self=%s, other=%p_b)
  return (%out)
}
)");
  ASSERT_TRUE(g.has_value()) << g.status().message();
  ir::Module m;
  m.graph = std::move(*g);
  m.input_specs = {{InputSpec::Kind::kParameter, "a", true},
                   {InputSpec::Kind::kParameter, "b", true},
                   {InputSpec::Kind::kUserInput, "", true}};
  m.output_specs = {{ir::OutputSpec::Kind::kUserOutput, ""}};
  const Tensor shared = iota(3, 2.0f);
  m.weights["a"] = shared;
  m.weights["b"] = shared.as_strided({3}, {1}, 0);  // another Tensor object, the same view
  ASSERT_TRUE(merge_storage_aliases(m).is_ok());
  EXPECT_EQ(m.aliases, (std::map<std::string, std::string>{{"b", "a"}}));
  ASSERT_EQ(m.graph.inputs().size(), 2u);
  auto out = run(m, {m.weights.at("a"), iota(3, 0.0f)});
  ASSERT_TRUE(out.has_value()) << out.status().message();
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*out)[0].value_at(i), (2.0f + 2 * i) * (2.0f + i));
}

TEST(MergeStorageAliases, AnotherViewOfAWrittenStorageIsRefusedByName) {
  // The constant views the storage transposed-in-memory: not the buffer's view.
  ir::Module m = make_module(Shape{1, 2});
  ASSERT_TRUE(merge_storage_aliases(m).is_ok());
  EXPECT_TRUE(m.aliases.empty());
  Status s = functionalize(m);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find("'lifted'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'cache'"), std::string::npos) << s.message();
}

TEST(MergeStorageAliases, OtherViewsThatNobodyWritesStayApart) {
  // Read-only views of one storage may be kept as they are (no write can
  // diverge them): a weight and a slice of it.
  auto g = ir::parse_graph(R"(graph(%p_a: float32[4], %c_v: float32[2], %x: float32[2]) {
  %s: float32[2] = aten.add.Tensor(self=%c_v, other=%x)
  %t: float32[] = aten.sum.default(self=%p_a)
  %out: float32[2] = aten.mul.Tensor(self=%s, other=%t)
  return (%out)
}
)");
  ASSERT_TRUE(g.has_value()) << g.status().message();
  ir::Module m;
  m.graph = std::move(*g);
  m.input_specs = {{InputSpec::Kind::kParameter, "a", true},
                   {InputSpec::Kind::kConstant, "v", true},
                   {InputSpec::Kind::kUserInput, "", true}};
  m.output_specs = {{ir::OutputSpec::Kind::kUserOutput, ""}};
  const Tensor a = iota(4, 1.0f);
  m.weights["a"] = a;
  m.weights["v"] = *Tensor::from_storage(a.storage(), DType::Float32, {2}, {1}, 2);  // [3, 4]
  ASSERT_TRUE(merge_storage_aliases(m).is_ok());
  EXPECT_TRUE(m.aliases.empty());
  ASSERT_TRUE(functionalize(m).is_ok());
  auto out = run(m, {m.weights.at("a"), m.weights.at("v"), iota(2, 0.0f)});
  ASSERT_TRUE(out.has_value()) << out.status().message();
  EXPECT_EQ((*out)[0].value_at(0), 3.0f * 10);
  EXPECT_EQ((*out)[0].value_at(1), 5.0f * 10);
}

}  // namespace
}  // namespace kiln::lowering
