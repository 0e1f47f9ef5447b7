// Writes the fuzz targets' seed corpora from the real fixtures:
//   make_seeds SOURCE_DIR OUT_DIR
// OUT_DIR/<target>/ gets .pt2 archives (zip, pt2), their model JSON
// (pt2_json), the recorded I/O (safetensors), compiled programs (kiln_file,
// one of them with two methods), their engine plans (plan) and engine cache
// entries (cache_entry, keyed "kiln fuzz seed key"); where the CUDA backend is
// built, a CUDA engine plan written without a GPU (cuda_plan).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "frontend/zip_reader.h"
#include "kiln/kiln.h"
#include "program/engine_cache.h"
#include "program/kiln_file.h"
#ifdef KILN_HAVE_CUDA
#include "support/cuda_plan_sample.h"
#endif

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxArchiveSeed = 64 << 10;

void write(const fs::path& p, std::span<const uint8_t> bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_seeds SOURCE_DIR OUT_DIR\n";
    return 2;
  }
  const fs::path fixtures = fs::path(argv[1]) / "tests/fixtures/torch2.11";
  const fs::path out = argv[2];
  int n = 0;
  for (const auto& e : fs::directory_iterator(fixtures)) {
    const fs::path p = e.path();
    const std::string name = p.filename().string();
    if (p.extension() == ".pt2") {
      auto bytes = read(p);
      // Whole archives: the small ones (mutating a 500 KB archive is slow and
      // adds nothing a 30 KB one does not exercise).
      if (bytes.size() <= kMaxArchiveSeed) {
        write(out / "zip" / name, bytes);
        write(out / "pt2" / name, bytes);
        ++n;
      }
      auto zip = kiln::frontend::ZipArchive::open(p.string());
      if (zip)
        for (const auto& z : zip->entries())
          if (z.name.ends_with("/models/model.json"))
            if (auto b = zip->read(z); b && b->size() <= kMaxArchiveSeed)
              write(out / "pt2_json" / (name + ".json"), *b);
    } else if (p.extension() == ".safetensors") {
      write(out / "safetensors" / name, read(p));
    }
  }
  // Compiled programs, their plans and cache entries.
  const fs::path tmp = out / "tmp";
  fs::create_directories(tmp);
  kiln::LoadOptions options;
  std::vector<std::pair<std::string, std::shared_ptr<const kiln::Program>>> programs;
  for (const char* m : {"resnet_basic", "kv_cache_attention", "mlp_bf16", "bert", "conv_state", "nonzero_middle"}) {
    auto p = kiln::compile((fixtures / (std::string(m) + ".pt2")).string(), options);
    if (!p) {
      std::cerr << m << ": " << p.status().message() << "\n";
      return 1;
    }
    programs.emplace_back(m, *p);
  }
  auto llm = kiln::compile_methods(
      {{"prefill", (fixtures / "llama_prefill.pt2").string()}, {"decode", (fixtures / "llama_generate.pt2").string()}},
      options);
  if (!llm) {
    std::cerr << "llama: " << llm.status().message() << "\n";
    return 1;
  }
  programs.emplace_back("llama_methods", *llm);
  int plans = 0;
  for (const auto& [name, p] : programs) {
    const fs::path file = out / "kiln_file" / (name + ".kiln");
    fs::create_directories(file.parent_path());
    if (auto s = p->save(file.string()); !s) {
      std::cerr << name << ": " << s.message() << "\n";
      return 1;
    }
    auto methods = kiln::program::load_program_methods(file.string());
    if (!methods) return 1;
    for (const auto& m : *methods)
      for (const auto& seg : m.program.segments) {
        if (seg.plan.empty()) continue;
        write(out / "plan" / (name + "." + std::to_string(plans) + ".plan"), seg.plan);
        // The entry a cache writes for this plan, under the fuzz target's key.
        const std::string key = "kiln fuzz seed key";
        kiln::program::EngineCache one({(tmp / ("c" + std::to_string(plans))).string()});
        bool hit = false;
        auto got = one.get_or_build(
            key, [&] { return kiln::Expected<std::vector<uint8_t>>(seg.plan); }, {}, &hit);
        if (!got) return 1;
        write(out / "cache_entry" / (name + "." + std::to_string(plans) + ".kce"),
              read(tmp / ("c" + std::to_string(plans)) / (kiln::program::cache_key_hash(key) + ".kce")));
        ++plans;
      }
  }
  fs::remove_all(tmp);
#ifdef KILN_HAVE_CUDA
  write(out / "cuda_plan" / "sample.plan", kiln::testing::sample_cuda_engine_plan());
  write(out / "cuda_plan" / "range.plan",
        kiln::testing::sample_cuda_engine_plan(kiln::testing::sample_range_cuda_plan(),
                                               kiln::testing::kSampleRangeCudaGraph));
#endif
  std::cout << "seeds: " << n << " archives, " << programs.size() << " programs, " << plans << " plans\n";
  return 0;
}
