// What a Program holds (shared by program.cc and session.cc).
#pragma once

#include <memory>

#include "ir/graph.h"
#include "kiln/kiln.h"
#include "runtime/executable.h"

namespace kiln {

struct Program::Impl {
  std::unique_ptr<runtime::Executable> exec;  // compiled program with engines loaded
  const ir::Module& module() const { return exec->program().module; }
  std::vector<TensorSpec> inputs, outputs, buffers, weights;
  std::vector<SymbolInfo> symbols;
  std::vector<std::string> mutated;
  std::vector<SegmentInfo> segments;
};

}  // namespace kiln
