#include "base/promotion.h"

#include <optional>

namespace kiln {

namespace {

enum class Category { kBool = 0, kInt = 1, kFloat = 2 };

Category category(DType t) {
  if (t == DType::Bool) return Category::kBool;
  return is_floating(t) ? Category::kFloat : Category::kInt;
}

// Promotion that treats "no type yet" as the identity.
std::optional<DType> promote_opt(std::optional<DType> a, std::optional<DType> b) {
  if (!a) return b;
  if (!b) return a;
  return promote_types(*a, *b);
}

// c10's combine_categories: `higher` is the result of the higher-priority group.
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (higher && is_floating(*higher)) return higher;
  if ((higher && *higher == DType::Bool) || (lower && is_floating(*lower))) return promote_opt(higher, lower);
  if (higher) return higher;
  return lower;
}

}  // namespace

DType result_type(std::span<const PromotionOperand> operands) {
  std::optional<DType> dim_result, zero_result, wrapped_result;
  for (const PromotionOperand& op : operands) {
    DType t = op.dtype;
    if (op.wrapped_number) {
      if (category(t) == Category::kFloat) t = DType::Float32;  // the default dtype
      wrapped_result = promote_opt(wrapped_result, t);
    } else if (op.zero_dim) {
      zero_result = promote_opt(zero_result, t);
    } else {
      dim_result = promote_opt(dim_result, t);
    }
  }
  return combine(dim_result, combine(zero_result, wrapped_result)).value_or(DType::Float32);
}

}  // namespace kiln
