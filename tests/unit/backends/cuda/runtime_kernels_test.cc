// The CUDA runtime's own kernels (batched small copies, argmax of rows for
// greedy decoding on the device): the embedded source compiles with NVRTC
// (no GPU needed, label cpu), and on a GPU they compute what a host
// reference computes (RuntimeKernelsOnGpu, label gpu).
#include "backends/cuda/runtime_kernels.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "backends/cuda/cuda_support.h"
#include "backends/cuda/nvrtc_compile.h"
#include "kiln/kiln.h"
#include "runtime/device_copy.h"

namespace kiln::cuda {
namespace {

TEST(RuntimeKernels, TheEmbeddedSourceCompilesForHopperAndAmpere) {
  for (const char* arch : {"sm_90", "sm_80"}) {
    auto m = compile_cuda_source(runtime_kernels_source(), arch, "kiln_runtime_kernels.cu");
    ASSERT_TRUE(m.has_value()) << arch << ": " << m.status().message();
    EXPECT_FALSE(m->cubin.empty());
  }
  EXPECT_NE(runtime_kernels_source().find("kiln_argmax_partial"), std::string::npos);
  EXPECT_NE(runtime_kernels_source().find("kiln_copy_batch"), std::string::npos);
  EXPECT_NE(runtime_kernels_source().find("kiln_nonzero_write"), std::string::npos);
}

// torch.argmax over each row: the first of equal maxima, a NaN above any number.
std::vector<int64_t> reference_argmax(const std::vector<float>& x, int64_t rows, int64_t n) {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[static_cast<size_t>(r * n + i)], b = x[static_cast<size_t>(r * n + best)];
      if (std::isnan(b)) break;
      if (std::isnan(v) || v > b) best = i;
    }
    out.push_back(best);
  }
  return out;
}

TEST(CudaRuntimeKernels, ArgmaxRowsIsTorchsArgmax) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const engine::DeviceMemory* dm = runtime::device_memory_of(Device::cuda());
  ASSERT_NE(dm, nullptr);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{128256}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n=" + std::to_string(n));
      const int64_t rows = 5;
      Tensor host = Tensor::zeros(DType::Float32, {rows, n});
      float* x = host.data<float>();
      for (int64_t i = 0; i < rows * n; ++i) x[i] = std::round(normal(rng) * 4) / 4;  // coarse: many ties
      if (n > 3) {
        x[1 * n + n / 2] = x[1 * n + n - 1] = 100;                              // row 1: a tie of maxima
        x[2 * n + n - 2] = std::numeric_limits<float>::quiet_NaN();             // row 2: a NaN wins
        x[3 * n + 2] = x[3 * n + 1] = std::numeric_limits<float>::quiet_NaN();  // row 3: the first NaN
      }
      const Tensor typed = host.to(dtype);
      const Tensor back = typed.to(DType::Float32);  // the values the device sees
      std::vector<float> values(back.data<float>(), back.data<float>() + rows * n);
      auto dx = dm->empty(dtype, {rows, n});
      auto dout = dm->empty(DType::Int64, {rows});
      ASSERT_TRUE(dx.has_value() && dout.has_value());
      ASSERT_TRUE(copy_tensor(*dx, typed).is_ok());
      ASSERT_TRUE(dm->argmax_rows(*dx, *dout, nullptr).is_ok());
      auto got = to_host(*dout);
      ASSERT_TRUE(got.has_value());
      const std::vector<int64_t> want = reference_argmax(values, rows, n);
      for (int64_t r = 0; r < rows; ++r)
        EXPECT_EQ(got->data<int64_t>()[r], want[static_cast<size_t>(r)]) << "row " << r;
    }
  }
  // Refused: integers, host memory, an output of the wrong size.
  auto ints = dm->empty(DType::Int64, {2, 3});
  auto out = dm->empty(DType::Int64, {2});
  ASSERT_TRUE(ints.has_value() && out.has_value());
  EXPECT_FALSE(dm->argmax_rows(*ints, *out, nullptr).is_ok());
  EXPECT_FALSE(dm->argmax_rows(Tensor::zeros(DType::Float32, {2, 3}), *out, nullptr).is_ok());
  auto floats = dm->empty(DType::Float32, {3, 3});
  ASSERT_TRUE(floats.has_value());
  EXPECT_FALSE(dm->argmax_rows(*floats, *out, nullptr).is_ok());
}

// torch.nonzero of a host tensor read element by element through value_at:
// index tuples in row-major order; -0.0 is zero, NaN is not.
std::vector<int64_t> reference_nonzero(const Tensor& t) {
  std::vector<int64_t> out;
  const Shape& sizes = t.sizes();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.value_at(i);
    if (v == 0.0) continue;  // NaN != 0, -0.0 == 0
    std::vector<int64_t> idx(sizes.size());
    int64_t rest = i;
    for (size_t d = sizes.size(); d-- > 0;) {
      idx[d] = rest % sizes[d];
      rest /= sizes[d];
    }
    out.insert(out.end(), idx.begin(), idx.end());
  }
  return out;
}

TEST(CudaRuntimeKernels, NonzeroIsTorchsNonzeroAndReadsOnlyTheCountBack) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const engine::DeviceMemory* dm = runtime::device_memory_of(Device::cuda());
  ASSERT_NE(dm, nullptr);
  std::mt19937 rng(11);
  struct Case {
    DType dtype;
    Shape sizes;
    double density;
  };
  // One chunk, several chunks with a partial last one, 0-d, empty, every element and none.
  const std::vector<Case> cases = {
      {DType::Bool, {4, 6}, 0.4},        {DType::Bool, {3, 5000, 2}, 0.3},    {DType::Float32, {12}, 0.5},
      {DType::Float16, {7, 9, 11}, 0.5}, {DType::BFloat16, {70000}, 0.01},    {DType::Int64, {33, 65}, 0.5},
      {DType::Int32, {5, 5}, 1.0},       {DType::Float32, {9000}, 0.0},       {DType::Float32, {}, 1.0},
      {DType::Bool, {2, 0, 3}, 0.5},     {DType::Float64, {2, 3, 4, 5}, 0.5},
  };
  for (const Case& c : cases) {
    Tensor host = Tensor::zeros(DType::Float64, c.sizes);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int64_t i = 0; i < host.numel(); ++i) host.data<double>()[i] = u(rng) < c.density ? 1.0 + (i % 5) : 0.0;
    if (is_floating(c.dtype) && host.numel() > 3) {
      host.data<double>()[0] = -0.0;  // zero, for all its sign bit
      host.data<double>()[2] = std::numeric_limits<double>::quiet_NaN();
    }
    const Tensor typed = host.to(c.dtype);
    SCOPED_TRACE(typed.type_string());
    auto dx = dm->empty(c.dtype, c.sizes);
    ASSERT_TRUE(dx.has_value());
    if (typed.numel() > 0) ASSERT_TRUE(copy_tensor(*dx, typed).is_ok());
    auto idx = dm->nonzero(*dx, nullptr);
    ASSERT_TRUE(idx.has_value()) << idx.status().message();
    EXPECT_FALSE(idx->is_cpu());
    const std::vector<int64_t> want = reference_nonzero(typed);
    const int64_t rank = static_cast<int64_t>(c.sizes.size());
    ASSERT_EQ(idx->sizes(), (Shape{rank == 0 ? int64_t{1} : static_cast<int64_t>(want.size()) / rank, rank}));
    if (want.empty()) continue;
    auto got = to_host(*idx);
    ASSERT_TRUE(got.has_value());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got->data<int64_t>()[i], want[i]) << "element " << i;
  }
  EXPECT_FALSE(dm->nonzero(Tensor::zeros(DType::Float32, {3}), nullptr).has_value());  // host memory
}

// torch.unique of the flattened tensor, computed another way: the elements
// in order (sorted: by value, NaNs last, ties by position; consecutive: as
// they come), a group starting where the value changes or is a NaN.
struct UniqueReference {
  std::vector<int64_t> first;  // per group: the element whose value it has
  std::vector<int64_t> inverse, counts;
};
UniqueReference reference_unique(const Tensor& t, bool sorted) {
  std::vector<int64_t> order(static_cast<size_t>(t.numel()));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (sorted)
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const double x = t.value_at(a), y = t.value_at(b);
      if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
      return x < y;
    });
  UniqueReference r;
  r.inverse.assign(order.size(), -1);
  for (size_t p = 0; p < order.size(); ++p) {
    const double v = t.value_at(order[p]);
    if (p == 0 || std::isnan(v) || v != t.value_at(order[p - 1])) {
      r.first.push_back(order[p]);
      r.counts.push_back(0);
    }
    ++r.counts.back();
    r.inverse[static_cast<size_t>(order[p])] = static_cast<int64_t>(r.first.size()) - 1;
  }
  return r;
}

TEST(CudaRuntimeKernels, UniqueIsTorchsUniqueAndReadsOnlyTheCountBack) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const engine::DeviceMemory* dm = runtime::device_memory_of(Device::cuda());
  ASSERT_NE(dm, nullptr);
  std::mt19937 rng(29);
  struct Case {
    DType dtype;
    Shape sizes;
    int distinct;  // values drawn from this many
  };
  // Every dtype kind; a power of two and not; one element, empty, many repeats, all distinct.
  const std::vector<Case> cases = {
      {DType::Float32, {6, 16}, 7},   {DType::Float16, {333}, 40},     {DType::BFloat16, {5, 7}, 5},
      {DType::Float64, {1024}, 900},  {DType::Int64, {6, 16}, 9},      {DType::Int32, {4097}, 100},
      {DType::Int16, {50}, 50},       {DType::Int8, {3, 3, 3}, 6},     {DType::UInt8, {200}, 20},
      {DType::Bool, {17}, 2},         {DType::Float32, {1}, 1},        {DType::Int64, {0}, 1},
      {DType::Float32, {70000}, 300},
  };
  for (const Case& c : cases) {
    Tensor host = Tensor::zeros(DType::Float64, c.sizes);
    std::uniform_int_distribution<int> pick(0, c.distinct - 1);
    const bool floating = is_floating(c.dtype), is_signed = c.dtype != DType::UInt8 && c.dtype != DType::Bool;
    for (int64_t i = 0; i < host.numel(); ++i) {
      const int k = pick(rng);
      double v = is_signed ? k - c.distinct / 2 : k;
      if (floating) v = v * 0.25;
      if (c.dtype == DType::Bool) v = k % 2;
      host.data<double>()[i] = v;
    }
    if (floating && host.numel() > 8) {
      host.data<double>()[1] = -0.0;  // equal to 0.0
      host.data<double>()[3] = 0.0;
      host.data<double>()[4] = std::numeric_limits<double>::quiet_NaN();  // each NaN its own value
      host.data<double>()[7] = -std::numeric_limits<double>::quiet_NaN();
      host.data<double>()[5] = -std::numeric_limits<double>::infinity();
      host.data<double>()[6] = std::numeric_limits<double>::infinity();
    }
    const Tensor typed = host.to(c.dtype);
    auto dx = dm->empty(c.dtype, c.sizes);
    ASSERT_TRUE(dx.has_value());
    if (typed.numel() > 0) {
      ASSERT_TRUE(copy_tensor(*dx, typed).is_ok());
    }
    for (const bool sorted : {true, false}) {
      SCOPED_TRACE(typed.type_string() + (sorted ? " sorted" : " consecutive"));
      auto got = dm->unique(*dx, sorted, true, true, nullptr);
      ASSERT_TRUE(got.has_value()) << got.status().message();
      ASSERT_EQ(got->size(), 3u);
      const UniqueReference want = reference_unique(typed, sorted);
      const int64_t groups = static_cast<int64_t>(want.first.size());
      ASSERT_EQ((*got)[0].sizes(), (Shape{groups}));
      ASSERT_EQ((*got)[1].sizes(), c.sizes);
      ASSERT_EQ((*got)[2].sizes(), (Shape{groups}));
      for (const Tensor& t : *got) EXPECT_FALSE(t.is_cpu());
      if (groups == 0) continue;
      auto values = to_host((*got)[0]), inverse = to_host((*got)[1]), counts = to_host((*got)[2]);
      ASSERT_TRUE(values.has_value() && inverse.has_value() && counts.has_value());
      for (int64_t g = 0; g < groups; ++g) {
        const double v = values->value_at(g), w = typed.value_at(want.first[static_cast<size_t>(g)]);
        ASSERT_TRUE(std::isnan(w) ? std::isnan(v) : v == w && std::signbit(v) == std::signbit(w)) << "group " << g;
        ASSERT_EQ(counts->data<int64_t>()[g], want.counts[static_cast<size_t>(g)]) << "group " << g;
      }
      for (int64_t i = 0; i < typed.numel(); ++i)
        ASSERT_EQ(inverse->data<int64_t>()[i], want.inverse[static_cast<size_t>(i)]) << "element " << i;
      // Without inverse and counts: the values alone.
      auto plain = dm->unique(*dx, sorted, false, false, nullptr);
      ASSERT_TRUE(plain.has_value()) << plain.status().message();
      EXPECT_FALSE((*plain)[1].defined());
      EXPECT_FALSE((*plain)[2].defined());
      auto again = to_host((*plain)[0]);
      ASSERT_TRUE(again.has_value());
      EXPECT_TRUE(again->same_bytes(*values));
    }
  }
  EXPECT_FALSE(dm->unique(Tensor::zeros(DType::Float32, {3}), true, true, true, nullptr).has_value());  // host memory
}

// x[mask] over x's leading dims, rows in order: against the rows picked on the host.
TEST(CudaRuntimeKernels, MaskedRowsIsBooleanMaskIndexing) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const engine::DeviceMemory* dm = runtime::device_memory_of(Device::cuda());
  ASSERT_NE(dm, nullptr);
  std::mt19937 rng(23);
  struct Case {
    DType dtype;
    Shape x, mask;
    double density;
  };
  // Rows of one element, of 12 bytes, of 2 bytes (unaligned copies), several chunks, none and all.
  const std::vector<Case> cases = {
      {DType::Float32, {4, 6}, {4, 6}, 0.4},         {DType::Float16, {5, 3, 2}, {5}, 0.5},
      {DType::BFloat16, {3, 5000, 1}, {3, 5000}, 0.3}, {DType::Int64, {9, 4}, {9}, 0.0},
      {DType::Float32, {7, 2, 8}, {7, 2}, 1.0},
  };
  for (const Case& c : cases) {
    Tensor x = Tensor::zeros(DType::Float64, c.x);
    std::normal_distribution<double> normal;
    for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = std::round(normal(rng) * 8);
    const Tensor typed = x.to(c.dtype);
    Tensor mask = Tensor::zeros(DType::Bool, c.mask);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = u(rng) < c.density;
    SCOPED_TRACE(typed.type_string() + " by " + mask.type_string());
    auto dx = to_device(typed, Device::cuda());
    auto dm_mask = to_device(mask, Device::cuda());
    ASSERT_TRUE(dx.has_value() && dm_mask.has_value());
    auto picked = dm->masked_rows(*dx, *dm_mask, nullptr);
    ASSERT_TRUE(picked.has_value()) << picked.status().message();
    const int64_t row = typed.numel() / mask.numel();
    std::vector<double> want;
    for (int64_t i = 0; i < mask.numel(); ++i)
      if (mask.data<bool>()[i])
        for (int64_t k = 0; k < row; ++k) want.push_back(typed.value_at(i * row + k));
    Shape sizes{static_cast<int64_t>(want.size()) / row};
    sizes.insert(sizes.end(), c.x.begin() + static_cast<long>(c.mask.size()), c.x.end());
    ASSERT_EQ(picked->sizes(), sizes);
    if (want.empty()) continue;
    auto got = to_host(*picked);
    ASSERT_TRUE(got.has_value());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got->value_at(static_cast<int64_t>(i)), want[i]) << i;
  }
  // Refused: a mask of other sizes than the tensor's leading ones.
  auto x = dm->empty(DType::Float32, {4, 3});
  auto wrong = dm->empty(DType::Bool, {3});
  ASSERT_TRUE(x.has_value() && wrong.has_value());
  EXPECT_FALSE(dm->masked_rows(*x, *wrong, nullptr).has_value());
}

TEST(CudaRuntimeKernels, BatchedCopiesCopyEveryRegion) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const engine::DeviceMemory* dm = runtime::device_memory_of(Device::cuda());
  ASSERT_NE(dm, nullptr);
  // 70 regions (three launches), odd sizes and offsets, two split into
  // several blocks, one past the batched size (a copy of its own).
  std::vector<int64_t> sizes;
  for (int i = 0; i < 70; ++i) sizes.push_back(1 + (i * 977) % 5000);
  sizes[10] = 70000;
  sizes[40] = 200000;
  sizes[50] = (5 << 20) + 11;
  int64_t total = 0;
  for (int64_t s : sizes) total += s + 3;
  Tensor host = Tensor::zeros(DType::UInt8, {total});
  for (int64_t i = 0; i < total; ++i) host.data<uint8_t>()[i] = static_cast<uint8_t>(i * 31 + 7);
  auto src = dm->empty(DType::UInt8, {total});
  auto dst = dm->empty(DType::UInt8, {total});
  ASSERT_TRUE(src.has_value() && dst.has_value());
  ASSERT_TRUE(copy_tensor(*src, host).is_ok());
  ASSERT_TRUE(copy_tensor(*dst, Tensor::zeros(DType::UInt8, {total})).is_ok());
  std::vector<CopyRegion> regions;
  int64_t at = 0;
  for (int64_t s : sizes) {
    at += 3;  // unaligned starts
    regions.push_back({static_cast<uint8_t*>(dst->raw_data()) + at, static_cast<uint8_t*>(src->raw_data()) + at,
                       static_cast<size_t>(s)});
    at += s;
  }
  auto stream = static_cast<cudaStream_t>(dm->default_stream());
  ASSERT_TRUE(copy_regions(regions, stream).is_ok());
  auto got = to_host(*dst);
  ASSERT_TRUE(got.has_value());
  at = 0;
  for (int64_t s : sizes) {
    for (int64_t i = 0; i < 3; ++i) ASSERT_EQ(got->data<uint8_t>()[at + i], 0) << "a gap was written";
    at += 3;
    for (int64_t i = 0; i < s; ++i) ASSERT_EQ(got->data<uint8_t>()[at + i], host.data<uint8_t>()[at + i]);
    at += s;
  }
}

}  // namespace
}  // namespace kiln::cuda
