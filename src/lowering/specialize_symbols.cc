// Symbols whose range is one value become constants.
//
// A shape profile with min == max for a dynamic dimension (a decode step's one
// token, a fixed batch) fixes that symbol. Every size expression whose symbols
// are all fixed becomes a static size, and every symbolic scalar whose
// expression is then known becomes a number where it is used, so that static
// backends can build the nodes and dead-code elimination drops the nodes that
// computed those sizes at run time.
#include <algorithm>

#include "lowering/pass.h"

namespace kiln::lowering {

namespace {

// `e` under `fixed`, when every symbol of `e` is fixed.
std::optional<int64_t> fixed_value(const ir::SymExpr& e, const ir::SymBindings& fixed) {
  std::vector<std::string> names;
  e.collect_symbols(names);
  for (const std::string& n : names)
    if (!fixed.count(n)) return std::nullopt;
  Expected<int64_t> v = e.eval(fixed);
  return v.has_value() ? std::optional<int64_t>(*v) : std::nullopt;
}

}  // namespace

Status specialize_symbols(ir::Module& m) {
  ir::SymBindings fixed;
  for (const auto& [name, r] : m.symbols)
    if (r.min == r.max) fixed[name] = r.min;
  if (fixed.empty()) return Status::ok();

  std::map<const ir::Value*, int64_t> known;  // symbolic scalars that are numbers now
  for (size_t i = 0; i < m.graph.num_values(); ++i) {
    ir::Value* v = m.graph.value(i);
    for (ir::Dim& d : v->type.sizes)
      if (!d.is_static())
        if (auto x = fixed_value(*d.expr, fixed)) d = ir::Dim::of(*x);
    if (v->kind == ir::ValueKind::kSymInt && v->sym)
      if (auto x = fixed_value(*v->sym, fixed)) known[v] = *x;
  }
  for (auto& n : m.graph.nodes())
    for (ir::NamedArg& a : n->args) {
      if (auto* v = std::get_if<ir::Value*>(&a.value)) {
        if (auto it = known.find(*v); it != known.end()) a.value = it->second;
      } else if (auto* list = std::get_if<std::vector<ir::SymInt>>(&a.value)) {
        bool all_numbers = true;
        for (ir::SymInt& s : *list) {
          if (auto* sv = std::get_if<ir::Value*>(&s))
            if (auto it = known.find(*sv); it != known.end()) s = it->second;
          all_numbers = all_numbers && std::holds_alternative<int64_t>(s);
        }
        if (all_numbers) {
          std::vector<int64_t> ints;
          for (const ir::SymInt& s : *list) ints.push_back(std::get<int64_t>(s));
          a.value = std::move(ints);
        }
      }
    }
  for (const auto& [name, value] : fixed) m.symbols.erase(name);
  return m.graph.verify();
}

}  // namespace kiln::lowering
