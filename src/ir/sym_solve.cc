#include "ir/sym_solve.h"

#include <vector>

namespace kiln::ir {

namespace {

std::optional<int64_t> at(const SymExpr& e, const std::string& name, int64_t v) {
  Expected<int64_t> r = e.eval({{name, v}});
  return r.has_value() ? std::optional<int64_t>(*r) : std::nullopt;
}

}  // namespace

std::optional<std::string> affine_symbol(const SymExpr& e) {
  std::vector<std::string> names;
  e.collect_symbols(names);
  if (names.empty()) return std::nullopt;
  for (const std::string& n : names)
    if (n != names[0]) return std::nullopt;
  // Floors and mods are not affine everywhere: three points on one line, and
  // two more far off it, before the expression is taken for a*s + b.
  const auto e0 = at(e, names[0], 0), e1 = at(e, names[0], 1), e2 = at(e, names[0], 2);
  const auto e7 = at(e, names[0], 7), e100 = at(e, names[0], 100);
  if (!e0 || !e1 || !e2 || !e7 || !e100) return std::nullopt;
  const int64_t a = *e1 - *e0;
  if (a == 0 || *e2 - *e1 != a || *e7 != *e0 + 7 * a || *e100 != *e0 + 100 * a) return std::nullopt;
  return names[0];
}

std::optional<int64_t> solve_affine(const SymExpr& e, int64_t size) {
  const std::optional<std::string> name = affine_symbol(e);
  if (!name) return std::nullopt;
  return solve_affine(e, *name, size);
}

std::optional<int64_t> solve_affine(const SymExpr& e, const std::string& symbol, int64_t size) {
  const auto e0 = at(e, symbol, 0), e1 = at(e, symbol, 1);
  if (!e0 || !e1 || *e1 == *e0) return std::nullopt;
  const int64_t b = *e0, a = *e1 - *e0;
  if ((size - b) % a != 0) return std::nullopt;
  const int64_t s = (size - b) / a;
  const auto check = at(e, symbol, s);
  if (!check || *check != size) return std::nullopt;
  return s;
}

}  // namespace kiln::ir
