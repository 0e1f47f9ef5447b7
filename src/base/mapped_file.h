// A whole file mapped into memory, privately: pages are read from the file on
// demand, and writes (copy-on-write) never reach the file. Tensors and
// Storages borrow the mapping and keep it alive through a shared_ptr.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kiln/status.h"

namespace kiln {

class MappedFile {
 public:
  // Maps the regular file at `path` (MAP_PRIVATE, PROT_READ | PROT_WRITE).
  //   path: the file to map; it is opened read-only and closed before returning.
  // Returns the mapping, or kNotFound (no such file) / kIo (any other refusal,
  // including a path that is not a regular file), naming the path and the
  // operating system's reason. An empty file gives an empty mapping
  // (data() == nullptr, size() == 0).
  //
  // If another process truncates the file while it is mapped, touching the
  // lost pages raises SIGBUS; kiln reads files that are not written under it.
  static Expected<std::shared_ptr<MappedFile>> open(const std::string& path);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  ~MappedFile();

  // First byte of the mapping (nullptr for an empty file). Writable: writes
  // stay private to this process.
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  // The path given to open(), for messages.
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, uint8_t* data, size_t size) : path_(std::move(path)), data_(data), size_(size) {}
  void unmap();

  std::string path_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kiln
