// Every fixture exported by PyTorch, in both dialects, runs on the CPU
// reference backend and matches the outputs PyTorch recorded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/safetensors.h"
#include "kiln/check.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

struct FixtureCase {
  std::string dir;    // tests/fixtures/torch2.11
  std::string name;   // resnet_basic
  std::string model;  // file name of the .pt2
  std::string io;
  std::string dialect;
  double rtol = 1e-4, atol = 1e-5;
};

std::vector<FixtureCase> all_cases() {
  std::vector<FixtureCase> out;
  fs::path root = fs::path(KILN_SOURCE_DIR) / "tests" / "fixtures";
  if (!fs::exists(root)) return out;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "manifest.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const fs::path& dir : dirs) {
    std::ifstream in(dir / "manifest.json");
    nlohmann::json m = nlohmann::json::parse(in);
    for (const auto& f : m["fixtures"]) {
      for (const char* dialect : {"training", "aten"}) {
        if (!f["files"].contains(dialect)) continue;
        FixtureCase c;
        c.dir = dir.string();
        c.name = f["name"].get<std::string>();
        c.model = f["files"][dialect].get<std::string>();
        c.io = f["files"]["io"].get<std::string>();
        c.dialect = dialect;
        c.rtol = f["tolerance"]["rtol"].get<double>();
        c.atol = f["tolerance"]["atol"].get<double>();
        out.push_back(c);
      }
    }
  }
  return out;
}

void PrintTo(const FixtureCase& c, std::ostream* os) { *os << c.dir << "/" << c.model; }

// Runs `program` on the fixture's recorded inputs; every output and buffer
// must match what PyTorch computed, within the fixture's tolerance.
void expect_matches_pytorch(const std::shared_ptr<const Program>& program, const FixtureCase& c) {
  auto io = read_safetensors(c.dir + "/" + c.io);
  ASSERT_TRUE(io.has_value()) << io.status().message();
  auto report = check_fixture(program, *io, {c.rtol, c.atol});
  ASSERT_TRUE(report.has_value()) << report.status().message();
  for (const auto& t : report->tensors)
    EXPECT_TRUE(t.pass) << c.model << " " << t.name << " " << t.got_type << " vs " << t.want_type << ": " << t.problem
                        << " (max abs " << t.max_abs << ", max rel " << t.max_rel << ")";
  EXPECT_FALSE(report->tensors.empty());
}

class FixtureTest : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(FixtureTest, MatchesPyTorch) {
  const FixtureCase& c = GetParam();
  auto program = compile(c.dir + "/" + c.model);
  ASSERT_TRUE(program.has_value()) << program.status().message();
  expect_matches_pytorch(*program, c);
}

// Compiled to a .kiln file, loaded back from it, and run: the same outputs.
TEST_P(FixtureTest, CompiledKilnFileMatchesPyTorch) {
  const FixtureCase& c = GetParam();
  auto compiled = compile(c.dir + "/" + c.model);
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  const fs::path out = fs::temp_directory_path() / ("kiln_e2e_" + std::to_string(::getpid()) + "_" +
                                                    fs::path(c.dir).filename().string() + "_" + c.model + ".kiln");
  ASSERT_TRUE((*compiled)->save(out.string()).is_ok());
  auto program = compile(out.string());
  fs::remove(out);
  ASSERT_TRUE(program.has_value()) << program.status().message();
  EXPECT_EQ((*program)->segments().size(), (*compiled)->segments().size());
  int engines = 0;
  for (const SegmentInfo& s : (*program)->segments()) engines += s.engine;
  // Every fixture but `nonzero` (three ops around a data-dependent one, below
  // min_block_size) has a run of engine-capable ops.
  if (c.name != "nonzero") {
    EXPECT_GE(engines, 1) << (*program)->partition_report();
  }
  expect_matches_pytorch(*program, c);
}

// With the null backend nothing goes into an engine: every node runs on the
// reference kernels, and the results are the same.
TEST_P(FixtureTest, AllFallbackMatchesPyTorch) {
  const FixtureCase& c = GetParam();
  LoadOptions options;
  options.compile.device = "null";
  auto program = compile(c.dir + "/" + c.model, options);
  ASSERT_TRUE(program.has_value()) << program.status().message();
  for (const SegmentInfo& s : (*program)->segments()) EXPECT_FALSE(s.engine);
  expect_matches_pytorch(*program, c);
}

std::string case_name(const ::testing::TestParamInfo<FixtureCase>& info) {
  std::string version = fs::path(info.param.dir).filename().string();
  std::string s = version + "_" + info.param.name + "_" + info.param.dialect;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureTest, ::testing::ValuesIn(all_cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FixtureTest);

// The data-dependent op in the middle of nonzero_middle splits it into an
// engine, the fallback nonzero, and an engine again — and it still matches.
TEST(Fixtures, DataDependentOpRunsBetweenTwoEngines) {
  int checked = 0;
  for (const auto& c : all_cases()) {
    if (c.name != "nonzero_middle") continue;
    ++checked;
    auto program = compile(c.dir + "/" + c.model);
    ASSERT_TRUE(program.has_value()) << program.status().message();
    const auto& segs = (*program)->segments();
    ASSERT_EQ(segs.size(), 3u) << (*program)->partition_report();
    EXPECT_TRUE(segs[0].engine);
    EXPECT_FALSE(segs[1].engine);
    EXPECT_TRUE(segs[2].engine);
    ASSERT_EQ(segs[1].fallback.size(), 1u) << (*program)->partition_report();
    EXPECT_EQ(segs[1].fallback[0].op, "aten.nonzero.default");
    EXPECT_NE(segs[1].fallback[0].reason.find("depends on tensor data"), std::string::npos)
        << segs[1].fallback[0].reason;
    expect_matches_pytorch(*program, c);

    // Full compilation is impossible here, and the error says which node is why.
    LoadOptions strict;
    strict.compile.require_full_compilation = true;
    auto refused = compile(c.dir + "/" + c.model, strict);
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.status().code(), ErrorCode::kUnsupported);
    EXPECT_NE(refused.status().message().find("nonzero"), std::string::npos) << refused.status().message();
  }
  EXPECT_GE(checked, 2);
}

TEST(Fixtures, AtLeastFifteenModelsInBothDialects) {
  std::map<std::string, std::set<std::string>> dialects;
  for (const auto& c : all_cases()) dialects[fs::path(c.dir).filename().string() + "/" + c.name].insert(c.dialect);
  size_t both = 0;
  for (const auto& [name, d] : dialects) both += d.size() == 2;
  EXPECT_GE(both, 15u);
}

// A float32 model built for 16-bit or TF32 engines is checked with the
// precision's floor (kiln check --precision fp16), a float32 engine with the
// fixture's own tolerance.
TEST(FixtureCheck, EnginesBelowFloat32AreCheckedAtTheirPrecisionsFloor) {
  const Tolerance fixture{1e-4, 1e-5};
  Tensor want = Tensor::zeros(DType::Float32, {3});
  Tensor near = Tensor::zeros(DType::Float32, {3});
  Tensor far = Tensor::zeros(DType::Float32, {3});
  for (int64_t i = 0; i < 3; ++i) {
    want.data<float>()[i] = 0.5f * static_cast<float>(i + 1);
    near.data<float>()[i] = want.data<float>()[i] + 0.01f;  // a 16-bit engine's drift over a network
    far.data<float>()[i] = want.data<float>()[i] + 0.2f;    // more than any rounding explains
  }
  EXPECT_FALSE(compare_tensors("o", near, want, fixture).pass);
  EXPECT_FALSE(compare_tensors("o", near, want, tolerance_at_precision(fixture, Precision::kFp32)).pass);
  for (const Precision p : {Precision::kFp16, Precision::kBf16, Precision::kTf32}) {
    const Tolerance t = tolerance_at_precision(fixture, p);
    EXPECT_TRUE(compare_tensors("o", near, want, t).pass) << name_of(p);
    EXPECT_FALSE(compare_tensors("o", far, want, t).pass) << name_of(p);
  }
  // A looser fixture tolerance is kept.
  EXPECT_EQ(tolerance_at_precision({0.2, 0.3}, Precision::kFp16).atol, 0.3);
  // Below fp32 a small output may miss by 1e-2 of the tensor's largest one
  // (logits reaching 30 round by about 0.1 in bfloat16), at fp32 it may not.
  Tensor logits = Tensor::zeros(DType::Float32, {2});
  Tensor drifted = Tensor::zeros(DType::Float32, {2});
  logits.data<float>()[0] = 30.0f;
  drifted.data<float>()[0] = 30.1f;
  logits.data<float>()[1] = 0.01f;
  drifted.data<float>()[1] = 0.25f;  // 0.24 off: within 0.3 = 1e-2 * 30
  EXPECT_TRUE(compare_tensors("o", drifted, logits, tolerance_at_precision(fixture, Precision::kBf16)).pass);
  EXPECT_FALSE(compare_tensors("o", drifted, logits, tolerance_at_precision(fixture, Precision::kFp32)).pass);
  drifted.data<float>()[1] = 0.4f;  // 0.39 off: more than 1e-2 of the largest
  EXPECT_FALSE(compare_tensors("o", drifted, logits, tolerance_at_precision(fixture, Precision::kBf16)).pass);
}

}  // namespace
}  // namespace kiln
