// Operands of elementwise kernels: a tensor argument or a Python number,
// broadcast and promoted as PyTorch does, and the loops of the floating math
// functions that elementwise.cc and special.cc share.
#pragma once

#include <array>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

// A tensor operand, or a Python number wrapped into a 0-d tensor (int64,
// float64 or bool), which promotes as a "wrapped number".
struct Operand {
  Tensor t;
  bool wrapped = false;
  PromotionOperand promo() const { return {t.dtype(), t.dim() == 0, wrapped}; }
};

struct NamedTensor {
  std::string_view name;
  const Tensor* tensor;
};

// Reads argument `name` as a tensor when it is one at run time, else as a
// number (an attribute, or a SymInt/SymFloat value).
Expected<Operand> read_operand(const KernelArgs& a, std::string_view name);

// The shape all operands broadcast to, or an error naming the node and listing
// the operands' types.
Expected<Shape> broadcast_operands(const KernelArgs& a, std::initializer_list<NamedTensor> operands);

// t cast to dtype and expanded to shape.
Tensor prepare(const Tensor& t, DType dtype, const Shape& shape);

inline std::array<PromotionOperand, 2> promo(const Operand& x, const Operand& y) { return {x.promo(), y.promo()}; }

// A binary op of floating values: arguments `lhs_name` and `rhs_name`
// broadcast and promoted (integer and bool operands to float32 unless
// `integers` takes them as they are), f computed in float for 16-bit types.
template <typename F>
Status floating_binary(KernelArgs& a, std::string_view op, bool integers, F f, std::string_view lhs_name = "self",
                       std::string_view rhs_name = "other") {
  KILN_ASSIGN_OR_RETURN(Operand lhs, read_operand(a, lhs_name));
  KILN_ASSIGN_OR_RETURN(Operand rhs, read_operand(a, rhs_name));
  DType common = result_type(promo(lhs, rhs));
  if (!is_floating(common) && !integers) common = DType::Float32;
  if (common == DType::Bool) return a.error(std::string(op) + " is not supported for bool tensors");
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_operands(a, {{lhs_name, &lhs.t}, {rhs_name, &rhs.t}}));
  Tensor l = prepare(lhs.t, common, shape);
  Tensor r = prepare(rhs.t, common, shape);
  Tensor out = Tensor::zeros(common, shape);
  visit_dtype(common, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) map_binary<T, T, T>(l, r, out, f);
  });
  a.set_output(0, out);
  return Status::ok();
}

// Applies f to every element of argument `arg` in the compute type of a
// floating dtype. Integer and bool inputs become float32 first when
// `promote_integers`, else are an error.
template <typename F>
Status floating_unary(KernelArgs& a, std::string_view op, bool promote_integers, F f, std::string_view arg = "self") {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor(arg));
  if (!promote_integers && !is_floating(self.dtype()))
    return a.error(std::string(op) + " is only supported for floating tensors, got " + self.type_string());
  const DType dtype = is_floating(self.dtype()) ? self.dtype() : DType::Float32;
  Tensor in = cast_to(self, dtype);
  Tensor out = Tensor::zeros(dtype, self.sizes());
  visit_floating(dtype, [&](auto tag) {
    using T = decltype(tag);
    map_unary<T, T>(in, out, f);
  });
  a.set_output(0, out);
  return Status::ok();
}

}  // namespace kiln::cpu
