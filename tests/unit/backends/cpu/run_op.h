// Test helper: runs one op through the CPU kernel registry, the way the
// interpreter does, from tensors and attributes given by schema name.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
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

// Attribute arguments, e.g. {"dim", Is({-1})} or {"keepdim", B(true)}.
inline ir::Arg I(int64_t v) { return ir::Arg(v); }
inline ir::Arg Is(std::vector<int64_t> v) { return ir::Arg(std::move(v)); }
inline ir::Arg F(double v) { return ir::Arg(v); }
inline ir::Arg B(bool v) { return ir::Arg(v); }
inline ir::Arg Str(const char* v) { return ir::Arg(std::string(v)); }
inline ir::Arg D(DType t) { return ir::Arg(t); }

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

// `n` deterministic pseudo-random values in [offset - scale, offset + scale),
// identical on every platform. A 32-bit linear congruential generator
// (multiplier 1664525, increment 1013904223) starts from state
// seed * 2654435761 + stream; each step's top 24 bits give u in [-1, 1) and the
// value offset + scale * u. Different `stream`s give unrelated sequences for
// the same seeds. Expected results in tests are computed from these exact
// numbers, so the generator and a test's stream must not change.
inline std::vector<double> random_values(int64_t n, uint32_t seed, uint32_t stream, double scale = 1.0,
                                         double offset = 0.0) {
  std::vector<double> v;
  uint32_t s = seed * 2654435761u + stream;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    v.push_back(offset + scale * (static_cast<double>(s >> 8) / static_cast<double>(1u << 23) - 1.0));
  }
  return v;
}

// A `dtype` tensor of `shape` filled in row-major order with
// random_values(numel, seed, stream, scale, offset), rounded to `dtype`.
inline Tensor random_tensor(DType dtype, Shape shape, uint32_t seed, uint32_t stream, double scale = 1.0,
                            double offset = 0.0) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return make_tensor(dtype, std::move(shape), random_values(n, seed, stream, scale, offset));
}

namespace internal {

inline void expect_close(const Tensor& got, const std::vector<double>& want, double tol, bool equal_nan) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << got.type_string();
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got.value_at(static_cast<int64_t>(i));
    if (equal_nan && std::isnan(want[i]))
      EXPECT_TRUE(std::isnan(g)) << "element " << i;
    else
      EXPECT_NEAR(g, want[i], tol * std::max(1.0, std::fabs(want[i]))) << "element " << i;
  }
}

}  // namespace internal

// Expects `got` to have want.size() elements, each (in row-major order) within
// tol * max(1, |want|) of `want`: an absolute tolerance for |want| <= 1 and a
// relative one above. A NaN on either side fails.
inline void expect_close(const Tensor& got, const std::vector<double>& want, double tol) {
  internal::expect_close(got, want, tol, /*equal_nan=*/false);
}

// As expect_close, except that a NaN in `want` expects a NaN in `got`.
inline void expect_close_equal_nan(const Tensor& got, const std::vector<double>& want, double tol) {
  internal::expect_close(got, want, tol, /*equal_nan=*/true);
}

// Expects `r` (from run_op) to be an error whose message names the node that
// failed, "test_node".
inline void expect_error_names_node(const Expected<std::vector<RtValue>>& r) {
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("test_node"), std::string::npos) << r.status().message();
}

}  // namespace kiln::cpu::testing
