#include "ir/printer.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>

namespace kiln::ir {

namespace {

class Namer {
 public:
  explicit Namer(const Graph& g) {
    std::set<std::string> used;
    for (size_t i = 0; i < g.num_values(); ++i) {
      const Value* v = g.value(i);
      std::string n = v->name.empty() ? "v" + std::to_string(v->id) : v->name;
      while (!used.insert(n).second) n += "_" + std::to_string(v->id);
      names_[v] = n;
    }
  }
  std::string operator()(const Value* v) const { return "%" + names_.at(v); }

 private:
  std::map<const Value*, std::string> names_;
};

std::string format_double(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string value_type(const Value* v) {
  switch (v->kind) {
    case ValueKind::kTensor: return v->type.to_string();
    case ValueKind::kSymInt: return v->sym ? "symint[" + v->sym->to_string() + "]" : "symint";
    case ValueKind::kSymFloat: return "symfloat";
    case ValueKind::kSymBool: return "symbool";
  }
  return "?";
}

struct ArgPrinter {
  const Namer& name;
  std::string operator()(NoneArg) const { return "None"; }
  std::string operator()(bool b) const { return b ? "true" : "false"; }
  std::string operator()(int64_t i) const { return std::to_string(i); }
  std::string operator()(double d) const { return format_double(d); }
  std::string operator()(const std::string& s) const { return quote(s); }
  std::string operator()(DType d) const { return "dtype." + std::string(dtype_name(d)); }
  std::string operator()(const Device& d) const {
    return "device(" + quote(d.type) + (d.index >= 0 ? ", " + std::to_string(d.index) : "") + ")";
  }
  template <typename T, typename F>
  std::string list(const std::vector<T>& l, F&& f) const {
    std::string s = "[";
    for (size_t i = 0; i < l.size(); ++i) s += (i ? ", " : "") + f(l[i]);
    return s + "]";
  }
  std::string operator()(const std::vector<int64_t>& l) const {
    return list(l, [](int64_t x) { return std::to_string(x); });
  }
  std::string operator()(const std::vector<double>& l) const { return list(l, format_double); }
  std::string operator()(const std::vector<bool>& l) const {
    std::string s = "[";
    for (size_t i = 0; i < l.size(); ++i) s += std::string(i ? ", " : "") + (l[i] ? "true" : "false");
    return s + "]";
  }
  std::string operator()(Value* v) const { return name(v); }
  std::string operator()(const std::vector<Value*>& l) const {
    return list(l, [&](Value* v) { return name(v); });
  }
  std::string operator()(const std::vector<std::optional<Value*>>& l) const {
    return "?" + list(l, [&](const std::optional<Value*>& v) { return v ? name(*v) : std::string("None"); });
  }
  std::string operator()(const std::vector<SymInt>& l) const {
    return list(l, [&](const SymInt& s) {
      if (auto* i = std::get_if<int64_t>(&s)) return std::to_string(*i);
      return name(std::get<Value*>(s));
    });
  }
};

std::string print_arg(const Arg& a, const Namer& name) { return std::visit(ArgPrinter{name}, a); }

}  // namespace

std::string print_graph(const Graph& g) {
  Namer name(g);
  std::string s = "graph(";
  for (size_t i = 0; i < g.inputs().size(); ++i)
    s += (i ? ", " : "") + name(g.inputs()[i]) + ": " + value_type(g.inputs()[i]);
  s += ") {\n";
  for (const auto& n : g.nodes()) {
    s += "  ";
    for (size_t i = 0; i < n->outputs.size(); ++i)
      s += (i ? ", " : "") + name(n->outputs[i]) + ": " + value_type(n->outputs[i]);
    if (!n->outputs.empty()) s += " = ";
    s += std::string(op_target(n->op)) + "(";
    for (size_t i = 0; i < n->args.size(); ++i)
      s += (i ? ", " : "") + n->args[i].name + "=" + print_arg(n->args[i].value, name);
    s += ")\n";
  }
  s += "  return (";
  for (size_t i = 0; i < g.outputs().size(); ++i) s += (i ? ", " : "") + name(g.outputs()[i]);
  s += ")\n}\n";
  return s;
}

// ---------------------------------------------------------------- parser

namespace {

class Parser {
 public:
  explicit Parser(std::string_view t) : t_(t) {}

  Expected<Graph> parse() {
    KILN_TRY(expect_word("graph"));
    KILN_TRY(expect('('));
    if (!eat(')')) {
      do {
        KILN_ASSIGN_OR_RETURN(std::string n, value_name());
        KILN_TRY(expect(':'));
        KILN_ASSIGN_OR_RETURN(auto ty, type());
        if (values_.count(n)) return error(FileFault::kDuplicateName, "value %" + n + " defined twice");
        values_[n] = g_.add_input(n, ty.first, ty.second);
        values_[n]->sym = std::move(last_sym_);
      } while (eat(','));
      KILN_TRY(expect(')'));
    }
    KILN_TRY(expect('{'));
    while (true) {
      skip_ws();
      if (peek_word("return")) break;
      KILN_TRY(node());
    }
    KILN_TRY(expect_word("return"));
    KILN_TRY(expect('('));
    if (!eat(')')) {
      do {
        KILN_ASSIGN_OR_RETURN(Value * v, use());
        g_.outputs().push_back(v);
      } while (eat(','));
      KILN_TRY(expect(')'));
    }
    KILN_TRY(expect('}'));
    skip_ws();
    if (p_ != t_.size()) return error("text after the closing brace");
    KILN_TRY(g_.verify());
    return std::move(g_);
  }

 private:
  Status node() {
    std::vector<std::pair<std::string, std::pair<ValueKind, TensorType>>> outs;
    std::vector<SymExprPtr> out_syms;
    skip_ws();
    if (peek() == '%') {
      do {
        KILN_ASSIGN_OR_RETURN(std::string n, value_name());
        KILN_TRY(expect(':'));
        KILN_ASSIGN_OR_RETURN(auto ty, type());
        outs.push_back({n, ty});
        out_syms.push_back(std::move(last_sym_));
      } while (eat(','));
      KILN_TRY(expect('='));
    }
    std::string target = word(".");
    auto op = op_from_target(target);
    if (!op) return error(FileFault::kUnknownOp, "unknown op '" + target + "'");
    KILN_TRY(expect('('));
    std::vector<NamedArg> args;
    if (!eat(')')) {
      do {
        std::string an = word("");
        if (an.empty()) return error("expected an argument name");
        KILN_TRY(expect('='));
        KILN_ASSIGN_OR_RETURN(Arg a, arg());
        args.push_back({an, std::move(a)});
      } while (eat(','));
      KILN_TRY(expect(')'));
    }
    Node* n = g_.add_node(*op, outs.empty() ? target : outs[0].first, std::move(args), {});
    int idx = 0;
    for (auto& [name, ty] : outs) {
      if (values_.count(name)) return error(FileFault::kDuplicateName, "value %" + name + " defined twice");
      Value* v = g_.add_value(name, ty.first, ty.second);
      v->sym = out_syms[static_cast<size_t>(idx)];
      v->producer = n;
      v->output_index = idx++;
      n->outputs.push_back(v);
      values_[name] = v;
    }
    return Status::ok();
  }

  Expected<Arg> arg() {
    skip_ws();
    char c = peek();
    if (c == '%') {
      KILN_ASSIGN_OR_RETURN(Value * v, use());
      return Arg(v);
    }
    if (c == '"') {
      KILN_ASSIGN_OR_RETURN(std::string s, string_lit());
      return Arg(s);
    }
    if (c == '?') {
      ++p_;
      KILN_TRY(expect('['));
      std::vector<std::optional<Value*>> l;
      if (!eat(']')) {
        do {
          skip_ws();
          if (peek_word("None")) {
            word("");
            l.emplace_back(std::nullopt);
          } else {
            KILN_ASSIGN_OR_RETURN(Value * v, use());
            l.emplace_back(v);
          }
        } while (eat(','));
        KILN_TRY(expect(']'));
      }
      return Arg(std::move(l));
    }
    if (c == '[') return list();
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return number();
    std::string w = word(".");
    if (w == "None") return Arg(NoneArg{});
    if (w == "true") return Arg(true);
    if (w == "false") return Arg(false);
    if (w == "inf") return Arg(INFINITY);
    if (w == "nan") return Arg(NAN);
    if (w.starts_with("dtype.")) {
      auto d = dtype_from_name(w.substr(6));
      if (!d) return error(FileFault::kUnknownDtype, "unknown dtype '" + w + "'");
      return Arg(*d);
    }
    if (w == "device") {
      KILN_TRY(expect('('));
      Device d;
      KILN_ASSIGN_OR_RETURN(d.type, string_lit());
      if (eat(',')) {
        KILN_ASSIGN_OR_RETURN(Arg i, number());
        d.index = std::get<int64_t>(i);
      }
      KILN_TRY(expect(')'));
      return Arg(d);
    }
    return error("cannot parse argument starting with '" + w + "'");
  }

  Expected<Arg> list() {
    KILN_TRY(expect('['));
    std::vector<Arg> items;
    if (!eat(']')) {
      do {
        KILN_ASSIGN_OR_RETURN(Arg a, arg());
        items.push_back(std::move(a));
      } while (eat(','));
      KILN_TRY(expect(']'));
    }
    bool all_int = true, all_num = true, all_bool = true, all_tensor = true, all_symint = true;
    for (const Arg& a : items) {
      bool is_int = std::holds_alternative<int64_t>(a);
      bool is_val = std::holds_alternative<Value*>(a);
      all_int &= is_int;
      all_num &= is_int || std::holds_alternative<double>(a);
      all_bool &= std::holds_alternative<bool>(a);
      all_tensor &= is_val && std::get<Value*>(a)->kind == ValueKind::kTensor;
      all_symint &= is_int || (is_val && std::get<Value*>(a)->kind != ValueKind::kTensor);
    }
    if (all_int) {
      std::vector<int64_t> l;
      for (const Arg& a : items) l.push_back(std::get<int64_t>(a));
      return Arg(std::move(l));
    }
    if (all_num) {
      std::vector<double> l;
      for (const Arg& a : items)
        l.push_back(std::holds_alternative<double>(a) ? std::get<double>(a)
                                                      : static_cast<double>(std::get<int64_t>(a)));
      return Arg(std::move(l));
    }
    if (all_bool) {
      std::vector<bool> l;
      for (const Arg& a : items) l.push_back(std::get<bool>(a));
      return Arg(std::move(l));
    }
    if (all_tensor) {
      std::vector<Value*> l;
      for (const Arg& a : items) l.push_back(std::get<Value*>(a));
      return Arg(std::move(l));
    }
    if (all_symint) {
      std::vector<SymInt> l;
      for (const Arg& a : items) {
        if (auto* i = std::get_if<int64_t>(&a))
          l.emplace_back(*i);
        else
          l.emplace_back(std::get<Value*>(a));
      }
      return Arg(std::move(l));
    }
    return error("list mixes kinds of elements");
  }

  Expected<Arg> number() {
    skip_ws();
    size_t b = p_;
    if (peek() == '-') ++p_;
    if (t_.substr(p_).starts_with("inf")) {
      p_ += 3;
      return Arg(-INFINITY);
    }
    bool is_float = false;
    while (p_ < t_.size() &&
           (std::isdigit(static_cast<unsigned char>(t_[p_])) || t_[p_] == '.' || t_[p_] == 'e' || t_[p_] == 'E' ||
            ((t_[p_] == '-' || t_[p_] == '+') && (t_[p_ - 1] == 'e' || t_[p_ - 1] == 'E')))) {
      if (t_[p_] == '.' || t_[p_] == 'e' || t_[p_] == 'E') is_float = true;
      ++p_;
    }
    std::string s(t_.substr(b, p_ - b));
    try {
      if (is_float) return Arg(std::stod(s));
      return Arg(static_cast<int64_t>(std::stoll(s)));
    } catch (...) {
      return error("bad number '" + s + "'");
    }
  }

  Expected<std::pair<ValueKind, TensorType>> type() {
    std::string w = word("");
    last_sym_ = nullptr;
    if (w == "symint") {
      // A symbolic scalar whose expression is known: symint[2*s0 + 1].
      if (eat('[')) {
        skip_ws();
        size_t b = p_;
        int depth = 0;
        while (p_ < t_.size() && !(depth == 0 && t_[p_] == ']')) {
          if (t_[p_] == '[') ++depth;
          if (t_[p_] == ']') --depth;
          ++p_;
        }
        auto e = parse_sym_infix(std::string(t_.substr(b, p_ - b)));
        if (!e.has_value()) return error(e.status().message());
        KILN_TRY(expect(']'));
        last_sym_ = *e;
      }
      return std::pair{ValueKind::kSymInt, TensorType{}};
    }
    if (w == "symfloat") return std::pair{ValueKind::kSymFloat, TensorType{}};
    if (w == "symbool") return std::pair{ValueKind::kSymBool, TensorType{}};
    auto d = dtype_from_name(w);
    if (!d) return error(FileFault::kUnknownDtype, "unknown type '" + w + "'");
    TensorType t;
    t.dtype = *d;
    KILN_TRY(expect('['));
    if (!eat(']')) {
      // Each size runs to the next ',' or ']' at bracket depth 0.
      while (true) {
        skip_ws();
        size_t b = p_;
        int depth = 0;
        while (p_ < t_.size() && !(depth == 0 && (t_[p_] == ',' || t_[p_] == ']'))) {
          if (t_[p_] == '(') ++depth;
          if (t_[p_] == ')') --depth;
          ++p_;
        }
        auto e = parse_sym_infix(std::string(t_.substr(b, p_ - b)));
        if (!e.has_value()) return error(e.status().message());
        t.sizes.push_back(Dim::of(*e));
        if (eat(']')) break;
        KILN_TRY(expect(','));
      }
    }
    return std::pair{ValueKind::kTensor, t};
  }

  Expected<std::string> value_name() {
    skip_ws();
    if (peek() != '%') return error("expected a value name");
    ++p_;
    std::string n = word(".");
    if (n.empty()) return error("empty value name");
    return n;
  }

  Expected<Value*> use() {
    KILN_ASSIGN_OR_RETURN(std::string n, value_name());
    auto it = values_.find(n);
    if (it == values_.end()) return error(FileFault::kDanglingReference, "use of undefined value %" + n);
    return it->second;
  }

  Expected<std::string> string_lit() {
    skip_ws();
    if (peek() != '"') return error("expected a string");
    ++p_;
    std::string s;
    while (p_ < t_.size() && t_[p_] != '"') {
      if (t_[p_] == '\\' && p_ + 1 < t_.size()) {
        ++p_;
        s += t_[p_] == 'n' ? '\n' : t_[p_];
      } else {
        s += t_[p_];
      }
      ++p_;
    }
    if (p_ >= t_.size()) return error("unterminated string");
    ++p_;
    return s;
  }

  std::string word(const char* extra) {
    skip_ws();
    size_t b = p_;
    while (p_ < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[p_])) || t_[p_] == '_' ||
                              std::string_view(extra).find(t_[p_]) != std::string_view::npos))
      ++p_;
    return std::string(t_.substr(b, p_ - b));
  }
  bool peek_word(std::string_view w) {
    skip_ws();
    return t_.substr(p_).starts_with(w);
  }
  Status expect_word(std::string_view w) {
    if (word("") != w) return error("expected '" + std::string(w) + "'");
    return Status::ok();
  }
  void skip_ws() {
    while (p_ < t_.size()) {
      if (std::isspace(static_cast<unsigned char>(t_[p_]))) {
        ++p_;
      } else if (t_[p_] == '#') {  // comment to end of line
        while (p_ < t_.size() && t_[p_] != '\n') ++p_;
      } else {
        break;
      }
    }
  }
  char peek() { return p_ < t_.size() ? t_[p_] : '\0'; }
  bool eat(char c) {
    skip_ws();
    if (peek() == c) {
      ++p_;
      return true;
    }
    return false;
  }
  Status expect(char c) {
    if (!eat(c)) return error(std::string("expected '") + c + "'");
    return Status::ok();
  }
  Status error(const std::string& what) const { return error(FileFault::kMalformed, what); }
  Status error(FileFault fault, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < p_ && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return format_error(fault, "IR text line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
  }

  std::string_view t_;
  size_t p_ = 0;
  Graph g_;
  std::map<std::string, Value*, std::less<>> values_;
  SymExprPtr last_sym_;  // the expression of the last symint type() read, if it had one
};

}  // namespace

Expected<Graph> parse_graph(std::string_view text) { return Parser(text).parse(); }

bool graphs_equal(const Graph& a, const Graph& b, std::string* why) {
  auto fail = [&](const std::string& m) {
    if (why) *why = m;
    return false;
  };
  // Print both with positional names; equal text means equal structure.
  auto canonical = [](const Graph& g) {
    Graph c = g.clone();
    for (size_t i = 0; i < c.num_values(); ++i) c.value(i)->name = "v" + std::to_string(i);
    // Names follow definition order so that two graphs built differently compare equal.
    int k = 0;
    for (Value* v : c.inputs()) v->name = "in" + std::to_string(k++);
    k = 0;
    for (const auto& n : c.nodes())
      for (Value* v : n->outputs) v->name = "t" + std::to_string(k++);
    return print_graph(c);
  };
  std::string pa = canonical(a), pb = canonical(b);
  if (pa != pb) return fail("graphs differ:\n" + pa + "---\n" + pb);
  return true;
}

}  // namespace kiln::ir
