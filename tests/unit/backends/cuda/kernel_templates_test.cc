// kiln's CUDA kernel templates (src/backends/cuda/kernels/*.cuh, embedded):
// every header compiles alone with NVRTC, and every instantiation a kernel
// generator can ask for compiles for sm_90, with its sizes compiled in and
// read at run time (no GPU needed).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "backends/cuda/cuda_builder.h"
#include "backends/cuda/kernel_headers.h"
#include "backends/cuda/kernel_source.h"
#include "backends/cuda/nvrtc_compile.h"

namespace kiln::cuda {
namespace {

// Compiles `ks` into one module as the builder does, every size compiled in
// (or read at run time), and checks each instance got a kernel of its own.
void expect_compiles(const std::vector<GeneratedKernel>& ks, bool sizes_at_run_time) {
  std::vector<KernelChoice> choices;
  std::vector<std::string> names;
  for (size_t i = 0; i < ks.size(); ++i) {
    choices.emplace_back(ks[i], std::vector<bool>(ks[i].dims.size(), sizes_at_run_time));
    names.push_back("k" + std::to_string(i));
  }
  std::vector<const KernelChoice*> all;
  for (const KernelChoice& c : choices) all.push_back(&c);
  auto m = compile_kernels(all, names, "sm_90");
  ASSERT_TRUE(m.has_value()) << m.status().message();
  ASSERT_EQ(m->lowered_names.size(), ks.size());
  for (size_t i = 0; i < ks.size(); ++i) {
    EXPECT_NE(names[i], "k" + std::to_string(i)) << "instance " << i << " kept its placeholder name";
    EXPECT_EQ(names[i].rfind("_Z", 0), 0u) << names[i];  // a mangled template instance
  }
}

TEST(KernelTemplates, EveryHeaderCompilesAlone) {
  ASSERT_FALSE(kernel_headers().empty());
  for (const KernelHeader& h : kernel_headers()) {
    auto m = compile_cuda_source(std::string("#include \"") + h.name + "\"\n", "sm_90");
    EXPECT_TRUE(m.has_value()) << h.name << ": " << m.status().message();
  }
  EXPECT_FALSE(kernel_header("kiln/prelude.cuh").empty());
  EXPECT_TRUE(kernel_header("kiln/none.cuh").empty());
}

// gemv: every element type, row count, split of k and activation, with and
// without a bias, from the generator.
TEST(KernelTemplates, EveryGemvInstantiationCompiles) {
  std::vector<GeneratedKernel> ks;
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16})
    for (int64_t m = 1; m <= kGemvMaxRows; ++m)
      // n and k that make the generator split k among 1, 2, 4 and 8 warps.
      for (auto [n, k] : {std::pair<int64_t, int64_t>{100000, 4096}, {2048, 8192}, {1024, 8192}, {512, 8192}})
        for (const char* act : {"none", "relu", "gelu"})
          for (bool bias : {false, true}) {
            GemvShape g;
            g.dtype = t;
            g.m = m;
            g.n = g.ldc = n;
            g.k = g.lda = g.ldw = k;
            g.activation = act;
            g.has_bias = bias;
            g.alpha = 0.5f;
            auto kern = gemv_kernel(g);
            ASSERT_TRUE(kern.has_value()) << kern.status().message();
            ks.push_back(*kern);
          }
  std::set<std::string> splits;
  for (const GeneratedKernel& k : ks) splits.insert(k.targs[2]);
  EXPECT_EQ(splits, (std::set<std::string>{"1", "2", "4", "8"}));
  expect_compiles(ks, false);
  // Sizes read at run time change only the last parameter: once per type, row count and split.
  std::vector<GeneratedKernel> plain;
  for (const GeneratedKernel& k : ks)
    if (k.targs[3] == "0") plain.push_back(k);
  expect_compiles(plain, true);
}

// Sizes become template arguments (a run-time size reads KilnDims, which the
// kernel then takes): no kernel text is edited or generated.
TEST(KernelTemplates, AnInstanceNamesItsSizesAndWhichAreReadAtRunTime) {
  GemvShape g;
  g.dtype = DType::Float16;
  g.m = 2;
  g.n = g.ldc = 64;
  g.k = g.lda = g.ldw = 128;
  auto k = gemv_kernel(g);
  ASSERT_TRUE(k.has_value());
  EXPECT_TRUE(k->source.empty());
  auto fixed = kernel_instance(*k, {});
  ASSERT_TRUE(fixed.has_value());
  EXPECT_EQ(*fixed, "kiln::gemv<__half, 2, 1, 0, kiln::Sizes<0x0ULL, 64LL, 128LL, 16LL, 128LL, 64LL, 1065353216LL>>");
  auto some = kernel_instance(*k, {true, false, false, false, true});
  ASSERT_TRUE(some.has_value());
  EXPECT_EQ(*some,
            "kiln::gemv<__half, 2, 1, 0, kiln::Sizes<0x11ULL, 0LL, 128LL, 16LL, 128LL, 0LL, 1065353216LL>, KilnDims>");
  EXPECT_FALSE(kernel_definition(*k, "k0", {}).has_value());  // not text
  EXPECT_NE(k->identity().find("kiln/gemv.cuh:kiln::gemv<__half, 2, 1, 0>"), std::string::npos) << k->identity();
}

}  // namespace
}  // namespace kiln::cuda
