// Every fixture exported by PyTorch, in both dialects, runs on the CPU
// reference backend and matches the outputs PyTorch recorded.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "frontend/safetensors.h"
#include "kiln/kiln.h"
#include "runtime/fixture_check.h"

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

class FixtureTest : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(FixtureTest, MatchesPyTorch) {
  const FixtureCase& c = GetParam();
  auto program = Program::load(c.dir + "/" + c.model);
  ASSERT_TRUE(program.has_value()) << program.status().message();
  auto io = frontend::read_safetensors(c.dir + "/" + c.io);
  ASSERT_TRUE(io.has_value()) << io.status().message();
  auto report = runtime::check_fixture(*program, *io, {c.rtol, c.atol});
  ASSERT_TRUE(report.has_value()) << report.status().message();
  for (const auto& t : report->tensors)
    EXPECT_TRUE(t.pass) << t.name << " " << t.got_type << " vs " << t.want_type << ": " << t.problem
                        << " (max abs " << t.max_abs << ", max rel " << t.max_rel << ")";
  EXPECT_FALSE(report->tensors.empty());
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

TEST(Fixtures, AtLeastFifteenModelsInBothDialects) {
  std::map<std::string, std::set<std::string>> dialects;
  for (const auto& c : all_cases()) dialects[fs::path(c.dir).filename().string() + "/" + c.name].insert(c.dialect);
  size_t both = 0;
  for (const auto& [name, d] : dialects) both += d.size() == 2;
  EXPECT_GE(both, 15u);
}

}  // namespace
}  // namespace kiln
