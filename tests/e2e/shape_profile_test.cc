// --shape profiles: a dynamic dimension takes the given range; shapes outside
// it are refused before anything runs, naming input, dimension, value and range.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "base/safetensors.h"
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

// Runs both sessions on a batch of `n` and expects equal outputs.
void expect_same_batch(Session& got_session, Session& want_session, int64_t n) {
  auto got = got_session.run({batch_of(n)});
  ASSERT_TRUE(got.has_value()) << "batch " << n << ": " << got.status().message();
  auto want = want_session.run({batch_of(n)});
  ASSERT_TRUE(want.has_value()) << "batch " << n << ": " << want.status().message();
  ASSERT_EQ((*got)[0].sizes(), (*want)[0].sizes());
  for (int64_t i = 0; i < (*want)[0].numel(); ++i) ASSERT_EQ((*got)[0].value_at(i), (*want)[0].value_at(i));
}

Expected<std::shared_ptr<const Program>> load_with(std::vector<ShapeProfile> shapes) {
  LoadOptions o;
  o.compile.shapes = std::move(shapes);
  return compile(kDynBatch, o);
}

TEST(ShapeProfile, SizesInsideRunAndMatchTheUnprofiledProgramOutsideAreRefused) {
  auto profiled = load_with({{"x", {1, 3, 32, 32}, {2, 3, 32, 32}, {4, 3, 32, 32}}});
  ASSERT_TRUE(profiled.has_value()) << profiled.status().message();
  auto plain = load_with({});
  ASSERT_TRUE(plain.has_value()) << plain.status().message();
  Session a(*profiled), b(*plain);
  for (int64_t n : {1, 3, 4}) expect_same_batch(a, b, n);
  auto refused = a.run({batch_of(5)});
  ASSERT_FALSE(refused.has_value());
  const std::string m = refused.status().message();
  for (const char* part : {"'x'", "dimension 0", "5", "[1, 4]"}) EXPECT_NE(m.find(part), std::string::npos) << m;
  EXPECT_TRUE(b.run({batch_of(5)}).has_value()) << "without the profile, batch 5 is inside the exported range";
}

TEST(ShapeProfile, SeveralProfilesEachServeTheirRangeAndSurviveSaveAndLoad) {
  const std::vector<ShapeProfile> two = {{"x", {1, 3, 32, 32}, {2, 3, 32, 32}, {4, 3, 32, 32}},
                                         {"x", {8, 3, 32, 32}, {12, 3, 32, 32}, {16, 3, 32, 32}}};
  auto profiled = load_with(two);
  ASSERT_TRUE(profiled.has_value()) << profiled.status().message();
  // One engine built per profile, each a method of its own: forward, forward@1.
  EXPECT_EQ((*profiled)->method_names(), (std::vector<std::string>{"forward", "forward@1"}));
  for (const std::string& name : (*profiled)->method_names()) {
    int engines = 0;
    for (const SegmentInfo& s : (*profiled)->method(name)->segments()) engines += s.engine;
    EXPECT_EQ(engines, 1) << name;
  }
  EXPECT_EQ((*profiled)->method("forward@1")->symbols().at(0).min, 8);
  // The reference: one profile over the whole range (the export's own stops below 16).
  auto plain = load_with({{"x", {1, 3, 32, 32}, {8, 3, 32, 32}, {16, 3, 32, 32}}});
  ASSERT_TRUE(plain.has_value()) << plain.status().message();

  const std::string path =
      (std::filesystem::temp_directory_path() / ("kiln_profiles_" + std::to_string(::getpid()) + ".kiln")).string();
  ASSERT_TRUE((*profiled)->save(path).is_ok());
  auto reloaded = compile(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(reloaded.has_value()) << reloaded.status().message();

  for (const auto& program : {*profiled, *reloaded}) {
    Session a(program), b(*plain);
    // min, opt, max and odd sizes of both profiles.
    for (int64_t n : {1, 2, 3, 4, 8, 11, 12, 16}) expect_same_batch(a, b, n);
    // Between and beyond the profiles: refused, naming every profile's range.
    for (int64_t n : {6, 17}) {
      auto refused = a.run({batch_of(n)});
      ASSERT_FALSE(refused.has_value()) << "batch " << n;
      const std::string m = refused.status().message();
      for (const std::string& part :
           {std::string("no shape profile of method 'forward'"), std::string("'x'"),
            std::string("dimension 0 is ") + std::to_string(n), std::string("[1, 4]"), std::string("[8, 16]")})
        EXPECT_NE(m.find(part), std::string::npos) << m;
    }
    // A profile by name runs only its own range.
    EXPECT_TRUE(a.run("forward@1", {batch_of(9)}).has_value());
    EXPECT_FALSE(a.run("forward@1", {batch_of(3)}).has_value());
  }
}

TEST(ShapeProfile, ProfilesNeedEveryRepeatedInputTheSameNumberOfTimes) {
  // Only x here; a second input name given once would apply to both profiles.
  auto p = load_with({{"x", {1, 3, 32, 32}, {1, 3, 32, 32}, {1, 3, 32, 32}},
                      {"x", {2, 3, 32, 32}, {2, 3, 32, 32}, {2, 3, 32, 32}},
                      {"x", {4, 3, 32, 32}, {4, 3, 32, 32}, {4, 3, 32, 32}}});
  ASSERT_TRUE(p.has_value()) << p.status().message();
  EXPECT_EQ((*p)->method_names().size(), 3u);
  auto bad = load_with({{"x", {1, 3, 32, 32}, {1, 3, 32, 32}, {1, 3, 32, 32}},
                        {"x", {2, 3, 32, 32}, {2, 3, 32, 32}, {2, 3, 32, 32}},
                        {"y", {1, 3, 32, 32}, {1, 3, 32, 32}, {1, 3, 32, 32}},
                        {"y", {1, 3, 32, 32}, {1, 3, 32, 32}, {1, 3, 32, 32}},
                        {"y", {1, 3, 32, 32}, {1, 3, 32, 32}, {1, 3, 32, 32}}});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("once per profile"), std::string::npos) << bad.status().message();
  // A profile's own error names the profile.
  auto wrong = load_with(
      {{"x", {1, 3, 32, 32}, {2, 3, 32, 32}, {4, 3, 32, 32}}, {"x", {8, 3, 32, 32}, {4, 3, 32, 32}, {16, 3, 32, 32}}});
  ASSERT_FALSE(wrong.has_value());
  EXPECT_NE(wrong.status().message().find("profile 1"), std::string::npos) << wrong.status().message();
  EXPECT_NE(wrong.status().message().find("min <= opt <= max"), std::string::npos) << wrong.status().message();
}

TEST(ShapeProfile, AFixedDimensionIsStaticInItsProfileAndMatchesPyTorch) {
  // BERT over sequence lengths 2, 7 and 32 (the fixture's three recorded
  // calls): length 2 in a profile of its own (min = max: static sizes, no
  // size computed at run time, what static backends build), the rest in a
  // dynamic profile.
  const std::string base = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/bert_dynseq";
  LoadOptions o;
  o.compile.shapes = {{"input_ids", {2, 2}, {2, 2}, {2, 2}}, {"input_ids", {2, 3}, {2, 16}, {2, 32}}};
  auto p = compile(base + ".pt2", o);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  const Program& fixed = *(*p)->method("forward");
  EXPECT_TRUE(fixed.symbols().empty());
  EXPECT_EQ(fixed.inputs().at(0).dims, (std::vector<std::string>{"2", "2"}));
  EXPECT_EQ(fixed.op_histogram().count("aten.sym_size.int"), 0u);
  EXPECT_GT((*p)->method("forward@1")->op_histogram().count("aten.sym_size.int"), 0u);

  auto io = read_safetensors(base + ".io.safetensors");
  ASSERT_TRUE(io.has_value()) << io.status().message();
  auto tensor = [&](const std::string& name) {
    for (const auto& [n, t] : io->tensors)
      if (n == name) return t;
    return Tensor();
  };
  Session s(*p);
  for (int step = 0; step < 3; ++step) {
    const std::string pre = "step" + std::to_string(step) + ".";
    auto got = s.run({tensor(pre + "input.0"), tensor(pre + "input.1")});
    ASSERT_TRUE(got.has_value()) << pre << got.status().message();
    for (size_t k = 0; k < got->size(); ++k) {
      const Tensor want = tensor(pre + "output." + std::to_string(k));
      ASSERT_EQ((*got)[k].sizes(), want.sizes()) << pre << k;
      for (int64_t i = 0; i < want.numel(); ++i)
        ASSERT_NEAR((*got)[k].value_at(i), want.value_at(i), 1e-4 + 1e-4 * std::fabs(want.value_at(i))) << pre << k;
    }
  }
}

// Padded batch buckets: a range compiled for a few sizes serves every size in
// it, with the rows padded to the next size and the outputs cut back, giving
// what the program compiled for the whole range gives.
TEST(PaddedBatchBuckets, EverySizeInTheRangeMatchesTheRangeProgramAndSurvivesSaveAndLoad) {
  LoadOptions o;
  o.compile.batch_buckets = BatchBuckets::kOn;
  o.compile.shapes = {{"x", {1, 3, 32, 32}, {3, 3, 32, 32}, {7, 3, 32, 32}}};
  std::vector<std::string> heard;
  o.compile.progress = [&](const std::string& m) { heard.push_back(m); };
  auto bucketed = compile(kDynBatch, o);
  ASSERT_TRUE(bucketed.has_value()) << bucketed.status().message();
  // min, the powers of two, opt and max.
  EXPECT_EQ((*bucketed)->method_names(),
            (std::vector<std::string>{"forward", "forward@1", "forward@2", "forward@3", "forward@4"}));
  bool said = false;
  for (const std::string& m : heard)
    said = said || m.find("as padded batch buckets 1, 2, 3, 4, 7") != std::string::npos;
  EXPECT_TRUE(said) << "no progress line names the buckets";
  for (const std::string& name : (*bucketed)->method_names())
    for (const TensorSpec& in : (*bucketed)->method(name)->inputs())
      EXPECT_EQ(in.dims[0].find_first_not_of("0123456789"), std::string::npos) << name << ": " << in.dims[0];

  auto plain = load_with({{"x", {1, 3, 32, 32}, {3, 3, 32, 32}, {7, 3, 32, 32}}});
  ASSERT_TRUE(plain.has_value()) << plain.status().message();
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kiln_buckets_" + std::to_string(::getpid()) + ".kiln")).string();
  ASSERT_TRUE((*bucketed)->save(path).is_ok());
  auto reloaded = compile(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(reloaded.has_value()) << reloaded.status().message();
  for (const auto& program : {*bucketed, *reloaded}) {
    Session a(program), b(*plain);
    for (int64_t n = 1; n <= 7; ++n) {
      auto got = a.run({batch_of(n)});
      ASSERT_TRUE(got.has_value()) << "batch " << n << ": " << got.status().message();
      auto want = b.run({batch_of(n)});
      ASSERT_TRUE(want.has_value());
      ASSERT_EQ((*got)[0].sizes(), (*want)[0].sizes()) << "batch " << n;
      for (int64_t i = 0; i < (*want)[0].numel(); ++i)
        ASSERT_NEAR((*got)[0].value_at(i), (*want)[0].value_at(i), 1e-5 + 1e-5 * std::fabs((*want)[0].value_at(i)))
            << "batch " << n << ", element " << i;
      // The memory a call on device memory needs: the caller's rows, not the bucket's; from the range program too.
      for (const Session* s : {&a, &b}) {
        auto types = s->output_types({batch_of(n)});
        ASSERT_TRUE(types.has_value()) << "batch " << n << ": " << types.status().message();
        ASSERT_EQ(types->size(), 1u);
        EXPECT_EQ((*types)[0].sizes, (*want)[0].sizes()) << "batch " << n;
        EXPECT_EQ((*types)[0].dtype, (*want)[0].dtype());
      }
    }
    // Into the caller's memory of the caller's rows (padded to the bucket of 7 and cut).
    RunOptions into;
    into.outputs = {Tensor::zeros(DType::Float32, {5, 10})};
    auto written = a.run({batch_of(5)}, into);
    ASSERT_TRUE(written.has_value()) << written.status().message();
    auto want5 = b.run({batch_of(5)});
    ASSERT_TRUE(want5.has_value());
    for (int64_t i = 0; i < (*want5)[0].numel(); ++i)
      ASSERT_NEAR(into.outputs[0].value_at(i), (*want5)[0].value_at(i), 1e-5 + 1e-5 * std::fabs((*want5)[0].value_at(i)))
          << "element " << i;
    auto no_types = a.output_types({batch_of(8)});
    ASSERT_FALSE(no_types.has_value());
    EXPECT_NE(no_types.status().message().find("outside the range [1, 7]"), std::string::npos)
        << no_types.status().message();
    auto refused = a.run({batch_of(8)});
    ASSERT_FALSE(refused.has_value());
    EXPECT_NE(refused.status().message().find(
                  "input 'x' (input 0): dimension 0 is 8, outside the range [1, 7] that padded batch buckets serve "
                  "(compiled for 1, 2, 3, 4, 7)"),
              std::string::npos)
        << refused.status().message();
  }
}

TEST(PaddedBatchBuckets, ProgramsThatMixRowsOrHaveOtherDynamicSizesGetNone) {
  // bert_dynseq: its dynamic size is the sequence, not the leading dimension.
  LoadOptions o;
  o.compile.batch_buckets = BatchBuckets::kOn;
  o.compile.shapes = {{"input_ids", {2, 2}, {2, 8}, {2, 32}}};
  auto refused = compile(std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/bert_dynseq.pt2", o);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.status().message().find("other than as its leading size"), std::string::npos)
      << refused.status().message();
  // "auto" on a backend that takes run-time sizes compiles the range as it is.
  o.compile.batch_buckets = BatchBuckets::kAuto;
  auto range = compile(std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/bert_dynseq.pt2", o);
  ASSERT_TRUE(range.has_value()) << range.status().message();
  EXPECT_EQ((*range)->method_names().size(), 1u);
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
