// Symbolic integer expressions for tensor sizes: symbols with ranges,
// constants and the arithmetic torch.export writes (sympy srepr).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/status.h"

namespace kiln::ir {

class SymExpr;
using SymExprPtr = std::shared_ptr<const SymExpr>;
using SymBindings = std::map<std::string, int64_t, std::less<>>;

class SymExpr {
 public:
  enum class Kind { kConst, kSymbol, kAdd, kMul, kFloorDiv, kMod, kMax, kMin, kPow };

  static SymExprPtr constant(int64_t v);
  static SymExprPtr symbol(std::string name);
  static SymExprPtr op(Kind kind, std::vector<SymExprPtr> args);

  Kind kind() const { return kind_; }
  int64_t value() const { return value_; }
  const std::string& name() const { return name_; }
  const std::vector<SymExprPtr>& args() const { return args_; }
  bool is_const() const { return kind_ == Kind::kConst; }

  // Value under `b`; an error names the first unbound symbol.
  Expected<int64_t> eval(const SymBindings& b) const;
  // Infix text: "s0", "2*s0 + 1", "floor(s0/2)", "max(s0, 1)".
  std::string to_string() const;
  void collect_symbols(std::vector<std::string>& out) const;

 private:
  Kind kind_ = Kind::kConst;
  int64_t value_ = 0;
  std::string name_;
  std::vector<SymExprPtr> args_;
};

// Parses sympy srepr text as torch.export writes it, e.g.
// "Mul(Integer(2), Symbol('s77', positive=True, integer=True))".
Expected<SymExprPtr> parse_sympy_srepr(const std::string& text);
// Parses kiln's own infix form (what to_string prints).
Expected<SymExprPtr> parse_sym_infix(const std::string& text);

}  // namespace kiln::ir
