// Small helpers for the CPU kernel tests, on top of run_op.h.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "unit/backends/cpu/run_op.h"

namespace kiln::cpu::testing {

// More attribute arguments (I, Is, F, B, Str and D come from run_op.h).
inline ir::Arg S(const char* v) { return ir::Arg(std::string(v)); }
inline ir::Arg Ints(std::vector<int64_t> v) { return ir::Arg(std::move(v)); }
inline ir::Arg None() { return ir::Arg(ir::NoneArg{}); }

// Elements of t in logical row-major order, as doubles.
inline std::vector<double> values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.value_at(i));
  return v;
}

// 0, 1, 2, ... in the given dtype and shape.
inline Tensor iota(DType dtype, Shape sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i);
  return make_tensor(dtype, std::move(sizes), v);
}

// Runs an op that must fail; checks that the message names the node and contains `fragment`.
inline void expect_error(ir::OpKind op, std::vector<std::pair<std::string, OpArg>> args, const std::string& fragment,
                         size_t num_outputs = 1) {
  auto r = run_op(op, std::move(args), num_outputs);
  ASSERT_FALSE(r.has_value()) << "expected " << ir::op_target(op) << " to fail";
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("test_node"), std::string::npos) << m;
  EXPECT_NE(m.find(fragment), std::string::npos) << m;
}

// The i-th output of a multi-output op.
inline Tensor output(const std::vector<RtValue>& outs, size_t i) { return std::get<Tensor>(outs[i]); }

// A non-contiguous view with logical shape [rows, cols] and the given values:
// the transpose of a contiguous [cols, rows] tensor.
inline Tensor transposed(DType dtype, const std::vector<double>& logical, int64_t rows, int64_t cols) {
  std::vector<double> storage(logical.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) storage[c * rows + r] = logical[r * cols + c];
  Tensor base = make_tensor(dtype, {cols, rows}, storage);
  return base.as_strided({rows, cols}, {1, rows}, 0);
}

}  // namespace kiln::cpu::testing
