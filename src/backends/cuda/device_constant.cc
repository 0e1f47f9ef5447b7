#include "backends/cuda/device_constant.h"

#include <algorithm>
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

Expected<Tensor> device_form(const Tensor& w, const DeviceConstant& c) {
  // The plan's own description first: a form that needs a rank the constant
  // does not have (padded channels on a bias, say) is refused here, before any
  // size is read by its position.
  KILN_TRY(c.check());
  if (w.sizes() != c.sizes)
    return format_error("constant '" + c.name + "' is " + w.type_string() + ", the plan expects " +
                        shape_to_string(c.sizes));
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
