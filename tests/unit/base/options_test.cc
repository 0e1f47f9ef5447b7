// The enum options and their names: each name reads back as its value, and
// a name that is none of them is refused with the list.
#include "kiln/options.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln {
namespace {

TEST(Options, EachPrecisionAndBucketModeReadsBackFromItsName) {
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16, Precision::kFp8w}) {
    auto back = parse_precision(name_of(p));
    ASSERT_TRUE(back.has_value()) << name_of(p);
    EXPECT_EQ(*back, p);
  }
  EXPECT_EQ(name_of(Precision::kBf16), "bf16");
  EXPECT_EQ(name_of(Precision::kFp8w), "fp8w");
  for (BatchBuckets b : {BatchBuckets::kAuto, BatchBuckets::kOn, BatchBuckets::kOff}) {
    auto back = parse_batch_buckets(name_of(b));
    ASSERT_TRUE(back.has_value()) << name_of(b);
    EXPECT_EQ(*back, b);
  }
  EXPECT_EQ(name_of(BatchBuckets::kOff), "off");
}

TEST(Options, OtherNamesAreRefusedWithTheList) {
  auto p = parse_precision("FP16");
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(p.status().message(), "precision must be one of fp32, tf32, fp16, bf16, fp8w, got 'FP16'");
  auto b = parse_batch_buckets("");
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.status().message(), "batch-buckets must be one of auto, on, off, got ''");
}

}  // namespace
}  // namespace kiln
