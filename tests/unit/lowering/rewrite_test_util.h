// Helpers for pass tests: modules from IR text, and the numeric check that a
// rewrite keeps what the graph computes.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "ir/printer.h"
#include "lowering/pass.h"
#include "runtime/interpreter.h"
#include "unit/backends/cpu/run_op.h"

namespace kiln::lowering::testing {

// Deterministic pseudo-random contents for a static type: floats in [-1, 1),
// integers in [0, 4), bools about half true.
inline Tensor random_for(const ir::TensorType& type, uint32_t seed, uint32_t stream) {
  Shape shape;
  for (const ir::Dim& d : type.sizes) shape.push_back(d.value);
  if (type.dtype == DType::Bool || !is_floating(type.dtype)) {
    Tensor r = cpu::testing::random_tensor(DType::Float64, shape, seed, stream);
    Tensor t = Tensor::zeros(type.dtype, shape);
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double u = r.data<double>()[i];
      r.data<double>()[i] = type.dtype == DType::Bool ? (u > 0 ? 1 : 0) : std::floor((u + 1) * 2);
    }
    t.copy_from(r);
    return t;
  }
  return cpu::testing::random_tensor(type.dtype, shape, seed, stream);
}

// A module from IR text. Inputs named %p_<name> are parameters, %c_<name>
// tensor constants and %b_<name> buffers (target: <name>); the rest are user
// inputs. Weights not given in `weights` are random.
inline ir::Module module_from(const char* text, std::map<std::string, Tensor> weights = {}) {
  ir::Module m;
  auto g = ir::parse_graph(text);
  EXPECT_TRUE(g.has_value()) << g.status().message();
  if (!g.has_value()) return m;
  m.graph = std::move(*g);
  uint32_t stream = 100;
  for (const ir::Value* v : m.graph.inputs()) {
    ir::InputSpec spec;
    const std::string& n = v->name;
    if (n.starts_with("p_")) spec.kind = ir::InputSpec::Kind::kParameter;
    if (n.starts_with("c_")) spec.kind = ir::InputSpec::Kind::kConstant;
    if (n.starts_with("b_")) spec.kind = ir::InputSpec::Kind::kBuffer;
    if (spec.kind != ir::InputSpec::Kind::kUserInput) {
      spec.target = n.substr(2);
      auto it = weights.find(spec.target);
      m.weights[spec.target] = it != weights.end() ? it->second : random_for(v->type, 7, stream++);
    }
    m.input_specs.push_back(spec);
  }
  m.output_specs.assign(m.graph.outputs().size(), {ir::OutputSpec::Kind::kUserOutput, ""});
  return m;
}

using ir::clone_module;

// Random values for the user inputs of `m`, in input order.
inline std::vector<Tensor> random_user_inputs(const ir::Module& m, uint32_t seed) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < m.graph.inputs().size(); ++i)
    if (m.input_specs[i].kind == ir::InputSpec::Kind::kUserInput)
      out.push_back(random_for(m.graph.inputs()[i]->type, seed, static_cast<uint32_t>(i)));
  return out;
}

// Runs `m` on the CPU reference kernels: weights from m.weights, then `user` in order.
inline Expected<std::vector<Tensor>> run_module(const ir::Module& m, const std::vector<Tensor>& user) {
  std::vector<cpu::RtValue> inputs;
  size_t next = 0;
  for (size_t i = 0; i < m.graph.inputs().size(); ++i) {
    const ir::InputSpec& s = m.input_specs[i];
    if (s.kind == ir::InputSpec::Kind::kUserInput) {
      if (next >= user.size()) return invalid_argument("too few user inputs");
      inputs.push_back(user[next++]);
    } else {
      inputs.push_back(m.weights.at(s.target));
    }
  }
  KILN_ASSIGN_OR_RETURN(auto outs, runtime::interpret(m.graph, std::move(inputs), cpu::cpu_kernels()));
  std::vector<Tensor> result;
  for (const cpu::RtValue& v : outs) result.push_back(std::get<Tensor>(v));
  return result;
}

// Expects `before` and `after` to compute the same outputs (within
// tol * max(1, |want|)) on a few sets of random user inputs.
inline void expect_same_outputs(const ir::Module& before, const ir::Module& after, double tol = 1e-5) {
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const std::vector<Tensor> user = random_user_inputs(before, seed);
    auto want = run_module(before, user);
    ASSERT_TRUE(want.has_value()) << want.status().message();
    auto got = run_module(after, user);
    ASSERT_TRUE(got.has_value()) << got.status().message() << "\n" << ir::print_graph(after.graph);
    ASSERT_EQ(got->size(), want->size());
    for (size_t o = 0; o < want->size(); ++o) {
      const Tensor& w = (*want)[o];
      const Tensor& g = (*got)[o];
      ASSERT_EQ(g.sizes(), w.sizes()) << "output " << o;
      ASSERT_EQ(g.dtype(), w.dtype()) << "output " << o;
      for (int64_t i = 0; i < w.numel(); ++i)
        ASSERT_NEAR(g.value_at(i), w.value_at(i), tol * std::max(1.0, std::fabs(w.value_at(i))))
            << "output " << o << " element " << i << " (seed " << seed << ")";
    }
  }
}

// Runs `pass` on a module made from `before` and expects the graph `after`
// (structurally, names aside; nullptr: unchanged) and the same outputs.
// Returns the rewritten module for further checks.
inline ir::Module expect_rewrite(const char* before, Status (*pass)(ir::Module&), const char* after,
                                 std::map<std::string, Tensor> weights = {}, double tol = 1e-5) {
  ir::Module m = module_from(before, std::move(weights));
  ir::Module original = clone_module(m);
  Status st = pass(m);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_TRUE(m.graph.verify().is_ok());
  auto want = ir::parse_graph(after ? after : before);
  EXPECT_TRUE(want.has_value()) << want.status().message();
  if (!want.has_value()) return m;
  std::string why;
  EXPECT_TRUE(ir::graphs_equal(m.graph, *want, &why)) << why << "\nactual:\n" << ir::print_graph(m.graph);
  expect_same_outputs(original, m, tol);
  return m;
}

}  // namespace kiln::lowering::testing
