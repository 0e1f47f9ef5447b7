// The zip reader: central directory, local headers, stored entries, CRCs.
#include "frontend/zip_reader.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto zip = kiln::frontend::ZipArchive::from_bytes(kiln::fuzz::storage_of(data, size), "fuzz.zip");
  if (!zip) return 0;
  for (const auto& e : zip->entries()) {
    auto bytes = zip->read(e);
    if (bytes && !bytes->empty()) (void)(*bytes)[bytes->size() - 1];
  }
  return 0;
}
