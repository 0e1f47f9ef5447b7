// Named tensors in files: the safetensors format (an 8-byte little-endian
// header length N, N bytes of UTF-8 JSON describing each tensor's dtype,
// shape and byte range plus optional string metadata, then the raw
// little-endian data). kiln reads inputs and writes outputs in it, and its
// fixtures record PyTorch's inputs and outputs in it.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {

struct SafetensorsFile {
  // Contiguous tensors, in the order of their data offsets (ties by name).
  // Each borrows the file's bytes without copying, except a tensor whose data
  // is not aligned to its element size, which is copied to aligned memory.
  std::vector<std::pair<std::string, Tensor>> tensors;
  // The "__metadata__" map (empty when the file has none).
  std::map<std::string, std::string> metadata;

  // The tensor called `name`, or nullptr. A linear search.
  const Tensor* find(std::string_view name) const;
};

// Maps the file at `path` and parses it; the tensors keep the mapping alive.
// The header must describe non-overlapping byte ranges inside the data
// section whose lengths match dtype and shape (gaps between ranges and
// unused bytes at the end are accepted).
// Errors: kNotFound / kIo when the file cannot be mapped, kFormat for a
// malformed file, kUnsupported for a valid dtype kiln lacks (U16, F8_E4M3, ...).
Expected<SafetensorsFile> read_safetensors(const std::string& path);

// Writes `tensors` to `path`, through a temporary file in the same folder
// that is renamed over `path` once complete.
//   tensors: name and tensor, in host memory; any layout (non-contiguous
//            tensors are written in row-major order). Names must be unique
//            and not "__metadata__".
//   metadata: written as "__metadata__" (in key order) when not empty.
// The layout follows Python's safetensors library: data sorted by descending
// dtype alignment (I64, F64, F32, I32, BF16, F16, I16, I8, U8, BOOL) then by
// name, compact JSON with "__metadata__" first, the header padded with spaces
// to a multiple of 8 bytes. For the same tensors and at most one metadata key
// the bytes match the library's.
// Errors: kInvalidArgument for bad names or undefined tensors, kIo when the
// file cannot be written.
Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace kiln
