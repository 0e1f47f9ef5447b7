// Lists the files PyTorch wrote under tests/fixtures/torch<version>/.
#pragma once

#include <filesystem>
#include <string_view>
#include <vector>

namespace kiln::testing {

// Every fixture file whose extension is `extension` (e.g. ".pt2"), in all
// torch<version> folders; empty when the folder is absent.
inline std::vector<std::filesystem::path> fixture_files(std::string_view extension) {
  const std::filesystem::path root = std::filesystem::path(KILN_SOURCE_DIR) / "tests/fixtures";
  std::vector<std::filesystem::path> files;
  if (!std::filesystem::is_directory(root)) return files;
  for (const auto& d : std::filesystem::directory_iterator(root))
    if (d.is_directory() && d.path().filename().string().rfind("torch", 0) == 0)
      for (const auto& f : std::filesystem::directory_iterator(d.path()))
        if (f.path().extension() == extension) files.push_back(f.path());
  return files;
}

}  // namespace kiln::testing
