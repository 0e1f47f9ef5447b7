// Which fallback nodes a call that keeps values on a device runs there.
#include "partition/partition.h"

namespace kiln::partition {

// x[mask]'s mask: the one index of an index.Tensor node, a bool tensor over self's leading dims.
const ir::Value* boolean_mask(const ir::Node& n) {
  if (n.op != ir::OpKind::kIndexTensor) return nullptr;
  const ir::Arg* a = n.find("indices");
  const ir::Value* m = nullptr;
  if (const auto* list = a ? std::get_if<std::vector<std::optional<ir::Value*>>>(a) : nullptr) {
    if (list->size() == 1 && (*list)[0]) m = *(*list)[0];
  } else if (const auto* plain = a ? std::get_if<std::vector<ir::Value*>>(a) : nullptr) {
    if (plain->size() == 1) m = (*plain)[0];
  }
  const ir::Value* self =
      n.find("self") && std::get_if<ir::Value*>(n.find("self")) ? std::get<ir::Value*>(*n.find("self")) : nullptr;
  if (!m || !self || m->kind != ir::ValueKind::kTensor || m->type.dtype != DType::Bool || m->type.sizes.empty() ||
      m->type.sizes.size() > self->type.sizes.size())
    return nullptr;
  return m;
}

// masked_select(self, mask) whose operands have the same sizes (no
// broadcasting): the elements of the flattened self under the flattened mask.
namespace {

bool same_size_masked_select(const ir::Node& n) {
  if (n.op != ir::OpKind::kMaskedSelect) return false;
  const ir::Arg* self = n.find("self");
  const ir::Arg* mask = n.find("mask");
  const ir::Value* x = self && std::get_if<ir::Value*>(self) ? std::get<ir::Value*>(*self) : nullptr;
  const ir::Value* m = mask && std::get_if<ir::Value*>(mask) ? std::get<ir::Value*>(*mask) : nullptr;
  if (!x || !m || m->type.dtype != DType::Bool || x->type.sizes.size() != m->type.sizes.size()) return false;
  for (size_t d = 0; d < x->type.sizes.size(); ++d)
    if (x->type.sizes[d].to_string() != m->type.sizes[d].to_string()) return false;
  return true;
}

}  // namespace

// unique (_unique2) or unique_consecutive of the flattened tensor (no dim):
// values, inverse and counts.
bool unique_of_flattened(const ir::Node& n) {
  if (n.outputs.size() != 3) return false;
  if (n.op == ir::OpKind::kUnique2) return true;
  if (n.op != ir::OpKind::kUniqueConsecutive) return false;
  const ir::Arg* dim = n.find("dim");
  return dim == nullptr || std::holds_alternative<ir::NoneArg>(*dim);
}

DeviceFallback device_fallback(const ir::Node& n) {
  if (n.op == ir::OpKind::kSymSize || n.op == ir::OpKind::kSymNumel || n.op == ir::OpKind::kAssertTensorMetadata)
    return DeviceFallback::kSizes;
  if (unique_of_flattened(n)) return DeviceFallback::kSelect;
  if (n.outputs.size() != 1) return DeviceFallback::kHost;
  if (n.op == ir::OpKind::kNonzero && n.operands().size() == 1) return DeviceFallback::kSelect;
  return boolean_mask(n) || same_size_masked_select(n) ? DeviceFallback::kSelect : DeviceFallback::kHost;
}

}  // namespace kiln::partition
