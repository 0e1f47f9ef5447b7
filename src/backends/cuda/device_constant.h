// A weight as a CUDA plan stores it on the device: the host work load() does
// for each DeviceConstant before copying it over (dtype conversion for
// --precision, channels-last filters with zero-padded channels, transposed
// matrices). Host code only: it runs, and is tested, without a GPU.
#pragma once

#include "backends/cuda/cuda_plan.h"
#include "kiln/tensor.h"

namespace kiln::cuda {

// The transpose of a contiguous 2-D tensor (c rows of r for an [r, c] one).
Tensor transposed_matrix(const Tensor& m);

// Host weight `w` in the form `c` asks for: checks `c` (DeviceConstant::check)
// and that `w` has the sizes the plan expects, before reading any size by
// rank; kFormat naming the constant when either does not hold.
Expected<Tensor> device_form(const Tensor& w, const DeviceConstant& c);

}  // namespace kiln::cuda
