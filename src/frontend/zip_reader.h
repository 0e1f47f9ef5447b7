// kiln's own zip reader: just what PyTorch's archive writer produces (stored
// entries, data descriptors, 64-byte alignment padding, zip64 records), plus
// ordinary stored zips such as Python's zipfile writes. Every offset, size and
// count is checked against the bytes at hand before it is used; a malformed
// archive gets a kFormat Status naming the file, the entry and the byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/crc32.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln::frontend {

// The zip checksum is kiln's CRC-32 (base/crc32.h); it is also visible here
// as frontend::crc32 for code that builds or checks archives.
using ::kiln::crc32;

struct ZipEntry {
  std::string name;              // as stored (UTF-8 for PyTorch archives)
  uint64_t local_header_offset;  // byte offset of the entry's local file header
  uint64_t data_offset;          // byte offset of the entry's first data byte
  uint64_t size;                 // uncompressed size
  uint64_t compressed_size;      // bytes stored in the archive (== size for stored entries)
  uint16_t method;               // 0 = stored, 8 = deflate, ...
  uint32_t crc32;                // CRC-32 of the uncompressed bytes, from the central directory
};

class ZipArchive {
 public:
  // Maps the file at `path` and reads its central directory.
  // Errors: kNotFound / kIo when the file cannot be mapped, kFormat when it is
  // not a well-formed zip, kUnsupported for multi-disk or encrypted archives.
  static Expected<ZipArchive> open(const std::string& path);
  // Reads an archive held in memory.
  //   bytes: the whole archive; entries' storages keep it alive.
  //   display_name: names the archive in error messages.
  static Expected<ZipArchive> from_bytes(std::shared_ptr<Storage> bytes, std::string display_name);

  // Entries in central-directory order. Names are unique, relative, and free
  // of ".." components.
  const std::vector<ZipEntry>& entries() const { return entries_; }
  // The entry named exactly `name`, or nullptr.
  const ZipEntry* find(std::string_view name) const;

  // The entry's bytes, borrowed from the archive.
  //   e: an entry of this archive.
  //   verify_crc: check the bytes against the entry's CRC-32 (reads every byte).
  // Errors: kUnsupported for a compressed entry, kFormat for a CRC mismatch or
  // an entry that does not lie inside this archive.
  Expected<std::span<const uint8_t>> read(const ZipEntry& e, bool verify_crc = true) const;
  // Same bytes as read(), as a Storage that borrows them without copying and
  // keeps the archive's memory alive. The data is 64-byte aligned when the
  // writer aligned it (PyTorch's does) and the archive is mapped.
  Expected<std::shared_ptr<Storage>> storage(const ZipEntry& e, bool verify_crc = true) const;

  // The path or display name given when opening, for messages.
  const std::string& path() const { return path_; }

 private:
  ZipArchive() = default;

  std::shared_ptr<Storage> bytes_;
  std::string path_;
  std::vector<ZipEntry> entries_;
  std::vector<size_t> by_name_;  // indices into entries_, sorted by name
};

}  // namespace kiln::frontend
