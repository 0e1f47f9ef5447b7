// Casts to the dtype a value already has become the value itself.
//
// Models written for mixed precision cast around norms and attention
// (x.to(torch.float32) ... .to(input_dtype)); exported in float32 those casts
// are identities that split patterns apart. After functionalization no value
// is ever written, so a copy and its source are interchangeable. A cast that
// is a graph output is kept, so outputs never alias inputs.
#include "lowering/pass.h"
#include "lowering/rewrite.h"

namespace kiln::lowering {

namespace {

// True when every argument of `n` other than those in `allowed` is absent or None.
bool only_args(const ir::Node& n, std::initializer_list<std::string_view> allowed) {
  for (const ir::NamedArg& a : n.args) {
    bool ok = std::holds_alternative<ir::NoneArg>(a.value);
    for (std::string_view name : allowed) ok = ok || a.name == name;
    if (a.name == "non_blocking" || a.name == "copy") ok = ok || std::holds_alternative<bool>(a.value);
    if (!ok) return false;
  }
  return true;
}

// The value `n` merely passes on, or null.
ir::Value* identity_source(const PatternContext& ctx, const ir::Node& n) {
  if (n.outputs.size() != 1) return nullptr;
  const ir::Value* out = n.outputs[0];
  ir::Value* self = PatternContext::tensor_arg(n, "self");
  if (!self || self->type.dtype != out->type.dtype || !same_sizes(self->type.sizes, out->type.sizes)) return nullptr;
  switch (n.op) {
    case ir::OpKind::kTo: return only_args(n, {"self", "dtype"}) ? self : nullptr;
    case ir::OpKind::kToCopy: return only_args(n, {"self", "dtype"}) ? self : nullptr;
    case ir::OpKind::kTypeAs: return only_args(n, {"self", "other"}) ? self : nullptr;
    default: return nullptr;
  }
}

Expected<bool> remove_cast(PatternContext& ctx, ir::Node& n) {
  ir::Value* src = identity_source(ctx, n);
  if (!src) return false;
  for (const ir::Value* o : ctx.graph().outputs())
    if (o == n.outputs[0]) return false;
  ctx.replace_uses(n.outputs[0], src);
  return true;
}

}  // namespace

Status remove_identity_casts(ir::Module& m) { return rewrite_to_fixed_point(m, remove_cast); }

}  // namespace kiln::lowering
