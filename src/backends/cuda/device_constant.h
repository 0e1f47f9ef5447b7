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

// FP8 e4m3 (1 sign, 4 exponent bits biased by 7, 3 mantissa bits; no
// infinities, 0x7f and 0xff NaN, largest finite 448): the nearest value,
// ties to even, saturating at +-448 (NaN to 0x7f); and a byte's value.
uint8_t e4m3_from_float(float v);
float e4m3_to_float(uint8_t b);

// A [r, c] matrix as DeviceConstant::fp8_rows stores it: its transpose's c
// rows of r, each divided by its scale (its largest magnitude / 448, 1 for a
// row of zeros) and rounded to e4m3, then the c scales as float32.
Tensor fp8_rows(const Tensor& m);

// Host weight `w` in the form `c` asks for: checks `c` (DeviceConstant::check)
// and that `w` has the sizes the plan expects, before reading any size by
// rank; kFormat naming the constant when either does not hold.
Expected<Tensor> device_form(const Tensor& w, const DeviceConstant& c);

}  // namespace kiln::cuda
