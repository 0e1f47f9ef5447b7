#include "ir/graph.h"

#include <algorithm>
#include <set>

namespace kiln::ir {

std::string TensorType::to_string() const {
  std::string s(dtype_name(dtype));
  s += "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) s += ", ";
    s += sizes[i].to_string();
  }
  return s + "]";
}

const Arg* Node::find(std::string_view arg_name) const {
  for (const NamedArg& a : args)
    if (a.name == arg_name) return &a.value;
  return nullptr;
}

Arg* Node::find(std::string_view arg_name) {
  for (NamedArg& a : args)
    if (a.name == arg_name) return &a.value;
  return nullptr;
}

namespace {
template <typename F>
void for_each_value_slot(std::vector<NamedArg>& args, F&& f) {
  for (NamedArg& a : args) {
    if (auto* v = std::get_if<Value*>(&a.value)) {
      f(*v);
    } else if (auto* l = std::get_if<std::vector<Value*>>(&a.value)) {
      for (Value*& x : *l) f(x);
    } else if (auto* ol = std::get_if<std::vector<std::optional<Value*>>>(&a.value)) {
      for (auto& x : *ol)
        if (x) f(*x);
    } else if (auto* sl = std::get_if<std::vector<SymInt>>(&a.value)) {
      for (SymInt& s : *sl)
        if (auto* x = std::get_if<Value*>(&s)) f(*x);
    }
  }
}
}  // namespace

std::vector<Value*> Node::operands() const {
  std::vector<Value*> out;
  for_each_value_slot(const_cast<std::vector<NamedArg>&>(args), [&](Value*& v) { out.push_back(v); });
  return out;
}

void Node::replace_operand(Value* from, Value* to) {
  for_each_value_slot(args, [&](Value*& v) {
    if (v == from) v = to;
  });
}

std::string Node::describe() const {
  return "node '" + name + "' (" + std::string(op_target(op)) + ")";
}

Value* Graph::add_value(std::string name, ValueKind kind, TensorType type) {
  auto v = std::make_unique<Value>();
  v->id = static_cast<int>(values_.size());
  v->name = std::move(name);
  v->kind = kind;
  v->type = std::move(type);
  values_.push_back(std::move(v));
  return values_.back().get();
}

Value* Graph::add_input(std::string name, ValueKind kind, TensorType type) {
  Value* v = add_value(std::move(name), kind, std::move(type));
  inputs_.push_back(v);
  return v;
}

Node* Graph::add_node(OpKind op, std::string name, std::vector<NamedArg> args,
                      std::vector<std::pair<std::string, TensorType>> output_types, ValueKind output_kind) {
  auto n = std::make_unique<Node>();
  n->op = op;
  n->name = std::move(name);
  n->args = std::move(args);
  int idx = 0;
  for (auto& [oname, otype] : output_types) {
    Value* v = add_value(oname, output_kind, otype);
    v->producer = n.get();
    v->output_index = idx++;
    n->outputs.push_back(v);
  }
  nodes_.push_back(std::move(n));
  return nodes_.back().get();
}

Status Graph::verify() const {
  std::set<const Value*> defined(inputs_.begin(), inputs_.end());
  std::set<std::string> node_names;
  for (const auto& n : nodes_) {
    for (const Value* v : n->operands()) {
      if (!defined.count(v))
        return internal_error(n->describe() + " uses value '" + v->name + "' before it is defined");
    }
    for (const Value* v : n->outputs) {
      if (v->producer != n.get()) return internal_error(n->describe() + " output '" + v->name + "' has a wrong producer");
      if (!defined.insert(v).second) return internal_error("value '" + v->name + "' is defined twice");
    }
  }
  for (const Value* v : outputs_)
    if (!defined.count(v)) return internal_error("graph output '" + v->name + "' is never defined");
  return Status::ok();
}

namespace {

// `e` under `fixed`, when every symbol of `e` is fixed.
std::optional<int64_t> fixed_value(const SymExpr& e, const SymBindings& fixed) {
  std::vector<std::string> names;
  e.collect_symbols(names);
  for (const std::string& n : names)
    if (!fixed.count(n)) return std::nullopt;
  Expected<int64_t> v = e.eval(fixed);
  return v.has_value() ? std::optional<int64_t>(*v) : std::nullopt;
}

}  // namespace

Status specialize(Graph& g, const SymBindings& fixed) {
  if (fixed.empty()) return Status::ok();
  std::map<const Value*, int64_t> known;  // symbolic scalars that are numbers now
  for (size_t i = 0; i < g.num_values(); ++i) {
    Value* v = g.value(i);
    for (Dim& d : v->type.sizes)
      if (!d.is_static())
        if (auto x = fixed_value(*d.expr, fixed)) d = Dim::of(*x);
    if (v->kind == ValueKind::kSymInt && v->sym)
      if (auto x = fixed_value(*v->sym, fixed)) known[v] = *x;
  }
  for (auto& n : g.nodes())
    for (NamedArg& a : n->args) {
      if (auto* v = std::get_if<Value*>(&a.value)) {
        if (auto it = known.find(*v); it != known.end()) a.value = it->second;
      } else if (auto* list = std::get_if<std::vector<SymInt>>(&a.value)) {
        bool all_numbers = true;
        for (SymInt& s : *list) {
          if (auto* sv = std::get_if<Value*>(&s))
            if (auto it = known.find(*sv); it != known.end()) s = it->second;
          all_numbers = all_numbers && std::holds_alternative<int64_t>(s);
        }
        if (all_numbers) {
          std::vector<int64_t> ints;
          for (const SymInt& s : *list) ints.push_back(std::get<int64_t>(s));
          a.value = std::move(ints);
        }
      }
    }
  return g.verify();
}

Graph Graph::clone(std::map<const Value*, Value*>* map) const {
  Graph g;
  std::map<const Value*, Value*> local;
  std::map<const Value*, Value*>& m = map ? *map : local;
  for (const auto& v : values_) {
    Value* nv = g.add_value(v->name, v->kind, v->type);
    nv->sym = v->sym;
    nv->output_index = v->output_index;
    m[v.get()] = nv;
  }
  for (const Value* v : inputs_) g.inputs_.push_back(m[v]);
  for (const auto& n : nodes_) {
    auto nn = std::make_unique<Node>(*n);
    for_each_value_slot(nn->args, [&](Value*& v) { v = m[v]; });
    for (Value*& v : nn->outputs) {
      v = m[v];
      v->producer = nn.get();
    }
    g.nodes_.push_back(std::move(nn));
  }
  for (const Value* v : outputs_) g.outputs_.push_back(m[v]);
  return g;
}

Status Graph::compact() {
  KILN_TRY(verify());
  // Names as print_graph gives them: over every value in id order, a repeat
  // takes its id as a suffix.
  std::set<std::string> used;
  std::vector<std::string> names(values_.size());
  for (const auto& v : values_) {
    std::string n = v->name.empty() ? "v" + std::to_string(v->id) : v->name;
    while (!used.insert(n).second) n += "_" + std::to_string(v->id);
    names[static_cast<size_t>(v->id)] = std::move(n);
  }
  std::vector<Value*> order(inputs_.begin(), inputs_.end());
  for (const auto& n : nodes_) order.insert(order.end(), n->outputs.begin(), n->outputs.end());
  std::set<const Value*> seen;
  for (const Value* v : order)
    if (!seen.insert(v).second) return internal_error("value '" + v->name + "' is defined twice");
  std::vector<std::unique_ptr<Value>> kept;
  kept.reserve(order.size());
  for (Value* v : order) {
    std::unique_ptr<Value>& slot = values_[static_cast<size_t>(v->id)];
    v->name = std::move(names[static_cast<size_t>(v->id)]);
    v->id = static_cast<int>(kept.size());
    if (v->kind != ValueKind::kTensor) v->type = {};
    if (v->kind != ValueKind::kSymInt) v->sym = nullptr;
    kept.push_back(std::move(slot));
  }
  values_ = std::move(kept);  // the values left behind are defined by nothing
  for (const auto& n : nodes_) n->name = n->outputs.empty() ? std::string(op_target(n->op)) : n->outputs[0]->name;
  return Status::ok();
}

Module clone_module(const Module& m) {
  Module c;
  c.graph = m.graph.clone();
  c.input_specs = m.input_specs;
  c.output_specs = m.output_specs;
  c.weights = m.weights;
  c.aliases = m.aliases;
  c.symbols = m.symbols;
  c.dialect = m.dialect;
  c.torch_version = m.torch_version;
  c.source = m.source;
  return c;
}

const char* input_kind_name(InputSpec::Kind k) {
  switch (k) {
    case InputSpec::Kind::kParameter: return "parameter";
    case InputSpec::Kind::kBuffer: return "buffer";
    case InputSpec::Kind::kConstant: return "constant";
    case InputSpec::Kind::kUserInput: return "user_input";
  }
  return "?";
}

const char* output_kind_name(OutputSpec::Kind k) {
  switch (k) {
    case OutputSpec::Kind::kBufferMutation: return "buffer_mutation";
    case OutputSpec::Kind::kUserOutput: return "user_output";
    case OutputSpec::Kind::kUserInputMutation: return "user_input_mutation";
  }
  return "?";
}

OutputOrder::OutputOrder(const Module& m) : m_(m) {
  std::map<std::string, int64_t> buffer_index;
  for (const InputSpec& s : m.input_specs)
    if (s.kind == InputSpec::Kind::kBuffer) buffer_index.emplace(s.target, static_cast<int64_t>(buffer_index.size()));
  const auto& outs = m.graph.outputs();
  for (size_t i = 0; i < outs.size() && i < m.output_specs.size(); ++i) {
    const OutputSpec& s = m.output_specs[i];
    if (s.kind != OutputSpec::Kind::kBufferMutation) continue;
    auto it = buffer_index.find(s.target);
    if (it != buffer_index.end()) rank_.emplace(outs[i], it->second);
  }
}

int64_t OutputOrder::rank(const Value* v) const {
  auto it = rank_.find(v);
  return it == rank_.end() ? kRest : it->second;
}

void OutputOrder::sort(std::vector<const Value*>& values) const {
  std::stable_sort(values.begin(), values.end(), [&](const Value* a, const Value* b) { return rank(a) < rank(b); });
}

bool OutputOrder::ordered(const std::vector<const Value*>& values) const {
  return std::is_sorted(values.begin(), values.end(), [&](const Value* a, const Value* b) { return rank(a) < rank(b); });
}

bool OutputOrder::program_outputs_ordered() const {
  const auto& outs = m_.graph.outputs();
  return ordered(std::vector<const Value*>(outs.begin(), outs.end()));
}

void reorder_outputs(Module& m) {
  const OutputOrder order(m);
  const auto& outs = m.graph.outputs();
  std::vector<size_t> perm(outs.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = i;
  std::stable_sort(perm.begin(), perm.end(),
                   [&](size_t a, size_t b) { return order.rank(outs[a]) < order.rank(outs[b]); });
  std::vector<Value*> new_outs;
  std::vector<OutputSpec> new_specs;
  for (size_t i : perm) {
    new_outs.push_back(outs[i]);
    if (i < m.output_specs.size()) new_specs.push_back(m.output_specs[i]);
  }
  m.graph.outputs() = std::move(new_outs);
  if (new_specs.size() == m.output_specs.size()) m.output_specs = std::move(new_specs);
}

}  // namespace kiln::ir
