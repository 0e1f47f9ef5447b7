// A session of a CUDA program keeps its state on the device: buffers are
// allocated there once and engines read and write them where they lie (no
// copy of a KV cache per call); a caller's device memory bound as a buffer is
// that buffer. Checked against the outputs PyTorch recorded and against the
// CPU program. GPU only (label gpu).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_support.h"
#include "base/safetensors.h"
#include "kiln/check.h"
#include "kiln/kiln.h"
#include "runtime/device_copy.h"
#include "runtime/program_impl.h"
#include "support/tensor_diff.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using kiln::testing::max_abs_diff;

std::string fixture(const std::string& name) {
  const fs::path built = fs::path(KILN_SOURCE_DIR) / "tests/fixtures/torch2.11" / name;
  return fs::exists(built) ? built.string() : "tests/fixtures/torch2.11/" + name;
}

std::shared_ptr<const Program> compiled(const std::string& model, const std::string& device) {
  LoadOptions o;
  o.compile.device = device;
  auto p = compile(fixture(model), o);
  EXPECT_TRUE(p.has_value()) << p.status().message();
  return p.has_value() ? *p : nullptr;
}

// The decoder's KV caches and counters live on the GPU from the session's
// start, stay in the same device memory across calls, and every call and the
// final state give what PyTorch recorded.
TEST(CudaSession, StateLivesOnTheDeviceAndGivesPyTorchsOutputs) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* model : {"llama_generate.pt2", "kv_cache_attention.pt2", "cache_writes.pt2", "conv_state.pt2"}) {
    SCOPED_TRACE(model);
    auto program = compiled(model, "cuda");
    ASSERT_NE(program, nullptr);
    Session session(program);
    EXPECT_EQ(session.state_device(), Device::cuda());
    std::map<std::string, const void*> where;
    for (const TensorSpec& b : program->buffers()) {
      auto t = session.buffer(b.name);
      ASSERT_TRUE(t.has_value()) << t.status().message();
      EXPECT_EQ(t->device(), Device::cuda()) << b.name;
      where[b.name] = t->raw_data();
    }
    std::string io_name = model;
    io_name.replace(io_name.find(".pt2"), 4, ".io.safetensors");
    auto io = read_safetensors(fixture(io_name));
    ASSERT_TRUE(io.has_value()) << io.status().message();
    auto report = check_fixture(program, *io, {1e-3, 1e-4});
    ASSERT_TRUE(report.has_value()) << report.status().message();
    for (const auto& t : report->tensors) EXPECT_TRUE(t.pass) << t.name << ": " << t.problem << " " << t.max_abs;
    // check_fixture ran its own session; this one runs a call of its own too.
    std::vector<Tensor> inputs;
    for (size_t i = 0;; ++i) {
      const std::string key = (io->find("input.0") ? "input." : "step0.input.") + std::to_string(i);
      const Tensor* t = io->find(key);
      if (!t) break;
      inputs.push_back(*t);
    }
    auto out = session.run(inputs);
    ASSERT_TRUE(out.has_value()) << out.status().message();
    for (const Tensor& t : *out) EXPECT_TRUE(t.is_cpu()) << "host inputs give host outputs";
    for (const TensorSpec& b : program->buffers()) {
      auto t = session.buffer(b.name);
      ASSERT_TRUE(t.has_value());
      EXPECT_EQ(t->raw_data(), where[b.name]) << b.name << " moved";
    }
  }
}

// Device memory the caller owns, bound as the caches: the engine writes it
// where it lies, and it holds what the CPU program's session holds after the
// same calls. Binding memory of another shape is refused.
TEST(CudaSession, CallersDeviceMemoryBoundAsTheCacheIsWrittenInPlace) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto gpu = compiled("kv_cache_attention.pt2", "cuda");
  auto cpu = compiled("kv_cache_attention.pt2", "cpu");
  ASSERT_TRUE(gpu && cpu);
  auto io = read_safetensors(fixture("kv_cache_attention.io.safetensors"));
  ASSERT_TRUE(io.has_value());
  Session on_gpu(gpu), on_cpu(cpu);
  std::map<std::string, Tensor> mine;
  for (const TensorSpec& b : gpu->buffers()) {
    auto current = on_gpu.buffer(b.name);
    ASSERT_TRUE(current.has_value());
    auto memory = cuda::DeviceBuffer::allocate(current->nbytes());
    ASSERT_TRUE(memory.has_value());
    auto holder = std::make_shared<cuda::DeviceBuffer>(std::move(*memory));
    auto storage = Storage::borrow(holder->bytes(), holder->nbytes(), holder, Device::cuda());
    Tensor t = *Tensor::from_storage(storage, current->dtype(), current->sizes(), current->strides(), 0);
    ASSERT_TRUE(copy_tensor(t, *current).is_ok());
    ASSERT_TRUE(on_gpu.bind_buffer(b.name, t).is_ok());
    mine[b.name] = t;
    Tensor wrong = *Tensor::from_storage(storage, current->dtype(), {1}, {1}, 0);
    EXPECT_FALSE(on_gpu.bind_buffer(b.name, wrong).is_ok());
  }
  for (int step = 0;; ++step) {
    std::vector<Tensor> inputs;
    for (size_t i = 0;; ++i) {
      const Tensor* t = io->find("step" + std::to_string(step) + ".input." + std::to_string(i));
      if (!t) break;
      inputs.push_back(*t);
    }
    if (inputs.empty()) break;
    auto a = on_gpu.run(inputs);
    auto b = on_cpu.run(inputs);
    ASSERT_TRUE(a.has_value() && b.has_value()) << (a ? b.status().message() : a.status().message());
    for (const auto& [name, t] : mine) {
      auto now = on_gpu.buffer(name);
      ASSERT_TRUE(now.has_value());
      EXPECT_EQ(now->raw_data(), t.raw_data()) << name << " no longer lies in the caller's memory";
      auto got = to_host(t);
      auto want = on_cpu.buffer(name);
      ASSERT_TRUE(got.has_value() && want.has_value());
      for (int64_t i = 0; i < want->numel(); ++i)
        ASSERT_NEAR(got->value_at(i), want->value_at(i), 1e-4 + 1e-4 * std::fabs(want->value_at(i)))
            << name << " after step " << step << ", element " << i;
    }
  }
  // reset() writes the initial values into the caller's memory.
  ASSERT_TRUE(on_gpu.reset().is_ok());
  for (const auto& [name, t] : mine) {
    auto got = to_host(t);
    ASSERT_TRUE(got.has_value());
    auto initial = Session(cpu).buffer(name);
    ASSERT_TRUE(initial.has_value());
    EXPECT_TRUE(got->same_bytes(*initial)) << name;
  }
}

// Device inputs give device outputs (the device of the first device input),
// equal to what host inputs give.
TEST(CudaSession, DeviceInputsGiveDeviceOutputs) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto program = compiled("resnet_basic.pt2", "cuda");
  ASSERT_NE(program, nullptr);
  auto io = read_safetensors(fixture("resnet_basic.io.safetensors"));
  ASSERT_TRUE(io.has_value());
  ASSERT_NE(io->find("input.0"), nullptr);
  const Tensor x = *io->find("input.0");
  const engine::DeviceMemory* dm = runtime::device_memory_of(Device::cuda());
  ASSERT_NE(dm, nullptr);
  auto dx = dm->empty(x.dtype(), x.sizes());
  ASSERT_TRUE(dx.has_value());
  ASSERT_TRUE(copy_tensor(*dx, x).is_ok());
  Session s(program);
  auto on_host = s.run({x});
  auto on_device = s.run({*dx});
  ASSERT_TRUE(on_host.has_value() && on_device.has_value());
  ASSERT_EQ(on_device->size(), 1u);
  EXPECT_EQ((*on_device)[0].device(), Device::cuda());
  auto back = to_host((*on_device)[0]);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(back->same_bytes((*on_host)[0]));
}

// RunOptions::outputs on the device: one engine writes the caller's memory
// directly; a program with a fallback segment, one with state and one whose
// output sizes the data sets write theirs through the general path. Each
// gives the bits of a call without memory, and the result is the memory given.
TEST(CudaSession, RunWritesIntoTheCallersDeviceMemory) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const engine::DeviceMemory* dm = runtime::device_memory_of(Device::cuda());
  ASSERT_NE(dm, nullptr);
  auto on_device = [&](const Tensor& t) {
    auto d = to_device(t, Device::cuda());
    EXPECT_TRUE(d.has_value()) << d.status().message();
    return d.has_value() ? *d : Tensor();
  };
  LoadOptions split;
  split.compile.device = "cuda";
  split.compile.min_block_size = 1;
  split.compile.fallback_ops = {"relu"};
  struct Case {
    std::string name;
    std::shared_ptr<const Program> program;
    std::string io, input;
  };
  auto with_fallback = compile(fixture("resnet_basic.pt2"), split);
  ASSERT_TRUE(with_fallback.has_value()) << with_fallback.status().message();
  const std::vector<Case> cases = {
      {"one engine", compiled("resnet_basic.pt2", "cuda"), "resnet_basic.io.safetensors", "input.0"},
      {"a fallback segment", *with_fallback, "resnet_basic.io.safetensors", "input.0"},
      {"state", compiled("conv_state.pt2", "cuda"), "conv_state.io.safetensors", "step0.input.0"},
      {"sizes set by data", compiled("nonzero_middle.pt2", "cuda"), "nonzero_middle.io.safetensors", "input.0"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_NE(c.program, nullptr);
    auto io = read_safetensors(fixture(c.io));
    ASSERT_TRUE(io.has_value());
    const Tensor x = on_device(*io->find(c.input));
    Session plain(c.program), given(c.program);
    auto want = plain.run({x});
    ASSERT_TRUE(want.has_value()) << want.status().message();
    RunOptions into;
    for (const Tensor& w : *want) {
      auto m = dm->empty(w.dtype(), w.sizes());
      ASSERT_TRUE(m.has_value());
      into.outputs.push_back(*m);
    }
    auto got = given.run({x}, into);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    ASSERT_EQ(got->size(), want->size());
    for (size_t k = 0; k < want->size(); ++k) {
      EXPECT_EQ((*got)[k].raw_data(), into.outputs[k].raw_data()) << "output " << k;
      auto a = to_host(into.outputs[k]);
      auto b = to_host((*want)[k]);
      ASSERT_TRUE(a.has_value() && b.has_value());
      EXPECT_TRUE(a->same_bytes(*b)) << "output " << k;
    }
    for (const TensorSpec& buffer : c.program->buffers()) {
      auto a = given.buffer(buffer.name);
      auto b = plain.buffer(buffer.name);
      ASSERT_TRUE(a.has_value() && b.has_value());
      EXPECT_EQ(a->device(), Device::cuda()) << buffer.name;
      EXPECT_TRUE(to_host(*a)->same_bytes(*to_host(*b))) << buffer.name;
    }
  }
}

// A data-dependent op between CUDA engines: the mask is made in the first
// engine, nonzero runs on the device (its row count, 8 bytes, is all that
// crosses to the host), and the engine after it, built once for counts 1..12,
// reads the selected rows where they lie. The partition report says so; the
// program gives PyTorch's outputs, device inputs give device outputs with the
// bits of a host call, every count (0 and 12 included) gives what the CPU
// program gives, and the CPU program moves nothing.
TEST(CudaSession, ADataDependentOpBetweenEnginesKeepsItsValuesOnTheDevice) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto program = compiled("nonzero_middle.pt2", "cuda");
  ASSERT_NE(program, nullptr);
  const std::string report = program->partition_report();
  int engines = 0;
  for (const SegmentInfo& seg : program->segments()) {
    if (seg.engine) {
      ++engines;
      continue;
    }
    for (const auto& [op, n] : seg.ops)  // what stays outside the engines: nonzero and size bookkeeping
      EXPECT_TRUE(op.find("nonzero") != std::string::npos || op.find("sym_size") != std::string::npos ||
                  op.find("assert") != std::string::npos || op.find("_operator.") != std::string::npos)
          << op << "\n"
          << report;
  }
  EXPECT_EQ(engines, 2) << report;
  EXPECT_NE(report.find("the row count of %nonzero int64 device -> host, from aten.nonzero.default 'nonzero'"),
            std::string::npos)
      << report;
  // %x goes in; the count; %linear_3 and %squeeze come back to the caller.
  EXPECT_NE(report.find("values that cross between the device and the host in a call with host inputs: 4,"),
            std::string::npos)
      << report;
  EXPECT_EQ(report.find("(fallback)"), std::string::npos) << report;
  auto io = read_safetensors(fixture("nonzero_middle.io.safetensors"));
  ASSERT_TRUE(io.has_value());
  auto checked = check_fixture(program, *io, {1e-4, 1e-5});
  ASSERT_TRUE(checked.has_value()) << checked.status().message();
  EXPECT_TRUE(checked->pass());

  auto cpu = compiled("nonzero_middle.pt2", "cpu");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->partition_report().find("cross"), std::string::npos);
  const engine::DeviceMemory* dm = runtime::device_memory_of(Device::cuda());
  ASSERT_NE(dm, nullptr);
  // zeros keep no row, ones every row, the fixture's input 7, random ones others.
  Tensor ones = Tensor::zeros(DType::Float32, {12, 16});
  std::fill(ones.data<float>(), ones.data<float>() + ones.numel(), 1.0f);
  std::vector<Tensor> inputs{Tensor::zeros(DType::Float32, {12, 16}), ones, *io->find("input.0")};
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  for (int k = 0; k < 4; ++k) {
    Tensor x = Tensor::zeros(DType::Float32, {12, 16});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = normal(rng);
    inputs.push_back(x);
  }
  std::set<int64_t> counts;
  Session on_cuda(program), on_cpu(cpu);
  for (const Tensor& x : inputs) {
    auto want = on_cpu.run({x});
    auto host = on_cuda.run({x});
    auto dx = dm->empty(x.dtype(), x.sizes());
    ASSERT_TRUE(dx.has_value());
    ASSERT_TRUE(copy_tensor(*dx, x).is_ok());
    auto device = on_cuda.run({*dx});
    ASSERT_TRUE(want.has_value() && host.has_value() && device.has_value());
    ASSERT_EQ(want->size(), 2u);
    counts.insert((*want)[1].size(0));
    for (size_t o = 0; o < 2; ++o) {
      SCOPED_TRACE("output " + std::to_string(o) + ", " + std::to_string((*want)[1].size(0)) + " rows kept");
      EXPECT_EQ((*device)[o].device(), Device::cuda());
      auto back = to_host((*device)[o]);
      ASSERT_TRUE(back.has_value());
      ASSERT_EQ(back->sizes(), (*want)[o].sizes());
      EXPECT_TRUE(back->same_bytes((*host)[o]));
      for (int64_t i = 0; i < back->numel(); ++i)
        EXPECT_NEAR(back->value_at(i), (*want)[o].value_at(i), 1e-5 + 1e-4 * std::fabs((*want)[o].value_at(i)));
    }
  }
  EXPECT_TRUE(counts.count(0) && counts.count(12) && counts.count(7)) << counts.size() << " distinct counts";
  EXPECT_GE(counts.size(), 4u);
}

// masked_select after an engine: the mask and the values are made in the
// engine, the selection runs on the device (its count crosses, 8 bytes);
// device inputs give a device output with the bits of a host call, and
// PyTorch's outputs.
TEST(CudaSession, MaskedSelectRunsOnTheDevice) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* model : {"masked_select_tail.pt2", "masked_select_tail.aten.pt2"}) {
    SCOPED_TRACE(model);
    auto program = compiled(model, "cuda");
    ASSERT_NE(program, nullptr);
    const std::string report = program->partition_report();
    EXPECT_NE(report.find("the row count of %masked_select int64 device -> host, from aten.masked_select.default"),
              std::string::npos)
        << report;
    auto io = read_safetensors(fixture("masked_select_tail.io.safetensors"));
    ASSERT_TRUE(io.has_value());
    auto checked = check_fixture(program, *io, {1e-4, 1e-5});
    ASSERT_TRUE(checked.has_value()) << checked.status().message();
    EXPECT_TRUE(checked->pass());
    const Tensor x = *io->find("input.0");
    auto dx = to_device(x, Device::cuda());
    ASSERT_TRUE(dx.has_value());
    Session s(program);
    auto host = s.run({x});
    auto device = s.run({*dx});
    ASSERT_TRUE(host.has_value() && device.has_value());
    ASSERT_EQ(device->size(), 2u);
    for (size_t o = 0; o < 2; ++o) {
      EXPECT_EQ((*device)[o].device(), Device::cuda()) << "output " << o;
      auto back = to_host((*device)[o]);
      ASSERT_TRUE(back.has_value());
      EXPECT_TRUE(back->same_bytes((*host)[o])) << "output " << o;
    }
    // Inputs far from the fixture's: other counts, the same bits on the host and the device.
    for (const float fill : {-100.0f, 100.0f}) {
      Tensor big = Tensor::zeros(DType::Float32, x.sizes());
      std::fill(big.data<float>(), big.data<float>() + big.numel(), fill);
      auto on_host = s.run({big});
      auto d = to_device(big, Device::cuda());
      ASSERT_TRUE(d.has_value());
      auto on_device = s.run({*d});
      ASSERT_TRUE(on_host.has_value() && on_device.has_value());
      auto back = to_host((*on_device)[0]);
      ASSERT_TRUE(back.has_value());
      EXPECT_TRUE(back->same_bytes((*on_host)[0])) << "fill " << fill << ": " << back->numel() << " kept";
    }
  }
}

// torch.unique between engines (of any size: --min-block-size 1, as the
// ATen dialect's front is four nodes): its operand is made in an engine,
// unique runs on the device (only its group count crosses), and the engine
// after it reads its values and counts there; PyTorch's outputs, and device
// inputs give the bits of a host call, for the fixture's ids and others.
TEST(CudaSession, UniqueRunsOnTheDevice) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* model : {"unique_middle.pt2", "unique_middle.aten.pt2"}) {
    SCOPED_TRACE(model);
    LoadOptions o;
    o.compile.device = "cuda";
    o.compile.min_block_size = 1;
    auto loaded = compile(fixture(model), o);
    ASSERT_TRUE(loaded.has_value()) << loaded.status().message();
    const std::shared_ptr<const Program> program = *loaded;
    const std::string report = program->partition_report();
    EXPECT_NE(report.find("int64 device -> host, from aten._unique2.default"), std::string::npos) << report;
    EXPECT_EQ(report.find("(fallback)"), std::string::npos) << "nothing else crosses: " << report;
    auto io = read_safetensors(fixture("unique_middle.io.safetensors"));
    ASSERT_TRUE(io.has_value());
    auto checked = check_fixture(program, *io, {1e-4, 1e-5});
    ASSERT_TRUE(checked.has_value()) << checked.status().message();
    EXPECT_TRUE(checked->pass());
    const Tensor ids = *io->find("input.0");
    Session s(program);
    std::vector<Tensor> cases = {ids, Tensor::zeros(DType::Int64, ids.sizes())};
    Tensor spread = Tensor::zeros(DType::Int64, ids.sizes());
    for (int64_t i = 0; i < spread.numel(); ++i) spread.data<int64_t>()[i] = (i * 7) % 9;
    cases.push_back(spread);
    for (const Tensor& x : cases) {
      auto dx = to_device(x, Device::cuda());
      ASSERT_TRUE(dx.has_value());
      auto host = s.run({x});
      auto device = s.run({*dx});
      ASSERT_TRUE(host.has_value() && device.has_value()) << (host ? device.status() : host.status()).message();
      ASSERT_EQ(device->size(), 3u);
      for (size_t o = 0; o < 3; ++o) {
        EXPECT_EQ((*device)[o].device(), Device::cuda()) << "output " << o;
        auto back = to_host((*device)[o]);
        ASSERT_TRUE(back.has_value());
        EXPECT_TRUE(back->same_bytes((*host)[o])) << "output " << o << ", " << back->type_string();
      }
    }
  }
}

// The nonzero fixture with engines of any size (--min-block-size 1): the
// mask is made in an engine and nonzero runs on the device (its row count
// crosses); x[mask] runs where x lies: on the host in a call with host
// inputs (the report's case), on the device (masked_rows) when x is a device
// tensor, with the same bits; PyTorch's outputs.
TEST(CudaSession, BooleanMaskIndexingRunsOnTheDevice) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  LoadOptions o;
  o.compile.device = "cuda";
  o.compile.min_block_size = 1;
  auto program = compile(fixture("nonzero.pt2"), o);
  ASSERT_TRUE(program.has_value()) << program.status().message();
  const std::string report = (*program)->partition_report();
  EXPECT_NE(report.find("the row count of %nonzero int64 device -> host, from aten.nonzero.default"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("%index float32[u0] host -> device, read by segment"), std::string::npos) << report;
  auto io = read_safetensors(fixture("nonzero.io.safetensors"));
  ASSERT_TRUE(io.has_value());
  auto checked = check_fixture(*program, *io, {1e-4, 1e-5});
  ASSERT_TRUE(checked.has_value()) << checked.status().message();
  EXPECT_TRUE(checked->pass());
  // From device memory: the same bits as from the host, outputs on the device.
  const Tensor x = *io->find("input.0");
  auto dx = to_device(x, Device::cuda());
  ASSERT_TRUE(dx.has_value());
  Session s(*program);
  auto host = s.run({x});
  auto device = s.run({*dx});
  ASSERT_TRUE(host.has_value() && device.has_value());
  ASSERT_EQ(host->size(), device->size());
  for (size_t i = 0; i < host->size(); ++i) {
    auto back = to_host((*device)[i]);
    ASSERT_TRUE(back.has_value());
    EXPECT_TRUE(back->same_bytes((*host)[i])) << "output " << i;
  }
}

// Every buffer of `program` holds the same bytes in sessions `a` and `b`.
void expect_same_buffers(const Program& program, const Session& a, const Session& b, const std::string& what) {
  for (const TensorSpec& t : program.buffers()) {
    auto x = a.buffer(t.name), y = b.buffer(t.name);
    ASSERT_TRUE(x.has_value() && y.has_value()) << what;
    auto hx = to_host(*x), hy = to_host(*y);
    ASSERT_TRUE(hx.has_value() && hy.has_value()) << what;
    EXPECT_TRUE(hx->same_bytes(*hy)) << what << " " << t.name;
  }
}

// The (token ids, cache positions) of every recorded call of llama_generate.
std::vector<std::pair<Tensor, Tensor>> recorded_steps(const SafetensorsFile& io) {
  std::vector<std::pair<Tensor, Tensor>> steps;
  for (int k = 0; io.find("step" + std::to_string(k) + ".input.0"); ++k)
    steps.emplace_back(*io.find("step" + std::to_string(k) + ".input.0"),
                       *io.find("step" + std::to_string(k) + ".input.1"));
  return steps;
}

// The greedy tokens PyTorch produced for llama_generate: the inputs of the
// steps after the prompt, then the argmax of the last step's logits.
std::vector<int64_t> pytorch_greedy_tokens(const SafetensorsFile& io, size_t prompt_len) {
  std::vector<int64_t> tokens;
  int k = 0;
  for (; io.find("step" + std::to_string(k) + ".input.0"); ++k)
    if (static_cast<size_t>(k) >= prompt_len)
      tokens.push_back(io.find("step" + std::to_string(k) + ".input.0")->item_int());
  const Tensor* last = io.find("step" + std::to_string(k - 1) + ".output.0");
  EXPECT_NE(last, nullptr);
  if (last) {
    int64_t best = 0;
    for (int64_t v = 1; v < last->size(2); ++v)
      if (last->value_at(v) > last->value_at(best)) best = v;
    tokens.push_back(best);
  }
  return tokens;
}

// kiln::generate on a CUDA session chooses every token on the device and
// gives PyTorch's greedy tokens; it stops at the end-of-sequence token.
TEST(CudaSession, GenerateOnTheDeviceGivesPyTorchsTokens) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto io = read_safetensors(fixture("llama_generate.io.safetensors"));
  ASSERT_TRUE(io.has_value());
  const std::vector<int64_t> want = pytorch_greedy_tokens(*io, 3);
  ASSERT_GE(want.size(), 16u);
  for (const char* model : {"llama_generate.pt2", "llama_generate.aten.pt2"}) {
    SCOPED_TRACE(model);
    auto program = compiled(model, "cuda");
    ASSERT_NE(program, nullptr);
    Session session(program);
    GenerateOptions o;
    o.max_new_tokens = static_cast<int64_t>(want.size());
    std::vector<int64_t> seen;
    o.on_token = [&](int64_t t) { seen.push_back(t); };
    auto g = generate(session, {7, 42, 13}, o);
    ASSERT_TRUE(g.has_value()) << g.status().message();
    EXPECT_TRUE(g->on_device);
    EXPECT_EQ(g->tokens, want);
    EXPECT_EQ(seen, want);
    EXPECT_EQ(g->token_ms.size(), want.size() - 1);
    // Again from the start, stopping at the third token.
    ASSERT_TRUE(session.reset().is_ok());
    o.eos_id = want[2];
    o.on_token = nullptr;
    g = generate(session, {7, 42, 13}, o);
    ASSERT_TRUE(g.has_value()) << g.status().message();
    EXPECT_EQ(g->tokens, std::vector<int64_t>(want.begin(), want.begin() + 3));
  }
}

// A prefill exported with a dynamic prompt length (1..16) beside the decode
// step, one program on CUDA: the prefill is engines only (one build serves
// every length), `generate` takes each prompt in one prefill call, and the
// tokens are PyTorch's. A prompt that is PyTorch's greedy sequence cut after
// k tokens must continue with the rest of that sequence.
TEST(CudaSession, GenerateWithAPrefillOverARangeOfLengthsGivesPyTorchsTokens) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto io = read_safetensors(fixture("llama_generate.io.safetensors"));
  ASSERT_TRUE(io.has_value());
  const std::vector<int64_t> greedy = pytorch_greedy_tokens(*io, 3);
  ASSERT_GE(greedy.size(), 16u);
  std::vector<int64_t> sequence{7, 42, 13};
  sequence.insert(sequence.end(), greedy.begin(), greedy.end());
  for (const char* dialect : {"", ".aten"}) {
    SCOPED_TRACE(dialect);
    LoadOptions o;
    o.compile.device = "cuda";
    auto p = compile_methods({{"prefill", fixture(std::string("llama_prefill_dyn") + dialect + ".pt2")},
                              {"decode", fixture(std::string("llama_generate") + dialect + ".pt2")}},
                             o);
    ASSERT_TRUE(p.has_value()) << p.status().message();
    const Program* prefill = (*p)->method("prefill");
    ASSERT_NE(prefill, nullptr);
    size_t weight_bytes = 0;
    for (const auto& [name, t] : program_impl(*prefill).module().weights) weight_bytes += t.nbytes();
    for (const SegmentInfo& seg : prefill->segments()) {
      EXPECT_TRUE(seg.engine) << prefill->partition_report();
      // Its device memory, reported from the plan: an arena for the longest
      // prompt (16 tokens of float32 logits at least), weights at most the program's.
      EXPECT_GE(seg.arena_bytes, 16 * 100 * 4);
      EXPECT_GT(seg.workspace_bytes, 0);
      EXPECT_GT(seg.weight_bytes, 0);
      EXPECT_LE(seg.weight_bytes, static_cast<int64_t>(weight_bytes));
    }
    Session session(*p);
    for (size_t prompt_len : {size_t{3}, size_t{12}, size_t{16}}) {
      SCOPED_TRACE("prompt of " + std::to_string(prompt_len) + " tokens");
      ASSERT_TRUE(session.reset().is_ok());
      const std::vector<int64_t> prompt(sequence.begin(), sequence.begin() + static_cast<std::ptrdiff_t>(prompt_len));
      const std::vector<int64_t> want(sequence.begin() + static_cast<std::ptrdiff_t>(prompt_len), sequence.end());
      GenerateOptions g;
      g.max_new_tokens = static_cast<int64_t>(want.size());
      auto out = generate(session, prompt, g);
      ASSERT_TRUE(out.has_value()) << out.status().message();
      EXPECT_EQ(out->prompt_method, "prefill");
      EXPECT_TRUE(out->on_device);
      EXPECT_EQ(out->tokens, want);
    }
  }
}

// A prefill over a range of prompt lengths writes its KV caches in place,
// bound where the session keeps them, so the graphs that loading captures for
// calls over the arena's own slots would never be replayed: loading captures
// none. A length's first call launches its steps one by one; its second does
// too and asks for its graph, captured on a thread of the engine's own (no
// call waits for a capture); once captured, its third call replays it. All
// three give the same bits, and the CPU program's logits.
TEST(CudaSession, APrefillsGraphIsCapturedOffTheCallsPathAfterASizeRecursAndReplayedWithTheSameBits) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const cuda::RunTimeWork before = cuda::run_time_work();
  auto gpu = compiled("llama_prefill_dyn.pt2", "cuda");
  const cuda::RunTimeWork loaded = cuda::run_time_work();
  EXPECT_EQ(loaded.graphs_captured, before.graphs_captured) << "graphs captured at load";
  auto cpu = compiled("llama_prefill_dyn.pt2", "cpu");
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(cpu, nullptr);
  auto prompt = [](int64_t n) {
    Tensor ids = Tensor::zeros(DType::Int64, {1, n}), pos = Tensor::zeros(DType::Int64, {n});
    for (int64_t i = 0; i < n; ++i) {
      ids.data<int64_t>()[i] = (7 * i + 3) % 100;
      pos.data<int64_t>()[i] = i;
    }
    return std::vector<Tensor>{ids, pos};
  };
  // The capturer's thread counts a graph once a call can take it: wait (at
  // most 30 s) until `want` graphs were captured since the load.
  auto captured_since_load = [&](uint64_t want) {
    for (int i = 0; i < 30000 && cuda::run_time_work().graphs_captured - loaded.graphs_captured < want; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return cuda::run_time_work().graphs_captured - loaded.graphs_captured;
  };
  Session session(gpu), reference(cpu);
  std::map<int64_t, std::vector<Tensor>> logits;
  for (int64_t n : {5, 11, 5, 11, 5, 11}) {
    ASSERT_TRUE(session.reset().is_ok());
    auto out = session.run(prompt(n));
    ASSERT_TRUE(out.has_value()) << out.status().message();
    logits[n].push_back((*out)[0]);
    // One graph per length, asked for by its second call.
    const uint64_t want = (logits[5].size() >= 2) + (logits[11].size() >= 2);
    EXPECT_EQ(captured_since_load(want), want) << "length " << n << ", call " << logits[n].size();
  }
  for (int64_t n : {5, 11}) {
    SCOPED_TRACE("length " + std::to_string(n));
    ASSERT_TRUE(reference.reset().is_ok());
    auto want = reference.run(prompt(n));
    ASSERT_TRUE(want.has_value()) << want.status().message();
    EXPECT_LE(max_abs_diff(logits[n][0], (*want)[0]), 1e-3);
    EXPECT_TRUE(logits[n][1].same_bytes(logits[n][0])) << "launched one by one again";
    EXPECT_TRUE(logits[n][2].same_bytes(logits[n][0])) << "the captured graph replayed";
  }
}

// Calls on device inputs are only enqueued (no wait): a run of them, each
// token fed from device memory, gives the bits of the same calls on host
// inputs, and the buffers end where host calls leave them.
TEST(CudaSession, AsynchronousDeviceCallsGiveTheBitsOfHostCalls) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto io = read_safetensors(fixture("llama_generate.io.safetensors"));
  ASSERT_TRUE(io.has_value());
  auto program = compiled("llama_generate.pt2", "cuda");
  ASSERT_NE(program, nullptr);
  const engine::DeviceMemory* dm = runtime::device_memory_of(Device::cuda());
  ASSERT_NE(dm, nullptr);
  Session on_host(program), on_device(program);
  std::vector<Tensor> device_logits, host_logits;
  for (const auto& [ids, pos] : recorded_steps(*io)) {
    auto h = on_host.run({ids, pos});
    ASSERT_TRUE(h.has_value()) << h.status().message();
    host_logits.push_back((*h)[0]);
    // Fresh device tensors each call, dropped right after it is enqueued.
    auto d_ids = dm->empty(ids.dtype(), ids.sizes());
    auto d_pos = dm->empty(pos.dtype(), pos.sizes());
    ASSERT_TRUE(d_ids.has_value() && d_pos.has_value());
    ASSERT_TRUE(copy_tensor(*d_ids, ids).is_ok() && copy_tensor(*d_pos, pos).is_ok());
    auto d = on_device.run({*d_ids, *d_pos});
    ASSERT_TRUE(d.has_value()) << d.status().message();
    ASSERT_EQ((*d)[0].device(), Device::cuda());
    device_logits.push_back((*d)[0]);
  }
  ASSERT_TRUE(on_device.synchronize().is_ok());
  ASSERT_GE(device_logits.size(), 20u);
  for (size_t k = 0; k < device_logits.size(); ++k) {
    auto back = to_host(device_logits[k]);
    ASSERT_TRUE(back.has_value());
    EXPECT_TRUE(back->same_bytes(host_logits[k])) << "step " << k;
  }
  expect_same_buffers(*program, on_host, on_device, "after the calls");
}

// A token id out of the vocabulary, given in device memory: the call is only
// enqueued, so the embedding's index check is reported by synchronize(),
// naming the layer; after reset() the session gives what a fresh one gives.
TEST(CudaSession, ADeviceSideIndexErrorIsReportedLaterAndResetRecovers) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto io = read_safetensors(fixture("llama_generate.io.safetensors"));
  ASSERT_TRUE(io.has_value());
  auto program = compiled("llama_generate.pt2", "cuda");
  ASSERT_NE(program, nullptr);
  const engine::DeviceMemory* dm = runtime::device_memory_of(Device::cuda());
  ASSERT_NE(dm, nullptr);
  auto device_copy = [&](const Tensor& t) {
    auto d = dm->empty(t.dtype(), t.sizes());
    EXPECT_TRUE(d.has_value() && copy_tensor(*d, t).is_ok());
    return *d;
  };
  const Tensor ids = *io->find("step0.input.0"), pos = *io->find("step0.input.1");
  Tensor bad = ids.clone();
  bad.data<int64_t>()[0] = 100000;
  Session session(program);
  auto r = session.run({device_copy(bad), device_copy(pos)});
  ASSERT_TRUE(r.has_value()) << "enqueued without a wait: " << r.status().message();
  Status st = session.synchronize();
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("out of range"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("layer '"), std::string::npos) << st.message();
  EXPECT_TRUE(session.synchronize().is_ok()) << "reported once";
  // On host inputs the same call fails at once.
  auto now = session.run({bad, pos});
  ASSERT_FALSE(now.has_value());
  EXPECT_NE(now.status().message().find("out of range"), std::string::npos) << now.status().message();
  ASSERT_TRUE(session.reset().is_ok());
  Session fresh(program);
  auto a = session.run({ids, pos});
  auto b = fresh.run({ids, pos});
  ASSERT_TRUE(a.has_value() && b.has_value()) << (a ? b.status() : a.status()).message();
  EXPECT_TRUE((*a)[0].same_bytes((*b)[0]));
}

// Eight sessions of one CUDA program on eight threads, each on a stream of
// its own with its inputs in device memory allocated on that stream: every
// thread's logits and final buffers have the bits of a serial session fed
// host inputs. Each extra session holds only its state on the device (the
// engines, their arenas and weights are shared); the test prints both.
TEST(CudaSession, EightThreadsOnTheirOwnStreamsGiveTheBitsOfSerialCalls) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto io = read_safetensors(fixture("llama_generate.io.safetensors"));
  ASSERT_TRUE(io.has_value());
  auto program = compiled("llama_generate.pt2", "cuda");
  ASSERT_NE(program, nullptr);
  const engine::DeviceMemory* dm = runtime::device_memory_of(Device::cuda());
  ASSERT_NE(dm, nullptr);
  const std::vector<std::pair<Tensor, Tensor>> steps = recorded_steps(*io);
  ASSERT_GE(steps.size(), 20u);
  Session serial(program);
  std::vector<Tensor> want;
  for (const auto& [ids, pos] : steps) {
    auto r = serial.run({ids, pos});
    ASSERT_TRUE(r.has_value()) << r.status().message();
    want.push_back((*r)[0]);
  }
  size_t free_before = 0, free_after = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  constexpr int kThreads = 8;
  std::vector<std::unique_ptr<Session>> sessions;
  for (int t = 0; t < kThreads; ++t) sessions.push_back(std::make_unique<Session>(program));
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  int64_t state_bytes = 0;
  for (const TensorSpec& b : program->buffers()) {
    auto t = sessions[0]->buffer(b.name);
    ASSERT_TRUE(t.has_value());
    state_bytes += static_cast<int64_t>(t->nbytes());
  }
  std::printf("kiln: device memory per extra session: state %lld bytes; cudaMemGetInfo moved %lld bytes for %d\n",
              static_cast<long long>(state_bytes),
              static_cast<long long>(free_before) - static_cast<long long>(free_after), kThreads);
  std::vector<std::vector<Tensor>> got(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      cudaStream_t stream = nullptr;
      if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        errors[t] = "no stream";
        return;
      }
      for (int round = 0; round < 3 && errors[t].empty(); ++round) {
        if (round > 0 && !sessions[t]->reset().is_ok()) errors[t] = "reset failed";
        got[t].clear();
        for (const auto& [ids, pos] : steps) {
          auto d_ids = dm->empty(ids.dtype(), ids.sizes(), stream);
          auto d_pos = dm->empty(pos.dtype(), pos.sizes(), stream);
          if (!d_ids || !d_pos ||
              !dm->copy_all(std::vector<Tensor>{*d_ids, *d_pos}, std::vector<Tensor>{ids, pos}, stream).is_ok()) {
            errors[t] = "inputs";
            break;
          }
          RunOptions o;
          o.stream = stream;
          auto r = sessions[t]->run("forward", {*d_ids, *d_pos}, o);
          if (!r) {
            errors[t] = r.status().message();
            break;
          }
          got[t].push_back((*r)[0]);
        }
        if (Status st = sessions[t]->synchronize(); !st) errors[t] = st.message();
      }
      // The stream is left alive: the outputs allocated on it are freed in
      // its order when the test drops them, after the join.
      cudaStreamSynchronize(stream);
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
    ASSERT_EQ(got[t].size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      auto back = to_host(got[t][k]);
      ASSERT_TRUE(back.has_value());
      EXPECT_TRUE(back->same_bytes(want[k])) << "thread " << t << " step " << k;
    }
    expect_same_buffers(*program, serial, *sessions[t], "thread " + std::to_string(t));
  }
}

// Eight sessions of a program without buffers on eight threads, host tensors
// in and out, no stream given: each session's calls run on a stream of its
// own, on an engine context of their own, beside the others'. Every output
// has the bits of one session's serial calls (a range engine's at each of
// its recorded lengths in turn), and the weights stay one copy.
TEST(CudaSession, EightSessionsOfHostCallsRunSideBySideWithTheBitsOfSerialCalls) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* model : {"bert.pt2", "bert_dynseq.pt2"}) {
    SCOPED_TRACE(model);
    auto program = compiled(model, "cuda");
    ASSERT_NE(program, nullptr);
    std::string io_name = model;
    io_name.replace(io_name.find(".pt2"), 4, ".io.safetensors");
    auto io = read_safetensors(fixture(io_name));
    ASSERT_TRUE(io.has_value()) << io.status().message();
    // The recorded calls: "input.k" once, or "stepN.input.k" for each N.
    std::vector<std::vector<Tensor>> calls;
    for (int step = -1; step < 16; ++step) {
      const std::string prefix = step < 0 ? "" : "step" + std::to_string(step) + ".";
      std::vector<Tensor> inputs;
      for (size_t i = 0; i < program->inputs().size(); ++i)
        if (const Tensor* t = io->find(prefix + "input." + std::to_string(i))) inputs.push_back(*t);
      if (inputs.size() == program->inputs().size()) calls.push_back(std::move(inputs));
    }
    ASSERT_FALSE(calls.empty()) << "no recorded inputs in " << io_name;
    Session serial(program);
    std::vector<std::vector<Tensor>> want;
    for (const std::vector<Tensor>& inputs : calls) {
      auto r = serial.run(inputs);
      ASSERT_TRUE(r.has_value()) << r.status().message();
      want.push_back(std::move(*r));
    }
    const auto copies = cuda::device_weight_copies();
    constexpr int kThreads = 8;
    std::vector<std::string> errors(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        Session session(program);
        for (size_t i = 0; i < 30; ++i) {
          const size_t c = (i + static_cast<size_t>(t)) % calls.size();
          auto r = session.run(calls[c]);
          if (!r) {
            errors[t] = r.status().message();
            return;
          }
          for (size_t o = 0; o < r->size(); ++o)
            if (!(*r)[o].same_bytes(want[c][o])) {
              errors[t] = "call " + std::to_string(i) + ": output " + std::to_string(o) + " differs";
              return;
            }
        }
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
    EXPECT_EQ(cuda::device_weight_copies(), copies);
  }
}

// Eight sessions of a program whose state lives on the device (a decoder's
// KV caches, written in place, and its counters) on eight threads, host
// tensors in and out, no stream given: each session's calls run on a stream
// of its own, and return with their buffers' updates done. Every thread's
// logits, and its buffers read after the steps, have the bits of a serial
// session's.
TEST(CudaSession, EightSessionsWithStateOnTheDeviceOnHostCallsGiveTheBitsOfSerialCalls) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto io = read_safetensors(fixture("llama_generate.io.safetensors"));
  ASSERT_TRUE(io.has_value());
  auto program = compiled("llama_generate.pt2", "cuda");
  ASSERT_NE(program, nullptr);
  const std::vector<std::pair<Tensor, Tensor>> steps = recorded_steps(*io);
  ASSERT_GE(steps.size(), 20u);
  Session serial(program);
  ASSERT_FALSE(serial.state_device().is_cpu());
  std::vector<Tensor> want;
  for (const auto& [ids, pos] : steps) {
    auto r = serial.run({ids, pos});
    ASSERT_TRUE(r.has_value()) << r.status().message();
    want.push_back((*r)[0]);
  }
  constexpr int kThreads = 8;
  std::vector<std::unique_ptr<Session>> sessions;
  for (int t = 0; t < kThreads; ++t) sessions.push_back(std::make_unique<Session>(program));
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 2 && errors[t].empty(); ++round) {
        if (round > 0 && !sessions[t]->reset().is_ok()) errors[t] = "reset failed";
        for (size_t k = 0; k < steps.size() && errors[t].empty(); ++k) {
          auto r = sessions[t]->run({steps[k].first, steps[k].second});
          if (!r) {
            errors[t] = r.status().message();
          } else if (!(*r)[0].is_cpu() || !(*r)[0].same_bytes(want[k])) {
            errors[t] = "round " + std::to_string(round) + " step " + std::to_string(k) + ": logits differ";
          }
        }
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
    expect_same_buffers(*program, serial, *sessions[t], "thread " + std::to_string(t));
  }
}

// Asking the device for more memory than it has is an error that says so,
// and the process goes on: the next allocation and a session's call work.
TEST(CudaSession, OutOfDeviceMemoryIsAClearErrorAndTheProcessGoesOn) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const engine::DeviceMemory* dm = runtime::device_memory_of(Device::cuda());
  ASSERT_NE(dm, nullptr);
  auto huge = dm->empty(DType::Float32, {int64_t{1} << 40});  // 4 TiB
  ASSERT_FALSE(huge.has_value());
  EXPECT_NE(huge.status().message().find("cannot allocate"), std::string::npos) << huge.status().message();
  auto small = dm->empty(DType::Float32, {1024});
  ASSERT_TRUE(small.has_value()) << small.status().message();
  auto program = compiled("llama_generate.pt2", "cuda");
  ASSERT_NE(program, nullptr);
  auto io = read_safetensors(fixture("llama_generate.io.safetensors"));
  ASSERT_TRUE(io.has_value());
  Session s(program);
  auto r = s.run({*io->find("step0.input.0"), *io->find("step0.input.1")});
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ((*r)[0].sizes(), io->find("step0.output.0")->sizes());
}

// resnet_basic_dynbatch built for CUDA with batches 1..max (opt 4), and a
// check that a session's call on its step2 batch gives PyTorch's outputs.
Expected<std::shared_ptr<const Program>> dynbatch_range(int64_t max) {
  LoadOptions o;
  o.compile.device = "cuda";
  o.compile.batch_buckets = BatchBuckets::kOff;
  o.compile.shapes.push_back({"x", {1, 3, 32, 32}, {4, 3, 32, 32}, {max, 3, 32, 32}});
  return compile(fixture("resnet_basic_dynbatch.pt2"), o);
}

void expect_dynbatch_call(Session& session, const std::string& when) {
  auto io = read_safetensors(fixture("resnet_basic_dynbatch.io.safetensors"));
  ASSERT_TRUE(io.has_value());
  const Tensor* x = io->find("step2.input.0");
  const Tensor* want = io->find("step2.output.0");
  ASSERT_TRUE(x && want);
  auto r = session.run({*x});
  ASSERT_TRUE(r.has_value()) << when << ": " << r.status().message();
  const Tensor got = (*r)[0].contiguous();
  ASSERT_EQ(got.sizes(), want->sizes()) << when;
  for (int64_t i = 0; i < want->numel(); ++i)
    EXPECT_NEAR(got.value_at(i), want->value_at(i), 1e-3 + 1e-3 * std::abs(want->value_at(i))) << when << " " << i;
}

// Everything but 256 MB of the device's free memory, held until destroyed.
Expected<cuda::DeviceBuffer> take_device_memory() {
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess || free_bytes <= (size_t{1} << 30))
    return invalid_argument("less than 1 GB of device memory free");
  return cuda::DeviceBuffer::allocate(free_bytes - (size_t{256} << 20));
}

// With the device's memory nearly all taken, a range engine whose
// activations need more is refused while it is built, within seconds, naming
// the bytes needed and free; a session made before runs on, and once the
// memory is back the same compile succeeds.
TEST(CudaSession, AnEngineTheFreeDeviceMemoryCannotHoldIsRefusedNamingTheBytesAndTheProcessGoesOn) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto small = dynbatch_range(16);
  ASSERT_TRUE(small.has_value()) << small.status().message();
  Session session(*small);
  expect_dynbatch_call(session, "before");

  // 50000 images need about 1 GB of activations.
  auto ballast = take_device_memory();
  ASSERT_TRUE(ballast.has_value()) << ballast.status().message();
  auto refused = dynbatch_range(50000);
  ASSERT_FALSE(refused.has_value());
  const std::string m = refused.status().message();
  EXPECT_NE(m.find("out of device memory"), std::string::npos) << m;
  EXPECT_NE(m.find("bytes needed"), std::string::npos) << m;
  EXPECT_NE(m.find("free of"), std::string::npos) << m;
  expect_dynbatch_call(session, "with the device full");

  *ballast = cuda::DeviceBuffer();
  auto large = dynbatch_range(50000);
  ASSERT_TRUE(large.has_value()) << large.status().message();
  Session again(*large);
  expect_dynbatch_call(again, "after");
}

// A traced call from device tensors: the call, its engine and each of the
// engine's kernels and library calls on the device's track (timed by the
// device, inside the engine's slice), with the outputs of an untraced call.
TEST(CudaSession, ATracedCallTimesEachStepOnTheDevice) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto program = compiled("resnet_basic.pt2", "cuda");
  ASSERT_NE(program, nullptr);
  auto io = read_safetensors(fixture("resnet_basic.io.safetensors"));
  ASSERT_TRUE(io.has_value()) << io.status().message();
  auto x = to_device(*io->find("input.0"), Device::cuda());
  ASSERT_TRUE(x.has_value()) << x.status().message();
  Session session(program);
  auto plain = session.run({*x});
  ASSERT_TRUE(plain.has_value()) << plain.status().message();
  auto plain_host = to_host((*plain)[0]);
  ASSERT_TRUE(plain_host.has_value());
  Trace trace;
  RunOptions options;
  options.trace = &trace;
  auto traced = session.run({*x}, options);
  ASSERT_TRUE(traced.has_value()) << traced.status().message();
  auto traced_host = to_host((*traced)[0]);
  ASSERT_TRUE(traced_host.has_value());
  EXPECT_LT(max_abs_diff(*plain_host, *traced_host), 1e-5);
  const std::vector<Trace::Event> events = trace.events();
  ASSERT_FALSE(events.empty());
  const Trace::Event* engine = nullptr;
  for (const Trace::Event& e : events)
    if (e.name == "engine 0") engine = &e;
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->detail.rfind("cuda, ", 0), 0u) << engine->detail;
  int steps = 0;
  double device_us = 0;
  for (const Trace::Event& e : events) {
    if (e.track != "cuda") continue;
    ++steps;
    device_us += e.duration_us;
    EXPECT_FALSE(e.detail.empty()) << e.name;
    EXPECT_GE(e.start_us, engine->start_us) << e.name;
    EXPECT_LE(e.start_us + e.duration_us, engine->start_us + engine->duration_us + 1) << e.name;
  }
  EXPECT_GT(steps, 5);
  EXPECT_LE(device_us, engine->duration_us + 1);
  EXPECT_EQ(events.back().name, "call forward");
}

}  // namespace
}  // namespace kiln
