// What a Program holds (shared by program.cc and session.cc).
#pragma once

#include "ir/graph.h"
#include "kiln/kiln.h"

namespace kiln {

struct Program::Impl {
  ir::Module module;  // lowered: functional, buffer mutations first
  std::vector<TensorSpec> inputs, outputs, buffers, weights;
  std::vector<SymbolInfo> symbols;
  std::vector<std::string> mutated;
};

}  // namespace kiln
