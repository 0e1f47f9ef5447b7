#include "engine/value.h"

namespace kiln::engine {

Tensor rt_value_to_tensor(const RtValue& v) {
  if (const auto* t = std::get_if<Tensor>(&v)) return *t;
  if (const auto* i = std::get_if<int64_t>(&v)) {
    Tensor t = Tensor::zeros(DType::Int64, {});
    t.data<int64_t>()[0] = *i;
    return t;
  }
  if (const auto* d = std::get_if<double>(&v)) return Tensor::scalar(DType::Float64, *d);
  if (const auto* b = std::get_if<bool>(&v)) return Tensor::scalar(DType::Bool, *b ? 1.0 : 0.0);
  return Tensor();
}

RtValue tensor_to_rt_value(ir::ValueKind kind, const Tensor& t) {
  switch (kind) {
    case ir::ValueKind::kSymInt: return t.int_at(0);
    case ir::ValueKind::kSymFloat: return t.value_at(0);
    case ir::ValueKind::kSymBool: return t.value_at(0) != 0;
    default: return t;
  }
}

}  // namespace kiln::engine
