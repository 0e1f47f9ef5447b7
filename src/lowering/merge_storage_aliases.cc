// Tensors over one storage are one tensor: weights the archive stores in one
// blob (one path_name) with the same view (dtype, sizes, strides, offset)
// become one graph input, and their other names aliases of it.
//
// torch.export's default (non-strict) tracing of a module that holds tensors
// outside its registered buffers (transformers' static KV cache) lifts them as
// tensor constants beside the buffers over the same storage, and writes the
// constants. In PyTorch a write to either is a write to both; kept apart, the
// buffer a user reads would never change. The loader keeps one Storage per
// blob, so storage identity is the Storage object.
//
// The name kept is the one users read: a buffer's before a parameter's before
// a constant's, the first in input order among equals. Tensors that view one
// storage differently stay apart here; functionalize refuses a write to one
// of them (a write would have to reach the others, which kiln does not do).
#include <map>
#include <tuple>

#include "lowering/pass.h"

namespace kiln::lowering {

namespace {

int kind_rank(ir::InputSpec::Kind k) {
  switch (k) {
    case ir::InputSpec::Kind::kBuffer: return 0;
    case ir::InputSpec::Kind::kParameter: return 1;
    default: return 2;
  }
}

using ViewKey = std::tuple<const Storage*, DType, Shape, Shape, int64_t>;

}  // namespace

Status merge_storage_aliases(ir::Module& m) {
  ir::Graph& g = m.graph;
  if (m.input_specs.size() != g.inputs().size())
    return internal_error("module signature does not match its graph inputs");
  std::map<ViewKey, std::vector<size_t>> sets;  // one view of one storage -> input positions
  for (size_t i = 0; i < m.input_specs.size(); ++i) {
    const ir::InputSpec& s = m.input_specs[i];
    if (s.kind == ir::InputSpec::Kind::kUserInput) continue;
    auto it = m.weights.find(s.target);
    if (it == m.weights.end() || !it->second.defined()) continue;
    const Tensor& t = it->second;
    sets[{t.storage().get(), t.dtype(), t.sizes(), t.strides(), t.storage_offset()}].push_back(i);
  }
  std::vector<bool> drop(g.inputs().size(), false);
  for (auto& [key, members] : sets) {
    if (members.size() < 2) continue;
    size_t keep = members[0];
    for (size_t i : members)
      if (kind_rank(m.input_specs[i].kind) < kind_rank(m.input_specs[keep].kind)) keep = i;
    ir::Value* kept = g.inputs()[keep];
    const std::string& kept_name = m.input_specs[keep].target;
    for (size_t i : members) {
      if (i == keep) continue;
      ir::Value* other = g.inputs()[i];
      for (const auto& n : g.nodes()) n->replace_operand(other, kept);
      for (ir::Value*& o : g.outputs())
        if (o == other) o = kept;
      m.aliases[m.input_specs[i].target] = kept_name;
      m.weights.erase(m.input_specs[i].target);
      drop[i] = true;
    }
  }
  std::vector<ir::Value*> inputs;
  std::vector<ir::InputSpec> specs;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    if (drop[i]) continue;
    inputs.push_back(g.inputs()[i]);
    specs.push_back(m.input_specs[i]);
  }
  g.inputs() = std::move(inputs);
  m.input_specs = std::move(specs);
  // Explicit writes (the ATen dialect's buffer_mutation outputs) name the one
  // tensor; two writes of it by two names would race in PyTorch too.
  std::map<std::string, std::string> written;  // kept name -> the name the write used
  for (ir::OutputSpec& o : m.output_specs) {
    if (o.kind != ir::OutputSpec::Kind::kBufferMutation) continue;
    const std::string as_written = o.target;
    if (auto it = m.aliases.find(o.target); it != m.aliases.end()) o.target = it->second;
    auto [w, inserted] = written.emplace(o.target, as_written);
    if (!inserted)
      return unsupported(m.source + ": the program writes '" + w->second + "' and '" + as_written +
                         "', two names of one tensor (one storage in the archive), each with a value of its own");
  }
  return g.verify();
}

}  // namespace kiln::lowering
