#include "engine/elementwise_program.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln::engine {

namespace {

using ir::OpKind;

// What an instruction of each op holds (see the header's table).
struct OpLayout {
  OpKind op;
  int operands;
  int scalars;
  bool has_mode;
};

constexpr std::array kLayouts = {
    OpLayout{OpKind::kAddTensor, 2, 1, false},  OpLayout{OpKind::kAddScalar, 1, 2, false},
    OpLayout{OpKind::kSubTensor, 2, 1, false},  OpLayout{OpKind::kSubScalar, 1, 2, false},
    OpLayout{OpKind::kRsubScalar, 1, 2, false}, OpLayout{OpKind::kMulTensor, 2, 0, false},
    OpLayout{OpKind::kMulScalar, 1, 1, false},  OpLayout{OpKind::kDivTensor, 2, 0, false},
    OpLayout{OpKind::kDivScalar, 1, 1, false},  OpLayout{OpKind::kPowTensorScalar, 1, 1, false},
    OpLayout{OpKind::kNeg, 1, 0, false},        OpLayout{OpKind::kAbs, 1, 0, false},
    OpLayout{OpKind::kExp, 1, 0, false},        OpLayout{OpKind::kLog, 1, 0, false},
    OpLayout{OpKind::kSqrt, 1, 0, false},       OpLayout{OpKind::kRsqrt, 1, 0, false},
    OpLayout{OpKind::kReciprocal, 1, 0, false}, OpLayout{OpKind::kSin, 1, 0, false},
    OpLayout{OpKind::kCos, 1, 0, false},        OpLayout{OpKind::kTanh, 1, 0, false},
    OpLayout{OpKind::kErf, 1, 0, false},        OpLayout{OpKind::kSigmoid, 1, 0, false},
    OpLayout{OpKind::kRelu, 1, 0, false},       OpLayout{OpKind::kGelu, 1, 0, true},
    OpLayout{OpKind::kSilu, 1, 0, false},       OpLayout{OpKind::kHardtanh, 1, 2, false},
    OpLayout{OpKind::kHardswish, 1, 0, false},  OpLayout{OpKind::kHardsigmoid, 1, 0, false},
    OpLayout{OpKind::kClamp, 1, 2, false},      OpLayout{OpKind::kClampMin, 1, 1, false},
    OpLayout{OpKind::kSiluMul, 2, 0, false},    OpLayout{OpKind::kLog1p, 1, 0, false},
    OpLayout{OpKind::kExpm1, 1, 0, false},      OpLayout{OpKind::kFloor, 1, 0, false},
    OpLayout{OpKind::kCeil, 1, 0, false},       OpLayout{OpKind::kTrunc, 1, 0, false},
    OpLayout{OpKind::kRound, 1, 0, false},      OpLayout{OpKind::kSign, 1, 0, false},
    OpLayout{OpKind::kMinimum, 2, 0, false},    OpLayout{OpKind::kMaximum, 2, 0, false},
    OpLayout{OpKind::kAtan2, 2, 0, false},      OpLayout{OpKind::kHypot, 2, 0, false},
};

const OpLayout* find_layout(OpKind op) {
  for (const OpLayout& l : kLayouts)
    if (l.op == op) return &l;
  return nullptr;
}

// The message for an instruction that does not fit its op's layout, or "".
// `first_register` is the register the instruction writes.
std::string instr_problem(const ElementwiseInstr& in, int first_register) {
  const OpLayout* l = find_layout(in.op);
  if (l == nullptr) return "op " + std::string(ir::op_target(in.op)) + " cannot be part of an elementwise program";
  const std::string op(ir::op_target(in.op));
  if (static_cast<int>(in.operands.size()) != l->operands)
    return op + " reads " + std::to_string(l->operands) + " register(s), got " + std::to_string(in.operands.size());
  if (static_cast<int>(in.scalars.size()) != l->scalars)
    return op + " takes " + std::to_string(l->scalars) + " number(s), got " + std::to_string(in.scalars.size());
  for (int r : in.operands)
    if (r < 0 || r >= first_register)
      return "register %" + std::to_string(r) + " is not defined before %" + std::to_string(first_register);
  if (l->has_mode) {
    if (in.mode != "none" && in.mode != "tanh") return op + " needs the mode 'none' or 'tanh', got '" + in.mode + "'";
  } else if (!in.mode.empty()) {
    return op + " takes no mode, got '" + in.mode + "'";
  }
  return "";
}

// ---- numbers in text

constexpr uint64_t kQuietNan = 0x7ff8000000000000ull;
constexpr uint64_t kNegativeQuietNan = 0xfff8000000000000ull;

void append_double(std::string& s, double d) {
  if (std::isnan(d)) {
    const uint64_t bits = std::bit_cast<uint64_t>(d);
    if (bits == kQuietNan) {
      s += "nan";
    } else if (bits == kNegativeQuietNan) {
      s += "-nan";
    } else {
      // Any other NaN keeps its sign and payload.
      char buf[17];
      auto r = std::to_chars(buf, buf + sizeof buf, bits, 16);
      s += "nan(0x" + std::string(static_cast<size_t>(16 - (r.ptr - buf)), '0') + std::string(buf, r.ptr) + ")";
    }
    return;
  }
  if (std::isinf(d)) {
    s += d > 0 ? "inf" : "-inf";
    return;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, d);  // shortest text that reads back to d
  s.append(buf, r.ptr);
}

void append_int(std::string& s, int v) {
  char buf[16];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  s.append(buf, r.ptr);
}

// ---- parser

class ProgramParser {
 public:
  explicit ProgramParser(std::string_view t) : t_(t) {}

  Expected<ElementwiseProgram> parse() {
    ElementwiseProgram p;
    skip_space();
    if (at_end()) return error("empty program (expected 'inputs N; ...')");
    if (!eat_word("inputs")) return error("expected 'inputs'");
    skip_space();
    KILN_ASSIGN_OR_RETURN(p.num_inputs, integer("the number of inputs"));
    if (p.num_inputs < 1) return error("a program needs at least one input");
    while (true) {
      skip_space();
      if (at_end()) break;
      instr_index_ = static_cast<int>(p.instrs.size()) + 1;
      if (!eat(';')) return error("expected ';' between instructions");
      skip_space();
      const size_t start = pos_;
      const int reg = p.num_inputs + static_cast<int>(p.instrs.size());
      if (!eat('%')) return error("expected '%" + std::to_string(reg) + " ='");
      KILN_ASSIGN_OR_RETURN(int dst, integer("a register number"));
      if (dst != reg) return error("instruction writes %" + std::to_string(dst) + ", expected %" + std::to_string(reg));
      skip_space();
      if (!eat('=')) return error("expected '='");
      KILN_ASSIGN_OR_RETURN(ElementwiseInstr in, instruction());
      if (std::string why = instr_problem(in, reg); !why.empty()) return error_at(start, why);
      p.instrs.push_back(std::move(in));
    }
    if (p.instrs.empty()) return error("a program needs at least one instruction");
    return p;
  }

 private:
  bool at_end() const { return pos_ >= t_.size(); }
  char peek() const { return at_end() ? '\0' : t_[pos_]; }
  void skip_space() {
    while (!at_end() && (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' || t_[pos_] == '\r')) ++pos_;
  }
  bool eat(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  bool eat_word(std::string_view w) {
    if (t_.substr(pos_).substr(0, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }

  Status error_at(size_t offset, const std::string& message) const {
    const std::string where = instr_index_ == 0 ? "header" : "instruction " + std::to_string(instr_index_);
    return format_error("elementwise program, offset " + std::to_string(offset) + " (" + where + "): " + message);
  }
  Status error(const std::string& message) const { return error_at(pos_, message); }

  Expected<int> integer(const char* what) {
    int v = 0;
    auto r = std::from_chars(t_.data() + pos_, t_.data() + t_.size(), v);
    if (r.ec != std::errc() || r.ptr == t_.data() + pos_) return error(std::string("expected ") + what);
    pos_ = static_cast<size_t>(r.ptr - t_.data());
    return v;
  }

  // `op(%a, %b, 1.5, 'mode')`, after the '='.
  Expected<ElementwiseInstr> instruction() {
    skip_space();
    const size_t op_start = pos_;
    while (!at_end() && (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_' || peek() == '.')) ++pos_;
    const std::string_view target = t_.substr(op_start, pos_ - op_start);
    if (target.empty()) return error("expected an op name");
    auto op = ir::op_from_target(target);
    if (!op) return error_at(op_start, "unknown op '" + std::string(target) + "'");
    ElementwiseInstr in;
    in.op = *op;
    skip_space();
    if (!eat('(')) return error("expected '(' after the op name");
    skip_space();
    if (eat(')')) return in;
    bool have_mode = false;
    while (true) {
      skip_space();
      if (have_mode) return error("the mode must be the last argument");
      if (eat('%')) {
        if (!in.scalars.empty()) return error("registers must come before numbers");
        KILN_ASSIGN_OR_RETURN(int r, integer("a register number"));
        in.operands.push_back(r);
      } else if (eat('\'')) {
        const size_t end = t_.find('\'', pos_);
        if (end == std::string_view::npos) return error("unterminated mode");
        in.mode = std::string(t_.substr(pos_, end - pos_));
        pos_ = end + 1;
        have_mode = true;
      } else {
        KILN_ASSIGN_OR_RETURN(double d, number());
        in.scalars.push_back(d);
      }
      skip_space();
      if (eat(')')) return in;
      if (!eat(',')) return error("expected ',' or ')'");
    }
  }

  Expected<double> number() {
    const size_t start = pos_;
    if (eat_word("nan(0x")) {
      const size_t end = t_.find(')', pos_);
      uint64_t bits = 0;
      if (end == std::string_view::npos) return error_at(start, "unterminated NaN pattern");
      auto r = std::from_chars(t_.data() + pos_, t_.data() + end, bits, 16);
      const double d = std::bit_cast<double>(bits);
      if (r.ec != std::errc() || r.ptr != t_.data() + end || !std::isnan(d))
        return error_at(start, "bad NaN pattern '" + std::string(t_.substr(start, end + 1 - start)) + "'");
      pos_ = end + 1;
      return d;
    }
    while (!at_end() && peek() != ',' && peek() != ')' && peek() != ' ' && peek() != ';') ++pos_;
    const std::string_view tok = t_.substr(start, pos_ - start);
    if (tok == "inf") return std::numeric_limits<double>::infinity();
    if (tok == "-inf") return -std::numeric_limits<double>::infinity();
    if (tok == "nan") return std::bit_cast<double>(kQuietNan);
    if (tok == "-nan") return std::bit_cast<double>(kNegativeQuietNan);
    // Only digits, signs, '.', and exponents from here: from_chars alone
    // would also take words such as "infinity".
    const bool numeric = !tok.empty() && tok.find_first_not_of("0123456789+-.eE") == std::string_view::npos;
    double d = 0;
    auto r = std::from_chars(tok.data(), tok.data() + tok.size(), d, std::chars_format::general);
    if (!numeric || r.ec != std::errc() || r.ptr != tok.data() + tok.size())
      return error_at(start, "bad number '" + std::string(tok) + "'");
    return d;
  }

  std::string_view t_;
  size_t pos_ = 0;
  int instr_index_ = 0;
};

// ---- reading nodes

bool fusible_dtype(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

bool is_none(const ir::Arg* a) { return a == nullptr || std::holds_alternative<ir::NoneArg>(*a); }

// A Python number: ints exactly representable as doubles, or floats. Bools
// and symbolic values are not taken.
std::optional<double> number_arg(const ir::Arg* a) {
  if (a == nullptr) return std::nullopt;
  if (const double* d = std::get_if<double>(a)) return *d;
  if (const int64_t* i = std::get_if<int64_t>(a)) {
    constexpr int64_t kExact = int64_t{1} << 53;
    if (*i < -kExact || *i > kExact) return std::nullopt;
    return static_cast<double>(*i);
  }
  return std::nullopt;
}

// A number argument with a schema default used when it is absent or None (as
// the kernels read it).
std::optional<double> number_or(const ir::Node& n, std::string_view name, double fallback) {
  const ir::Arg* a = n.find(name);
  if (is_none(a)) return fallback;
  return number_arg(a);
}

bool holds_value(const ir::Arg* a) { return a != nullptr && std::holds_alternative<ir::Value*>(*a); }

OpKind scalar_form(OpKind op) {
  switch (op) {
    case OpKind::kAddTensor: return OpKind::kAddScalar;
    case OpKind::kSubTensor: return OpKind::kSubScalar;
    case OpKind::kRsubTensor: return OpKind::kRsubScalar;
    case OpKind::kMulTensor: return OpKind::kMulScalar;
    case OpKind::kDivTensor:
    case OpKind::kDivTensorMode: return OpKind::kDivScalar;
    default: return op;
  }
}

bool is_plain_unary(OpKind op) {
  switch (op) {
    case OpKind::kNeg:
    case OpKind::kAbs:
    case OpKind::kExp:
    case OpKind::kLog:
    case OpKind::kSqrt:
    case OpKind::kRsqrt:
    case OpKind::kReciprocal:
    case OpKind::kSin:
    case OpKind::kCos:
    case OpKind::kTanh:
    case OpKind::kErf:
    case OpKind::kLog1p:
    case OpKind::kExpm1:
    case OpKind::kFloor:
    case OpKind::kCeil:
    case OpKind::kTrunc:
    case OpKind::kRound:
    case OpKind::kSign:
    case OpKind::kSigmoid:
    case OpKind::kRelu:
    case OpKind::kSilu:
    case OpKind::kHardswish:
    case OpKind::kHardsigmoid: return true;
    default: return false;
  }
}

}  // namespace

bool is_elementwise_program_op(OpKind op) {
  if (is_plain_unary(op) || scalar_form(op) != op) return true;
  switch (op) {
    case OpKind::kAddScalar:
    case OpKind::kSubScalar:
    case OpKind::kRsubScalar:
    case OpKind::kMulScalar:
    case OpKind::kDivScalar:
    case OpKind::kPowTensorScalar:
    case OpKind::kClamp:
    case OpKind::kClampMin:
    case OpKind::kHardtanh:
    case OpKind::kGelu:
    case OpKind::kMinimum:
    case OpKind::kMaximum:
    case OpKind::kAtan2:
    case OpKind::kHypot:
    case OpKind::kSiluMul: return true;
    default: return false;
  }
}

std::string ElementwiseProgram::to_text() const {
  std::string s = "inputs ";
  append_int(s, num_inputs);
  for (size_t i = 0; i < instrs.size(); ++i) {
    const ElementwiseInstr& in = instrs[i];
    s += "; %";
    append_int(s, num_inputs + static_cast<int>(i));
    s += " = ";
    s += ir::op_target(in.op);
    s += "(";
    bool first = true;
    auto sep = [&] {
      if (!first) s += ", ";
      first = false;
    };
    for (int r : in.operands) {
      sep();
      s += "%";
      append_int(s, r);
    }
    for (double d : in.scalars) {
      sep();
      append_double(s, d);
    }
    if (!in.mode.empty()) {
      sep();
      s += "'" + in.mode + "'";
    }
    s += ")";
  }
  return s;
}

Expected<ElementwiseProgram> ElementwiseProgram::parse(std::string_view text) { return ProgramParser(text).parse(); }

Status ElementwiseProgram::validate() const {
  if (num_inputs < 1)
    return format_error("elementwise program: needs at least one input, has " + std::to_string(num_inputs));
  if (instrs.empty()) return format_error("elementwise program: has no instructions");
  for (size_t i = 0; i < instrs.size(); ++i) {
    const int reg = num_inputs + static_cast<int>(i);
    if (std::string why = instr_problem(instrs[i], reg); !why.empty())
      return format_error("elementwise program, instruction " + std::to_string(i + 1) + " (%" + std::to_string(reg) +
                          "): " + why);
  }
  return Status::ok();
}

std::optional<ElementwiseInstr> elementwise_instr(const ir::Node& node, std::vector<ir::Value*>* tensor_operands) {
  if (node.outputs.size() != 1) return std::nullopt;
  const ir::Value* out = node.outputs[0];
  if (out->kind != ir::ValueKind::kTensor || !fusible_dtype(out->type.dtype)) return std::nullopt;
  const DType dtype = out->type.dtype;

  std::vector<ir::Value*> reads;
  std::vector<std::string_view> names;  // every argument name the op may have
  auto read_tensor = [&](std::string_view name) {
    const ir::Arg* a = node.find(name);
    if (!holds_value(a)) return false;
    ir::Value* v = std::get<ir::Value*>(*a);
    if (v->kind != ir::ValueKind::kTensor || v->type.dtype != dtype) return false;
    reads.push_back(v);
    return true;
  };

  ElementwiseInstr in;
  in.op = node.op;
  if (node.op == OpKind::kSiluMul) {
    names = {"a", "b"};
    if (!read_tensor("a") || !read_tensor("b")) return std::nullopt;
  } else {
    names = {"self"};
    if (!read_tensor("self")) return std::nullopt;
  }
  switch (node.op) {
    case OpKind::kSiluMul: break;
    case OpKind::kMinimum:
    case OpKind::kMaximum:
    case OpKind::kAtan2:
    case OpKind::kHypot:
      names.push_back("other");
      if (!read_tensor("other")) return std::nullopt;
      break;
    case OpKind::kAddTensor:
    case OpKind::kAddScalar:
    case OpKind::kSubTensor:
    case OpKind::kSubScalar:
    case OpKind::kRsubTensor:
    case OpKind::kRsubScalar:
    case OpKind::kMulTensor:
    case OpKind::kMulScalar:
    case OpKind::kDivTensor:
    case OpKind::kDivScalar:
    case OpKind::kDivTensorMode: {
      names.push_back("other");
      if (node.op == OpKind::kDivTensorMode) {
        // Only true division; the rounding modes are not elementwise programs' business.
        if (!is_none(node.find("rounding_mode"))) return std::nullopt;
        names.push_back("rounding_mode");
      }
      const OpKind scalar_op = scalar_form(node.op);
      const bool tensor_overload = scalar_op != node.op;
      if (holds_value(node.find("other"))) {
        // rsub with two tensors is not in the list; a .Scalar overload takes a number.
        if (!tensor_overload || node.op == OpKind::kRsubTensor || !read_tensor("other")) return std::nullopt;
        in.op = node.op == OpKind::kDivTensorMode ? OpKind::kDivTensor : node.op;
      } else {
        auto other = number_arg(node.find("other"));
        if (!other) return std::nullopt;
        in.op = scalar_op;
        in.scalars.push_back(*other);
      }
      const bool has_alpha =
          scalar_op == OpKind::kAddScalar || scalar_op == OpKind::kSubScalar || scalar_op == OpKind::kRsubScalar;
      if (has_alpha) {
        names.push_back("alpha");
        auto alpha = number_or(node, "alpha", 1.0);
        if (!alpha) return std::nullopt;
        in.scalars.push_back(*alpha);
      }
      break;
    }
    case OpKind::kPowTensorScalar: {
      names.push_back("exponent");
      auto e = number_arg(node.find("exponent"));
      if (!e) return std::nullopt;
      in.scalars.push_back(*e);
      break;
    }
    case OpKind::kClamp: {
      names.insert(names.end(), {"min", "max"});
      const ir::Arg* lo = node.find("min");
      const ir::Arg* hi = node.find("max");
      if (is_none(lo) && is_none(hi)) return std::nullopt;
      // An absent bound is an infinite one: clamping to it changes no value.
      auto l = number_or(node, "min", -std::numeric_limits<double>::infinity());
      auto h = number_or(node, "max", std::numeric_limits<double>::infinity());
      if (!l || !h) return std::nullopt;
      in.scalars = {*l, *h};
      break;
    }
    case OpKind::kClampMin: {
      names.push_back("min");
      auto l = number_arg(node.find("min"));
      if (!l) return std::nullopt;
      in.scalars.push_back(*l);
      break;
    }
    case OpKind::kHardtanh: {
      names.insert(names.end(), {"min_val", "max_val"});
      auto l = number_or(node, "min_val", -1.0);
      auto h = number_or(node, "max_val", 1.0);
      if (!l || !h) return std::nullopt;
      in.scalars = {*l, *h};
      break;
    }
    case OpKind::kGelu: {
      names.push_back("approximate");
      const ir::Arg* a = node.find("approximate");
      in.mode = "none";
      if (!is_none(a)) {
        const std::string* s = std::get_if<std::string>(a);
        if (s == nullptr || (*s != "none" && *s != "tanh")) return std::nullopt;
        in.mode = *s;
      }
      break;
    }
    default:
      if (!is_plain_unary(node.op)) return std::nullopt;
      break;
  }
  for (const ir::NamedArg& a : node.args)
    if (std::find(names.begin(), names.end(), a.name) == names.end()) return std::nullopt;

  for (size_t i = 0; i < reads.size(); ++i) in.operands.push_back(static_cast<int>(i));
  if (tensor_operands != nullptr) *tensor_operands = std::move(reads);
  return in;
}

bool is_fusible_elementwise(const ir::Node& node) { return elementwise_instr(node).has_value(); }

}  // namespace kiln::engine
