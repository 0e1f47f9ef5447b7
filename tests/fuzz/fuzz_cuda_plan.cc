// A CUDA engine plan, read as the CUDA backend's load() reads it before it
// touches the device (read_cuda_engine_plan: the common plan, the CUDA plan
// JSON, their agreement), then every constant put in its device form on the
// host (device_form) from zeros of its declared sizes, and every shape of a
// range plan's table made as a call makes it. No GPU needed.
#include "backends/cuda/cuda_plan.h"
#include "backends/cuda/device_constant.h"
#include "kiln/tensor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto read = kiln::cuda::read_cuda_engine_plan({data, size}, "fuzz cuda plan");
  if (!read) return 0;
  if (const auto& table = read->plan.table) {
    for (size_t i = 0; i < table->starts.size() && i < 4096; ++i) {
      auto shape = table->shape_plan(read->plan, i);
      if (shape && !shape->validate()) __builtin_trap();  // what shape_plan gives is valid
      (void)table->constants_fixed(table->variant(i));
    }
  }
  for (const kiln::cuda::DeviceConstant& c : read->plan.constants) {
    // Weights of the declared sizes, when small enough to make; the form is
    // also asked for with a weight of other sizes, which must be refused.
    if (c.sizes.size() > 6) continue;
    int64_t n = 1;
    bool small = true;
    for (int64_t s : c.sizes) small = small && s >= 0 && s <= 4096 && (n *= s) <= (1 << 20);
    if (!small || c.nbytes() > (int64_t{1} << 24)) continue;
    auto form = kiln::cuda::device_form(kiln::Tensor::zeros(kiln::DType::Float32, c.sizes), c);
    if (form && static_cast<int64_t>(form->nbytes()) != c.nbytes()) __builtin_trap();  // the bytes load() copies
    // A weight of other sizes (n + 1 elements, 1-d) never fits the description.
    if (kiln::cuda::device_form(kiln::Tensor::zeros(kiln::DType::Float32, {n + 1}), c)) __builtin_trap();
  }
  return 0;
}
