// The scatter family with reductions against loops written out here over
// explicit indices: scatter, scatter_add, scatter_reduce (every reduction,
// with and without self), index_add, index_reduce and index_fill.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "unit/backends/cpu/op_test_helpers.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using namespace testing;

// out = self; out[index[i][j]][j] (dim 0) or out[i][index[i][j]] (dim 1)
// combined with src[i][j], for a 2-D self, index and src, by `reduce` as
// torch.scatter_reduce defines it.
std::vector<double> reference_scatter(const Tensor& self, const Tensor& index, const Tensor& src, int dim,
                                      const std::string& reduce, bool include_self) {
  const int64_t cols = self.size(1);
  std::vector<double> out = values(self);
  std::vector<std::vector<double>> got(out.size());
  for (int64_t i = 0; i < index.size(0); ++i)
    for (int64_t j = 0; j < index.size(1); ++j) {
      const auto k = static_cast<int64_t>(index.value_at(i * index.size(1) + j));
      const int64_t dst = dim == 0 ? k * cols + j : i * cols + k;
      got[static_cast<size_t>(dst)].push_back(src.value_at(i * src.size(1) + j));
    }
  for (size_t d = 0; d < out.size(); ++d) {
    if (got[d].empty()) continue;
    std::vector<double> v = got[d];
    if (include_self) v.insert(v.begin(), out[d]);
    double r = v[0];
    for (size_t k = 1; k < v.size(); ++k) {
      if (reduce == "sum" || reduce == "mean") r += v[k];
      if (reduce == "prod") r *= v[k];
      if (reduce == "amax") r = std::max(r, v[k]);
      if (reduce == "amin") r = std::min(r, v[k]);
    }
    if (reduce == "mean") r /= static_cast<double>(v.size());
    out[d] = r;
  }
  return out;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i]))) << what << " [" << i << "]";
}

TEST(ScatterReduceKernels, ScatterReduceFollowsItsDefinition) {
  Tensor self = make_tensor(DType::Float32, {3, 4}, {1, -2, 3, 0.5, 4, 5, -6, 7, 8, 9, 10, -1});
  Tensor src = make_tensor(DType::Float32, {2, 4}, {2, 3, -1, 4, 0.5, -2, 6, 1});
  Tensor index0 = make_tensor(DType::Int64, {2, 3}, {2, 0, 2, 2, 0, 1});  // repeats along dim 0
  Tensor index1 = make_tensor(DType::Int64, {2, 3}, {3, 3, 0, 1, 1, 1});  // repeats along dim 1
  for (const char* reduce : {"sum", "prod", "mean", "amax", "amin"})
    for (bool include_self : {true, false})
      for (int dim : {0, 1}) {
        const Tensor& index = dim == 0 ? index0 : index1;
        Tensor out = run_op_tensor(OpKind::kScatterReduceTwo, {{"self", self},
                                                               {"dim", I(dim)},
                                                               {"index", index},
                                                               {"src", src},
                                                               {"reduce", S(reduce)},
                                                               {"include_self", B(include_self)}});
        expect_near_all(values(out), reference_scatter(self, index, src, dim, reduce, include_self),
                        std::string(reduce) + (include_self ? " with self" : " without self") + " dim " +
                            std::to_string(dim));
      }
  Tensor added = run_op_tensor(OpKind::kScatterAdd, {{"self", self}, {"dim", I(0)}, {"index", index0}, {"src", src}});
  expect_near_all(values(added), reference_scatter(self, index0, src, 0, "sum", true), "scatter_add");
  Tensor mult = run_op_tensor(OpKind::kScatterReduce,
                              {{"self", self}, {"dim", I(1)}, {"index", index1}, {"src", src}, {"reduce", S("multiply")}});
  expect_near_all(values(mult), reference_scatter(self, index1, src, 1, "prod", true), "scatter multiply");
  // Replacing with distinct indices: every written position holds its src value.
  Tensor distinct = make_tensor(DType::Int64, {1, 4}, {2, 0, 1, 2});
  Tensor replaced = run_op_tensor(OpKind::kScatterSrc, {{"self", self}, {"dim", I(0)}, {"index", distinct}, {"src", src}});
  expect_near_all(values(replaced), {1, 3, 3, 0.5, 4, 5, -1, 7, 2, 9, 10, 4}, "scatter src");
  Tensor filled =
      run_op_tensor(OpKind::kScatterValue, {{"self", self}, {"dim", I(0)}, {"index", distinct}, {"value", F(-9)}});
  expect_near_all(values(filled), {1, -9, 3, 0.5, 4, 5, -9, 7, -9, 9, 10, -9}, "scatter value");
  expect_error(OpKind::kScatterAdd,
               {{"self", self}, {"dim", I(0)}, {"index", make_tensor(DType::Int64, {1, 1}, {3})}, {"src", src}},
               "out of bounds");
  expect_error(OpKind::kScatterReduceTwo,
               {{"self", self}, {"dim", I(0)}, {"index", index0}, {"src", src}, {"reduce", S("median")}}, "reduce");
}

TEST(ScatterReduceKernels, IntegerMeanFloorsAndNaNWinsExtrema) {
  Tensor self = make_tensor(DType::Int64, {3}, {0, -7, 5});
  Tensor index = make_tensor(DType::Int64, {3}, {1, 1, 2});
  Tensor src = make_tensor(DType::Int64, {3}, {2, 2, 4});
  Tensor mean = run_op_tensor(OpKind::kScatterReduceTwo,
                              {{"self", self}, {"dim", I(0)}, {"index", index}, {"src", src}, {"reduce", S("mean")}});
  EXPECT_EQ(values(mean), (std::vector<double>{0, -1, 4}));  // floor(-3 / 3), floor(9 / 2)
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor fself = make_tensor(DType::Float32, {2}, {1, nan});
  Tensor fsrc = make_tensor(DType::Float32, {2}, {nan, 3});
  Tensor fidx = make_tensor(DType::Int64, {2}, {0, 1});
  Tensor mx = run_op_tensor(OpKind::kScatterReduceTwo,
                            {{"self", fself}, {"dim", I(0)}, {"index", fidx}, {"src", fsrc}, {"reduce", S("amax")}});
  EXPECT_TRUE(std::isnan(mx.value_at(0)) && std::isnan(mx.value_at(1)));
}

TEST(ScatterReduceKernels, IndexAddReduceAndFillWriteSlices) {
  Tensor self = make_tensor(DType::Float32, {3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor index = make_tensor(DType::Int64, {3}, {2, 0, 2});
  Tensor source = make_tensor(DType::Float32, {3, 2}, {10, 20, 30, 40, 50, 60});
  Tensor added = run_op_tensor(OpKind::kIndexAdd,
                               {{"self", self}, {"dim", I(0)}, {"index", index}, {"source", source}, {"alpha", F(0.5)}});
  expect_near_all(values(added), {1 + 15, 2 + 20, 3, 4, 5 + 5 + 25, 6 + 10 + 30}, "index_add");
  Tensor prod = run_op_tensor(OpKind::kIndexReduce, {{"self", self},
                                                     {"dim", I(0)},
                                                     {"index", index},
                                                     {"source", source},
                                                     {"reduce", S("prod")},
                                                     {"include_self", B(false)}});
  expect_near_all(values(prod), {30, 40, 3, 4, 500, 1200}, "index_reduce prod");
  Tensor mean = run_op_tensor(OpKind::kIndexReduce,
                              {{"self", self}, {"dim", I(1)}, {"index", make_tensor(DType::Int64, {2}, {1, 1})},
                               {"source", make_tensor(DType::Float32, {3, 2}, {1, 2, 3, 4, 5, 6})},
                               {"reduce", S("mean")}});
  expect_near_all(values(mean), {1, (2 + 1 + 2) / 3.0, 3, (4 + 3 + 4) / 3.0, 5, (6 + 5 + 6) / 3.0}, "index_reduce mean");
  Tensor filled = run_op_tensor(OpKind::kIndexFillScalar,
                                {{"self", self}, {"dim", I(1)}, {"index", make_tensor(DType::Int64, {1}, {-1})},
                                 {"value", F(0)}});
  expect_near_all(values(filled), {1, 0, 3, 0, 5, 0}, "index_fill");
  expect_error(OpKind::kIndexAdd,
               {{"self", self}, {"dim", I(0)}, {"index", make_tensor(DType::Int64, {3}, {0, 3, 1})}, {"source", source}},
               "out of bounds");
}

}  // namespace
}  // namespace kiln::cpu
