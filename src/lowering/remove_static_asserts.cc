// Removes run-time dtype checks that the IR's types already decide.
//
// torch.export records aten._assert_tensor_metadata(a, dtype=...) around casts
// and norms. kiln's check tests only the dtype, and the IR types every value
// statically, so a check whose dtype matches the value's type can never fail.
// Left in, such checks read intermediate values of patterns (e.g. inside an
// RMS norm) and keep them from being fused.
#include <algorithm>

#include "lowering/pass.h"

namespace kiln::lowering {

namespace {

bool decided_statically(const ir::Node& n) {
  if (n.op != ir::OpKind::kAssertTensorMetadata) return false;
  const ir::Arg* a = n.find("a");
  const auto* v = a ? std::get_if<ir::Value*>(a) : nullptr;
  if (!v || (*v)->kind != ir::ValueKind::kTensor) return false;
  const ir::Arg* dtype = n.find("dtype");
  if (!dtype || std::holds_alternative<ir::NoneArg>(*dtype)) return true;
  const auto* d = std::get_if<DType>(dtype);
  return d && *d == (*v)->type.dtype;
}

}  // namespace

Status remove_static_asserts(ir::Module& m) {
  auto& nodes = m.graph.nodes();
  nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [](const auto& n) { return decided_statically(*n); }),
              nodes.end());
  return m.graph.verify();
}

}  // namespace kiln::lowering
