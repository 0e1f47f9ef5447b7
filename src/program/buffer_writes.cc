// How each mutated buffer of a compiled program gets its new value: written
// in place by an engine (the plan's alias map says so) or copied back after
// the call. Read from the plans the builders wrote, never predicted.
#include <map>

#include "engine/plan.h"
#include "program/compiled_program.h"

namespace kiln::program {

Expected<std::vector<BufferWrite>> classify_buffer_writes(const CompiledProgram& p, std::string_view what) {
  const ir::Module& m = p.module;
  const ir::Graph& g = m.graph;
  const std::string w(what);
  std::map<std::string, const ir::Value*, std::less<>> buffer_input;  // fqn -> graph input
  std::map<int, std::string> buffer_of_input;                         // value id -> fqn
  for (size_t i = 0; i < m.input_specs.size() && i < g.inputs().size(); ++i)
    if (m.input_specs[i].kind == ir::InputSpec::Kind::kBuffer) {
      buffer_input[m.input_specs[i].target] = g.inputs()[i];
      buffer_of_input[g.inputs()[i]->id] = m.input_specs[i].target;
    }

  // Every in-place write any engine declares: (segment, engine output) -> the graph value it writes into.
  std::map<std::pair<size_t, int>, int> in_place;
  for (size_t si = 0; si < p.segments.size(); ++si) {
    const SegmentRecord& s = p.segments[si];
    // An engine not built (a program compiled for its partition only) writes nothing.
    if (s.kind != partition::SegmentKind::kEngine || s.plan.empty()) continue;
    const std::string where = w + ", segment " + std::to_string(si);
    KILN_ASSIGN_OR_RETURN(engine::EnginePlan plan, engine::deserialize_plan(s.plan, s.backend, where));
    for (const engine::PlanAlias& a : plan.aliases) {
      if (static_cast<size_t>(a.input) >= s.inputs.size() || static_cast<size_t>(a.output) >= s.outputs.size())
        return format_error(where + ": the engine's alias map names a binding the segment does not have");
      const int target = s.inputs[static_cast<size_t>(a.input)];
      if (!buffer_of_input.count(target))
        return format_error(where + ": the engine writes in place into '" + g.value(static_cast<size_t>(target))->name +
                            "', which is not a buffer of the program");
      in_place[{si, a.output}] = target;
    }
  }

  std::vector<BufferWrite> writes;
  size_t claimed = 0;
  for (size_t k = 0; k < m.output_specs.size() && k < g.outputs().size(); ++k) {
    const ir::OutputSpec& spec = m.output_specs[k];
    if (spec.kind != ir::OutputSpec::Kind::kBufferMutation) continue;
    auto in = buffer_input.find(spec.target);
    if (in == buffer_input.end())
      return format_error(w + ": output " + std::to_string(k) + " writes buffer '" + spec.target +
                          "', which the program does not have");
    BufferWrite bw;
    bw.buffer = spec.target;
    bw.output = static_cast<int>(k);
    const ir::Value* value = g.outputs()[k];
    for (size_t si = 0; si < p.segments.size() && bw.segment < 0; ++si) {
      const SegmentRecord& s = p.segments[si];
      for (size_t o = 0; o < s.outputs.size(); ++o) {
        if (s.outputs[o] != value->id) continue;
        bw.segment = static_cast<int>(si);
        if (auto a = in_place.find({si, static_cast<int>(o)}); a != in_place.end()) {
          if (a->second != in->second->id)
            return format_error(w + ", segment " + std::to_string(si) + ": the new value of buffer '" + spec.target +
                                "' is written in place into buffer '" + buffer_of_input[a->second] + "'");
          bw.in_place = true;
          ++claimed;
        }
        break;
      }
    }
    if (bw.segment < 0 && value != in->second)
      return format_error(w + ": the new value of buffer '" + spec.target +
                          "' is computed by no segment: it would be neither written in place nor copied back");
    writes.push_back(bw);
  }
  if (claimed != in_place.size())
    return format_error(w + ": an engine writes in place into a buffer whose new value is not that write");
  return writes;
}

}  // namespace kiln::program
