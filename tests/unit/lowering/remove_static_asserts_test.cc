#include <gtest/gtest.h>

#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

using testing::expect_rewrite;

TEST(RemoveStaticAsserts, ChecksTheTypesDecideAreDropped) {
  expect_rewrite(R"(graph(%x: float32[2, 3]) {
  aten._assert_tensor_metadata.default(a=%x, dtype=dtype.float32, device=device("cpu"), layout=7)
  %y: float32[2, 3] = aten.relu.default(self=%x)
  aten._assert_tensor_metadata.default(a=%y, size=None, stride=None, dtype=None)
  return (%y)
}
)",
                 remove_static_asserts, R"(graph(%x: float32[2, 3]) {
  %y: float32[2, 3] = aten.relu.default(self=%x)
  return (%y)
}
)");
}

TEST(RemoveStaticAsserts, ACheckThatCanFailStays) {
  ir::Module m = testing::module_from(R"(graph(%x: float32[2, 3]) {
  aten._assert_tensor_metadata.default(a=%x, dtype=dtype.int64)
  %y: float32[2, 3] = aten.relu.default(self=%x)
  return (%y)
}
)");
  const std::string before = ir::print_graph(m.graph);
  ASSERT_TRUE(remove_static_asserts(m).is_ok());
  EXPECT_EQ(ir::print_graph(m.graph), before);
}

}  // namespace
}  // namespace kiln::lowering
