#include "base/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "support/fixture_files.h"

namespace kiln::base {
namespace {

const DType kAllDTypes[] = {
#define KILN_DTYPE(e, name, bytes, code, st, ctype) DType::e,
#include "kiln/dtype.def"
#undef KILN_DTYPE
};

// tests/unit/frontend/data/reference.safetensors was written by Python's
// safetensors library (0.8.0, numpy 2.4) with:
//
//   import numpy as np
//   from safetensors import _safetensors_rust as st
//   arrays = {
//       "f32": np.array([[1.5, -2.25, 3.0], [1e-30, -0.0, 65504.0]], np.float32),
//       "f64": np.array([0.1, -1e300, 2.5], np.float64),
//       "f16": np.array([[1.0, -2.0], [0.5, 65504.0]], np.float16),
//       "bf16": np.array([0x3F80, 0xC040, 0x3E20], np.uint16),  # bfloat16 bits of 1.0, -3.0, 0.15625
//       "i64": np.array([-9007199254740993, 2**62], np.int64),
//       "i32": np.array([[-7], [123456789]], np.int32),
//       "i16": np.array([-32768, 0, 32767], np.int16),
//       "i8": np.array([-128, 127], np.int8),
//       "u8": np.array([0, 1, 200, 255], np.uint8),
//       "bool": np.array([True, False, True], np.bool_),
//       "scalar": np.array(42.0, np.float32),
//       "empty": np.zeros((0, 4), np.float32),
//   }
//   dtypes = {"bf16": "bfloat16"}
//   specs = {n: st.TensorSpec(dtype=dtypes.get(n, str(a.dtype)), shape=list(a.shape), data_ptr=a.ctypes.data,
//                             data_len=a.nbytes) for n, a in arrays.items()}
//   st.serialize_file(specs, "reference.safetensors", {"format": "pt"})
std::string reference_path() {
  return std::string(KILN_SOURCE_DIR) + "/tests/unit/frontend/data/reference.safetensors";
}

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::shared_ptr<Storage> to_storage(const std::vector<uint8_t>& b) {
  auto s = Storage::allocate(b.size());
  if (!b.empty()) std::memcpy(s->data(), b.data(), b.size());
  return s;
}

// A safetensors image: header length, header text, data.
std::vector<uint8_t> image(const std::string& header, const std::vector<uint8_t>& data = {}) {
  std::vector<uint8_t> b(8);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(n >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

Expected<SafetensorsFile> parse(const std::vector<uint8_t>& b) {
  return parse_safetensors(to_storage(b), "test.safetensors");
}

void expect_error(const Expected<SafetensorsFile>& r, ErrorCode code, const std::string& needle) {
  ASSERT_FALSE(r) << "expected an error mentioning '" << needle << "'";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("test.safetensors"), std::string::npos) << r.status().to_string();
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return {p, p + c.nbytes()};
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln_safetensors_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

// ---- the reference file and round trips -------------------------------------------

TEST_F(SafetensorsTest, ReadsFileWrittenByPythonLibrary) {
  auto f = read_safetensors(reference_path());
  ASSERT_TRUE(f) << f.status().to_string();
  EXPECT_EQ(f->metadata, (std::map<std::string, std::string>{{"format", "pt"}}));

  std::vector<std::string> names;
  for (const auto& [n, t] : f->tensors) names.push_back(n);
  const std::vector<std::string> by_offset = {"i64",  "f64", "empty", "f32", "scalar", "i32",
                                              "bf16", "f16", "i16",   "i8",  "u8",     "bool"};
  EXPECT_EQ(names, by_offset);

  const Tensor* f32 = f->find("f32");
  ASSERT_NE(f32, nullptr);
  EXPECT_EQ(f32->dtype(), DType::Float32);
  EXPECT_EQ(f32->sizes(), (Shape{2, 3}));
  const float want32[] = {1.5f, -2.25f, 3.0f, 1e-30f, -0.0f, 65504.0f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(f32->data<float>()[i], want32[i]);
  EXPECT_TRUE(std::signbit(f32->data<float>()[4]));

  const Tensor* f64 = f->find("f64");
  ASSERT_NE(f64, nullptr);
  EXPECT_EQ(f64->data<double>()[0], 0.1);
  EXPECT_EQ(f64->data<double>()[1], -1e300);

  const Tensor* f16 = f->find("f16");
  ASSERT_NE(f16, nullptr);
  EXPECT_EQ(f16->dtype(), DType::Float16);
  EXPECT_EQ(f16->value_at(1), -2.0);
  EXPECT_EQ(f16->value_at(3), 65504.0);

  const Tensor* bf16 = f->find("bf16");
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(bf16->dtype(), DType::BFloat16);
  EXPECT_EQ(bf16->value_at(1), -3.0);
  EXPECT_EQ(bf16->value_at(2), 0.15625);

  const Tensor* i64 = f->find("i64");
  ASSERT_NE(i64, nullptr);
  EXPECT_EQ(i64->data<int64_t>()[0], -9007199254740993LL);
  EXPECT_EQ(i64->data<int64_t>()[1], int64_t{1} << 62);

  const Tensor* i32 = f->find("i32");
  ASSERT_NE(i32, nullptr);
  EXPECT_EQ(i32->sizes(), (Shape{2, 1}));
  EXPECT_EQ(i32->data<int32_t>()[1], 123456789);
  EXPECT_EQ(f->find("i16")->data<int16_t>()[0], -32768);
  EXPECT_EQ(f->find("i8")->data<int8_t>()[0], -128);
  EXPECT_EQ(f->find("u8")->data<uint8_t>()[2], 200);
  const Tensor* b = f->find("bool");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype(), DType::Bool);
  EXPECT_TRUE(b->data<bool>()[0]);
  EXPECT_FALSE(b->data<bool>()[1]);

  const Tensor* scalar = f->find("scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_EQ(scalar->dim(), 0);
  EXPECT_EQ(scalar->item(), 42.0);
  const Tensor* empty = f->find("empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->sizes(), (Shape{0, 4}));
  EXPECT_EQ(empty->numel(), 0);
  EXPECT_EQ(f->find("missing"), nullptr);
}

TEST_F(SafetensorsTest, WriterReproducesPythonLibraryBytes) {
  auto ref = read_safetensors(reference_path());
  ASSERT_TRUE(ref) << ref.status().to_string();
  std::vector<std::pair<std::string, Tensor>> tensors(ref->tensors.rbegin(), ref->tensors.rend());
  ASSERT_TRUE(write_safetensors(path("out.safetensors"), tensors, ref->metadata));
  EXPECT_EQ(slurp(path("out.safetensors")), slurp(reference_path()));
}

TEST_F(SafetensorsTest, RoundTripsEveryDType) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  Tensor values = Tensor::zeros(DType::Float64, {2, 3});
  const double v[] = {0, 1, 2.5, 3, 100, 7};
  for (int i = 0; i < 6; ++i) values.data<double>()[i] = v[i];
  for (DType d : kAllDTypes) {
    Tensor t = Tensor::zeros(d, {2, 3});
    t.copy_from(values);
    tensors.emplace_back(std::string(dtype_name(d)), t);
    tensors.emplace_back(std::string(dtype_name(d)) + ".scalar", Tensor::scalar(d, 1));
    tensors.emplace_back(std::string(dtype_name(d)) + ".empty", Tensor::zeros(d, {3, 0}));
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "caf\xc3\xa9 \"quoted\"\n"}};
  ASSERT_TRUE(write_safetensors(path("all.safetensors"), tensors, metadata));

  auto f = read_safetensors(path("all.safetensors"));
  ASSERT_TRUE(f) << f.status().to_string();
  EXPECT_EQ(f->metadata, metadata);
  ASSERT_EQ(f->tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const Tensor* got = f->find(name);
    ASSERT_NE(got, nullptr) << name;
    EXPECT_EQ(got->dtype(), t.dtype()) << name;
    EXPECT_EQ(got->sizes(), t.sizes()) << name;
    EXPECT_EQ(got->strides(), contiguous_strides(got->sizes())) << name;
    EXPECT_EQ(bytes_of(*got), bytes_of(t)) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got->raw_data()) % dtype_size(got->dtype()), 0u) << name;
  }

  // The header is padded to a multiple of 8, and data follows in descending alignment.
  const std::vector<uint8_t> raw = slurp(path("all.safetensors"));
  uint64_t header_len = 0;
  std::memcpy(&header_len, raw.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  size_t last = 16;
  for (const auto& [name, t] : f->tensors) {
    EXPECT_LE(dtype_size(t.dtype()), last) << name;
    if (t.numel() > 0) last = dtype_size(t.dtype());
  }
}

TEST_F(SafetensorsTest, WritesNonContiguousTensorsInLogicalOrder) {
  Tensor t = Tensor::zeros(DType::Int32, {2, 3});
  for (int i = 0; i < 6; ++i) t.data<int32_t>()[i] = i;
  const Tensor transposed = t.as_strided({3, 2}, {1, 3}, 0);
  const Tensor sliced = t.as_strided({2}, {3}, 1);  // column 1, with a storage offset
  ASSERT_TRUE(write_safetensors(path("v.safetensors"), {{"t", transposed}, {"s", sliced}}));
  auto f = read_safetensors(path("v.safetensors"));
  ASSERT_TRUE(f) << f.status().to_string();
  const int32_t want_t[] = {0, 3, 1, 4, 2, 5};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(f->find("t")->data<int32_t>()[i], want_t[i]);
  EXPECT_EQ(f->find("s")->sizes(), (Shape{2}));
  EXPECT_EQ(f->find("s")->data<int32_t>()[0], 1);
  EXPECT_EQ(f->find("s")->data<int32_t>()[1], 4);
}

TEST_F(SafetensorsTest, EmptyFileListRoundTrips) {
  ASSERT_TRUE(write_safetensors(path("none.safetensors"), {}));
  auto f = read_safetensors(path("none.safetensors"));
  ASSERT_TRUE(f) << f.status().to_string();
  EXPECT_TRUE(f->tensors.empty());
  EXPECT_TRUE(f->metadata.empty());
}

TEST_F(SafetensorsTest, TensorsBorrowTheBytesAndOutliveTheFile) {
  const std::vector<uint8_t> raw = slurp(reference_path());
  auto bytes = to_storage(raw);
  const uint8_t* base = bytes->data();
  uint64_t header_len = 0;
  std::memcpy(&header_len, raw.data(), 8);
  Tensor f64;
  {
    auto f = parse_safetensors(bytes, "ref");
    ASSERT_TRUE(f);
    f64 = *f->find("f64");
  }
  bytes.reset();
  EXPECT_EQ(static_cast<const uint8_t*>(f64.raw_data()), base + 8 + header_len + 16) << "no copy";
  EXPECT_EQ(f64.data<double>()[2], 2.5);
}

TEST_F(SafetensorsTest, MisalignedDataIsCopiedToAlignedMemory) {
  // The header is padded so that the data section starts at a multiple of 4;
  // offset 1 then misaligns the float.
  std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  header.append((4 - (8 + header.size()) % 4) % 4, ' ');
  std::vector<uint8_t> data(5);
  const float value = 3.25f;
  std::memcpy(data.data() + 1, &value, 4);
  auto f = parse(image(header, data));
  ASSERT_TRUE(f) << f.status().to_string();
  const Tensor* x = f->find("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x->raw_data()) % 4, 0u);
  EXPECT_EQ(x->item(), 3.25);
}

TEST_F(SafetensorsTest, GapsAndTrailingBytesAreAccepted) {
  auto f = parse(image(
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
      {9, 0, 0, 0, 7, 8, 0, 0}));
  ASSERT_TRUE(f) << f.status().to_string();
  ASSERT_EQ(f->tensors.size(), 2u);
  EXPECT_EQ(f->tensors[0].first, "b");
  EXPECT_EQ(f->tensors[1].second.data<uint8_t>()[1], 8);
}

// ---- malformed files -----------------------------------------------------------------

TEST_F(SafetensorsTest, HeaderLengthIsChecked) {
  expect_error(parse({1, 2, 3}), ErrorCode::kFormat, "too small");
  std::vector<uint8_t> b = image("{}");
  b[0] = 3;  // claims 3 header bytes... fine; now claim more than the file holds
  b[0] = 200;
  expect_error(parse(b), ErrorCode::kFormat, "runs past the end of the file");
  b = image("{}");
  b[7] = 0x10;  // 2^60
  expect_error(parse(b), ErrorCode::kFormat, "exceeds the limit");
}

TEST_F(SafetensorsTest, MalformedJsonReportsAPosition) {
  auto r = parse(image(R"({"a": {"dtype": "F32",, }})"));
  expect_error(r, ErrorCode::kFormat, "malformed at file byte");
  expect_error(parse(image("[1, 2]")), ErrorCode::kFormat, "not an object");
  expect_error(parse(image("")), ErrorCode::kFormat, "malformed");
  expect_error(parse(image("{\"a\": \"\xff\xfe\"}")), ErrorCode::kFormat, "malformed");  // not UTF-8
  expect_error(parse(image("{} trailing")), ErrorCode::kFormat, "malformed");
}

TEST_F(SafetensorsTest, DeepNestingIsRejected) {
  const std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_error(parse(image(deep)), ErrorCode::kFormat, "nests more than");
}

TEST_F(SafetensorsTest, DuplicateKeysAreRejected) {
  expect_error(parse(image(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                           R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                           {1, 2})),
               ErrorCode::kFormat, "repeats the key 'a' in the top-level object");
  expect_error(parse(image(R"({"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", {1})),
               ErrorCode::kFormat, "repeats the key 'dtype' in 'a'");
}

TEST_F(SafetensorsTest, BadTensorEntriesAreRejected) {
  struct Case {
    const char* header;
    size_t data;
    ErrorCode code;
    const char* needle;
  };
  const Case cases[] = {
      {R"({"t":{"dtype":"F13","shape":[1],"data_offsets":[0,4]}})", 4, ErrorCode::kFormat, "unknown dtype \"F13\""},
      {R"({"t":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}})", 2, ErrorCode::kUnsupported, "dtype U16"},
      {R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, ErrorCode::kFormat, "shape entry -1"},
      {R"({"t":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4, ErrorCode::kFormat, "shape entry 1.0"},
      {R"({"t":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,4]}})", 4, ErrorCode::kFormat,
       "shape entry"},
      {R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4, ErrorCode::kFormat,
       "too many elements"},
      {R"({"t":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,4]}})", 4, ErrorCode::kFormat,
       "too many elements"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4, ErrorCode::kFormat, "end before they begin"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 4, ErrorCode::kFormat,
       "past the end of the data section"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})", 4, ErrorCode::kFormat,
       "not non-negative integers"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4, ErrorCode::kFormat,
       "hold 4 bytes but F32[2] needs 8"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4, ErrorCode::kFormat, "\"data_offsets\" is missing"},
      {R"({"t":{"shape":[1],"data_offsets":[0,4]}})", 4, ErrorCode::kFormat, "\"dtype\" is missing"},
      {R"({"t":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", 4, ErrorCode::kFormat, "\"shape\" is missing"},
      {R"({"t":[1,2]})", 4, ErrorCode::kFormat, "not an object"},
      {R"({"__metadata__":{"k":1}})", 0, ErrorCode::kFormat, "value of key 'k'"},
      {R"({"__metadata__":[]})", 0, ErrorCode::kFormat, "\"__metadata__\" is a array"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    auto r = parse(image(c.header, std::vector<uint8_t>(c.data)));
    expect_error(r, c.code, c.needle);
    if (std::string(c.header).find("\"t\"") != std::string::npos) {
      EXPECT_NE(r.status().message().find("tensor 't'"), std::string::npos) << r.status().to_string();
    }
  }
}

TEST_F(SafetensorsTest, OverlappingRangesAreRejected) {
  auto r = parse(image(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      std::vector<uint8_t>(8)));
  expect_error(r, ErrorCode::kFormat, "overlap those of tensor 'a'");
  // An empty tensor inside another's range shares no bytes.
  auto ok = parse(image(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
      std::vector<uint8_t>(8)));
  EXPECT_TRUE(ok) << ok.status().to_string();
}

TEST_F(SafetensorsTest, BoolBytesOtherThanZeroOrOneAreRejected) {
  expect_error(parse(image(R"({"b":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", {1, 0, 2})),
               ErrorCode::kFormat, "bool element 2 is byte 2");
}

TEST_F(SafetensorsTest, EveryTruncationFailsCleanly) {
  const std::vector<uint8_t> raw = slurp(reference_path());
  ASSERT_FALSE(raw.empty());
  for (size_t n = 0; n < raw.size(); ++n) {
    auto r = parse(std::vector<uint8_t>(raw.begin(), raw.begin() + static_cast<std::ptrdiff_t>(n)));
    ASSERT_FALSE(r) << "prefix of " << n << " bytes accepted";
    ASSERT_EQ(r.status().code(), ErrorCode::kFormat) << r.status().to_string();
  }
}

TEST_F(SafetensorsTest, RandomMutationsNeverCrash) {
  const std::vector<uint8_t> raw = slurp(reference_path());
  uint64_t header_len = 0;
  std::memcpy(&header_len, raw.data(), 8);
  std::mt19937_64 rng(99);
  for (int round = 0; round < 3000; ++round) {
    std::vector<uint8_t> b = raw;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      // Mostly in the header, where the structure is.
      const size_t pos = (round % 4 == 0) ? rng() % b.size() : rng() % (8 + header_len);
      b[pos] = static_cast<uint8_t>(rng());
    }
    auto r = parse(b);
    if (r) {
      for (const auto& [name, t] : r->tensors) (void)bytes_of(t);
    } else {
      EXPECT_NE(r.status().code(), ErrorCode::kInternal);
    }
  }
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  auto r = read_safetensors(path("nope.safetensors"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.status().message().find("nope.safetensors"), std::string::npos);
}

// ---- writer errors -----------------------------------------------------------------------

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  const Tensor t = Tensor::zeros(DType::Float32, {2});
  auto expect_invalid = [&](const std::vector<std::pair<std::string, Tensor>>& ts, const std::string& needle) {
    Status s = write_safetensors(path("bad.safetensors"), ts);
    ASSERT_FALSE(s.is_ok()) << needle;
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
  };
  expect_invalid({{"a", t}, {"b", t}, {"a", Tensor::zeros(DType::Int8, {1})}}, "'a' appears twice");
  expect_invalid({{"__metadata__", t}}, "cannot name a tensor");
  expect_invalid({{"u", Tensor()}}, "'u' is undefined");
  expect_invalid({{"bad\xff", t}}, "UTF-8");
  EXPECT_FALSE(std::filesystem::exists(path("bad.safetensors")));
  EXPECT_TRUE(std::filesystem::is_empty(dir_)) << "no temporary file is left behind";
}

TEST_F(SafetensorsTest, WriterReportsIoErrorsAndReplacesExistingFiles) {
  const Tensor t = Tensor::scalar(DType::Int64, 5);
  Status s = write_safetensors(path("no/such/dir/x.safetensors"), {{"t", t}});
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), ErrorCode::kIo);
  EXPECT_NE(s.message().find("no/such/dir/x.safetensors"), std::string::npos) << s.to_string();

  ASSERT_TRUE(write_safetensors(path("x.safetensors"), {{"old", t}}));
  ASSERT_TRUE(write_safetensors(path("x.safetensors"), {{"new", t}}));
  auto f = read_safetensors(path("x.safetensors"));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->find("old"), nullptr);
  ASSERT_NE(f->find("new"), nullptr);
  EXPECT_EQ(f->find("new")->item_int(), 5);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()), 1);
}

TEST_F(SafetensorsTest, FixtureFilesIfPresent) {
  // Fixtures written by real PyTorch versions: tests/fixtures/torch<version>/.
  const std::vector<std::filesystem::path> files = kiln::testing::fixture_files(".safetensors");
  if (files.empty()) GTEST_SKIP() << "no .safetensors fixtures under tests/fixtures";
  for (const auto& p : files) {
    auto f = read_safetensors(p.string());
    ASSERT_TRUE(f) << f.status().to_string();
    EXPECT_FALSE(f->tensors.empty()) << p;
  }
}

}  // namespace
}  // namespace kiln::base
