// Op schemas (ir/op_schema.h): every ATen op of ops.def has the schema
// PyTorch's registry declares, each parses with every default read; nodes are
// checked against them, and readers get a left-out argument's default.
#include "ir/op_schema.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln::ir {
namespace {

TEST(OpSchema, ParsesNamesTypesKeywordsAndDefaults) {
  auto s = parse_op_schema(
      "aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> "
      "Tensor(a)");
  ASSERT_TRUE(s.has_value()) << s.status().message();
  ASSERT_EQ(s->arguments.size(), 5u);
  EXPECT_EQ(s->arguments[0].name, "self");
  EXPECT_EQ(s->arguments[0].type, "Tensor");  // the alias annotation dropped
  EXPECT_FALSE(s->arguments[0].has_default);
  EXPECT_EQ(std::get<int64_t>(*s->arguments[1].default_value), 0);
  EXPECT_TRUE(std::holds_alternative<NoneArg>(*s->arguments[2].default_value));
  EXPECT_TRUE(s->arguments[2].optional());
  EXPECT_EQ(std::get<int64_t>(*s->find("step")->default_value), 1);

  auto add = parse_op_schema("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  ASSERT_TRUE(add.has_value());
  EXPECT_FALSE(add->find("other")->keyword_only);
  EXPECT_TRUE(add->find("alpha")->keyword_only);

  // A list of N given one int is that int N times; lists, floats, strings and bools.
  auto pool = parse_op_schema(
      "aten::max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, "
      "bool ceil_mode=False) -> Tensor");
  ASSERT_TRUE(pool.has_value());
  EXPECT_EQ(std::get<std::vector<int64_t>>(*pool->find("padding")->default_value), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(std::get<std::vector<int64_t>>(*pool->find("dilation")->default_value), (std::vector<int64_t>{1, 1}));
  EXPECT_TRUE(std::get<std::vector<int64_t>>(*pool->find("stride")->default_value).empty());
  EXPECT_FALSE(std::get<bool>(*pool->find("ceil_mode")->default_value));
  EXPECT_EQ(pool->find("padding")->list_length(), 2);
  auto gelu = parse_op_schema("aten::gelu(Tensor self, *, str approximate=\"none\") -> Tensor");
  ASSERT_TRUE(gelu.has_value());
  EXPECT_EQ(std::get<std::string>(*gelu->find("approximate")->default_value), "none");
  auto norm = parse_op_schema(
      "aten::layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, "
      "Tensor? bias=None, float eps=1.0000000000000001e-05, bool cudnn_enable=True) -> Tensor");
  ASSERT_TRUE(norm.has_value());
  EXPECT_DOUBLE_EQ(std::get<double>(*norm->find("eps")->default_value), 1e-5);

  EXPECT_FALSE(parse_op_schema("aten::broken").has_value());
  EXPECT_FALSE(parse_op_schema("aten::f(Tensor) -> Tensor").has_value());
}

// Every ATen op kiln lists has a schema, every argument has a name and a
// type, and every declared default was read (none left as text kiln cannot
// represent). The schema's name is the op's own target.
TEST(OpSchema, EveryAtenOpHasItsSchemaAndEveryDefaultIsRead) {
  size_t aten = 0;
  for (size_t i = 0; i < op_count(); ++i) {
    const OpKind op = op_at(i);
    const std::string target(op_target(op));
    if (target.rfind("aten.", 0) != 0) {
      EXPECT_EQ(op_schema(op), nullptr) << target;
      continue;
    }
    ++aten;
    const OpSchema* s = op_schema(op);
    ASSERT_NE(s, nullptr) << target;
    std::string name = "aten::" + target.substr(5);
    if (name.size() > 8 && name.compare(name.size() - 8, 8, ".default") == 0) name.resize(name.size() - 8);
    EXPECT_EQ(s->text.rfind(name + "(", 0), 0u) << target << ": " << s->text;
    for (const ArgumentSchema& a : s->arguments) {
      EXPECT_FALSE(a.name.empty()) << s->text;
      EXPECT_FALSE(a.type.empty()) << s->text;
      if (a.has_default) EXPECT_TRUE(a.default_value.has_value()) << s->text << ": " << a.name;
    }
  }
  EXPECT_GT(aten, 700u);
}

TEST(OpSchema, NodesAreCheckedAndLeftOutArgumentsReadTheirDefault) {
  Graph g;
  TensorType t;
  t.dtype = DType::Float32;
  t.sizes = {Dim::of(4), Dim::of(6)};
  Value* x = g.add_input("x", ValueKind::kTensor, t);
  Node* slice = g.add_node(OpKind::kSliceTensor, "slice", {{"self", x}, {"dim", int64_t{1}}}, {{"s", t}});
  EXPECT_TRUE(check_arguments(*slice).is_ok());
  EXPECT_EQ(std::get<int64_t>(*argument_or_default(*slice, "dim")), 1);   // given
  EXPECT_EQ(std::get<int64_t>(*argument_or_default(*slice, "step")), 1);  // left out: the schema's
  EXPECT_TRUE(std::holds_alternative<NoneArg>(*argument_or_default(*slice, "end")));
  EXPECT_EQ(argument_or_default(*slice, "no_such"), nullptr);

  // A number where a tensor goes is a wrapped number (x + 1).
  Node* add = g.add_node(OpKind::kAddTensor, "add", {{"self", x}, {"other", 1.0}}, {{"a", t}});
  EXPECT_TRUE(check_arguments(*add).is_ok());

  Node* bad = g.add_node(OpKind::kSliceTensor, "bad", {{"self", x}, {"dims", int64_t{1}}}, {{"b", t}});
  Status s = check_arguments(*bad);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("node 'bad' (aten.slice.Tensor): argument 'dims' is not one the op declares"),
            std::string::npos)
      << s.message();
  Node* missing = g.add_node(OpKind::kAddTensor, "missing", {{"self", x}}, {{"m", t}});
  s = check_arguments(*missing);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("argument 'other' (Tensor) is not given"), std::string::npos) << s.message();
  Node* tensor_for_int = g.add_node(OpKind::kSliceTensor, "t", {{"self", x}, {"dim", x}}, {{"t", t}});
  s = check_arguments(*tensor_for_int);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("argument 'dim' is int, not a tensor"), std::string::npos) << s.message();
  // kiln's own ops declare no ATen schema: nothing to check against.
  Node* own = g.add_node(OpKind::kSiluMul, "own", {{"a", x}, {"b", x}, {"anything", int64_t{3}}}, {{"o", t}});
  EXPECT_TRUE(check_arguments(*own).is_ok());
}

}  // namespace
}  // namespace kiln::ir
