// The host side of putting a plan's weights on the device (device_form):
// what load() does to every constant of a CUDA plan before copying it over.
// No GPU needed; these run wherever the CUDA backend is built.
#include "backends/cuda/device_constant.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kiln::cuda {
namespace {

// 0, 1, 2, ... as float32 in `sizes`.
Tensor iota(Shape sizes) {
  Tensor t = Tensor::zeros(DType::Float32, sizes);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && a.is_contiguous() && b.is_contiguous() &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.nbytes())) == 0;
}

// Biases, folded BatchNorm shifts and scalars: converted, nothing else. The
// old load path read sizes[1..3] of every constant whatever its rank (past
// the end of a 1-d shape), which a bounds-checked build stops at once.
TEST(DeviceForm, ConstantsOfRankBelowFourAreOnlyConverted) {
  for (const Shape& sizes : {Shape{}, Shape{144}, Shape{1}, Shape{3, 5}, Shape{2, 3, 4}}) {
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
      const Tensor w = iota(sizes);
      auto got = device_form(w, {"b", dtype, sizes});
      ASSERT_TRUE(got.has_value()) << shape_to_string(sizes) << ": " << got.status().message();
      EXPECT_TRUE(same_bytes(*got, w.to(dtype))) << shape_to_string(sizes) << " as " << dtype_name(dtype);
    }
  }
}

// A grouped convolution's filter [K, 1, R, S] goes channels-last: K, R, S, C.
TEST(DeviceForm, FiltersGoChannelsLast) {
  const Tensor w = iota({6, 2, 3, 3});
  auto got = device_form(w, {"w", DType::Float32, {6, 2, 3, 3}, /*channels_last=*/true});
  ASSERT_TRUE(got.has_value()) << got.status().message();
  ASSERT_EQ(got->sizes(), (Shape{6, 3, 3, 2}));
  for (int64_t k = 0; k < 6; ++k)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t s = 0; s < 3; ++s)
          ASSERT_EQ(got->data<float>()[((k * 3 + r) * 3 + s) * 2 + c], w.data<float>()[((k * 2 + c) * 3 + r) * 3 + s]);
}

// A stem filter over 3 channels stored as 8, zeros past the third.
TEST(DeviceForm, PaddedChannelsAreZeros) {
  const Tensor w = iota({4, 3, 2, 2});
  auto got = device_form(w, {"stem", DType::Float16, {4, 3, 2, 2}, true, false, 8});
  ASSERT_TRUE(got.has_value()) << got.status().message();
  ASSERT_EQ(got->sizes(), (Shape{4, 2, 2, 8}));
  ASSERT_EQ(got->dtype(), DType::Float16);
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t s = 0; s < 2; ++s)
        for (int64_t c = 0; c < 8; ++c) {
          const double want = c < 3 ? w.data<float>()[((k * 3 + c) * 2 + r) * 2 + s] : 0.0;
          ASSERT_EQ(got->value_at(((k * 2 + r) * 2 + s) * 8 + c), want) << k << " " << r << " " << s << " " << c;
        }
}

TEST(DeviceForm, MatricesAreTransposedWhereThePlanAsks) {
  const Tensor w = iota({37, 70});  // more than one 32 x 32 tile each way, ragged
  auto got = device_form(w, {"m", DType::BFloat16, {37, 70}, false, true});
  ASSERT_TRUE(got.has_value()) << got.status().message();
  ASSERT_EQ(got->sizes(), (Shape{70, 37}));
  const Tensor want = w.to(DType::BFloat16);
  for (int64_t i = 0; i < 37; ++i)
    for (int64_t j = 0; j < 70; ++j) ASSERT_EQ(got->value_at(j * 37 + i), want.value_at(i * 70 + j));
}

// A description that needs a rank the constant does not have is refused
// before any size is read by position, as is a weight of other sizes.
TEST(DeviceForm, DescriptionsThatDoNotFitTheConstantAreRefused) {
  struct Case {
    const char* what;
    DeviceConstant c;
    Shape weight;
    const char* expect;
  };
  const Case cases[] = {
      {"padded channels on a bias", {"bn.shift", DType::Float16, {144}, false, false, 160}, {144}, "bn.shift"},
      {"padded channels on a scalar", {"scale", DType::Float16, {}, false, false, 4}, {}, "scale"},
      {"channels-last on a bias", {"b", DType::Float16, {144}, true}, {144}, "not a 4-D filter"},
      {"a transposed vector", {"v", DType::Float16, {9}, false, true}, {9}, "not a 2-D matrix"},
      {"fewer padded channels than the filter has",
       {"w", DType::Float16, {8, 4, 3, 3}, true, false, 2},
       {8, 4, 3, 3},
       "pads its 4 channels to 2"},
      {"a negative size", {"w", DType::Float16, {8, -4}}, {8, 4}, "size -4"},
      {"bytes past what a plan holds", {"w", DType::Float16, {int64_t{1} << 40, int64_t{1} << 40}}, {1}, "larger"},
      {"a weight of other sizes", {"w", DType::Float16, {8, 4, 3, 3}, true}, {8, 4, 3}, "the plan expects"},
  };
  for (const Case& c : cases) {
    auto got = device_form(Tensor::zeros(DType::Float32, c.weight), c.c);
    ASSERT_FALSE(got.has_value()) << c.what;
    EXPECT_EQ(got.status().code(), ErrorCode::kFormat) << c.what;
    EXPECT_NE(got.status().message().find(c.expect), std::string::npos) << c.what << ": " << got.status().message();
  }
}

}  // namespace
}  // namespace kiln::cuda
