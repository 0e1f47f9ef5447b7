// The exported program's JSON (graph, signature, symbols) into the IR.
#include <string_view>

#include "frontend/pt2_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto m = kiln::frontend::parse_exported_program_json(std::string_view(reinterpret_cast<const char*>(data), size),
                                                       "fuzz.json");
  if (m) (void)m->graph.verify();
  return 0;
}
