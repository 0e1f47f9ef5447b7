// A zip writer for tests: writes archives in PyTorch's layout (data
// descriptors, 64-byte aligned data, zip64 end records) or Python zipfile's
// plain layout, so tests can build, repack and corrupt archives.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/zip_reader.h"

namespace kiln::testing {

struct TestEntry {
  std::string name;
  std::vector<uint8_t> data;
};

struct WriteOptions {
  // PyTorch's layout: flags 0x0808, CRC and sizes 0 in the local header and a
  // data descriptor after the data, 'FB' padding in the local extra field so
  // data starts at a multiple of 64, and a zip64 end record + locator before
  // the classic end record. Otherwise: Python zipfile's plain layout.
  bool pytorch_style = true;
  // Central records hold 0xffffffff in these fields and the real values in a
  // zip64 extra field (only those fields, in the standard order).
  bool saturate_usize = false, saturate_csize = false, saturate_offset = false;
  // The classic end record holds 0xffff / 0xffffffff (needs pytorch_style).
  bool saturate_end_record = false;
  uint16_t method = 0;
  std::string comment;
};

struct ZipImage {
  std::vector<uint8_t> bytes;
  std::vector<uint64_t> local_offsets, central_offsets;
  uint64_t cd_offset = 0, eocd64_offset = 0, locator_offset = 0, eocd_offset = 0;
};

inline void put16(std::vector<uint8_t>& b, uint64_t v) {
  for (int i = 0; i < 2; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void put32(std::vector<uint8_t>& b, uint64_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void put64(std::vector<uint8_t>& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void put(std::vector<uint8_t>& b, std::string_view s) { b.insert(b.end(), s.begin(), s.end()); }
inline void set32(std::vector<uint8_t>& b, uint64_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void set64(std::vector<uint8_t>& b, uint64_t off, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

inline ZipImage write_zip(const std::vector<TestEntry>& entries, const WriteOptions& o = {}) {
  ZipImage z;
  std::vector<uint8_t>& b = z.bytes;
  const uint16_t flags = o.pytorch_style ? 0x0808 : 0;
  for (const TestEntry& e : entries) {
    const uint32_t crc = frontend::crc32(e.data);
    z.local_offsets.push_back(b.size());
    put32(b, 0x04034b50);
    put16(b, 20);
    put16(b, flags);
    put16(b, o.method);
    put16(b, 0);     // time
    put16(b, 0x21);  // date
    put32(b, o.pytorch_style ? 0 : crc);
    put32(b, o.pytorch_style ? 0 : e.data.size());
    put32(b, o.pytorch_style ? 0 : e.data.size());
    put16(b, e.name.size());
    size_t pad = 0;
    if (o.pytorch_style) {
      const size_t unpadded = b.size() + 2 + e.name.size() + 4;
      pad = (64 - unpadded % 64) % 64;
      put16(b, 4 + pad);
    } else {
      put16(b, 0);
    }
    put(b, e.name);
    if (o.pytorch_style) {
      put(b, "FB");
      put16(b, pad);
      b.insert(b.end(), pad, 'Z');
    }
    b.insert(b.end(), e.data.begin(), e.data.end());
    if (o.pytorch_style) {  // data descriptor
      put32(b, 0x08074b50);
      put32(b, crc);
      put32(b, e.data.size());
      put32(b, e.data.size());
    }
  }
  z.cd_offset = b.size();
  for (size_t i = 0; i < entries.size(); ++i) {
    const TestEntry& e = entries[i];
    std::vector<uint8_t> extra;
    if (o.saturate_usize || o.saturate_csize || o.saturate_offset) {
      std::vector<uint8_t> fields;
      if (o.saturate_usize) put64(fields, e.data.size());
      if (o.saturate_csize) put64(fields, e.data.size());
      if (o.saturate_offset) put64(fields, z.local_offsets[i]);
      put16(extra, 0x0001);
      put16(extra, fields.size());
      extra.insert(extra.end(), fields.begin(), fields.end());
    }
    z.central_offsets.push_back(b.size());
    put32(b, 0x02014b50);
    put16(b, 0x031e);  // made by: unix
    put16(b, 20);
    put16(b, flags);
    put16(b, o.method);
    put16(b, 0);
    put16(b, 0x21);
    put32(b, frontend::crc32(e.data));
    put32(b, o.saturate_csize ? 0xFFFFFFFFu : e.data.size());
    put32(b, o.saturate_usize ? 0xFFFFFFFFu : e.data.size());
    put16(b, e.name.size());
    put16(b, extra.size());
    put16(b, 0);  // comment
    put16(b, 0);  // disk
    put16(b, 0);  // internal attributes
    put32(b, 0);  // external attributes
    put32(b, o.saturate_offset ? 0xFFFFFFFFu : z.local_offsets[i]);
    put(b, e.name);
    b.insert(b.end(), extra.begin(), extra.end());
  }
  const uint64_t cd_size = b.size() - z.cd_offset;
  if (o.pytorch_style) {
    z.eocd64_offset = b.size();
    put32(b, 0x06064b50);
    put64(b, 44);
    put16(b, 45);
    put16(b, 45);
    put32(b, 0);
    put32(b, 0);
    put64(b, entries.size());
    put64(b, entries.size());
    put64(b, cd_size);
    put64(b, z.cd_offset);
    z.locator_offset = b.size();
    put32(b, 0x07064b50);
    put32(b, 0);
    put64(b, z.eocd64_offset);
    put32(b, 1);
  }
  const bool sat = o.saturate_end_record;
  z.eocd_offset = b.size();
  put32(b, 0x06054b50);
  put16(b, 0);
  put16(b, 0);
  put16(b, sat ? 0xFFFF : entries.size());
  put16(b, sat ? 0xFFFF : entries.size());
  put32(b, sat ? 0xFFFFFFFFu : cd_size);
  put32(b, sat ? 0xFFFFFFFFu : z.cd_offset);
  put16(b, o.comment.size());
  put(b, o.comment);
  return z;
}

}  // namespace kiln::testing
