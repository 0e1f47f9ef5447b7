// Sessions on real exported programs: buffers persist across calls, a failed
// call leaves them untouched, and inputs are checked before anything runs.
#include <gtest/gtest.h>

#include <cmath>

#include "base/safetensors.h"
#include "kiln/kiln.h"
#include "support/tensor_diff.h"

namespace kiln {
namespace {

const std::string kFixtures = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";

std::shared_ptr<const Program> load(const std::string& name) {
  auto p = compile(kFixtures + name);
  EXPECT_TRUE(p.has_value()) << p.status().message();
  return p.has_value() ? *p : nullptr;
}

SafetensorsFile io(const std::string& name) {
  auto f = read_safetensors(kFixtures + name);
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

// RunOptions::outputs: the call writes its results into the caller's memory
// and returns it, whatever the program (one engine, fallback segments, state);
// memory that does not fit is refused before anything runs.
TEST(Session, RunWritesIntoTheCallersOutputMemory) {
  auto f = io("resnet_basic.io.safetensors");
  const Tensor x = *f.find("input.0");
  const Tensor* want = f.find("output.0");
  ASSERT_NE(want, nullptr);
  LoadOptions o;
  o.compile.min_block_size = 1;
  o.compile.fallback_ops = {"relu"};
  auto split = compile(kFixtures + "resnet_basic.pt2", o);
  ASSERT_TRUE(split.has_value()) << split.status().message();
  for (const auto& program : {load("resnet_basic.pt2"), *split}) {
    ASSERT_TRUE(program);
    Session s(program);
    Tensor out = Tensor::zeros(DType::Float32, want->sizes());
    out.copy_from(Tensor::scalar(DType::Float32, std::nan("")).as_strided(want->sizes(), Shape(want->sizes().size(), 0), 0));
    RunOptions into;
    into.outputs = {out};
    auto r = s.run({x}, into);
    ASSERT_TRUE(r.has_value()) << r.status().message();
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].raw_data(), out.raw_data());
    EXPECT_LE(max_abs_diff(out, *want), 1e-4);
    // The wrong count, sizes, dtype or layout: refused, naming the memory.
    for (const std::vector<Tensor>& wrong :
         {std::vector<Tensor>{out, out}, std::vector<Tensor>{Tensor::zeros(DType::Float32, {1})},
          std::vector<Tensor>{Tensor::zeros(DType::Float64, want->sizes())},
          std::vector<Tensor>{Tensor::zeros(DType::Float32, {want->size(1), want->size(0)})
                                  .as_strided(want->sizes(), {1, want->size(0)}, 0)}}) {
      RunOptions bad;
      bad.outputs = wrong;
      auto refused = s.run({x}, bad);
      ASSERT_FALSE(refused.has_value());
      EXPECT_EQ(refused.status().code(), ErrorCode::kInvalidArgument) << refused.status().message();
      EXPECT_NE(refused.status().message().find("memory for output"), std::string::npos) << refused.status().message();
    }
  }
  // A program with state: a refused call changes no buffer; an accepted one
  // gives what a call without memory gives.
  auto stateful = load("conv_state.pt2");
  ASSERT_TRUE(stateful);
  auto g = io("conv_state.io.safetensors");
  const Tensor step = *g.find("step0.input.0");
  Session a(stateful), b(stateful);
  auto plain = b.run({step});
  ASSERT_TRUE(plain.has_value()) << plain.status().message();
  ASSERT_EQ(plain->size(), 2u);
  RunOptions bad;
  bad.outputs = {Tensor::zeros(DType::Float32, {2, 8}), Tensor::zeros((*plain)[1].dtype(), (*plain)[1].sizes())};
  auto refused = a.run({step}, bad);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.status().message().find("memory for output 0"), std::string::npos) << refused.status().message();
  EXPECT_EQ(a.buffer("steps")->item_int() + 1, b.buffer("steps")->item_int());
  RunOptions into;
  for (const Tensor& t : *plain) into.outputs.push_back(Tensor::zeros(t.dtype(), t.sizes()));
  auto given = a.run({step}, into);
  ASSERT_TRUE(given.has_value()) << given.status().message();
  for (size_t k = 0; k < plain->size(); ++k) EXPECT_EQ(max_abs_diff(into.outputs[k], (*plain)[k]), 0.0) << k;
  EXPECT_EQ(a.buffer("steps")->item_int(), b.buffer("steps")->item_int());
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
