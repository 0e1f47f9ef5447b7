// kiln's libraries never read the environment: the CLI, the Python module
// and the test programs turn it into Settings at their edge
// (tools/environment), and the libraries read only those.
#include "kiln/settings.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "environment/environment.h"
#include "kiln/cache.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

TEST(Settings, NoLibrarySourceReadsTheEnvironment) {
  std::vector<std::string> found;
  for (const auto& entry : fs::recursive_directory_iterator(fs::path(KILN_SOURCE_DIR) / "src")) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".cc" && ext != ".h" && ext != ".cuh") continue;
    std::ifstream in(entry.path());
    std::string line;
    for (int n = 1; std::getline(in, line); ++n)
      if (line.find("getenv(") != std::string::npos || line.find("environ[") != std::string::npos)
        found.push_back(entry.path().filename().string() + ":" + std::to_string(n));
  }
  EXPECT_TRUE(found.empty()) << ::testing::PrintToString(found);
}

// Sets environment variables for one scope and restores them after.
class Environment {
 public:
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~Environment() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it)
      if (it->second)
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        ::unsetenv(it->first.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(Settings, TheEnvironmentGivesEverySwitch) {
  {
    Environment env;
    env.set("KILN_CACHE_DIR", "/tmp/kiln-cache");
    env.set("KILN_SEED", "0x10");
    env.set("KILN_HOT_ENGINES", "3");
    env.set("KILN_CUDA_GRAPHS", "0");
    env.set("KILN_CUDA_PDL", "1");
    env.set("KILN_CUDA_PROFILE", "all");
    env.set("KILN_CUDA_TRACE", "2");
    env.set("KILN_CUDA_SHAPES", "12x");
    env.set("CUDA_VISIBLE_DEVICES", "0");
    const Settings s = settings_from_environment();
    EXPECT_EQ(s.cache_dir, "/tmp/kiln-cache");
    EXPECT_EQ(s.seed, 16u);
    EXPECT_EQ(s.hot_engines, 3u);
    EXPECT_FALSE(s.cuda.graphs);
    EXPECT_TRUE(s.cuda.early_launch);
    EXPECT_EQ(s.cuda.profile, 2);
    EXPECT_EQ(s.cuda.trace, 2);
    EXPECT_EQ(s.cuda.shapes, "12x");  // checked where it is used, naming the variable
    EXPECT_TRUE(s.cuda.visible_devices_set);
  }
  Environment env;
  for (const char* name : {"KILN_CACHE_DIR", "KILN_SEED", "KILN_HOT_ENGINES", "KILN_CUDA_GRAPHS", "KILN_CUDA_PDL",
                           "KILN_CUDA_PROFILE", "KILN_CUDA_TRACE", "KILN_CUDA_SHAPES", "CUDA_VISIBLE_DEVICES"})
    env.set(name, nullptr);
  env.set("XDG_CACHE_HOME", "/tmp/xdg");
  const Settings s = settings_from_environment();
  const Settings defaults;
  EXPECT_EQ(s.cache_dir, "/tmp/xdg/kiln");
  EXPECT_EQ(s.seed, defaults.seed);
  EXPECT_EQ(s.hot_engines, defaults.hot_engines);
  EXPECT_EQ(s.cuda.graphs, defaults.cuda.graphs);
  EXPECT_EQ(s.cuda.early_launch, defaults.cuda.early_launch);
  EXPECT_EQ(s.cuda.profile, 0);
  EXPECT_FALSE(s.cuda.visible_devices_set);
}

TEST(Settings, TheDefaultCacheDirectoryIsTheSettings) {
  const Settings before = settings();
  Settings s = before;
  s.cache_dir = "/tmp/kiln-settings-test";
  set_settings(s);
  EXPECT_EQ(default_cache_dir(), "/tmp/kiln-settings-test");
  set_settings(before);
  EXPECT_EQ(default_cache_dir(), before.cache_dir);
}

}  // namespace
}  // namespace kiln
