// Pieces shared by the elementwise kernel files (elementwise.cc,
// elementwise_unary.cc).
#pragma once

#include <initializer_list>
#include <string_view>

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

// Reads argument `name` as a tensor when it is one at run time, else as a
// number (an attribute, or a SymInt/SymFloat value).
Expected<Operand> read_operand(const KernelArgs& a, std::string_view name);

struct NamedTensor {
  std::string_view name;
  const Tensor* tensor;
};

// The shape all operands broadcast to, or an error naming the node and listing
// the operands' types.
Expected<Shape> broadcast_operands(const KernelArgs& a, std::initializer_list<NamedTensor> operands);

// Registers the unary kernels (elementwise_unary.cc).
void register_unary_kernels(KernelRegistry& r);

}  // namespace kiln::cpu
