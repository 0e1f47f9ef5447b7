// The test programs' main: kiln's settings from the environment (as the CLI
// takes them; a GPU run may set KILN_CUDA_PDL=1 for a whole suite), then the tests.
#include <gtest/gtest.h>

#include "environment/environment.h"

int main(int argc, char** argv) {
  kiln::set_settings(kiln::settings_from_environment());
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
