#include "base/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

namespace {

// The tree digest of `size` bytes whose piece i's digest `piece(i, out)` writes
// (false: that piece could not be read).
template <typename PieceDigest>
bool tree_digest(uint64_t size, PieceDigest&& piece, std::string& out) {
  const size_t pieces = static_cast<size_t>((size + kContentPiece - 1) / kContentPiece);
  std::vector<uint8_t> list(pieces * 32 + 8);
  std::atomic<size_t> next{0};
  std::atomic<bool> ok{true};
  auto work = [&] {
    for (size_t i = next++; i < pieces; i = next++) {
      Sha256Digest d{};
      if (!piece(i, d)) ok = false;
      std::copy(d.begin(), d.end(), list.begin() + static_cast<std::ptrdiff_t>(i * 32));
    }
  };
  const size_t threads = std::min<size_t>({pieces, std::max(1u, std::thread::hardware_concurrency()), 16});
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (int k = 0; k < 8; ++k) list[pieces * 32 + static_cast<size_t>(k)] = static_cast<uint8_t>(size >> (8 * k));
  out = hex(sha256(list));
  return ok;
}

}  // namespace

std::string content_digest(std::span<const uint8_t> bytes) {
  if (bytes.size() <= kContentPiece) return hex(sha256(bytes));
  std::string out;
  tree_digest(
      bytes.size(),
      [&](size_t i, Sha256Digest& d) {
        const size_t start = i * kContentPiece;
        d = sha256(bytes.subspan(start, std::min(kContentPiece, bytes.size() - start)));
        return true;
      },
      out);
  return out;
}

Expected<std::string> file_content_digest(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string why = path + ": cannot open it to digest: " + std::strerror(err);
    return err == ENOENT ? not_found(why) : io_error(why);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error(path + ": not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto read_piece = [&](uint64_t start, size_t n, std::vector<uint8_t>& buf) {
    buf.resize(n);
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd, buf.data() + done, n - done, static_cast<off_t>(start + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      done += static_cast<size_t>(r);
    }
    return true;
  };
  std::string out;
  bool ok = true;
  if (size <= kContentPiece) {
    std::vector<uint8_t> buf;
    ok = read_piece(0, static_cast<size_t>(size), buf);
    out = hex(sha256(buf));
  } else {
    ok = tree_digest(
        size,
        [&](size_t i, Sha256Digest& d) {
          thread_local std::vector<uint8_t> buf;
          const uint64_t start = uint64_t{i} * kContentPiece;
          if (!read_piece(start, static_cast<size_t>(std::min<uint64_t>(kContentPiece, size - start)), buf))
            return false;
          d = sha256(buf);
          return true;
        },
        out);
  }
  ::close(fd);
  if (!ok) return io_error(path + ": could not be read whole (it changed while it was digested?)");
  return out;
}

}  // namespace kiln
