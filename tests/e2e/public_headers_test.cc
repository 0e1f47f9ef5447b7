// The command line and the Python module are built on kiln's public API
// alone: every project header they include is one of include/kiln/ (or the
// CLI's own cli.h, or the environment reader they share, itself on the public
// API), so what they do a C++ or Python user can do too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Each `#include "..."` of the files under `dir` that is neither a public
// header nor one of `own`, as "file: header".
std::vector<std::string> private_includes(const fs::path& dir, const std::vector<std::string>& own) {
  std::vector<std::string> found;
  const std::regex include(R"re(^\s*#\s*include\s*"([^"]+)")re");
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".cc" && ext != ".h") continue;
    std::ifstream in(entry.path());
    std::string line;
    std::smatch m;
    while (std::getline(in, line))
      if (std::regex_search(line, m, include)) {
        const std::string header = m[1];
        if (header.rfind("kiln/", 0) == 0 && fs::exists(fs::path(KILN_SOURCE_DIR) / "include" / header)) continue;
        if (std::find(own.begin(), own.end(), header) != own.end()) continue;
        found.push_back(entry.path().filename().string() + ": " + header);
      }
  }
  return found;
}

TEST(PublicHeaders, TheCommandLineIncludesOnlyPublicHeaders) {
  const fs::path dir = fs::path(KILN_SOURCE_DIR) / "tools" / "kiln";
  ASSERT_TRUE(fs::exists(dir / "main.cc"));
  const std::vector<std::string> found = private_includes(dir, {"cli.h", "environment/environment.h"});
  EXPECT_TRUE(found.empty()) << ::testing::PrintToString(found);
  // The environment reader the CLI, the Python module and the tests share is built on them too.
  const std::vector<std::string> edge =
      private_includes(fs::path(KILN_SOURCE_DIR) / "tools" / "environment", {"environment.h"});
  EXPECT_TRUE(edge.empty()) << ::testing::PrintToString(edge);
}

TEST(PublicHeaders, ThePythonModuleIncludesOnlyPublicHeaders) {
  const fs::path dir = fs::path(KILN_SOURCE_DIR) / "python" / "src";
  ASSERT_TRUE(fs::exists(dir / "bindings.cc"));
  const std::vector<std::string> found = private_includes(dir, {"environment/environment.h"});
  EXPECT_TRUE(found.empty()) << ::testing::PrintToString(found);
}

// The check can fail: an internal header is caught.
TEST(PublicHeaders, AnInternalIncludeIsCaught) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_public_headers_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "x.cc") << "#include \"kiln/kiln.h\"\n#include \"runtime/executable.h\"\n";
  const std::vector<std::string> found = private_includes(dir, {});
  fs::remove_all(dir);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], "x.cc: runtime/executable.h");
}

}  // namespace
}  // namespace kiln
