// A .kiln program: sections, every method's signature, graph, weights table,
// segments, and (through the buffer classification) every engine plan.
#include "fuzz_common.h"
#include "program/kiln_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto methods = kiln::program::parse_program_methods({data, size}, nullptr, "fuzz.kiln");
  if (!methods) return 0;
  for (const auto& m : *methods) {
    for (const auto& [name, t] : m.program.module.weights)
      if (t.numel() > 0) (void)t.value_at(t.numel() - 1);
    (void)kiln::program::classify_buffer_writes(m.program, "fuzz.kiln");
  }
  return 0;
}
