#include "lowering/rewrite.h"

#include <algorithm>
#include <cmath>

#include "ir/op_schema.h"
#include "lowering/pass.h"

namespace kiln::lowering {

namespace {

constexpr int kManyUses = 1 << 20;
// A guard against a rewrite that keeps matching its own result.
constexpr int kMaxRounds = 64;

}  // namespace

PatternContext::PatternContext(ir::Module& m) : m_(m) {
  const ir::Graph& g = m.graph;
  counted_values_ = g.num_values();
  uses_.assign(counted_values_, 0);
  users_.assign(counted_values_, {});
  constants_.assign(counted_values_, nullptr);
  for (const auto& n : g.nodes())
    for (const ir::Value* v : n->operands()) {
      ++uses_[static_cast<size_t>(v->id)];
      users_[static_cast<size_t>(v->id)].push_back(n.get());
    }
  for (const ir::Value* v : g.outputs()) ++uses_[static_cast<size_t>(v->id)];

  std::set<std::string> written;
  for (const ir::OutputSpec& s : m.output_specs)
    if (s.kind == ir::OutputSpec::Kind::kBufferMutation) written.insert(s.target);
  for (size_t i = 0; i < g.inputs().size() && i < m.input_specs.size(); ++i) {
    const ir::InputSpec& s = m.input_specs[i];
    const bool weight = s.kind == ir::InputSpec::Kind::kParameter || s.kind == ir::InputSpec::Kind::kConstant ||
                        (s.kind == ir::InputSpec::Kind::kBuffer && !written.count(s.target));
    if (!weight) continue;
    auto it = m.weights.find(s.target);
    if (it != m.weights.end()) constants_[static_cast<size_t>(g.inputs()[i]->id)] = &it->second;
  }
}

int PatternContext::uses(const ir::Value* v) const {
  const size_t id = static_cast<size_t>(v->id);
  return id < counted_values_ ? uses_[id] : kManyUses;
}

const std::vector<ir::Node*>& PatternContext::users(const ir::Value* v) const {
  static const std::vector<ir::Node*> kNone;
  const size_t id = static_cast<size_t>(v->id);
  return id < counted_values_ ? users_[id] : kNone;
}

ir::Node* PatternContext::producer_if(const ir::Value* v, ir::OpKind op) const {
  return v && v->producer && v->producer->op == op ? v->producer : nullptr;
}

const Tensor* PatternContext::constant(const ir::Value* v) const {
  if (!v) return nullptr;
  const size_t id = static_cast<size_t>(v->id);
  return id < counted_values_ ? constants_[id] : nullptr;
}

std::optional<double> PatternContext::number(const ir::Node& n, std::string_view arg) const {
  const ir::Arg* a = n.find(arg);
  if (!a) return std::nullopt;
  if (const auto* d = std::get_if<double>(a)) return *d;
  if (const auto* i = std::get_if<int64_t>(a)) return static_cast<double>(*i);
  if (const auto* v = std::get_if<ir::Value*>(a)) {
    // Only a 0-d constant: a [1]-shaped one would broadcast a 0-d operand to rank 1.
    const Tensor* t = constant(*v);
    if (t && t->dim() == 0 && t->dtype() != DType::Bool) return t->item();
  }
  return std::nullopt;
}

ir::Value* PatternContext::tensor_arg(const ir::Node& n, std::string_view arg) {
  const ir::Arg* a = n.find(arg);
  if (!a) return nullptr;
  const auto* v = std::get_if<ir::Value*>(a);
  return v && (*v)->kind == ir::ValueKind::kTensor ? *v : nullptr;
}

ir::Value* PatternContext::add_constant(const std::string& base, const Tensor& t) {
  std::string name = "_folded." + base;
  while (m_.weights.count(name)) name += "_";
  ir::Value* c = m_.graph.add_input(name, ir::ValueKind::kTensor, type_of(t));
  m_.input_specs.push_back({ir::InputSpec::Kind::kConstant, name, true});
  m_.weights.emplace(name, t.contiguous());
  return c;
}

ir::Node* PatternContext::insert_before(const ir::Node* anchor, ir::OpKind op, std::string name,
                                        std::vector<ir::NamedArg> args, ir::TensorType type) {
  std::vector<ir::TensorType> types;
  types.push_back(std::move(type));
  return insert_before(anchor, op, std::move(name), std::move(args), std::move(types));
}

ir::Node* PatternContext::insert_before(const ir::Node* anchor, ir::OpKind op, std::string name,
                                        std::vector<ir::NamedArg> args, std::vector<ir::TensorType> types) {
  auto& nodes = m_.graph.nodes();
  auto pos = std::find_if(nodes.begin(), nodes.end(), [&](const auto& n) { return n.get() == anchor; });
  const auto index = pos - nodes.begin();
  std::vector<std::pair<std::string, ir::TensorType>> outputs;
  for (size_t i = 0; i < types.size(); ++i)
    outputs.emplace_back(i == 0 ? name : name + "_" + std::to_string(i), std::move(types[i]));
  ir::Node* n = m_.graph.add_node(op, std::move(name), std::move(args), std::move(outputs));
  std::rotate(nodes.begin() + index, nodes.end() - 1, nodes.end());
  return n;
}

void PatternContext::replace_uses(ir::Value* from, ir::Value* to) {
  // A value made by this rewrite takes over the name of the one it replaces,
  // so that dumps read the same before and after.
  if (static_cast<size_t>(to->id) >= counted_values_) {
    to->name = from->name;
    from->name.clear();
  }
  for (auto& n : m_.graph.nodes()) n->replace_operand(from, to);
  for (ir::Value*& v : m_.graph.outputs())
    if (v == from) v = to;
}

Status rewrite_to_fixed_point(ir::Module& m, const RewriteFn& rewrite, int* fired) {
  int count = 0;
  for (int round = 0; round < kMaxRounds; ++round) {
    PatternContext ctx(m);
    std::vector<ir::Node*> snapshot;
    for (auto& n : m.graph.nodes()) snapshot.push_back(n.get());
    bool changed = false;
    for (ir::Node* n : snapshot) {
      KILN_ASSIGN_OR_RETURN(bool did, rewrite(ctx, *n));
      if (did) {
        changed = true;
        ++count;
      }
    }
    if (!changed) break;
    KILN_TRY(eliminate_dead_code(m));
  }
  if (fired) *fired = count;
  return m.graph.verify();
}

std::optional<std::pair<ir::Value*, double>> tensor_and_number(const PatternContext& ctx, const ir::Node& n) {
  ir::Value* self = PatternContext::tensor_arg(n, "self");
  ir::Value* other = PatternContext::tensor_arg(n, "other");
  if (std::optional<double> c = ctx.number(n, "other"); c && self && other != self) return std::pair{self, *c};
  if (std::optional<double> c = ctx.number(n, "self"); c && other) return std::pair{other, *c};
  return std::nullopt;
}

bool plain_add(const PatternContext& ctx, const ir::Node& n) {
  if (n.op != ir::OpKind::kAddTensor && n.op != ir::OpKind::kAddScalar) return false;
  return absent(n, "alpha") || ctx.number(n, "alpha") == 1.0;
}

bool same_dim(const ir::Dim& a, const ir::Dim& b) {
  if (a.is_static() != b.is_static()) return false;
  return a.is_static() ? a.value == b.value : a.expr->to_string() == b.expr->to_string();
}

bool same_sizes(const std::vector<ir::Dim>& a, const std::vector<ir::Dim>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_dim(a[i], b[i])) return false;
  return true;
}

bool near(double a, double b, double rel) { return std::fabs(a - b) <= rel * std::fabs(b); }

namespace {

// Argument `arg` of `n`, or its op's declared default when it is left out;
// null when neither or the default is None.
const ir::Arg* given_or_default(const ir::Node& n, std::string_view arg) {
  if (const ir::Arg* a = n.find(arg)) return a;
  const ir::Arg* d = ir::argument_or_default(n, arg);
  return d && !std::holds_alternative<ir::NoneArg>(*d) ? d : nullptr;
}

}  // namespace

std::optional<std::vector<int64_t>> int_list(const ir::Node& n, std::string_view arg,
                                             std::optional<std::vector<int64_t>> fallback) {
  const ir::Arg* a = given_or_default(n, arg);
  if (!a || std::holds_alternative<ir::NoneArg>(*a)) return fallback;
  if (const auto* l = std::get_if<std::vector<int64_t>>(a)) return *l;
  if (const auto* i = std::get_if<int64_t>(a)) return std::vector<int64_t>{*i};
  return std::nullopt;
}

std::optional<int64_t> int_value(const ir::Node& n, std::string_view arg, std::optional<int64_t> fallback) {
  const ir::Arg* a = given_or_default(n, arg);
  if (!a) return fallback;
  if (const auto* i = std::get_if<int64_t>(a)) return *i;
  return std::nullopt;
}

std::optional<bool> bool_value(const ir::Node& n, std::string_view arg, std::optional<bool> fallback) {
  const ir::Arg* a = given_or_default(n, arg);
  if (!a) return fallback;
  if (const auto* b = std::get_if<bool>(a)) return *b;
  return std::nullopt;
}

bool absent(const ir::Node& n, std::string_view arg) {
  const ir::Arg* a = n.find(arg);
  return !a || std::holds_alternative<ir::NoneArg>(*a);
}

bool is_last_dim(int64_t dim, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  return rank > 0 && (dim == -1 || dim == r - 1);
}

ir::TensorType type_of(const Tensor& t) {
  ir::TensorType type;
  type.dtype = t.dtype();
  for (int64_t s : t.sizes()) type.sizes.push_back(ir::Dim::of(s));
  return type;
}

}  // namespace kiln::lowering
