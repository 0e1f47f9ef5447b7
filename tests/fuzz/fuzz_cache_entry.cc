// A disk-cache entry: section file, key and plan sections, key comparison.
#include <string>

#include "fuzz_common.h"
#include "program/engine_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The key the seeds were written with: a real entry parses, any damage is refused.
  static const std::string key = "kiln fuzz seed key";
  (void)kiln::program::parse_cache_entry({data, size}, key, "fuzz.kce");
  return 0;
}
