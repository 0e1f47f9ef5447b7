#include "base/crc32.h"

#include <gtest/gtest.h>

#include <random>
#include <string_view>
#include <vector>

namespace kiln {
namespace {

std::vector<uint8_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

// The definition, one bit at a time: the reference the table-driven version
// must agree with.
uint32_t bitwise_crc32(std::span<const uint8_t> bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (uint8_t b : bytes) {
    c ^= b;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
  }
  return ~c;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(byte(gen));
  return v;
}

TEST(Crc32, StandardCheckValue) { EXPECT_EQ(crc32(bytes_of("123456789")), 0xCBF43926u); }

TEST(Crc32, EmptyIsZero) {
  EXPECT_EQ(crc32({}), 0u);
  // Continuing over nothing leaves a checksum unchanged.
  EXPECT_EQ(crc32({}, 0xCBF43926u), 0xCBF43926u);
}

TEST(Crc32, OtherKnownValues) {
  EXPECT_EQ(crc32(bytes_of("a")), 0xE8B7BE43u);
  EXPECT_EQ(crc32(bytes_of("The quick brown fox jumps over the lazy dog")), 0x414FA339u);
  EXPECT_EQ(crc32(std::vector<uint8_t>(32, 0)), 0x190A55ADu);
  EXPECT_EQ(crc32(std::vector<uint8_t>(32, 0xFF)), 0xFF6CAB0Bu);
}

TEST(Crc32, IncrementalEqualsOneShot) {
  const std::vector<uint8_t> data = random_bytes(1000, 7);
  const std::span<const uint8_t> all(data);
  const uint32_t whole = crc32(all);
  for (size_t cut = 0; cut <= 40; ++cut) {
    EXPECT_EQ(crc32(all.subspan(cut), crc32(all.first(cut))), whole) << "cut at " << cut;
  }
  // Many small uneven pieces.
  uint32_t c = 0;
  for (size_t pos = 0, step = 1; pos < all.size(); pos += step, step = step % 13 + 1) {
    c = crc32(all.subspan(pos, std::min(step, all.size() - pos)), c);
  }
  EXPECT_EQ(c, whole);
}

// Every length and start alignment around the 8-byte stride, then a large buffer.
TEST(Crc32, MatchesBitwiseReference) {
  const std::vector<uint8_t> data = random_bytes(1 << 20, 42);
  const std::span<const uint8_t> all(data);
  for (size_t start = 0; start < 8; ++start) {
    for (size_t len = 0; len <= 64; ++len) {
      const auto piece = all.subspan(start, len);
      ASSERT_EQ(crc32(piece), bitwise_crc32(piece)) << "start " << start << ", length " << len;
    }
  }
  EXPECT_EQ(crc32(all), bitwise_crc32(all));
  EXPECT_EQ(crc32(all.subspan(3, all.size() - 8)), bitwise_crc32(all.subspan(3, all.size() - 8)));
}

TEST(Crc32, CombineJoinsTwoChecksumsWithoutTheBytes) {
  const std::vector<uint8_t> data = random_bytes(5000, 11);
  const std::span<const uint8_t> all(data);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{1000}, size_t{4999}, size_t{5000}}) {
    const auto a = all.first(cut), b = all.subspan(cut);
    EXPECT_EQ(crc32_combine(crc32(a), crc32(b), b.size()), bitwise_crc32(all)) << "cut at " << cut;
  }
  // Zero bytes still shift the first checksum: 32 zeros after "123456789".
  std::vector<uint8_t> padded = bytes_of("123456789");
  padded.resize(padded.size() + 32, 0);
  EXPECT_EQ(crc32_combine(0xCBF43926u, crc32(std::vector<uint8_t>(32, 0)), 32), bitwise_crc32(padded));
}

// Large inputs are checksummed in pieces on several threads: the same value,
// from the start and continuing from an earlier checksum.
TEST(Crc32, LargeInputsInPiecesMatchTheReference) {
  const std::vector<uint8_t> data = random_bytes((size_t{37} << 20) + 13, 5);
  const std::span<const uint8_t> all(data);
  EXPECT_EQ(crc32(all), bitwise_crc32(all));
  EXPECT_EQ(crc32(all.subspan(100), crc32(all.first(100))), bitwise_crc32(all));
}

}  // namespace
}  // namespace kiln
