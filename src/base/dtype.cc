#include "kiln/dtype.h"

#include <bit>

namespace kiln {

Half::Half(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag > 0x7f800000u) {  // NaN
    bits = static_cast<uint16_t>(sign | 0x7e00u);
    return;
  }
  if (mag >= 0x477ff000u) {  // rounds to >= 65520: infinity
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (mag < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    // Add 0.5 so the float adder does round-to-nearest-even at the half's ulp (2^-24).
    float a = std::bit_cast<float>(mag) + 0.5f;
    bits = static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(a) - 0x3f000000u));
    return;
  }
  uint32_t odd = (mag >> 13) & 1u;
  mag += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round to nearest even
  bits = static_cast<uint16_t>(sign | (mag >> 13));
}

Half::operator float() const {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t man = bits & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (man == 0) {
      out = sign;
    } else {  // subnormal: value = man * 2^-24
      float v = static_cast<float>(man) * 5.9604644775390625e-8f;
      out = sign | std::bit_cast<uint32_t>(v);
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (man << 13);
  } else {
    out = sign | ((exp + 112u) << 23) | (man << 13);
  }
  return std::bit_cast<float>(out);
}

std::string_view dtype_name(DType t) {
  switch (t) {
#define KILN_DTYPE(e, name, bytes, code, st, ctype) \
  case DType::e:                                    \
    return name;
#include "kiln/dtype.def"
#undef KILN_DTYPE
    case DType::Complex64: return "complex64";
    case DType::Complex128: return "complex128";
  }
  return "unknown";
}

size_t dtype_size(DType t) {
  switch (t) {
#define KILN_DTYPE(e, name, bytes, code, st, ctype) \
  case DType::e:                                    \
    return bytes;
#include "kiln/dtype.def"
#undef KILN_DTYPE
    case DType::Complex64: return 8;
    case DType::Complex128: return 16;
  }
  return 0;
}

bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

bool is_complex(DType t) { return t == DType::Complex64 || t == DType::Complex128; }

bool is_integral(DType t) { return !is_floating(t) && !is_complex(t) && t != DType::Bool; }

DType complex_part(DType t) {
  if (t == DType::Complex64) return DType::Float32;
  if (t == DType::Complex128) return DType::Float64;
  return t;
}

// The .pt2 schema's COMPLEXFLOAT and COMPLEXDOUBLE.
constexpr int64_t kPt2Complex64 = 10;
constexpr int64_t kPt2Complex128 = 11;

std::optional<DType> dtype_from_pt2_code(int64_t code) {
#define KILN_DTYPE(e, name, bytes, c, st, ctype) \
  if (code == (c)) return DType::e;
#include "kiln/dtype.def"
#undef KILN_DTYPE
  if (code == kPt2Complex64) return DType::Complex64;
  if (code == kPt2Complex128) return DType::Complex128;
  return std::nullopt;
}

int64_t dtype_to_pt2_code(DType t) {
  switch (t) {
#define KILN_DTYPE(e, name, bytes, code, st, ctype) \
  case DType::e:                                    \
    return code;
#include "kiln/dtype.def"
#undef KILN_DTYPE
    case DType::Complex64: return kPt2Complex64;
    case DType::Complex128: return kPt2Complex128;
  }
  return 0;
}

std::optional<DType> dtype_from_safetensors(std::string_view s) {
#define KILN_DTYPE(e, name, bytes, code, st, ctype) \
  if (s == (st)) return DType::e;
#include "kiln/dtype.def"
#undef KILN_DTYPE
  return std::nullopt;
}

std::string_view dtype_to_safetensors(DType t) {
  switch (t) {
#define KILN_DTYPE(e, name, bytes, code, st, ctype) \
  case DType::e:                                    \
    return st;
#include "kiln/dtype.def"
#undef KILN_DTYPE
    case DType::Complex64:
    case DType::Complex128: break;  // safetensors files of kiln hold no complex tensors
  }
  return "";
}

std::optional<DType> dtype_from_name(std::string_view s) {
#define KILN_DTYPE(e, name, bytes, code, st, ctype) \
  if (s == (name)) return DType::e;
#include "kiln/dtype.def"
#undef KILN_DTYPE
  return std::nullopt;
}

namespace {
// Rank in PyTorch's promotion lattice for same-category types.
int category(DType t) {
  if (t == DType::Bool) return 0;
  if (is_integral(t)) return 1;
  if (is_complex(t)) return 3;
  return 2;
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    if ((a == DType::Float16 && b == DType::BFloat16) || (a == DType::BFloat16 && b == DType::Float16))
      return DType::Float32;
    return dtype_size(a) >= dtype_size(b) ? a : b;
  }
  // Integers: uint8 with a signed type of the same size goes up one step.
  if (a == DType::UInt8 || b == DType::UInt8) {
    DType other = a == DType::UInt8 ? b : a;
    return other == DType::Int8 ? DType::Int16 : other;
  }
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

}  // namespace kiln
