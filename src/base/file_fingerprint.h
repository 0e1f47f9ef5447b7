// A file told apart from the file it was before without reading it: its
// path, size, modification time (nanoseconds) and inode. What cache keys use
// for files too large to hash on every use (kiln's own binary, libraries).
#pragma once

#include <string>

namespace kiln {

// "PATH (N bytes, modified S.NS, inode I)", or empty when `path` is empty or
// cannot be stat'ed.
std::string file_fingerprint(const std::string& path);

}  // namespace kiln
