// Constant folding: nodes whose inputs are all parameters, tensor constants
// or results of other such nodes are evaluated once, at load time, on the
// CPU reference kernels; their results become tensor constants of the
// program. Buffers are state, never constants; user inputs and symbolic
// values are never folded. Run-time checks are kept.
#include <map>
#include <optional>

#include "backends/cpu/kernel.h"
#include "lowering/pass.h"

namespace kiln::lowering {

namespace {

// Results larger than this stay computed at run time rather than stored.
constexpr int64_t kMaxFoldedElements = int64_t{1} << 24;

bool foldable_op(ir::OpKind op) {
  // A random op draws new values at every call.
  if (op == ir::OpKind::kRand || op == ir::OpKind::kRandn || op == ir::OpKind::kRandLike ||
      op == ir::OpKind::kRandnLike)
    return false;
  ir::OpCategory c = ir::op_category(op);
  return c == ir::OpCategory::kCompute || c == ir::OpCategory::kView;
}

// Ops whose result depends only on the sizes they are given, never on their
// operand's values (new_ones(x, []) gives one, whatever x holds): with a
// static result they fold even when the operand is an input.
std::optional<double> shape_only_fill(const ir::Node& n) {
  switch (n.op) {
    case ir::OpKind::kNewOnes:
    case ir::OpKind::kOnesLike: return 1.0;
    case ir::OpKind::kNewZeros:
    case ir::OpKind::kZerosLike: return 0.0;
    default: return std::nullopt;
  }
}

std::optional<Tensor> fill_static_result(const ir::Node& n) {
  const std::optional<double> value = shape_only_fill(n);
  if (!value || n.outputs.size() != 1 || n.outputs[0]->kind != ir::ValueKind::kTensor) return std::nullopt;
  const ir::TensorType& t = n.outputs[0]->type;
  Shape sizes;
  for (const ir::Dim& d : t.sizes) {
    if (!d.is_static()) return std::nullopt;
    sizes.push_back(d.value);
  }
  Tensor f = Tensor::zeros(DType::Float64, sizes);
  if (f.numel() > kMaxFoldedElements) return std::nullopt;
  for (int64_t i = 0; i < f.numel(); ++i) f.data<double>()[i] = *value;
  return f.to(t.dtype);
}

}  // namespace

Status fold_constants(ir::Module& m) {
  ir::Graph& g = m.graph;
  std::vector<cpu::RtValue> env(g.num_values());
  std::vector<bool> known(g.num_values(), false);
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const ir::InputSpec& s = m.input_specs[i];
    if (s.kind != ir::InputSpec::Kind::kParameter && s.kind != ir::InputSpec::Kind::kConstant) continue;
    auto it = m.weights.find(s.target);
    if (it == m.weights.end()) continue;
    env[static_cast<size_t>(g.inputs()[i]->id)] = it->second;
    known[static_cast<size_t>(g.inputs()[i]->id)] = true;
  }

  const cpu::KernelRegistry& kernels = cpu::cpu_kernels();
  std::vector<bool> folded_node(g.nodes().size(), false);
  for (size_t ni = 0; ni < g.nodes().size(); ++ni) {
    const ir::Node& n = *g.nodes()[ni];
    if (!foldable_op(n.op) || n.outputs.empty()) continue;
    bool all_known = true;
    for (const ir::Value* v : n.operands()) all_known = all_known && known[static_cast<size_t>(v->id)];
    for (const ir::Value* v : n.outputs) all_known = all_known && v->kind == ir::ValueKind::kTensor;
    if (!all_known) {
      if (std::optional<Tensor> filled = fill_static_result(n)) {
        env[static_cast<size_t>(n.outputs[0]->id)] = std::move(*filled);
        known[static_cast<size_t>(n.outputs[0]->id)] = true;
        folded_node[ni] = true;
      }
      continue;
    }
    cpu::KernelFn fn = kernels.find(n.op);
    if (!fn) continue;
    cpu::KernelArgs args(n, env);
    // A node that cannot be evaluated now (e.g. it checks something about
    // its inputs) is left for run time, where its error will surface.
    if (!fn(args).is_ok() || args.outputs().size() < n.outputs.size()) continue;
    bool small = true;
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const Tensor* t = std::get_if<Tensor>(&args.outputs()[o]);
      small = small && t && t->numel() <= kMaxFoldedElements;
    }
    if (!small) continue;
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      env[static_cast<size_t>(n.outputs[o]->id)] = std::move(args.outputs()[o]);
      known[static_cast<size_t>(n.outputs[o]->id)] = true;
    }
    folded_node[ni] = true;
  }

  // Folded values still read by a kept node or returned become constants.
  std::map<const ir::Value*, ir::Value*> replacement;
  auto constant_for = [&](ir::Value* v) -> ir::Value* {
    auto it = replacement.find(v);
    if (it != replacement.end()) return it->second;
    std::string name = "_folded." + v->name;
    while (m.weights.count(name)) name += "_";
    ir::Value* c = g.add_input(name, ir::ValueKind::kTensor, v->type);
    m.input_specs.push_back({ir::InputSpec::Kind::kConstant, name, true});
    m.weights.emplace(name, std::get<Tensor>(env[static_cast<size_t>(v->id)]).contiguous());
    replacement[v] = c;
    return c;
  };
  auto is_folded = [&](const ir::Value* v) { return v->producer && known[static_cast<size_t>(v->id)]; };
  for (size_t ni = 0; ni < g.nodes().size(); ++ni) {
    if (folded_node[ni]) continue;
    ir::Node& n = *g.nodes()[ni];
    for (ir::Value* v : n.operands())
      if (is_folded(v)) n.replace_operand(v, constant_for(v));
  }
  for (ir::Value*& v : g.outputs())
    if (is_folded(v)) v = constant_for(v);
  return eliminate_dead_code(m);
}

}  // namespace kiln::lowering
