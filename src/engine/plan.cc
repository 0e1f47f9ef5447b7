#include "engine/plan.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/json_fields.h"
#include "base/section_file.h"
#include "ir/printer.h"

namespace kiln::engine {

using nlohmann::json;

namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

Expected<json> parse_json_section(const SectionFile& f, std::string_view name, std::string_view what) {
  auto section = f.section(name);
  if (!section) return as_format_error(section.status());
  return parse_json_object(*section, std::string(what) + ": section '" + std::string(name) + "'");
}

}  // namespace

Status canonicalize(Network& net) {
  KILN_TRY(net.graph.compact());
  return net.verify();
}

Expected<std::vector<PlanAlias>> in_place_aliases(const Network& net) {
  const ir::Graph& g = net.graph;
  std::vector<PlanAlias> aliases;
  for (const auto& n : g.nodes()) {
    if (n->op != ir::OpKind::kCacheWrite) continue;
    // A layer graph read from a plan may declare a write with no result.
    if (n->outputs.size() != 1)
      return internal_error(n->describe() + ": an in-place write must have one result, it has " +
                            std::to_string(n->outputs.size()));
    const ir::Arg* self = n->find("self");
    const auto* cache = self ? std::get_if<ir::Value*>(self) : nullptr;
    int input = -1, output = -1;
    for (size_t i = 0; cache && i < net.num_inputs && i < g.inputs().size(); ++i)
      if (g.inputs()[i] == *cache) input = static_cast<int>(i);
    for (size_t o = 0; o < g.outputs().size(); ++o)
      if (g.outputs()[o] == n->outputs[0]) {
        if (output >= 0) return internal_error(n->describe() + ": its result is two engine outputs");
        output = static_cast<int>(o);
      }
    if (input < 0)
      return internal_error(n->describe() + ": writes in place into something that is not an engine input");
    if (output < 0) return internal_error(n->describe() + ": its result is not an engine output");
    for (const PlanAlias& a : aliases)
      if (a.input == input)
        return internal_error(n->describe() + ": a second in-place write into engine input " + std::to_string(input));
    aliases.push_back({output, input});
  }
  std::sort(aliases.begin(), aliases.end(), [](const PlanAlias& a, const PlanAlias& b) { return a.output < b.output; });
  return aliases;
}

std::vector<uint8_t> serialize_plan(const EnginePlan& plan) {
  json meta;
  meta["backend"] = plan.backend;
  meta["num_inputs"] = plan.network.num_inputs;
  meta["constants"] = plan.network.constant_names;
  meta["kernels"] = plan.network.kernels;
  json aliases = json::array();
  for (const PlanAlias& a : plan.aliases) aliases.push_back({a.output, a.input});
  meta["aliases"] = aliases;
  json mem;
  mem["arena_bytes"] = plan.memory.arena_bytes;
  mem["unshared_bytes"] = plan.memory.unshared_bytes;
  mem["offset"] = plan.memory.offset;
  mem["last_use"] = plan.memory.last_use;

  SectionFileWriter w(kPlanMagic, kPlanVersion);
  // Names are fixed and unique, so add() cannot fail here.
  (void)w.add("meta", bytes_of(meta.dump()));
  (void)w.add("layers", bytes_of(ir::print_graph(plan.network.graph)));
  (void)w.add("memory", bytes_of(mem.dump()));
  for (const auto& [name, bytes] : plan.extra) (void)w.add(name, std::span<const uint8_t>(bytes));
  return w.finish();
}

Expected<EnginePlan> deserialize_plan(std::span<const uint8_t> bytes, std::string_view backend, std::string_view what) {
  KILN_ASSIGN_OR_RETURN(SectionFile f, SectionFile::parse(bytes, kPlanMagic, kPlanVersion, what));
  const std::string w(what);
  EnginePlan plan;
  KILN_ASSIGN_OR_RETURN(json meta, parse_json_section(f, "meta", what));
  JsonFields m(meta, w + ": plan meta");
  KILN_ASSIGN_OR_RETURN(plan.backend, m.string("backend"));
  if (plan.backend != backend)
    return format_error(w + ": plan was built by backend '" + plan.backend + "', not '" + std::string(backend) + "'");

  auto layers_section = f.section("layers");
  if (!layers_section) return as_format_error(layers_section.status());
  std::span<const uint8_t> layers = *layers_section;
  auto g = ir::parse_graph(std::string_view(reinterpret_cast<const char*>(layers.data()), layers.size()));
  if (!g) return as_format_error(g.status(), w + ": layer graph");
  plan.network.graph = std::move(*g);

  KILN_ASSIGN_OR_RETURN(int64_t num_inputs, m.integer("num_inputs"));
  if (num_inputs < 0 || static_cast<size_t>(num_inputs) > plan.network.graph.inputs().size())
    return format_error(w + ": plan declares " + std::to_string(num_inputs) + " inputs, its layer graph has " +
                        std::to_string(plan.network.graph.inputs().size()) + " graph inputs");
  plan.network.num_inputs = static_cast<size_t>(num_inputs);
  KILN_ASSIGN_OR_RETURN(plan.network.constant_names, m.strings("constants"));
  KILN_ASSIGN_OR_RETURN(plan.network.kernels, m.strings("kernels"));
  if (Status s = plan.network.verify(); !s) return as_format_error(s, w);

  KILN_ASSIGN_OR_RETURN(const json* aliases, m.array("aliases"));
  const size_t num_outputs = plan.network.graph.outputs().size();
  for (const json& a : *aliases) {
    if (!a.is_array() || a.size() != 2 || !a[0].is_number_integer() || !a[1].is_number_integer())
      return m.bad("aliases", "an array of [output, input] pairs");
    const int64_t out = a[0].get<int64_t>(), in = a[1].get<int64_t>();
    if (out < 0 || static_cast<uint64_t>(out) >= num_outputs || in < 0 ||
        static_cast<uint64_t>(in) >= plan.network.num_inputs)
      return format_error(w + ": alias of output " + std::to_string(out) + " into input " + std::to_string(in) +
                          " is out of range");
    PlanAlias pa{static_cast<int>(out), static_cast<int>(in)};
    plan.aliases.push_back(pa);
  }

  auto expected = in_place_aliases(plan.network);
  if (!expected || *expected != plan.aliases)
    return format_error(w + ": the alias map does not match the plan's in-place layers" +
                        (expected ? std::string() : ": " + expected.status().message()));

  KILN_ASSIGN_OR_RETURN(json mem, parse_json_section(f, "memory", what));
  JsonFields r(mem, w + ": memory plan");
  KILN_ASSIGN_OR_RETURN(plan.memory.arena_bytes, r.integer("arena_bytes"));
  KILN_ASSIGN_OR_RETURN(plan.memory.unshared_bytes, r.integer("unshared_bytes"));
  KILN_ASSIGN_OR_RETURN(plan.memory.offset, r.ints("offset"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> last_use, r.ints("last_use"));
  for (int64_t u : last_use) plan.memory.last_use.push_back(static_cast<int>(std::clamp<int64_t>(u, -2, INT_MAX)));
  if (Status s = plan.memory.validate(plan.network); !s) return as_format_error(s, w);

  const std::string prefix = plan.backend + ".";
  for (const std::string& name : f.names()) {
    if (name.rfind(prefix, 0) != 0) continue;
    KILN_ASSIGN_OR_RETURN(std::span<const uint8_t> b, f.section(name));
    plan.extra.emplace_back(name, std::vector<uint8_t>(b.begin(), b.end()));
  }
  return plan;
}

}  // namespace kiln::engine
