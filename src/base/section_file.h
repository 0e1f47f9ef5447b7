// A versioned, sectioned, checksummed binary container: the on-disk shape of
// engine plans ("KILNPLAN") and .kiln program files ("KILNPROG"). A file holds
// named byte sections; what a section means is up to the file's kind.
//
// Layout, version 1. Integers are little-endian and fixed width; offsets and
// sizes are in bytes from the start of the file.
//
//   Header, 64 bytes at offset 0:
//     0  char[8]  magic, e.g. "KILNPROG"
//     8  u32      format version (1 ..)
//    12  u32      section count N
//    16  u64      file size, trailer included
//    24  u8[40]   reserved, zero
//
//   Section table, N entries of 96 bytes at offset 64, in file order:
//     0  char[64] name: 1..64 printable ASCII bytes (0x20..0x7e), zero-padded
//    64  u32      name length
//    68  u32      CRC-32 of the section's bytes
//    72  u64      offset of the section's bytes, a multiple of 64
//    80  u64      size of the section's bytes
//    88  u64      reserved, zero
//
//   Section bytes: the first section starts at the first multiple of 64 at or
//   after the end of the table (64 + 96 * N), each further one at the first
//   multiple of 64 at or after the end of the one before; padding bytes are
//   zero. An empty section has size 0 and the offset it would have had.
//
//   Trailer, 16 bytes, right after the last section's bytes (or after the
//   padding that aligns an empty last section; after the table when N == 0):
//     0  char[8]  magic again, so that a file cut short is told from one that
//                 is merely corrupt
//     8  u32      reserved, zero
//    12  u32      CRC-32 of every byte of the file before this field
//
// The 64-byte alignment lets a reader of a memory-mapped file hand a section
// (weights, say) out as tensor storage without copying it. The writer's output
// depends only on the magic, the version and the sections in order, so the
// same sections always give the same bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/status.h"

namespace kiln {

// Collects named sections and produces the file's bytes.
class SectionFileWriter {
 public:
  // The magic's length and the longest section name, in bytes.
  static constexpr size_t kMagicSize = 8;
  static constexpr size_t kMaxNameLength = 64;

  //   magic: exactly kMagicSize bytes naming the kind of file, e.g. "KILNPLAN".
  //   version: the format version written in the header; at least 1.
  // A wrong-sized magic or version 0 is a bug in the caller (asserted).
  SectionFileWriter(std::string_view magic, uint32_t version);

  // Adds a section after those already added.
  //   name: 1..kMaxNameLength printable ASCII characters, not used before.
  //   bytes: the section's contents (copied, for the span overload); may be empty.
  // Returns kInvalidArgument for a bad or duplicate name; nothing is added then.
  Status add(std::string name, std::vector<uint8_t> bytes);
  Status add(std::string name, std::span<const uint8_t> bytes);

  // The whole file.
  std::vector<uint8_t> finish() const;

  // Writes the bytes finish() returns to `path`, section by section (no
  // whole-file image in memory). The bytes go to a new file beside `path` that
  // then replaces it, so a process that has the old file mapped keeps reading
  // the old bytes, and `path` never holds a partial file.
  // Returns kIo, naming the path and the operating system's reason.
  Status write(const std::string& path) const;

 private:
  struct Section {
    std::string name;
    std::vector<uint8_t> bytes;
  };
  // Where everything goes: the header and table bytes, each section's
  // offset, and the trailer with the whole-file CRC.
  struct Layout {
    std::vector<uint8_t> head;
    std::vector<uint64_t> offsets;
    uint64_t trailer = 0, size = 0;
    std::array<uint8_t, 16> tail{};
  };
  Layout layout() const;

  std::string magic_;
  uint32_t version_;
  std::vector<Section> sections_;
};

// Reads a section file held in bytes that the caller keeps alive (a
// std::vector, or a MappedFile's bytes()); sections are views into them.
class SectionFile {
 public:
  // Checks the whole file before returning: magic, version, declared size,
  // the table's bounds, every name, every section's bounds, alignment and
  // CRC-32, that no two sections share bytes, and the whole-file CRC-32.
  //   bytes: the whole file; must outlive the SectionFile and its sections.
  //   magic: the kMagicSize bytes this kind of file starts with.
  //   max_version: the newest format version the caller understands (>= 1).
  //   what: names the file in messages: a path, or e.g. "engine plan for segment 2".
  // Errors: kFormat for a malformed file, saying what is wrong and at which
  // byte offset or section, with its fault (kBadMagic, kBadVersion for a file
  // newer than max_version, which needs a newer kiln, kTruncated,
  // kChecksumMismatch, ...); kInvalidArgument for a bad magic or max_version
  // argument.
  static Expected<SectionFile> parse(std::span<const uint8_t> bytes, std::string_view magic, uint32_t max_version,
                                     std::string_view what);

  // The format version from the header, 1..max_version.
  uint32_t version() const { return version_; }
  // Section names in file order.
  std::vector<std::string> names() const;
  bool has(std::string_view name) const;
  // The named section's bytes: a view into the parsed bytes, starting at a
  // 64-byte aligned offset of the file.
  // Returns kNotFound, naming the section and the file, if there is no such section.
  Expected<std::span<const uint8_t>> section(std::string_view name) const;

 private:
  struct Section {
    std::string name;
    uint64_t offset;
    uint64_t size;
  };

  SectionFile() = default;
  const Section* find(std::string_view name) const;

  std::span<const uint8_t> bytes_;
  std::string what_;
  uint32_t version_ = 0;
  std::vector<Section> sections_;  // file order
  std::vector<size_t> by_name_;    // indices into sections_, sorted by name
};

}  // namespace kiln
