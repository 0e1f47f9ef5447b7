// Sessions on real exported programs: buffers persist across calls, a failed
// call leaves them untouched, and inputs are checked before anything runs.
#include <gtest/gtest.h>

#include <cmath>

#include "frontend/safetensors.h"
#include "kiln/kiln.h"
#include "support/tensor_diff.h"

namespace kiln {
namespace {

const std::string kFixtures = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";

std::shared_ptr<const Program> load(const std::string& name) {
  auto p = Program::load(kFixtures + name);
  EXPECT_TRUE(p.has_value()) << p.status().message();
  return p.has_value() ? *p : nullptr;
}

frontend::SafetensorsFile io(const std::string& name) {
  auto f = frontend::read_safetensors(kFixtures + name);
  EXPECT_TRUE(f.has_value()) << f.status().message();
  return std::move(*f);
}

using kiln::testing::max_abs_diff;

TEST(Session, BuffersCarryOverBetweenCallsInBothDialects) {
  for (const char* model : {"conv_state.pt2", "conv_state.aten.pt2"}) {
    auto program = load(model);
    ASSERT_TRUE(program);
    auto f = io("conv_state.io.safetensors");
    Session s(program);
    auto steps0 = s.buffer("steps");
    ASSERT_TRUE(steps0.has_value());
    int64_t start = steps0->item_int();
    for (int k = 0; k < 3; ++k) {
      const Tensor* x = f.find("step" + std::to_string(k) + ".input.0");
      ASSERT_NE(x, nullptr);
      auto out = s.run({*x});
      ASSERT_TRUE(out.has_value()) << out.status().message();
      const Tensor* want = f.find("step" + std::to_string(k) + ".output.0");
      ASSERT_NE(want, nullptr);
      EXPECT_LT(max_abs_diff((*out)[0], *want), 1e-5) << model << " step " << k;
      EXPECT_EQ(s.buffer("steps")->item_int(), start + k + 1) << model;
    }
    // reset() restores the program's initial state.
    ASSERT_TRUE(s.reset().is_ok());
    EXPECT_EQ(s.buffer("steps")->item_int(), start);
  }
}

TEST(Session, WrongInputsAreRefusedAndStateIsKept) {
  auto program = load("conv_state.pt2");
  ASSERT_TRUE(program);
  auto f = io("conv_state.io.safetensors");
  Session s(program);
  const Tensor x = *f.find("step0.input.0");
  ASSERT_TRUE(s.run({x}).has_value());
  int64_t steps = s.buffer("steps")->item_int();

  auto wrong_dtype = s.run({x.to(DType::Float64)});
  ASSERT_FALSE(wrong_dtype.has_value());
  EXPECT_NE(wrong_dtype.status().message().find("expected dtype float32"), std::string::npos)
      << wrong_dtype.status().message();

  Shape bigger = x.sizes();
  bigger.back() += 1;
  auto wrong_shape = s.run({Tensor::zeros(DType::Float32, bigger)});
  ASSERT_FALSE(wrong_shape.has_value());
  EXPECT_NE(wrong_shape.status().message().find("dimension"), std::string::npos) << wrong_shape.status().message();

  auto wrong_rank = s.run({Tensor::zeros(DType::Float32, {x.numel()})});
  ASSERT_FALSE(wrong_rank.has_value());
  EXPECT_NE(wrong_rank.status().message().find("expected 2 dimensions"), std::string::npos)
      << wrong_rank.status().message();

  auto wrong_count = s.run({x, x});
  ASSERT_FALSE(wrong_count.has_value());
  EXPECT_NE(wrong_count.status().message().find("takes 1 inputs"), std::string::npos);

  EXPECT_EQ(s.buffer("steps")->item_int(), steps);  // no failed call touched the state
}

TEST(Session, AnInputInABuffersMemoryIsRefused) {
  // conv_state keeps a [1, 8, 4] window; the input, [1, 8], is passed as a view of that window's memory.
  auto program = load("conv_state.pt2");
  ASSERT_TRUE(program);
  auto f = io("conv_state.io.safetensors");
  Session s(program);
  const Tensor x = *f.find("step0.input.0");
  Tensor window = Tensor::zeros(DType::Float32, {1, 8, 4});
  ASSERT_TRUE(s.bind_buffer("conv_state", window).is_ok());
  Tensor inside = window.as_strided({1, 8}, {32, 4}, 0);
  inside.copy_from(x);
  const int64_t steps = s.buffer("steps")->item_int();
  auto r = s.run({inside});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("shares memory with buffer 'conv_state'"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(s.buffer("steps")->item_int(), steps);  // nothing ran
  // A copy of the same values runs.
  EXPECT_TRUE(s.run({inside.contiguous()}).has_value());
}

TEST(Session, DynamicDimensionOutsideItsRangeIsRefused) {
  auto program = load("resnet_basic_dynbatch.pt2");
  ASSERT_TRUE(program);
  ASSERT_EQ(program->symbols().size(), 1u);
  const SymbolInfo& sym = program->symbols()[0];
  EXPECT_EQ(sym.min, 1);
  EXPECT_EQ(sym.max, 8);
  Session s(program);
  auto f = io("resnet_basic_dynbatch.io.safetensors");
  Shape sizes = f.find("step0.input.0")->sizes();
  sizes[0] = 9;
  auto r = s.run({Tensor::zeros(DType::Float32, sizes)});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("is 9, outside the range [1, 8]"), std::string::npos) << r.status().message();
}

// run_on_device is for one-engine programs on a backend with its own device;
// anything else is refused, saying why, before anything runs (the caller
// then uses run() with host tensors).
TEST(Session, RunOnDeviceRefusesWhatOnlyRunCanDo) {
  auto f = io("resnet_basic.io.safetensors");
  const Tensor x = *f.find("input.0");
  const Tensor out = Tensor::zeros(DType::Float32, f.find("output.0")->sizes());
  auto cpu = load("resnet_basic.pt2");
  ASSERT_TRUE(cpu);
  Session s(cpu);
  Status st = s.run_on_device({x}, {out}, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("no device of its own"), std::string::npos) << st.message();
  // Inputs are checked first, as run() checks them.
  st = s.run_on_device({Tensor::zeros(DType::Float32, {1})}, {out}, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.message();
  // Fallback segments run on the host.
  LoadOptions o;
  o.compile.min_block_size = 1;
  o.compile.fallback_ops = {"relu"};
  auto split = Program::load(kFixtures + "resnet_basic.pt2", o);
  ASSERT_TRUE(split.has_value()) << split.status().message();
  Session t(*split);
  st = t.run_on_device({x}, {out}, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("one engine segment"), std::string::npos) << st.message();
  // A program that writes buffers keeps its state on the host.
  auto stateful = load("conv_state.pt2");
  ASSERT_TRUE(stateful);
  Session u(stateful);
  auto g = io("conv_state.io.safetensors");
  st = u.run_on_device({*g.find("step0.input.0")}, {Tensor::zeros(DType::Float32, {1, 8})}, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("writes buffers"), std::string::npos) << st.message();
}

// output_types gives the memory a call's outputs need from the inputs' types
// alone, as run() returns them, and checks the inputs as run() does.
TEST(Session, OutputTypesAreWhatRunReturns) {
  for (const char* model : {"resnet_basic.pt2", "conv_state.pt2"}) {
    auto program = load(model);
    ASSERT_TRUE(program);
    Session s(program);
    const Tensor x =
        Tensor::zeros(program->inputs()[0].dtype, std::string(model) == "resnet_basic.pt2"
                                                      ? io("resnet_basic.io.safetensors").find("input.0")->sizes()
                                                      : io("conv_state.io.safetensors").find("step0.input.0")->sizes());
    auto types = s.output_types({x});
    ASSERT_TRUE(types.has_value()) << model << ": " << types.status().message();
    auto out = s.run({x});
    ASSERT_TRUE(out.has_value()) << model << ": " << out.status().message();
    ASSERT_EQ(types->size(), out->size()) << model;
    for (size_t i = 0; i < out->size(); ++i) {
      EXPECT_EQ((*types)[i].sizes, (*out)[i].sizes()) << model << " output " << i;
      EXPECT_EQ((*types)[i].dtype, (*out)[i].dtype()) << model << " output " << i;
    }
    auto wrong = s.output_types({Tensor::zeros(DType::Float32, {1})});
    ASSERT_FALSE(wrong.has_value());
    EXPECT_EQ(wrong.status().code(), ErrorCode::kInvalidArgument) << wrong.status().message();
  }
}

TEST(Session, ProgramDescribesItsSignature) {
  auto program = load("llama_decode.pt2");
  ASSERT_TRUE(program);
  // Buffers are named by the signature's buffer_name, not the placeholder.
  bool found = false;
  for (const auto& b : program->buffers()) found |= b.name == "inner.key_cache_0";
  EXPECT_TRUE(found);
  EXPECT_FALSE(program->mutated_buffers().empty());
  EXPECT_EQ(program->dialect(), "TRAINING");
  auto aten = load("llama_decode.aten.pt2");
  ASSERT_TRUE(aten);
  EXPECT_EQ(aten->dialect(), "ATEN");
  // Both dialects write the same buffers, in the same (program) order.
  EXPECT_EQ(program->mutated_buffers(), aten->mutated_buffers());
}

// Batch-norm statistics are buffers the program never writes; compiling folds
// them into the convolution weights, so changing one afterwards is refused
// instead of silently having no effect.
TEST(Session, SettingABufferFoldedIntoTheWeightsIsRefused) {
  auto p = load("resnet_basic.pt2");
  Session s(p);
  std::string folded;
  for (const TensorSpec& b : p->buffers())
    if (b.name.find("running_mean") != std::string::npos) folded = b.name;
  ASSERT_FALSE(folded.empty());
  auto current = s.buffer(folded);
  ASSERT_TRUE(current.has_value());
  Status st = s.set_buffer(folded, current->clone());
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("folded into the weights"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace kiln
