// Shared by the fuzz targets: bytes as kiln storage, and the input size cap.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>

#include "kiln/tensor.h"

namespace kiln::fuzz {

// A private copy of libFuzzer's bytes (loaders may keep storage alive).
inline std::shared_ptr<Storage> storage_of(const uint8_t* data, size_t size) {
  auto s = Storage::allocate(size);
  if (size > 0) std::memcpy(s->data(), data, size);
  return s;
}

}  // namespace kiln::fuzz
