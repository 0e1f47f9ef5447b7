// A lowering pass rewrites a module in place and returns a Status.
#pragma once

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::lowering {

// Rewrites in-place ops (add_, copy_ into a view of a buffer, index_copy_, ...)
// into functional ops, and turns every write into a program buffer into an
// explicit buffer_mutation output. Afterwards the graph outputs are: buffer
// mutations in the program's buffer order, then user outputs.
Status functionalize(ir::Module& m);

// Evaluates, once, every node that depends only on parameters and tensor
// constants; results become tensor constants named "_folded.<value>".
Status fold_constants(ir::Module& m);

// Removes nodes whose results are never used (run-time checks are kept).
Status eliminate_dead_code(ir::Module& m);

}  // namespace kiln::lowering
