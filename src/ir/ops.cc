#include "ir/ops.h"

#include <string>
#include <unordered_map>

namespace kiln::ir {

namespace {

struct OpInfo {
  OpKind op;
  std::string_view target;
  OpCategory category;
  OpKind functional;
  std::string_view first_arg;
};

constexpr OpCategory kCompute = OpCategory::kCompute;
constexpr OpCategory kView = OpCategory::kView;
constexpr OpCategory kCheck = OpCategory::kCheck;
constexpr OpCategory kSym = OpCategory::kSym;

const OpInfo kOps[] = {
#define KILN_OP(e, target, kind) {OpKind::k##e, target, k##kind, OpKind::kUnknown, ""},
#define KILN_INPLACE_OP(e, target, functional, first) \
  {OpKind::k##e, target, OpCategory::kInplace, OpKind::k##functional, first},
#include "ir/ops.def"
#undef KILN_OP
#undef KILN_INPLACE_OP
};

const OpInfo* info(OpKind op) {
  size_t i = static_cast<size_t>(op);
  if (i == 0 || i > std::size(kOps)) return nullptr;
  return &kOps[i - 1];
}

}  // namespace

namespace {

constexpr std::string_view kTorchOpsPrefix = "torch.ops.";

std::string_view strip_prefix(std::string_view t) {
  if (t.starts_with(kTorchOpsPrefix)) t.remove_prefix(kTorchOpsPrefix.size());
  return t;
}

}  // namespace

bool op_matches_entry(std::string_view entry, std::string_view target) {
  entry = strip_prefix(entry);
  if (entry.empty()) return false;
  if (entry == target) return true;
  size_t ns_end = target.find('.');
  if (ns_end == std::string_view::npos) return false;
  std::string_view rest = target.substr(ns_end + 1);
  std::string_view name = rest.substr(0, rest.find('.'));
  if (entry == name) return true;
  return entry.size() == ns_end + 1 + name.size() && entry.starts_with(target.substr(0, ns_end + 1)) &&
         entry.ends_with(name);
}

std::optional<OpKind> op_from_target(std::string_view target) {
  static const auto* table = [] {
    auto* m = new std::unordered_map<std::string_view, OpKind>();
    for (const OpInfo& o : kOps) m->emplace(o.target, o.op);
    return m;
  }();
  constexpr std::string_view kPrefix = "torch.ops.";
  if (target.starts_with(kPrefix)) target.remove_prefix(kPrefix.size());
  auto it = table->find(target);
  if (it == table->end()) return std::nullopt;
  return it->second;
}

std::string_view op_target(OpKind op) {
  const OpInfo* i = info(op);
  return i ? i->target : "unknown";
}

OpCategory op_category(OpKind op) {
  const OpInfo* i = info(op);
  return i ? i->category : OpCategory::kUnknown;
}

std::optional<OpKind> functional_form(OpKind op) {
  const OpInfo* i = info(op);
  if (!i || i->category != OpCategory::kInplace) return std::nullopt;
  return i->functional;
}

std::string_view functional_first_arg(OpKind op) {
  const OpInfo* i = info(op);
  return i ? i->first_arg : "";
}

size_t op_count() { return std::size(kOps); }
OpKind op_at(size_t index) { return kOps[index].op; }

}  // namespace kiln::ir
