// aten.native_layer_norm whose saved mean and rstd are unused -> aten.layer_norm,
// and aten.native_group_norm likewise -> aten.group_norm.
//
// The ATen dialect spells every layer norm as native_layer_norm (every group
// norm as native_group_norm), which also returns the statistics for the
// backward pass; inference reads only output 0.
#include "lowering/pass.h"
#include "lowering/rewrite.h"

namespace kiln::lowering {

namespace {

// native_group_norm(input, weight, bias, N, C, HxW, group, eps): N, C and
// HxW follow from the input's sizes, so group_norm does without them.
Expected<bool> fuse_group(PatternContext& ctx, ir::Node& n) {
  if (n.outputs.size() != 3 || ctx.uses(n.outputs[1]) != 0 || ctx.uses(n.outputs[2]) != 0) return false;
  const ir::Arg* group = n.find("group");
  if (!group || !std::get_if<int64_t>(group)) return false;
  std::vector<ir::NamedArg> args{{"input", *n.find("input")}, {"num_groups", *group}};
  for (const char* name : {"weight", "bias", "eps"})
    if (const ir::Arg* a = n.find(name)) args.push_back({name, *a});
  ir::Node* gn = ctx.insert_before(&n, ir::OpKind::kGroupNorm, n.name, std::move(args), n.outputs[0]->type);
  gn->metadata = n.metadata;
  ctx.replace_uses(n.outputs[0], gn->outputs[0]);
  return true;
}

Expected<bool> fuse(PatternContext& ctx, ir::Node& n) {
  if (n.op == ir::OpKind::kNativeGroupNorm && n.find("input")) return fuse_group(ctx, n);
  if (n.op != ir::OpKind::kNativeLayerNorm || n.outputs.size() != 3) return false;
  if (ctx.uses(n.outputs[1]) != 0 || ctx.uses(n.outputs[2]) != 0) return false;
  std::vector<ir::NamedArg> args;
  for (const char* name : {"input", "normalized_shape", "weight", "bias", "eps"})
    if (const ir::Arg* a = n.find(name)) args.push_back({name, *a});
  ir::Node* ln = ctx.insert_before(&n, ir::OpKind::kLayerNorm, n.name, std::move(args), n.outputs[0]->type);
  ln->metadata = n.metadata;
  ctx.replace_uses(n.outputs[0], ln->outputs[0]);
  return true;
}

}  // namespace

Status fuse_layer_norm(ir::Module& m) { return rewrite_to_fixed_point(m, fuse); }

}  // namespace kiln::lowering
