#include "ir/sym_expr.h"

#include <cctype>
#include <limits>

namespace kiln::ir {

SymExprPtr SymExpr::constant(int64_t v) {
  auto e = std::make_shared<SymExpr>();
  e->kind_ = Kind::kConst;
  e->value_ = v;
  return e;
}

SymExprPtr SymExpr::symbol(std::string name) {
  auto e = std::make_shared<SymExpr>();
  e->kind_ = Kind::kSymbol;
  e->name_ = std::move(name);
  return e;
}

namespace {
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }
}  // namespace

SymExprPtr SymExpr::op(Kind kind, std::vector<SymExprPtr> args) {
  // Fold constants so that static sizes stay plain integers.
  bool all_const = !args.empty();
  for (const auto& a : args) all_const = all_const && a->is_const();
  if (all_const) {
    SymBindings none;
    auto e = std::make_shared<SymExpr>();
    e->kind_ = kind;
    e->args_ = args;
    auto v = e->eval(none);
    if (v.has_value()) return constant(*v);
  }
  auto e = std::make_shared<SymExpr>();
  e->kind_ = kind;
  e->args_ = std::move(args);
  return e;
}

Expected<int64_t> SymExpr::eval(const SymBindings& b) const {
  switch (kind_) {
    case Kind::kConst: return value_;
    case Kind::kSymbol: {
      auto it = b.find(name_);
      if (it == b.end()) return invalid_argument("symbol '" + name_ + "' has no value");
      return it->second;
    }
    default: break;
  }
  std::vector<int64_t> v;
  for (const auto& a : args_) {
    KILN_ASSIGN_OR_RETURN(int64_t x, a->eval(b));
    v.push_back(x);
  }
  if (v.empty()) return internal_error("symbolic operation without operands");
  int64_t r = v[0];
  switch (kind_) {
    case Kind::kAdd:
      for (size_t i = 1; i < v.size(); ++i) r += v[i];
      return r;
    case Kind::kMul:
      for (size_t i = 1; i < v.size(); ++i) r *= v[i];
      return r;
    case Kind::kMax:
      for (size_t i = 1; i < v.size(); ++i) r = std::max(r, v[i]);
      return r;
    case Kind::kMin:
      for (size_t i = 1; i < v.size(); ++i) r = std::min(r, v[i]);
      return r;
    case Kind::kFloorDiv:
    case Kind::kMod:
      if (v.size() != 2) return internal_error("floor division needs two operands");
      if (v[1] == 0) return invalid_argument("division by zero in size expression " + to_string());
      return kind_ == Kind::kFloorDiv ? floor_div(v[0], v[1]) : floor_mod(v[0], v[1]);
    case Kind::kPow: {
      if (v.size() != 2 || v[1] < 0) return unsupported("power in size expression " + to_string());
      int64_t p = 1;
      for (int64_t i = 0; i < v[1]; ++i) p *= v[0];
      return p;
    }
    default: return internal_error("bad symbolic expression");
  }
}

std::string SymExpr::to_string() const {
  switch (kind_) {
    case Kind::kConst: return std::to_string(value_);
    case Kind::kSymbol: return name_;
    default: break;
  }
  auto join = [&](const char* sep) {
    std::string s;
    for (size_t i = 0; i < args_.size(); ++i) {
      if (i) s += sep;
      bool paren = args_[i]->kind_ == Kind::kAdd;
      s += paren ? "(" + args_[i]->to_string() + ")" : args_[i]->to_string();
    }
    return s;
  };
  switch (kind_) {
    case Kind::kAdd: {
      std::string s;
      for (size_t i = 0; i < args_.size(); ++i) {
        if (i) s += " + ";
        s += args_[i]->to_string();
      }
      return s;
    }
    case Kind::kMul: return join("*");
    case Kind::kFloorDiv: return "floor(" + args_[0]->to_string() + "/" + args_[1]->to_string() + ")";
    case Kind::kMod: return "mod(" + args_[0]->to_string() + ", " + args_[1]->to_string() + ")";
    case Kind::kMax: return "max(" + join(", ") + ")";
    case Kind::kMin: return "min(" + join(", ") + ")";
    case Kind::kPow: return "pow(" + args_[0]->to_string() + ", " + args_[1]->to_string() + ")";
    default: return "?";
  }
}

void SymExpr::collect_symbols(std::vector<std::string>& out) const {
  if (kind_ == Kind::kSymbol) {
    for (const auto& s : out)
      if (s == name_) return;
    out.push_back(name_);
  }
  for (const auto& a : args_) a->collect_symbols(out);
}

namespace {

class Cursor {
 public:
  explicit Cursor(const std::string& s) : s_(s) {}
  void skip_ws() {
    while (p_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[p_]))) ++p_;
  }
  bool eat(char c) {
    skip_ws();
    if (p_ < s_.size() && s_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  char peek() {
    skip_ws();
    return p_ < s_.size() ? s_[p_] : '\0';
  }
  std::string ident() {
    skip_ws();
    size_t b = p_;
    while (p_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[p_])) || s_[p_] == '_')) ++p_;
    return s_.substr(b, p_ - b);
  }
  Expected<int64_t> integer() {
    skip_ws();
    size_t b = p_;
    if (p_ < s_.size() && (s_[p_] == '-' || s_[p_] == '+')) ++p_;
    while (p_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p_]))) ++p_;
    if (b == p_ || (p_ == b + 1 && !std::isdigit(static_cast<unsigned char>(s_[b]))))
      return error("expected an integer");
    try {
      return static_cast<int64_t>(std::stoll(s_.substr(b, p_ - b)));
    } catch (...) {
      return error("integer out of range");
    }
  }
  Expected<std::string> quoted() {
    skip_ws();
    if (p_ >= s_.size() || (s_[p_] != '\'' && s_[p_] != '"')) return error("expected a quoted name");
    char q = s_[p_++];
    size_t b = p_;
    while (p_ < s_.size() && s_[p_] != q) ++p_;
    if (p_ >= s_.size()) return error("unterminated quoted name");
    return s_.substr(b, p_++ - b);
  }
  bool at_end() {
    skip_ws();
    return p_ >= s_.size();
  }
  Status error(const std::string& what) const {
    return format_error("symbolic expression '" + s_ + "' at offset " + std::to_string(p_) + ": " + what);
  }

 private:
  const std::string& s_;
  size_t p_ = 0;
};

Expected<SymExprPtr> parse_srepr(Cursor& c, int depth) {
  if (depth > 64) return c.error("nested too deeply");
  char ch = c.peek();
  if (ch == '-' || std::isdigit(static_cast<unsigned char>(ch))) {
    KILN_ASSIGN_OR_RETURN(int64_t v, c.integer());
    return SymExpr::constant(v);
  }
  std::string fn = c.ident();
  if (fn.empty()) return c.error("expected a function name");
  if (fn == "Zero") { if (c.eat('(')) c.eat(')'); return SymExpr::constant(0); }
  if (fn == "One") { if (c.eat('(')) c.eat(')'); return SymExpr::constant(1); }
  if (fn == "NegativeOne") { if (c.eat('(')) c.eat(')'); return SymExpr::constant(-1); }
  if (!c.eat('(')) return c.error("expected '(' after " + fn);
  if (fn == "Symbol") {
    KILN_ASSIGN_OR_RETURN(std::string name, c.quoted());
    // Skip assumptions such as ", positive=True, integer=True".
    while (c.eat(',')) {
      c.ident();
      if (!c.eat('=')) return c.error("expected '=' in symbol assumptions");
      c.ident();
    }
    if (!c.eat(')')) return c.error("expected ')' after symbol");
    return SymExpr::symbol(name);
  }
  if (fn == "Integer") {
    KILN_ASSIGN_OR_RETURN(int64_t v, c.integer());
    if (!c.eat(')')) return c.error("expected ')' after integer");
    return SymExpr::constant(v);
  }
  std::vector<SymExprPtr> args;
  if (!c.eat(')')) {
    do {
      KILN_ASSIGN_OR_RETURN(SymExprPtr a, parse_srepr(c, depth + 1));
      args.push_back(std::move(a));
    } while (c.eat(','));
    if (!c.eat(')')) return c.error("expected ')' after arguments of " + fn);
  }
  using K = SymExpr::Kind;
  if (fn == "Add") return SymExpr::op(K::kAdd, std::move(args));
  if (fn == "Mul") return SymExpr::op(K::kMul, std::move(args));
  if ((fn == "FloorDiv" || fn == "CleanDiv" || fn == "IntTrueDiv") && args.size() == 2)
    return SymExpr::op(K::kFloorDiv, std::move(args));
  if ((fn == "Mod" || fn == "PythonMod") && args.size() == 2) return SymExpr::op(K::kMod, std::move(args));
  if (fn == "Max") return SymExpr::op(K::kMax, std::move(args));
  if (fn == "Min") return SymExpr::op(K::kMin, std::move(args));
  if (fn == "Pow" && args.size() == 2) return SymExpr::op(K::kPow, std::move(args));
  return c.error("unsupported function " + fn);
}

// Infix grammar: sum := term (('+'|'-') term)*; term := atom ('*' atom)*;
// atom := int | name | name '(' args ')' | '(' sum ')' | '-' atom.
Expected<SymExprPtr> parse_sum(Cursor& c, int depth);

Expected<SymExprPtr> parse_atom(Cursor& c, int depth) {
  if (depth > 64) return c.error("nested too deeply");
  char ch = c.peek();
  if (ch == '(') {
    c.eat('(');
    KILN_ASSIGN_OR_RETURN(SymExprPtr e, parse_sum(c, depth + 1));
    if (!c.eat(')')) return c.error("expected ')'");
    return e;
  }
  if (ch == '-') {
    c.eat('-');
    KILN_ASSIGN_OR_RETURN(SymExprPtr e, parse_atom(c, depth + 1));
    return SymExpr::op(SymExpr::Kind::kMul, {SymExpr::constant(-1), e});
  }
  if (std::isdigit(static_cast<unsigned char>(ch))) {
    KILN_ASSIGN_OR_RETURN(int64_t v, c.integer());
    return SymExpr::constant(v);
  }
  std::string name = c.ident();
  if (name.empty()) return c.error("expected a name or number");
  if (!c.eat('(')) return SymExpr::symbol(name);
  using K = SymExpr::Kind;
  std::vector<SymExprPtr> args;
  if (name == "floor") {
    KILN_ASSIGN_OR_RETURN(SymExprPtr a, parse_sum(c, depth + 1));
    if (!c.eat('/')) return c.error("expected '/' in floor()");
    KILN_ASSIGN_OR_RETURN(SymExprPtr b, parse_sum(c, depth + 1));
    if (!c.eat(')')) return c.error("expected ')'");
    return SymExpr::op(K::kFloorDiv, {a, b});
  }
  do {
    KILN_ASSIGN_OR_RETURN(SymExprPtr a, parse_sum(c, depth + 1));
    args.push_back(std::move(a));
  } while (c.eat(','));
  if (!c.eat(')')) return c.error("expected ')'");
  if (name == "max") return SymExpr::op(K::kMax, std::move(args));
  if (name == "min") return SymExpr::op(K::kMin, std::move(args));
  if (name == "mod" && args.size() == 2) return SymExpr::op(K::kMod, std::move(args));
  if (name == "pow" && args.size() == 2) return SymExpr::op(K::kPow, std::move(args));
  return c.error("unknown function " + name);
}

Expected<SymExprPtr> parse_term(Cursor& c, int depth) {
  KILN_ASSIGN_OR_RETURN(SymExprPtr e, parse_atom(c, depth));
  std::vector<SymExprPtr> factors{e};
  while (c.eat('*')) {
    KILN_ASSIGN_OR_RETURN(SymExprPtr f, parse_atom(c, depth));
    factors.push_back(std::move(f));
  }
  return factors.size() == 1 ? factors[0] : SymExpr::op(SymExpr::Kind::kMul, std::move(factors));
}

Expected<SymExprPtr> parse_sum(Cursor& c, int depth) {
  KILN_ASSIGN_OR_RETURN(SymExprPtr e, parse_term(c, depth));
  std::vector<SymExprPtr> terms{e};
  while (true) {
    if (c.eat('+')) {
      KILN_ASSIGN_OR_RETURN(SymExprPtr t, parse_term(c, depth));
      terms.push_back(std::move(t));
    } else if (c.peek() == '-') {
      c.eat('-');
      KILN_ASSIGN_OR_RETURN(SymExprPtr t, parse_term(c, depth));
      terms.push_back(SymExpr::op(SymExpr::Kind::kMul, {SymExpr::constant(-1), t}));
    } else {
      break;
    }
  }
  return terms.size() == 1 ? terms[0] : SymExpr::op(SymExpr::Kind::kAdd, std::move(terms));
}

}  // namespace

Expected<SymExprPtr> parse_sympy_srepr(const std::string& text) {
  Cursor c(text);
  KILN_ASSIGN_OR_RETURN(SymExprPtr e, parse_srepr(c, 0));
  if (!c.at_end()) return c.error("unexpected trailing text");
  return e;
}

Expected<SymExprPtr> parse_sym_infix(const std::string& text) {
  Cursor c(text);
  KILN_ASSIGN_OR_RETURN(SymExprPtr e, parse_sum(c, 0));
  if (!c.at_end()) return c.error("unexpected trailing text");
  return e;
}

}  // namespace kiln::ir
