// The program cache: keys that change with every source byte, setting and
// method name; a miss compiles and stores, a hit places the same bytes
// without compiling; a stored program changed afterwards (through the hard
// link the output shares with it, even into another valid file) is
// discarded, never used; entries without their key record are discarded;
// programs and engine plans are evicted together by last use; two processes
// compile one key once; a compile killed mid-way leaves nothing that is used.
#include "program/program_cache.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "program/cache_files.h"

namespace kiln::program {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("kiln_pcache_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A stand-in compile: writes `content` where it is told to, counts itself.
struct Compiler {
  int compiles = 0;
  ProgramCache::Compile writing(const std::string& content) {
    return [this, content](const std::string& path) -> Expected<ProgramSummary> {
      ++compiles;
      write_text(path, content);
      ProgramSummary s;
      s.methods = {"forward"};
      s.segments = 3;
      s.engines = 2;
      s.plan_bytes = static_cast<int64_t>(content.size());
      s.fallback_nodes = 1;
      return s;
    };
  }
};

TEST(ProgramCacheKey, ChangesWithEverySourceByteSettingAndMethodName) {
  const std::string dir = fresh_dir("key");
  const std::string a = dir + "/a.pt2", b = dir + "/b.pt2";
  std::string content(3 << 20, 'x');
  write_text(a, content);
  write_text(b, "another model");
  auto backend = cpu::make_cpu_backend();
  auto key = [&](const std::vector<ProgramSource>& s, const std::string& settings) {
    auto k = program_cache_key(s, settings, *backend);
    EXPECT_TRUE(k.has_value()) << k.status().message();
    return k.has_value() ? *k : std::string();
  };
  const std::string base = key({{"forward", a}}, "device cpu\nprecision fp32\n");
  EXPECT_EQ(base, key({{"forward", a}}, "device cpu\nprecision fp32\n"));
  EXPECT_NE(base.find("backend cpu"), std::string::npos) << base;
  std::set<std::string> keys{base};
  keys.insert(key({{"forward", a}}, "device cpu\nprecision fp16\n"));
  keys.insert(key({{"decode", a}}, "device cpu\nprecision fp32\n"));
  keys.insert(key({{"forward", b}}, "device cpu\nprecision fp32\n"));
  keys.insert(key({{"forward", a}, {"decode", b}}, "device cpu\nprecision fp32\n"));
  content[2 << 20] = 'y';  // one byte in the middle of the source
  write_text(a, content);
  keys.insert(key({{"forward", a}}, "device cpu\nprecision fp32\n"));
  EXPECT_EQ(keys.size(), 6u) << "two different compiles share a key";
  // The same content at another path is the same program.
  write_text(b, content);
  EXPECT_EQ(key({{"forward", b}}, "s"), key({{"forward", a}}, "s"));

  auto missing = program_cache_key({{"forward", dir + "/missing.pt2"}}, "", *backend);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("missing.pt2"), std::string::npos) << missing.status().message();
  fs::remove_all(dir);
}

TEST(ProgramCache, AMissCompilesAndStoresAHitPlacesTheSameBytesWithoutCompiling) {
  const std::string dir = fresh_dir("hit");
  const std::string out1 = dir + "/one.kiln", out2 = dir + "/two.kiln";
  Compiler c;
  ProgramCache cache({dir + "/cache"});
  bool hit = true;
  auto first = cache.place("the key", out1, c.writing("compiled program"), {}, &hit);
  ASSERT_TRUE(first.has_value()) << first.status().message();
  EXPECT_FALSE(hit);
  std::vector<std::string> heard;
  auto second = cache.place(
      "the key", out2, c.writing("must not run"), [&](const std::string& m) { heard.push_back(m); }, &hit);
  ASSERT_TRUE(second.has_value()) << second.status().message();
  EXPECT_TRUE(hit);
  EXPECT_EQ(c.compiles, 1);
  EXPECT_EQ(read_text(out2), "compiled program");
  EXPECT_EQ(*second, *first);
  EXPECT_EQ(second->engines, 2);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_NE(heard[0].find("from the cache"), std::string::npos) << heard[0];
  // Placing over an existing output, and over the output that already is the entry, leaves one name each.
  ASSERT_TRUE(cache.place("the key", out2, c.writing("must not run"), {}, &hit).has_value());
  EXPECT_TRUE(hit);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 2u) << "a temporary name was left behind";
  // Another key is another program.
  ASSERT_TRUE(cache.place("other key", out2, c.writing("other program"), {}, &hit).has_value());
  EXPECT_FALSE(hit);
  EXPECT_EQ(read_text(out2), "other program");
  auto stats = EngineCache::inspect(dir + "/cache");
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->program_hits, 2);
  EXPECT_EQ(stats->program_misses, 2);
  ASSERT_EQ(stats->entries.size(), 2u);
  EXPECT_EQ(stats->entries[0].kind, "program");
  fs::remove_all(dir);
}

TEST(ProgramCache, AnotherWriterOfTheOutputNeverGetsItsProgramStoredUnderThisKey) {
  const std::string dir = fresh_dir("writer");
  const std::string out = dir + "/out.kiln";
  bool hit = false;
  int compiles = 0;
  ProgramCache cache({dir + "/cache"});
  // While this compile runs, another compile (other settings, same -o) writes the output.
  auto compile = [&](const std::string& path) -> Expected<ProgramSummary> {
    ++compiles;
    write_text(path, "program A");
    write_text(out, "program B");
    return ProgramSummary{{"forward"}, 1, 1, 9, 0};
  };
  ASSERT_TRUE(cache.place("key A", out, compile, {}, &hit).has_value());
  EXPECT_EQ(read_text(out), "program A");
  const std::string again = dir + "/again.kiln";
  ASSERT_TRUE(cache.place("key A", again, compile, {}, &hit).has_value());
  EXPECT_TRUE(hit);
  EXPECT_EQ(compiles, 1);
  EXPECT_EQ(read_text(again), "program A");
  fs::remove_all(dir);
}

TEST(ProgramCache, APlacedOutputIsNewAndKeysNeedNotBeText) {
  const std::string dir = fresh_dir("time");
  std::string key = "paths \xe9\xff";  // not UTF-8, and a NUL in it
  key += '\0';
  key += " are bytes";
  Compiler c;
  bool hit = false;
  ProgramCache cache({dir + "/cache"});
  ASSERT_TRUE(cache.place(key, dir + "/a.kiln", c.writing("program"), {}, &hit).has_value());
  // The entry (and the first output, one file) from a day ago.
  const std::string entry = dir + "/cache/" + cache_key_hash(key) + kProgramEntrySuffix;
  const auto day_ago = fs::file_time_type::clock::now() - std::chrono::hours(24);
  fs::last_write_time(entry, day_ago);
  const auto before = fs::file_time_type::clock::now() - std::chrono::seconds(2);
  ASSERT_TRUE(cache.place(key, dir + "/b.kiln", c.writing("must not run"), {}, &hit).has_value());
  EXPECT_TRUE(hit);
  EXPECT_EQ(c.compiles, 1);
  EXPECT_GE(fs::last_write_time(dir + "/b.kiln"), before) << "the placed output keeps the first compile's time";
  auto stats = EngineCache::inspect(dir + "/cache");
  ASSERT_TRUE(stats.has_value());
  ASSERT_EQ(stats->entries.size(), 1u);
  EXPECT_EQ(stats->entries[0].summary, key);
  fs::remove_all(dir);
}

TEST(ProgramCache, LeftoversOfKilledWritersAreSweptOnceOld) {
  const std::string dir = fresh_dir("sweep");
  const std::string cache_dir = dir + "/cache";
  fs::create_directories(cache_dir);
  const std::string h = cache_key_hash("gone");
  const std::string old_tmp = cache_dir + "/" + h + ".kcp.tmp.123.0", new_tmp = cache_dir + "/" + h + ".kce.tmp.456.0";
  const std::string orphan_meta = cache_dir + "/" + h + kProgramMetaSuffix, orphan_use = cache_dir + "/" + h + kUseSuffix;
  for (const std::string& f : {old_tmp, new_tmp, orphan_meta, orphan_use}) write_text(f, "left over");
  const auto two_hours_ago = fs::file_time_type::clock::now() - std::chrono::hours(2);
  for (const std::string& f : {old_tmp, orphan_meta, orphan_use}) fs::last_write_time(f, two_hours_ago);
  Compiler c;
  bool hit = false;
  ProgramCache cache({cache_dir});
  ASSERT_TRUE(cache.place("key", dir + "/out.kiln", c.writing("program"), {}, &hit).has_value());  // a miss sweeps
  EXPECT_FALSE(fs::exists(old_tmp));
  EXPECT_FALSE(fs::exists(orphan_meta));
  EXPECT_FALSE(fs::exists(orphan_use));
  EXPECT_TRUE(fs::exists(new_tmp)) << "a temporary file a live writer may still use was removed";
  EXPECT_TRUE(fs::exists(cache_dir + "/" + cache_key_hash("key") + kProgramMetaSuffix));
  fs::remove_all(dir);
}

TEST(ProgramCache, AStoredProgramChangedAfterwardsIsDiscardedNotUsed) {
  const std::string dir = fresh_dir("changed");
  const std::string out = dir + "/out.kiln";
  const std::string cache_dir = dir + "/cache";
  Compiler c;
  bool hit = false;
  ProgramCache cache({cache_dir});
  ASSERT_TRUE(cache.place("key", out, c.writing("the right program"), {}, &hit).has_value());
  const std::string entry = cache_dir + "/" + cache_key_hash("key") + kProgramEntrySuffix;
  // Written in place through the output's name (cp and shell redirection do
  // this): where the output is a hard link to the entry, the entry changes too.
  write_text(out, "another valid-looking program");
  write_text(entry, "another valid-looking program");
  std::vector<std::string> heard;
  const std::string out2 = dir + "/out2.kiln";
  auto p = cache.place(
      "key", out2, c.writing("the right program"), [&](const std::string& m) { heard.push_back(m); }, &hit);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  EXPECT_FALSE(hit);
  EXPECT_EQ(c.compiles, 2);
  EXPECT_EQ(read_text(out2), "the right program");
  ASSERT_FALSE(heard.empty());
  EXPECT_NE(heard[0].find("its bytes changed since it was stored"), std::string::npos) << heard[0];
  // The rebuilt entry is whole again.
  const std::string out3 = dir + "/out3.kiln";
  ASSERT_TRUE(cache.place("key", out3, c.writing("x"), {}, &hit).has_value());
  EXPECT_TRUE(hit);
  EXPECT_EQ(read_text(out3), "the right program");
  auto stats = EngineCache::inspect(cache_dir);
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->discarded, 1);
  fs::remove_all(dir);
}

TEST(ProgramCache, EntriesWithoutTheirKeyRecordOrWithAnotherKeyAreDiscarded) {
  const std::string dir = fresh_dir("record");
  const std::string cache_dir = dir + "/cache";
  const std::string meta = cache_dir + "/" + cache_key_hash("key") + kProgramMetaSuffix;
  Compiler c;
  bool hit = false;
  ProgramCache cache({cache_dir});
  const std::string out = dir + "/out.kiln";
  ASSERT_TRUE(cache.place("key", out, c.writing("program"), {}, &hit).has_value());
  for (const char* damage : {"missing", "other key", "garbage"}) {
    const std::string d = damage;
    if (d == "missing") fs::remove(meta);
    if (d == "other key") {
      nlohmann::json j = read_json(meta);
      j["key_hex"] = "6120646966666572656e74206b6579";  // "a different key"
      write_text(meta, j.dump());
    }
    if (d == "garbage") write_text(meta, "{not json");
    std::vector<std::string> heard;
    auto p = cache.place(
        "key", out, c.writing("program"), [&](const std::string& m) { heard.push_back(m); }, &hit);
    ASSERT_TRUE(p.has_value()) << d;
    EXPECT_FALSE(hit) << d;
    ASSERT_FALSE(heard.empty()) << d;
    EXPECT_NE(heard[0].find("discarding cached program"), std::string::npos) << d << ": " << heard[0];
  }
  EXPECT_EQ(c.compiles, 4);
  fs::remove_all(dir);
}

TEST(ProgramCache, ProgramsAndEnginePlansAreEvictedTogetherByLastUse) {
  const std::string dir = fresh_dir("evict");
  const std::string cache_dir = dir + "/cache";
  const std::string big(3000, 'p');
  Compiler c;
  bool hit = false;
  CacheOptions o{cache_dir};
  o.max_disk_bytes = 7000;  // two entries of about 3000 bytes fit, three do not
  ProgramCache cache(o);
  {
    EngineCache engines(o);
    ASSERT_TRUE(engines.get_or_build("engine A", [&] { return Expected<std::vector<uint8_t>>(std::vector<uint8_t>(2900)); },
                                     {}, &hit)
                    .has_value());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (const char* k : {"B", "C"}) {
    const std::string out = dir + "/" + k + ".kiln";
    ASSERT_TRUE(cache.place(k, out, c.writing(big), {}, &hit).has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // B is older than C but used after it.
  ASSERT_TRUE(cache.place("B", dir + "/B2.kiln", c.writing(big), {}, &hit).has_value());
  EXPECT_TRUE(hit);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(cache.place("D", dir + "/D.kiln", c.writing(big), {}, &hit).has_value());
  auto stats = EngineCache::inspect(cache_dir);
  ASSERT_TRUE(stats.has_value());
  std::set<std::string> keys;
  for (const auto& e : stats->entries) keys.insert(e.key);
  EXPECT_EQ(keys.count(cache_key_hash("engine A")), 0u) << "the least recently used entry (a plan) was kept";
  EXPECT_EQ(keys.count(cache_key_hash("C")), 0u) << "the next least recently used program was kept";
  EXPECT_EQ(keys.count(cache_key_hash("B")), 1u) << "the recently used program was evicted";
  EXPECT_EQ(keys.count(cache_key_hash("D")), 1u);
  EXPECT_FALSE(fs::exists(cache_dir + "/" + cache_key_hash("C") + kProgramMetaSuffix));
  // Outputs placed from an evicted entry keep their bytes.
  EXPECT_EQ(read_text(dir + "/C.kiln"), big);
  fs::remove_all(dir);
}

TEST(ProgramCache, TwoProcessesCompileOneKeyOnce) {
  const std::string dir = fresh_dir("race");
  const std::string log = dir + "/compiles";
  auto child = [&](const std::string& out) {
    return [&, out]() -> int {
      ProgramCache cache({dir + "/cache"});
      bool hit = false;
      auto p = cache.place(
          "shared key", out,
          [&](const std::string& path) -> Expected<ProgramSummary> {
            std::ofstream(log, std::ios::app) << "compiled\n";
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            write_text(path, "the shared program");
            return ProgramSummary{{"forward"}, 1, 1, 18, 0};
          },
          {}, &hit);
      return p.has_value() && read_text(out) == "the shared program" ? 0 : 1;
    };
  };
  pid_t pids[2] = {};
  for (int i = 0; i < 2; ++i) {
    pids[i] = ::fork();
    if (pids[i] == 0) ::_exit(child(dir + "/out" + std::to_string(i) + ".kiln")());
  }
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(read_text(log), "compiled\n");
  fs::remove_all(dir);
}

TEST(ProgramCache, ACompileKilledMidwayLeavesNothingThatIsUsed) {
  const std::string dir = fresh_dir("kill");
  const std::string out = dir + "/out.kiln";
  const std::string started = dir + "/started";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ProgramCache cache({dir + "/cache"});
    bool hit = false;
    auto p = cache.place(
        "key", out,
        [&](const std::string& path) -> Expected<ProgramSummary> {
          write_text(path, "half a prog");
          write_text(started, "1");
          std::this_thread::sleep_for(std::chrono::seconds(30));  // killed long before this ends
          return ProgramSummary{};
        },
        {}, &hit);
    ::_exit(p.has_value() ? 0 : 1);
  }
  for (int i = 0; i < 500 && !fs::exists(started); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(fs::exists(started));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  // What a writer killed between storing the program and its key record leaves.
  write_text(dir + "/cache/" + cache_key_hash("key") + kProgramEntrySuffix, "half a prog");
  Compiler c;
  bool hit = true;
  ProgramCache cache({dir + "/cache"});
  auto p = cache.place("key", out, c.writing("the program"), {}, &hit);  // the lock died with the process
  ASSERT_TRUE(p.has_value()) << p.status().message();
  EXPECT_FALSE(hit);
  EXPECT_EQ(c.compiles, 1);
  EXPECT_EQ(read_text(out), "the program");
  fs::remove_all(dir);
}

TEST(ProgramCache, CopiesWhereTheOutputIsOnAnotherFileSystem) {
  // /dev/shm is a separate tmpfs on Linux hosts; skip where it is not.
  struct stat shm {}, tmp {};
  const std::string dir = fresh_dir("copy");
  if (::stat("/dev/shm", &shm) != 0 || ::stat(dir.c_str(), &tmp) != 0 || shm.st_dev == tmp.st_dev ||
      ::access("/dev/shm", W_OK) != 0)
    GTEST_SKIP() << "no second writable file system here";
  const std::string out = "/dev/shm/kiln_pcache_copy_" + std::to_string(::getpid()) + ".kiln";
  Compiler c;
  bool hit = false;
  ProgramCache cache({dir + "/cache"});
  ASSERT_TRUE(cache.place("key", dir + "/first.kiln", c.writing("program"), {}, &hit));
  auto p = cache.place("key", out, c.writing("must not run"), {}, &hit);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  EXPECT_TRUE(hit);
  EXPECT_EQ(read_text(out), "program");
  struct stat o {};
  ASSERT_EQ(::stat(out.c_str(), &o), 0);
  EXPECT_EQ(o.st_nlink, 1u) << "a copy, not a link";
  fs::remove(out);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::program
