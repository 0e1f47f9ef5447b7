#include "ir/sym_solve.h"

#include <gtest/gtest.h>

namespace kiln::ir {
namespace {

SymExprPtr parse(const std::string& text) {
  auto e = parse_sym_infix(text);
  EXPECT_TRUE(e.has_value()) << text << ": " << e.status().message();
  return e.has_value() ? *e : SymExpr::constant(0);
}

TEST(SymSolve, AffineSizesGiveTheirSymbol) {
  EXPECT_EQ(affine_symbol(*parse("s0")), "s0");
  EXPECT_EQ(affine_symbol(*parse("32*s1")), "s1");
  EXPECT_EQ(affine_symbol(*parse("2*s2 + 1")), "s2");
  EXPECT_EQ(solve_affine(*parse("s0"), 17), 17);
  EXPECT_EQ(solve_affine(*parse("32*s1"), 224), 7);
  EXPECT_EQ(solve_affine(*parse("2*s2 + 1"), 9), 4);
}

TEST(SymSolve, OtherSizesGiveNone) {
  EXPECT_FALSE(affine_symbol(*parse("7")));            // no symbol
  EXPECT_FALSE(affine_symbol(*parse("s0*s1")));        // two symbols
  EXPECT_FALSE(affine_symbol(*parse("s0*s0")));        // not affine
  EXPECT_FALSE(affine_symbol(*parse("floor(s0/2)")));  // a floor: flat between points
  EXPECT_FALSE(solve_affine(*parse("32*s1"), 100));    // no whole value
  EXPECT_FALSE(solve_affine(*parse("s0*s1"), 4));
}

}  // namespace
}  // namespace kiln::ir
