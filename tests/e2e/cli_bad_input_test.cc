// The CLI on corrupted copies of real fixtures: every bad file or bad input
// gets exit code 2 and a message naming what is wrong and where; a mismatch
// gets exit code 1; a match exit code 0.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/safetensors.h"
#include "frontend/zip_reader.h"
#include "kiln/kiln.h"
#include "kiln/safetensors.h"
#include "support/zip_writer.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const std::string kDir = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";
const std::string kModel = kDir + "resnet_basic.pt2";
const std::string kIo = kDir + "resnet_basic.io.safetensors";

struct CliResult {
  int code = -1;
  std::string output;
};

CliResult kiln_cli(const std::string& args) {
  CliResult r;
  std::string cmd = std::string(KILN_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class CliBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_cli_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    // Each test gets its own engine cache: never the user's, never one that an earlier test warmed.
    ::setenv("KILN_CACHE_DIR", (dir_ / "engine-cache").c_str(), 1);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_bytes(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  static std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  // Rewrites the fixture archive with `edit` applied to each entry (name relative to the root folder).
  std::string repack(const std::string& name,
                     const std::function<void(const std::string&, std::vector<uint8_t>&)>& edit) {
    auto zip = frontend::ZipArchive::open(kModel);
    EXPECT_TRUE(zip.has_value());
    std::vector<testing::TestEntry> entries;
    for (const auto& e : zip->entries()) {
      auto bytes = zip->read(e);
      EXPECT_TRUE(bytes.has_value());
      testing::TestEntry te{e.name, {bytes->begin(), bytes->end()}};
      edit(e.name.substr(e.name.find('/') + 1), te.data);
      entries.push_back(std::move(te));
    }
    return write_bytes(name, testing::write_zip(entries).bytes);
  }

  static void replace_text(std::vector<uint8_t>& data, const std::string& from, const std::string& to) {
    std::string s(data.begin(), data.end());
    auto pos = s.find(from);
    ASSERT_NE(pos, std::string::npos) << from;
    s.replace(pos, from.size(), to);
    data.assign(s.begin(), s.end());
  }

  fs::path dir_;
};

TEST_F(CliBadInput, GoodFixturePassesWithExitZero) {
  CliResult r = kiln_cli("check " + kModel + " " + kIo);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(": PASS\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tensors checked, max abs err"), std::string::npos);
}

// kiln check compares at the tolerance the fixture's manifest records
// (mlp_bf16 computes in bfloat16: rtol 0.02 there), unless the command line
// gives one; a manifest it cannot use is an error naming it.
TEST_F(CliBadInput, CheckUsesTheFixturesRecordedTolerance) {
  const std::string model = kDir + "mlp_bf16.pt2", io = kDir + "mlp_bf16.io.safetensors";
  CliResult r = kiln_cli("check " + model + " " + io + " --verbose");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("tolerance: rtol 0.02, atol 0.01 (manifest.json, fixture mlp_bf16;"), std::string::npos)
      << r.output;
  r = kiln_cli("check " + model + " " + io + " --rtol 1e-4");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("(command line;"), std::string::npos) << r.output;

  // Copies beside manifests of their own.
  fs::copy_file(io, dir_ / "mlp_bf16.io.safetensors");
  const std::string copy = (dir_ / "mlp_bf16.io.safetensors").string();
  auto with_manifest = [&](const std::string& text) { std::ofstream(dir_ / "manifest.json") << text; };
  with_manifest("{\"fixtures\": [");
  r = kiln_cli("check " + model + " " + copy);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("manifest.json: not a JSON object"), std::string::npos) << r.output;
  with_manifest(R"({"fixtures": [{"name": "mlp_bf16", "files": {"io": "mlp_bf16.io.safetensors"},
                                  "tolerance": {"rtol": -1, "atol": 0.01}}]})");
  r = kiln_cli("check " + model + " " + copy);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("fixture 'mlp_bf16': tolerance.rtol must be a finite number >= 0"), std::string::npos)
      << r.output;
  // An entry for another io file does not apply: the default tolerance, which this fixture does not meet.
  with_manifest(R"({"fixtures": [{"name": "mlp_bf16", "files": {"io": "other.io.safetensors"},
                                  "tolerance": {"rtol": 0.02, "atol": 0.01}}]})");
  r = kiln_cli("check " + model + " " + copy);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("(default;"), std::string::npos) << r.output;
}

// The caches and counters of a decode step in memory the caller owns (Session::bind_buffer): the
// cache writes land there, the final values read from there match PyTorch's.
TEST_F(CliBadInput, CheckWithCallerBoundBuffers) {
  for (const char* model : {"llama_decode.pt2", "llama_decode.aten.pt2", "cache_writes.pt2", "conv_state.pt2"}) {
    const std::string name(model);
    const std::string base = name.substr(0, name.find('.'));
    CliResult r = kiln_cli("check " + kDir + name + " " + kDir + base + ".io.safetensors --bind-buffers");
    EXPECT_EQ(r.code, 0) << model << ": " << r.output;
    EXPECT_NE(r.output.find(": PASS\n"), std::string::npos) << r.output;
  }
}

TEST_F(CliBadInput, MismatchExitsOne) {
  auto io = read_safetensors(kIo);
  ASSERT_TRUE(io.has_value());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : io->tensors) {
    Tensor c = t.clone();
    if (name == "output.0") c.data<float>()[3] += 0.5f;
    tensors.emplace_back(name, c);
  }
  std::string path = (dir_ / "io.safetensors").string();
  ASSERT_TRUE(write_safetensors(path, tensors).is_ok());
  CliResult r = kiln_cli("check " + kModel + " " + path);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("output.0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 of 20 elements outside tolerance"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(": FAIL\n"), std::string::npos);
}

TEST_F(CliBadInput, TruncatedArchive) {
  auto bytes = read_bytes(kModel);
  for (size_t keep : {size_t{0}, size_t{10}, bytes.size() / 2, bytes.size() - 1}) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(keep));
    std::string path = write_bytes("truncated.pt2", cut);
    CliResult r = kiln_cli("check " + path + " " + kIo);
    EXPECT_EQ(r.code, 2) << keep << ": " << r.output;
    EXPECT_NE(r.output.find("truncated.pt2"), std::string::npos) << r.output;
  }
}

TEST_F(CliBadInput, CorruptWeightBytesFailTheChecksum) {
  auto zip = frontend::ZipArchive::open(kModel);
  ASSERT_TRUE(zip.has_value());
  const frontend::ZipEntry* e = zip->find("resnet_basic/data/weights/weight_0");
  ASSERT_NE(e, nullptr);
  auto bytes = read_bytes(kModel);
  bytes[e->data_offset + 5] ^= 0x40;
  CliResult r = kiln_cli("check " + write_bytes("flipped.pt2", bytes) + " " + kIo);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("resnet_basic/data/weights/weight_0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CRC"), std::string::npos) << r.output;
}

TEST_F(CliBadInput, MalformedJson) {
  std::string path = repack("badjson.pt2", [](const std::string& n, std::vector<uint8_t>& d) {
    if (n == "models/model.json") d.resize(d.size() / 2);
  });
  CliResult r = kiln_cli("check " + path + " " + kIo);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("models/model.json: malformed JSON at byte"), std::string::npos) << r.output;
}

TEST_F(CliBadInput, WeightBlobShorterThanItsMetadata) {
  std::string path = repack("short.pt2", [](const std::string& n, std::vector<uint8_t>& d) {
    if (n == "data/weights/weight_0") d.resize(d.size() - 8);
  });
  CliResult r = kiln_cli("check " + path + " " + kIo);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("weight 'conv1.weight'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("data/weights/weight_0"), std::string::npos) << r.output;
}

TEST_F(CliBadInput, UnknownOp) {
  std::string path = repack("unknown_op.pt2", [&](const std::string& n, std::vector<uint8_t>& d) {
    if (n == "models/model.json")
      replace_text(d, "torch.ops.aten.max_pool2d.default", "torch.ops.aten.frobnicate.default");
  });
  CliResult r = kiln_cli("check " + path + " " + kIo);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("node 'max_pool2d': unknown op 'torch.ops.aten.frobnicate.default'"), std::string::npos)
      << r.output;
}

TEST_F(CliBadInput, UnknownDtypeCode) {
  std::string path = repack("dtype.pt2", [&](const std::string& n, std::vector<uint8_t>& d) {
    if (n == "models/model.json") replace_text(d, "\"dtype\": 7", "\"dtype\": 99");
  });
  CliResult r = kiln_cli("check " + path + " " + kIo);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown or unsupported dtype code 99"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tensor_values."), std::string::npos) << r.output;
}

TEST_F(CliBadInput, DanglingValueReference) {
  std::string path = repack("dangling.pt2", [&](const std::string& n, std::vector<uint8_t>& d) {
    if (n == "models/model.json")
      replace_text(d, "{\"as_tensor\": {\"name\": \"x\"}}", "{\"as_tensor\": {\"name\": \"nowhere\"}}");
  });
  CliResult r = kiln_cli("check " + path + " " + kIo);
  EXPECT_EQ(r.code, 2) << r.output;
  // The placeholder is renamed, so the first node reading x refers to nothing.
  EXPECT_NE(r.output.find("undefined value 'x'"), std::string::npos) << r.output;
}

// An input write that names no user input would be lost: refused where it is read.
TEST_F(CliBadInput, InputMutationOfNoInput) {
  for (const std::string& target : {std::string("linear"), std::string("")}) {
    std::string path = repack("mutation.pt2", [&](const std::string& n, std::vector<uint8_t>& d) {
      if (n == "models/model.json")
        replace_text(d, "[{\"user_output\": {\"arg\": {\"as_tensor\": {\"name\": \"linear\"}}}}]",
                     "[{\"user_input_mutation\": {\"arg\": {\"as_tensor\": {\"name\": \"linear\"}}, "
                     "\"user_input_name\": \"" +
                         target + "\"}}]");
    });
    CliResult r = kiln_cli("inspect " + path);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("signature.output_specs[0]: user_input_mutation names '" + target +
                            "', which is not a user input"),
              std::string::npos)
        << r.output;
  }
}

TEST_F(CliBadInput, PickledLegacyArchiveAsksForAResave) {
  std::vector<testing::TestEntry> entries = {{"serialized_exported_program.json", {'{', '}'}},
                                             {"serialized_state_dict.pt", {0x80, 0x02}},
                                             {"version", {'8', '.', '1'}}};
  testing::WriteOptions plain;
  plain.pytorch_style = false;
  std::string path = write_bytes("legacy.pt2", testing::write_zip(entries, plain).bytes);
  CliResult r = kiln_cli("inspect " + path);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("kiln never unpickles"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Re-save it"), std::string::npos) << r.output;
}

TEST_F(CliBadInput, WrongInputShapeAndDtypeAtRunTime) {
  std::string in_path = (dir_ / "in.safetensors").string();
  std::string out_path = (dir_ / "out.safetensors").string();
  ASSERT_TRUE(write_safetensors(in_path, {{"input.0", Tensor::zeros(DType::Float32, {2, 3, 31, 32})}}).is_ok());
  CliResult r = kiln_cli("run " + kModel + " --inputs " + in_path + " --outputs " + out_path);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("input 'x' (input 0): dimension"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out_path));

  ASSERT_TRUE(write_safetensors(in_path, {{"input.0", Tensor::zeros(DType::Int64, {2, 3, 32, 32})}}).is_ok());
  r = kiln_cli("run " + kModel + " --inputs " + in_path + " --outputs " + out_path);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("expected dtype float32"), std::string::npos) << r.output;
}

TEST_F(CliBadInput, RunWritesOutputsThatMatchPyTorch) {
  std::string out_path = (dir_ / "out.safetensors").string();
  CliResult r = kiln_cli("run " + kModel + " --inputs " + kIo + " --outputs " + out_path);
  ASSERT_EQ(r.code, 0) << r.output;
  auto got = read_safetensors(out_path);
  auto want = read_safetensors(kIo);
  ASSERT_TRUE(got.has_value() && want.has_value());
  const Tensor* g = got->find("output.0");
  const Tensor* w = want->find("output.0");
  ASSERT_TRUE(g && w);
  ASSERT_EQ(g->sizes(), w->sizes());
  for (int64_t i = 0; i < g->numel(); ++i) EXPECT_NEAR(g->value_at(i), w->value_at(i), 1e-4);
}

TEST_F(CliBadInput, MissingFilesAndBadOptions) {
  CliResult r = kiln_cli("check " + (dir_ / "absent.pt2").string() + " " + kIo);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("absent.pt2"), std::string::npos) << r.output;
  r = kiln_cli("check " + kModel + " " + kIo + " --rtol banana");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--rtol"), std::string::npos) << r.output;
  r = kiln_cli("check " + kModel + " " + kIo + " --device tpu");
  EXPECT_EQ(r.code, 2);
  r = kiln_cli("frobnicate");
  EXPECT_EQ(r.code, 2);
}

// --disable-pass: a pass a program can do without is skipped (and the result
// still matches PyTorch); one it needs, or a name that is no pass, is exit 2.
TEST_F(CliBadInput, DisabledPassesAreSkippedOrRefusedByName) {
  CliResult r = kiln_cli("check " + kModel + " " + kIo +
                         " --no-cache --disable-pass fold-batch-norm --disable-pass fuse-elementwise");
  EXPECT_EQ(r.code, 0) << r.output;
  r = kiln_cli("inspect " + kModel + " --no-cache --print-after all --disable-pass fold-batch-norm");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("# IR after fuse-layer-norm\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("# IR after fold-batch-norm\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("batch_norm"), std::string::npos);
  r = kiln_cli("inspect " + kModel + " --no-cache --print-after all --disable-pass fuse-elementwise");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("# IR after fuse-elementwise"), std::string::npos) << r.output;
  r = kiln_cli("inspect " + kModel + " --no-cache --disable-pass functionalize");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("pass 'functionalize' cannot be disabled"), std::string::npos) << r.output;
  r = kiln_cli("inspect " + kModel + " --no-cache --disable-pass frobnicate");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no pass 'frobnicate' to disable"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fuse-gelu"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cpu network passes: fuse-elementwise"), std::string::npos) << r.output;
}

// kiln compile writes a .kiln that check and run accept; the partition is explained.
TEST_F(CliBadInput, CompileThenCheckAndInspectTheKilnFile) {
  const std::string out = (dir_ / "resnet.kiln").string();
  CliResult r = kiln_cli("compile " + kModel + " -o " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("building engine 1/1"), std::string::npos) << r.output;
  r = kiln_cli("check " + out + " " + kIo);
  EXPECT_EQ(r.code, 0) << r.output;
  r = kiln_cli("inspect " + out + " --partition");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("segment 0: engine"), std::string::npos) << r.output;
  // A .kiln built for one device is not silently run on another.
  r = kiln_cli("check " + out + " " + kIo + " --device null");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("compiled for device 'cpu'"), std::string::npos) << r.output;
}

TEST_F(CliBadInput, InspectPartitionExplainsEveryFallbackNode) {
  const std::string model = kDir + "nonzero_middle.pt2";
  CliResult r = kiln_cli("inspect " + model + " --partition");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("nonzero (aten.nonzero.default): output size u0"), std::string::npos) << r.output;
  // Forcing relu out of engines: each relu is listed with that reason.
  r = kiln_cli("inspect " + model + " --partition --fallback-ops relu --min-block-size 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("(aten.relu.default): forced to fallback"), std::string::npos) << r.output;
  r = kiln_cli("compile " + model + " -o " + (dir_ / "x.kiln").string() + " --require-full-compilation");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("nonzero"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "x.kiln"));
  r = kiln_cli("compile " + model + " -o " + (dir_ / "x.kiln").string() + " --min-block-size 0");
  EXPECT_EQ(r.code, 2) << r.output;
  r = kiln_cli("compile " + model + " -o " + (dir_ / "x.kiln").string() + " --fallback-ops frobnicate");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("frobnicate"), std::string::npos) << r.output;
}

// A .kiln file truncated or altered anywhere is refused with exit code 2 and a message.
TEST_F(CliBadInput, TruncatedOrAlteredKilnFileIsRefused) {
  const std::string good = (dir_ / "good.kiln").string();
  ASSERT_EQ(kiln_cli("compile " + kModel + " -o " + good).code, 0);
  const std::vector<uint8_t> bytes = read_bytes(good);
  ASSERT_GT(bytes.size(), 1000u);
  for (size_t cut : {size_t{0}, size_t{7}, size_t{40}, bytes.size() / 3, bytes.size() - 1}) {
    std::vector<uint8_t> b(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    // A file shorter than the magic is not recognised as .kiln and is refused as a .pt2.
    CliResult r = kiln_cli("check " + write_bytes("cut.kiln", b) + " " + kIo);
    EXPECT_EQ(r.code, 2) << "cut at " << cut << ": " << r.output;
    EXPECT_NE(r.output.find("cut.kiln"), std::string::npos) << r.output;
  }
  for (size_t pos : {size_t{9}, size_t{100}, bytes.size() / 2, bytes.size() - 100, bytes.size() - 2}) {
    std::vector<uint8_t> b = bytes;
    b[pos] ^= 0x5a;
    CliResult r = kiln_cli("run " + write_bytes("flip.kiln", b) + " --inputs " + kIo + " --outputs " +
                           (dir_ / "o.safetensors").string());
    EXPECT_EQ(r.code, 2) << "flip at " << pos << ": " << r.output;
    EXPECT_NE(r.output.find("flip.kiln"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(CliShapeAndCache, BadShapeSyntaxIsExitCode2AndTheCacheCountsBuilds) {
  const std::string model = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/resnet_basic_dynbatch.pt2";
  const fs::path dir = fs::temp_directory_path() / ("kiln_cli_cache_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string out = (dir / "m.kiln").string();
  fs::create_directories(dir);
  CliResult bad = kiln_cli("compile " + model + " -o " + out + " --no-cache --shape x:1x3x32x32,2x3x32x32");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("NAME:MIN,OPT,MAX"), std::string::npos) << bad.output;
  const std::string shape = " --shape x:1x3x32x32,2x3x32x32,4x3x32x32";
  const std::string cache = " --cache-dir " + (dir / "cache").string();
  CliResult first = kiln_cli("compile " + model + " -o " + out + shape + cache);
  EXPECT_EQ(first.code, 0) << first.output;
  EXPECT_NE(first.output.find("engines: 1 built, 0 from cache"), std::string::npos) << first.output;
  // The same compile again takes the whole program from the cache.
  CliResult second = kiln_cli("compile " + model + " -o " + out + shape + cache);
  EXPECT_EQ(second.code, 0) << second.output;
  EXPECT_NE(second.output.find("engines: 0 built, 1 from cache (the whole program from the cache)"), std::string::npos)
      << second.output;
  CliResult listing = kiln_cli("inspect --cache " + (dir / "cache").string());
  EXPECT_EQ(listing.code, 0) << listing.output;
  EXPECT_NE(listing.output.find("2 entries (1 engine plans, 1 programs)"), std::string::npos) << listing.output;
  EXPECT_NE(listing.output.find("engine plans: 0 hits, 1 misses; programs: 1 hits, 1 misses"), std::string::npos)
      << listing.output;
  // The saved program keeps the profile's range.
  CliResult info = kiln_cli("inspect " + out);
  EXPECT_NE(info.output.find("[1, 4]"), std::string::npos) << info.output;
  // A second profile is a second engine build (the key holds each profile's
  // ranges); the first profile's engine comes from the cache.
  CliResult two =
      kiln_cli("compile " + model + " -o " + out + shape + " --shape x:8x3x32x32,12x3x32x32,16x3x32x32" + cache);
  EXPECT_EQ(two.code, 0) << two.output;
  EXPECT_NE(two.output.find("engines: 1 built, 1 from cache"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("methods forward, forward@1"), std::string::npos) << two.output;
  fs::remove_all(dir);
}

// A second compile of the same content with the same settings takes the
// whole program from the cache; every setting and the source's content are
// in the key; the program placed from the cache matches PyTorch; a placed
// program written over in place is discarded, not placed again.
TEST(CliProgramCache, SameContentAndSettingsTakeTheWholeProgramAndNothingElseDoes) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_cli_pcache_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string model = (dir / "model.pt2").string(), out = (dir / "m.kiln").string();
  fs::copy_file(kModel, model);
  const std::string cache = " --cache-dir " + (dir / "cache").string();
  const std::string whole = "(the whole program from the cache)";
  auto compile = [&](const std::string& extra) { return kiln_cli("compile " + model + " -o " + out + cache + extra); };
  CliResult first = compile("");
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_EQ(first.output.find(whole), std::string::npos) << first.output;
  CliResult second = compile("");
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_NE(second.output.find("engines: 0 built, 1 from cache " + whole), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("wrote " + out + ": 1 segments (1 engines"), std::string::npos) << second.output;
  CliResult check = kiln_cli("check " + out + " " + kIo);
  EXPECT_EQ(check.code, 0) << check.output;

  for (const std::string setting : {" --min-block-size 3", " --fallback-ops relu", " --require-full-compilation",
                                    " --method other", " --precision fp16", " --no-cache"}) {
    CliResult r = kiln_cli("compile " + model + " -o " + out + (setting == " --no-cache" ? "" : cache) + setting);
    EXPECT_EQ(r.code, 0) << setting << ": " << r.output;
    EXPECT_EQ(r.output.find(whole), std::string::npos) << setting << " took another setting's program: " << r.output;
  }
  CliResult again = compile(" --min-block-size 3");
  EXPECT_NE(again.output.find(whole), std::string::npos) << again.output;

  // Another model's bytes under the same name are another program.
  const std::string other = kDir + "mobilenet_v2";
  fs::copy_file(other + ".pt2", model, fs::copy_options::overwrite_existing);
  CliResult changed = compile("");
  ASSERT_EQ(changed.code, 0) << changed.output;
  EXPECT_EQ(changed.output.find(whole), std::string::npos) << changed.output;
  check = kiln_cli("check " + out + " " + other + ".io.safetensors");
  EXPECT_EQ(check.code, 0) << check.output;

  // The output written over in place (as `cp` does): it shares its file with
  // the cache entry (a hard link: one file system), so the entry changed too,
  // and it is not used again.
  EXPECT_EQ(fs::hard_link_count(out), 2u);
  fs::copy_file(kModel, dir / "unrelated.bin");
  {
    std::ifstream in(dir / "unrelated.bin", std::ios::binary);
    std::ofstream o(out, std::ios::binary | std::ios::in | std::ios::out);
    o << in.rdbuf();
  }
  CliResult after = compile("");
  ASSERT_EQ(after.code, 0) << after.output;
  EXPECT_NE(after.output.find("discarding cached program"), std::string::npos) << after.output;
  EXPECT_EQ(after.output.find(whole), std::string::npos) << after.output;
  check = kiln_cli("check " + out + " " + other + ".io.safetensors");
  EXPECT_EQ(check.code, 0) << check.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// The greedy tokens PyTorch produced for the fixture: the inputs of the steps
// after the prompt, then the argmax of the last step's logits.
std::vector<int64_t> pytorch_greedy_tokens(size_t prompt_len) {
  auto io = read_safetensors(std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/llama_generate.io.safetensors");
  EXPECT_TRUE(io.has_value());
  std::vector<int64_t> tokens;
  int k = 0;
  for (; io.has_value() && io->find("step" + std::to_string(k) + ".input.0"); ++k)
    if (static_cast<size_t>(k) >= prompt_len)
      tokens.push_back(io->find("step" + std::to_string(k) + ".input.0")->item_int());
  const Tensor* last = io.has_value() ? io->find("step" + std::to_string(k - 1) + ".output.0") : nullptr;
  EXPECT_NE(last, nullptr);
  if (last) {
    const int64_t vocab = last->size(2);
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v)
      if (last->value_at(v) > last->value_at(best)) best = v;
    tokens.push_back(best);
  }
  return tokens;
}

TEST(CliGenerate, GreedyTokensMatchPyTorchInBothDialects) {
  const std::vector<int64_t> want = pytorch_greedy_tokens(3);
  ASSERT_GE(want.size(), 16u);
  std::string list;
  for (int64_t t : want) list += (list.empty() ? "" : ",") + std::to_string(t);
  for (const char* model : {"llama_generate.pt2", "llama_generate.aten.pt2"}) {
    CliResult r = kiln_cli("generate " + std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/" + model +
                           " --prompt-ids 7,42,13 --max-new-tokens " + std::to_string(want.size()) + " --no-cache");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("tokens: " + list + "\n"), std::string::npos) << model << "\n" << r.output;
    EXPECT_NE(r.output.find("tokens/s"), std::string::npos) << r.output;
  }
  // Decoding stops at the end-of-sequence token, which is printed.
  CliResult r = kiln_cli("generate " + std::string(KILN_SOURCE_DIR) +
                         "/tests/fixtures/torch2.11/llama_generate.pt2 --prompt-ids 7,42,13 --max-new-tokens 20 "
                         "--eos-id " +
                         std::to_string(want[2]) + " --no-cache");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("tokens: " + std::to_string(want[0]) + "," + std::to_string(want[1]) + "," +
                          std::to_string(want[2]) + "\n"),
            std::string::npos)
      << r.output;
}

TEST(CliGenerate, BadRequestsExitTwoNamingTheProblem) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";
  CliResult r = kiln_cli("generate " + dir + "llama_generate.pt2 --prompt-ids 7,x --max-new-tokens 2 --no-cache");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("'x' is not a token id"), std::string::npos) << r.output;
  r = kiln_cli("generate " + dir + "llama_generate.pt2 --prompt-ids 7,42,13 --max-new-tokens 40 --no-cache");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("hold 32 positions"), std::string::npos) << r.output;
  r = kiln_cli("generate " + dir + "resnet_basic.pt2 --prompt-ids 1 --max-new-tokens 2 --no-cache");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("needs a decoder step"), std::string::npos) << r.output;
  r = kiln_cli("generate " + dir + "llama_generate.pt2 --max-new-tokens 2 --no-cache");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("usage: kiln generate"), std::string::npos) << r.output;
}

// kiln compile A.pt2 B.pt2 --method prefill --method decode: one program;
// inspect lists both methods; generate prefills and decodes with it.
TEST(CliGenerate, PrefillAndDecodeMethodsInOneProgram) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";
  const std::string out =
      (std::filesystem::temp_directory_path() / ("kiln_llm_" + std::to_string(::getpid()) + ".kiln")).string();
  CliResult r = kiln_cli("compile " + dir + "llama_prefill.pt2 " + dir +
                         "llama_generate.pt2 --method prefill --method decode -o " + out + " --no-cache");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("(methods prefill, decode)"), std::string::npos) << r.output;
  r = kiln_cli("inspect " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("methods (2): prefill, decode"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("== method decode"), std::string::npos) << r.output;
  const std::vector<int64_t> want = pytorch_greedy_tokens(3);
  std::string list;
  for (int64_t t : want) list += (list.empty() ? "" : ",") + std::to_string(t);
  r = kiln_cli("generate " + out + " --prompt-ids 7,42,13 --max-new-tokens " + std::to_string(want.size()));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("tokens: " + list + "\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(method prefill)"), std::string::npos) << r.output;
  r = kiln_cli("check " + out + " " + dir + "llama_prefill.io.safetensors --method prefill");
  EXPECT_EQ(r.code, 0) << r.output;
  r = kiln_cli("check " + out + " " + dir + "llama_prefill.io.safetensors --method sideways");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no method 'sideways' (methods: prefill, decode)"), std::string::npos) << r.output;
  r = kiln_cli("compile " + dir + "llama_prefill.pt2 " + dir + "llama_generate.pt2 --method prefill -o " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("2 models need 2 --method names"), std::string::npos) << r.output;
  std::filesystem::remove(out);
}

// A prefill exported with a dynamic prompt length (1..16) and the decode
// step: generate takes a prompt of any length in range in one prefill call,
// a longer one token by token, and either way continues PyTorch's greedy
// sequence from where the prompt cuts it; one build serves every length.
TEST(CliGenerate, APrefillOverARangeTakesEveryPromptLengthInOneCall) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";
  const std::string out =
      (std::filesystem::temp_directory_path() / ("kiln_llm_range_" + std::to_string(::getpid()) + ".kiln")).string();
  CliResult r = kiln_cli("compile " + dir + "llama_prefill_dyn.pt2 " + dir +
                         "llama_generate.pt2 --method prefill --method decode -o " + out + " --no-cache");
  ASSERT_EQ(r.code, 0) << r.output;
  std::vector<int64_t> sequence{7, 42, 13};
  for (int64_t t : pytorch_greedy_tokens(3)) sequence.push_back(t);
  ASSERT_GE(sequence.size(), 22u);
  for (size_t prompt_len : {size_t{1}, size_t{12}, size_t{16}, size_t{20}}) {
    SCOPED_TRACE("prompt of " + std::to_string(prompt_len) + " tokens");
    std::string prompt, rest;
    for (size_t i = 0; i < sequence.size(); ++i)
      (i < prompt_len ? prompt : rest) += ((i == 0 || i == prompt_len) ? "" : ",") + std::to_string(sequence[i]);
    const size_t new_tokens = sequence.size() - prompt_len;
    r = kiln_cli("generate " + out + " --prompt-ids " + prompt + " --max-new-tokens " + std::to_string(new_tokens));
    ASSERT_EQ(r.code, 0) << r.output;
    if (prompt_len > 1) {  // PyTorch's tokens after [7] alone are not recorded
      EXPECT_NE(r.output.find("tokens: " + rest + "\n"), std::string::npos) << r.output;
    }
    EXPECT_NE(r.output.find(prompt_len <= 16 ? "(method prefill)" : "(method decode)"), std::string::npos) << r.output;
  }
  r = kiln_cli("check " + out + " " + dir + "llama_prefill_dyn.io.safetensors --method prefill");
  EXPECT_EQ(r.code, 0) << r.output;
  std::filesystem::remove(out);
}

// Asking for CUDA where it cannot be used: every command that would build or
// run engines stops with exit 2 naming the device and the driver's answer;
// inspect --partition shows the partition CUDA would make and builds nothing.
TEST_F(CliBadInput, CudaWhereItCannotBeUsedIsAnErrorNamingTheDevice) {
  const Status ready = device_ready("cuda");
  if (ready.is_ok() || ready.code() == ErrorCode::kInvalidArgument)
    GTEST_SKIP() << "CUDA is usable here, or this kiln has no CUDA backend";
  const std::string out = (dir_ / "r.kiln").string();
  const std::string llm = kDir + "llama_generate.pt2";
  for (const std::string& args :
       {"compile " + kModel + " -o " + out + " --device cuda", "check " + kModel + " " + kIo + " --device cuda",
        "run " + kModel + " --inputs " + kIo + " --outputs " + (dir_ / "o.safetensors").string() + " --device cuda",
        "bench " + kModel + " --device cuda --iters 1", "inspect " + kModel + " --device cuda",
        "generate " + llm + " --prompt-ids 1,2 --max-new-tokens 2 --device cuda"}) {
    SCOPED_TRACE(args);
    CliResult r = kiln_cli(args);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("device 'cuda' cannot be used on this machine"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(out));
  CliResult r = kiln_cli("inspect " + kModel + " --partition --device cuda");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("partition of "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(1 engine, 0 fallback)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no engine was built: device 'cuda' cannot be used on this machine"), std::string::npos)
      << r.output;
}

// A dynamic size with no maximum cannot size a CUDA engine: the compile
// stops (before any build) naming the input and a range that would build;
// --allow-fallback runs those nodes on the CPU knowingly; --shape builds
// (and, with a GPU, passes kiln check). An encoder and a decoder's prefill,
// their exports' Dim maximum taken away.
TEST_F(CliBadInput, AnUnboundedDynamicSizeOnCudaNamesTheInputAndARange) {
  if (device_ready("cuda").code() == ErrorCode::kInvalidArgument) GTEST_SKIP() << "this kiln has no CUDA backend";
  struct Case {
    std::string model, max, hint, shape;
  };
  for (const Case& c : {Case{"bert_dynseq", "\"max_val\": 32", "--shape input_ids:2x2,2x128,2x2048",
                             " --shape input_ids:2x2,2x16,2x32 --shape attention_mask:2x2,2x16,2x32"},
                        Case{"llama_prefill_dyn", "\"max_val\": 16", "--shape input_ids:1x1,1x128,1x2048",
                             " --shape input_ids:1x1,1x8,1x16"}}) {
    SCOPED_TRACE(c.model);
    auto zip = frontend::ZipArchive::open(kDir + c.model + ".pt2");
    ASSERT_TRUE(zip.has_value());
    std::vector<testing::TestEntry> entries;
    bool edited = false;
    for (const auto& e : zip->entries()) {
      auto bytes = zip->read(e);
      ASSERT_TRUE(bytes.has_value());
      testing::TestEntry te{e.name, {bytes->begin(), bytes->end()}};
      if (e.name.ends_with("models/model.json")) {
        std::string t(te.data.begin(), te.data.end());
        const size_t at = t.find(c.max);
        ASSERT_NE(at, std::string::npos);
        t.replace(at, c.max.size(), "\"max_val\": null");
        te.data.assign(t.begin(), t.end());
        edited = true;
      }
      entries.push_back(std::move(te));
    }
    ASSERT_TRUE(edited);
    const std::string model = write_bytes(c.model + "_unbounded.pt2", testing::write_zip(entries).bytes);
    // Without a usable GPU, inspect --partition decides it the same way, building nothing.
    const bool gpu = device_ready("cuda").is_ok();
    const std::string out = (dir_ / (c.model + ".kiln")).string();
    const std::string cmd =
        gpu ? "compile " + model + " -o " + out + " --device cuda" : "inspect " + model + " --partition --device cuda";
    CliResult r = kiln_cli(cmd);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("has no finite range"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("input 'input_ids'"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.hint), std::string::npos) << r.output;
    r = kiln_cli(cmd + " --allow-fallback");
    EXPECT_EQ(r.code, 0) << r.output;
    if (!gpu) {
      EXPECT_NE(r.output.find("cannot build for its range of sizes"), std::string::npos) << r.output;
    }
    r = kiln_cli(cmd + c.shape);
    EXPECT_EQ(r.code, 0) << r.output;
    if (!gpu) {
      EXPECT_NE(r.output.find("0 fallback)"), std::string::npos) << r.output;
    }
    if (gpu) {
      r = kiln_cli("check " + out + " " + kDir + c.model + ".io.safetensors");
      EXPECT_EQ(r.code, 0) << r.output;
    }
  }
}

// kiln generate with the caches in memory the caller owns, bound under their
// buffer names: after the steps, that memory holds what PyTorch's buffers
// held, under every name the archive gives each (the non-strict export's
// written constants are the registered buffers).
TEST(CliGenerate, BoundCachesHoldPyTorchsBuffersUnderEveryName) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";
  auto io = read_safetensors(dir + "llama_nonstrict.io.safetensors");
  ASSERT_TRUE(io.has_value());
  // The recorded steps' tokens as the prompt: generate runs the same decode steps.
  std::string prompt;
  for (int k = 0;; ++k) {
    const Tensor* t = io->find("step" + std::to_string(k) + ".input.0");
    if (!t) break;
    prompt += (k ? "," : "") + std::to_string(static_cast<int64_t>(t->value_at(0)));
  }
  const std::string saved =
      (std::filesystem::temp_directory_path() / ("kiln_gen_buffers_" + std::to_string(::getpid()) + ".safetensors"))
          .string();
  std::vector<std::string> devices{"cpu"};
  if (device_ready("cuda").is_ok()) devices.push_back("cuda");
  for (const std::string& device : devices) {
    SCOPED_TRACE(device);
    CliResult r =
        kiln_cli("generate " + dir + "llama_nonstrict.pt2 --prompt-ids " + prompt +
                 " --max-new-tokens 1 --bind-buffers --save-buffers " + saved + " --no-cache --device " + device);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("(from the memory bound to them)"), std::string::npos) << r.output;
    auto got = read_safetensors(saved);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    int compared = 0;
    for (const auto& [name, want] : io->tensors) {
      if (!name.starts_with("final.buffer.")) continue;
      const Tensor* g = got->find(name);
      ASSERT_NE(g, nullptr) << name << " is not among the saved buffers";
      ASSERT_EQ(g->numel(), want.numel()) << name;
      for (int64_t i = 0; i < want.numel(); ++i)
        ASSERT_NEAR(g->value_at(i), want.value_at(i), 1e-4 + 1e-3 * std::abs(want.value_at(i))) << name << " at " << i;
      ++compared;
    }
    EXPECT_GE(compared, 6);
    // Both names of the first layer's key cache are there, with one value.
    const Tensor* a = got->find("final.buffer.inner.key_cache_0");
    const Tensor* b = got->find("final.buffer.inner.model.model.layers.0.self_attn.lifted_tensor_2");
    ASSERT_TRUE(a && b);
    EXPECT_EQ(std::memcmp(a->raw_data(), b->raw_data(), a->nbytes()), 0);
    std::filesystem::remove(saved);
  }
}

// `bench --stream` draws request sizes from a program's ranges: a program
// without dynamic sizes, options that do not apply and a seed without a
// stream are refused with exit code 2; a dynamic program's stream runs twice
// and its JSON holds every request's sizes and times.
TEST_F(CliBadInput, BenchStreamNeedsDynamicSizesAndGivesEveryRequest) {
  CliResult r = kiln_cli("bench " + kModel + " --stream 3");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("has none"), std::string::npos) << r.output;
  r = kiln_cli("bench " + kModel + " --seed 4");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--seed is for --stream"), std::string::npos) << r.output;
  const std::string dyn = kDir + "bert_dynseq.pt2";
  r = kiln_cli("bench " + dyn + " --stream 3 --iters 5");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("do not apply"), std::string::npos) << r.output;
  r = kiln_cli("bench " + dyn + " --stream 0");
  EXPECT_EQ(r.code, 2) << r.output;
  const std::string json = (dir_ / "stream.json").string();
  r = kiln_cli("bench " + dyn + " --stream 4 --seed 7 --json " + json);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("second pass p50"), std::string::npos) << r.output;
  std::ifstream f(json);
  std::stringstream text;
  text << f.rdbuf();
  const std::string j = text.str();
  for (const char* key : {"\"first_pass\"", "\"second_pass\"", "\"sizes\"", "\"first_pass_ms\""})
    EXPECT_NE(j.find(key), std::string::npos) << key << " in " << j;
  // The same seed draws the same sizes.
  const std::string again = (dir_ / "again.json").string();
  ASSERT_EQ(kiln_cli("bench " + dyn + " --stream 4 --seed 7 --json " + again).code, 0);
  std::ifstream g(again);
  std::stringstream text2;
  text2 << g.rdbuf();
  auto sizes_of = [](const std::string& s) {
    return s.substr(s.find("\"sizes\""), s.find("]", s.find("\"sizes\"")) - s.find("\"sizes\""));
  };
  EXPECT_EQ(sizes_of(j), sizes_of(text2.str()));
}

// `bench --trace FILE` writes one traced call as a Chrome trace (the call, its
// engine and the engine's steps); it does not apply to a stream.
TEST_F(CliBadInput, BenchTraceWritesAChromeTraceOfOneCall) {
  const std::string trace = (dir_ / "trace.json").string();
  CliResult r = kiln_cli("bench " + kModel + " --iters 2 --warmup 0 --trace " + trace);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("one call"), std::string::npos) << r.output;
  std::ifstream f(trace);
  std::stringstream text;
  text << f.rdbuf();
  for (const char* key : {"\"traceEvents\"", "\"call forward\"", "\"engine 0\"", "\"ph\": \"X\""})
    EXPECT_NE(text.str().find(key), std::string::npos) << key;
  r = kiln_cli("bench " + kDir + "bert_dynseq.pt2 --stream 2 --trace " + trace);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("does not apply to --stream"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kiln
