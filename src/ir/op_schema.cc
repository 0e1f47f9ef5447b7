#include "ir/op_schema.h"

#include <array>
#include <charconv>
#include <cstdlib>
#include <mutex>

namespace kiln::ir {

namespace {

struct SchemaEntry {
  OpKind op;
  const char* text;
};

constexpr SchemaEntry kSchemas[] = {
#define KILN_SCHEMA(e, text) {OpKind::k##e, text},
#include "ir/op_schemas.inc"
#undef KILN_SCHEMA
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// The parts of `s` between top-level commas (brackets and parentheses nest).
std::vector<std::string_view> split_top(std::string_view s) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  bool quoted = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"' || c == '\'') quoted = !quoted;
    if (quoted) continue;
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  if (!trim(s.substr(start)).empty()) out.push_back(trim(s.substr(start)));
  return out;
}

std::optional<int64_t> parse_int(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_double(std::string_view s) {
  const std::string text(s);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) return std::nullopt;
  return v;
}

// A default as the schema writes it, read as the argument a node would carry.
// `list_length`: N for a list type of N (int[2]), else 0.
std::optional<Arg> parse_default(std::string_view text, const std::string& base, int64_t list_length) {
  if (text == "None") return Arg(NoneArg{});
  if (text == "True") return Arg(true);
  if (text == "False") return Arg(false);
  if (text.size() >= 2 && (text.front() == '"' || text.front() == '\'') && text.back() == text.front())
    return Arg(std::string(text.substr(1, text.size() - 2)));
  if (text.front() == '[') {
    std::vector<int64_t> ints;
    std::vector<double> floats;
    bool all_int = true;
    for (std::string_view item : split_top(text.substr(1, text.size() - 2))) {
      if (auto i = parse_int(item)) {
        ints.push_back(*i);
        floats.push_back(static_cast<double>(*i));
      } else if (auto d = parse_double(item)) {
        all_int = false;
        floats.push_back(*d);
      } else {
        return std::nullopt;
      }
    }
    if (base.rfind("float", 0) == 0 || !all_int) return Arg(floats);
    return Arg(ints);
  }
  if (auto i = parse_int(text)) {
    // One int for a list of N (int[2] padding=0) is that int N times, as ATen reads it.
    if (list_length > 0) return Arg(std::vector<int64_t>(static_cast<size_t>(list_length), *i));
    if (base == "float") return Arg(static_cast<double>(*i));
    return Arg(*i);
  }
  if (auto d = parse_double(text)) return Arg(*d);
  return std::nullopt;
}

// "Tensor(a!)" -> "Tensor", "Tensor(a)[]" -> "Tensor[]".
std::string without_alias(std::string_view type) {
  std::string out;
  int depth = 0;
  for (char c : type) {
    if (c == '(') ++depth;
    if (depth == 0) out += c;
    if (c == ')') --depth;
  }
  return out;
}

}  // namespace

std::string ArgumentSchema::base_type() const {
  std::string t = optional() ? type.substr(0, type.size() - 1) : type;
  const size_t b = t.find('[');
  if (b != std::string::npos) t = t.substr(0, b) + "[]";
  return t;
}

int64_t ArgumentSchema::list_length() const {
  const size_t open = type.find('['), close = type.find(']');
  if (open == std::string::npos || close == std::string::npos || close == open + 1) return 0;
  return parse_int(std::string_view(type).substr(open + 1, close - open - 1)).value_or(0);
}

bool ArgumentSchema::is_tensor() const { return base_type() == "Tensor"; }

bool ArgumentSchema::is_tensor_list() const {
  const std::string b = base_type();
  return b == "Tensor[]" || b == "Tensor?[]";
}

const ArgumentSchema* OpSchema::find(std::string_view name) const {
  for (const ArgumentSchema& a : arguments)
    if (a.name == name) return &a;
  return nullptr;
}

Expected<OpSchema> parse_op_schema(std::string_view text) {
  OpSchema s;
  s.text = std::string(text);
  const size_t open = text.find('(');
  const size_t arrow = text.rfind(") ->");
  if (open == std::string_view::npos || arrow == std::string_view::npos || arrow < open)
    return format_error("op schema '" + s.text + "': no argument list");
  bool keyword_only = false;
  for (std::string_view part : split_top(text.substr(open + 1, arrow - open - 1))) {
    if (part == "*") {
      keyword_only = true;
      continue;
    }
    ArgumentSchema a;
    a.keyword_only = keyword_only;
    std::string_view decl = part;
    const size_t eq = part.find('=');
    if (eq != std::string_view::npos) {
      decl = trim(part.substr(0, eq));
      a.has_default = true;
    }
    const size_t space = decl.rfind(' ');
    if (space == std::string_view::npos)
      return format_error("op schema '" + s.text + "': argument '" + std::string(part) + "' has no name");
    a.type = without_alias(trim(decl.substr(0, space)));
    a.name = std::string(trim(decl.substr(space + 1)));
    if (a.has_default) a.default_value = parse_default(trim(part.substr(eq + 1)), a.base_type(), a.list_length());
    s.arguments.push_back(std::move(a));
  }
  return s;
}

const OpSchema* op_schema(OpKind op) {
  static const std::vector<std::optional<OpSchema>>* table = [] {
    auto* t = new std::vector<std::optional<OpSchema>>(op_count() + 1);
    for (const SchemaEntry& e : kSchemas) {
      auto parsed = parse_op_schema(e.text);
      if (parsed) (*t)[static_cast<size_t>(e.op)] = std::move(*parsed);
    }
    return t;
  }();
  const size_t i = static_cast<size_t>(op);
  return i < table->size() && (*table)[i] ? &*(*table)[i] : nullptr;
}

Status check_arguments(const Node& n) {
  const OpSchema* schema = op_schema(n.op);
  if (!schema) return Status::ok();
  auto bad = [&](const std::string& what) {
    return invalid_argument(n.describe() + ": " + what + " (its schema: " + schema->text + ")");
  };
  for (const NamedArg& a : n.args) {
    const ArgumentSchema* s = schema->find(a.name);
    if (!s) return bad("argument '" + a.name + "' is not one the op declares");
    const bool value = std::holds_alternative<Value*>(a.value);
    const bool none = std::holds_alternative<NoneArg>(a.value);
    if (s->is_tensor()) {
      // A Python number (or a symbolic one) in a tensor's place is a wrapped
      // number, as PyTorch takes it (x + 1 exports as add.Tensor(x, 1)).
      const bool number = value || std::holds_alternative<int64_t>(a.value) ||
                          std::holds_alternative<double>(a.value) || std::holds_alternative<bool>(a.value);
      if (!number && !(none && s->optional()))
        return bad("argument '" + a.name + "' must be a tensor" + (s->optional() ? " or None" : ""));
    } else if (value && std::get<Value*>(a.value)->kind == ValueKind::kTensor) {
      return bad("argument '" + a.name + "' is " + s->type + ", not a tensor");
    }
  }
  for (const ArgumentSchema& s : schema->arguments) {
    if (s.has_default || s.optional()) continue;
    if (!n.find(s.name)) return bad("argument '" + s.name + "' (" + s.type + ") is not given");
  }
  return Status::ok();
}

const Arg* argument_or_default(const Node& n, std::string_view name) {
  if (const Arg* a = n.find(name)) return a;
  const OpSchema* schema = op_schema(n.op);
  const ArgumentSchema* s = schema ? schema->find(name) : nullptr;
  return s && s->default_value ? &*s->default_value : nullptr;
}

}  // namespace kiln::ir
