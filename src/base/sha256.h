// SHA-256 (OpenSSL's, linked statically), for content that a cache must
// never mistake for other content: a CRC catches accidents, not a file that
// was replaced by another valid one.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "kiln/status.h"

namespace kiln {

using Sha256Digest = std::array<uint8_t, 32>;

// The SHA-256 of `bytes` (FIPS 180-4); sha256("abc") begins ba7816bf.
Sha256Digest sha256(std::span<const uint8_t> bytes);

// The digest kiln names large content by, as 64 hex digits: SHA-256 of
// `bytes` when it is at most kContentPiece bytes long; otherwise SHA-256 of
// the concatenated SHA-256 digests of its kContentPiece-byte pieces (the last
// one shorter) followed by the total length as 8 little-endian bytes. The
// pieces are hashed on several threads, so 100 MB take milliseconds.
inline constexpr size_t kContentPiece = size_t{4} << 20;
std::string content_digest(std::span<const uint8_t> bytes);

// content_digest of the file at `path`, read piece by piece on several
// threads (pread, not a mapping: a file truncated while it is read is an
// error, not a SIGBUS). kNotFound / kIo naming the path otherwise.
Expected<std::string> file_content_digest(const std::string& path);

// Lower-case hex of a digest.
std::string hex(std::span<const uint8_t> digest);

}  // namespace kiln
