#include "base/section_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "base/crc32.h"
#include "base/mapped_file.h"

namespace kiln {
namespace {

constexpr std::string_view kProg = "KILNPROG";
constexpr std::string_view kPlan = "KILNPLAN";

// Byte offsets of the layout documented in section_file.h, written out again
// here so that a change to the format shows up as a failing test.
constexpr size_t kHeaderSize = 64;
constexpr size_t kEntrySize = 96;
constexpr size_t kTrailerSize = 16;
constexpr size_t kCountAt = 12;
constexpr size_t kFileSizeAt = 16;
constexpr size_t kEntryNameLengthAt = 64;
constexpr size_t kEntryCrcAt = 68;
constexpr size_t kEntryOffsetAt = 72;
constexpr size_t kEntrySizeAt = 80;

std::vector<uint8_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }
std::string as_string(std::span<const uint8_t> s) { return {s.begin(), s.end()}; }

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}

uint32_t get_u32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | b[at + i];
  return v;
}
uint64_t get_u64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[at + i];
  return v;
}
void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

size_t entry_at(size_t index) { return kHeaderSize + kEntrySize * index; }

// Makes an edited file's checksums agree with its edited contents, so that a
// test reaches the structural checks behind them: every table entry that lies
// in bounds gets its section's CRC-32, and the trailer the file's CRC-32.
void reseal(std::vector<uint8_t>& b) {
  const uint64_t count = get_u32(b, kCountAt);
  const uint64_t data_end = b.size() - kTrailerSize;
  for (uint64_t i = 0; i < count && entry_at(i) + kEntrySize <= data_end; ++i) {
    const size_t e = entry_at(i);
    const uint64_t offset = get_u64(b, e + kEntryOffsetAt);
    const uint64_t size = get_u64(b, e + kEntrySizeAt);
    if (offset <= data_end && size <= data_end - offset)
      put_u32(b, e + kEntryCrcAt, crc32(std::span<const uint8_t>(b).subspan(offset, size)));
  }
  put_u32(b, b.size() - 4, crc32(std::span<const uint8_t>(b).first(b.size() - 4)));
}

// Three sections, one of them empty, added out of name order.
std::vector<uint8_t> small_file(std::string_view magic = kProg, uint32_t version = 1) {
  SectionFileWriter w(magic, version);
  EXPECT_TRUE(w.add("graph", bytes_of("{\"nodes\":[]}")).is_ok());
  EXPECT_TRUE(w.add("empty", std::vector<uint8_t>{}).is_ok());
  EXPECT_TRUE(w.add("weights", pattern(100, 5)).is_ok());
  return w.finish();
}

Expected<SectionFile> parse(const std::vector<uint8_t>& b, uint32_t max_version = 1) {
  return SectionFile::parse(b, kProg, max_version, "model.kiln");
}

void expect_error(const Status& s, ErrorCode code, const std::string& needle) {
  ASSERT_FALSE(s.is_ok()) << "expected an error mentioning '" << needle << "'";
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
}

void expect_format_error(const std::vector<uint8_t>& b, const std::string& needle) {
  auto f = parse(b);
  expect_error(f.status(), ErrorCode::kFormat, needle);
  if (!f) {
    EXPECT_EQ(f.status().message().rfind("model.kiln: ", 0), 0u) << f.status().to_string();
  }
}

// ---- well-formed files ---------------------------------------------------------

TEST(SectionFile, RoundTripPreservesNamesOrderBytesAndAlignment) {
  const std::vector<uint8_t> meta = bytes_of("abc");
  const std::vector<uint8_t> weights = pattern(1000, 3);
  SectionFileWriter w(kProg, 1);
  ASSERT_TRUE(w.add("weights", weights).is_ok());
  ASSERT_TRUE(w.add("empty", std::vector<uint8_t>{}).is_ok());
  ASSERT_TRUE(w.add("meta", std::span<const uint8_t>(meta)).is_ok());
  ASSERT_TRUE(w.add("a name with spaces", pattern(65, 9)).is_ok());
  const std::vector<uint8_t> b = w.finish();

  auto f = parse(b);
  ASSERT_TRUE(f) << f.status().to_string();
  EXPECT_EQ(f->version(), 1u);
  EXPECT_EQ(f->names(), (std::vector<std::string>{"weights", "empty", "meta", "a name with spaces"}));
  EXPECT_TRUE(f->has("meta"));
  EXPECT_FALSE(f->has("met"));
  EXPECT_FALSE(f->has("metaa"));

  const std::vector<std::pair<std::string, std::vector<uint8_t>>> expected = {
      {"weights", weights}, {"empty", {}}, {"meta", meta}, {"a name with spaces", pattern(65, 9)}};
  for (const auto& [name, content] : expected) {
    auto s = f->section(name);
    ASSERT_TRUE(s) << s.status().to_string();
    EXPECT_EQ(as_string(*s), as_string(content)) << name;
    // A view into the buffer, at a 64-byte aligned file offset.
    const auto offset = static_cast<size_t>(s->data() - b.data());
    EXPECT_LE(offset + s->size(), b.size()) << name;
    EXPECT_EQ(offset % 64, 0u) << name;
  }
  EXPECT_EQ(b.size(), get_u64(b, kFileSizeAt));
}

TEST(SectionFile, LayoutIsTheDocumentedOne) {
  const std::vector<uint8_t> b = small_file();
  // Header, three entries (64 + 288 = 352), sections at 384 (12 bytes), 448
  // (empty) and 448 (100 bytes), trailer at 548.
  ASSERT_EQ(b.size(), 548u + kTrailerSize);
  EXPECT_EQ(as_string(std::span(b).first(8)), "KILNPROG");
  EXPECT_EQ(get_u32(b, 8), 1u);
  EXPECT_EQ(get_u32(b, kCountAt), 3u);
  EXPECT_EQ(as_string(std::span(b).subspan(entry_at(0), 5)), "graph");
  EXPECT_EQ(get_u32(b, entry_at(0) + kEntryNameLengthAt), 5u);
  EXPECT_EQ(get_u64(b, entry_at(0) + kEntryOffsetAt), 384u);
  EXPECT_EQ(get_u64(b, entry_at(0) + kEntrySizeAt), 12u);
  EXPECT_EQ(get_u32(b, entry_at(0) + kEntryCrcAt), crc32(bytes_of("{\"nodes\":[]}")));
  EXPECT_EQ(get_u64(b, entry_at(1) + kEntryOffsetAt), 448u);
  EXPECT_EQ(get_u64(b, entry_at(1) + kEntrySizeAt), 0u);
  EXPECT_EQ(get_u64(b, entry_at(2) + kEntryOffsetAt), 448u);
  EXPECT_EQ(as_string(std::span(b).subspan(548, 8)), "KILNPROG");
  EXPECT_EQ(get_u32(b, b.size() - 4), crc32(std::span(b).first(b.size() - 4)));
}

TEST(SectionFile, OutputIsDeterministic) {
  EXPECT_EQ(small_file(), small_file());
  SectionFileWriter w(kProg, 1);
  ASSERT_TRUE(w.add("x", pattern(333, 1)).is_ok());
  EXPECT_EQ(w.finish(), w.finish());
  // The same sections in another order are another file.
  SectionFileWriter a(kProg, 1), b(kProg, 1);
  ASSERT_TRUE(a.add("p", bytes_of("1")).is_ok());
  ASSERT_TRUE(a.add("q", bytes_of("2")).is_ok());
  ASSERT_TRUE(b.add("q", bytes_of("2")).is_ok());
  ASSERT_TRUE(b.add("p", bytes_of("1")).is_ok());
  EXPECT_NE(a.finish(), b.finish());
}

TEST(SectionFile, NoSections) {
  const std::vector<uint8_t> b = SectionFileWriter(kProg, 1).finish();
  EXPECT_EQ(b.size(), kHeaderSize + kTrailerSize);
  auto f = parse(b);
  ASSERT_TRUE(f) << f.status().to_string();
  EXPECT_TRUE(f->names().empty());
  expect_error(f->section("x").status(), ErrorCode::kNotFound, "no section 'x'");
}

TEST(SectionFile, MissingSectionIsNotFoundNamingSectionAndFile) {
  const std::vector<uint8_t> b = small_file();
  auto f = SectionFile::parse(b, kProg, 1, "engine plan for segment 2");
  ASSERT_TRUE(f) << f.status().to_string();
  auto s = f->section("constants");
  expect_error(s.status(), ErrorCode::kNotFound, "engine plan for segment 2: no section 'constants'");
  EXPECT_NE(s.status().message().find("graph, empty, weights"), std::string::npos) << s.status().to_string();
}

TEST(SectionFile, OlderVersionsAreRead) {
  const std::vector<uint8_t> b = small_file(kProg, 2);
  auto f = parse(b, 3);
  ASSERT_TRUE(f) << f.status().to_string();
  EXPECT_EQ(f->version(), 2u);
}

// ---- malformed files -------------------------------------------------------------

TEST(SectionFile, EveryTruncationIsRefused) {
  const std::vector<uint8_t> b = small_file();
  for (size_t len = 0; len < b.size(); ++len) {
    const std::vector<uint8_t> cut(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(len));
    auto f = parse(cut);
    ASSERT_FALSE(f) << "accepted a file cut to " << len << " bytes";
    EXPECT_EQ(f.status().code(), ErrorCode::kFormat) << len << ": " << f.status().to_string();
  }
}

TEST(SectionFile, EveryFlippedByteIsRefused) {
  const std::vector<uint8_t> b = small_file();
  for (size_t pos = 0; pos < b.size(); ++pos) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
      std::vector<uint8_t> bad = b;
      bad[pos] ^= mask;
      auto f = parse(bad);
      ASSERT_FALSE(f) << "accepted a file with byte " << pos << " xor " << int{mask};
      // Every flip is a format error; only one in the version field reads as a bad version.
      const bool in_version = pos >= 8 && pos < 12;
      EXPECT_EQ(f.status().code(), ErrorCode::kFormat) << pos << ": " << f.status().to_string();
      if (f.status().fault() == FileFault::kBadVersion) {
        EXPECT_TRUE(in_version) << pos << ": " << f.status().to_string();
      }
    }
  }
}

TEST(SectionFile, WrongMagicSaysWhatTheFileIsNot) {
  const std::vector<uint8_t> plan = small_file(kPlan);
  auto f = parse(plan);
  expect_error(f.status(), ErrorCode::kFormat, "model.kiln: not a kiln program file (magic 'KILNPLAN'");
  expect_error(f.status(), ErrorCode::kFormat, "it is a kiln engine plan");

  auto g = SectionFile::parse(small_file(kProg), kPlan, 1, "plan.bin");
  expect_error(g.status(), ErrorCode::kFormat, "plan.bin: not a kiln engine plan");

  std::vector<uint8_t> zip = pattern(200, 1);
  zip[0] = 'P', zip[1] = 'K', zip[2] = 3, zip[3] = 4;
  expect_error(parse(zip).status(), ErrorCode::kFormat, "zip archive");
  // A short file with the wrong magic is still "not a ...", not "too small".
  expect_error(parse(bytes_of("GIF89a-x")).status(), ErrorCode::kFormat, "not a kiln program file");
  expect_error(parse(bytes_of("KILNPROG")).status(), ErrorCode::kFormat, "too small");
}

TEST(SectionFile, NewerVersionNeedsNewerKiln) {
  const std::vector<uint8_t> b = small_file(kProg, 3);
  auto f = parse(b, 2);
  expect_error(f.status(), ErrorCode::kFormat, "newer kiln");
  expect_error(f.status(), ErrorCode::kFormat, "model.kiln");
  expect_error(f.status(), ErrorCode::kFormat, "version 3");
  EXPECT_EQ(f.status().fault(), FileFault::kBadVersion);
}

TEST(SectionFile, VersionZeroIsRefused) {
  std::vector<uint8_t> b = small_file();
  put_u32(b, 8, 0);
  reseal(b);
  expect_format_error(b, "format version 0");
}

TEST(SectionFile, DeclaredSizeMustMatch) {
  std::vector<uint8_t> b = small_file();
  b.push_back(0);
  expect_format_error(b, "declares 564 bytes but the file has 565");
  b.erase(b.end() - 2, b.end());
  expect_format_error(b, "it is truncated");
}

TEST(SectionFile, ChecksumsAreChecked) {
  std::vector<uint8_t> b = small_file();
  const size_t weights_at = get_u64(b, entry_at(2) + kEntryOffsetAt);
  b[weights_at + 10] ^= 1;
  expect_format_error(b, "the file is corrupt");
  // With the file's checksum fixed up, the section's own still catches it.
  reseal(b);
  put_u32(b, entry_at(2) + kEntryCrcAt, crc32(pattern(100, 5)));
  put_u32(b, b.size() - 4, crc32(std::span<const uint8_t>(b).first(b.size() - 4)));
  expect_format_error(b, "section 'weights' at offset 448 with size 100 has CRC-32");
}

TEST(SectionFile, HugeCountIsRefusedWithoutAllocating) {
  for (uint32_t count : {uint32_t{6}, uint32_t{1000}, std::numeric_limits<uint32_t>::max()}) {
    std::vector<uint8_t> b = small_file();
    put_u32(b, kCountAt, count);
    reseal(b);
    EXPECT_NO_THROW(expect_format_error(b, "declares " + std::to_string(count) + " sections")) << count;
  }
}

TEST(SectionFile, HugeOffsetsAndSizesAreRefused) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  struct Case {
    uint64_t offset, size;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {max - 63, 128, "at offset 18446744073709551552 with size 128 runs past the end"},
      {384, max, "runs past the end"},
      {max - 63, max, "runs past the end"},
      {448, 101, "at offset 448 with size 101 runs past the end of the section data at offset 548 (the file is 564 "},
      {576, 0, "runs past the end"},
      {0, 12, "starts inside the header and section table, which end at offset 352"},
      {320, 12, "starts inside the header and section table"},
      {385, 12, "does not start at a multiple of 64"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> b = small_file();
    put_u64(b, entry_at(2) + kEntryOffsetAt, c.offset);
    put_u64(b, entry_at(2) + kEntrySizeAt, c.size);
    reseal(b);
    EXPECT_NO_THROW(expect_format_error(b, c.needle)) << c.offset << " " << c.size;
  }
}

TEST(SectionFile, OverlappingSectionsAreRefused) {
  std::vector<uint8_t> b = small_file();
  // 'graph' grows into 'weights'.
  put_u64(b, entry_at(0) + kEntrySizeAt, 100);
  reseal(b);
  expect_format_error(b, "section 'weights' at offset 448 overlaps section 'graph', which runs from offset 384 to 484");
  // Two sections at the same place.
  b = small_file();
  put_u64(b, entry_at(0) + kEntryOffsetAt, 448);
  put_u64(b, entry_at(0) + kEntrySizeAt, 1);
  reseal(b);
  expect_format_error(b, "overlaps");
  // An empty section may sit anywhere in the section data, even inside another.
  b = small_file();
  put_u64(b, entry_at(1) + kEntryOffsetAt, 384);
  reseal(b);
  EXPECT_TRUE(parse(b)) << parse(b).status().to_string();
}

TEST(SectionFile, BadNamesInTheTableAreRefused) {
  std::vector<uint8_t> b = small_file();
  std::copy_n("weights", 7, b.begin() + static_cast<std::ptrdiff_t>(entry_at(0)));
  put_u32(b, entry_at(0) + kEntryNameLengthAt, 7);
  reseal(b);
  expect_format_error(b, "section name 'weights' appears twice (table entries 0 and 2)");

  b = small_file();
  put_u32(b, entry_at(1) + kEntryNameLengthAt, 0);
  reseal(b);
  expect_format_error(b, "section table entry 1 (offset 160): name length 0 is not 1..64");

  b = small_file();
  put_u32(b, entry_at(1) + kEntryNameLengthAt, 65);
  reseal(b);
  expect_format_error(b, "name length 65");

  b = small_file();
  b[entry_at(1) + 2] = '\n';
  reseal(b);
  expect_format_error(b, "section name 'em\\x0aty' has byte 0xa at position 2");

  b = small_file();
  b[entry_at(1) + 10] = 'x';  // in the padding after "empty"
  reseal(b);
  expect_format_error(b, "bytes after the name 'empty' are not zero");
}

TEST(SectionFile, ReservedBytesMustBeZero) {
  std::vector<uint8_t> b = small_file();
  b[40] = 1;
  reseal(b);
  expect_format_error(b, "reserved header bytes");
  b = small_file();
  b[entry_at(0) + 90] = 1;
  reseal(b);
  expect_format_error(b, "section table entry 0 (offset 64): reserved bytes are not zero");
  b = small_file();
  b[b.size() - 8] = 1;
  reseal(b);
  expect_format_error(b, "reserved trailer bytes");
}

TEST(SectionFile, BadArgumentsAreRefused) {
  const std::vector<uint8_t> b = small_file();
  EXPECT_EQ(SectionFile::parse(b, "KILN", 1, "x").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(SectionFile::parse(b, kProg, 0, "x").status().code(), ErrorCode::kInvalidArgument);
}

// ---- the writer ------------------------------------------------------------------

TEST(SectionFileWriter, RefusesBadAndDuplicateNames) {
  SectionFileWriter w(kProg, 1);
  ASSERT_TRUE(w.add("weights", bytes_of("1")).is_ok());
  expect_error(w.add("weights", bytes_of("2")), ErrorCode::kInvalidArgument, "'weights' is already used");
  expect_error(w.add("", bytes_of("2")), ErrorCode::kInvalidArgument, "is empty");
  expect_error(w.add(std::string(65, 'n'), bytes_of("2")), ErrorCode::kInvalidArgument, "more than 64");
  expect_error(w.add("tab\there", bytes_of("2")), ErrorCode::kInvalidArgument, "not printable ASCII");
  expect_error(w.add("caf\xc3\xa9", bytes_of("2")), ErrorCode::kInvalidArgument, "'caf\\xc3\\xa9'");
  expect_error(w.add(std::string("nul\0x", 5), bytes_of("2")), ErrorCode::kInvalidArgument, "byte 0x0");
  ASSERT_TRUE(w.add(std::string(64, 'n'), bytes_of("3")).is_ok());
  ASSERT_TRUE(w.add(" ~!\"#$%&'()*+,-./", bytes_of("4")).is_ok());

  // Refused names were not added.
  auto bytes = w.finish();
  auto f = parse(bytes);
  ASSERT_TRUE(f) << f.status().to_string();
  EXPECT_EQ(f->names(), (std::vector<std::string>{"weights", std::string(64, 'n'), " ~!\"#$%&'()*+,-./"}));
  EXPECT_EQ(as_string(*f->section("weights")), "1");
}

class SectionFileOnDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln_section_file_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
};

TEST_F(SectionFileOnDisk, WritesAndMapsAlignedSections) {
  const std::string path = (dir_ / "model.kiln").string();
  {
    std::ofstream old(path, std::ios::binary);
    old << "an older file in the way";
  }
  SectionFileWriter w(kProg, 1);
  ASSERT_TRUE(w.add("graph", bytes_of("{}")).is_ok());
  ASSERT_TRUE(w.add("weights", pattern(5000, 2)).is_ok());
  // An empty section and one large enough to be checksummed in pieces on several threads.
  ASSERT_TRUE(w.add("empty", std::vector<uint8_t>{}).is_ok());
  ASSERT_TRUE(w.add("big", pattern((size_t{9} << 20) + 3, 5)).is_ok());
  ASSERT_TRUE(w.write(path).is_ok());

  auto file = MappedFile::open(path);
  ASSERT_TRUE(file) << file.status().to_string();
  EXPECT_EQ(std::vector<uint8_t>((*file)->bytes().begin(), (*file)->bytes().end()), w.finish());
  auto f = SectionFile::parse((*file)->bytes(), kProg, 1, path);
  ASSERT_TRUE(f) << f.status().to_string();
  auto weights = f->section("weights");
  ASSERT_TRUE(weights) << weights.status().to_string();
  // A mapping starts on a page, so file alignment is memory alignment.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(weights->data()) % 64, 0u);
  EXPECT_EQ(as_string(*weights), as_string(pattern(5000, 2)));
  auto big = f->section("big");
  ASSERT_TRUE(big) << big.status().to_string();
  EXPECT_EQ(big->size(), (size_t{9} << 20) + 3);
  // Only the file itself is left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()), 1);
}

TEST_F(SectionFileOnDisk, WriteErrorsNameThePath) {
  const std::string path = (dir_ / "no_such_dir" / "model.kiln").string();
  const Status s = SectionFileWriter(kProg, 1).write(path);
  expect_error(s, ErrorCode::kIo, "cannot write '" + path + "'");
}

}  // namespace
}  // namespace kiln
