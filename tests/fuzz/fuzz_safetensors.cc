// safetensors: header JSON, dtypes, shapes, offsets.
#include "base/safetensors.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = kiln::base::parse_safetensors(kiln::fuzz::storage_of(data, size), "fuzz.safetensors");
  if (f)
    for (const auto& [name, t] : f->tensors)
      if (t.numel() > 0) (void)t.value_at(t.numel() - 1);
  return 0;
}
