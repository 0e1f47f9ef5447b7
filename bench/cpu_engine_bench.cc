// Latency of one call on the CPU: engines built by the CPU backend (fused
// elementwise layers, arena) against the same program run node by node on the
// reference kernels (--device null), on the shipped fixtures' recorded inputs.
//
//   build/kiln_bench_cpu --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "base/safetensors.h"
#include "kiln/kiln.h"

namespace {

const std::string kDir = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";

void run_model(benchmark::State& state, const std::string& name, const std::string& device) {
  kiln::LoadOptions options;
  options.compile.device = device;
  auto program = kiln::compile(kDir + name + ".pt2", options);
  auto io = kiln::read_safetensors(kDir + name + ".io.safetensors");
  if (!program || !io) {
    state.SkipWithError("cannot load the fixture");
    return;
  }
  std::vector<kiln::Tensor> inputs;
  for (size_t i = 0; const kiln::Tensor* t = io->find("input." + std::to_string(i)); ++i) inputs.push_back(*t);
  kiln::Session session(*program);
  for (auto _ : state) {
    auto out = session.run(inputs);
    if (!out) {
      state.SkipWithError(out.status().message().c_str());
      return;
    }
    benchmark::DoNotOptimize(out->data());
  }
}

}  // namespace

#define KILN_BENCH_MODEL(name)                                                                   \
  BENCHMARK_CAPTURE(run_model, name##_engine, #name, "cpu")->Unit(benchmark::kMillisecond);     \
  BENCHMARK_CAPTURE(run_model, name##_reference, #name, "null")->Unit(benchmark::kMillisecond);

KILN_BENCH_MODEL(resnet_bottleneck)
KILN_BENCH_MODEL(mobilenet_v2)
KILN_BENCH_MODEL(efficientnet_b0)
KILN_BENCH_MODEL(bert)
KILN_BENCH_MODEL(gpt2)
KILN_BENCH_MODEL(llama)

BENCHMARK_MAIN();
