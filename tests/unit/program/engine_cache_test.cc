// The engine cache: keys that change with every ingredient, hits and misses
// across processes, eviction by last use, damaged entries discarded and
// rebuilt, a builder killed mid-way, and refit (new weights, cached plan).
#include "program/engine_cache.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "base/safetensors.h"
#include "compiler/compiler.h"
#include "frontend/pt2_loader.h"
#include "lowering/pipeline.h"
#include "program/compiled_program.h"
#include "runtime/executable.h"
#include "support/network_text.h"

namespace kiln::program {
namespace {

namespace fs = std::filesystem;
using kiln::testing::network_from;

std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("kiln_cache_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d.string();
}

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// ---- keys

constexpr const char* kNet = R"(graph(%x: float32[4, 8], %w: float32[8, 3], %b: float32[3]) {
  %m: float32[4, 3] = aten.mm.default(self=%x, mat2=%w)
  %a: float32[4, 3] = aten.add.Tensor(self=%m, other=%b, alpha=1)
  %s: float32[4, 3] = aten.sub.Tensor(self=%a, other=%m)
  return (%s)
}
)";

std::string key_of(const std::string& text, const std::vector<std::string>& constants = {"w", "b"},
                   const std::string& precision = "fp32") {
  auto backend = cpu::make_cpu_backend();
  return compiler::engine_cache_key(*backend, network_from(text, 1, constants), *parse_precision(precision));
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(EngineCacheKey, ChangesWithEveryIngredient) {
  const std::string base = key_of(kNet);
  EXPECT_EQ(base, key_of(kNet));  // deterministic
  EXPECT_EQ(cache_key_hash(base), cache_key_hash(key_of(kNet)));
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"wiring", key_of(replaced(kNet, "sub.Tensor(self=%a, other=%m)", "sub.Tensor(self=%m, other=%a)"))},
      {"scalar attribute", key_of(replaced(kNet, "alpha=1", "alpha=2"))},
      {"constant shape", key_of(replaced(kNet, "%b: float32[3]", "%b: float32[1]"))},
      {"constant dtype", key_of(replaced(kNet, "%b: float32[3]", "%b: float64[3]"))},
      {"constant name", key_of(kNet, {"w", "bias"})},
      {"input shape", key_of(replaced(replaced(replaced(kNet, "%x: float32[4, 8]", "%x: float32[5, 8]"),
                                               "%m: float32[4, 3]", "%m: float32[5, 3]"),
                                      "%a: float32[4, 3]", "%a: float32[5, 3]"))},
      {"precision", key_of(kNet, {"w", "b"}, "fp16")},
  };
  for (const auto& [what, key] : variants) {
    EXPECT_NE(key, base) << what;
    EXPECT_NE(cache_key_hash(key), cache_key_hash(base)) << what;
  }
  // The backend's identity (device, libraries) is part of the key.
  struct OtherDevice : engine::Backend {
    std::unique_ptr<engine::Backend> cpu = cpu::make_cpu_backend();
    std::string_view name() const override { return "cpu"; }
    const engine::TargetInfo& target() const override { return cpu->target(); }
    std::string identity() const override { return "cpu on another machine"; }
    Expected<std::vector<uint8_t>> build(engine::Network n, const engine::BuildOptions& o) const override {
      return cpu->build(std::move(n), o);
    }
    Expected<engine::EngineHandle> load(std::span<const uint8_t> p, const engine::WeightLookup& w,
                                        std::string_view what) const override {
      return cpu->load(p, w, what);
    }
    Status execute(const engine::ExecuteContext& c, engine::EngineHandle h, std::span<const Tensor> i,
                   std::vector<Tensor>& o) const override {
      return cpu->execute(c, h, i, o);
    }
    void destroy(engine::EngineHandle h) const override { cpu->destroy(h); }
  } other;
  EXPECT_NE(compiler::engine_cache_key(other, network_from(kNet, 1, {"w", "b"}), Precision::kFp32), base);
}

TEST(EngineCacheKey, ChangesWithTheShapeProfileOfItsOwnSymbols) {
  // A batch of s0 rows: each of min, opt and max of s0 changes the key; a
  // symbol the network does not use does not.
  const std::string text = replaced(replaced(replaced(kNet, "%x: float32[4, 8]", "%x: float32[s0, 8]"),
                                             "%m: float32[4, 3]", "%m: float32[s0, 3]"),
                                    "%a: float32[4, 3]", "%a: float32[s0, 3]");
  const std::string dyn = replaced(text, "%s: float32[4, 3]", "%s: float32[s0, 3]");
  auto backend = cpu::make_cpu_backend();
  auto key = [&](std::map<std::string, ir::SymbolRange> symbols) {
    return compiler::engine_cache_key(*backend, network_from(dyn, 1, {"w", "b"}), Precision::kFp32, symbols);
  };
  const std::string base = key({{"s0", {1, 16, 8}}});
  EXPECT_NE(key({{"s0", {2, 16, 8}}}), base) << "min";
  EXPECT_NE(key({{"s0", {1, 16, 4}}}), base) << "opt";
  EXPECT_NE(key({{"s0", {1, 32, 8}}}), base) << "max";
  EXPECT_EQ(key({{"s0", {1, 16, 8}}, {"s1", {1, 4, 2}}}), base) << "a symbol the network does not use";
  EXPECT_EQ(
      compiler::engine_cache_key(*backend, network_from(kNet, 1, {"w", "b"}), Precision::kFp32, {{"s0", {1, 16, 8}}}),
      key_of(kNet))
      << "a static network does not depend on any profile";
}

// ---- levels, hits and misses

struct Counted {
  int builds = 0;
  std::function<Expected<std::vector<uint8_t>>()> build(const std::string& content) {
    return [this, content]() -> Expected<std::vector<uint8_t>> {
      ++builds;
      return bytes_of(content);
    };
  }
};

TEST(EngineCache, BuildsOnceThenHitsInMemoryAndOnDisk) {
  const std::string dir = fresh_dir("hits");
  Counted c;
  bool hit = true;
  {
    EngineCache cache({dir});
    auto a = cache.get_or_build("key A", c.build("plan A"), {}, &hit);
    ASSERT_TRUE(a.has_value()) << a.status().message();
    EXPECT_FALSE(hit);
    auto again = cache.get_or_build("key A", c.build("plan A"), {}, &hit);
    ASSERT_TRUE(again.has_value());
    EXPECT_TRUE(hit);  // memory level
    EXPECT_EQ(*again, bytes_of("plan A"));
  }
  EngineCache fresh({dir});  // another process, as far as memory goes
  auto disk = fresh.get_or_build("key A", c.build("plan A"), {}, &hit);
  ASSERT_TRUE(disk.has_value());
  EXPECT_TRUE(hit);
  EXPECT_EQ(*disk, bytes_of("plan A"));
  EXPECT_EQ(c.builds, 1);
  auto other = fresh.get_or_build("key B", c.build("plan B"), {}, &hit);
  ASSERT_TRUE(other.has_value());
  EXPECT_FALSE(hit);
  EXPECT_EQ(c.builds, 2);
  auto stats = EngineCache::inspect(dir);
  ASSERT_TRUE(stats.has_value()) << stats.status().message();
  EXPECT_EQ(stats->entries.size(), 2u);
  EXPECT_EQ(stats->misses, 2);
  EXPECT_EQ(stats->hits, 1);  // the disk hit (memory hits never reach the disk)
  fs::remove_all(dir);
}

TEST(EngineCache, EvictsTheLeastRecentlyUsedNotTheOldest) {
  const std::string dir = fresh_dir("evict");
  const std::string big(3000, 'p');
  Counted c;
  bool hit = false;
  {
    CacheOptions o{dir};
    o.max_disk_bytes = 11000;  // three entries of ~3.4 KB fit, four do not
    EngineCache cache(o);
    for (const char* k : {"A", "B", "C"}) {
      ASSERT_TRUE(cache.get_or_build(k, c.build(big), {}, &hit).has_value());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  {
    // A is the oldest entry but the most recently used one after this.
    EngineCache reader({dir});
    ASSERT_TRUE(reader.get_or_build("A", c.build(big), {}, &hit).has_value());
    EXPECT_TRUE(hit);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CacheOptions o{dir};
  o.max_disk_bytes = 11000;
  EngineCache writer(o);
  ASSERT_TRUE(writer.get_or_build("D", c.build(big), {}, &hit).has_value());
  auto stats = EngineCache::inspect(dir);
  ASSERT_TRUE(stats.has_value());
  std::set<std::string> keys;
  for (const auto& e : stats->entries) keys.insert(e.key);
  EXPECT_EQ(keys.count(cache_key_hash("A")), 1u) << "the recently used entry was evicted";
  EXPECT_EQ(keys.count(cache_key_hash("B")), 0u) << "the least recently used entry was kept";
  EXPECT_EQ(keys.count(cache_key_hash("D")), 1u);
  fs::remove_all(dir);
}

TEST(EngineCache, DamagedEntriesAreDiscardedRebuiltAndReported) {
  const std::string dir = fresh_dir("damage");
  Counted c;
  bool hit = false;
  {
    EngineCache cache({dir});
    ASSERT_TRUE(cache.get_or_build("key", c.build("the plan"), {}, &hit).has_value());
  }
  const std::string entry = dir + "/" + cache_key_hash("key") + ".kce";
  for (const char* damage : {"flip", "truncate"}) {
    {
      std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
      ASSERT_TRUE(f.good());
      if (std::string(damage) == "flip") {
        f.seekp(static_cast<std::streamoff>(fs::file_size(entry) - 10));
        f.put('\x5a');
      }
    }
    if (std::string(damage) == "truncate") fs::resize_file(entry, fs::file_size(entry) / 2);
    std::vector<std::string> heard;
    EngineCache fresh({dir});
    auto p = fresh.get_or_build(
        "key", c.build("the plan"), [&](const std::string& m) { heard.push_back(m); }, &hit);
    ASSERT_TRUE(p.has_value()) << damage;
    EXPECT_FALSE(hit) << damage;
    EXPECT_EQ(*p, bytes_of("the plan")) << damage;
    ASSERT_EQ(heard.size(), 1u) << damage;
    EXPECT_NE(heard[0].find("discarding cache entry"), std::string::npos) << heard[0];
  }
  EXPECT_EQ(c.builds, 3);
  auto stats = EngineCache::inspect(dir);
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->discarded, 2);
  fs::remove_all(dir);
}

TEST(EngineCache, AnUnusableDirectoryNeverStopsABuild) {
  const std::string file = fresh_dir("not_a_dir");
  std::ofstream(file) << "a file where the cache directory should be";
  Counted c;
  bool hit = true;
  std::vector<std::string> heard;
  EngineCache cache({file + "/sub"});
  auto p = cache.get_or_build(
      "key", c.build("plan"), [&](const std::string& m) { heard.push_back(m); }, &hit);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  EXPECT_FALSE(hit);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_NE(heard[0].find("engine cache not used"), std::string::npos) << heard[0];
  fs::remove(file);
}

// Runs `f` in a child process; returns its exit status.
int in_child(const std::function<int()>& f, pid_t* pid_out = nullptr, bool wait = true) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(f());
  if (pid_out) *pid_out = pid;
  if (!wait) return 0;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(EngineCache, TwoProcessesBuildingOneKeyBuildItOnce) {
  const std::string dir = fresh_dir("race");
  const std::string log = dir + ".builds";
  fs::remove(log);
  auto child = [&]() -> int {
    EngineCache cache({dir});
    bool hit = false;
    auto p = cache.get_or_build(
        "shared key",
        [&]() -> Expected<std::vector<uint8_t>> {
          std::ofstream(log, std::ios::app) << "built\n";
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          return bytes_of("shared plan");
        },
        {}, &hit);
    return p.has_value() && *p == bytes_of("shared plan") ? 0 : 1;
  };
  pid_t a = 0, b = 0;
  in_child(child, &a, false);
  in_child(child, &b, false);
  int sa = 0, sb = 0;
  ::waitpid(a, &sa, 0);
  ::waitpid(b, &sb, 0);
  EXPECT_TRUE(WIFEXITED(sa) && WEXITSTATUS(sa) == 0);
  EXPECT_TRUE(WIFEXITED(sb) && WEXITSTATUS(sb) == 0);
  std::ifstream f(log);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "built\n");
  fs::remove_all(dir);
  fs::remove(log);
}

TEST(EngineCache, ABuilderKilledMidwayLeavesNoEntryAndBlocksNoOne) {
  const std::string dir = fresh_dir("kill");
  const std::string started = dir + ".started";
  fs::remove(started);
  pid_t pid = 0;
  in_child(
      [&]() -> int {
        EngineCache cache({dir});
        bool hit = false;
        auto p = cache.get_or_build(
            "key",
            [&]() -> Expected<std::vector<uint8_t>> {
              std::ofstream(started) << "1";
              std::this_thread::sleep_for(std::chrono::seconds(30));  // killed long before this ends
              return bytes_of("never");
            },
            {}, &hit);
        return p.has_value() ? 0 : 1;
      },
      &pid, false);
  for (int i = 0; i < 500 && !fs::exists(started); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(fs::exists(started));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  // A temporary file a killed writer might leave is never read as an entry.
  std::ofstream(dir + "/" + cache_key_hash("key") + ".kce.tmp.99999.0") << "half a plan";
  Counted c;
  bool hit = true;
  EngineCache cache({dir});
  auto p = cache.get_or_build("key", c.build("the plan"), {}, &hit);  // the lock died with the killed process
  ASSERT_TRUE(p.has_value()) << p.status().message();
  EXPECT_FALSE(hit);
  EXPECT_EQ(*p, bytes_of("the plan"));
  EXPECT_EQ(c.builds, 1);
  fs::remove_all(dir);
  fs::remove(started);
}

// ---- refit: the same structure with new weights reuses the cached plans

TEST(EngineCache, NewWeightsReuseThePlanAndGiveTheNewOutputs) {
  const std::string dir = fresh_dir("refit");
  const std::string fixture = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/resnet_bottleneck";
  auto compile = [&](bool new_weights, bool use_cache, bool* from_cache) -> Expected<runtime::Executable*> {
    auto m = frontend::load_pt2(fixture + ".pt2");
    if (!m) return m.status();
    if (new_weights)
      for (auto& [name, t] : m->weights)
        if (is_floating(t.dtype()) && name.find("running_var") == std::string::npos) {
          Tensor scaled = t.clone();
          for (int64_t i = 0; i < scaled.numel(); ++i) scaled.data<float>()[i] = scaled.data<float>()[i] * 0.5f + 0.01f;
          t = scaled;
        }
    KILN_TRY(lowering::run_pipeline(*m, lowering::default_pipeline()));
    compiler::CompileSettings s;
    if (use_cache) s.cache = std::make_shared<EngineCache>(CacheOptions{dir});
    KILN_ASSIGN_OR_RETURN(CompiledProgram p, compiler::compile_module(std::move(*m), s));
    *from_cache = p.segments.size() == 1 && p.segments[0].from_cache;
    KILN_ASSIGN_OR_RETURN(auto e, runtime::Executable::load(std::move(p), "refit"));
    return e.release();
  };
  auto io = read_safetensors(fixture + ".io.safetensors");
  ASSERT_TRUE(io.has_value());
  const Tensor* x = io->find("input.0");
  ASSERT_NE(x, nullptr);
  auto run = [&](runtime::Executable& e) -> Tensor {
    std::vector<cpu::RtValue> in(e.program().module.graph.inputs().size());
    const auto& specs = e.program().module.input_specs;
    for (size_t i = 0; i < specs.size(); ++i)
      in[i] = specs[i].kind == ir::InputSpec::Kind::kUserInput ? *x : e.program().module.weights.at(specs[i].target);
    auto out = e.run(in);
    EXPECT_TRUE(out.has_value()) << out.status().message();
    return out.has_value() ? cpu::rt_value_to_tensor(out->back()) : Tensor();
  };
  bool cached = true;
  auto first = compile(false, true, &cached);
  ASSERT_TRUE(first.has_value()) << first.status().message();
  std::unique_ptr<runtime::Executable> a(*first);
  EXPECT_FALSE(cached);
  auto second = compile(true, true, &cached);
  ASSERT_TRUE(second.has_value()) << second.status().message();
  std::unique_ptr<runtime::Executable> b(*second);
  EXPECT_TRUE(cached) << "new weights with the same structure must reuse the plan";
  // Reference for the new weights: the same program built with no cache at all.
  auto third = compile(true, false, &cached);
  ASSERT_TRUE(third.has_value()) << third.status().message();
  std::unique_ptr<runtime::Executable> fresh(*third);
  const Tensor old_out = run(*a), new_out = run(*b), want = run(*fresh);
  ASSERT_TRUE(old_out.defined() && new_out.defined() && want.defined());
  ASSERT_EQ(new_out.sizes(), want.sizes());
  double diff_old = 0, diff_new = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    diff_new = std::max(diff_new, std::fabs(new_out.value_at(i) - want.value_at(i)));
    diff_old = std::max(diff_old, std::fabs(old_out.value_at(i) - want.value_at(i)));
  }
  EXPECT_EQ(diff_new, 0.0) << "the cached plan with new weights differs from a fresh build";
  EXPECT_GT(diff_old, 1e-3) << "the new weights change nothing, so this test would prove nothing";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::program
