// Programs of several methods: a decoder's prefill and decode, exported from
// one model, compiled into one program; a session runs them in any order on
// one state, and a .kiln file keeps them all with weights stored once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "base/safetensors.h"
#include "ir/graph.h"
#include "kiln/kiln.h"
#include "runtime/program_impl.h"
#include "support/tensor_diff.h"

namespace kiln {
namespace {

const std::string kFixtures = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";

using kiln::testing::max_abs_diff;

std::shared_ptr<const Program> prefill_and_decode(const std::string& decode = "llama_generate.pt2") {
  LoadOptions o;
  o.compile.device = "cpu";
  auto p = compile_methods({{"prefill", kFixtures + "llama_prefill.pt2"}, {"decode", kFixtures + decode}}, o);
  EXPECT_TRUE(p.has_value()) << p.status().message();
  return p.has_value() ? *p : nullptr;
}

// Prefill the prompt in one call, then decode: every output matches PyTorch's
// (llama_prefill's call, then llama_generate's steps after the prompt).
void check_prefill_then_decode(const Program& program) {
  auto pre = read_safetensors(kFixtures + "llama_prefill.io.safetensors");
  auto dec = read_safetensors(kFixtures + "llama_generate.io.safetensors");
  ASSERT_TRUE(pre.has_value() && dec.has_value());
  Session s(std::shared_ptr<const Program>(std::shared_ptr<const Program>(), &program));
  auto out = s.run("prefill", {*pre->find("step0.input.0"), *pre->find("step0.input.1")});
  ASSERT_TRUE(out.has_value()) << out.status().message();
  EXPECT_LT(max_abs_diff((*out)[0], *pre->find("step0.output.0")), 1e-5);
  int steps = 0;
  for (int k = 3; dec->find("step" + std::to_string(k) + ".input.0"); ++k, ++steps) {
    const std::string p = "step" + std::to_string(k) + ".";
    auto o = s.run("decode", {*dec->find(p + "input.0"), *dec->find(p + "input.1")});
    ASSERT_TRUE(o.has_value()) << o.status().message();
    // The caches were filled by one prefill call instead of three decode calls: equal up to rounding.
    EXPECT_LT(max_abs_diff((*o)[0], *dec->find(p + "output.0")), 1e-4) << "decode step " << k;
  }
  EXPECT_GE(steps, 16);
}

TEST(Methods, PrefillThenDecodeOnOneState) {
  auto p = prefill_and_decode();
  ASSERT_TRUE(p);
  EXPECT_EQ(p->method_names(), (std::vector<std::string>{"prefill", "decode"}));
  ASSERT_NE(p->method("decode"), nullptr);
  EXPECT_EQ(p->method("prefill"), p.get());
  EXPECT_EQ(p->method("nope"), nullptr);
  EXPECT_EQ(p->method("decode")->inputs()[0].dims, (std::vector<std::string>{"1", "1"}));
  EXPECT_EQ(p->inputs()[0].dims, (std::vector<std::string>{"1", "3"}));
  // Parameters of equal bytes are one tensor in memory.
  const auto& a = program_impl(*p->method("prefill")).module().weights;
  const auto& b = program_impl(*p->method("decode")).module().weights;
  int shared = 0;
  for (const auto& [name, t] : a)
    if (auto it = b.find(name); it != b.end() && it->second.storage() == t.storage()) ++shared;
  EXPECT_GT(shared, 5);
  check_prefill_then_decode(*p);
  Session s(p);
  auto bad = s.run("nope", {});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("no method 'nope' (methods: prefill, decode)"), std::string::npos);
}

TEST(Methods, SavedAndLoadedWithWeightsOnce) {
  auto p = prefill_and_decode();
  ASSERT_TRUE(p);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kiln_methods_" + std::to_string(::getpid()) + ".kiln")).string();
  ASSERT_TRUE(p->save(path).is_ok());
  auto back = compile(path);
  ASSERT_TRUE(back.has_value()) << back.status().message();
  EXPECT_EQ((*back)->method_names(), (std::vector<std::string>{"prefill", "decode"}));
  check_prefill_then_decode(**back);
  // One model's weights once, not twice: the file is smaller than the two programs saved apart.
  size_t apart = 0;
  for (const char* m : {"prefill", "decode"}) {
    const std::string one = path + "." + m;
    ASSERT_TRUE(p->method(m)->save(one).is_ok());
    apart += std::filesystem::file_size(one);
    std::filesystem::remove(one);
  }
  EXPECT_LT(std::filesystem::file_size(path), apart * 3 / 4);
  std::filesystem::remove(path);
}

TEST(Methods, BuffersThatDisagreeAreRefused) {
  LoadOptions o;
  auto p = compile_methods({{"prefill", kFixtures + "llama_prefill.pt2"},  // cache of 32
                            {"decode", kFixtures + "llama_decode.pt2"}},   // cache of 16
                           o);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.status().message().find("buffer 'inner."), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("methods share buffers by name"), std::string::npos) << p.status().message();
  auto twice = compile_methods({{"a", kFixtures + "llama_prefill.pt2"}, {"a", kFixtures + "llama_generate.pt2"}});
  ASSERT_FALSE(twice.has_value());
  EXPECT_NE(twice.status().message().find("given twice"), std::string::npos);
}

}  // namespace
}  // namespace kiln
