// Tensors that share a storage in a .pt2 archive are one tensor: archives
// written by PyTorch and repacked by hand (two names on one blob; one blob
// viewed two ways), compiled, run, saved and loaded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "frontend/zip_reader.h"
#include "kiln/kiln.h"
#include "kiln/safetensors.h"
#include "support/zip_writer.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

const std::string kFixtures = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";

// An archive's entries, editable, written back as a .pt2 file.
struct Archive {
  std::string root;
  std::vector<testing::TestEntry> entries;

  static Archive of(const std::string& model) {
    Archive a;
    a.root = model + "/";
    auto zip = frontend::ZipArchive::open(kFixtures + model + ".pt2");
    EXPECT_TRUE(zip.has_value()) << zip.status().message();
    for (const frontend::ZipEntry& e : zip->entries()) {
      auto data = zip->read(e);
      EXPECT_TRUE(data.has_value());
      a.entries.push_back({e.name, Bytes(data->begin(), data->end())});
    }
    return a;
  }
  Bytes& entry(const std::string& rel) {
    for (auto& e : entries)
      if (e.name == root + rel) return e.data;
    ADD_FAILURE() << "no entry " << rel;
    return entries.front().data;
  }
  nlohmann::json json(const std::string& rel) {
    const Bytes& b = entry(rel);
    return nlohmann::json::parse(std::string(b.begin(), b.end()));
  }
  void set_json(const std::string& rel, const nlohmann::json& j) {
    const std::string t = j.dump();
    entry(rel) = Bytes(t.begin(), t.end());
  }
  std::string write(const std::string& name) const {
    const fs::path dir = fs::temp_directory_path() / ("kiln_aliases_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string path = (dir / name).string();
    const Bytes bytes = testing::write_zip(entries).bytes;
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return path;
  }
};

LoadOptions cpu_options() {
  LoadOptions o;
  o.compile.device = "cpu";
  o.compile.cache_dir.clear();
  return o;
}

std::vector<Tensor> numbered(const SafetensorsFile& io, const std::string& prefix) {
  std::vector<Tensor> out;
  for (int i = 0;; ++i) {
    const Tensor* t = io.find(prefix + std::to_string(i));
    if (!t) return out;
    out.push_back(*t);
  }
}

void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const Tensor g = got.contiguous(), w = want.contiguous();
  EXPECT_EQ(std::memcmp(g.raw_data(), w.raw_data(), g.nbytes()), 0) << what << " differs";
}

// Two parameters on one blob (tied weights, as PyTorch writes them): one
// tensor under the first name, the other an alias; the outputs are those of
// the same archive with two blobs of equal bytes.
TEST(StorageAliases, TwoNamesOnOneBlobAreOneTensor) {
  const std::string cfg = "data/weights/model_weights_config.json";
  Archive tied = Archive::of("mlp_bf16");
  nlohmann::json c = tied.json(cfg);
  ASSERT_EQ(c["config"]["norm.bias"]["path_name"], "weight_1");
  ASSERT_EQ(c["config"]["fc2.bias"]["path_name"], "weight_5");
  c["config"]["fc2.bias"]["path_name"] = "weight_1";
  tied.set_json(cfg, c);
  Archive equal = Archive::of("mlp_bf16");
  equal.entry("data/weights/weight_5") = equal.entry("data/weights/weight_1");

  auto p_tied = compile(tied.write("tied.pt2"), cpu_options());
  auto p_equal = compile(equal.write("equal.pt2"), cpu_options());
  ASSERT_TRUE(p_tied.has_value()) << p_tied.status().message();
  ASSERT_TRUE(p_equal.has_value()) << p_equal.status().message();
  EXPECT_EQ((*p_tied)->aliases(), (std::map<std::string, std::string, std::less<>>{{"fc2.bias", "norm.bias"}}));
  EXPECT_TRUE((*p_equal)->aliases().empty());
  EXPECT_EQ((*p_tied)->names_of("fc2.bias"), (std::vector<std::string>{"norm.bias", "fc2.bias"}));
  EXPECT_EQ((*p_tied)->weights().size() + 1, (*p_equal)->weights().size());

  auto io = read_safetensors(kFixtures + "mlp_bf16.io.safetensors");
  ASSERT_TRUE(io.has_value());
  Session a(*p_tied), b(*p_equal);
  auto out_a = a.run(numbered(*io, "input."));
  auto out_b = b.run(numbered(*io, "input."));
  ASSERT_TRUE(out_a.has_value()) << out_a.status().message();
  ASSERT_TRUE(out_b.has_value()) << out_b.status().message();
  ASSERT_EQ(out_a->size(), out_b->size());
  for (size_t j = 0; j < out_a->size(); ++j) expect_equal((*out_a)[j], (*out_b)[j], "output " + std::to_string(j));
}

// The non-strict static-cache decoder: each cache and counter is a buffer and
// a written lifted constant over one blob. One buffer, written through the
// constant, read under either name, bound under either name; also from .kiln.
TEST(StorageAliases, NonStrictCachesAreTheBuffersUsersRead) {
  auto io = read_safetensors(kFixtures + "llama_nonstrict.io.safetensors");
  ASSERT_TRUE(io.has_value());
  auto compiled = compile(kFixtures + "llama_nonstrict.pt2", cpu_options());
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  const std::string lifted = "inner.model.model.layers.0.self_attn.lifted_tensor_2";
  EXPECT_EQ((*compiled)->canonical_name(lifted), "inner.key_cache_0");
  EXPECT_EQ((*compiled)->canonical_name("inner.lifted_tensor_0"), "inner.cumulative_length_0");
  EXPECT_TRUE((*compiled)->buffer_updated_in_place(lifted) || !(*compiled)->mutated_buffers().empty());
  std::vector<std::string> buffers;
  for (const TensorSpec& b : (*compiled)->buffers()) buffers.push_back(b.name);
  EXPECT_NE(std::find(buffers.begin(), buffers.end(), "inner.key_cache_0"), buffers.end());
  EXPECT_EQ(std::find(buffers.begin(), buffers.end(), lifted), buffers.end());
  const auto& mutated = (*compiled)->mutated_buffers();
  EXPECT_NE(std::find(mutated.begin(), mutated.end(), "inner.key_cache_0"), mutated.end());

  const std::string kiln_path = Archive::of("llama_nonstrict").write("llama_nonstrict.kiln");
  ASSERT_TRUE((*compiled)->save(kiln_path).is_ok());
  auto loaded = compile(kiln_path, cpu_options());
  ASSERT_TRUE(loaded.has_value()) << loaded.status().message();
  EXPECT_EQ((*loaded)->aliases(), (*compiled)->aliases());

  for (const auto& program : {*compiled, *loaded}) {
    Session session(program);
    // The caller's memory, bound under the constant's name: the buffer's memory.
    auto initial = session.buffer(lifted);
    ASSERT_TRUE(initial.has_value()) << initial.status().message();
    Tensor mine = initial->clone();
    ASSERT_TRUE(session.bind_buffer(lifted, mine).is_ok());
    for (int k = 0;; ++k) {
      const std::string p = "step" + std::to_string(k) + ".";
      std::vector<Tensor> inputs = numbered(*io, p + "input.");
      if (inputs.empty()) break;
      auto out = session.run(inputs);
      ASSERT_TRUE(out.has_value()) << out.status().message();
    }
    for (const std::string& name : {std::string("inner.key_cache_0"), lifted}) {
      auto got = session.buffer(name);
      ASSERT_TRUE(got.has_value()) << name;
      EXPECT_EQ(got->storage(), mine.storage()) << name << " is not the memory bound under " << lifted;
    }
    // PyTorch's values after the same steps, under whichever names the I/O file records.
    int checked = 0;
    for (const auto& [name, want] : io->tensors) {
      if (!name.starts_with("final.buffer.")) continue;
      auto got = session.buffer(name.substr(13));
      ASSERT_TRUE(got.has_value()) << got.status().message();
      const Tensor g = got->contiguous();
      ASSERT_EQ(g.numel(), want.numel()) << name;
      for (int64_t i = 0; i < g.numel(); ++i)
        ASSERT_NEAR(g.value_at(i), want.value_at(i), 1e-4 + 1e-3 * std::abs(want.value_at(i))) << name << " at " << i;
      ++checked;
    }
    EXPECT_GE(checked, 6);
  }
}

// One blob viewed two ways, one of them written: refused by name at compile,
// never split into copies.
TEST(StorageAliases, AnotherViewOfAWrittenBlobIsRefusedByName) {
  const std::string cfg = "data/constants/model_constants_config.json";
  Archive a = Archive::of("llama_nonstrict");
  nlohmann::json c = a.json(cfg);
  nlohmann::json& meta = c["config"]["inner.key_cache_0"]["tensor_meta"];
  ASSERT_EQ(meta["strides"].size(), 4u);
  // [1, 2, 16, 8] with the two middle dims swapped in memory: still inside the blob.
  meta["strides"] = nlohmann::json::array({{{"as_int", 256}}, {{"as_int", 8}}, {{"as_int", 16}}, {{"as_int", 1}}});
  a.set_json(cfg, c);
  auto p = compile(a.write("two_views.pt2"), cpu_options());
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.status().code(), ErrorCode::kUnsupported) << p.status().message();
  EXPECT_NE(p.status().message().find("inner.key_cache_0"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("lifted_tensor_2"), std::string::npos) << p.status().message();
}

}  // namespace
}  // namespace kiln
