// Symbols whose range is one value become constants.
//
// A shape profile with min == max for a dynamic dimension (a decode step's one
// token, a fixed batch) fixes that symbol. Every size expression whose symbols
// are all fixed becomes a static size, and every symbolic scalar whose
// expression is then known becomes a number where it is used, so that static
// backends can build the nodes and dead-code elimination drops the nodes that
// computed those sizes at run time.
#include "lowering/pass.h"

namespace kiln::lowering {

Status specialize_symbols(ir::Module& m) {
  ir::SymBindings fixed;
  for (const auto& [name, r] : m.symbols)
    if (r.min == r.max) fixed[name] = r.min;
  if (fixed.empty()) return Status::ok();
  KILN_TRY(ir::specialize(m.graph, fixed));
  for (const auto& [name, value] : fixed) m.symbols.erase(name);
  return Status::ok();
}

}  // namespace kiln::lowering
