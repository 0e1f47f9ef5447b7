// The CUDA partition needs no GPU: every fixture compiled for CUDA without
// building an engine (what `kiln inspect --partition --device cuda` prints on
// a machine without one) is cut exactly as the GPU machine cut it when it
// built the engines (tests/fixtures/torch2.11/cuda_partitions.txt, written
// there by tools/record_cuda_partitions.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(KILN_SOURCE_DIR) / "tests" / "fixtures" / "torch2.11";

// "== FILE" sections of the recorded copy: file name -> partition text.
std::map<std::string, std::string> recorded() {
  std::ifstream in(kDir / "cuda_partitions.txt");
  std::map<std::string, std::string> out;
  std::string line, name;
  while (std::getline(in, line)) {
    if (line.rfind("== ", 0) == 0) {  // a file; "-- method NAME" lines stay in its text
      name = line.substr(3);
      out[name];
    } else if (!name.empty()) {
      out[name] += line + "\n";
    }
  }
  return out;
}

TEST(CudaPartition, WithoutBuildingIsThePartitionTheGpuMachineMade) {
  if (device_ready("cuda").code() == ErrorCode::kInvalidArgument) GTEST_SKIP() << "this kiln has no CUDA backend";
  const auto want = recorded();
  ASSERT_FALSE(want.empty()) << "no recorded partitions in " << (kDir / "cuda_partitions.txt");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(kDir))
    if (e.path().extension() == ".pt2") files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files.size(), want.size()) << "fixtures and recorded partitions differ in number";
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    LoadOptions o;
    o.compile.device = "cuda";
    o.compile.build_engines = false;
    o.load_engines = false;
    auto p = Program::load((kDir / f).string(), o);
    ASSERT_TRUE(p.has_value()) << p.status().message();
    auto it = want.find(f);
    ASSERT_NE(it, want.end()) << "no recorded partition";
    // Every method's partition, as kiln inspect prints them.
    const std::vector<std::string> methods = (*p)->method_names();
    std::string got;
    bool engines = false;
    for (const std::string& name : methods) {
      const Program* m = (*p)->method(name);
      if (methods.size() > 1) got += "-- method " + name + "\n";
      got += m->partition_report();
      for (const SegmentInfo& s : m->segments()) {
        EXPECT_EQ(s.plan_bytes, 0u) << "an engine was built";
        engines = engines || s.engine;
      }
    }
    EXPECT_EQ(got, it->second);
    // Such a program cannot be saved (its engines were not built).
    if (engines) {
      EXPECT_FALSE((*p)->save((fs::temp_directory_path() / "kiln_partition_only.kiln").string()).is_ok());
    }
  }
}

}  // namespace
}  // namespace kiln
