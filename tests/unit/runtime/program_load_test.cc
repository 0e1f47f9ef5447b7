// The runtime's Program::load reads compiled programs (.kiln) only: a saved
// program loads and runs as the compiled one does, and a .pt2 archive given
// to it is refused with an error that says how to compile it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "base/safetensors.h"
#include "kiln/compiler.h"
#include "kiln/runtime.h"
#include "support/tensor_diff.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
const std::string kFixtures = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";

TEST(ProgramLoad, ASavedProgramLoadsWithoutTheCompilerAndGivesTheCompiledOutputs) {
  auto compiled = compile(kFixtures + "resnet_basic.pt2");
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  const fs::path saved = fs::temp_directory_path() / ("program_load_" + std::to_string(getpid()) + ".kiln");
  ASSERT_TRUE((*compiled)->save(saved.string()).is_ok());
  auto loaded = Program::load(saved.string());
  ASSERT_TRUE(loaded.has_value()) << loaded.status().message();
  auto io = read_safetensors(kFixtures + "resnet_basic.io.safetensors");
  ASSERT_TRUE(io.has_value());
  const Tensor x = *io->find("input.0");
  Session a(*compiled), b(*loaded);
  auto want = a.run({x});
  auto got = b.run({x});
  ASSERT_TRUE(want.has_value() && got.has_value());
  EXPECT_EQ(testing::max_abs_diff((*got)[0], (*want)[0]), 0.0);
  EXPECT_LT(testing::max_abs_diff((*got)[0], *io->find("output.0")), 1e-4);
  // Loaded without its engines (for inspecting): they load at the first call.
  auto lazy = Program::load(saved.string(), /*load_engines=*/false);
  ASSERT_TRUE(lazy.has_value()) << lazy.status().message();
  Session c(*lazy);
  auto later = c.run({x});
  ASSERT_TRUE(later.has_value()) << later.status().message();
  EXPECT_EQ(testing::max_abs_diff((*later)[0], (*want)[0]), 0.0);
  fs::remove(saved);
}

TEST(ProgramLoad, APt2ArchiveIsRefusedNamingHowToCompileIt) {
  auto p = Program::load(kFixtures + "resnet_basic.pt2");
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("resnet_basic.pt2"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("kiln::compile"), std::string::npos) << p.status().message();
  auto missing = Program::load(kFixtures + "no_such_program.kiln");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.status().message().find("no_such_program.kiln"), std::string::npos) << missing.status().message();
}

}  // namespace
}  // namespace kiln
