// Text form of the IR, for dumps (--print-after), inspect and pass tests.
//
//   graph(%x: float32[s0, 3], %w: float32[4, 3]) {
//     %y: float32[s0, 4] = aten.linear.default(input=%x, weight=%w)
//     %n: symint = aten.sym_size.int(self=%x, dim=0)
//     return (%y)
//   }
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.h"

namespace kiln::ir {

std::string print_graph(const Graph& g);
// Parses what print_graph writes. Errors name the line and column.
Expected<Graph> parse_graph(std::string_view text);
// Structural equality: same ops, attributes, wiring and types (names ignored).
bool graphs_equal(const Graph& a, const Graph& b, std::string* why = nullptr);

}  // namespace kiln::ir
