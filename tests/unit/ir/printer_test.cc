#include "ir/printer.h"

#include <gtest/gtest.h>

namespace kiln::ir {
namespace {

constexpr const char* kText = R"(graph(%x: float32[s0, 3], %w: float32[4, 3], %b: float32[4]) {
  %y: float32[s0, 4] = aten.linear.default(input=%x, weight=%w, bias=%b)
  %n: symint = aten.sym_size.int(self=%x, dim=0)
  %v: float32[2*s0, 2] = aten.view.default(self=%y, size=[%n, 8])
  %a: float32[s0, 2], %c: float32[s0, 2] = aten.split.Tensor(self=%v, split_size=2, dim=-1)
  %z: float32[s0, 2] = aten.add.Tensor(self=%a, other=%c, alpha=0.5)
  %t: float32[s0, 2] = aten._to_copy.default(self=%z, dtype=dtype.float32, device=device("cpu", 0))
  %m: float32[s0, 2] = aten.masked_fill.Scalar(self=%t, mask=%t, value=-inf)
  %k: float32[s0, 4] = aten.cat.default(tensors=[%a, %m], dim=1)
  %i: float32[s0, 4] = aten.index.Tensor(self=%k, indices=?[None, %k])
  aten._assert_scalar.default(self=%n, assert_msg="n \"ok\"")
  return (%i, %n)
}
)";

TEST(Printer, RoundTripsThroughText) {
  auto g = parse_graph(kText);
  ASSERT_TRUE(g.has_value()) << g.status().message();
  EXPECT_EQ(print_graph(*g), kText);
  auto again = parse_graph(print_graph(*g));
  ASSERT_TRUE(again.has_value());
  std::string why;
  EXPECT_TRUE(graphs_equal(*g, *again, &why)) << why;
}

TEST(Printer, ASymbolicScalarKeepsItsExpression) {
  constexpr const char* text = R"(graph(%x: float32[s0, 3], %k: symint[s1 + 1]) {
  %n: symint[s0] = aten.sym_size.int(self=%x, dim=0)
  %v: float32[3*s0] = aten.view.default(self=%x, size=[%n, 3])
  return (%v)
}
)";
  auto g = parse_graph(text);
  ASSERT_TRUE(g.has_value()) << g.status().message();
  EXPECT_EQ(print_graph(*g), text);
  ASSERT_TRUE(g->inputs()[1]->sym);
  EXPECT_EQ(g->inputs()[1]->sym->to_string(), "s1 + 1");
  ASSERT_TRUE(g->nodes()[0]->outputs[0]->sym);
  EXPECT_EQ(g->nodes()[0]->outputs[0]->sym->to_string(), "s0");
  // Specialized to s0 = 4: sizes static, the scalar a number where it is used.
  ASSERT_TRUE(specialize(*g, {{"s0", 4}}).is_ok());
  EXPECT_EQ(g->inputs()[0]->type.to_string(), "float32[4, 3]");
  EXPECT_EQ(print_graph(*g).find("size=[%n"), std::string::npos) << print_graph(*g);
  EXPECT_NE(print_graph(*g).find("size=[4, 3]"), std::string::npos) << print_graph(*g);
  EXPECT_NE(print_graph(*g).find("float32[12]"), std::string::npos) << print_graph(*g);
  EXPECT_FALSE(parse_graph("graph(%k: symint[s1 +]) {\n  return ()\n}\n").has_value());
}

TEST(Printer, StructuralEqualityIgnoresNamesButNotWiring) {
  auto a = parse_graph("graph(%x: float32[2], %y: float32[2]) {\n  %s: float32[2] = aten.sub.Tensor(self=%x, other=%y)\n  return (%s)\n}\n");
  auto b = parse_graph("graph(%p: float32[2], %q: float32[2]) {\n  %r: float32[2] = aten.sub.Tensor(self=%p, other=%q)\n  return (%r)\n}\n");
  auto c = parse_graph("graph(%p: float32[2], %q: float32[2]) {\n  %r: float32[2] = aten.sub.Tensor(self=%q, other=%p)\n  return (%r)\n}\n");
  ASSERT_TRUE(a && b && c);
  EXPECT_TRUE(graphs_equal(*a, *b));
  EXPECT_FALSE(graphs_equal(*a, *c));
}

TEST(Printer, ErrorsNameLineAndColumn) {
  auto g = parse_graph("graph(%x: float32[2]) {\n  %y: float32[2] = aten.nope.default(self=%x)\n  return (%y)\n}\n");
  ASSERT_FALSE(g.has_value());
  EXPECT_NE(g.status().message().find("line 2"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("aten.nope.default"), std::string::npos);
  auto u = parse_graph("graph(%x: float32[2]) {\n  return (%q)\n}\n");
  ASSERT_FALSE(u.has_value());
  EXPECT_NE(u.status().message().find("%q"), std::string::npos);
}

}  // namespace
}  // namespace kiln::ir
