#include "frontend/zip_reader.h"
#include "support/zip_writer.h"

#include <gtest/gtest.h>

#include "support/fixture_files.h"
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace kiln::frontend {
namespace {

using namespace kiln::testing;  // NOLINT(google-build-using-namespace)

std::shared_ptr<Storage> to_storage(const std::vector<uint8_t>& b) {
  auto s = Storage::allocate(b.size());
  if (!b.empty()) std::memcpy(s->data(), b.data(), b.size());
  return s;
}

Expected<ZipArchive> parse(const std::vector<uint8_t>& b) { return ZipArchive::from_bytes(to_storage(b), "test.zip"); }

std::vector<uint8_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}

std::vector<TestEntry> sample_entries() {
  return {{"archive/archive_format", bytes_of("pt2")},
          {"archive/data/weights/weight_0", pattern(1000, 3)},
          {"archive/data/constants/tensor_0", {}},
          {"archive/models/model.json", bytes_of("{\"graph_module\":{}}")},
          {"archive/.data/version", bytes_of("6\n")}};
}

// Opens and reads every entry; a malformed archive must fail cleanly.
Status open_and_read_all(const std::vector<uint8_t>& b) {
  auto z = parse(b);
  if (!z) return z.status();
  for (const ZipEntry& e : z->entries()) {
    auto data = z->read(e);
    if (!data) return data.status();
  }
  return Status::ok();
}

void expect_format_error(const Status& s, const std::string& needle) {
  ASSERT_FALSE(s.is_ok()) << "expected an error mentioning '" << needle << "'";
  EXPECT_EQ(s.code(), ErrorCode::kFormat) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("test.zip"), std::string::npos) << s.to_string();
}

std::string as_string(std::span<const uint8_t> s) { return {s.begin(), s.end()}; }

// ---- CRC ----------------------------------------------------------------------

TEST(Crc32, KnownValues) {
  EXPECT_EQ(crc32({}), 0u);
  EXPECT_EQ(crc32(bytes_of("123456789")), 0xCBF43926u);  // the standard check value
  EXPECT_EQ(crc32(bytes_of("The quick brown fox jumps over the lazy dog")), 0x414FA339u);
}

TEST(Crc32, PiecewiseEqualsWhole) {
  const std::vector<uint8_t> data = pattern(1031, 11);
  const uint32_t whole = crc32(data);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{513}, data.size()}) {
    const std::span<const uint8_t> all(data);
    EXPECT_EQ(crc32(all.subspan(cut), crc32(all.first(cut))), whole) << "cut at " << cut;
  }
}

// ---- well-formed archives ----------------------------------------------------

TEST(ZipReader, ReadsPyTorchStyleArchive) {
  const auto entries = sample_entries();
  const ZipImage img = write_zip(entries);
  auto z = parse(img.bytes);
  ASSERT_TRUE(z) << z.status().to_string();
  ASSERT_EQ(z->entries().size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const ZipEntry& e = z->entries()[i];
    EXPECT_EQ(e.name, entries[i].name);
    EXPECT_EQ(e.local_header_offset, img.local_offsets[i]);
    EXPECT_EQ(e.size, entries[i].data.size());
    EXPECT_EQ(e.compressed_size, entries[i].data.size());
    EXPECT_EQ(e.method, 0);
    EXPECT_EQ(e.crc32, crc32(entries[i].data));
    EXPECT_EQ(e.data_offset % 64, 0u) << e.name;
    EXPECT_GT(e.data_offset, e.local_header_offset + 30 + e.name.size()) << "the FB padding counts";
    auto data = z->read(e);
    ASSERT_TRUE(data) << data.status().to_string();
    EXPECT_EQ(std::vector<uint8_t>(data->begin(), data->end()), entries[i].data);
  }
  const ZipEntry* fmt = z->find("archive/archive_format");
  ASSERT_NE(fmt, nullptr);
  EXPECT_EQ(as_string(*z->read(*fmt)), "pt2");
  EXPECT_EQ(z->find("archive/archive_forma"), nullptr);
  EXPECT_EQ(z->find("archive_format"), nullptr);
  EXPECT_EQ(z->find(""), nullptr);
  EXPECT_EQ(z->path(), "test.zip");
}

TEST(ZipReader, StorageBorrowsAlignedBytesAndOutlivesArchive) {
  const ZipImage img = write_zip(sample_entries());
  auto bytes = to_storage(img.bytes);
  std::shared_ptr<Storage> weight;
  const uint8_t* base = bytes->data();
  {
    auto z = ZipArchive::from_bytes(bytes, "test.zip");
    ASSERT_TRUE(z);
    const ZipEntry* e = z->find("archive/data/weights/weight_0");
    ASSERT_NE(e, nullptr);
    auto s = z->storage(*e);
    ASSERT_TRUE(s) << s.status().to_string();
    weight = *s;
    EXPECT_EQ(weight->data(), base + e->data_offset) << "no copy";
  }
  bytes.reset();  // the entry's storage alone keeps the archive's bytes alive
  ASSERT_EQ(weight->nbytes(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(weight->data()) % 64, 0u);
  EXPECT_EQ(std::vector<uint8_t>(weight->data(), weight->data() + 1000), pattern(1000, 3));
}

TEST(ZipReader, ReadsPlainStyleArchive) {
  WriteOptions o;
  o.pytorch_style = false;
  const auto entries = sample_entries();
  auto z = parse(write_zip(entries, o).bytes);
  ASSERT_TRUE(z) << z.status().to_string();
  ASSERT_EQ(z->entries().size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(z->entries()[i].data_offset, z->entries()[i].local_header_offset + 30 + entries[i].name.size());
    EXPECT_EQ(as_string(*z->read(z->entries()[i])), as_string(entries[i].data));
  }
}

// Written by Python 3.11's zipfile (stored):
//   with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
//     z.writestr("hello.txt", b"hello, zip\n"); z.writestr("dir/data.bin", bytes(range(16)))
TEST(ZipReader, ReadsPythonZipfileArchive) {
  const std::vector<uint8_t> b = {
      0x50, 0x4b, 0x03, 0x04, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2f, 0x47, 0x7d, 0x5d, 0x1b, 0x38, 0x72, 0xcb, 0x0b,
      0x00, 0x00, 0x00, 0x0b, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x2e, 0x74, 0x78,
      0x74, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x2c, 0x20, 0x7a, 0x69, 0x70, 0x0a, 0x50, 0x4b, 0x03, 0x04, 0x14, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x2f, 0x47, 0x7d, 0x5d, 0x88, 0xe2, 0xce, 0xce, 0x10, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,
      0x0c, 0x00, 0x00, 0x00, 0x64, 0x69, 0x72, 0x2f, 0x64, 0x61, 0x74, 0x61, 0x2e, 0x62, 0x69, 0x6e, 0x00, 0x01, 0x02,
      0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x50, 0x4b, 0x01, 0x02, 0x14, 0x03,
      0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2f, 0x47, 0x7d, 0x5d, 0x1b, 0x38, 0x72, 0xcb, 0x0b, 0x00, 0x00, 0x00, 0x0b,
      0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x00, 0x00,
      0x00, 0x00, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x2e, 0x74, 0x78, 0x74, 0x50, 0x4b, 0x01, 0x02, 0x14, 0x03, 0x14, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x2f, 0x47, 0x7d, 0x5d, 0x88, 0xe2, 0xce, 0xce, 0x10, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00,
      0x00, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x32, 0x00, 0x00, 0x00,
      0x64, 0x69, 0x72, 0x2f, 0x64, 0x61, 0x74, 0x61, 0x2e, 0x62, 0x69, 0x6e, 0x50, 0x4b, 0x05, 0x06, 0x00, 0x00, 0x00,
      0x00, 0x02, 0x00, 0x02, 0x00, 0x71, 0x00, 0x00, 0x00, 0x6c, 0x00, 0x00, 0x00, 0x00, 0x00,
  };
  auto z = parse(b);
  ASSERT_TRUE(z) << z.status().to_string();
  ASSERT_EQ(z->entries().size(), 2u);
  EXPECT_EQ(as_string(*z->read(*z->find("hello.txt"))), "hello, zip\n");
  std::vector<uint8_t> want(16);
  for (int i = 0; i < 16; ++i) want[i] = static_cast<uint8_t>(i);
  auto data = z->read(*z->find("dir/data.bin"));
  ASSERT_TRUE(data);
  EXPECT_EQ(std::vector<uint8_t>(data->begin(), data->end()), want);
}

TEST(ZipReader, Zip64ExtraFieldReadsOnlySaturatedFieldsInOrder) {
  const auto entries = sample_entries();
  for (int mask = 1; mask < 8; ++mask) {
    for (bool pytorch : {true, false}) {
      WriteOptions o;
      o.pytorch_style = pytorch;
      o.saturate_usize = mask & 1;
      o.saturate_csize = mask & 2;
      o.saturate_offset = mask & 4;
      const ZipImage img = write_zip(entries, o);
      auto z = parse(img.bytes);
      ASSERT_TRUE(z) << "mask " << mask << ": " << z.status().to_string();
      for (size_t i = 0; i < entries.size(); ++i) {
        const ZipEntry& e = z->entries()[i];
        EXPECT_EQ(e.size, entries[i].data.size()) << mask;
        EXPECT_EQ(e.compressed_size, entries[i].data.size()) << mask;
        EXPECT_EQ(e.local_header_offset, img.local_offsets[i]) << mask;
        EXPECT_EQ(as_string(*z->read(e)), as_string(entries[i].data)) << mask;
      }
    }
  }
}

TEST(ZipReader, SaturatedEndRecordUsesZip64EndRecord) {
  WriteOptions o;
  o.saturate_end_record = true;
  auto z = parse(write_zip(sample_entries(), o).bytes);
  ASSERT_TRUE(z) << z.status().to_string();
  EXPECT_EQ(z->entries().size(), sample_entries().size());
}

TEST(ZipReader, EmptyArchiveHasNoEntries) {
  for (bool pytorch : {true, false}) {
    WriteOptions o;
    o.pytorch_style = pytorch;
    auto z = parse(write_zip({}, o).bytes);
    ASSERT_TRUE(z) << z.status().to_string();
    EXPECT_TRUE(z->entries().empty());
    EXPECT_EQ(z->find("x"), nullptr);
  }
}

TEST(ZipReader, CommentContainingEndSignatureDoesNotMislead) {
  WriteOptions o;
  o.comment = std::string("PK\x05\x06", 4) + std::string(18, '\0') + "tail";
  auto z = parse(write_zip(sample_entries(), o).bytes);
  ASSERT_TRUE(z) << z.status().to_string();
  EXPECT_EQ(z->entries().size(), sample_entries().size());
}

TEST(ZipReader, OpensAFileAndKeepsItMapped) {
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_zip_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.pt2").string();
  const ZipImage img = write_zip(sample_entries());
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(img.bytes.data()), static_cast<std::streamsize>(img.bytes.size()));
  }
  std::shared_ptr<Storage> weight;
  {
    auto z = ZipArchive::open(path);
    ASSERT_TRUE(z) << z.status().to_string();
    EXPECT_EQ(z->path(), path);
    auto s = z->storage(*z->find("archive/data/weights/weight_0"));
    ASSERT_TRUE(s);
    weight = *s;
  }
  std::filesystem::remove_all(dir);  // the mapping outlives the name
  EXPECT_EQ(reinterpret_cast<uintptr_t>(weight->data()) % 64, 0u);
  EXPECT_EQ(std::vector<uint8_t>(weight->data(), weight->data() + weight->nbytes()), pattern(1000, 3));

  auto missing = ZipArchive::open(path);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

// ---- entries the reader refuses ------------------------------------------------

TEST(ZipReader, CompressedEntryIsUnsupportedWhenRead) {
  WriteOptions o;
  o.method = 8;
  auto z = parse(write_zip(sample_entries(), o).bytes);
  ASSERT_TRUE(z) << "listing a deflated archive works: " << z.status().to_string();
  const ZipEntry* e = z->find("archive/models/model.json");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->method, 8);
  auto data = z->read(*e);
  ASSERT_FALSE(data);
  EXPECT_EQ(data.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(data.status().message().find("compressed entries are not supported"), std::string::npos);
  EXPECT_NE(data.status().message().find("archive/models/model.json"), std::string::npos);
  EXPECT_FALSE(z->storage(*e));
}

TEST(ZipReader, CrcMismatchIsAFormatError) {
  ZipImage img = write_zip(sample_entries());
  auto clean = parse(img.bytes);
  ASSERT_TRUE(clean);
  const ZipEntry e = *clean->find("archive/data/weights/weight_0");
  img.bytes[e.data_offset + 500] ^= 0x10;
  auto z = parse(img.bytes);
  ASSERT_TRUE(z);
  auto data = z->read(*z->find(e.name));
  ASSERT_FALSE(data);
  expect_format_error(data.status(), "CRC-32");
  EXPECT_NE(data.status().message().find(e.name), std::string::npos);
  EXPECT_TRUE(z->read(*z->find(e.name), /*verify_crc=*/false)) << "the check can be skipped";
}

TEST(ZipReader, UnsafeNamesAreRejected) {
  for (const char* name :
       {"../evil", "archive/../../evil", "archive/..", "/etc/passwd", "\\abs", "C:/x", "archive\\..\\x", ""}) {
    for (bool pytorch : {true, false}) {
      WriteOptions o;
      o.pytorch_style = pytorch;
      auto z = parse(write_zip({{"ok", bytes_of("a")}, {name, bytes_of("b")}}, o).bytes);
      ASSERT_FALSE(z) << "name '" << name << "' accepted";
      expect_format_error(z.status(), "unsafe entry name");
    }
  }
  // A NUL byte is refused, and shown escaped in the message.
  auto nul = parse(write_zip({{std::string("a\0b", 3), bytes_of("x")}}).bytes);
  ASSERT_FALSE(nul);
  expect_format_error(nul.status(), "entry 'a\\x00b'");
  // Dots that are not a whole component are fine.
  auto z = parse(write_zip({{"a/..b/c..", bytes_of("a")}, {"a/.hidden", bytes_of("b")}}).bytes);
  EXPECT_TRUE(z) << z.status().to_string();
}

TEST(ZipReader, DuplicateNamesAreRejected) {
  auto z = parse(write_zip({{"a", bytes_of("1")}, {"b", bytes_of("2")}, {"a", bytes_of("3")}}).bytes);
  ASSERT_FALSE(z);
  expect_format_error(z.status(), "'a' appears twice");
}

TEST(ZipReader, EntryDataRunningIntoTheCentralDirectoryIsRejected) {
  ZipImage img = write_zip(sample_entries());
  const uint64_t rec = img.central_offsets.back();  // the last entry: ".data/version", 2 bytes
  set32(img.bytes, rec + 20, 200);
  set32(img.bytes, rec + 24, 200);
  auto z = parse(img.bytes);
  ASSERT_FALSE(z);
  expect_format_error(z.status(), "runs past the start of the central directory");
  EXPECT_NE(z.status().message().find("archive/.data/version"), std::string::npos);
}

TEST(ZipReader, OverlappingEntriesAreRejected) {
  ZipImage img = write_zip(sample_entries());
  const uint64_t rec = img.central_offsets[0];  // "archive_format" grows into the next entry
  set32(img.bytes, rec + 20, 100);
  set32(img.bytes, rec + 24, 100);
  auto z = parse(img.bytes);
  ASSERT_FALSE(z);
  expect_format_error(z.status(), "overlaps entry 'archive/archive_format'");
}

TEST(ZipReader, HugeZip64SizesAndOffsetsAreRejected) {
  WriteOptions o;
  o.saturate_usize = o.saturate_csize = o.saturate_offset = true;
  const ZipImage clean = write_zip(sample_entries(), o);
  const uint64_t extra = clean.central_offsets[1] + 46 + sample_entries()[1].name.size() + 4;
  for (uint64_t huge : {uint64_t{1} << 40, uint64_t{1} << 63, ~uint64_t{0}, ~uint64_t{0} - 29}) {
    for (int field = 0; field < 3; ++field) {
      ZipImage img = clean;
      set64(img.bytes, extra + 8 * field, huge);
      if (field == 0) set64(img.bytes, extra + 8, huge);  // keep the stored sizes equal
      auto z = parse(img.bytes);
      ASSERT_FALSE(z) << "field " << field << " = " << huge;
      EXPECT_EQ(z.status().code(), ErrorCode::kFormat) << z.status().to_string();
      EXPECT_NE(z.status().message().find("archive/data/weights/weight_0"), std::string::npos)
          << z.status().to_string();
    }
  }
}

TEST(ZipReader, Zip64ExtraTooShortForItsSaturatedFieldsIsRejected) {
  WriteOptions o;
  o.saturate_usize = o.saturate_csize = true;
  ZipImage img = write_zip(sample_entries(), o);
  const uint64_t rec = img.central_offsets[0];
  set32(img.bytes, rec + 42, 0xFFFFFFFFu);  // offset now saturated too, but the extra holds two fields
  auto z = parse(img.bytes);
  ASSERT_FALSE(z);
  expect_format_error(z.status(), "lacks the local header offset");

  WriteOptions none;
  ZipImage img2 = write_zip(sample_entries(), none);
  set32(img2.bytes, img2.central_offsets[2] + 24, 0xFFFFFFFFu);
  auto z2 = parse(img2.bytes);
  ASSERT_FALSE(z2);
  expect_format_error(z2.status(), "no zip64 extra field");
}

TEST(ZipReader, CountsThatCannotFitAreRejectedBeforeAllocating) {
  ZipImage img = write_zip(sample_entries());
  // zip64 counts of 2^60: far more than the directory's bytes can hold.
  set64(img.bytes, img.eocd64_offset + 24, uint64_t{1} << 60);
  set64(img.bytes, img.eocd64_offset + 32, uint64_t{1} << 60);
  for (int i = 0; i < 4; ++i) img.bytes[img.eocd_offset + 8 + i] = 0xFF;  // classic counts saturated
  auto z = parse(img.bytes);
  ASSERT_FALSE(z);
  expect_format_error(z.status(), "cannot hold");

  WriteOptions o;
  o.pytorch_style = false;
  ZipImage plain = write_zip(sample_entries(), o);
  plain.bytes[plain.eocd_offset + 8] = plain.bytes[plain.eocd_offset + 10] = 200;
  auto zp = parse(plain.bytes);
  ASSERT_FALSE(zp);
  expect_format_error(zp.status(), "cannot hold");
}

TEST(ZipReader, MismatchedEndRecordsAreRejected) {
  ZipImage img = write_zip(sample_entries());
  img.bytes[img.eocd_offset + 10] = 4;  // classic total count disagrees with zip64's 5
  img.bytes[img.eocd_offset + 8] = 4;
  auto z = parse(img.bytes);
  ASSERT_FALSE(z);
  expect_format_error(z.status(), "entry count 4");
}

TEST(ZipReader, BadSignaturesAreRejected) {
  const ZipImage clean = write_zip(sample_entries());
  struct Case {
    uint64_t offset;
    const char* needle;
  };
  for (const Case& c : {Case{clean.local_offsets[2], "bad local header signature"},
                        Case{clean.central_offsets[3], "bad central directory record signature"},
                        Case{clean.eocd64_offset, "bad zip64 end record signature"},
                        Case{clean.eocd_offset, "no end-of-central-directory record"}}) {
    ZipImage img = clean;
    img.bytes[c.offset + 1] = 'X';
    auto z = parse(img.bytes);
    ASSERT_FALSE(z) << c.needle;
    expect_format_error(z.status(), c.needle);
    if (c.offset != clean.eocd_offset) {
      EXPECT_NE(z.status().message().find("byte " + std::to_string(c.offset)), std::string::npos)
          << z.status().to_string();
    }
  }
}

TEST(ZipReader, TooSmallOrGarbageInputIsRejected) {
  expect_format_error(parse({}).status(), "too small");
  expect_format_error(parse(bytes_of("PK\x05\x06")).status(), "too small");
  expect_format_error(parse(std::vector<uint8_t>(5000, 0x42)).status(), "no end-of-central-directory record");
  auto null = ZipArchive::from_bytes(nullptr, "test.zip");
  ASSERT_FALSE(null);
  EXPECT_EQ(null.status().code(), ErrorCode::kInvalidArgument);
}

TEST(ZipReader, EntryFromAnotherArchiveIsRejected) {
  auto small = parse(write_zip({{"a", bytes_of("x")}}).bytes);
  ASSERT_TRUE(small);
  ZipEntry foreign{"big", 0, 1u << 20, 4096, 4096, 0, 0};
  auto data = small->read(foreign);
  ASSERT_FALSE(data);
  EXPECT_EQ(data.status().code(), ErrorCode::kInvalidArgument);
}

// ---- corruption sweeps: every result is a Status, never a crash --------------------

TEST(ZipReader, EveryTruncationFailsCleanly) {
  for (bool pytorch : {true, false}) {
    WriteOptions o;
    o.pytorch_style = pytorch;
    const ZipImage img = write_zip(sample_entries(), o);
    for (size_t n = 0; n < img.bytes.size(); ++n) {
      std::vector<uint8_t> cut(img.bytes.begin(), img.bytes.begin() + static_cast<std::ptrdiff_t>(n));
      Status s = open_and_read_all(cut);
      ASSERT_FALSE(s.is_ok()) << "prefix of " << n << " bytes accepted";
      ASSERT_EQ(s.code(), ErrorCode::kFormat) << s.to_string();
    }
  }
}

TEST(ZipReader, ByteFlipsInDirectoryAndEndRecordsNeverCrash) {
  for (bool pytorch : {true, false}) {
    WriteOptions o;
    o.pytorch_style = pytorch;
    o.saturate_offset = pytorch;
    const ZipImage img = write_zip(sample_entries(), o);
    size_t rejected = 0, total = 0;
    for (size_t pos = img.cd_offset; pos < img.bytes.size(); ++pos) {
      for (uint8_t x : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
        std::vector<uint8_t> b = img.bytes;
        b[pos] ^= x;
        Status s = open_and_read_all(b);
        ++total;
        if (!s.is_ok()) {
          ++rejected;
          EXPECT_NE(s.code(), ErrorCode::kInternal) << s.to_string();
        }
      }
    }
    // Times, attributes and version fields may change harmlessly; most bytes matter.
    EXPECT_GT(rejected, total / 2) << rejected << " of " << total;
  }
}

TEST(ZipReader, RandomMutationsNeverCrash) {
  WriteOptions o;
  o.saturate_usize = o.saturate_offset = true;
  const ZipImage img = write_zip(sample_entries(), o);
  std::mt19937_64 rng(1234);
  for (int round = 0; round < 3000; ++round) {
    std::vector<uint8_t> b = img.bytes;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    (void)open_and_read_all(b);
  }
}

TEST(ZipReader, RealPyTorchArchivesIfPresent) {
  // Fixtures written by real PyTorch versions: tests/fixtures/torch<version>/.
  const std::vector<std::filesystem::path> files = kiln::testing::fixture_files(".pt2");
  if (files.empty()) GTEST_SKIP() << "no .pt2 fixtures under tests/fixtures";
  for (const auto& f : files) {
    auto z = ZipArchive::open(f.string());
    ASSERT_TRUE(z) << z.status().to_string();
    ASSERT_FALSE(z->entries().empty()) << f;
    const std::string& first = z->entries().front().name;
    const std::string root = first.substr(0, first.find('/'));
    for (const ZipEntry& e : z->entries()) EXPECT_EQ(e.name.rfind(root + "/", 0), 0u) << f << ": " << e.name;
    const ZipEntry* fmt = z->find(root + "/archive_format");
    ASSERT_NE(fmt, nullptr) << f;
    auto data = z->read(*fmt);
    ASSERT_TRUE(data) << data.status().to_string();
    EXPECT_EQ(as_string(*data), "pt2") << f;
    for (const ZipEntry& e : z->entries()) {
      EXPECT_EQ(e.method, 0) << e.name;
      EXPECT_EQ(e.data_offset % 64, 0u) << f << ": " << e.name;
      EXPECT_TRUE(z->read(e)) << f << ": " << e.name;
    }
  }
}

}  // namespace
}  // namespace kiln::frontend
