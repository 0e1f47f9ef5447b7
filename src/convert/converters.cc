// The built-in converters. Most ATen ops become one layer with the same op and
// attributes (the engine's layer set is the lowered op set); a few become no
// layer at all (identities in inference), and a few can never be in an engine.
#include <mutex>

#include "convert/registry.h"

namespace kiln::convert {

namespace {

Status convert_as_layer(const ir::Node& node, ConversionContext& ctx) {
  KILN_ASSIGN_OR_RETURN(std::vector<ir::NamedArg> args, ctx.map_args(node));
  KILN_ASSIGN_OR_RETURN(ir::Node * layer, ctx.add_layer(node.op, std::move(args), node));
  (void)layer;
  return Status::ok();
}

// In inference these return their input: the output is the input's layer value.
Status convert_as_identity(const ir::Node& node, ConversionContext& ctx) {
  const ir::Arg* a = node.args.empty() ? nullptr : &node.args[0].value;
  const auto* in = a ? std::get_if<ir::Value*>(a) : nullptr;
  if (in == nullptr || node.outputs.size() != 1 || (*in)->type.dtype != node.outputs[0]->type.dtype)
    return convert_as_layer(node, ctx);
  ir::Value* v = ctx.value(*in);
  if (v == nullptr) return internal_error(node.describe() + ": operand is not available in the engine");
  ctx.map(node.outputs[0], v);
  return Status::ok();
}

// index_copy into a KV cache buffer becomes kiln.cache_write (written in
// place, the engine output aliasing the cache input) when the node at hand is
// eligible; otherwise an ordinary index_copy whose result is copied back.
Status convert_index_copy(const ir::Node& node, ConversionContext& ctx) {
  const ir::Arg* self = node.find("self");
  const ir::Arg* dim = node.find("dim");
  const auto* cache = self ? std::get_if<ir::Value*>(self) : nullptr;
  const auto* d = dim ? std::get_if<int64_t>(dim) : nullptr;
  if (cache == nullptr || d == nullptr || node.outputs.size() != 1 ||
      !in_place_write_refusal(node, *cache, *d, ctx).empty())
    return convert_as_layer(node, ctx);
  KILN_ASSIGN_OR_RETURN(std::vector<ir::NamedArg> args, ctx.map_args(node));
  KILN_ASSIGN_OR_RETURN(ir::Node * layer, ctx.add_layer(ir::OpKind::kCacheWrite, std::move(args), node));
  (void)layer;
  return Status::ok();
}

// index_put(cache, [None, None, positions], values) — the form the ATen
// dialect gives a KV-cache write — becomes kiln.cache_write when eligible:
// one int64 position index on dim 2 of a 4-d cache, values exactly the rows
// written (no broadcast), no accumulation.
Status convert_index_put(const ir::Node& node, ConversionContext& ctx) {
  const ir::Arg* self = node.find("self");
  const ir::Arg* indices = node.find("indices");
  const ir::Arg* values = node.find("values");
  const ir::Arg* accumulate = node.find("accumulate");
  const auto* cache = self ? std::get_if<ir::Value*>(self) : nullptr;
  const auto* idx = indices ? std::get_if<std::vector<std::optional<ir::Value*>>>(indices) : nullptr;
  const auto* src = values ? std::get_if<ir::Value*>(values) : nullptr;
  const bool accumulates = accumulate && std::get_if<bool>(accumulate) && *std::get_if<bool>(accumulate);
  const bool position_index = idx && idx->size() == 3 && !(*idx)[0] && !(*idx)[1] && (*idx)[2] &&
                              (*(*idx)[2])->type.dtype == DType::Int64 && (*(*idx)[2])->type.sizes.size() == 1;
  if (!cache || !src || !position_index || accumulates || node.outputs.size() != 1 ||
      (*src)->type.dtype != (*cache)->type.dtype || (*cache)->type.sizes.size() != 4)
    return convert_as_layer(node, ctx);
  const ir::Value* pos = *(*idx)[2];
  const auto& cs = (*cache)->type.sizes;
  const auto& vs = (*src)->type.sizes;
  // The rows written, [B, H, n, D]: values must be exactly that, or that without leading 1s
  // (torch's cache[:, :, pos] = v gives v as [H, n, D] when B is 1).
  std::vector<ir::Dim> rows = {cs[0], cs[1], pos->type.sizes[0], cs[3]};
  auto same = [](const ir::Dim& a, const ir::Dim& b) { return a.to_string() == b.to_string(); };
  bool fits = vs.size() <= 4 && !vs.empty();
  for (size_t d = 0; fits && d < 4; ++d) {
    const size_t from_end = 3 - d;
    if (from_end < vs.size())
      fits = same(vs[vs.size() - 1 - from_end], rows[d]);
    else
      fits = rows[d].is_static() && rows[d].value == 1;
  }
  if (!fits || !in_place_write_refusal(node, *cache, 2, ctx).empty()) return convert_as_layer(node, ctx);
  ir::Value* c = ctx.value(*cache);
  ir::Value* p = ctx.value(pos);
  ir::Value* v = ctx.value(*src);
  if (!c || !p || !v) return internal_error(node.describe() + ": an operand is not available in the engine");
  if (vs.size() != 4) {  // give the rows their four dims
    std::vector<int64_t> shape;
    for (const ir::Dim& d : rows) {
      if (!d.is_static()) return convert_as_layer(node, ctx);
      shape.push_back(d.value);
    }
    ir::TensorType t = (*src)->type;
    t.sizes = rows;
    ir::Node* r =
        ctx.network().graph.add_node(ir::OpKind::kReshape, node.name + "_rows", {{"self", v}, {"shape", shape}},
                                     {{v->name + "_rows", t}}, ir::ValueKind::kTensor);
    v = r->outputs[0];
  }
  std::vector<ir::NamedArg> args = {{"self", c}, {"dim", int64_t{2}}, {"index", p}, {"source", v}};
  KILN_ASSIGN_OR_RETURN(ir::Node * layer, ctx.add_layer(ir::OpKind::kCacheWrite, std::move(args), node));
  (void)layer;
  return Status::ok();
}

Capability never(const char* why) { return Capability::no(why); }

Capability check_nonzero(const ir::Node&, const engine::TargetInfo&) {
  return never("output shape depends on tensor data (the number of nonzero elements)");
}
Capability check_item(const ir::Node&, const engine::TargetInfo&) {
  return never("reads a tensor element on the host (.item()); the result steers shapes or control flow");
}
Capability check_engine_internal(const ir::Node&, const engine::TargetInfo&) {
  return never("an engine-internal layer, made by converters and engine builders only");
}

bool bool_attr(const ir::Node& n, std::string_view name, bool fallback) {
  const ir::Arg* a = n.find(name);
  if (a == nullptr) return fallback;
  if (const bool* b = std::get_if<bool>(a)) return *b;
  return fallback;
}

Capability check_dropout(const ir::Node& n, const engine::TargetInfo&) {
  if (bool_attr(n, "train", false)) return never("dropout in training mode is random; engines are deterministic");
  return Capability::yes();
}

Capability check_boolean_index(const ir::Node& n, const engine::TargetInfo&) {
  const ir::Arg* a = n.find("indices");
  if (const auto* idx = a ? std::get_if<std::vector<std::optional<ir::Value*>>>(a) : nullptr)
    for (const auto& v : *idx)
      if (v && ((*v)->type.dtype == DType::Bool || (*v)->type.dtype == DType::UInt8))
        return never("boolean-mask indexing: output size depends on tensor data");
  return Capability::yes();
}

}  // namespace

void register_builtin_converters(ConverterRegistry& r) {
  // Every op of ops.def gets the default converter: one layer, same op.
#define KILN_OP(Enum, target, kind) r.add({ir::OpKind::k##Enum, nullptr, convert_as_layer});
#define KILN_INPLACE_OP(Enum, target, functional, first)                      \
  r.add({ir::OpKind::k##Enum,                                                 \
         [](const ir::Node&, const engine::TargetInfo&) {                     \
           return Capability::no("in-place op left after functionalization"); \
         },                                                                   \
         convert_as_layer});
#include "ir/ops.def"
#undef KILN_OP
#undef KILN_INPLACE_OP

  // Then the ops that differ.
  r.add({ir::OpKind::kNonzero, check_nonzero, convert_as_layer});
  r.add({ir::OpKind::kLocalScalarDense, check_item, convert_as_layer});
  r.add({ir::OpKind::kIndexTensor, check_boolean_index, convert_as_layer});
  r.add({ir::OpKind::kFusedElementwise, check_engine_internal, convert_as_layer});
  r.add({ir::OpKind::kRotary, check_engine_internal, convert_as_layer});
  r.add({ir::OpKind::kCacheWrite, check_engine_internal, convert_as_layer});
  r.add({ir::OpKind::kIndexCopy, nullptr, convert_index_copy});
  r.add({ir::OpKind::kIndexPut, nullptr, convert_index_put});
  r.add({ir::OpKind::kDropout, check_dropout, convert_as_identity});
  r.add({ir::OpKind::kDetach, nullptr, convert_as_identity});
  r.add({ir::OpKind::kLiftFreshCopy, nullptr, convert_as_identity});
}

const ConverterRegistry& builtin_converters() {
  static const ConverterRegistry* registry = [] {
    auto* r = new ConverterRegistry();
    register_builtin_converters(*r);
    return r;
  }();
  return *registry;
}

}  // namespace kiln::convert
