// The program's results in kiln's one order (invariant 4): buffer mutations
// first, in the program's buffer order, then user outputs as exported. The
// order itself is defined once, by ir::OutputOrder.
#include "lowering/pass.h"

namespace kiln::lowering {

Status order_outputs(ir::Module& m) {
  ir::reorder_outputs(m);
  return m.graph.verify();
}

}  // namespace kiln::lowering
