// The host side of putting a plan's weights on the device (device_form):
// what load() does to every constant of a CUDA plan before copying it over.
// No GPU needed; these run wherever the CUDA backend is built.
#include "backends/cuda/device_constant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

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
// Every finite e4m3 value, made by its definition (sign, 4 exponent bits
// biased by 7, 3 mantissa bits; exponent 0 subnormal), independently of the
// decoder under test.
std::vector<std::pair<uint8_t, double>> e4m3_table() {
  std::vector<std::pair<uint8_t, double>> t;
  for (int b = 0; b < 256; ++b) {
    const int e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) continue;  // NaN
    const double mag = e == 0 ? m / 512.0 : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
    t.emplace_back(static_cast<uint8_t>(b), (b & 0x80) ? -mag : mag);
  }
  return t;
}

TEST(Fp8, EveryCodeDecodesToItsValueAndEncodesBackToItself) {
  for (const auto& [b, v] : e4m3_table()) {
    EXPECT_EQ(static_cast<double>(e4m3_to_float(b)), v) << "code " << int(b);
    EXPECT_EQ(int(e4m3_from_float(static_cast<float>(v))), int(b)) << "value " << v;
  }
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
  EXPECT_EQ(e4m3_from_float(std::nanf("")), 0x7f);
}

// Any float goes to the nearest code (of equal distances, the one with an
// even mantissa), saturating at +-448; checked against a search of the table.
TEST(Fp8, FloatsGoToTheNearestCodeTiesToEvenSaturating) {
  const auto table = e4m3_table();
  auto nearest = [&](double x) {
    const double c = std::clamp(x, -448.0, 448.0);
    uint8_t best = 0;
    double best_d = INFINITY;
    for (const auto& [b, v] : table) {
      if ((b & 0x80) != (std::signbit(x) ? 0x80 : 0)) continue;  // the sign of x, zero included
      const double d = std::fabs(v - c);
      if (d < best_d || (d == best_d && (b & 1) == 0)) {
        best = b;
        best_d = d;
      }
    }
    return best;
  };
  std::mt19937 gen(7);
  std::vector<float> xs = {0.0f, -0.0f, 1e-30f, 0.0009765625f, 0.00146484375f, 0.015625f, 0.0146484375f,
                           1.0625f, 1.1875f, 240.0f, 447.9f, 448.0f, 449.0f, 464.0f, 1e6f, -1e6f, -3.3f};
  std::uniform_real_distribution<float> mant(0.5f, 1.0f);
  std::uniform_int_distribution<int> ex(-12, 10);
  for (int i = 0; i < 20000; ++i) xs.push_back((i % 2 ? -1.0f : 1.0f) * std::ldexp(mant(gen), ex(gen)));
  // The midpoints between neighbouring codes: ties.
  for (size_t i = 0; i + 1 < table.size() && table[i + 1].first < 0x80; ++i)
    xs.push_back(static_cast<float>((table[i].second + table[i + 1].second) / 2));
  for (float x : xs) ASSERT_EQ(int(e4m3_from_float(x)), int(nearest(x))) << "x = " << x;
}

// fp8_rows: the transpose's rows, each scaled so that its largest magnitude
// is 448, then the scales; a value decodes to within 1/16 of itself.
TEST(Fp8, MatricesBecomeScaledRowsOfTheirTranspose) {
  const int64_t r = 40, c = 3;  // [r, c]: 3 rows of 40 on the device
  Tensor m = Tensor::zeros(DType::Float32, {r, c});
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (int64_t i = 0; i < r; ++i) {
    m.data<float>()[i * c + 0] = nd(gen);
    m.data<float>()[i * c + 1] = 0.0f;  // a row of zeros: scale 1
    m.data<float>()[i * c + 2] = 100.0f * nd(gen);
  }
  DeviceConstant d{"w", DType::UInt8, {r, c}, false, true, 0, true};
  ASSERT_TRUE(d.check().is_ok());
  EXPECT_EQ(d.fp8_scales_offset(), 128);  // 120 bytes padded to 16
  EXPECT_EQ(d.nbytes(), 128 + 12);
  auto got = device_form(m.to(DType::BFloat16), d);
  ASSERT_TRUE(got.has_value()) << got.status().message();
  ASSERT_EQ(got->nbytes(), d.nbytes());
  const auto* bytes = static_cast<const uint8_t*>(got->raw_data());
  const Tensor mb = m.to(DType::BFloat16).to(DType::Float32);  // what the weight is on the host
  for (int64_t row = 0; row < c; ++row) {
    float scale = 0;
    std::memcpy(&scale, bytes + 128 + 4 * row, 4);
    float amax = 0;
    for (int64_t j = 0; j < r; ++j) amax = std::max(amax, std::fabs(mb.data<float>()[j * c + row]));
    EXPECT_EQ(scale, amax > 0 ? amax / 448.0f : 1.0f) << "row " << row;
    for (int64_t j = 0; j < r; ++j) {
      const float want = mb.data<float>()[j * c + row];
      const float v = e4m3_to_float(bytes[row * r + j]) * scale;
      EXPECT_LE(std::fabs(v - want), std::fabs(want) / 16 + scale / 512) << "row " << row << ", " << j;
    }
  }
  // Not transposed, or not uint8: refused by the description's check.
  DeviceConstant bad = d;
  bad.transposed = false;
  EXPECT_FALSE(bad.check().is_ok());
  bad = d;
  bad.dtype = DType::Float16;
  EXPECT_FALSE(bad.check().is_ok());
}

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
