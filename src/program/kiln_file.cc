#include "program/kiln_file.h"

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/json_fields.h"
#include "base/mapped_file.h"
#include "base/section_file.h"
#include "ir/printer.h"
#include "kiln/runtime.h"

namespace kiln::program {

using nlohmann::json;
using Reader = JsonFields;

namespace {

constexpr size_t kWeightAlignment = 64;

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

const char* segment_kind_name(partition::SegmentKind k) {
  return k == partition::SegmentKind::kEngine ? "engine" : "fallback";
}

Expected<ir::InputSpec::Kind> input_kind(const std::string& s) {
  for (auto k : {ir::InputSpec::Kind::kParameter, ir::InputSpec::Kind::kBuffer, ir::InputSpec::Kind::kConstant,
                 ir::InputSpec::Kind::kUserInput})
    if (s == ir::input_kind_name(k)) return k;
  return format_error("unknown input kind '" + s + "'");
}

Expected<ir::OutputSpec::Kind> output_kind(const std::string& s) {
  for (auto k : {ir::OutputSpec::Kind::kBufferMutation, ir::OutputSpec::Kind::kUserOutput,
                 ir::OutputSpec::Kind::kUserInputMutation})
    if (s == ir::output_kind_name(k)) return k;
  return format_error("unknown output kind '" + s + "'");
}

}  // namespace

namespace {

// Where each weight lies in the shared weights section: a name another method
// already stored with the same dtype, sizes and bytes is stored once.
class WeightBlob {
 public:
  // Offset of `t` (stored under `name`) in the blob.
  size_t place(const std::string& name, const Tensor& t) {
    Tensor c = t.contiguous();
    for (const Entry& e : entries_)
      if (e.name == name && e.tensor.same_bytes(c))
        return e.offset;
    const size_t offset = (size_ + kWeightAlignment - 1) / kWeightAlignment * kWeightAlignment;
    size_ = offset + c.nbytes();
    entries_.push_back({name, c, offset});
    return offset;
  }
  // The blob, sized once.
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> blob(size_);
    for (const Entry& e : entries_)
      if (e.tensor.nbytes() > 0) std::memcpy(blob.data() + e.offset, e.tensor.raw_data(), e.tensor.nbytes());
    return blob;
  }

 private:
  struct Entry {
    std::string name;
    Tensor tensor;
    size_t offset;
  };
  std::vector<Entry> entries_;
  size_t size_ = 0;
};

// Section names of method k: method 0 uses the plain names (a single-method
// file has no other), method k > 0 prefixes them with "method<k>.".
std::string section_prefix(size_t k) { return k == 0 ? std::string() : "method" + std::to_string(k) + "."; }

json method_json(const CompiledProgram& p, const std::string& prefix, WeightBlob& blob) {
  const ir::Module& m = p.module;
  json j;
  j["format"] = "kiln program";
  j["source"] = m.source;
  j["torch_version"] = m.torch_version;
  j["dialect"] = m.dialect;
  j["device"] = p.device;
  json inputs = json::array(), outputs = json::array(), symbols = json::array();
  for (const ir::InputSpec& s : m.input_specs)
    inputs.push_back({{"kind", ir::input_kind_name(s.kind)}, {"target", s.target}, {"persistent", s.persistent}});
  for (const ir::OutputSpec& s : m.output_specs)
    outputs.push_back({{"kind", ir::output_kind_name(s.kind)}, {"target", s.target}});
  for (const auto& [name, r] : m.symbols) symbols.push_back({{"name", name}, {"min", r.min}, {"max", r.max}});
  j["inputs"] = inputs;
  j["outputs"] = outputs;
  j["symbols"] = symbols;
  if (!m.aliases.empty()) j["aliases"] = m.aliases;  // other names of one tensor -> the name kept

  json segments = json::array();
  for (size_t i = 0; i < p.segments.size(); ++i) {
    const SegmentRecord& s = p.segments[i];
    json js = {{"kind", segment_kind_name(s.kind)},
               {"nodes", s.nodes},
               {"inputs", s.inputs},
               {"outputs", s.outputs},
               {"reasons", s.reasons},
               {"backend", s.backend}};
    if (s.kind == partition::SegmentKind::kEngine) js["plan"] = prefix + "plan." + std::to_string(i);
    segments.push_back(js);
  }
  j["segments"] = segments;

  json weights = json::array();
  for (const auto& [name, t] : m.weights)
    weights.push_back({{"name", name},
                       {"dtype", std::string(dtype_name(t.dtype()))},
                       {"sizes", t.sizes()},
                       {"offset", blob.place(name, t)},
                       {"nbytes", t.nbytes()}});
  j["weights"] = weights;
  if (p.padded) {
    const PaddedBatch& b = *p.padded;
    j["padded_batch"] = {{"symbol", b.symbol},   {"size", b.size},      {"min", b.min},
                         {"max", b.max},         {"inputs", b.inputs}, {"output_factors", b.output_factors}};
  }
  return j;
}

}  // namespace

namespace {

// Every section of a program file, ready to be written or joined into bytes.
Expected<SectionFileWriter> program_sections(std::span<const MethodRef> methods) {
  if (methods.empty()) return invalid_argument("a program has at least one method");
  std::set<std::string> names;
  for (const MethodRef& mr : methods)
    if (mr.name.empty() || !names.insert(mr.name).second)
      return invalid_argument("method name '" + mr.name + "' is empty or given twice");
  WeightBlob blob;
  SectionFileWriter w(kProgramMagic, kProgramVersion);
  for (size_t k = 0; k < methods.size(); ++k) {
    const CompiledProgram& p = *methods[k].program;
    const std::string prefix = section_prefix(k);
    json j = method_json(p, prefix, blob);
    j["method"] = methods[k].name;
    if (k == 0) {
      json all = json::array();
      for (const MethodRef& mr : methods) all.push_back(mr.name);
      j["methods"] = all;
    }
    KILN_TRY(w.add(prefix + "program", bytes_of(j.dump(1))));
    KILN_TRY(w.add(prefix + "graph", bytes_of(ir::print_graph(p.module.graph))));
    for (size_t i = 0; i < p.segments.size(); ++i)
      if (p.segments[i].kind == partition::SegmentKind::kEngine)
        KILN_TRY(w.add(prefix + "plan." + std::to_string(i), std::span<const uint8_t>(p.segments[i].plan)));
  }
  KILN_TRY(w.add("weights", blob.bytes()));
  return w;
}

}  // namespace

Expected<std::vector<uint8_t>> serialize_program(std::span<const MethodRef> methods) {
  KILN_ASSIGN_OR_RETURN(SectionFileWriter w, program_sections(methods));
  return w.finish();
}

Expected<std::vector<uint8_t>> serialize_program(const CompiledProgram& p) {
  const MethodRef one{"forward", &p};
  return serialize_program(std::span<const MethodRef>(&one, 1));
}

Status save_program(const CompiledProgram& p, const std::string& path) {
  const MethodRef one{"forward", &p};
  return save_program(std::span<const MethodRef>(&one, 1), path);
}

Status save_program(std::span<const MethodRef> methods, const std::string& path) {
  KILN_ASSIGN_OR_RETURN(SectionFileWriter w, program_sections(methods));
  // Written next to the target and renamed into place, so a failed write never leaves a half file.
  return w.write(path);
}

namespace {

// Parses method `k` (its sections carry section_prefix(k)) of the program file `f`.
Expected<CompiledMethod> parse_method(const SectionFile& f, size_t k, const std::shared_ptr<void>& keeper,
                                      const std::string& file_what) {
  const std::string prefix = section_prefix(k);
  const std::string w = k == 0 ? file_what : file_what + ", method " + std::to_string(k);
  auto jb_section = f.section(prefix + "program");
  if (!jb_section) return as_format_error(jb_section.status());
  std::span<const uint8_t> jb = *jb_section;
  KILN_ASSIGN_OR_RETURN(json j, parse_json_object(jb, w + ": section '" + prefix + "program'"));
  Reader r(j, w + ": program");

  CompiledMethod cm;
  cm.name = "forward";
  if (j.contains("method")) {
    KILN_ASSIGN_OR_RETURN(cm.name, r.string("method"));
  }
  CompiledProgram& p = cm.program;
  ir::Module& m = p.module;
  KILN_ASSIGN_OR_RETURN(std::string format, r.string("format"));
  if (format != "kiln program") return format_error(FileFault::kBadMagic, w + ": not a kiln program (format '" + format + "')");
  KILN_ASSIGN_OR_RETURN(m.source, r.string("source"));
  KILN_ASSIGN_OR_RETURN(m.torch_version, r.string("torch_version"));
  KILN_ASSIGN_OR_RETURN(m.dialect, r.string("dialect"));
  KILN_ASSIGN_OR_RETURN(p.device, r.string("device"));

  auto gb_section = f.section(prefix + "graph");
  if (!gb_section) return as_format_error(gb_section.status());
  std::span<const uint8_t> gb = *gb_section;
  auto g = ir::parse_graph(std::string_view(reinterpret_cast<const char*>(gb.data()), gb.size()));
  if (!g) return as_format_error(g.status(), w + ": graph");
  m.graph = std::move(*g);
  if (Status s = m.graph.verify(); !s) return as_format_error(s, w + ": graph");

  KILN_ASSIGN_OR_RETURN(const json* inputs, r.array("inputs"));
  for (const json& ji : *inputs) {
    Reader ri(ji, r.where() + " input spec");
    KILN_ASSIGN_OR_RETURN(std::string kind, ri.string("kind"));
    KILN_ASSIGN_OR_RETURN(std::string target, ri.string("target"));
    auto k = input_kind(kind);
    if (!k) return as_format_error(k.status(), ri.where());
    m.input_specs.push_back({*k, target, true});
  }
  KILN_ASSIGN_OR_RETURN(const json* outputs, r.array("outputs"));
  for (const json& jo : *outputs) {
    Reader ro(jo, r.where() + " output spec");
    KILN_ASSIGN_OR_RETURN(std::string kind, ro.string("kind"));
    KILN_ASSIGN_OR_RETURN(std::string target, ro.string("target"));
    auto k = output_kind(kind);
    if (!k) return as_format_error(k.status(), ro.where());
    m.output_specs.push_back({*k, target});
  }
  if (m.input_specs.size() != m.graph.inputs().size() || m.output_specs.size() != m.graph.outputs().size())
    return format_error(w + ": the signature has " + std::to_string(m.input_specs.size()) + " inputs and " +
                        std::to_string(m.output_specs.size()) + " outputs, the graph " +
                        std::to_string(m.graph.inputs().size()) + " and " + std::to_string(m.graph.outputs().size()));
  KILN_ASSIGN_OR_RETURN(const json* symbols, r.array("symbols"));
  for (const json& js : *symbols) {
    Reader rs(js, r.where() + " symbol");
    KILN_ASSIGN_OR_RETURN(std::string name, rs.string("name"));
    KILN_ASSIGN_OR_RETURN(int64_t lo, rs.integer("min"));
    KILN_ASSIGN_OR_RETURN(int64_t hi, rs.integer("max"));
    if (lo > hi) return format_error(rs.where() + " '" + name + "': min > max");
    m.symbols[name] = {lo, hi};
  }

  // Weights, borrowed from the file's bytes.
  auto blob_section = f.section("weights");
  if (!blob_section) return as_format_error(blob_section.status());
  std::span<const uint8_t> blob = *blob_section;
  KILN_ASSIGN_OR_RETURN(const json* weights, r.array("weights"));
  for (const json& jw : *weights) {
    Reader rw(jw, r.where() + " weight");
    KILN_ASSIGN_OR_RETURN(std::string name, rw.string("name"));
    Reader rn(jw, r.where() + " weight '" + name + "'");
    KILN_ASSIGN_OR_RETURN(std::string dtype_s, rn.string("dtype"));
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, rn.ints("sizes"));
    KILN_ASSIGN_OR_RETURN(int64_t offset, rn.integer("offset"));
    KILN_ASSIGN_OR_RETURN(int64_t nbytes, rn.integer("nbytes"));
    auto dtype = dtype_from_name(dtype_s);
    if (!dtype) return format_error(FileFault::kUnknownDtype, rn.where() + ": unknown dtype '" + dtype_s + "'");
    if (m.weights.count(name)) return format_error(FileFault::kDuplicateName, rn.where() + ": listed twice");
    if (sizes.size() > 64) return format_error(rn.where() + ": too many dimensions");
    uint64_t numel = 1;
    for (int64_t s : sizes) {
      if (s < 0 || (s != 0 && numel > UINT64_MAX / static_cast<uint64_t>(s)))
        return format_error(FileFault::kSizeOverflow, rn.where() + ": sizes overflow or are negative");
      numel *= static_cast<uint64_t>(s);
    }
    if (numel > UINT64_MAX / 16 || numel * dtype_size(*dtype) != static_cast<uint64_t>(nbytes))
      return format_error(FileFault::kSizeMismatch, rn.where() + ": " + std::to_string(nbytes) + " bytes do not hold its sizes");
    if (offset < 0 || static_cast<uint64_t>(offset) > blob.size() ||
        static_cast<uint64_t>(nbytes) > blob.size() - static_cast<uint64_t>(offset))
      return format_error(FileFault::kOutOfBounds, rn.where() + ": bytes [" + std::to_string(offset) + ", +" + std::to_string(nbytes) +
                          ") lie outside the weights section (" + std::to_string(blob.size()) + " bytes)");
    if (offset % static_cast<int64_t>(dtype_size(*dtype)) != 0)
      return format_error(rn.where() + ": offset " + std::to_string(offset) + " is not aligned to its dtype");
    std::shared_ptr<Storage> storage;
    auto* base = const_cast<uint8_t*>(blob.data()) + offset;
    if (keeper) {
      storage = Storage::borrow(base, static_cast<size_t>(nbytes), keeper);
    } else {
      storage = Storage::allocate(static_cast<size_t>(nbytes));
      if (nbytes > 0) std::memcpy(storage->data(), base, static_cast<size_t>(nbytes));
    }
    Shape strides(sizes.size(), 1);
    for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
    auto t = Tensor::from_storage(storage, *dtype, sizes, strides, 0);
    if (!t) return as_format_error(t.status(), rn.where());
    m.weights[name] = std::move(*t);
  }
  if (j.contains("padded_batch")) {
    Reader rb(j["padded_batch"], r.where() + " padded_batch");
    PaddedBatch b;
    KILN_ASSIGN_OR_RETURN(b.symbol, rb.string("symbol"));
    KILN_ASSIGN_OR_RETURN(b.size, rb.integer("size"));
    KILN_ASSIGN_OR_RETURN(b.min, rb.integer("min"));
    KILN_ASSIGN_OR_RETURN(b.max, rb.integer("max"));
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> inputs, rb.ints("inputs"));
    KILN_ASSIGN_OR_RETURN(b.output_factors, rb.ints("output_factors"));
    size_t user_inputs = 0;
    for (const ir::InputSpec& s : m.input_specs) user_inputs += s.kind == ir::InputSpec::Kind::kUserInput;
    if (!(1 <= b.min && b.min <= b.size && b.size <= b.max) || inputs.empty() ||
        b.output_factors.size() != m.graph.outputs().size())
      return format_error(rb.where() + ": sizes, inputs or outputs do not fit the method");
    // Each padded input's leading size is the bucket's, each cut output's the bucket's times its factor.
    std::vector<const ir::Value*> user;
    for (size_t i = 0; i < m.input_specs.size(); ++i)
      if (m.input_specs[i].kind == ir::InputSpec::Kind::kUserInput) user.push_back(m.graph.inputs()[i]);
    for (int64_t i : inputs) {
      if (i < 0 || static_cast<size_t>(i) >= user_inputs)
        return format_error(rb.where() + ": input " + std::to_string(i) + " out of range");
      const ir::Value* v = user[static_cast<size_t>(i)];
      if (v->type.sizes.empty() || !v->type.sizes[0].is_static() || v->type.sizes[0].value != b.size)
        return format_error(rb.where() + ": input '" + v->name + "' " + v->type.to_string() +
                            " does not have the bucket's " + std::to_string(b.size) + " rows");
      b.inputs.push_back(static_cast<int>(i));
    }
    for (size_t o = 0; o < b.output_factors.size(); ++o) {
      const int64_t c = b.output_factors[o];
      if (c == 0) continue;
      const ir::Value* v = m.graph.outputs()[o];
      if (c < 0 || c > (int64_t{1} << 32) || v->kind != ir::ValueKind::kTensor || v->type.sizes.empty() ||
          !v->type.sizes[0].is_static() || v->type.sizes[0].value != b.size * c)
        return format_error(rb.where() + ": output " + std::to_string(o) + " does not have " + std::to_string(c) +
                            " rows per bucket row");
    }
    p.padded = std::move(b);
  }

  // Every weight, constant and buffer the graph takes is there, with its declared type.
  for (size_t i = 0; i < m.input_specs.size(); ++i) {
    const ir::InputSpec& s = m.input_specs[i];
    if (s.kind == ir::InputSpec::Kind::kUserInput) continue;
    auto it = m.weights.find(s.target);
    const ir::Value* v = m.graph.inputs()[i];
    if (it == m.weights.end()) return format_error(FileFault::kDanglingReference, w + ": weight '" + s.target + "' is missing");
    bool same = it->second.dtype() == v->type.dtype && it->second.dim() == static_cast<int64_t>(v->type.sizes.size());
    for (size_t d = 0; same && d < v->type.sizes.size(); ++d)
      same = !v->type.sizes[d].is_static() || v->type.sizes[d].value == it->second.sizes()[d];
    if (!same)
      return format_error(w + ": weight '" + s.target + "' is " + it->second.type_string() + ", the graph takes " +
                          v->type.to_string());
  }

  // Other names of a weight or buffer: each names a kept parameter, buffer or
  // constant, and none is itself a name the signature keeps.
  if (j.contains("aliases")) {
    const json& ja = j["aliases"];
    if (!ja.is_object()) return format_error(r.where() + ": 'aliases' must be an object of names");
    std::set<std::string> kept;
    for (const ir::InputSpec& s : m.input_specs)
      if (s.kind != ir::InputSpec::Kind::kUserInput) kept.insert(s.target);
    for (auto it = ja.begin(); it != ja.end(); ++it) {
      if (!it.value().is_string()) return format_error(r.where() + ": alias '" + it.key() + "' must name a string");
      const std::string target = it.value().get<std::string>();
      if (!kept.count(target))
        return format_error(FileFault::kDanglingReference, r.where() + ": alias '" + it.key() + "' names '" + target +
                                                               "', which the program does not keep");
      if (kept.count(it.key()))
        return format_error(FileFault::kDuplicateName, r.where() + ": alias '" + it.key() + "' is also a kept name");
      m.aliases.emplace(it.key(), target);
    }
  }

  // Segments: node indices and value ids in range, each node in exactly one segment.
  const int num_nodes = static_cast<int>(m.graph.nodes().size());
  const int num_values = static_cast<int>(m.graph.num_values());
  std::vector<int> owner(static_cast<size_t>(num_nodes), -1);
  KILN_ASSIGN_OR_RETURN(const json* segments, r.array("segments"));
  for (size_t i = 0; i < segments->size(); ++i) {
    Reader rs((*segments)[i], r.where() + " segment " + std::to_string(i));
    SegmentRecord s;
    KILN_ASSIGN_OR_RETURN(std::string kind, rs.string("kind"));
    if (kind == "engine")
      s.kind = partition::SegmentKind::kEngine;
    else if (kind == "fallback")
      s.kind = partition::SegmentKind::kFallback;
    else
      return format_error(rs.where() + ": unknown kind '" + kind + "'");
    KILN_ASSIGN_OR_RETURN(s.backend, rs.string("backend"));
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> nodes, rs.ints("nodes"));
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> ins, rs.ints("inputs"));
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> outs, rs.ints("outputs"));
    KILN_ASSIGN_OR_RETURN(s.reasons, rs.strings("reasons"));
    for (int64_t n : nodes) {
      if (n < 0 || n >= num_nodes)
        return format_error(FileFault::kDanglingReference, rs.where() + ": node index " + std::to_string(n) + " out of range");
      if (owner[static_cast<size_t>(n)] != -1)
        return format_error(rs.where() + ": node " + std::to_string(n) + " is also in segment " +
                            std::to_string(owner[static_cast<size_t>(n)]));
      owner[static_cast<size_t>(n)] = static_cast<int>(i);
      s.nodes.push_back(static_cast<int>(n));
    }
    for (auto* list : {&ins, &outs})
      for (int64_t v : *list)
        if (v < 0 || v >= num_values)
          return format_error(FileFault::kDanglingReference, rs.where() + ": value id " + std::to_string(v) + " out of range");
    s.inputs.assign(ins.begin(), ins.end());
    s.outputs.assign(outs.begin(), outs.end());
    if (s.kind == partition::SegmentKind::kEngine) {
      KILN_ASSIGN_OR_RETURN(std::string plan_name, rs.string("plan"));
      if (plan_name.rfind(prefix + "plan.", 0) != 0)
        return format_error(rs.where() + ": plan section '" + plan_name + "' belongs to another method");
      auto plan = f.section(plan_name);
      if (!plan) return as_format_error(plan.status(), rs.where());
      if (plan->empty())
        return format_error(FileFault::kTruncated, rs.where() + ": plan section '" + plan_name + "' is empty");
      s.plan.assign(plan->begin(), plan->end());
    } else if (s.reasons.size() != s.nodes.size()) {
      return format_error(rs.where() + ": " + std::to_string(s.reasons.size()) + " fallback reasons for " +
                          std::to_string(s.nodes.size()) + " nodes");
    }
    p.segments.push_back(std::move(s));
  }
  for (int n = 0; n < num_nodes; ++n)
    if (owner[static_cast<size_t>(n)] == -1)
      return format_error(w + ": node '" + m.graph.nodes()[static_cast<size_t>(n)]->name + "' is in no segment");
  m.source = m.source.empty() ? file_what : m.source;
  return cm;
}

}  // namespace

Expected<std::vector<CompiledMethod>> parse_program_methods(std::span<const uint8_t> bytes,
                                                            const std::shared_ptr<void>& keeper,
                                                            std::string_view what) {
  const std::string w(what);
  KILN_ASSIGN_OR_RETURN(SectionFile f, SectionFile::parse(bytes, kProgramMagic, kProgramVersion, what));
  std::vector<CompiledMethod> methods;
  KILN_ASSIGN_OR_RETURN(CompiledMethod first, parse_method(f, 0, keeper, w));
  // The method list lives in method 0's JSON (absent in a single-method file).
  auto jb = f.section("program");
  if (!jb) return as_format_error(jb.status());
  KILN_ASSIGN_OR_RETURN(json j, parse_json_object(*jb, w + ": section 'program'"));
  std::vector<std::string> names{first.name};
  if (j.contains("methods")) {
    Reader r(j, w + ": program");
    KILN_ASSIGN_OR_RETURN(names, r.strings("methods"));
    if (names.empty() || names[0] != first.name)
      return format_error(w + ": the method list does not start with method 0 ('" + first.name + "')");
    if (names.size() > 4096) return format_error(w + ": " + std::to_string(names.size()) + " methods is too many");
  }
  methods.push_back(std::move(first));
  std::set<std::string> seen{methods[0].name};
  for (size_t k = 1; k < names.size(); ++k) {
    KILN_ASSIGN_OR_RETURN(CompiledMethod m, parse_method(f, k, keeper, w));
    if (m.name != names[k])
      return format_error(w + ": method " + std::to_string(k) + " is named '" + m.name + "', the list says '" +
                          names[k] + "'");
    if (!seen.insert(m.name).second) return format_error(FileFault::kDuplicateName, w + ": method '" + m.name + "' appears twice");
    methods.push_back(std::move(m));
  }
  return methods;
}

Expected<CompiledProgram> parse_program(std::span<const uint8_t> bytes, const std::shared_ptr<void>& keeper,
                                        std::string_view what) {
  KILN_ASSIGN_OR_RETURN(std::vector<CompiledMethod> methods, parse_program_methods(bytes, keeper, what));
  return std::move(methods[0].program);
}

Expected<std::vector<CompiledMethod>> load_program_methods(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  return parse_program_methods(file->bytes(), file, path);
}

Expected<CompiledProgram> load_program(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  return parse_program(file->bytes(), file, path);
}

}  // namespace kiln::program

namespace kiln {

bool is_program_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  if (!f.read(magic, sizeof magic)) return false;
  return std::string_view(magic, sizeof magic) == program::kProgramMagic;
}

}  // namespace kiln
