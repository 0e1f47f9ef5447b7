// The ExportedProgram JSON (schema 8.x) -> ir::Module, weights excluded.
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "frontend/pt2_loader.h"
#include "ir/op_schema.h"

namespace kiln::frontend {

using json = nlohmann::json;

namespace {

constexpr int kSchemaMajor = 8;

// Ops export writes under another name for a computation the IR has under a
// core op's name: the core op, and the arguments that make it the same
// computation (appended to the node's own). One-to-one decompositions only;
// anything that needs new nodes belongs in lowering.
struct Respelling {
  std::string_view from, to;
  std::vector<std::pair<const char*, int64_t>> extra;
  std::vector<std::pair<std::string_view, const char*>> renamed = {};  // argument names that differ
};

// Higher-order ops whose graph argument is a region of the program, inlined at load.
constexpr std::string_view kAutocastRegion = "torch.ops.higher_order.wrap_with_autocast";
constexpr std::string_view kGradRegion = "torch.ops.higher_order.wrap_with_set_grad_enabled";

const Respelling* respelling_of(std::string_view target) {
  static const Respelling kTable[] = {
      // In-place detach only drops autograd history: the value is its input's.
      {"torch.ops.aten.detach_.default", "torch.ops.aten.detach.default", {}},
      {"torch.ops.aten.true_divide.Tensor", "torch.ops.aten.div.Tensor", {}},
      // broadcast_to(self, size) is expand(self, size), a view of the same elements.
      {"torch.ops.aten.broadcast_to.default", "torch.ops.aten.expand.default", {}},
      // x.mT: the last two dims swapped.
      {"torch.ops.aten.mT.default", "torch.ops.aten.transpose.int", {{"dim0", -2}, {"dim1", -1}}},
      // swapaxes / swapdims (NumPy's names): transpose of the two dims.
      {"torch.ops.aten.swapaxes.default", "torch.ops.aten.transpose.int", {}, {{"axis0", "dim0"}, {"axis1", "dim1"}}},
      {"torch.ops.aten.swapdims.default", "torch.ops.aten.transpose.int", {}},
      // torch.max(a, b) / torch.min(a, b): elementwise, a NaN in either wins.
      {"torch.ops.aten.max.other", "torch.ops.aten.maximum.default", {}},
      {"torch.ops.aten.min.other", "torch.ops.aten.minimum.default", {}},
      // The copying forms of views (functionalization's *_copy ops): the IR's
      // values are never written, so the view computes the same result.
      {"torch.ops.aten.view_copy.default", "torch.ops.aten.view.default", {}},
      {"torch.ops.aten.permute_copy.default", "torch.ops.aten.permute.default", {}},
      {"torch.ops.aten.expand_copy.default", "torch.ops.aten.expand.default", {}},
      {"torch.ops.aten.transpose_copy.int", "torch.ops.aten.transpose.int", {}},
      {"torch.ops.aten.t_copy.default", "torch.ops.aten.t.default", {}},
      {"torch.ops.aten.select_copy.int", "torch.ops.aten.select.int", {}},
      {"torch.ops.aten.slice_copy.Tensor", "torch.ops.aten.slice.Tensor", {}},
      {"torch.ops.aten.narrow_copy.default", "torch.ops.aten.narrow.default", {}},
      {"torch.ops.aten.unsqueeze_copy.default", "torch.ops.aten.unsqueeze.default", {}},
      {"torch.ops.aten.squeeze_copy.default", "torch.ops.aten.squeeze.default", {}},
      {"torch.ops.aten.squeeze_copy.dim", "torch.ops.aten.squeeze.dim", {}},
      {"torch.ops.aten.squeeze_copy.dims", "torch.ops.aten.squeeze.dims", {}},
      {"torch.ops.aten.alias_copy.default", "torch.ops.aten.alias.default", {}},
      {"torch.ops.aten.unbind_copy.int", "torch.ops.aten.unbind.int", {}},
      {"torch.ops.aten.detach_copy.default", "torch.ops.aten.detach.default", {}},
  };
  for (const Respelling& r : kTable)
    if (r.from == target) return &r;
  return nullptr;
}

// Walks a JSON document keeping a path for error messages.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  Status error(FileFault fault, const std::string& where, const std::string& what) const {
    return format_error(fault, source_ + ": " + where + ": " + what);
  }
  Status error(const std::string& where, const std::string& what) const {
    return error(FileFault::kMalformed, where, what);
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

// A union is a single-key object {"<kind>": payload}.
Expected<std::pair<std::string, const json*>> union_of(const Reader& r, const json& j, const std::string& where) {
  if (!j.is_object() || j.size() != 1) return r.error(where, "expected a single-key union object, got " + j.dump().substr(0, 80));
  auto it = j.begin();
  return std::pair<std::string, const json*>(it.key(), &it.value());
}

Expected<int64_t> get_int(const Reader& r, const json& j, const std::string& where) {
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return r.error(where, "integer out of range");
    return static_cast<int64_t>(u);
  }
  return r.error(where, "expected an integer, got " + j.dump().substr(0, 40));
}

Expected<double> get_float(const Reader& r, const json& j, const std::string& where) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {  // non-finite values are written as strings (allow_nan=False)
    const std::string& s = j.get_ref<const std::string&>();
    if (s == "Infinity" || s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity" || s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "NaN" || s == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  return r.error(where, "expected a number, got " + j.dump().substr(0, 40));
}

const json& field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

Expected<std::string> get_name(const Reader& r, const json& j, const std::string& where) {
  const json& n = field(j, "name");
  if (!n.is_string()) return r.error(where, "expected {\"name\": ...}");
  return n.get<std::string>();
}

// SymInt: {"as_int": n} or {"as_expr": {"expr_str": ..., "hint": ...}}.
Expected<ir::Dim> parse_sym_dim(const Reader& r, const json& j, const std::string& where) {
  KILN_ASSIGN_OR_RETURN(auto u, union_of(r, j, where));
  if (u.first == "as_int") {
    KILN_ASSIGN_OR_RETURN(int64_t v, get_int(r, *u.second, where));
    return ir::Dim::of(v);
  }
  if (u.first == "as_expr") {
    const json& s = field(*u.second, "expr_str");
    if (!s.is_string()) return r.error(where, "as_expr without expr_str");
    auto e = ir::parse_sympy_srepr(s.get<std::string>());
    if (!e.has_value()) return r.error(where, e.status().message());
    return ir::Dim::of(*e);
  }
  return r.error(where, "unknown SymInt kind '" + u.first + "'");
}

Expected<ir::TensorType> parse_tensor_meta(const Reader& r, const json& j, const std::string& where) {
  ir::TensorType t;
  KILN_ASSIGN_OR_RETURN(int64_t code, get_int(r, field(j, "dtype"), where + ".dtype"));
  auto dt = dtype_from_pt2_code(code);
  if (!dt) return r.error(FileFault::kUnknownDtype, where, "unknown or unsupported dtype code " + std::to_string(code));
  t.dtype = *dt;
  const json& sizes = field(j, "sizes");
  if (!sizes.is_array()) return r.error(where, "tensor meta without sizes");
  for (size_t i = 0; i < sizes.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(ir::Dim d, parse_sym_dim(r, sizes[i], where + ".sizes[" + std::to_string(i) + "]"));
    t.sizes.push_back(std::move(d));
  }
  const json& layout = field(j, "layout");
  if (layout.is_number_integer() && layout.get<int64_t>() != 7 && layout.get<int64_t>() != 0)
    return unsupported(r.source() + ": " + where + ": only strided tensors are supported (layout " +
                       std::to_string(layout.get<int64_t>()) + ")");
  return t;
}

struct GraphBuilder {
  const Reader& r;
  ir::Graph& g;
  std::map<std::string, ir::Value*, std::less<>> values;  // the exporter's names -> SSA values
  std::map<std::string, ir::TensorType, std::less<>> tensor_meta;
  std::map<std::string, ir::SymExprPtr, std::less<>> sym_meta;

  // Names inside an inlined region's graph are the region node's name and
  // two underscores before the exporter's (regions nest).
  std::string scope;
  // Inside an autocast region that is on: its dtype (floating arguments are
  // cast to each op's recorded result dtype, as autocast casts them).
  std::optional<DType> autocast;
  int casts = 0;  // autocast casts made, for their nodes' names

  Expected<ir::Value*> lookup(const std::string& name, const std::string& where) const {
    auto it = values.find(scope + name);
    if (it == values.end()) return r.error(FileFault::kDanglingReference, where, "reference to undefined value '" + name + "'");
    return it->second;
  }

  Expected<ir::Value*> define(const std::string& exported, ir::ValueKind kind, ir::Node* producer, int index,
                              const std::string& where) {
    const std::string name = scope + exported;
    if (values.count(name)) return r.error(FileFault::kDuplicateName, where, "value '" + name + "' is defined twice");
    ir::TensorType t;
    if (auto it = tensor_meta.find(name); it != tensor_meta.end()) t = it->second;
    ir::Value* v = producer ? g.add_value(name, kind, t) : g.add_input(name, kind, t);
    if (auto it = sym_meta.find(name); it != sym_meta.end()) v->sym = it->second;
    if (producer) {
      v->producer = producer;
      v->output_index = index;
      producer->outputs.push_back(v);
    }
    values.emplace(name, v);
    return v;
  }

  // SymIntArgument / SymBoolArgument / SymFloatArgument: {"as_name": n} or a literal.
  Expected<ir::Arg> sym_scalar(const json& j, const std::string& where) {
    KILN_ASSIGN_OR_RETURN(auto u, union_of(r, j, where));
    if (u.first == "as_name") {
      KILN_ASSIGN_OR_RETURN(ir::Value* v, lookup(u.second->get<std::string>(), where));
      return ir::Arg(v);
    }
    if (u.first == "as_int") {
      KILN_ASSIGN_OR_RETURN(int64_t v, get_int(r, *u.second, where));
      return ir::Arg(v);
    }
    if (u.first == "as_float") {
      KILN_ASSIGN_OR_RETURN(double v, get_float(r, *u.second, where));
      return ir::Arg(v);
    }
    if (u.first == "as_bool") return ir::Arg(u.second->get<bool>());
    return r.error(where, "unknown symbolic argument kind '" + u.first + "'");
  }

  Expected<ir::Arg> argument(const json& j, const std::string& where) {
    KILN_ASSIGN_OR_RETURN(auto u, union_of(r, j, where));
    const std::string& k = u.first;
    const json& p = *u.second;
    try {
      if (k == "as_none") return ir::Arg(ir::NoneArg{});
      if (k == "as_tensor") {
        KILN_ASSIGN_OR_RETURN(std::string n, get_name(r, p, where));
        KILN_ASSIGN_OR_RETURN(ir::Value* v, lookup(n, where));
        return ir::Arg(v);
      }
      if (k == "as_tensors") {
        std::vector<ir::Value*> vs;
        for (const json& e : p) {
          KILN_ASSIGN_OR_RETURN(std::string n, get_name(r, e, where));
          KILN_ASSIGN_OR_RETURN(ir::Value* v, lookup(n, where));
          vs.push_back(v);
        }
        return ir::Arg(std::move(vs));
      }
      if (k == "as_optional_tensor") {
        KILN_ASSIGN_OR_RETURN(auto ou, union_of(r, p, where));
        if (ou.first == "as_none") return ir::Arg(ir::NoneArg{});
        KILN_ASSIGN_OR_RETURN(std::string n, get_name(r, *ou.second, where));
        KILN_ASSIGN_OR_RETURN(ir::Value* v, lookup(n, where));
        return ir::Arg(v);
      }
      if (k == "as_optional_tensors") {
        std::vector<std::optional<ir::Value*>> vs;
        for (const json& e : p) {
          KILN_ASSIGN_OR_RETURN(auto ou, union_of(r, e, where));
          if (ou.first == "as_none") {
            vs.emplace_back(std::nullopt);
            continue;
          }
          KILN_ASSIGN_OR_RETURN(std::string n, get_name(r, *ou.second, where));
          KILN_ASSIGN_OR_RETURN(ir::Value* v, lookup(n, where));
          vs.emplace_back(v);
        }
        return ir::Arg(std::move(vs));
      }
      if (k == "as_int") {
        KILN_ASSIGN_OR_RETURN(int64_t v, get_int(r, p, where));
        return ir::Arg(v);
      }
      if (k == "as_ints") {
        std::vector<int64_t> vs;
        for (const json& e : p) {
          KILN_ASSIGN_OR_RETURN(int64_t v, get_int(r, e, where));
          vs.push_back(v);
        }
        return ir::Arg(std::move(vs));
      }
      if (k == "as_float") {
        KILN_ASSIGN_OR_RETURN(double v, get_float(r, p, where));
        return ir::Arg(v);
      }
      if (k == "as_floats") {
        std::vector<double> vs;
        for (const json& e : p) {
          KILN_ASSIGN_OR_RETURN(double v, get_float(r, e, where));
          vs.push_back(v);
        }
        return ir::Arg(std::move(vs));
      }
      if (k == "as_bool") return ir::Arg(p.get<bool>());
      if (k == "as_bools") return ir::Arg(p.get<std::vector<bool>>());
      if (k == "as_string") return ir::Arg(p.get<std::string>());
      if (k == "as_scalar_type") {
        KILN_ASSIGN_OR_RETURN(int64_t code, get_int(r, p, where));
        auto dt = dtype_from_pt2_code(code);
        if (!dt) return r.error(FileFault::kUnknownDtype, where, "unknown or unsupported dtype code " + std::to_string(code));
        return ir::Arg(*dt);
      }
      if (k == "as_memory_format" || k == "as_layout") {
        KILN_ASSIGN_OR_RETURN(int64_t v, get_int(r, p, where));
        return ir::Arg(v);
      }
      if (k == "as_device") {
        ir::Device d;
        d.type = field(p, "type").is_string() ? field(p, "type").get<std::string>() : "cpu";
        if (field(p, "index").is_number_integer()) d.index = field(p, "index").get<int64_t>();
        return ir::Arg(d);
      }
      if (k == "as_sym_int" || k == "as_sym_bool" || k == "as_sym_float") return sym_scalar(p, where);
      if (k == "as_sym_ints") {
        std::vector<ir::SymInt> vs;
        bool all_static = true;
        for (const json& e : p) {
          KILN_ASSIGN_OR_RETURN(ir::Arg a, sym_scalar(e, where));
          if (auto* v = std::get_if<ir::Value*>(&a)) {
            vs.emplace_back(*v);
            all_static = false;
          } else if (auto* i = std::get_if<int64_t>(&a)) {
            vs.emplace_back(*i);
          } else {
            return r.error(where, "symbolic int list holds a non-integer");
          }
        }
        if (all_static) {
          std::vector<int64_t> ints;
          for (const auto& s : vs) ints.push_back(std::get<int64_t>(s));
          return ir::Arg(std::move(ints));
        }
        return ir::Arg(std::move(vs));
      }
    } catch (const json::exception& e) {
      return r.error(where, std::string("malformed '") + k + "' argument: " + e.what());
    }
    return unsupported(r.source() + ": " + where + ": argument kind '" + k + "' is not supported");
  }

  // The nodes of `nodes` (a graph's, or an inlined region's), in order.
  Status add_nodes(const json& nodes) {
    for (size_t ni = 0; ni < nodes.size(); ++ni) {
      const json& jn = nodes[ni];
      std::string name =
          field(jn, "name").is_string() ? field(jn, "name").get<std::string>() : "node" + std::to_string(ni);
      std::string where = "node '" + scope + name + "'";
      if (!field(jn, "target").is_string()) return r.error(where, "missing target");
      std::string target = field(jn, "target").get<std::string>();
      if (target == kAutocastRegion || target == kGradRegion) {
        KILN_TRY(inline_region(jn, name, target == kAutocastRegion));
        continue;
      }
      auto op = ir::op_from_target(target);
      const Respelling* respelled = op ? nullptr : respelling_of(target);
      if (respelled) op = ir::op_from_target(respelled->to);
      if (!op) return unsupported(r.source() + ": " + where + ": unknown op '" + target + "'");
      std::vector<ir::NamedArg> args;
      const json& jin = field(jn, "inputs");
      for (size_t ai = 0; jin.is_array() && ai < jin.size(); ++ai) {
        std::string an = field(jin[ai], "name").is_string() ? field(jin[ai], "name").get<std::string>() : "";
        if (respelled)
          for (const auto& [from, to] : respelled->renamed)
            if (an == from) an = to;
        KILN_ASSIGN_OR_RETURN(ir::Arg a, argument(field(jin[ai], "arg"), where + " argument '" + an + "'"));
        args.push_back({an, std::move(a)});
      }
      if (respelled)
        for (const auto& [an, value] : respelled->extra) args.push_back({an, value});
      if (autocast) KILN_TRY(cast_for_autocast(jn, name, args));
      ir::Node* node = g.add_node(*op, scope + name, std::move(args), {});
      KILN_TRY(ir::check_arguments(*node).with_context(r.source()));
      const json& meta = field(jn, "metadata");
      if (meta.is_object()) {
        for (auto it = meta.begin(); it != meta.end(); ++it)
          if (it.key() == "nn_module_stack" && it.value().is_string())
            node->metadata[it.key()] = it.value().get<std::string>();
      }
      const json& jout = field(jn, "outputs");
      int idx = 0;
      for (size_t oi = 0; jout.is_array() && oi < jout.size(); ++oi) {
        std::string ow = where + " output " + std::to_string(oi);
        KILN_ASSIGN_OR_RETURN(auto u, union_of(r, jout[oi], ow));
        if (u.first == "as_tensor") {
          KILN_ASSIGN_OR_RETURN(std::string n, get_name(r, *u.second, ow));
          KILN_TRY(define(n, ir::ValueKind::kTensor, node, idx++, ow).status());
        } else if (u.first == "as_tensors") {
          for (const json& e : *u.second) {
            KILN_ASSIGN_OR_RETURN(std::string n, get_name(r, e, ow));
            KILN_TRY(define(n, ir::ValueKind::kTensor, node, idx++, ow).status());
          }
        } else if (u.first == "as_sym_int" || u.first == "as_sym_bool" || u.first == "as_sym_float") {
          KILN_ASSIGN_OR_RETURN(auto su, union_of(r, *u.second, ow));
          if (su.first != "as_name") return r.error(ow, "constant symbolic output");
          ir::ValueKind kind = u.first == "as_sym_int"    ? ir::ValueKind::kSymInt
                               : u.first == "as_sym_bool" ? ir::ValueKind::kSymBool
                                                          : ir::ValueKind::kSymFloat;
          KILN_TRY(define(su.second->get<std::string>(), kind, node, idx++, ow).status());
        } else if (u.first == "as_none") {
          // An op result that is None (e.g. unused optional); gets an unnamed placeholder value.
          KILN_TRY(define(name + "_none_" + std::to_string(idx), ir::ValueKind::kTensor, node, idx, ow).status());
          ++idx;
        } else {
          return unsupported(r.source() + ": " + ow + ": output of kind '" + u.first + "' is not supported");
        }
      }
    }
    return Status::ok();
  }

  // The value names of one output entry of a node: one for as_tensor, each
  // of as_tensors, none for any other kind.
  Expected<std::vector<std::string>> tensor_names(const json& entry, const std::string& where) const {
    KILN_ASSIGN_OR_RETURN(auto u, union_of(r, entry, where));
    std::vector<std::string> names;
    if (u.first == "as_tensor") {
      KILN_ASSIGN_OR_RETURN(std::string n, get_name(r, *u.second, where));
      names.push_back(std::move(n));
    } else if (u.first == "as_tensors") {
      for (const json& e : *u.second) {
        KILN_ASSIGN_OR_RETURN(std::string n, get_name(r, e, where));
        names.push_back(std::move(n));
      }
    }
    return names;
  }

  // The tensor and symbol metadata of `graph` (a region's under the scope).
  Status read_meta(const json& graph) {
    const json& tv = field(graph, "tensor_values");
    if (tv.is_object()) {
      for (auto it = tv.begin(); it != tv.end(); ++it) {
        KILN_ASSIGN_OR_RETURN(ir::TensorType t, parse_tensor_meta(r, it.value(), "tensor_values." + it.key()));
        tensor_meta.emplace(scope + it.key(), std::move(t));
      }
    }
    const json& siv = field(graph, "sym_int_values");
    if (siv.is_object()) {
      for (auto it = siv.begin(); it != siv.end(); ++it) {
        auto d = parse_sym_dim(r, it.value(), "sym_int_values." + it.key());
        if (d.has_value()) sym_meta.emplace(scope + it.key(), d->expr ? d->expr : ir::SymExpr::constant(d->value));
      }
    }
    return Status::ok();
  }

  // A region higher-order op (wrap_with_autocast(device_type, dtype, enabled,
  // cache_enabled, graph, *operands) or wrap_with_set_grad_enabled(enabled,
  // graph, *operands)) inlined: its graph's nodes join this graph, its inputs
  // are the operands, the node's results are its graph's outputs. Gradient
  // mode changes nothing at inference; an autocast region that is on casts
  // as autocast does (cast_for_autocast).
  Status inline_region(const json& jn, const std::string& name, bool is_autocast) {
    const std::string where = "node '" + scope + name + "'";
    const json& jin = field(jn, "inputs");
    if (!jin.is_array()) return r.error(where, "missing inputs");
    size_t at = jin.size();
    for (size_t i = 0; i < jin.size(); ++i)
      if (field(field(jin[i], "arg"), "as_graph").is_object()) {
        at = i;
        break;
      }
    if (at == jin.size()) return r.error(where, "region without a graph argument");
    if (at != (is_autocast ? 4u : 1u)) return r.error(where, "region graph at argument " + std::to_string(at));
    std::vector<ir::Arg> flags;
    for (size_t i = 0; i < at; ++i) {
      KILN_ASSIGN_OR_RETURN(ir::Arg a, argument(field(jin[i], "arg"), where + " argument " + std::to_string(i)));
      flags.push_back(std::move(a));
    }
    std::optional<DType> region_dtype = autocast;
    if (is_autocast) {
      const bool* enabled = std::get_if<bool>(&flags[2]);
      if (!enabled) return r.error(where, "autocast region whose 'enabled' is not a constant bool");
      if (*enabled) {
        const DType* dt = std::get_if<DType>(&flags[1]);
        if (!dt) return r.error(where, "autocast region without a dtype");
        region_dtype = *dt;
      } else {
        region_dtype.reset();
      }
    }
    std::vector<ir::Arg> operands;
    for (size_t i = at + 1; i < jin.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(ir::Arg a,
                            argument(field(jin[i], "arg"), where + " operand " + std::to_string(i - at - 1)));
      operands.push_back(std::move(a));
    }
    const json& sub = field(field(field(jin[at], "arg"), "as_graph"), "graph");
    if (!sub.is_object()) return r.error(where, "region graph is not an object");
    const json& sub_inputs = field(sub, "inputs");
    if (!sub_inputs.is_array() || sub_inputs.size() != operands.size())
      return r.error(where, "region graph takes " + std::to_string(sub_inputs.is_array() ? sub_inputs.size() : 0) +
                                " inputs for " + std::to_string(operands.size()) + " operands");
    const std::string outer = scope;
    const std::optional<DType> outer_autocast = autocast;
    scope = outer + name + "__";
    autocast = region_dtype;
    Status st = [&]() -> Status {
      KILN_TRY(read_meta(sub));
      for (size_t i = 0; i < operands.size(); ++i) {
        const std::string iw = where + " region input " + std::to_string(i);
        KILN_ASSIGN_OR_RETURN(auto u, union_of(r, sub_inputs[i], iw));
        std::string in;
        if (u.first == "as_tensor") {
          KILN_ASSIGN_OR_RETURN(in, get_name(r, *u.second, iw));
        } else if (u.first == "as_sym_int") {
          KILN_ASSIGN_OR_RETURN(auto su, union_of(r, *u.second, iw));
          if (su.first != "as_name") return r.error(iw, "constant symbolic input");
          in = su.second->get<std::string>();
        } else {
          return unsupported(r.source() + ": " + iw + ": region input of kind '" + u.first + "' is not supported");
        }
        ir::Value* const* v = std::get_if<ir::Value*>(&operands[i]);
        if (!v) return unsupported(r.source() + ": " + iw + ": an operand that is not a tensor or symbol");
        if (!values.emplace(scope + in, *v).second)
          return r.error(FileFault::kDuplicateName, iw, "value '" + in + "' is defined twice");
      }
      return add_nodes(field(sub, "nodes"));
    }();
    std::vector<ir::Value*> results;
    if (st) {
      const json& outs = field(sub, "outputs");
      for (size_t i = 0; outs.is_array() && i < outs.size(); ++i) {
        Expected<ir::Arg> a = argument(outs[i], where + " region output " + std::to_string(i));
        if (!a) {
          st = a.status();
          break;
        }
        ir::Value* const* v = std::get_if<ir::Value*>(&*a);
        if (!v) {
          st = unsupported(r.source() + ": " + where + ": region output " + std::to_string(i) + " is not a tensor");
          break;
        }
        results.push_back(*v);
      }
    }
    scope = outer;
    autocast = outer_autocast;
    KILN_TRY(st);
    // The node's results, by the names the graph around it reads them by.
    const json& jout = field(jn, "outputs");
    std::vector<std::string> names;
    for (size_t oi = 0; jout.is_array() && oi < jout.size(); ++oi) {
      const std::string ow = where + " output " + std::to_string(oi);
      KILN_ASSIGN_OR_RETURN(std::vector<std::string> more, tensor_names(jout[oi], ow));
      if (more.empty()) return unsupported(r.source() + ": " + ow + ": a region result that is not a tensor");
      names.insert(names.end(), more.begin(), more.end());
    }
    if (names.size() != results.size())
      return r.error(where, std::to_string(names.size()) + " results for a region graph of " +
                                std::to_string(results.size()) + " outputs");
    for (size_t i = 0; i < names.size(); ++i) {
      if (!values.emplace(scope + names[i], results[i]).second)
        return r.error(FileFault::kDuplicateName, where, "value '" + names[i] + "' is defined twice");
      // A result the region computed goes by the name the graph around it gives it.
      if (results[i]->producer && results[i]->name.starts_with(scope + name + "__"))
        results[i]->name = scope + names[i];
    }
    return Status::ok();
  }

  // Inside an autocast region that is on, an op's floating tensor arguments
  // take the dtype export recorded for its first result when that is
  // floating and differs: autocast's lower-precision ops (matmul, linear,
  // convolution, ...) run in its dtype, its float32 ops in float32, and
  // everything else promotes, which a cast to the result dtype computes alike.
  Status cast_for_autocast(const json& jn, const std::string& name, std::vector<ir::NamedArg>& args) {
    const json& jout = field(jn, "outputs");
    if (!jout.is_array() || jout.empty()) return Status::ok();
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> results,
                          tensor_names(jout[0], "node '" + scope + name + "' output 0"));
    if (results.empty()) return Status::ok();
    const std::string& first = results[0];
    auto meta = tensor_meta.find(scope + first);
    if (meta == tensor_meta.end() || !is_floating(meta->second.dtype)) return Status::ok();
    const DType to = meta->second.dtype;
    auto cast = [&](ir::Value* v) -> ir::Value* {
      if (v->kind != ir::ValueKind::kTensor || !is_floating(v->type.dtype) || v->type.dtype == to) return v;
      ir::TensorType t = v->type;
      t.dtype = to;
      const std::string cast_name = scope + name + "_autocast_" + std::to_string(casts++);
      return g.add_node(ir::OpKind::kToCopy, cast_name, {{"self", v}, {"dtype", to}}, {{cast_name, t}})->outputs[0];
    };
    for (ir::NamedArg& a : args) {
      if (auto* v = std::get_if<ir::Value*>(&a.value)) {
        *v = cast(*v);
      } else if (auto* vs = std::get_if<std::vector<ir::Value*>>(&a.value)) {
        for (ir::Value*& e : *vs) e = cast(e);
      }
    }
    return Status::ok();
  }
};

Expected<ir::Module> build_module(const json& root, const std::string& source) {
  Reader r(source);
  ir::Module m;
  m.source = source;

  const json& sv = field(root, "schema_version");
  if (sv.is_object()) {
    int64_t major = field(sv, "major").is_number_integer() ? field(sv, "major").get<int64_t>() : -1;
    if (major != kSchemaMajor)
      return format_error(FileFault::kSchemaVersion, source + ": schema version " + std::to_string(major) + " is not supported (kiln reads " +
                         std::to_string(kSchemaMajor) + ".x); re-export with PyTorch 2.9 or newer");
  }
  if (field(root, "torch_version").is_string()) m.torch_version = field(root, "torch_version").get<std::string>();
  const json& verifiers = field(root, "verifiers");
  if (verifiers.is_array() && !verifiers.empty() && verifiers[0].is_string())
    m.dialect = verifiers[0].get<std::string>();
  else if (field(root, "dialect").is_string())
    m.dialect = field(root, "dialect").get<std::string>();

  const json& rc = field(root, "range_constraints");
  if (rc.is_object()) {
    for (auto it = rc.begin(); it != rc.end(); ++it) {
      ir::SymbolRange range;
      const json& lo = field(it.value(), "min_val");
      const json& hi = field(it.value(), "max_val");
      if (lo.is_number_integer()) range.min = lo.get<int64_t>();
      if (hi.is_number_integer()) range.max = hi.get<int64_t>();
      else if (hi.is_number_unsigned()) range.max = std::numeric_limits<int64_t>::max();
      m.symbols[it.key()] = range;
    }
  }

  const json& gm = field(root, "graph_module");
  const json& graph = field(gm, "graph");
  if (!graph.is_object()) return r.error("graph_module", "missing graph");

  GraphBuilder b{r, m.graph, {}, {}, {}};
  KILN_TRY(b.read_meta(graph));

  // Placeholders.
  const json& inputs = field(graph, "inputs");
  if (!inputs.is_array()) return r.error("graph", "missing inputs");
  std::vector<bool> constant_input(inputs.size(), false);
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string where = "graph.inputs[" + std::to_string(i) + "]";
    KILN_ASSIGN_OR_RETURN(auto u, union_of(r, inputs[i], where));
    if (u.first == "as_tensor") {
      KILN_ASSIGN_OR_RETURN(std::string n, get_name(r, *u.second, where));
      KILN_TRY(b.define(n, ir::ValueKind::kTensor, nullptr, 0, where).status());
    } else if (u.first == "as_sym_int") {
      KILN_ASSIGN_OR_RETURN(auto su, union_of(r, *u.second, where));
      if (su.first != "as_name") return r.error(where, "constant symbolic input");
      KILN_TRY(b.define(su.second->get<std::string>(), ir::ValueKind::kSymInt, nullptr, 0, where).status());
    } else if (u.first == "as_bool" || u.first == "as_int" || u.first == "as_float" || u.first == "as_string" ||
               u.first == "as_none") {
      // A constant input (a bool or number argument): export specialized the
      // graph on its value, so it is not an input of the program.
      constant_input[i] = true;
    } else {
      return unsupported(source + ": " + where + ": graph input of kind '" + u.first + "' is not supported");
    }
  }

  // Nodes, in order.
  const json& nodes = field(graph, "nodes");
  if (!nodes.is_array()) return r.error("graph", "missing nodes");
  KILN_TRY(b.add_nodes(nodes));

  // Outputs.
  const json& outputs = field(graph, "outputs");
  for (size_t i = 0; outputs.is_array() && i < outputs.size(); ++i) {
    std::string where = "graph.outputs[" + std::to_string(i) + "]";
    KILN_ASSIGN_OR_RETURN(ir::Arg a, b.argument(outputs[i], where));
    auto* v = std::get_if<ir::Value*>(&a);
    if (!v) return unsupported(source + ": " + where + ": only tensor and symbolic outputs are supported");
    m.graph.outputs().push_back(*v);
  }

  // Signature.
  const json& sig = field(gm, "signature");
  const json& ispecs = field(sig, "input_specs");
  if (!ispecs.is_array() || ispecs.size() != inputs.size())
    return r.error("signature", "input_specs has " + std::to_string(ispecs.size()) + " entries for " +
                                    std::to_string(inputs.size()) + " graph inputs");
  for (size_t i = 0, g = 0; i < ispecs.size(); ++i) {
    std::string where = "signature.input_specs[" + std::to_string(i) + "]";
    KILN_ASSIGN_OR_RETURN(auto u, union_of(r, ispecs[i], where));
    if (u.first == "constant_input" || constant_input[i]) {
      if (u.first != "constant_input" || !constant_input[i])
        return r.error(where, "a constant input must be a constant graph input, and only one");
      continue;
    }
    const json& p = *u.second;
    ir::InputSpec s;
    std::string argname;
    const json& arg = field(p, "arg");
    if (u.first == "user_input") {
      s.kind = ir::InputSpec::Kind::kUserInput;
      if (arg.is_object() && arg.size() == 1) {
        const json& inner = arg.begin().value();
        if (field(inner, "name").is_string()) argname = field(inner, "name").get<std::string>();
        else if (field(inner, "as_name").is_string()) argname = field(inner, "as_name").get<std::string>();
      }
    } else if (u.first == "parameter" || u.first == "buffer" || u.first == "tensor_constant") {
      if (field(arg, "name").is_string()) argname = field(arg, "name").get<std::string>();
      if (u.first == "parameter") {
        s.kind = ir::InputSpec::Kind::kParameter;
        s.target = field(p, "parameter_name").is_string() ? field(p, "parameter_name").get<std::string>() : "";
      } else if (u.first == "buffer") {
        s.kind = ir::InputSpec::Kind::kBuffer;
        s.target = field(p, "buffer_name").is_string() ? field(p, "buffer_name").get<std::string>() : "";
        s.persistent = !field(p, "persistent").is_boolean() || field(p, "persistent").get<bool>();
      } else {
        s.kind = ir::InputSpec::Kind::kConstant;
        s.target = field(p, "tensor_constant_name").is_string() ? field(p, "tensor_constant_name").get<std::string>() : "";
      }
      if (s.target.empty()) return r.error(where, "missing the target name");
    } else {
      return unsupported(source + ": " + where + ": input kind '" + u.first +
                         "' is not supported (custom objects and tokens cannot be loaded)");
    }
    if (argname != m.graph.inputs()[g]->name)
      return r.error(where, "names '" + argname + "' but graph input " + std::to_string(i) + " is '" +
                                m.graph.inputs()[g]->name + "'");
    ++g;
    m.input_specs.push_back(std::move(s));
  }
  const json& ospecs = field(sig, "output_specs");
  if (!ospecs.is_array() || ospecs.size() != m.graph.outputs().size())
    return r.error("signature", "output_specs has " + std::to_string(ospecs.size()) + " entries for " +
                                    std::to_string(m.graph.outputs().size()) + " graph outputs");
  for (size_t i = 0; i < ospecs.size(); ++i) {
    std::string where = "signature.output_specs[" + std::to_string(i) + "]";
    KILN_ASSIGN_OR_RETURN(auto u, union_of(r, ospecs[i], where));
    const json& p = *u.second;
    ir::OutputSpec s;
    if (u.first == "user_output") {
      s.kind = ir::OutputSpec::Kind::kUserOutput;
    } else if (u.first == "buffer_mutation") {
      s.kind = ir::OutputSpec::Kind::kBufferMutation;
      s.target = field(p, "buffer_name").is_string() ? field(p, "buffer_name").get<std::string>() : "";
      if (s.target.empty()) return r.error(where, "buffer_mutation without buffer_name");
    } else if (u.first == "user_input_mutation") {
      s.kind = ir::OutputSpec::Kind::kUserInputMutation;
      s.target = field(p, "user_input_name").is_string() ? field(p, "user_input_name").get<std::string>() : "";
      bool names_input = false;
      for (size_t k = 0; k < m.input_specs.size() && k < m.graph.inputs().size(); ++k)
        names_input = names_input || (m.input_specs[k].kind == ir::InputSpec::Kind::kUserInput &&
                                      m.graph.inputs()[k]->name == s.target);
      if (!names_input)
        return r.error(where, "user_input_mutation names '" + s.target + "', which is not a user input");
    } else {
      return unsupported(source + ": " + where + ": output kind '" + u.first + "' is not supported (training graphs)");
    }
    m.output_specs.push_back(std::move(s));
  }
  KILN_TRY_CTX(m.graph.verify(), source);
  return m;
}

}  // namespace

Expected<ir::Module> parse_exported_program_json(std::string_view json_text, const std::string& display_name) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::parse_error& e) {
    return format_error(display_name + ": malformed JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  } catch (const json::exception& e) {  // e.g. a number too large for a double
    return format_error(display_name + ": malformed JSON: " + e.what());
  }
  try {
    return build_module(root, display_name);
  } catch (const json::exception& e) {
    return format_error(display_name + ": unexpected JSON structure: " + e.what());
  }
}

}  // namespace kiln::frontend
