#include "backends/cuda/device_constant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

namespace kiln::cuda {

// 32 x 32 tiles, so that both sides stay in cache, on up to 16 threads, since
// a decoder's weights are gigabytes and this runs while an engine loads.
Tensor transposed_matrix(const Tensor& m) {
  const int64_t rows = m.sizes().at(0), cols = m.sizes().at(1);
  Tensor out = Tensor::zeros(m.dtype(), {cols, rows});
  const size_t es = dtype_size(m.dtype());
  const auto* src = static_cast<const uint8_t*>(m.raw_data());
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  constexpr int64_t kTile = 32;
  auto run = [&](auto element, int64_t first_tile, int64_t last_tile) {
    using E = decltype(element);
    const E* a = reinterpret_cast<const E*>(src);
    E* b = reinterpret_cast<E*>(dst);
    for (int64_t i0 = first_tile * kTile; i0 < std::min(rows, last_tile * kTile); i0 += kTile)
      for (int64_t j0 = 0; j0 < cols; j0 += kTile)
        for (int64_t i = i0; i < std::min(rows, i0 + kTile); ++i)
          for (int64_t j = j0; j < std::min(cols, j0 + kTile); ++j) b[j * rows + i] = a[i * cols + j];
  };
  auto part = [&](int64_t first_tile, int64_t last_tile) {
    switch (es) {
      case 1: run(uint8_t{}, first_tile, last_tile); break;
      case 2: run(uint16_t{}, first_tile, last_tile); break;
      case 4: run(uint32_t{}, first_tile, last_tile); break;
      default: run(uint64_t{}, first_tile, last_tile); break;
    }
  };
  const int64_t tiles = (rows + kTile - 1) / kTile;
  const int64_t threads = std::clamp<int64_t>(
      std::min<int64_t>(std::thread::hardware_concurrency(), rows * cols / (int64_t{1} << 20)), 1, 16);
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(part, tiles * t / threads, tiles * (t + 1) / threads);
  part(0, tiles / threads);
  for (std::thread& th : pool) th.join();
  return out;
}

uint8_t e4m3_from_float(float v) {
  if (std::isnan(v)) return 0x7f;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const float a = std::fabs(v);
  if (a >= 448.0f) return sign | 0x7e;  // saturated: 1.75 * 2^8
  // Subnormals are multiples of 2^-9 below 2^-6; a normal's step is 2^(e-3).
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  const int exp = std::max(e - 1, -6);
  const float step = std::ldexp(1.0f, exp - 3);
  const float q = std::nearbyint(a / step);  // the current rounding mode: to nearest, ties to even
  // q in [0, 16]: below 8 a subnormal (exp -6 only), 8..15 normal, 16 the next binade's first value.
  int qi = static_cast<int>(q), ex = exp;
  if (qi >= 16) {
    qi = 8;
    ++ex;
  }
  if (qi < 8) return sign | static_cast<uint8_t>(qi);  // exp is -6 here, else a >= 2^exp gives q >= 8
  const int biased = ex + 7;
  if (biased > 15 || (biased == 15 && qi - 8 == 7)) return sign | 0x7e;
  return sign | static_cast<uint8_t>(biased << 3) | static_cast<uint8_t>(qi - 8);
}

float e4m3_to_float(uint8_t b) {
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int e = (b >> 3) & 0xf, m = b & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
}

Tensor fp8_rows(const Tensor& m) {
  const Tensor t = transposed_matrix(m.to(DType::Float32).contiguous());
  const int64_t rows = t.sizes().at(0), cols = t.sizes().at(1);
  const int64_t scales_at = (rows * cols + 15) / 16 * 16;
  Tensor out = Tensor::zeros(DType::UInt8, {scales_at + 4 * rows});
  const float* src = t.data<float>();
  uint8_t* dst = out.data<uint8_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = src + r * cols;
    float amax = 0.0f;
    for (int64_t j = 0; j < cols; ++j) amax = std::max(amax, std::fabs(row[j]));
    const float scale = amax > 0.0f && std::isfinite(amax) ? amax / 448.0f : 1.0f;
    for (int64_t j = 0; j < cols; ++j) dst[r * cols + j] = e4m3_from_float(row[j] / scale);
    std::memcpy(dst + scales_at + 4 * r, &scale, 4);
  }
  return out;
}

Expected<Tensor> device_form(const Tensor& w, const DeviceConstant& c) {
  // The plan's own description first: a form that needs a rank the constant
  // does not have (padded channels on a bias, say) is refused here, before any
  // size is read by its position.
  KILN_TRY(c.check());
  if (w.sizes() != c.sizes)
    return format_error("constant '" + c.name + "' is " + w.type_string() + ", the plan expects " +
                        shape_to_string(c.sizes));
  if (c.fp8_rows) return fp8_rows(w);
  Tensor t = w.to(c.dtype);
  if (!c.channels_last && !c.transposed) return t.contiguous();
  if (c.transposed) return transposed_matrix(t.contiguous());
  // A filter K, C, R, S stored K, R, S, C, with zeros past its own C channels
  // when the plan pads them.
  Shape s = c.sizes;
  if (c.padded_channels > s[1]) {
    Tensor padded = Tensor::zeros(c.dtype, {s[0], c.padded_channels, s[2], s[3]});
    padded.as_strided(s, padded.strides(), 0).copy_from(t);
    t = padded;
    s[1] = c.padded_channels;
  }
  return t
      .as_strided({s[0], s[2], s[3], s[1]}, {t.strides()[0], t.strides()[2], t.strides()[3], t.strides()[1]},
                  t.storage_offset())
      .contiguous();
}

}  // namespace kiln::cuda
