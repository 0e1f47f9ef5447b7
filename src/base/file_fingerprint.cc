#include "base/file_fingerprint.h"

#include <sys/stat.h>

namespace kiln {

std::string file_fingerprint(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return "";
  return path + " (" + std::to_string(st.st_size) + " bytes, modified " + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec) + ", inode " + std::to_string(st.st_ino) + ")";
}

}  // namespace kiln
