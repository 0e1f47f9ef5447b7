// What the decomposition tests share: a graph's text through the pass, and
// running the result on the reference kernels.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "ir/printer.h"
#include "lowering/pass.h"
#include "runtime/interpreter.h"

namespace kiln::lowering {

// The module of `text` (every graph input a user input) after the pass, and
// its op histogram.
inline ir::Module decomposed(const std::string& text, std::map<std::string, int>* ops) {
  auto g = ir::parse_graph(text);
  EXPECT_TRUE(g.has_value()) << g.status().message();
  ir::Module m;
  if (!g) return m;
  m.graph = std::move(*g);
  for (size_t i = 0; i < m.graph.inputs().size(); ++i) m.input_specs.push_back({ir::InputSpec::Kind::kUserInput, "", true});
  for (size_t i = 0; i < m.graph.outputs().size(); ++i) m.output_specs.push_back({ir::OutputSpec::Kind::kUserOutput, ""});
  Status s = decompose_composites(m);
  EXPECT_TRUE(s.is_ok()) << s.message();
  for (const auto& n : m.graph.nodes()) ++(*ops)[std::string(ir::op_target(n->op))];
  return m;
}

// Runs `m`'s outputs on `inputs` (its user inputs, in order); nodes nothing
// returns are dropped first.
inline std::vector<Tensor> run(ir::Module& m, const std::vector<Tensor>& inputs) {
  Status s = eliminate_dead_code(m);
  EXPECT_TRUE(s.is_ok()) << s.message();
  // The caller's tensors for user inputs, the module's own for the constants a decomposition made.
  std::vector<cpu::RtValue> in;
  size_t next = 0;
  for (const ir::InputSpec& spec : m.input_specs) {
    if (spec.kind == ir::InputSpec::Kind::kUserInput) {
      if (next < inputs.size()) in.push_back(inputs[next++]);
    } else {
      in.push_back(m.weights.at(spec.target));
    }
  }
  auto out = runtime::interpret(m.graph, in, cpu::cpu_kernels());
  EXPECT_TRUE(out.has_value()) << out.status().message();
  std::vector<Tensor> t;
  if (out)
    for (auto& v : *out) t.push_back(std::get<Tensor>(v));
  return t;
}

inline Tensor matrix(int64_t rows, int64_t cols, const std::vector<double>& v) {
  Tensor t = Tensor::zeros(DType::Float64, {rows, cols});
  for (size_t i = 0; i < v.size(); ++i) t.data<double>()[i] = v[i];
  return t.to(DType::Float32);
}

// Fails the test when an op the pass decomposes is left in `ops`, other than
// the core ops in `kept` (ops decomposed in some forms only: abs of an
// integer tensor, softmax over a dim other than the last).
inline void expect_only_core_ops(const std::map<std::string, int>& ops, const std::vector<std::string>& kept = {}) {
  for (const auto& [op, count] : ops) {
    if (std::find(kept.begin(), kept.end(), op) != kept.end()) continue;
    const ir::OpKind k = ir::op_from_target(op).value_or(ir::OpKind::kUnknown);
    for (ir::OpKind d : decomposed_ops()) EXPECT_NE(k, d) << op << " is left after the pass";
  }
}

}  // namespace kiln::lowering
