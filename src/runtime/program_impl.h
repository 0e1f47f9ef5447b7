// What a Program holds (shared by program.cc and session.cc).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>

#include "ir/graph.h"
#include "kiln/runtime.h"
#include "runtime/executable.h"

namespace kiln {

using program::profile_method_name;

struct Program::Impl {
  std::string method_name = "forward";
  // The program's other methods (each a Program of one method); empty in those.
  std::vector<std::unique_ptr<Program>> others;
  std::unique_ptr<runtime::Executable> exec;  // compiled program with engines loaded
  const ir::Module& module() const { return exec->program().module; }
  std::vector<TensorSpec> inputs, outputs, buffers, weights;
  std::vector<SymbolInfo> symbols;
  std::vector<std::string> mutated;
  std::vector<std::string> mutated_inputs;  // user inputs written in place (user_input_mutation)
  std::vector<SegmentInfo> segments;
  // Buffers no node reads any more: lowering folded them (read-only buffers
  // such as batch-norm statistics are frozen into the weights), so setting
  // them would change nothing.
  std::set<std::string, std::less<>> unread_buffers;
  // Other names of this program's tensors, every method's (Program::aliases).
  std::map<std::string, std::string, std::less<>> aliases;
};

inline const Program::Impl& program_impl(const Program& p) { return *p.impl_; }

// A program of the methods the compiler compiled (their engines loaded
// unless `load_engines` is false); `what` names it in messages.
Expected<std::shared_ptr<const Program>> assemble_program(std::vector<program::CompiledMethod> methods,
                                                          const std::string& what, bool load_engines);

}  // namespace kiln
