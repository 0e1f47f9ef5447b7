#include "kiln/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "kiln/kiln.h"

namespace kiln {
namespace {

TEST(Tensor, FromStorageRejectsOutOfBounds) {
  auto st = Storage::allocate(16);  // 4 floats
  EXPECT_TRUE(Tensor::from_storage(st, DType::Float32, {2, 2}, {2, 1}, 0).has_value());
  auto bad = Tensor::from_storage(st, DType::Float32, {2, 2}, {2, 1}, 1);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("reaches element 4"), std::string::npos);
}

TEST(Tensor, NumelOverflowIsAnError) {
  std::vector<int64_t> sizes = {1LL << 40, 1LL << 40};
  EXPECT_FALSE(checked_numel(sizes).has_value());
}

TEST(Tensor, TransposedViewCopiesInLogicalOrder) {
  Tensor t = Tensor::zeros(DType::Float32, {2, 3});
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = static_cast<float>(i);
  Tensor tt = t.as_strided({3, 2}, {1, 3}, 0);
  EXPECT_FALSE(tt.is_contiguous());
  Tensor c = tt.contiguous();
  const float want[] = {0, 3, 1, 4, 2, 5};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c.data<float>()[i], want[i]);
}

// Views copied into contiguous memory in one dtype (the tiled path for a
// transposed pair of last dims, the straight path otherwise) give every
// element where the view's strides say, checked element by element against
// an independent index computation; sizes off the tile, outer dims, an offset.
TEST(Tensor, StridedViewsCopyEveryElementInLogicalOrder) {
  struct View {
    Shape sizes, strides;
    int64_t offset;
  };
  // Storage of 4 x 45 x 70 int64 holding its own index.
  Tensor base = Tensor::zeros(DType::Int64, {4 * 45 * 70 + 5});
  for (int64_t i = 0; i < base.numel(); ++i) base.data<int64_t>()[i] = i;
  const View views[] = {
      {{70, 45}, {1, 70}, 0},              // a transposed matrix, neither size a multiple of the tile
      {{4, 70, 45}, {45 * 70, 1, 70}, 3},  // batched transposes after an offset
      {{3, 45, 70}, {45 * 70, 70, 1}, 5},  // contiguous rows of a view
      {{45, 4, 33}, {70, 45 * 70, 2}, 1},  // permuted and strided, no unit stride at all
      {{1, 40}, {1, 70}, 2},               // a transposed column
  };
  for (const View& v : views) {
    Tensor view = base.as_strided(v.sizes, v.strides, v.offset);
    Tensor c = view.contiguous();
    ASSERT_TRUE(c.is_contiguous());
    ASSERT_EQ(c.sizes(), v.sizes);
    for (int64_t i = 0; i < c.numel(); ++i) {
      int64_t r = i, want = v.offset;
      for (size_t d = v.sizes.size(); d-- > 0;) {
        want += (r % v.sizes[d]) * v.strides[d];
        r /= v.sizes[d];
      }
      ASSERT_EQ(c.data<int64_t>()[i], want) << "element " << i << " of view " << shape_to_string(v.sizes);
    }
  }
}

// A contiguous tensor copied into a view (a slice of a concatenation) lands
// where the view's strides say and nowhere else.
TEST(Tensor, ContiguousValuesCopyIntoAStridedView) {
  Tensor whole = Tensor::zeros(DType::BFloat16, {6, 10});
  Tensor part = Tensor::zeros(DType::BFloat16, {6, 4});
  for (int64_t i = 0; i < 24; ++i) part.data<BFloat16>()[i] = BFloat16(static_cast<float>(i + 1));
  whole.as_strided({6, 4}, {10, 1}, 3).copy_from(part);  // columns 3..6
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 10; ++c)
      EXPECT_EQ(whole.value_at(r * 10 + c), c >= 3 && c < 7 ? static_cast<double>(r * 4 + (c - 3) + 1) : 0.0)
          << r << ", " << c;
}

TEST(Tensor, HalfAndBFloat16RoundTrip) {
  // Values exactly representable in both formats survive; others round to nearest even.
  EXPECT_EQ(static_cast<float>(Half(1.5f)), 1.5f);
  EXPECT_EQ(static_cast<float>(Half(65504.f)), 65504.f);
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(70000.f))));
  EXPECT_EQ(static_cast<float>(Half(5.9604645e-08f)), 5.9604645e-08f);  // smallest subnormal
  EXPECT_EQ(Half(1.0f + 1.0f / 2048).bits, Half(1.0f).bits);           // tie rounds to even
  EXPECT_EQ(static_cast<float>(BFloat16(3.0f)), 3.0f);
  EXPECT_EQ(BFloat16(1.0f + 1.0f / 256).bits, BFloat16(1.0f).bits);  // tie rounds to even
  Tensor h = Tensor::scalar(DType::Float16, 0.1);
  EXPECT_NEAR(h.item(), 0.0999755859375, 1e-12);
}

TEST(DType, PromotionFollowsPyTorch) {
  EXPECT_EQ(promote_types(DType::Int64, DType::Float16), DType::Float16);
  EXPECT_EQ(promote_types(DType::Float16, DType::BFloat16), DType::Float32);
  EXPECT_EQ(promote_types(DType::Bool, DType::Int32), DType::Int32);
  EXPECT_EQ(promote_types(DType::UInt8, DType::Int8), DType::Int16);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A tensor's storage says where its elements lie; host memory unless a
// borrower says otherwise.
TEST(Device, StorageSaysWhereItsBytesLie) {
  EXPECT_EQ(Device::cpu().to_string(), "cpu");
  EXPECT_EQ(Device::cuda(1).to_string(), "cuda:1");
  const Tensor host = Tensor::zeros(DType::Float32, {2, 3});
  EXPECT_TRUE(host.is_cpu());
  EXPECT_EQ(host.type_string(), "float32[2, 3]");
  auto bytes = std::make_shared<std::vector<uint8_t>>(24);
  auto storage = Storage::borrow(bytes->data(), bytes->size(), bytes, Device::cuda());
  auto t = Tensor::from_storage(storage, DType::Float32, {2, 3}, {3, 1}, 0);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->device(), Device::cuda());
  EXPECT_EQ(t->type_string(), "float32[2, 3] on cuda:0");
  // Views keep the device.
  EXPECT_EQ(t->as_strided({3}, {1}, 3).device(), Device::cuda());
}

// Host code never reads a device tensor's elements: kiln stops naming the call.
TEST(DeviceDeathTest, HostReadsOfDeviceTensorsStop) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(24);
  auto storage = Storage::borrow(bytes->data(), bytes->size(), bytes, Device::cuda());
  const Tensor t = *Tensor::from_storage(storage, DType::Float32, {2, 3}, {3, 1}, 0);
  EXPECT_DEATH((void)t.clone(), "Tensor::clone on float32\\[2, 3\\] on cuda:0");
  EXPECT_DEATH((void)t.value_at(0), "Tensor::value_at");
  EXPECT_DEATH(Tensor::zeros(DType::Float32, {2, 3}).copy_from(t), "Tensor::copy_from");
}

// Copies between host tensors convert and lay out as copy_from does; a host
// tensor is its own host copy.
TEST(Device, HostCopiesConvertAndHostTensorsStayThemselves) {
  Tensor src = Tensor::zeros(DType::Float32, {2, 2});
  for (int i = 0; i < 4; ++i) src.data<float>()[i] = 1.5f * static_cast<float>(i);
  const Tensor transposed = src.as_strided({2, 2}, {1, 2}, 0);
  Tensor dst = Tensor::zeros(DType::Float64, {2, 2});
  ASSERT_TRUE(copy_tensor(dst, transposed).is_ok());
  EXPECT_EQ(dst.value_at(1), 3.0);  // element [0, 1] of the transpose
  EXPECT_FALSE(copy_tensor(dst, Tensor::zeros(DType::Float32, {4})).is_ok());
  auto same = to_host(src);
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(same->storage(), src.storage());
}

// to_device for the host is to_host (the tensor itself); a device no backend
// of this kiln can use there (no GPU on this machine, or none such at all) is
// an error naming it, not a crash.
TEST(Device, ToDeviceOfTheHostIsTheTensorAndAnUnusableDeviceIsAnError) {
  Tensor src = Tensor::zeros(DType::Float32, {3});
  auto same = to_device(src, Device::cpu());
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(same->storage(), src.storage());
  auto gpu = to_device(src, Device::cuda());
  if (gpu.has_value()) {  // a machine with a GPU
    EXPECT_EQ(gpu->device(), Device::cuda());
    auto back = to_host(*gpu);
    ASSERT_TRUE(back.has_value());
    EXPECT_TRUE(back->same_bytes(src));
  } else {
    EXPECT_FALSE(gpu.status().message().empty());
  }
}

}  // namespace
}  // namespace kiln
