// The CUDA engine plan reader (read_cuda_engine_plan): everything load()
// checks on the host before it touches the device. No GPU needed.
#include "backends/cuda/cuda_plan.h"

#include <gtest/gtest.h>

#include "support/cuda_plan_sample.h"

namespace kiln::cuda {
namespace {

using kiln::testing::sample_cuda_engine_plan;
using kiln::testing::sample_cuda_plan;

TEST(PlanReader, ReadsAPlanWhoseSectionsAgree) {
  const std::vector<uint8_t> bytes = sample_cuda_engine_plan();
  ASSERT_FALSE(bytes.empty());
  auto read = read_cuda_engine_plan(bytes, "sample");
  ASSERT_TRUE(read.has_value()) << read.status().message();
  EXPECT_EQ(read->plan.to_json(), sample_cuda_plan().to_json());
  EXPECT_EQ(read->alias_input, std::vector<int>{-1});
  EXPECT_EQ(read->common.network.constant_names.size(), 3u);
}

// A plan whose CUDA sections disagree with its own layer graph (a slot of
// another dtype or size, one slot too many) is refused naming the slot, as is
// a CUDA plan that asks for a device form its constant cannot have.
TEST(PlanReader, SectionsThatDisagreeAreRefused) {
  struct Case {
    const char* what;
    void (*damage)(CudaPlan&);
    const char* expect;
  };
  const Case cases[] = {
      {"an input slot of another dtype", [](CudaPlan& p) { p.inputs[0].dtype = DType::Float32; }, "input slot 'x'"},
      {"an output slot of other sizes",
       [](CudaPlan& p) {
         p.outputs[0].sizes = {4, 8};
       },
       "output slot 'y'"},
      {"an output slot of another rank", [](CudaPlan& p) { p.outputs[0].sizes = {64}; }, "output slot 'y'"},
      {"one input slot too many",
       [](CudaPlan& p) {
         p.inputs.push_back({"z", DType::Float16, {4}, 1024});
       },
       "2 input and 1 output slots"},
      {"padded channels on the bias", [](CudaPlan& p) { p.constants[2].padded_channels = 72; }, "stem.bias"},
      {"a block whose sizes wrap in 32 bits",
       [](CudaPlan& p) {
         p.steps[0].kernel.block = {65536, 65536, 1};
       },
       "bad block size"},
      {"a grid too tall",
       [](CudaPlan& p) {
         p.steps[0].kernel.grid = {1, 70000, 1};
       },
       "grid"},
      {"a slot whose bytes overflow",
       [](CudaPlan& p) {
         p.outputs[0].sizes = {int64_t{1} << 40, int64_t{1} << 40};
       },
       "larger than a plan can hold"},
  };
  for (const Case& c : cases) {
    CudaPlan p = sample_cuda_plan();
    c.damage(p);
    auto read = read_cuda_engine_plan(sample_cuda_engine_plan(p), "sample");
    ASSERT_FALSE(read.has_value()) << c.what;
    EXPECT_EQ(read.status().code(), ErrorCode::kFormat) << c.what;
    EXPECT_NE(read.status().message().find(c.expect), std::string::npos) << c.what << ": " << read.status().message();
    EXPECT_NE(read.status().message().find("sample"), std::string::npos) << c.what << ": " << read.status().message();
  }
}

TEST(PlanReader, APlanOfAnotherBackendOrWithoutItsSectionsIsRefused) {
  std::vector<uint8_t> bytes = sample_cuda_engine_plan();
  // Every byte kept but one flipped in the middle: the checksum catches it.
  bytes[bytes.size() / 2] ^= 0x40;
  EXPECT_FALSE(read_cuda_engine_plan(bytes, "flipped").has_value());
  EXPECT_FALSE(read_cuda_engine_plan({}, "empty").has_value());
  auto truncated = sample_cuda_engine_plan();
  truncated.resize(truncated.size() / 3);
  EXPECT_FALSE(read_cuda_engine_plan(truncated, "truncated").has_value());
}

}  // namespace
}  // namespace kiln::cuda
