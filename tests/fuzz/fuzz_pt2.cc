// A whole .pt2 archive: container checks, model JSON, weights and constants.
#include "frontend/pt2_loader.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto m = kiln::frontend::parse_pt2(kiln::fuzz::storage_of(data, size), "fuzz.pt2");
  if (m)
    for (const auto& [name, t] : m->weights)
      if (t.numel() > 0) (void)t.value_at(t.numel() - 1);  // every weight lies inside its bytes
  return 0;
}
