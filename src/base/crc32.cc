#include "base/crc32.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <thread>
#include <vector>

namespace kiln {

namespace {

constexpr uint32_t kPolynomial = 0xEDB88320u;  // 0x04C11DB7 bit-reversed

// Slicing by 8: table[0] is the classic byte-at-a-time table; table[k][b] is
// the CRC contribution of byte b followed by k zero bytes, so eight bytes are
// folded in with eight independent lookups.
using CrcTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr CrcTables make_tables() {
  CrcTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1u) ? kPolynomial : 0u);
    t[0][b] = c;
  }
  for (size_t k = 1; k < t.size(); ++k)
    for (size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  return t;
}

// Built at compile time: constant-initialized, no static constructor and no
// first-use race.
constexpr CrcTables kTables = make_tables();

inline uint32_t load_le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

// The CRC of `bytes` continuing from `crc`, on this thread.
uint32_t crc32_serial(std::span<const uint8_t> bytes, uint32_t crc) {
  const auto& t = kTables;
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  uint32_t c = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    const uint32_t lo = c ^ load_le32(p);
    const uint32_t hi = load_le32(p + 4);
    c = t[7][lo & 0xFFu] ^ t[6][(lo >> 8) & 0xFFu] ^ t[5][(lo >> 16) & 0xFFu] ^ t[4][lo >> 24] ^ t[3][hi & 0xFFu] ^
        t[2][(hi >> 8) & 0xFFu] ^ t[1][(hi >> 16) & 0xFFu] ^ t[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) c = (c >> 8) ^ t[0][(c ^ *p) & 0xFFu];
  return ~c;
}

// a(x) * b(x) modulo the polynomial, in the reflected representation (bit 31
// is the coefficient of x^0, bit 0 that of x^31).
constexpr uint32_t multiply_mod(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1u) ? (b >> 1) ^ kPolynomial : b >> 1;  // b * x
  }
  return product;
}

// x^(2^k) modulo the polynomial for k = 0..31; x's multiplicative order
// divides 2^32 - 1, so x^(2^(k + 32)) = x^(2^k) and 32 entries serve every k.
using PowerTable = std::array<uint32_t, 32>;
constexpr PowerTable make_powers() {
  PowerTable p{};
  p[0] = 1u << 30;  // x^1
  for (size_t k = 1; k < p.size(); ++k) p[k] = multiply_mod(p[k - 1], p[k - 1]);
  return p;
}
constexpr PowerTable kPowers = make_powers();

}  // namespace

uint32_t crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  // x^(8 * length_b): the product of x^(2^k) over the set bits k of 8 * length_b.
  uint32_t power = 1u << 31;  // x^0
  for (unsigned k = 3; length_b != 0; length_b >>= 1, ++k)
    if (length_b & 1u) power = multiply_mod(kPowers[k & 31u], power);
  return multiply_mod(power, crc_a) ^ crc_b;
}

uint32_t crc32(std::span<const uint8_t> bytes, uint32_t crc) {
  constexpr size_t kPiece = size_t{4} << 20;
  const size_t pieces = std::min<size_t>({bytes.size() / kPiece, std::max(1u, std::thread::hardware_concurrency()), 16});
  if (pieces < 2) return crc32_serial(bytes, crc);
  std::vector<uint32_t> crcs(pieces);
  std::vector<size_t> starts(pieces + 1);
  for (size_t i = 0; i <= pieces; ++i) starts[i] = bytes.size() / pieces * i;
  starts[pieces] = bytes.size();
  auto piece = [&](size_t i) { crcs[i] = crc32_serial(bytes.subspan(starts[i], starts[i + 1] - starts[i]), 0); };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < pieces; ++i) threads.emplace_back(piece, i);
  piece(0);
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < pieces; ++i) crc = crc32_combine(crc, crcs[i], starts[i + 1] - starts[i]);
  return crc;
}

}  // namespace kiln
