// Every way a model file can be wrong has a named fault (kiln::FileFault).
// Each test here takes a real file (an exported .pt2, its PyTorch I/O
// .safetensors, a .kiln compiled from it), breaks it one way, and checks that
// loading it fails with that fault and a message naming the file and the place.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/crc32.h"
#include "base/safetensors.h"
#include "base/section_file.h"
#include "frontend/pt2_loader.h"
#include "frontend/zip_reader.h"
#include "kiln/kiln.h"
#include "program/engine_cache.h"
#include "program/kiln_file.h"
#include "support/zip_writer.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

const std::string kFixtures = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";
const std::string kModel = "mlp_bf16";

Bytes read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

std::shared_ptr<Storage> storage_of(const Bytes& b) {
  auto s = Storage::allocate(b.size());
  if (!b.empty()) std::memcpy(s->data(), b.data(), b.size());
  return s;
}

std::string text_of(std::span<const uint8_t> b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }
Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }

// Checks the fault, that the message names `where`, and that to_string() says the fault.
void expect_fault(const Status& s, FileFault fault, const std::string& where) {
  ASSERT_FALSE(s.is_ok()) << "a broken file was accepted";
  EXPECT_EQ(s.code(), ErrorCode::kFormat) << s.to_string();
  EXPECT_EQ(s.fault(), fault) << "expected '" << file_fault_name(fault) << "', got '" << file_fault_name(s.fault())
                              << "': " << s.to_string();
  EXPECT_NE(s.message().find(where), std::string::npos) << "message does not name '" << where << "': " << s.message();
  EXPECT_NE(s.to_string().find(file_fault_name(fault)), std::string::npos) << s.to_string();
}

// ---- .pt2 archives: the real export, with its entries repacked after an edit.

struct Pt2 {
  std::vector<testing::TestEntry> entries;

  static Pt2 real() {
    Pt2 p;
    auto zip = frontend::ZipArchive::open(kFixtures + kModel + ".pt2");
    EXPECT_TRUE(zip.has_value()) << zip.status().message();
    for (const frontend::ZipEntry& e : zip->entries()) {
      auto data = zip->read(e);
      EXPECT_TRUE(data.has_value());
      p.entries.push_back({e.name, Bytes(data->begin(), data->end())});
    }
    return p;
  }
  Bytes& entry(const std::string& rel) {
    for (auto& e : entries)
      if (e.name == kModel + "/" + rel) return e.data;
    ADD_FAILURE() << "no entry " << rel;
    return entries.front().data;
  }
  // Replaces the first `from` in entry `rel` with `to`.
  void edit(const std::string& rel, const std::string& from, const std::string& to) {
    std::string t = text_of(entry(rel));
    const size_t at = t.find(from);
    ASSERT_NE(at, std::string::npos) << rel << " has no '" << from << "'";
    t.replace(at, from.size(), to);
    entry(rel) = bytes_of(t);
  }
  Bytes bytes() const { return testing::write_zip(entries).bytes; }
  Status load() const { return frontend::parse_pt2(storage_of(bytes()), "broken.pt2").status(); }
};

TEST(FileFaults, TheRealFilesLoad) {
  EXPECT_TRUE(Pt2::real().load().is_ok()) << Pt2::real().load().to_string();
  EXPECT_TRUE(read_safetensors(kFixtures + kModel + ".io.safetensors").has_value());
}

// A bool or number argument export specialized on (constant_input) is not an
// input of the program; a constant graph input without its spec is an error.
TEST(FileFaults, ConstantInputsAreNotProgramInputs) {
  auto real = frontend::parse_pt2(storage_of(Pt2::real().bytes()), "real.pt2");
  ASSERT_TRUE(real.has_value()) << real.status().message();
  Pt2 p = Pt2::real();
  p.edit("models/model.json", R"({"as_tensor": {"name": "x"}}])", R"({"as_tensor": {"name": "x"}}, {"as_bool": false}])");
  Pt2 unpaired = p;
  p.edit("models/model.json", R"({"user_input": {"arg": {"as_tensor": {"name": "x"}}}})",
         R"({"user_input": {"arg": {"as_tensor": {"name": "x"}}}}, {"constant_input": {"name": "flag", "value": {"as_bool": false}}})");
  auto m = frontend::parse_pt2(storage_of(p.bytes()), "constant.pt2");
  ASSERT_TRUE(m.has_value()) << m.status().message();
  ASSERT_EQ(m->graph.inputs().size(), real->graph.inputs().size());
  ASSERT_EQ(m->input_specs.size(), real->input_specs.size());
  for (size_t i = 0; i < m->graph.inputs().size(); ++i)
    EXPECT_EQ(m->graph.inputs()[i]->name, real->graph.inputs()[i]->name);
  // The graph input without its constant_input spec: the counts disagree.
  const Status st = unpaired.load();
  EXPECT_EQ(st.fault(), FileFault::kMalformed) << st.to_string();
  EXPECT_NE(st.message().find("input_specs has 9 entries for 10 graph inputs"), std::string::npos) << st.message();
}

TEST(FileFaults, BadMagic) {
  // A .pt2 whose end record is gone is not a zip archive.
  Bytes b = read_bytes(kFixtures + kModel + ".pt2");
  for (size_t i = b.size() - 22; i < b.size(); ++i) b[i] = 0;
  expect_fault(frontend::parse_pt2(storage_of(b), "broken.pt2").status(), FileFault::kBadMagic, "zip 'broken.pt2'");
  // A zip that is not a torch.export archive.
  Pt2 p = Pt2::real();
  p.edit("archive_format", "pt2", "xyz");
  expect_fault(p.load(), FileFault::kBadMagic, "archive_format");
}

TEST(FileFaults, BadVersion) {
  Pt2 p = Pt2::real();
  p.edit("archive_version", "0", "7");
  expect_fault(p.load(), FileFault::kBadVersion, "archive_version");
}

TEST(FileFaults, SchemaVersionUnsupported) {
  Pt2 p = Pt2::real();
  p.edit("models/model.json", R"("schema_version": {"major": 8)", R"("schema_version": {"major": 5)");
  expect_fault(p.load(), FileFault::kSchemaVersion, "schema version 5");
}

TEST(FileFaults, DanglingValueReference) {
  Pt2 p = Pt2::real();
  p.edit("models/model.json", R"("arg": {"as_tensor": {"name": "p_norm_weight"}})",
         R"("arg": {"as_tensor": {"name": "p_nowhere"}})");
  expect_fault(p.load(), FileFault::kDanglingReference, "undefined value 'p_nowhere'");
}

TEST(FileFaults, DuplicateValueName) {
  Pt2 p = Pt2::real();
  p.edit("models/model.json", R"("outputs": [{"as_tensor": {"name": "layer_norm"}}])",
         R"("outputs": [{"as_tensor": {"name": "x"}}])");
  expect_fault(p.load(), FileFault::kDuplicateName, "value 'x' is defined twice");
}

TEST(FileFaults, DuplicateEntryName) {
  Pt2 p = Pt2::real();
  p.entries.push_back(p.entries.front());
  expect_fault(p.load(), FileFault::kDuplicateName, "appears twice");
}

TEST(FileFaults, UnknownDtypeCode) {
  Pt2 p = Pt2::real();
  p.edit("data/weights/model_weights_config.json", R"("dtype": 13)", R"("dtype": 99)");
  expect_fault(p.load(), FileFault::kUnknownDtype, "weight 'norm.weight'");
}

TEST(FileFaults, PathEscapingTheArchiveRoot) {
  Pt2 p = Pt2::real();
  p.entries.push_back({kModel + "/../../etc/evil", bytes_of("x")});
  expect_fault(p.load(), FileFault::kPathEscape, "unsafe entry name");
  Pt2 q = Pt2::real();
  q.edit("data/weights/model_weights_config.json", R"("path_name": "weight_0")", R"("path_name": "../weight_0")");
  expect_fault(q.load(), FileFault::kPathEscape, "escapes the");
}

TEST(FileFaults, ChecksumMismatchInAnEntry) {
  // Flip one byte of a weight's data in the real file: the entry's CRC-32 no longer matches.
  Bytes b = read_bytes(kFixtures + kModel + ".pt2");
  auto zip = frontend::ZipArchive::from_bytes(storage_of(b), "x");
  ASSERT_TRUE(zip.has_value());
  const frontend::ZipEntry* e = zip->find(kModel + "/data/weights/weight_2");
  ASSERT_NE(e, nullptr);
  b[e->data_offset + 100] ^= 0x40;
  expect_fault(frontend::parse_pt2(storage_of(b), "broken.pt2").status(), FileFault::kChecksumMismatch,
               "data/weights/weight_2");
}

TEST(FileFaults, ElementCountNotMatchingBytes) {
  // A weight blob one byte short of whole bf16 elements.
  Pt2 p = Pt2::real();
  p.entry("data/weights/weight_2").pop_back();
  expect_fault(p.load(), FileFault::kSizeMismatch, "not a whole number of bfloat16 elements");
}

TEST(FileFaults, OverlappingZipEntries) {
  // The first entry's sizes grown by 200 bytes: its data now runs over the second entry's local header.
  Pt2 p = Pt2::real();
  testing::ZipImage img = testing::write_zip(p.entries);
  ASSERT_GE(img.central_offsets.size(), 2u);
  const uint64_t rec = img.central_offsets[0];
  uint32_t size = 0;
  std::memcpy(&size, &img.bytes[rec + 20], 4);
  testing::set32(img.bytes, rec + 20, size + 200);
  testing::set32(img.bytes, rec + 24, size + 200);
  expect_fault(frontend::ZipArchive::from_bytes(storage_of(img.bytes), "broken.pt2").status(), FileFault::kOverlap,
               "overlaps entry '" + p.entries[0].name + "'");
}

TEST(FileFaults, OffsetPastTheEndOfTheArchive) {
  Pt2 p = Pt2::real();
  testing::ZipImage img = testing::write_zip(p.entries);
  testing::set32(img.bytes, img.central_offsets[0] + 42, static_cast<uint32_t>(img.bytes.size() + 100));
  expect_fault(frontend::ZipArchive::from_bytes(storage_of(img.bytes), "broken.pt2").status(),
               FileFault::kOutOfBounds, "does not lie before the central directory");
}

// ---- PyTorch's I/O .safetensors: a header edit keeps the data section as it was.

struct Safetensors {
  std::string header;
  Bytes data;

  static Safetensors real() {
    Bytes b = read_bytes(kFixtures + kModel + ".io.safetensors");
    uint64_t n = 0;
    std::memcpy(&n, b.data(), 8);
    Safetensors s;
    s.header.assign(reinterpret_cast<const char*>(b.data()) + 8, n);
    s.data.assign(b.begin() + 8 + static_cast<std::ptrdiff_t>(n), b.end());
    return s;
  }
  void edit(const std::string& from, const std::string& to) {
    const size_t at = header.find(from);
    ASSERT_NE(at, std::string::npos) << "header has no '" << from << "'";
    header.replace(at, from.size(), to);
  }
  Bytes bytes() const {
    Bytes b(8);
    const uint64_t n = header.size();
    std::memcpy(b.data(), &n, 8);
    b.insert(b.end(), header.begin(), header.end());
    b.insert(b.end(), data.begin(), data.end());
    return b;
  }
  Status load() const { return base::parse_safetensors(storage_of(bytes()), "broken.safetensors").status(); }
};

// The first tensor's JSON entry in the header, e.g. {"dtype":"BF16","shape":[4,32],"data_offsets":[0,256]}.
std::string first_entry(const std::string& header) {
  const size_t a = header.find("{\"dtype\"");
  return header.substr(a, header.find('}', a) - a + 1);
}

TEST(FileFaults, TruncatedFile) {
  Bytes b = read_bytes(kFixtures + kModel + ".io.safetensors");
  b.resize(5);
  expect_fault(base::parse_safetensors(storage_of(b), "cut.safetensors").status(), FileFault::kTruncated,
               "cut.safetensors");
}

TEST(FileFaults, HeaderLengthPastTheEnd) {
  Bytes b = read_bytes(kFixtures + kModel + ".io.safetensors");
  const uint64_t n = b.size();
  std::memcpy(b.data(), &n, 8);
  expect_fault(base::parse_safetensors(storage_of(b), "broken.safetensors").status(), FileFault::kOutOfBounds,
               "runs past the end of the file");
}

TEST(FileFaults, TensorDataPastTheEnd) {
  Safetensors s = Safetensors::real();
  const std::string e = first_entry(s.header);
  std::string moved = e;
  const size_t at = moved.find("\"data_offsets\"");
  moved = moved.substr(0, at) + "\"data_offsets\":[" + std::to_string(s.data.size()) + "," +
          std::to_string(s.data.size() * 2) + "]}";
  s.edit(e, moved);
  Status st = s.load();
  ASSERT_FALSE(st.is_ok());
  // Moved past the end with the same length, or its length changed too: either is named.
  EXPECT_EQ(st.fault(), FileFault::kOutOfBounds) << st.to_string();
  s = Safetensors::real();
  s.data.resize(s.data.size() / 2);
  expect_fault(s.load(), FileFault::kOutOfBounds, "run past the end of the data section");
}

TEST(FileFaults, OverlappingTensorData) {
  // Two tensors of the same size pointed at the same bytes.
  Safetensors s = Safetensors::real();
  auto f = base::parse_safetensors(storage_of(s.bytes()), "real");
  ASSERT_TRUE(f.has_value());
  const std::string e = first_entry(s.header);
  const std::string offsets = e.substr(e.find("\"data_offsets\""));
  const size_t second = s.header.find("{\"dtype\"", s.header.find(e) + e.size());
  ASSERT_NE(second, std::string::npos);
  const std::string e2 = s.header.substr(second, s.header.find('}', second) - second + 1);
  // Give the second tensor the first one's dtype, shape and bytes.
  s.edit(e2, e);
  expect_fault(s.load(), FileFault::kOverlap, "overlap those of tensor");
}

TEST(FileFaults, ShapeWhoseProductOverflows) {
  Safetensors s = Safetensors::real();
  const std::string e = first_entry(s.header);
  const size_t a = e.find("\"shape\"");
  const size_t b = e.find(']', a);
  std::string big = e;
  big.replace(a, b - a + 1, "\"shape\":[4294967296,4294967296,4294967296]");
  s.edit(e, big);
  expect_fault(s.load(), FileFault::kSizeOverflow, "too many elements");
}

TEST(FileFaults, ShapeNotMatchingBytes) {
  Safetensors s = Safetensors::real();
  const std::string e = first_entry(s.header);
  const size_t a = e.find("\"shape\"");
  const size_t b = e.find(']', a);
  std::string other = e;
  other.replace(a, b - a + 1, "\"shape\":[3]");
  s.edit(e, other);
  expect_fault(s.load(), FileFault::kSizeMismatch, "needs");
}

TEST(FileFaults, UnknownDtypeName) {
  Safetensors s = Safetensors::real();
  const std::string e = first_entry(s.header);
  std::string other = e;
  const size_t a = other.find(':');
  other.replace(a + 1, other.find(',') - a - 1, "\"Q7\"");
  s.edit(e, other);
  expect_fault(s.load(), FileFault::kUnknownDtype, "unknown dtype \"Q7\"");
}

// ---- .kiln programs compiled from the real export, sections rewritten.

class KilnFileFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    // A directory per test: the engine cache of a directory is kept in memory for the process.
    static int count = 0;
    dir_ = fs::temp_directory_path() /
           ("kiln_faults_" + std::to_string(::getpid()) + "_" + std::to_string(count++));
    fs::create_directories(dir_);
    LoadOptions o;
    o.compile.device = "cpu";
    o.compile.cache_dir = (dir_ / "cache").string();
    auto p = compile(kFixtures + kModel + ".pt2", o);
    ASSERT_TRUE(p.has_value()) << p.status().message();
    path_ = (dir_ / "m.kiln").string();
    ASSERT_TRUE((*p)->save(path_).is_ok());
    bytes_ = read_bytes(path_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Status load(const Bytes& b) const { return program::parse_program(b, nullptr, "broken.kiln").status(); }

  // The file with one section's bytes replaced (every checksum rewritten, so only the edit is wrong).
  Bytes with_section(const std::string& name, const std::function<void(Bytes&)>& change) const {
    auto f = SectionFile::parse(bytes_, program::kProgramMagic, program::kProgramVersion, "m.kiln");
    EXPECT_TRUE(f.has_value());
    SectionFileWriter w(program::kProgramMagic, program::kProgramVersion);
    for (const std::string& n : f->names()) {
      auto s = f->section(n);
      Bytes b(s->begin(), s->end());
      if (n == name) change(b);
      EXPECT_TRUE(w.add(n, std::move(b)).is_ok());
    }
    return w.finish();
  }
  static void replace_text(Bytes& b, const std::string& from, const std::string& to) {
    std::string t = text_of(b);
    const size_t at = t.find(from);
    ASSERT_NE(at, std::string::npos) << "no '" << from << "'";
    t.replace(at, from.size(), to);
    b = bytes_of(t);
  }

  fs::path dir_;
  std::string path_;
  Bytes bytes_;
};

TEST_F(KilnFileFaults, TheRealFileLoads) { EXPECT_TRUE(load(bytes_).is_ok()) << load(bytes_).to_string(); }

TEST_F(KilnFileFaults, BadMagicAndVersion) {
  Bytes b = bytes_;
  std::memcpy(b.data(), "KILNPLAN", 8);
  expect_fault(load(b), FileFault::kBadMagic, "not a kiln program file");
  b = bytes_;
  b[8] = 99;  // the format version
  expect_fault(load(b), FileFault::kBadVersion, "newer kiln");
}

TEST_F(KilnFileFaults, TruncatedFile) {
  Bytes b = bytes_;
  b.resize(b.size() * 2 / 3);
  expect_fault(load(b), FileFault::kTruncated, "truncated");
}

TEST_F(KilnFileFaults, ChecksumMismatch) {
  Bytes b = bytes_;
  b[b.size() / 2] ^= 0x01;
  expect_fault(load(b), FileFault::kChecksumMismatch, "CRC-32");
}

TEST_F(KilnFileFaults, UnknownOpInTheGraph) {
  Bytes b = with_section("graph", [](Bytes& g) { replace_text(g, "aten.layer_norm", "aten.layer_nurm"); });
  expect_fault(load(b), FileFault::kUnknownOp, "unknown op");
}

TEST_F(KilnFileFaults, DanglingReferences) {
  // A weight the graph takes, missing from the weight table.
  Bytes b = with_section("program", [](Bytes& j) { replace_text(j, "\"name\": \"norm.weight\"", "\"name\": \"nope\""); });
  expect_fault(load(b), FileFault::kDanglingReference, "weight 'norm.weight' is missing");
  // A segment naming a plan section that is not there.
  b = with_section("program", [](Bytes& j) { replace_text(j, "\"plan\": \"plan.0\"", "\"plan\": \"plan.9\""); });
  expect_fault(load(b), FileFault::kDanglingReference, "plan.9");
}

TEST_F(KilnFileFaults, DuplicateWeight) {
  Bytes b = with_section("program", [](Bytes& j) { replace_text(j, "\"name\": \"norm.bias\"", "\"name\": \"norm.weight\""); });
  expect_fault(load(b), FileFault::kDuplicateName, "listed twice");
}

TEST_F(KilnFileFaults, WeightBytesOutsideTheirSection) {
  Bytes b = with_section("program", [](Bytes& j) { replace_text(j, "\"offset\": 0,", "\"offset\": 1048576,"); });
  expect_fault(load(b), FileFault::kOutOfBounds, "lie outside the weights section");
}

TEST_F(KilnFileFaults, WeightSizesAndBytesDisagree) {
  Bytes b = with_section("program", [](Bytes& j) { replace_text(j, "\"nbytes\": 64,", "\"nbytes\": 66,"); });
  expect_fault(load(b), FileFault::kSizeMismatch, "do not hold its sizes");
  b = with_section("program", [](Bytes& j) { replace_text(j, "\"sizes\": [", "\"sizes\": [4294967296, 4294967296, 4294967296,"); });
  expect_fault(load(b), FileFault::kSizeOverflow, "sizes overflow");
}

TEST_F(KilnFileFaults, UnknownWeightDtype) {
  Bytes b = with_section("program", [](Bytes& j) { replace_text(j, "\"dtype\": \"bfloat16\"", "\"dtype\": \"bfloat17\""); });
  expect_fault(load(b), FileFault::kUnknownDtype, "unknown dtype 'bfloat17'");
}

TEST_F(KilnFileFaults, OverlappingSections) {
  // Section table entry 1 given entry 0's place, size and CRC-32, and the
  // whole-file CRC-32 rewritten: each section alone is sound, but they share bytes.
  constexpr size_t kHeader = 64, kEntry = 96, kCrcAt = 68, kTrailer = 16;
  Bytes b = bytes_;
  std::memcpy(&b[kHeader + kEntry + kCrcAt], &b[kHeader + kCrcAt], 4 + 8 + 8);
  const size_t crc_at = b.size() - kTrailer + 12;
  const uint32_t crc = crc32(std::span<const uint8_t>(b.data(), crc_at));
  std::memcpy(&b[crc_at], &crc, 4);
  expect_fault(load(b), FileFault::kOverlap, "overlaps section");
}

TEST_F(KilnFileFaults, CacheEntries) {
  // The engine cache entry written while compiling, read back with its key.
  std::string entry;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "cache"))
    if (e.is_regular_file() && text_of(read_bytes(e.path().string())).rfind("KILNCACH", 0) == 0) entry = e.path();
  ASSERT_FALSE(entry.empty()) << "compiling wrote no cache entry";
  const Bytes real = read_bytes(entry);
  auto f = SectionFile::parse(real, "KILNCACH", 1, "entry");
  ASSERT_TRUE(f.has_value()) << f.status().message();
  auto key = f->section("key");
  ASSERT_TRUE(key.has_value());
  const std::string key_material = text_of(*key);
  EXPECT_TRUE(program::parse_cache_entry(real, key_material, "entry").has_value());

  Bytes cut = real;
  cut.resize(cut.size() - 100);
  expect_fault(program::parse_cache_entry(cut, key_material, "entry").status(), FileFault::kTruncated, "entry");
  Bytes flipped = real;
  flipped[flipped.size() / 2] ^= 0x10;
  expect_fault(program::parse_cache_entry(flipped, key_material, "entry").status(), FileFault::kChecksumMismatch,
               "CRC-32");
  SectionFileWriter w("KILNCACH", 1);
  ASSERT_TRUE(w.add("key", *key).is_ok());
  expect_fault(program::parse_cache_entry(w.finish(), key_material, "entry").status(), FileFault::kDanglingReference,
               "missing key or plan section");
}

}  // namespace
}  // namespace kiln
