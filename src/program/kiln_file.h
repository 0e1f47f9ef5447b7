// The .kiln program file: a section file (base/section_file.h) with magic
// "KILNPROG" and these sections:
//   program   JSON: format, source, torch version, dialect, device, the
//             signature (input/output specs), symbol ranges, the segments
//             (kind, backend, node indices, input/output value ids, fallback
//             reasons, plan section) and the weight table (name, dtype,
//             sizes, offset and size in `weights`)
//   graph     the lowered graph as IR text; segments refer to its node
//             indices and value ids
//   weights   every weight and buffer initial value the program uses, once,
//             each contiguous and 64-byte aligned
//   plan.<i>  the engine plan of segment i
// A program with several methods (prefill and decode, ...) holds method 0 as
// above, its "program" JSON naming every method ("methods"), and method k > 0
// in sections "method<k>.program", "method<k>.graph" and "method<k>.plan.<i>".
// All methods share the one weights section: a weight of the same name,
// dtype, sizes and bytes is stored once.
// Every offset, size, count and reference is checked on load; weights are
// borrowed from the mapped file, not copied.
#pragma once

#include <span>
#include <string>

#include "program/compiled_program.h"

namespace kiln::program {

constexpr std::string_view kProgramMagic = "KILNPROG";
constexpr uint32_t kProgramVersion = 1;

// A method to save: its name and its compiled program.
struct MethodRef {
  std::string name;
  const CompiledProgram* program = nullptr;
};

// One method, named "forward".
Expected<std::vector<uint8_t>> serialize_program(const CompiledProgram& p);
Expected<std::vector<uint8_t>> serialize_program(std::span<const MethodRef> methods);
Status save_program(const CompiledProgram& p, const std::string& path);
Status save_program(std::span<const MethodRef> methods, const std::string& path);

// Parses and validates a .kiln image. `keeper` keeps `bytes` alive for the
// weights borrowed from it (null: weights are copied). `what` names the file.
Expected<CompiledProgram> parse_program(std::span<const uint8_t> bytes, const std::shared_ptr<void>& keeper,
                                        std::string_view what);
Expected<CompiledProgram> load_program(const std::string& path);
// Every method of a .kiln image, in file order (method 0 first).
Expected<std::vector<CompiledMethod>> parse_program_methods(std::span<const uint8_t> bytes,
                                                            const std::shared_ptr<void>& keeper,
                                                            std::string_view what);
Expected<std::vector<CompiledMethod>> load_program_methods(const std::string& path);

}  // namespace kiln::program
