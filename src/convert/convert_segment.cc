#include <map>

#include "convert/registry.h"

namespace kiln::convert {

Expected<engine::Network> convert_segment(const ir::Module& m, const partition::Segment& segment,
                                          const ConverterRegistry& registry, const engine::TargetInfo& target) {
  if (segment.kind != partition::SegmentKind::kEngine) return internal_error("convert_segment: not an engine segment");
  engine::Network net;
  ConversionContext ctx(net, m);

  std::map<const ir::Value*, size_t> input_index;
  for (size_t i = 0; i < m.graph.inputs().size(); ++i) input_index[m.graph.inputs()[i]] = i;

  for (const ir::Value* v : segment.inputs) {
    ir::Value* in = net.graph.add_input(v->name, v->kind, v->type);
    in->sym = v->sym;
    ctx.map(v, in);
  }
  net.num_inputs = segment.inputs.size();
  for (const ir::Value* v : segment.constants) {
    auto it = input_index.find(v);
    if (it == input_index.end() || it->second >= m.input_specs.size())
      return internal_error("segment constant '" + v->name + "' is not a graph input with a signature entry");
    ctx.map(v, net.graph.add_input(v->name, v->kind, v->type));
    net.constant_names.push_back(m.input_specs[it->second].target);
  }
  for (const ir::Node* n : segment.nodes) {
    const Converter* c = registry.find(n->op);
    if (c == nullptr) return unsupported(n->describe() + ": no converter");
    if (Capability cap = registry.check(*n, target); !cap.supported)
      return unsupported(n->describe() + ": cannot go into a '" + target.backend + "' engine: " + cap.reason);
    KILN_TRY(c->convert(*n, ctx));
  }
  for (const ir::Value* v : segment.outputs) {
    ir::Value* out = ctx.value(v);
    if (out == nullptr) return internal_error("segment output '" + v->name + "' was not produced by its segment");
    net.graph.outputs().push_back(out);
  }
  KILN_TRY(net.verify());
  return net;
}

}  // namespace kiln::convert
