// --shape profiles: a dynamic dimension takes the given range; shapes outside
// it are refused before anything runs, naming input, dimension, value and range.
#include <gtest/gtest.h>

#include <random>

#include "kiln/kiln.h"

namespace kiln {
namespace {

const std::string kDynBatch = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/resnet_basic_dynbatch.pt2";

Tensor batch_of(int64_t n) {
  Tensor t = Tensor::zeros(DType::Float32, {n, 3, 32, 32});
  std::mt19937 rng(static_cast<uint32_t>(n));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

Expected<std::shared_ptr<const Program>> load_with(std::vector<ShapeProfile> shapes) {
  LoadOptions o;
  o.compile.shapes = std::move(shapes);
  return Program::load(kDynBatch, o);
}

TEST(ShapeProfile, SizesInsideRunAndMatchTheUnprofiledProgramOutsideAreRefused) {
  auto profiled = load_with({{"x", {1, 3, 32, 32}, {2, 3, 32, 32}, {4, 3, 32, 32}}});
  ASSERT_TRUE(profiled.has_value()) << profiled.status().message();
  auto plain = load_with({});
  ASSERT_TRUE(plain.has_value()) << plain.status().message();
  Session a(*profiled), b(*plain);
  for (int64_t n : {1, 3, 4}) {
    auto got = a.run({batch_of(n)});
    ASSERT_TRUE(got.has_value()) << "batch " << n << ": " << got.status().message();
    auto want = b.run({batch_of(n)});
    ASSERT_TRUE(want.has_value());
    ASSERT_EQ((*got)[0].sizes(), (*want)[0].sizes());
    for (int64_t i = 0; i < (*want)[0].numel(); ++i) ASSERT_EQ((*got)[0].value_at(i), (*want)[0].value_at(i));
  }
  auto refused = a.run({batch_of(5)});
  ASSERT_FALSE(refused.has_value());
  const std::string m = refused.status().message();
  for (const char* part : {"'x'", "dimension 0", "5", "[1, 4]"}) EXPECT_NE(m.find(part), std::string::npos) << m;
  EXPECT_TRUE(b.run({batch_of(5)}).has_value()) << "without the profile, batch 5 is inside the exported range";
}

TEST(ShapeProfile, BadProfilesAreRefusedNamingWhatIsWrong) {
  struct Case {
    ShapeProfile p;
    const char* expect;
  };
  const Case cases[] = {
      {{"y", {1, 3, 32, 32}, {1, 3, 32, 32}, {1, 3, 32, 32}}, "no input of that name"},
      {{"x", {1, 3, 32}, {1, 3, 32}, {1, 3, 32}}, "4 dimensions"},
      {{"x", {1, 3, 32, 32}, {2, 3, 32, 32}, {4, 3, 64, 64}}, "static"},
      {{"x", {4, 3, 32, 32}, {2, 3, 32, 32}, {8, 3, 32, 32}}, "min <= opt <= max"},
  };
  for (const Case& c : cases) {
    auto p = load_with({c.p});
    ASSERT_FALSE(p.has_value()) << c.expect;
    EXPECT_NE(p.status().message().find(c.expect), std::string::npos) << p.status().message();
  }
}

}  // namespace
}  // namespace kiln
