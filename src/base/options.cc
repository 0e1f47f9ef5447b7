#include "kiln/options.h"

#include <array>
#include <string>
#include <utility>

namespace kiln {

namespace {

constexpr std::array<std::pair<Precision, std::string_view>, 5> kPrecisions = {{
    {Precision::kFp32, "fp32"},
    {Precision::kTf32, "tf32"},
    {Precision::kFp16, "fp16"},
    {Precision::kBf16, "bf16"},
    {Precision::kFp8w, "fp8w"},
}};

constexpr std::array<std::pair<BatchBuckets, std::string_view>, 3> kBatchBuckets = {{
    {BatchBuckets::kAuto, "auto"},
    {BatchBuckets::kOn, "on"},
    {BatchBuckets::kOff, "off"},
}};

template <typename E, size_t N>
std::string_view name_in(const std::array<std::pair<E, std::string_view>, N>& table, E value) {
  for (const auto& [e, name] : table)
    if (e == value) return name;
  return "?";
}

template <typename E, size_t N>
Expected<E> parse_in(const std::array<std::pair<E, std::string_view>, N>& table, std::string_view name,
                     const char* what) {
  std::string names;
  for (const auto& [e, n] : table) {
    if (n == name) return e;
    names += (names.empty() ? "" : ", ") + std::string(n);
  }
  return invalid_argument(std::string(what) + " must be one of " + names + ", got '" + std::string(name) + "'");
}

}  // namespace

std::string_view name_of(Precision p) { return name_in(kPrecisions, p); }
std::string_view name_of(BatchBuckets b) { return name_in(kBatchBuckets, b); }

Expected<Precision> parse_precision(std::string_view name) { return parse_in(kPrecisions, name, "precision"); }
Expected<BatchBuckets> parse_batch_buckets(std::string_view name) {
  return parse_in(kBatchBuckets, name, "batch-buckets");
}

}  // namespace kiln
