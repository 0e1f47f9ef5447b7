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
    auto p = compile((kDir / f).string(), o);
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

// The partition drawn for Graphviz: a cluster per segment, every node once
// in its segment's cluster, the fallback node with the reason the report
// gives, the input copied to the device on a red edge with its bytes
// (computed here from its type in the IR), and the value the device engine
// hands to masked_select (which the runtime runs on the device, as the
// report says) labelled but not red.
TEST(CudaPartition, DrawnForGraphvizWithSegmentsReasonsAndCrossingBytes) {
  if (device_ready("cuda").code() == ErrorCode::kInvalidArgument) GTEST_SKIP() << "this kiln has no CUDA backend";
  LoadOptions o;
  o.compile.device = "cuda";
  o.compile.build_engines = false;
  o.load_engines = false;
  auto p = compile((kDir / "masked_select_tail.pt2").string(), o);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  const std::string dot = (*p)->partition_dot();
  ASSERT_EQ(dot.rfind("digraph ", 0), 0u) << dot;
  EXPECT_EQ(std::count(dot.begin(), dot.end(), '{'), std::count(dot.begin(), dot.end(), '}'));
  const std::vector<SegmentInfo>& segments = (*p)->segments();
  ASSERT_EQ(segments.size(), 2u);
  size_t clusters = 0;
  for (size_t at = dot.find("subgraph cluster_"); at != std::string::npos; at = dot.find("subgraph cluster_", at + 1))
    ++clusters;
  EXPECT_EQ(clusters, segments.size());
  EXPECT_NE(dot.find("segment 0: engine (cuda)"), std::string::npos) << dot;
  EXPECT_NE(dot.find("segment 1: fallback"), std::string::npos) << dot;
  // Every node of the lowered graph drawn once ("    nK [" inside a cluster).
  int nodes = 0;
  for (const auto& [op, n] : (*p)->op_histogram()) nodes += n;
  std::istringstream lines(dot);
  std::string line;
  int drawn = 0;
  while (std::getline(lines, line))
    if (line.rfind("    n", 0) == 0 && line.find(" [label=") != std::string::npos) ++drawn;
  EXPECT_EQ(drawn, nodes);
  // The fallback node's reason, as the report gives it.
  const std::string reason = "backend 'cuda' has no layer for aten.masked_select.default";
  ASSERT_NE((*p)->partition_report().find(reason), std::string::npos);
  EXPECT_NE(dot.find("why: " + reason), std::string::npos) << dot;
  // %x is copied in; %linear_1 goes from the engine to masked_select, both on the device.
  const std::string ir = (*p)->ir_text();
  auto bytes_of = [&](const std::string& name) -> std::pair<std::string, int64_t> {
    const size_t def = ir.find("%" + name + ": ");
    if (def == std::string::npos) return {"", 0};
    const size_t from = def + name.size() + 3;
    const std::string type = ir.substr(from, ir.find(']', from) + 1 - from);  // "float32[6, 16]"
    if (type.rfind("float32[", 0) != 0) return {type, 0};
    int64_t bytes = 4;
    std::istringstream dims(type.substr(8, type.size() - 9));
    for (std::string d; std::getline(dims, d, ',');) bytes *= std::stoll(d);
    return {type, bytes};
  };
  auto edge_of = [&](const std::string& name) {
    const auto [type, bytes] = bytes_of(name);
    const size_t at = dot.find("[label=\"%" + name + " " + type + "\\n" + std::to_string(bytes) + " bytes\"");
    if (at == std::string::npos) return std::string();
    return dot.substr(at, dot.find('\n', at) - at);
  };
  const auto [x_type, x_bytes] = bytes_of("x");
  EXPECT_GT(x_bytes, 0) << x_type;
  const std::string x_edge = edge_of("x");
  ASSERT_FALSE(x_edge.empty()) << dot;
  EXPECT_NE(x_edge.find("color=red"), std::string::npos) << x_edge;
  const std::string linear_edge = edge_of("linear_1");
  ASSERT_FALSE(linear_edge.empty()) << dot;
  EXPECT_EQ(linear_edge.find("color=red"), std::string::npos) << linear_edge;
  EXPECT_NE(dot.find("(runs on the device)"), std::string::npos) << dot;
}

}  // namespace
}  // namespace kiln
