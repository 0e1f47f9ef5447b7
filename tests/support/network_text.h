// Engine networks written as IR text, for engine and backend tests.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/network.h"
#include "ir/printer.h"

namespace kiln::testing {

// Parses `text` into a network whose first `num_inputs` graph inputs (all of
// them when not given) are engine inputs and the rest constants named
// `constants`.
inline engine::Network network_from(std::string_view text, std::optional<size_t> num_inputs = std::nullopt,
                                    std::vector<std::string> constants = {}) {
  engine::Network net;
  auto g = ir::parse_graph(text);
  EXPECT_TRUE(g.has_value()) << g.status().message();
  if (g.has_value()) net.graph = std::move(*g);
  net.num_inputs = num_inputs.value_or(net.graph.inputs().size());
  net.constant_names = std::move(constants);
  return net;
}

}  // namespace kiln::testing
