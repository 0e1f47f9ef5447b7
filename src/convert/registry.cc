#include "convert/registry.h"

#include <algorithm>
#include <set>

namespace kiln::convert {

ir::Value* ConversionContext::value(const ir::Value* v) const {
  auto it = map_.find(v);
  return it == map_.end() ? nullptr : it->second;
}

bool ConversionContext::is_engine_input(const ir::Value* v) const {
  const ir::Value* in = value(v);
  if (in == nullptr) return false;
  for (size_t i = 0; i < net_.num_inputs && i < net_.graph.inputs().size(); ++i)
    if (net_.graph.inputs()[i] == in) return true;
  return false;
}

int ConversionContext::readers(const ir::Value* v) const {
  if (readers_.empty()) {
    for (const auto& n : module_.graph.nodes())
      for (const ir::Value* x : n->operands()) ++readers_[x];
    for (const ir::Value* x : module_.graph.outputs()) ++readers_[x];
  }
  auto it = readers_.find(v);
  return it == readers_.end() ? 0 : it->second;
}

std::string in_place_write_refusal(const ir::Node& node, const ir::Value* cache, int64_t dim,
                                   const ConversionContext& ctx) {
  const ir::Module& m = ctx.module();
  const auto& sizes = cache->type.sizes;
  if (sizes.size() != 4)
    return "the cache is " + std::to_string(sizes.size()) + "-d, not [batch, heads, max_seq, head_dim]";
  if (dim < 0) dim += 4;
  if (dim != 2) return "written along dim " + std::to_string(dim) + ", not along the sequence (dim 2)";
  if (!sizes[0].is_static()) return "the cache's batch size " + sizes[0].to_string() + " is dynamic";
  if (!sizes[2].is_static()) return "the cache's length " + sizes[2].to_string() + " is dynamic";
  std::string buffer;
  for (size_t i = 0; i < m.graph.inputs().size() && i < m.input_specs.size(); ++i)
    if (m.graph.inputs()[i] == cache && m.input_specs[i].kind == ir::InputSpec::Kind::kBuffer)
      buffer = m.input_specs[i].target;
  if (buffer.empty()) return "'" + cache->name + "' is not a mutable buffer of the program";
  bool result_is_new_value = false;
  for (size_t i = 0; i < m.graph.outputs().size() && i < m.output_specs.size(); ++i)
    if (m.graph.outputs()[i] == node.outputs[0] && m.output_specs[i].kind == ir::OutputSpec::Kind::kBufferMutation &&
        m.output_specs[i].target == buffer)
      result_is_new_value = true;
  if (!result_is_new_value) return "the result is not the new value of buffer '" + buffer + "'";
  if (ctx.readers(cache) != 1) return "the old value of buffer '" + buffer + "' is read elsewhere";
  if (!ctx.is_engine_input(cache)) return "buffer '" + buffer + "' is not a direct input of the engine";
  return "";
}

Expected<std::vector<ir::NamedArg>> ConversionContext::map_args(const ir::Node& node) const {
  std::vector<ir::NamedArg> args = node.args;
  Status missing;
  auto remap = [&](ir::Value*& v) {
    ir::Value* to = value(v);
    if (!to && missing.is_ok())
      missing = internal_error(node.describe() + ": operand '" + v->name + "' is not available in the engine");
    if (to) v = to;
  };
  for (ir::NamedArg& a : args) {
    if (auto* v = std::get_if<ir::Value*>(&a.value))
      remap(*v);
    else if (auto* vs = std::get_if<std::vector<ir::Value*>>(&a.value))
      for (ir::Value*& x : *vs) remap(x);
    else if (auto* os = std::get_if<std::vector<std::optional<ir::Value*>>>(&a.value)) {
      for (auto& x : *os)
        if (x) remap(*x);
    } else if (auto* ss = std::get_if<std::vector<ir::SymInt>>(&a.value)) {
      for (ir::SymInt& x : *ss)
        if (auto* p = std::get_if<ir::Value*>(&x)) remap(*p);
    }
  }
  if (!missing) return missing;
  return args;
}

Expected<ir::Node*> ConversionContext::add_layer(ir::OpKind op, std::vector<ir::NamedArg> args, const ir::Node& like) {
  std::vector<std::pair<std::string, ir::TensorType>> types;
  for (const ir::Value* o : like.outputs) types.emplace_back(o->name, o->type);
  const ir::ValueKind kind = like.outputs.empty() ? ir::ValueKind::kTensor : like.outputs[0]->kind;
  for (const ir::Value* o : like.outputs)
    if (o->kind != kind) return unsupported(like.describe() + ": outputs of mixed kinds cannot become one layer");
  ir::Node* n = net_.graph.add_node(op, like.name, std::move(args), std::move(types), kind);
  for (size_t i = 0; i < like.outputs.size(); ++i) {
    n->outputs[i]->sym = like.outputs[i]->sym;
    map(like.outputs[i], n->outputs[i]);
  }
  return n;
}

void ConverterRegistry::add(Converter c) {
  const size_t i = static_cast<size_t>(c.op);
  if (table_.size() <= i) table_.resize(i + 1);
  table_[i] = c;
}

const Converter* ConverterRegistry::find(ir::OpKind op) const {
  const size_t i = static_cast<size_t>(op);
  if (i >= table_.size() || table_[i].convert == nullptr) return nullptr;
  return &table_[i];
}

namespace {

std::string target_of(const ir::Node& n) { return std::string(ir::op_target(n.op)); }

void symbols_of(const ir::Value& v, std::set<std::string>& out) {
  for (const ir::Dim& d : v.type.sizes)
    if (d.expr) {
      std::vector<std::string> names;
      d.expr->collect_symbols(names);
      out.insert(names.begin(), names.end());
    }
}

}  // namespace

Capability ConverterRegistry::check(const ir::Node& node, const engine::TargetInfo& target) const {
  const Converter* c = find(node.op);
  if (c == nullptr) return Capability::no("no converter for " + target_of(node));
  if (ir::op_category(node.op) == ir::OpCategory::kInplace)
    return Capability::no("in-place op " + target_of(node) + " left after functionalization");
  if (!target.implements || !target.implements(node.op))
    return Capability::no("backend '" + target.backend + "' has no layer for " + target_of(node));

  std::vector<const ir::Value*> tensors;
  for (const ir::Value* v : node.operands())
    if (v->kind == ir::ValueKind::kTensor) tensors.push_back(v);
  std::set<std::string> operand_symbols;
  for (const ir::Value* v : tensors) symbols_of(*v, operand_symbols);
  for (const ir::Value* v : node.outputs)
    if (v->kind == ir::ValueKind::kTensor) tensors.push_back(v);

  for (const ir::Value* v : tensors) {
    if (std::find(target.dtypes.begin(), target.dtypes.end(), v->type.dtype) == target.dtypes.end())
      return Capability::no("dtype " + std::string(dtype_name(v->type.dtype)) + " of '" + v->name +
                            "' is not supported by backend '" + target.backend + "'");
    if (!target.symbolic_dims)
      for (const ir::Dim& d : v->type.sizes)
        if (!d.is_static())
          return Capability::no("size " + d.to_string() + " of '" + v->name + "' is known only at run time; backend '" +
                                target.backend +
                                "' builds static shapes only (a --shape profile with min = opt = max fixes it: "
                                "one such profile per size served)");
  }
  if (!target.symbolic_dims)
    for (const ir::Value* v : node.outputs)
      if (v->kind != ir::ValueKind::kTensor)
        return Capability::no("computes a size at run time; backend '" + target.backend +
                              "' builds static shapes only");
  // torch.export names sizes that only the data decides u0, u1, ...: an output
  // with one that none of the operands carries was sized by the data.
  for (const ir::Value* v : node.outputs) {
    std::set<std::string> syms;
    symbols_of(*v, syms);
    for (const std::string& s : syms)
      if (!s.empty() && s[0] == 'u' && !operand_symbols.count(s))
        return Capability::no("output size " + s + " of '" + v->name + "' depends on tensor data");
  }
  if (c->check) {
    Capability cap = c->check(node, target);
    if (!cap.supported) return cap;
  }
  if (target.refuses)
    if (std::string why = target.refuses(node); !why.empty()) return Capability::no(why);
  return Capability::yes();
}

}  // namespace kiln::convert
