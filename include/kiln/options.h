// The compile options that take one of a few values, as enums, with the
// names the CLI, the Python package, plans and cache keys spell them by.
#pragma once

#include <string_view>

#include "kiln/status.h"

namespace kiln {

// Engine precision (CompileOptions::precision).
//   kFp32  IEEE float32 throughout.
//   kTf32  float32 tensors, TF32 tensor-core matrix products.
//   kFp16, kBf16  float32 weights and activations converted at build time;
//          softmax, normalization statistics and accumulation stay float32.
//   kFp8w  the weights of matrix-vector products stored as FP8 e4m3 with a
//          float32 scale per output channel; everything else as exported.
// Backends without a choice (the CPU backend) compute as exported.
enum class Precision { kFp32, kTf32, kFp16, kBf16, kFp8w };

// Padded batch buckets (CompileOptions::batch_buckets): kAuto on backends
// that build static shapes only, kOn on any backend, kOff never.
enum class BatchBuckets { kAuto, kOn, kOff };

std::string_view name_of(Precision p);     // "fp32", "tf32", "fp16", "bf16", "fp8w"
std::string_view name_of(BatchBuckets b);  // "auto", "on", "off"

// A name as name_of spells it; anything else is an invalid-argument error
// that lists the names.
Expected<Precision> parse_precision(std::string_view name);
Expected<BatchBuckets> parse_batch_buckets(std::string_view name);

}  // namespace kiln
