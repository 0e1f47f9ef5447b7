// The CUDA backend end to end on small networks: its engines give what the
// CPU reference backend gives, on host tensors and when replayed on inputs
// copied to the device once.
#include "backends/cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_support.h"
#include "backends/cuda/device_constant.h"
#include "backends/cuda/kernel_source.h"
#include "base/safetensors.h"
#include "kiln/check.h"
#include "kiln/kiln.h"
#include "runtime/engine_hot_set.h"
#include "support/network_text.h"

namespace kiln::cuda {
namespace {

using engine::Network;
using kiln::testing::network_from;

// An embedding whose index input is last read by the first layer: the arena
// could give its bytes to later layers, so a replay on inputs copied in once
// would read someone else's data.
constexpr const char* kEmbedMlp =
    R"(graph(%ids: int64[2, 8], %table: float32[16, 32], %w: float32[32, 24], %b: float32[24]) {
  %e: float32[2, 8, 32] = aten.embedding.default(weight=%table, indices=%ids)
  %m: float32[2, 8, 24] = aten.matmul.default(self=%e, other=%w)
  %a: float32[2, 8, 24] = aten.add.Tensor(self=%m, other=%b)
  %r: float32[2, 8, 24] = aten.relu.default(self=%a)
  %s: float32[2, 8, 24] = aten.softmax.int(self=%r, dim=-1)
  return (%s)
}
)";

Tensor random_tensor(DType dtype, Shape sizes, uint32_t seed, int64_t modulus = 0) {
  Tensor t = Tensor::zeros(DType::Float64, sizes);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = modulus > 0 ? static_cast<double>(rng() % static_cast<uint32_t>(modulus)) : u(rng);
  return t.to(dtype);
}

engine::WeightLookup lookup(std::map<std::string, Tensor> weights) {
  return [weights = std::move(weights)](const std::string& name) -> Expected<Tensor> {
    auto it = weights.find(name);
    if (it == weights.end()) return not_found("no weight '" + name + "'");
    return it->second;
  };
}

// Random weights for kEmbedMlp.
engine::WeightLookup embed_mlp_weights() {
  return lookup({{"table", random_tensor(DType::Float32, {16, 32}, 1)},
                 {"w", random_tensor(DType::Float32, {32, 24}, 2)},
                 {"b", random_tensor(DType::Float32, {24}, 3)}});
}

struct Loaded {
  std::unique_ptr<engine::Backend> backend;
  std::unique_ptr<engine::Engine> engine;
};

void build_and_load(std::unique_ptr<engine::Backend> backend, const std::string& text,
                    const engine::WeightLookup& weights, Loaded& out,
                    const std::vector<std::string>& constants = {"table", "w", "b"},
                    const std::string& precision = "fp32") {
  Network net = network_from(text, 1, constants);
  engine::BuildOptions options;
  options.precision = *parse_precision(precision);
  auto plan = backend->build(std::move(net), options);
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  auto handle = backend->load(*plan, weights, "test engine");
  ASSERT_TRUE(handle.has_value()) << handle.status().message();
  out.engine = std::make_unique<engine::Engine>(backend.get(), *handle);
  out.backend = std::move(backend);
}

TEST(CudaBackend, MatchesTheCpuBackendAndSurvivesReplays) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto weights = embed_mlp_weights();
  Loaded gpu, cpu;
  ASSERT_NO_FATAL_FAILURE(build_and_load(make_cuda_backend(), kEmbedMlp, weights, gpu));
  ASSERT_NO_FATAL_FAILURE(build_and_load(cpu::make_cpu_backend(), kEmbedMlp, weights, cpu));
  const std::vector<Tensor> in = {random_tensor(DType::Int64, {2, 8}, 4, 16)};
  auto compare = [&](const char* when) {
    std::vector<Tensor> got, want;
    Status s = gpu.engine->execute(in, got);
    ASSERT_TRUE(s.is_ok()) << when << ": " << s.message();
    ASSERT_TRUE(cpu.engine->execute(in, want).is_ok());
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].sizes(), want[0].sizes());
    for (int64_t i = 0; i < want[0].numel(); ++i)
      ASSERT_NEAR(got[0].value_at(i), want[0].value_at(i), 1e-5 + 1e-4 * std::fabs(want[0].value_at(i)))
          << when << ", element " << i;
  };
  ASSERT_NO_FATAL_FAILURE(compare("first call"));
  // Replays of the captured work: each replay must still read the indices.
  for (int i = 0; i < 5; ++i) {
    std::vector<Tensor> out;
    ASSERT_TRUE(gpu.engine->execute(in, out).is_ok());
  }
  ASSERT_NO_FATAL_FAILURE(compare("after replays"));
}

TEST(CudaBackend, AnIndexOutOfRangeIsAnErrorNamingTheLayer) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto weights = embed_mlp_weights();
  Loaded gpu;
  ASSERT_NO_FATAL_FAILURE(build_and_load(make_cuda_backend(), kEmbedMlp, weights, gpu));
  Tensor ids = random_tensor(DType::Int64, {2, 8}, 4, 16);
  ids.data<int64_t>()[5] = 16;  // one past the table
  std::vector<Tensor> out;
  const std::vector<Tensor> in = {ids};
  Status s = gpu.engine->execute(in, out);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("'e'"), std::string::npos) << s.message();
  // The engine stays usable after the error.
  ids.data<int64_t>()[5] = 3;
  const std::vector<Tensor> good = {ids};
  EXPECT_TRUE(gpu.engine->execute(good, out).is_ok());
}

// A tensor over device memory (never read on the host).
Tensor device_tensor(const DeviceBuffer& b, DType dtype, Shape sizes) {
  auto storage = Storage::borrow(static_cast<uint8_t*>(b.get()), b.nbytes(), nullptr, Device::cuda());
  return *Tensor::from_storage(storage, dtype, sizes, contiguous_strides(sizes), 0);
}

// The caller's device memory in and out (a framework's CUDA tensors), on the
// caller's stream: the results the host path gives, and an index error still
// reported (by synchronize: the call is only enqueued).
TEST(CudaBackend, RunsOnTheCallersDeviceMemoryAndStream) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto weights = embed_mlp_weights();
  Loaded gpu, cpu;
  ASSERT_NO_FATAL_FAILURE(build_and_load(make_cuda_backend(), kEmbedMlp, weights, gpu));
  ASSERT_NO_FATAL_FAILURE(build_and_load(cpu::make_cpu_backend(), kEmbedMlp, weights, cpu));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto din = DeviceBuffer::allocate(2 * 8 * sizeof(int64_t));
  auto dout = DeviceBuffer::allocate(2 * 8 * 24 * sizeof(float));
  ASSERT_TRUE(din.has_value() && dout.has_value());
  for (int round = 0; round < 3; ++round) {
    Tensor ids = random_tensor(DType::Int64, {2, 8}, 10 + static_cast<uint32_t>(round), 16);
    ASSERT_EQ(cudaMemcpyAsync(din->get(), ids.raw_data(), din->nbytes(), cudaMemcpyHostToDevice, stream), cudaSuccess);
    const std::vector<Tensor> in = {device_tensor(*din, DType::Int64, {2, 8})};
    std::vector<Tensor> out = {device_tensor(*dout, DType::Float32, {2, 8, 24})};
    Status s = gpu.engine->execute(in, out, stream);
    ASSERT_TRUE(s.is_ok()) << s.message();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].raw_data(), dout->get()) << "written into the caller's memory";
    Tensor got = Tensor::zeros(DType::Float32, {2, 8, 24});
    ASSERT_EQ(cudaMemcpyAsync(got.raw_data(), dout->get(), dout->nbytes(), cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<Tensor> want;
    const std::vector<Tensor> host_in = {ids};
    ASSERT_TRUE(cpu.engine->execute(host_in, want).is_ok());
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_NEAR(got.value_at(i), want[0].value_at(i), 1e-5 + 1e-4 * std::fabs(want[0].value_at(i)))
          << "round " << round << ", element " << i;
  }
  // Memory of the wrong size for the output is refused before anything runs.
  const std::vector<Tensor> in = {device_tensor(*din, DType::Int64, {2, 8})};
  std::vector<Tensor> small = {device_tensor(*dout, DType::Float32, {2, 8, 12})};
  EXPECT_EQ(gpu.engine->execute(in, small, stream).code(), ErrorCode::kInvalidArgument);
  // An index out of range is still an error naming the layer.
  Tensor bad = random_tensor(DType::Int64, {2, 8}, 4, 16);
  bad.data<int64_t>()[3] = 99;
  ASSERT_EQ(cudaMemcpy(din->get(), bad.raw_data(), din->nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<Tensor> out = {device_tensor(*dout, DType::Float32, {2, 8, 24})};
  ASSERT_TRUE(gpu.engine->execute(in, out, stream).is_ok()) << "enqueued";
  Status s = gpu.backend->synchronize(gpu.engine->handle());
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("'e'"), std::string::npos) << s.message();
  EXPECT_TRUE(gpu.backend->synchronize(gpu.engine->handle()).is_ok()) << "reported once";
  cudaStreamDestroy(stream);
}

// A padded call on device memory (a padded batch bucket): the engine's rows
// past the caller's hold the caller's last row, so the whole output is the
// engine's result on the padded input; a cut output gets the caller's rows.
TEST(CudaBackend, PadsTheCallersRowsOnTheDevice) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto weights = embed_mlp_weights();
  Loaded gpu, cpu;
  ASSERT_NO_FATAL_FAILURE(build_and_load(make_cuda_backend(), kEmbedMlp, weights, gpu));
  ASSERT_NO_FATAL_FAILURE(build_and_load(cpu::make_cpu_backend(), kEmbedMlp, weights, cpu));
  const Tensor row = random_tensor(DType::Int64, {1, 8}, 77, 16);
  Tensor both = Tensor::zeros(DType::Int64, {2, 8});  // the caller's row, and the same row as padding
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t j = 0; j < 8; ++j) both.data<int64_t>()[r * 8 + j] = row.data<int64_t>()[j];
  std::vector<Tensor> want;
  const std::vector<Tensor> host_in = {both};
  ASSERT_TRUE(cpu.engine->execute(host_in, want).is_ok());
  auto din = DeviceBuffer::allocate(8 * sizeof(int64_t));
  auto dout = DeviceBuffer::allocate(2 * 8 * 24 * sizeof(float));
  ASSERT_TRUE(din.has_value() && dout.has_value());
  // Garbage in the engine's input slot first: a full call with other ids.
  const Tensor other = random_tensor(DType::Int64, {2, 8}, 78, 16);
  auto dother = DeviceBuffer::allocate(other.nbytes());
  ASSERT_TRUE(dother.has_value());
  ASSERT_EQ(cudaMemcpy(dother->get(), other.raw_data(), other.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  {
    std::vector<Tensor> full = {device_tensor(*dout, DType::Float32, {2, 8, 24})};
    ASSERT_TRUE(gpu.engine->execute(std::vector<Tensor>{device_tensor(*dother, DType::Int64, {2, 8})}, full).is_ok());
    ASSERT_TRUE(gpu.backend->synchronize(gpu.engine->handle()).is_ok());
  }
  ASSERT_EQ(cudaMemcpy(din->get(), row.raw_data(), row.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  // The caller's row in device memory, and in host memory (copied across, then padded there).
  for (const Tensor& given : {device_tensor(*din, DType::Int64, {1, 8}), row}) {
    const std::vector<Tensor> in = {given};
    for (int64_t factor : {0, 1}) {
      SCOPED_TRACE(std::string(given.is_cpu() ? "host" : "device") + " input, factor " + std::to_string(factor));
      engine::RowPadding padding{1, {true}, {factor}};
      const Shape out_sizes = {factor ? 1 : 2, 8, 24};
      std::vector<Tensor> out = {device_tensor(*dout, DType::Float32, out_sizes)};
      Status s = gpu.engine->execute(in, out, nullptr, &padding);
      ASSERT_TRUE(s.is_ok()) << s.message();
      // Device outputs: the call is only enqueued (on kiln's stream, which a
      // plain cudaMemcpy does not wait for) until synchronize.
      ASSERT_TRUE(gpu.backend->synchronize(gpu.engine->handle()).is_ok());
      Tensor got = Tensor::zeros(DType::Float32, out_sizes);
      ASSERT_EQ(cudaMemcpy(got.raw_data(), dout->get(), got.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
      for (int64_t i = 0; i < got.numel(); ++i)
        ASSERT_NEAR(got.value_at(i), want[0].value_at(i), 1e-5 + 1e-4 * std::fabs(want[0].value_at(i)))
            << "element " << i;
      // A new host tensor for the output: the cut sizes.
      std::vector<Tensor> fresh;
      ASSERT_TRUE(gpu.engine->execute(in, fresh, nullptr, &padding).is_ok());
      ASSERT_EQ(fresh.size(), 1u);
      EXPECT_EQ(fresh[0].sizes(), out_sizes);
      EXPECT_TRUE(fresh[0].same_bytes(got));
    }
  }
  // More rows than the engine holds, and output memory of the engine's rows for a cut output, are refused.
  const std::vector<Tensor> in = {device_tensor(*din, DType::Int64, {1, 8})};
  engine::RowPadding three{3, {true}, {1}};
  const std::vector<Tensor> in3 = {device_tensor(*dother, DType::Int64, {2, 8})};
  std::vector<Tensor> out2 = {device_tensor(*dout, DType::Float32, {2, 8, 24})};
  EXPECT_EQ(gpu.engine->execute(in3, out2, nullptr, &three).code(), ErrorCode::kInvalidArgument);
  engine::RowPadding one{1, {true}, {1}};
  EXPECT_EQ(gpu.engine->execute(in, out2, nullptr, &one).code(), ErrorCode::kInvalidArgument);
}

// Few-row linear layers (a decoder's one token) run as generated
// matrix-vector kernels: every row count up to the limit, each float dtype,
// bias with and without ReLU, small n (k split among warps) and odd n, and
// the plan records the kernel in place of a cuBLASLt GEMM.
TEST(CudaBackend, FewRowLinearsRunAsGemvAndMatchTheCpuBackend) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  struct Case {
    DType dtype;
    const char* type;
    int64_t m, n, k;
    bool bias, relu;
    bool matmul = false;  // x @ w with w stored k x n (as lowering leaves a linear's weight)
  };
  const Case cases[] = {
      {DType::BFloat16, "bfloat16", 1, 40, 1024, false, false},
      {DType::BFloat16, "bfloat16", 1, 3000, 256, true, false},
      {DType::Float16, "float16", 3, 37, 2048, true, true},
      {DType::Float16, "float16", 8, 129, 512, false, false},
      {DType::Float32, "float32", 1, 77, 4096, true, false},
      {DType::Float32, "float32", 5, 9, 64, true, true},
      {DType::BFloat16, "bfloat16", 1, 2048, 8192, false, false, true},
      {DType::Float16, "float16", 2, 100, 320, false, true, true},
      {DType::Float16, "float16", 8, 64, 8192, true, false},  // the most rows, a long k
  };
  for (const Case& c : cases) {
    const std::string at =
        std::string(c.type) + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k);
    auto dims = [](std::initializer_list<int64_t> d) {
      std::string s = "[";
      for (int64_t v : d) s += (s.size() > 1 ? ", " : "") + std::to_string(v);
      return s + "]";
    };
    const std::string T = c.type;
    std::string text = "graph(%x: " + T + dims({c.m, c.k}) + ", %w: " + T +
                       (c.matmul ? dims({c.k, c.n}) : dims({c.n, c.k})) + (c.bias ? ", %b: " + T + dims({c.n}) : "") +
                       ") {\n";
    if (c.matmul)
      text += "  %y: " + T + dims({c.m, c.n}) + " = aten.matmul.default(self=%x, other=%w)\n";
    else
      text += "  %y: " + T + dims({c.m, c.n}) + " = aten.linear.default(input=%x, weight=%w" +
              (c.bias ? ", bias=%b" : "") + ")\n";
    if (c.relu) text += "  %r: " + T + dims({c.m, c.n}) + " = aten.relu.default(self=%y)\n";
    text += std::string("  return (") + (c.relu ? "%r" : "%y") + ")\n}\n";
    std::map<std::string, Tensor> w{{"w", random_tensor(c.dtype, c.matmul ? Shape{c.k, c.n} : Shape{c.n, c.k}, 7)}};
    std::vector<std::string> names{"w"};
    if (c.bias) {
      w["b"] = random_tensor(c.dtype, {c.n}, 8);
      names.push_back("b");
    }
    const auto weights = lookup(w);
    auto backend = make_cuda_backend();
    auto plan = backend->build(network_from(text, 1, names), {});
    ASSERT_TRUE(plan.has_value()) << at << ": " << plan.status().message();
    EXPECT_NE(std::string(plan->begin(), plan->end()).find(" gemv\""), std::string::npos)
        << at << ": the plan has no gemv step";
    Loaded gpu, cpu;
    ASSERT_NO_FATAL_FAILURE(build_and_load(make_cuda_backend(), text, weights, gpu, names));
    ASSERT_NO_FATAL_FAILURE(build_and_load(cpu::make_cpu_backend(), text, weights, cpu, names));
    const std::vector<Tensor> in = {random_tensor(c.dtype, {c.m, c.k}, 9)};
    std::vector<Tensor> got, want;
    Status s = gpu.engine->execute(in, got);
    ASSERT_TRUE(s.is_ok()) << at << ": " << s.message();
    ASSERT_TRUE(cpu.engine->execute(in, want).is_ok());
    ASSERT_EQ(got[0].sizes(), want[0].sizes()) << at;
    // Both accumulate in float32 in different orders; the outputs round to the dtype.
    const double rel = c.dtype == DType::Float32 ? 1e-4 : (c.dtype == DType::Float16 ? 4e-3 : 2e-2);
    const double abs = c.dtype == DType::Float32 ? 1e-4 : 0.05;
    for (int64_t i = 0; i < want[0].numel(); ++i)
      ASSERT_NEAR(got[0].value_at(i), want[0].value_at(i), abs + rel * std::fabs(want[0].value_at(i)))
          << at << ", element " << i;
  }
}

// A gated MLP's silu(gate) * up over the two halves of one product (gate and
// up made one by lowering): with few rows one matrix-vector kernel computes
// both halves and writes silu(g) * u, giving the bits of the product and
// silu_mul run apart (the same network with the product also an output,
// which keeps them apart); with more rows the product and then silu_mul.
// Both against the CPU backend, with and without a bias, up first or gate first.
TEST(CudaBackend, GatedMlpHalvesFoldIntoTheProductAndKeepTheUnfusedBits) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  struct Case {
    DType dtype;
    const char* type;
    int64_t m, n, k;
    bool bias, up_first;
  };
  const Case cases[] = {
      {DType::BFloat16, "bfloat16", 1, 1024, 512, false, false},  // the weight fills the device: k not split
      {DType::BFloat16, "bfloat16", 1, 96, 2048, true, true},     // few columns: k split among warps
      {DType::Float16, "float16", 5, 200, 320, true, false},     {DType::Float32, "float32", 2, 64, 256, false, true},
      {DType::BFloat16, "bfloat16", 40, 256, 512, true, false},  // too many rows: the library GEMM, then silu_mul
  };
  for (const Case& c : cases) {
    const std::string at =
        std::string(c.type) + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k);
    const std::string T = c.type, M = std::to_string(c.m), N = std::to_string(c.n), N2 = std::to_string(2 * c.n),
                      K = std::to_string(c.k);
    auto text_of = [&](bool product_out) {
      std::string t = "graph(%x: " + T + "[" + M + ", " + K + "], %w: " + T + "[" + K + ", " + N2 + "]" +
                      (c.bias ? ", %b: " + T + "[" + N2 + "]" : "") + ") {\n";
      t += "  %p: " + T + "[" + M + ", " + N2 + "] = aten.matmul.default(self=%x, other=%w)\n";
      if (c.bias) t += "  %gu: " + T + "[" + M + ", " + N2 + "] = aten.add.Tensor(self=%p, other=%b)\n";
      const std::string gu = c.bias ? "%gu" : "%p";
      t += "  %lo: " + T + "[" + M + ", " + N + "] = aten.slice.Tensor(self=" + gu + ", dim=1, start=0, end=" + N +
           ")\n";
      t += "  %hi: " + T + "[" + M + ", " + N + "] = aten.slice.Tensor(self=" + gu + ", dim=1, start=" + N +
           ", end=" + N2 + ")\n";
      t += "  %s: " + T + "[" + M + ", " + N + "] = kiln.silu_mul(" + (c.up_first ? "a=%hi, b=%lo" : "a=%lo, b=%hi") +
           ")\n";
      return t + "  return (%s" + (product_out ? ", " + gu : "") + ")\n}\n";
    };
    std::map<std::string, Tensor> w{{"w", random_tensor(c.dtype, {c.k, 2 * c.n}, 11)}};
    std::vector<std::string> names{"w"};
    if (c.bias) {
      w["b"] = random_tensor(c.dtype, {2 * c.n}, 12);
      names.push_back("b");
    }
    const auto weights = lookup(w);
    auto plan = make_cuda_backend()->build(network_from(text_of(false), 1, names), {});
    ASSERT_TRUE(plan.has_value()) << at << ": " << plan.status().message();
    const std::string plan_text(plan->begin(), plan->end());
    const bool gemv = c.m <= kGemvMaxRows;
    EXPECT_EQ(plan_text.find("silu_mul") == std::string::npos, gemv) << at << ": " << plan_text.substr(0, 2000);
    Loaded fused, apart, cpu;
    ASSERT_NO_FATAL_FAILURE(build_and_load(make_cuda_backend(), text_of(false), weights, fused, names));
    ASSERT_NO_FATAL_FAILURE(build_and_load(make_cuda_backend(), text_of(true), weights, apart, names));
    ASSERT_NO_FATAL_FAILURE(build_and_load(cpu::make_cpu_backend(), text_of(false), weights, cpu, names));
    const std::vector<Tensor> in = {random_tensor(c.dtype, {c.m, c.k}, 13)};
    std::vector<Tensor> got, sep, want;
    Status s = fused.engine->execute(in, got);
    ASSERT_TRUE(s.is_ok()) << at << ": " << s.message();
    ASSERT_TRUE(apart.engine->execute(in, sep).is_ok()) << at;
    ASSERT_TRUE(cpu.engine->execute(in, want).is_ok()) << at;
    ASSERT_EQ(got[0].sizes(), want[0].sizes()) << at;
    if (gemv) {
      ASSERT_EQ(got[0].nbytes(), sep[0].nbytes()) << at;
      EXPECT_EQ(std::memcmp(got[0].raw_data(), sep[0].raw_data(), got[0].nbytes()), 0)
          << at << ": the fused kernel's bits differ from the product and silu_mul run apart";
    }
    const double rel = c.dtype == DType::Float32 ? 1e-4 : (c.dtype == DType::Float16 ? 8e-3 : 3e-2);
    const double abs = c.dtype == DType::Float32 ? 1e-4 : 0.1;
    for (int64_t i = 0; i < want[0].numel(); ++i)
      ASSERT_NEAR(got[0].value_at(i), want[0].value_at(i), abs + rel * std::fabs(want[0].value_at(i)))
          << at << ", element " << i;
  }
}

// --precision fp8w: a matrix-vector product's weight is stored as FP8 rows
// with a scale each and read by the FP8 kernel, plain and with a bias, a
// ReLU, or a gated MLP's silu(gate) * up; the result is the product with the
// weight those bytes and scales stand for (the same network on the CPU
// backend with the dequantized weight). More rows than a GEMV takes keep the
// exported weight.
TEST(CudaBackend, Fp8WeightsAreReadByTheMatrixVectorKernel) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  struct Case {
    DType dtype;
    const char* type;
    int64_t m, n, k;
    const char* tail;  // "", "bias", "relu" or "swiglu"
  };
  const Case cases[] = {
      {DType::BFloat16, "bfloat16", 1, 1536, 2048, ""},
      {DType::BFloat16, "bfloat16", 3, 96, 4096, "bias"},  // k split among warps
      {DType::Float16, "float16", 8, 200, 512, "relu"},
      {DType::Float32, "float32", 2, 64, 256, "bias"},
      {DType::BFloat16, "bfloat16", 1, 512, 1024, "swiglu"},
      {DType::BFloat16, "bfloat16", 12, 64, 256, ""},  // 12 rows: the library GEMM on the exported weight
  };
  for (const Case& c : cases) {
    const std::string tail = c.tail;
    const std::string at = std::string(c.type) + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                           " k=" + std::to_string(c.k) + " " + tail;
    const std::string M = std::to_string(c.m), N = std::to_string(c.n), K = std::to_string(c.k),
                      H = std::to_string(c.n / 2);
    // The layers at element type T: the engine's at the case's type; the
    // reference's at float32, on the exact values the FP8 bytes and scales
    // stand for (rounding them to a 16-bit type would add its own error,
    // which over k = 4096 terms passes the tolerance).
    auto graph_text = [&](const std::string& T) {
      std::string text = "graph(%x: " + T + "[" + M + ", " + K + "], %w: " + T + "[" + K + ", " + N + "]" +
                         (tail == "bias" || tail == "relu" ? ", %b: " + T + "[" + N + "]" : "") + ") {\n";
      text += "  %p: " + T + "[" + M + ", " + N + "] = aten.matmul.default(self=%x, other=%w)\n";
      std::string result = "%p";
      if (tail == "bias" || tail == "relu") {
        text += "  %y: " + T + "[" + M + ", " + N + "] = aten.add.Tensor(self=%p, other=%b)\n";
        result = "%y";
      }
      if (tail == "relu") {
        text += "  %r: " + T + "[" + M + ", " + N + "] = aten.relu.default(self=%y)\n";
        result = "%r";
      }
      if (tail == "swiglu") {
        text += "  %g: " + T + "[" + M + ", " + H + "] = aten.slice.Tensor(self=%p, dim=1, start=0, end=" + H + ")\n";
        text += "  %u: " + T + "[" + M + ", " + H + "] = aten.slice.Tensor(self=%p, dim=1, start=" + H + ", end=" + N +
                ")\n";
        text += "  %s: " + T + "[" + M + ", " + H + "] = kiln.silu_mul(a=%g, b=%u)\n";
        result = "%s";
      }
      text += "  return (" + result + ")\n}\n";
      return text;
    };
    const std::string text = graph_text(c.type);
    std::vector<std::string> names{"w"};
    const Tensor w = random_tensor(c.dtype, {c.k, c.n}, 21);
    std::map<std::string, Tensor> gpu_weights{{"w", w}};
    if (tail == "bias" || tail == "relu") {
      gpu_weights["b"] = random_tensor(c.dtype, {c.n}, 22);
      names.push_back("b");
    }
    const bool gemv = c.m <= kGemvMaxRows;
    // The weight the FP8 bytes and scales stand for, as a [k, n] float32 tensor.
    std::map<std::string, Tensor> cpu_weights = gpu_weights;
    if (gemv) {
      const Tensor q = cuda::fp8_rows(w);
      const auto* bytes = static_cast<const uint8_t*>(q.raw_data());
      const int64_t scales_at = (c.n * c.k + 15) / 16 * 16;
      Tensor deq = Tensor::zeros(DType::Float32, {c.k, c.n});
      for (int64_t i = 0; i < c.n; ++i) {
        float scale = 0;
        std::memcpy(&scale, bytes + scales_at + 4 * i, 4);
        for (int64_t j = 0; j < c.k; ++j)
          deq.data<float>()[j * c.n + i] = cuda::e4m3_to_float(bytes[i * c.k + j]) * scale;
      }
      cpu_weights["w"] = deq;
    }
    for (auto& [name, t] : cpu_weights) t = t.to(DType::Float32);
    auto plan = make_cuda_backend()->build(network_from(text, 1, names), {.precision = Precision::kFp8w});
    ASSERT_TRUE(plan.has_value()) << at << ": " << plan.status().message();
    EXPECT_EQ(std::string(plan->begin(), plan->end()).find("gemv_fp8") != std::string::npos, gemv) << at;
    Loaded gpu, cpu;
    ASSERT_NO_FATAL_FAILURE(build_and_load(make_cuda_backend(), text, lookup(gpu_weights), gpu, names, "fp8w"));
    ASSERT_NO_FATAL_FAILURE(
        build_and_load(cpu::make_cpu_backend(), graph_text("float32"), lookup(cpu_weights), cpu, names));
    const std::vector<Tensor> in = {random_tensor(c.dtype, {c.m, c.k}, 23)};
    const std::vector<Tensor> in32 = {in[0].to(DType::Float32)};
    std::vector<Tensor> got, want;
    Status s = gpu.engine->execute(in, got);
    ASSERT_TRUE(s.is_ok()) << at << ": " << s.message();
    ASSERT_TRUE(cpu.engine->execute(in32, want).is_ok()) << at;
    ASSERT_EQ(got[0].sizes(), want[0].sizes()) << at;
    const double rel = c.dtype == DType::Float32 ? 1e-4 : (c.dtype == DType::Float16 ? 4e-3 : 2e-2);
    const double abs = c.dtype == DType::Float32 ? 1e-4 : 0.05;
    for (int64_t i = 0; i < want[0].numel(); ++i)
      ASSERT_NEAR(got[0].value_at(i), want[0].value_at(i), abs + rel * std::fabs(want[0].value_at(i)))
          << at << ", element " << i;
  }
}

// A fixture file: under the source tree this binary was built from, else
// under the working directory (a GPU machine runs it from a copy of the tree).
std::string fixture_path(const std::string& name) {
  const std::string rel = "tests/fixtures/torch2.11/" + name;
#ifdef KILN_SOURCE_DIR
  if (std::filesystem::exists(std::string(KILN_SOURCE_DIR) + "/" + rel))
    return std::string(KILN_SOURCE_DIR) + "/" + rel;
#endif
  return rel;
}

// A program loaded twice (and the compile that wrote it) shares one engine,
// and both loads give PyTorch's outputs.
TEST(CudaHotSet, TheSameProgramLoadedTwiceSharesItsEngineAndMatchesPyTorch) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const std::string model = fixture_path("resnet_basic.pt2");
  auto io = read_safetensors(fixture_path("resnet_basic.io.safetensors"));
  ASSERT_TRUE(io.has_value()) << io.status().message();
  runtime::EngineHotSet& hot = runtime::EngineHotSet::instance();
  hot.set_capacity(8);
  LoadOptions o;
  o.compile.device = "cuda";
  const auto before_compile = hot.stats();
  auto compiled = compile(model, o);
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  EXPECT_EQ(hot.stats().loaded, before_compile.loaded + 1);
  const std::string saved = ::testing::TempDir() + "kiln_hot_set_" + std::to_string(::getpid()) + ".kiln";
  ASSERT_TRUE((*compiled)->save(saved));
  const auto before = hot.stats();
  auto a = compile(saved, o);
  auto b = compile(saved, o);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(hot.stats().loaded, before.loaded) << "a second copy of the engine was loaded";
  EXPECT_EQ(hot.stats().reused, before.reused + 2);
  for (const auto& p : {*a, *b, *compiled}) {
    auto report = check_fixture(p, *io, {});
    ASSERT_TRUE(report.has_value()) << report.status().message();
    EXPECT_TRUE(report->pass()) << "max abs err " << report->max_abs();
  }
  std::remove(saved.c_str());
}
// A range of batch sizes on CUDA (static engines): padded batch buckets serve
// every size in it on CUDA engines, matching the CPU program compiled for the range.
TEST(CudaPaddedBatch, EveryBatchSizeInTheRangeRunsOnCudaAndMatchesTheCpuProgram) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const std::string model = fixture_path("resnet_basic_dynbatch.pt2");
  LoadOptions o;
  o.compile.device = "cuda";
  // The weights one bucket puts on the device, for comparison.
  o.compile.shapes = {{"x", {4, 3, 32, 32}, {4, 3, 32, 32}, {4, 3, 32, 32}}};
  const auto before_one = device_weight_copies();
  auto one = compile(model, o);
  ASSERT_TRUE(one.has_value()) << one.status().message();
  const uint64_t one_bytes = device_weight_copies().second - before_one.second;
  o.compile.shapes = {{"x", {1, 3, 32, 32}, {3, 3, 32, 32}, {7, 3, 32, 32}}};
  const auto before = device_weight_copies();
  auto gpu = compile(model, o);
  ASSERT_TRUE(gpu.has_value()) << gpu.status().message();
  ASSERT_EQ((*gpu)->method_names().size(), 5u);  // buckets 1, 2, 3, 4, 7
  // The five buckets' engines share the device copies of their weights (a
  // bucket may still want one in another form, e.g. a transposed matrix).
  const uint64_t five_bytes = device_weight_copies().second - before.second;
  EXPECT_GT(one_bytes, 0u);
  EXPECT_LT(five_bytes, 2 * one_bytes) << "each bucket put its own weights on the device";
  for (const std::string& name : (*gpu)->method_names()) {
    int engines = 0, fallback_nodes = 0;
    for (const SegmentInfo& s : (*gpu)->method(name)->segments()) {
      engines += s.engine && s.backend == "cuda";
      if (!s.engine) fallback_nodes += s.num_nodes;
    }
    EXPECT_EQ(engines, 1) << name;
    EXPECT_EQ(fallback_nodes, 0) << name;
  }
  LoadOptions c = o;
  c.compile.device = "cpu";
  auto cpu = compile(model, c);
  ASSERT_TRUE(cpu.has_value()) << cpu.status().message();
  ASSERT_EQ((*cpu)->method_names().size(), 1u);
  Session on_gpu(*gpu), on_cpu(*cpu);
  for (int64_t n = 1; n <= 7; ++n) {
    const Tensor x = random_tensor(DType::Float32, {n, 3, 32, 32}, static_cast<uint32_t>(100 + n));
    auto got = on_gpu.run({x});
    ASSERT_TRUE(got.has_value()) << "batch " << n << ": " << got.status().message();
    auto want = on_cpu.run({x});
    ASSERT_TRUE(want.has_value()) << want.status().message();
    ASSERT_EQ((*got)[0].sizes(), (*want)[0].sizes()) << "batch " << n;
    double worst = 0;
    for (int64_t i = 0; i < (*want)[0].numel(); ++i) {
      const double w = (*want)[0].value_at(i), g = (*got)[0].value_at(i);
      worst = std::max(worst, std::fabs(g - w) / (1e-4 + 1e-4 * std::fabs(w)));
    }
    EXPECT_LE(worst, 1.0) << "batch " << n;

    // The same call on device memory: padded and cut on the device, into
    // memory of the size output_types gives (the caller's rows).
    auto types = on_gpu.output_types({x});
    ASSERT_TRUE(types.has_value()) << types.status().message();
    ASSERT_EQ(types->size(), 1u);
    ASSERT_EQ((*types)[0].sizes, (*want)[0].sizes()) << "batch " << n;
    auto din = DeviceBuffer::allocate(x.nbytes());
    auto dout = DeviceBuffer::allocate((*want)[0].nbytes());
    ASSERT_TRUE(din.has_value() && dout.has_value());
    ASSERT_EQ(cudaMemcpy(din->get(), x.raw_data(), x.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    const Tensor dx = device_tensor(*din, DType::Float32, x.sizes());
    RunOptions into;
    into.outputs = {device_tensor(*dout, DType::Float32, (*types)[0].sizes)};
    auto st = on_gpu.run({dx}, into);
    ASSERT_TRUE(st.has_value()) << "batch " << n << ": " << st.status().message();
    ASSERT_EQ(st->size(), 1u);
    EXPECT_EQ((*st)[0].raw_data(), dout->get()) << "the result is the caller's memory";
    ASSERT_TRUE(on_gpu.synchronize().is_ok());
    Tensor on_device = Tensor::zeros(DType::Float32, (*types)[0].sizes);
    ASSERT_EQ(cudaMemcpy(on_device.raw_data(), dout->get(), on_device.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (int64_t i = 0; i < (*want)[0].numel(); ++i) {
      const double w = (*want)[0].value_at(i);
      ASSERT_NEAR(on_device.value_at(i), w, 1e-4 + 1e-4 * std::fabs(w)) << "batch " << n << " on device, element " << i;
    }
    // Memory for the bucket's rows instead of the caller's is refused before anything runs.
    if (n == 5) {
      auto big = DeviceBuffer::allocate(7 * 10 * sizeof(float));
      ASSERT_TRUE(big.has_value());
      RunOptions bucket_rows;
      bucket_rows.outputs = {device_tensor(*big, DType::Float32, {7, 10})};
      auto wrong = on_gpu.run({dx}, bucket_rows);
      ASSERT_FALSE(wrong.has_value());
      EXPECT_EQ(wrong.status().code(), ErrorCode::kInvalidArgument) << wrong.status().message();
    }
  }
  auto refused = on_gpu.run({random_tensor(DType::Float32, {8, 3, 32, 32}, 1)});
  EXPECT_FALSE(refused.has_value());
}
}  // namespace
}  // namespace kiln::cuda
