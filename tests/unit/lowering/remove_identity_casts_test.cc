#include <gtest/gtest.h>

#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

using testing::expect_rewrite;

TEST(RemoveIdentityCasts, CastsToTheSameDtypeDisappear) {
  expect_rewrite(R"(graph(%x: float32[2, 3], %y: float32[2, 3]) {
  %a: float32[2, 3] = aten.to.dtype(self=%x, dtype=dtype.float32)
  %b: float32[2, 3] = aten._to_copy.default(self=%a, dtype=dtype.float32)
  %c: float32[2, 3] = aten.type_as.default(self=%b, other=%y)
  %d: float32[2, 3] = aten.mul.Tensor(self=%c, other=%y)
  return (%d)
}
)",
                 remove_identity_casts, R"(graph(%x: float32[2, 3], %y: float32[2, 3]) {
  %d: float32[2, 3] = aten.mul.Tensor(self=%x, other=%y)
  return (%d)
}
)");
}

TEST(RemoveIdentityCasts, RealConversionsAndOutputsStay) {
  // A real conversion, a copy that names a device and a cast that is a graph output.
  expect_rewrite(R"(graph(%x: float32[2, 3]) {
  %a: float16[2, 3] = aten.to.dtype(self=%x, dtype=dtype.float16)
  %b: float32[2, 3] = aten._to_copy.default(self=%x, dtype=dtype.float32, device=device("cpu"))
  %c: float32[2, 3] = aten.to.dtype(self=%x, dtype=dtype.float32)
  return (%a, %b, %c)
}
)",
                 remove_identity_casts, nullptr);
}

}  // namespace
}  // namespace kiln::lowering
