// Every model fixture on CUDA engines, at each engine precision, from the
// program as compiled and from its .kiln file read back with nothing reused
// (as `kiln check X.kiln` and the engine cache give engines back): both runs
// must match the outputs PyTorch recorded. GPU only (label gpu).
//
// The training dialect of tests/fixtures/torch2.11 by default;
// KILN_TEST_ALL_FIXTURES=1 adds the aten dialect and every other torch folder.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "backends/cuda/cuda_support.h"
#include "base/safetensors.h"
#include "kiln/check.h"
#include "kiln/kiln.h"
#include "runtime/engine_hot_set.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

struct CudaFixture {
  std::string dir, name, model, io;
  Tolerance tolerance;
};

void PrintTo(const CudaFixture& c, std::ostream* os) { *os << c.dir << "/" << c.model; }

// A fixture directory: under the source tree this binary was built from, else
// under the working directory (a GPU machine runs it from a copy of the tree).
fs::path fixtures_root() {
  const fs::path built = fs::path(KILN_SOURCE_DIR) / "tests/fixtures";
  return fs::exists(built) ? built : fs::path("tests/fixtures");
}

std::vector<CudaFixture> cuda_fixtures() {
  const char* all_env = std::getenv("KILN_TEST_ALL_FIXTURES");
  const bool all = all_env && std::string(all_env) == "1";
  std::vector<CudaFixture> out;
  const fs::path root = fixtures_root();
  if (!fs::exists(root)) return out;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "manifest.json") && (all || e.path().filename() == "torch2.11")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const fs::path& dir : dirs) {
    std::ifstream in(dir / "manifest.json");
    const nlohmann::json m = nlohmann::json::parse(in);
    for (const auto& f : m.at("fixtures"))
      for (const char* dialect : {"training", "aten"}) {
        if (!f.at("files").contains(dialect) || (!all && std::string(dialect) != "training")) continue;
        out.push_back({dir.string(),
                       f.at("name").get<std::string>() + (all ? std::string("_") + dialect : ""),
                       f.at("files").at(dialect).get<std::string>(),
                       f.at("files").at("io").get<std::string>(),
                       {f.at("tolerance").at("rtol").get<double>(), f.at("tolerance").at("atol").get<double>()}});
      }
  }
  return out;
}

void expect_matches_pytorch(const std::shared_ptr<const Program>& program, const CudaFixture& c,
                            const std::string& precision, const std::string& run, bool bind_buffers = false) {
  auto io = read_safetensors(c.dir + "/" + c.io);
  ASSERT_TRUE(io.has_value()) << io.status().message();
  auto report =
      check_fixture(program, *io, tolerance_at_precision(c.tolerance, *parse_precision(precision)), bind_buffers);
  ASSERT_TRUE(report.has_value()) << run << ": " << report.status().message();
  EXPECT_FALSE(report->tensors.empty());
  for (const auto& t : report->tensors)
    EXPECT_TRUE(t.pass) << c.model << " at " << precision << ", " << run << ": " << t.name << " " << t.got_type
                        << " vs " << t.want_type << ": " << t.problem << " (max abs " << t.max_abs << ", max rel "
                        << t.max_rel << ")";
}

class CudaFixtures : public ::testing::TestWithParam<std::tuple<CudaFixture, std::string>> {};

TEST_P(CudaFixtures, MatchPyTorchAsCompiledAndFromTheirKilnFile) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto& [c, precision] = GetParam();
  // No engine may come back from this process's hot set: the .kiln is read
  // and its plans deserialized as a new process would.
  runtime::EngineHotSet& hot = runtime::EngineHotSet::instance();
  hot.set_capacity(0);
  LoadOptions o;
  o.compile.device = "cuda";
  o.compile.precision = *parse_precision(precision);
  const fs::path saved =
      fs::temp_directory_path() / ("kiln_cuda_fixture_" + std::to_string(::getpid()) + "_" +
                                   fs::path(c.dir).filename().string() + "_" + c.model + "_" + precision + ".kiln");
  {
    auto compiled = compile(c.dir + "/" + c.model, o);
    ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
    expect_matches_pytorch(*compiled, c, precision, "as compiled");
    ASSERT_TRUE((*compiled)->save(saved.string()).is_ok());
  }  // the compiled program, its engines and their device weights are gone
  auto program = compile(saved.string(), o);
  fs::remove(saved);
  ASSERT_TRUE(program.has_value()) << program.status().message();
  expect_matches_pytorch(*program, c, precision, "from its .kiln file");
  // A program with state: again with every buffer bound to memory the caller
  // owns where the session keeps its state (device memory on CUDA).
  if (!(*program)->buffers().empty())
    expect_matches_pytorch(*program, c, precision, "with its buffers bound to device memory", /*bind_buffers=*/true);
}

INSTANTIATE_TEST_SUITE_P(CudaModels, CudaFixtures,
                         ::testing::Combine(::testing::ValuesIn(cuda_fixtures()),
                                            ::testing::Values("fp32", "fp16", "bf16")),
                         [](const auto& info) {
                           std::string s = std::get<0>(info.param).name + "_" + std::get<1>(info.param);
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaFixtures);

}  // namespace
}  // namespace kiln
