#include "base/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <type_traits>

#include "kiln/tensor.h"

namespace kiln {
namespace {

static_assert(!std::is_copy_constructible_v<MappedFile> && !std::is_copy_assignable_v<MappedFile>);
static_assert(std::is_nothrow_move_constructible_v<MappedFile> && std::is_nothrow_move_assignable_v<MappedFile>);

class MappedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln_mapped_file_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& content) {
    const std::string path = (dir_ / name).string();
    std::ofstream f(path, std::ios::binary);
    f << content;
    return path;
  }
  static std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }

  std::filesystem::path dir_;
};

TEST_F(MappedFileTest, MapsTheWholeFile) {
  const std::string content = "kiln maps files\n" + std::string(10000, 'x');
  const std::string path = write("a.bin", content);
  auto m = MappedFile::open(path);
  ASSERT_TRUE(m) << m.status().to_string();
  EXPECT_EQ((*m)->size(), content.size());
  EXPECT_EQ((*m)->path(), path);
  ASSERT_NE((*m)->data(), nullptr);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*m)->data()), (*m)->size()), content);
  EXPECT_EQ((*m)->bytes().size(), content.size());
}

TEST_F(MappedFileTest, EmptyFileGivesAnEmptyMapping) {
  auto m = MappedFile::open(write("empty", ""));
  ASSERT_TRUE(m) << m.status().to_string();
  EXPECT_EQ((*m)->size(), 0u);
  EXPECT_EQ((*m)->data(), nullptr);
  EXPECT_TRUE((*m)->bytes().empty());
}

TEST_F(MappedFileTest, WritesAreCopyOnWrite) {
  const std::string path = write("cow.bin", "original");
  auto m = MappedFile::open(path);
  ASSERT_TRUE(m);
  std::memcpy((*m)->data(), "CHANGED!", 8);
  EXPECT_EQ(std::memcmp((*m)->data(), "CHANGED!", 8), 0);
  EXPECT_EQ(slurp(path), "original") << "the file itself never changes";
  auto again = MappedFile::open(path);
  ASSERT_TRUE(again);
  EXPECT_EQ(std::memcmp((*again)->data(), "original", 8), 0);
}

TEST_F(MappedFileTest, MissingFileIsNotFoundAndNamesThePath) {
  const std::string path = (dir_ / "nope.bin").string();
  auto m = MappedFile::open(path);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(m.status().message().find(path), std::string::npos);
  EXPECT_NE(m.status().message().find(std::strerror(ENOENT)), std::string::npos) << m.status().message();
}

TEST_F(MappedFileTest, DirectoryIsAnIoError) {
  auto m = MappedFile::open(dir_.string());
  ASSERT_FALSE(m);
  EXPECT_EQ(m.status().code(), ErrorCode::kIo);
  EXPECT_NE(m.status().message().find("not a regular file"), std::string::npos) << m.status().message();
}

TEST_F(MappedFileTest, MoveTransfersTheMapping) {
  auto m = MappedFile::open(write("m.bin", "moveme"));
  ASSERT_TRUE(m);
  uint8_t* p = (*m)->data();
  MappedFile moved = std::move(**m);
  EXPECT_EQ(moved.data(), p);
  EXPECT_EQ(moved.size(), 6u);
  EXPECT_EQ((*m)->data(), nullptr);
  EXPECT_EQ((*m)->size(), 0u);

  auto other = MappedFile::open(write("o.bin", "other file"));
  ASSERT_TRUE(other);
  **other = std::move(moved);  // unmaps "other file", takes "moveme"
  EXPECT_EQ((*other)->data(), p);
  EXPECT_EQ(std::memcmp((*other)->data(), "moveme", 6), 0);
  EXPECT_EQ((*other)->path(), (dir_ / "m.bin").string());
}

TEST_F(MappedFileTest, BorrowingStorageKeepsTheMappingAlive) {
  const std::string path = write("keep.bin", "kept alive");
  std::shared_ptr<Storage> storage;
  {
    auto m = MappedFile::open(path);
    ASSERT_TRUE(m);
    storage = Storage::borrow((*m)->data(), (*m)->size(), *m);
  }
  std::filesystem::remove(path);
  ASSERT_EQ(storage->nbytes(), 10u);
  EXPECT_EQ(std::memcmp(storage->data(), "kept alive", 10), 0);
}

}  // namespace
}  // namespace kiln
