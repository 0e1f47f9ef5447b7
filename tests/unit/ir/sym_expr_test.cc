#include "ir/sym_expr.h"

#include <gtest/gtest.h>

namespace kiln::ir {
namespace {

TEST(SymExpr, ParsesSympySrepr) {
  auto e = parse_sympy_srepr("Mul(Integer(2), Symbol('s77', positive=True, integer=True))");
  ASSERT_TRUE(e.has_value()) << e.status().message();
  EXPECT_EQ((*e)->to_string(), "2*s77");
  EXPECT_EQ(*(*e)->eval({{"s77", 5}}), 10);
}

TEST(SymExpr, FloorDivAndModFollowPython) {
  auto e = parse_sympy_srepr("Add(FloorDiv(Symbol('s0'), Integer(2)), Mod(Symbol('s0'), Integer(3)), Integer(-1))");
  ASSERT_TRUE(e.has_value()) << e.status().message();
  // s0 = -7: floor(-7/2) = -4, (-7) mod 3 = 2 (Python semantics), total -3.
  EXPECT_EQ(*(*e)->eval({{"s0", -7}}), -3);
  EXPECT_EQ(*(*e)->eval({{"s0", 7}}), 3 + 1 - 1);
}

TEST(SymExpr, ConstantsFold) {
  auto e = parse_sympy_srepr("Mul(Integer(3), Integer(4))");
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE((*e)->is_const());
  EXPECT_EQ((*e)->value(), 12);
}

TEST(SymExpr, InfixRoundTrip) {
  auto e = parse_sympy_srepr("Max(Integer(1), Add(Symbol('s1'), Integer(-1)))");
  ASSERT_TRUE(e.has_value());
  std::string text = (*e)->to_string();
  auto back = parse_sym_infix(text);
  ASSERT_TRUE(back.has_value()) << back.status().message();
  EXPECT_EQ((*back)->to_string(), text);
  for (int64_t s1 : {0, 1, 9}) EXPECT_EQ(*(*back)->eval({{"s1", s1}}), std::max<int64_t>(1, s1 - 1));
}

TEST(SymExpr, UnboundSymbolIsAnError) {
  auto e = parse_sym_infix("s0*4");
  ASSERT_TRUE(e.has_value());
  auto v = (*e)->eval({});
  ASSERT_FALSE(v.has_value());
  EXPECT_NE(v.status().message().find("s0"), std::string::npos);
}

TEST(SymExpr, MalformedTextNamesTheOffset) {
  for (const char* bad : {"Mul(Integer(2)", "Symbol(s0)", "Foo(Integer(1))", "Integer(99999999999999999999)", ""}) {
    auto e = parse_sympy_srepr(bad);
    ASSERT_FALSE(e.has_value()) << bad;
    EXPECT_NE(e.status().message().find("offset"), std::string::npos) << e.status().message();
  }
}

}  // namespace
}  // namespace kiln::ir
