// CRC-32 as zlib, zip and PNG compute it (IEEE 802.3 polynomial, reflected,
// initial value and final xor 0xFFFFFFFF). Used to check zip entries and the
// sections of kiln's own files.
#pragma once

#include <cstdint>
#include <span>

namespace kiln {

// The CRC-32 of `bytes`, continuing from `crc`.
//   bytes: the data to checksum; may be empty.
//   crc: 0 to start, or the result for the bytes that came before, so that
//        crc32(b, crc32(a)) == crc32(a followed by b).
// crc32("123456789") == 0xCBF43926; crc32(empty) == 0.
uint32_t crc32(std::span<const uint8_t> bytes, uint32_t crc = 0);

}  // namespace kiln
