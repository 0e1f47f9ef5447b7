// Element types, and the 16-bit float types kiln stores and converts.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace kiln {

// IEEE 754 binary16, stored as its bit pattern.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  explicit operator float() const;
};

// bfloat16 (the top half of a float32), stored as its bit pattern.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a quiet NaN
      bits = static_cast<uint16_t>((u >> 16) | 0x40u);
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even, as PyTorch does
    bits = static_cast<uint16_t>(u >> 16);
  }
  explicit operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

enum class DType : uint8_t {
#define KILN_DTYPE(e, name, bytes, code, st, ctype) e,
#include "kiln/dtype.def"
#undef KILN_DTYPE
  // Complex types exist only between loading and lowering: the split-complex
  // pass turns every complex value into a pair of real ones, and refuses a
  // program whose complex values reach an input, an output or an op it does
  // not split. No tensor, weight, backend or file of kiln holds them.
  Complex64,
  Complex128,
};

std::string_view dtype_name(DType t);
size_t dtype_size(DType t);
bool is_floating(DType t);
bool is_integral(DType t);  // integer types, not bool, not complex
bool is_complex(DType t);
// The real type of a complex type's parts (complex64: float32); `t` itself otherwise.
DType complex_part(DType t);

// Codes of the .pt2 JSON schema (ScalarType enum), which are not c10's numbers.
std::optional<DType> dtype_from_pt2_code(int64_t code);
int64_t dtype_to_pt2_code(DType t);
// safetensors header names ("F32", "BF16", ...).
std::optional<DType> dtype_from_safetensors(std::string_view name);
std::string_view dtype_to_safetensors(DType t);
// torch names ("float32", ...).
std::optional<DType> dtype_from_name(std::string_view name);

// PyTorch's type promotion for two tensor operands (result_type).
DType promote_types(DType a, DType b);

// Calls f(T{}) with T the C++ storage type of `t`.
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
#define KILN_DTYPE(e, name, bytes, code, st, ctype) \
  case DType::e:                                    \
    return f(ctype{});
#include "kiln/dtype.def"
#undef KILN_DTYPE
    case DType::Complex64:
    case DType::Complex128: break;  // never held in a tensor (see DType)
  }
  return f(float{});
}

}  // namespace kiln
