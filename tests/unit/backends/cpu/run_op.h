// Test helper: runs one op through the CPU kernel registry, the way the
// interpreter does, from tensors and attributes given by schema name.
#pragma once

#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "backends/cpu/kernel.h"
#include "ir/graph.h"

namespace kiln::cpu::testing {

// An argument: a tensor (becomes a graph input), a tensor list, an optional
// tensor list, or a plain attribute.
using OpArg = std::variant<Tensor, std::vector<Tensor>, std::vector<std::optional<Tensor>>, ir::Arg>;

inline Expected<std::vector<RtValue>> run_op(ir::OpKind op, std::vector<std::pair<std::string, OpArg>> args,
                                             size_t num_outputs = 1) {
  ir::Graph g;
  std::vector<RtValue> env;
  auto input = [&](const Tensor& t) {
    ir::Value* v = g.add_input("in" + std::to_string(env.size()), ir::ValueKind::kTensor);
    env.resize(v->id + 1);
    env[static_cast<size_t>(v->id)] = t;
    return v;
  };
  std::vector<ir::NamedArg> named;
  for (auto& [name, a] : args) {
    if (auto* t = std::get_if<Tensor>(&a)) {
      named.push_back({name, input(*t)});
    } else if (auto* l = std::get_if<std::vector<Tensor>>(&a)) {
      std::vector<ir::Value*> vs;
      for (const Tensor& t : *l) vs.push_back(input(t));
      named.push_back({name, vs});
    } else if (auto* ol = std::get_if<std::vector<std::optional<Tensor>>>(&a)) {
      std::vector<std::optional<ir::Value*>> vs;
      for (const auto& t : *ol) vs.push_back(t ? std::optional<ir::Value*>(input(*t)) : std::nullopt);
      named.push_back({name, vs});
    } else {
      named.push_back({name, std::get<ir::Arg>(a)});
    }
  }
  std::vector<std::pair<std::string, ir::TensorType>> outs;
  for (size_t i = 0; i < num_outputs; ++i) outs.push_back({"out" + std::to_string(i), {}});
  ir::Node* node = g.add_node(op, "test_node", std::move(named), outs);
  env.resize(g.num_values());
  KernelFn fn = cpu_kernels().find(op);
  if (!fn) return unsupported("no CPU kernel for " + std::string(ir::op_target(op)));
  KernelArgs ka(*node, env);
  KILN_TRY(fn(ka));
  if (ka.outputs().size() != num_outputs)
    return internal_error("kernel produced " + std::to_string(ka.outputs().size()) + " outputs");
  return ka.outputs();
}

// The first output as a tensor (test convenience; fails the test on error).
inline Tensor run_op_tensor(ir::OpKind op, std::vector<std::pair<std::string, OpArg>> args) {
  auto r = run_op(op, std::move(args));
  if (!r.has_value()) throw std::runtime_error(r.status().to_string());
  return std::get<Tensor>((*r)[0]);
}

// Makes a float32 tensor of the given shape from values in row-major order.
inline Tensor make_tensor(DType dtype, Shape sizes, const std::vector<double>& values) {
  Tensor t = Tensor::zeros(dtype, sizes);
  Tensor src = Tensor::zeros(DType::Float64, sizes);
  for (size_t i = 0; i < values.size() && i < static_cast<size_t>(src.numel()); ++i) src.data<double>()[i] = values[i];
  t.copy_from(src);
  return t;
}

}  // namespace kiln::cpu::testing
