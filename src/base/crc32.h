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
// Inputs of several MiB are split into pieces checksummed on several threads
// and joined with crc32_combine (the result is the same).
uint32_t crc32(std::span<const uint8_t> bytes, uint32_t crc = 0);

// The CRC-32 of a followed by b, from crc_a = crc32(a), crc_b = crc32(b) and
// b's length in bytes, without reading a or b (polynomial arithmetic modulo
// the CRC polynomial: crc_a times x^(8 * length_b), plus crc_b).
uint32_t crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

}  // namespace kiln
