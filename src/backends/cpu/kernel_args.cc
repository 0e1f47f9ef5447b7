#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"
#include "ir/op_schema.h"

namespace kiln::cpu {

namespace {
bool is_none(const ir::Arg& a) { return std::holds_alternative<ir::NoneArg>(a); }
}  // namespace

bool KernelArgs::has(std::string_view name) const {
  const ir::Arg* a = ir::argument_or_default(node_, name);
  return a != nullptr && !is_none(*a);
}

Status KernelArgs::error(const std::string& message) const {
  return invalid_argument(node_.describe() + ": " + message);
}

Expected<const ir::Arg*> KernelArgs::require(std::string_view name) const {
  const ir::Arg* a = ir::argument_or_default(node_, name);
  if (a == nullptr || is_none(*a)) return error("missing argument '" + std::string(name) + "'");
  return a;
}

Expected<int64_t> KernelArgs::resolve_int(const ir::SymInt& s) const {
  if (const int64_t* v = std::get_if<int64_t>(&s)) return *v;
  const ir::Value* val = std::get<ir::Value*>(s);
  const RtValue& rv = env_[static_cast<size_t>(val->id)];
  if (const int64_t* i = std::get_if<int64_t>(&rv)) return *i;
  if (const bool* b = std::get_if<bool>(&rv)) return *b ? 1 : 0;
  if (const Tensor* t = std::get_if<Tensor>(&rv); t && t->numel() == 1 && !is_floating(t->dtype()))
    return t->item_int();
  return error("value '" + val->name + "' is not an integer at run time");
}

Expected<Tensor> KernelArgs::tensor(std::string_view name) const {
  KILN_ASSIGN_OR_RETURN(const ir::Arg* a, require(name));
  if (auto* v = std::get_if<ir::Value*>(a)) {
    const RtValue& rv = env_[static_cast<size_t>((*v)->id)];
    if (const Tensor* t = std::get_if<Tensor>(&rv); t && t->defined()) return *t;
    return error("argument '" + std::string(name) + "' (value '" + (*v)->name + "') is not a tensor at run time");
  }
  return error("argument '" + std::string(name) + "' is not a tensor");
}

Expected<std::optional<Tensor>> KernelArgs::optional_tensor(std::string_view name) const {
  if (!has(name)) return std::optional<Tensor>();
  KILN_ASSIGN_OR_RETURN(Tensor t, tensor(name));
  return std::optional<Tensor>(std::move(t));
}

Expected<std::vector<Tensor>> KernelArgs::tensors(std::string_view name) const {
  KILN_ASSIGN_OR_RETURN(const ir::Arg* a, require(name));
  const auto* list = std::get_if<std::vector<ir::Value*>>(a);
  if (!list) return error("argument '" + std::string(name) + "' is not a tensor list");
  std::vector<Tensor> out;
  for (const ir::Value* v : *list) {
    const RtValue& rv = env_[static_cast<size_t>(v->id)];
    const Tensor* t = std::get_if<Tensor>(&rv);
    if (!t || !t->defined()) return error("list element '" + v->name + "' is not a tensor at run time");
    out.push_back(*t);
  }
  return out;
}

Expected<std::vector<std::optional<Tensor>>> KernelArgs::optional_tensors(std::string_view name) const {
  KILN_ASSIGN_OR_RETURN(const ir::Arg* a, require(name));
  std::vector<std::optional<Tensor>> out;
  auto add = [&](const ir::Value* v) -> Status {
    const RtValue& rv = env_[static_cast<size_t>(v->id)];
    const Tensor* t = std::get_if<Tensor>(&rv);
    if (!t || !t->defined()) return error("list element '" + v->name + "' is not a tensor at run time");
    out.emplace_back(*t);
    return Status::ok();
  };
  if (const auto* list = std::get_if<std::vector<std::optional<ir::Value*>>>(a)) {
    for (const auto& v : *list) {
      if (!v) {
        out.emplace_back(std::nullopt);
        continue;
      }
      KILN_TRY(add(*v));
    }
    return out;
  }
  if (const auto* list = std::get_if<std::vector<ir::Value*>>(a)) {
    for (const ir::Value* v : *list) KILN_TRY(add(v));
    return out;
  }
  return error("argument '" + std::string(name) + "' is not a list of optional tensors");
}

Expected<int64_t> KernelArgs::int_arg(std::string_view name, std::optional<int64_t> fallback) const {
  const ir::Arg* a = ir::argument_or_default(node_, name);
  if (a == nullptr || is_none(*a)) {
    if (fallback) return *fallback;
    return error("missing argument '" + std::string(name) + "'");
  }
  if (const int64_t* v = std::get_if<int64_t>(a)) return *v;
  if (const bool* b = std::get_if<bool>(a)) return *b ? 1 : 0;
  if (auto* v = std::get_if<ir::Value*>(a)) return resolve_int(ir::SymInt(*v));
  return error("argument '" + std::string(name) + "' is not an int");
}

Expected<int64_t> KernelArgs::dim_arg(std::string_view name, int64_t rank, std::optional<int64_t> fallback) const {
  KILN_ASSIGN_OR_RETURN(int64_t dim, int_arg(name, fallback));
  auto d = wrap_dim(dim, rank);
  if (!d) return error(dim_out_of_range(dim, rank) + " (argument '" + std::string(name) + "')");
  return *d;
}

Expected<std::optional<int64_t>> KernelArgs::optional_int(std::string_view name) const {
  if (!has(name)) return std::optional<int64_t>();
  KILN_ASSIGN_OR_RETURN(int64_t v, int_arg(name));
  return std::optional<int64_t>(v);
}

Expected<double> KernelArgs::float_arg(std::string_view name, std::optional<double> fallback) const {
  const ir::Arg* a = ir::argument_or_default(node_, name);
  if (a == nullptr || is_none(*a)) {
    if (fallback) return *fallback;
    return error("missing argument '" + std::string(name) + "'");
  }
  KILN_ASSIGN_OR_RETURN(Scalar s, scalar(name));
  return s.f;
}

Expected<std::optional<double>> KernelArgs::optional_float(std::string_view name) const {
  if (!has(name)) return std::optional<double>();
  KILN_ASSIGN_OR_RETURN(double v, float_arg(name));
  return std::optional<double>(v);
}

Expected<bool> KernelArgs::bool_arg(std::string_view name, std::optional<bool> fallback) const {
  const ir::Arg* a = ir::argument_or_default(node_, name);
  if (a == nullptr || is_none(*a)) {
    if (fallback) return *fallback;
    return error("missing argument '" + std::string(name) + "'");
  }
  if (const bool* b = std::get_if<bool>(a)) return *b;
  if (const int64_t* v = std::get_if<int64_t>(a)) return *v != 0;
  if (auto* v = std::get_if<ir::Value*>(a)) {
    const RtValue& rv = env_[static_cast<size_t>((*v)->id)];
    if (const bool* b = std::get_if<bool>(&rv)) return *b;
    if (const int64_t* i = std::get_if<int64_t>(&rv)) return *i != 0;
  }
  return error("argument '" + std::string(name) + "' is not a bool");
}

Expected<std::vector<int64_t>> KernelArgs::ints(std::string_view name,
                                                std::optional<std::vector<int64_t>> fallback) const {
  const ir::Arg* a = ir::argument_or_default(node_, name);
  if (a == nullptr || is_none(*a)) {
    if (fallback) return *fallback;
    return error("missing argument '" + std::string(name) + "'");
  }
  if (const auto* v = std::get_if<std::vector<int64_t>>(a)) return *v;
  if (const int64_t* v = std::get_if<int64_t>(a)) return std::vector<int64_t>{*v};
  if (const auto* v = std::get_if<std::vector<ir::SymInt>>(a)) {
    std::vector<int64_t> out;
    for (const ir::SymInt& s : *v) {
      KILN_ASSIGN_OR_RETURN(int64_t x, resolve_int(s));
      out.push_back(x);
    }
    return out;
  }
  if (auto* v = std::get_if<ir::Value*>(a)) {
    KILN_ASSIGN_OR_RETURN(int64_t x, resolve_int(ir::SymInt(*v)));
    return std::vector<int64_t>{x};
  }
  if (const auto* v = std::get_if<std::vector<bool>>(a); v && v->empty()) return std::vector<int64_t>{};
  if (const auto* v = std::get_if<std::vector<double>>(a); v && v->empty()) return std::vector<int64_t>{};
  return error("argument '" + std::string(name) + "' is not an int list");
}

Expected<std::optional<std::vector<int64_t>>> KernelArgs::optional_ints(std::string_view name) const {
  if (!has(name)) return std::optional<std::vector<int64_t>>();
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> v, ints(name));
  return std::optional<std::vector<int64_t>>(std::move(v));
}

Expected<Scalar> KernelArgs::scalar(std::string_view name, std::optional<Scalar> fallback) const {
  const ir::Arg* a = ir::argument_or_default(node_, name);
  if (a == nullptr || is_none(*a)) {
    if (fallback) return *fallback;
    return error("missing argument '" + std::string(name) + "'");
  }
  if (const int64_t* v = std::get_if<int64_t>(a)) return Scalar::of_int(*v);
  if (const double* v = std::get_if<double>(a)) return Scalar::of_float(*v);
  if (const bool* v = std::get_if<bool>(a)) return Scalar::of_bool(*v);
  if (auto* v = std::get_if<ir::Value*>(a)) {
    const RtValue& rv = env_[static_cast<size_t>((*v)->id)];
    if (const int64_t* i = std::get_if<int64_t>(&rv)) return Scalar::of_int(*i);
    if (const double* d = std::get_if<double>(&rv)) return Scalar::of_float(*d);
    if (const bool* b = std::get_if<bool>(&rv)) return Scalar::of_bool(*b);
    if (const Tensor* t = std::get_if<Tensor>(&rv); t && t->defined() && t->numel() == 1) {
      if (is_floating(t->dtype())) return Scalar::of_float(t->item());
      if (t->dtype() == DType::Bool) return Scalar::of_bool(t->item_int() != 0);
      return Scalar::of_int(t->item_int());
    }
  }
  return error("argument '" + std::string(name) + "' is not a number");
}

Expected<std::optional<Scalar>> KernelArgs::optional_scalar(std::string_view name) const {
  if (!has(name)) return std::optional<Scalar>();
  KILN_ASSIGN_OR_RETURN(Scalar s, scalar(name));
  return std::optional<Scalar>(s);
}

Expected<std::optional<DType>> KernelArgs::dtype_arg(std::string_view name) const {
  const ir::Arg* a = ir::argument_or_default(node_, name);
  if (a == nullptr || is_none(*a)) return std::optional<DType>();
  if (const DType* d = std::get_if<DType>(a)) return std::optional<DType>(*d);
  return error("argument '" + std::string(name) + "' is not a dtype");
}

Expected<std::string> KernelArgs::string_arg(std::string_view name, std::optional<std::string> fallback) const {
  const ir::Arg* a = ir::argument_or_default(node_, name);
  if (a == nullptr || is_none(*a)) {
    if (fallback) return *fallback;
    return error("missing argument '" + std::string(name) + "'");
  }
  if (const std::string* s = std::get_if<std::string>(a)) return *s;
  return error("argument '" + std::string(name) + "' is not a string");
}

void KernelRegistry::add(ir::OpKind op, KernelFn fn) {
  size_t i = static_cast<size_t>(op);
  if (table_.size() <= i) table_.resize(i + 1, nullptr);
  table_[i] = fn;
}

KernelFn KernelRegistry::find(ir::OpKind op) const {
  size_t i = static_cast<size_t>(op);
  return i < table_.size() ? table_[i] : nullptr;
}

void register_cpu_kernels(KernelRegistry& r) {
  register_elementwise_kernels(r);
  register_special_kernels(r);
  register_creation_kernels(r);
  register_copy_kernels(r);
  register_view_kernels(r);
  register_scatter_kernels(r);
  register_scatter_reduce_kernels(r);
  register_cumulative_kernels(r);
  register_sort_kernels(r);
  register_window_kernels(r);
  register_indexing_kernels(r);
  register_reduction_kernels(r);
  register_linalg_kernels(r);
  register_factorize_kernels(r);
  register_volume_kernels(r);
  register_loss_kernels(r);
  register_conv_kernels(r);
  register_pool_kernels(r);
  register_norm_kernels(r);
  register_attention_kernels(r);
  register_symbolic_kernels(r);
  register_fused_kernels(r);
  register_fused_elementwise_kernels(r);
}

const KernelRegistry& cpu_kernels() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    register_cpu_kernels(r);
    return r;
  }();
  return registry;
}

}  // namespace kiln::cpu
