#include "base/sha256.h"

#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace kiln {

Sha256Digest sha256(std::span<const uint8_t> bytes) {
  Sha256Digest d{};
  unsigned int n = 0;
  // EVP_Digest fails only when memory runs out; a zero digest then names nothing that exists.
  if (EVP_Digest(bytes.data(), bytes.size(), d.data(), &n, EVP_sha256(), nullptr) != 1) d.fill(0);
  return d;
}

std::string hex(std::span<const uint8_t> digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(digest.size() * 2);
  for (uint8_t b : digest) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

std::string content_digest(std::span<const uint8_t> bytes) {
  if (bytes.size() <= kContentPiece) return hex(sha256(bytes));
  const size_t pieces = (bytes.size() + kContentPiece - 1) / kContentPiece;
  std::vector<uint8_t> list(pieces * 32 + 8);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < pieces; i = next++) {
      const size_t start = i * kContentPiece;
      const Sha256Digest d = sha256(bytes.subspan(start, std::min(kContentPiece, bytes.size() - start)));
      std::copy(d.begin(), d.end(), list.begin() + static_cast<std::ptrdiff_t>(i * 32));
    }
  };
  const size_t threads = std::min<size_t>({pieces, std::max(1u, std::thread::hardware_concurrency()), 16});
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  uint64_t length = bytes.size();
  for (int k = 0; k < 8; ++k) list[pieces * 32 + static_cast<size_t>(k)] = static_cast<uint8_t>(length >> (8 * k));
  return hex(sha256(list));
}

}  // namespace kiln
