#include "base/sha256.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace kiln {
namespace {

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Sha256, MatchesTheStandardsTestVectors) {
  EXPECT_EQ(hex(sha256(bytes_of(""))), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256(bytes_of("abc"))), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256(bytes_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex(sha256(bytes_of(std::string(1000000, 'a')))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(ContentDigest, SmallContentIsPlainSha256) {
  const std::string s(kContentPiece, 'x');
  EXPECT_EQ(content_digest(bytes_of(s)), hex(sha256(bytes_of(s))));
  EXPECT_EQ(content_digest(bytes_of("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ContentDigest, LargeContentIsTheDigestOfItsPiecesDigestsAndLength) {
  std::vector<uint8_t> data(2 * kContentPiece + 12345);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  const std::span<const uint8_t> all(data);
  // The definition, written out one piece at a time on this thread.
  std::vector<uint8_t> list;
  for (size_t start = 0; start < data.size(); start += kContentPiece) {
    const Sha256Digest d = sha256(all.subspan(start, std::min(kContentPiece, data.size() - start)));
    list.insert(list.end(), d.begin(), d.end());
  }
  for (int k = 0; k < 8; ++k) list.push_back(static_cast<uint8_t>(uint64_t{data.size()} >> (8 * k)));
  const std::string digest = content_digest(all);
  EXPECT_EQ(digest, hex(sha256(list)));
  EXPECT_NE(digest, hex(sha256(all)));

  // One changed byte in any piece, or one byte less, changes it.
  for (size_t at : {size_t{0}, kContentPiece + 7, data.size() - 1}) {
    data[at] ^= 1;
    EXPECT_NE(content_digest(data), digest) << "byte " << at;
    data[at] ^= 1;
  }
  EXPECT_NE(content_digest(all.first(data.size() - 1)), digest);
  EXPECT_EQ(content_digest(all), digest);
}

TEST(FileContentDigest, EqualsTheDigestOfTheBytesAndNamesAMissingFile) {
  const std::string path = ::testing::TempDir() + "kiln_digest_" + std::to_string(::getpid());
  for (size_t n : {size_t{0}, size_t{100}, 3 * kContentPiece + 1}) {
    std::vector<uint8_t> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(i * 7 + (i >> 12));
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(n));
    auto d = file_content_digest(path);
    ASSERT_TRUE(d) << d.status().message();
    EXPECT_EQ(*d, content_digest(data)) << n << " bytes";
  }
  std::remove(path.c_str());
  auto missing = file_content_digest(path);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos) << missing.status().message();
}

}  // namespace
}  // namespace kiln
