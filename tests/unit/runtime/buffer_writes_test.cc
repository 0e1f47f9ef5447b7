// Mutated buffers: a KV-cache write the converter finds eligible is done in
// place by its engine (the plan's alias map says so and the runtime reads it
// from there); every other write is copied back. Both kinds, and user outputs,
// are checked value by value against PyTorch's fixtures and hand-computed
// references; caller-bound memory receives every update.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "base/safetensors.h"
#include "compiler/compiler.h"
#include "engine/plan.h"
#include "ir/printer.h"
#include "kiln/kiln.h"
#include "program/compiled_program.h"
#include "runtime/executable.h"
#include "support/tensor_diff.h"

namespace kiln {
namespace {

const std::string kFixtures = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch2.11/";

using kiln::testing::max_abs_diff;

// Runs every step of a stateful fixture on one session whose mutated buffers
// are the caller's own tensors, and checks outputs and final buffer values.
void run_steps_with_bound_buffers(const std::string& model, const std::string& io_name, double tol) {
  auto program = compile(kFixtures + model);
  ASSERT_TRUE(program.has_value()) << program.status().message();
  auto io = read_safetensors(kFixtures + io_name);
  ASSERT_TRUE(io.has_value()) << io.status().message();
  Session s(*program);
  std::map<std::string, Tensor> mine;
  for (const std::string& fqn : (*program)->mutated_buffers()) {
    auto initial = s.buffer(fqn);
    ASSERT_TRUE(initial.has_value());
    mine[fqn] = initial->clone();
    ASSERT_TRUE(s.bind_buffer(fqn, mine[fqn]).is_ok()) << fqn;
  }
  int steps = 0;
  for (;; ++steps) {
    const std::string p = "step" + std::to_string(steps) + ".";
    std::vector<Tensor> in;
    for (int i = 0; io->find(p + "input." + std::to_string(i)); ++i)
      in.push_back(*io->find(p + "input." + std::to_string(i)));
    if (in.empty()) break;
    auto out = s.run(in);
    ASSERT_TRUE(out.has_value()) << model << " step " << steps << ": " << out.status().message();
    for (size_t j = 0; j < out->size(); ++j) {
      const Tensor* want = io->find(p + "output." + std::to_string(j));
      ASSERT_NE(want, nullptr);
      EXPECT_LT(max_abs_diff((*out)[j], *want), tol) << model << " step " << steps << " output " << j;
    }
  }
  EXPECT_GT(steps, 1);
  for (const auto& [fqn, t] : mine) {
    const Tensor* want = io->find("final.buffer." + fqn);
    ASSERT_NE(want, nullptr) << fqn;
    EXPECT_LT(max_abs_diff(t, *want), tol) << model << ": the caller's memory of buffer " << fqn;
    auto current = s.buffer(fqn);
    ASSERT_TRUE(current.has_value());
    EXPECT_EQ(current->storage(), t.storage()) << fqn << " is still the caller's memory";
  }
}

TEST(BufferWrites, KvCachesAreWrittenInPlaceInBothDialects) {
  for (const char* model : {"kv_cache_attention.pt2", "kv_cache_attention.aten.pt2"}) {
    auto p = compile(kFixtures + model);
    ASSERT_TRUE(p.has_value()) << p.status().message();
    EXPECT_TRUE((*p)->buffer_updated_in_place("k_cache")) << model;
    EXPECT_TRUE((*p)->buffer_updated_in_place("v_cache")) << model;
    run_steps_with_bound_buffers(model, "kv_cache_attention.io.safetensors", 1e-5);
  }
}

// One engine with aliased KV caches, copied-back counters and the logits.
TEST(BufferWrites, AliasedCopiedBackAndUserOutputsInOneEngine) {
  for (const char* model : {"llama_decode.pt2", "llama_decode.aten.pt2"}) {
    auto p = compile(kFixtures + model);
    ASSERT_TRUE(p.has_value()) << p.status().message();
    ASSERT_EQ((*p)->segments().size(), 1u) << model;
    for (const char* fqn : {"inner.key_cache_0", "inner.value_cache_0", "inner.key_cache_1", "inner.value_cache_1"})
      EXPECT_TRUE((*p)->buffer_updated_in_place(fqn)) << model << " " << fqn;
    for (const char* fqn : {"inner.cumulative_length_0", "inner.cumulative_length_1"})
      EXPECT_FALSE((*p)->buffer_updated_in_place(fqn)) << model << " " << fqn;
    run_steps_with_bound_buffers(model, "llama_decode.io.safetensors", 1e-5);
  }
}

// Every way a cache is written, in one module: index_copy_ and cache[:, :, pos] = v
// in place; a 3-d cache, a write along dim 1 and a slice read and written back copied back.
TEST(BufferWrites, EachWayOfWritingACacheInBothDialects) {
  for (const char* model : {"cache_writes.pt2", "cache_writes.aten.pt2"}) {
    auto p = compile(kFixtures + model);
    ASSERT_TRUE(p.has_value()) << p.status().message();
    EXPECT_TRUE((*p)->buffer_updated_in_place("kv")) << model;
    EXPECT_TRUE((*p)->buffer_updated_in_place("kv_put")) << model;
    for (const char* fqn : {"kv3", "kv_dim1", "kv_slice"})
      EXPECT_FALSE((*p)->buffer_updated_in_place(fqn)) << model << " " << fqn;
    run_steps_with_bound_buffers(model, "cache_writes.io.safetensors", 1e-5);
  }
}

// A state shifted each step (cat + copy_) and a step counter: copied back.
TEST(BufferWrites, ShiftedStateAndCounterAreCopiedBack) {
  auto p = compile(kFixtures + "conv_state.pt2");
  ASSERT_TRUE(p.has_value()) << p.status().message();
  EXPECT_FALSE((*p)->buffer_updated_in_place("conv_state"));
  EXPECT_FALSE((*p)->buffer_updated_in_place("steps"));
  run_steps_with_bound_buffers("conv_state.pt2", "conv_state.io.safetensors", 1e-5);
}

TEST(BufferWrites, BindingRefusesMismatchedOrSharedMemory) {
  auto p = compile(kFixtures + "kv_cache_attention.pt2");
  ASSERT_TRUE(p.has_value());
  Session s(*p);
  EXPECT_FALSE(s.bind_buffer("nope", Tensor::zeros(DType::Float32, {1, 4, 16, 8})).is_ok());
  EXPECT_FALSE(s.bind_buffer("k_cache", Tensor::zeros(DType::Float32, {1, 4, 15, 8})).is_ok());
  EXPECT_FALSE(s.bind_buffer("k_cache", Tensor::zeros(DType::Float64, {1, 4, 16, 8})).is_ok());
  Tensor t = Tensor::zeros(DType::Float32, {1, 4, 8, 16});
  EXPECT_FALSE(s.bind_buffer("k_cache", t.as_strided({1, 4, 16, 8}, {512, 128, 1, 16}, 0)).is_ok());  // not contiguous
  Tensor k = Tensor::zeros(DType::Float32, {1, 4, 16, 8});
  ASSERT_TRUE(s.bind_buffer("k_cache", k).is_ok());
  auto err = s.bind_buffer("v_cache", k);
  ASSERT_FALSE(err.is_ok());
  EXPECT_NE(err.message().find("shares memory with buffer 'k_cache'"), std::string::npos) << err.message();
}

// ---- hand-written programs: which writes are eligible, decided per node

struct Built {
  std::unique_ptr<runtime::Executable> exec;
  std::vector<program::BufferWrite> writes;
};

// A program over `text` whose first graph input is buffer "cache" (value
// `initial`), with user inputs after it; output 0 is the buffer's new value.
Expected<Built> build(const std::string& text, const Tensor& initial, int user_inputs) {
  KILN_ASSIGN_OR_RETURN(ir::Graph g, ir::parse_graph(text));
  ir::Module m;
  m.graph = std::move(g);
  m.input_specs.push_back({ir::InputSpec::Kind::kBuffer, "cache"});
  for (int i = 0; i < user_inputs; ++i) m.input_specs.push_back({ir::InputSpec::Kind::kUserInput, ""});
  m.output_specs.push_back({ir::OutputSpec::Kind::kBufferMutation, "cache"});
  for (size_t i = 1; i < m.graph.outputs().size(); ++i)
    m.output_specs.push_back({ir::OutputSpec::Kind::kUserOutput, ""});
  m.weights["cache"] = initial;
  for (const auto& [name, range] : std::map<std::string, ir::SymbolRange>{{"s0", {1, 64}}}) m.symbols[name] = range;
  compiler::CompileSettings cs;
  cs.partition.min_block_size = 1;
  KILN_ASSIGN_OR_RETURN(program::CompiledProgram cp, compiler::compile_module(std::move(m), cs));
  Built b;
  KILN_ASSIGN_OR_RETURN(b.exec, runtime::Executable::load(std::move(cp), "test program"));
  b.writes = b.exec->buffer_writes();
  return b;
}

Tensor iota(DType dt, Shape sizes, double start) {
  Tensor t = Tensor::zeros(dt, std::move(sizes));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(start + static_cast<double>(i));
  return t;
}

// Runs the program with `cache` as the buffer; returns the buffer's new value.
Tensor run(const Built& b, const Tensor& cache, const std::vector<Tensor>& user) {
  std::vector<cpu::RtValue> in{cache};
  for (const Tensor& t : user) in.push_back(t);
  auto out = b.exec->run(in);
  EXPECT_TRUE(out.has_value()) << out.status().message();
  return out.has_value() ? cpu::rt_value_to_tensor((*out)[0]) : Tensor();
}

// Reference: `cache` with source's rows written at `pos` along dim `dim`, computed with plain loops.
Tensor written(const Tensor& cache, int64_t dim, const std::vector<int64_t>& pos, const Tensor& source) {
  Tensor want = cache.clone();
  const Shape& cs = cache.sizes();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= cs[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(dim) + 1; d < cs.size(); ++d) inner *= cs[d];
  const int64_t n = static_cast<int64_t>(pos.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < inner; ++i)
        want.data<float>()[(o * cs[static_cast<size_t>(dim)] + pos[static_cast<size_t>(j)]) * inner + i] =
            source.data<float>()[(o * n + j) * inner + i];
  return want;
}

Tensor positions(std::vector<int64_t> p) {
  Tensor t = Tensor::zeros(DType::Int64, {static_cast<int64_t>(p.size())});
  for (size_t i = 0; i < p.size(); ++i) t.data<int64_t>()[i] = p[i];
  return t;
}

TEST(BufferWrites, EligibleIndexCopyAndIndexPutAreInPlace) {
  const std::string index_copy = R"(graph(%cache: float32[1, 2, 6, 3], %src: float32[1, 2, 2, 3], %pos: int64[2]) {
  %new: float32[1, 2, 6, 3] = aten.index_copy.default(self=%cache, dim=2, index=%pos, source=%src)
  %sum: float32[1, 2, 3] = aten.sum.dim_IntList(self=%new, dim=[2], keepdim=false)
  return (%new, %sum)
}
)";
  const std::string index_put = R"(graph(%cache: float32[1, 2, 6, 3], %src: float32[1, 2, 2, 3], %pos: int64[2]) {
  %new: float32[1, 2, 6, 3] = aten.index_put.default(self=%cache, indices=?[None, None, %pos], values=%src, accumulate=false)
  %sum: float32[1, 2, 3] = aten.sum.dim_IntList(self=%new, dim=[2], keepdim=false)
  return (%new, %sum)
}
)";
  for (const std::string& text : {index_copy, index_put}) {
    const Tensor initial = iota(DType::Float32, {1, 2, 6, 3}, 0);
    auto b = build(text, initial, 2);
    ASSERT_TRUE(b.has_value()) << b.status().message();
    ASSERT_EQ(b->writes.size(), 1u);
    EXPECT_TRUE(b->writes[0].in_place);
    Tensor cache = initial.clone();
    const Tensor src = iota(DType::Float32, {1, 2, 2, 3}, 100);
    Tensor out = run(*b, cache, {src, positions({4, 1})});
    const Tensor want = written(initial, 2, {4, 1}, src);
    EXPECT_EQ(max_abs_diff(out, want), 0.0);
    EXPECT_EQ(max_abs_diff(cache, want), 0.0) << "the caller's cache itself holds the new rows";
    EXPECT_EQ(out.storage(), cache.storage());
  }
}

TEST(BufferWrites, IneligibleWritesAreCopiedBack) {
  struct Case {
    const char* what;
    std::string text;
    Shape cache, src;
    int64_t dim;
  };
  const std::vector<Case> cases = {
      {"3-d cache",
       R"(graph(%cache: float32[2, 6, 3], %src: float32[2, 2, 3], %pos: int64[2]) {
  %new: float32[2, 6, 3] = aten.index_copy.default(self=%cache, dim=1, index=%pos, source=%src)
  return (%new)
}
)",
       {2, 6, 3},
       {2, 2, 3},
       1},
      {"dim 1 of a 4-d cache",
       R"(graph(%cache: float32[1, 6, 2, 3], %src: float32[1, 2, 2, 3], %pos: int64[2]) {
  %new: float32[1, 6, 2, 3] = aten.index_copy.default(self=%cache, dim=1, index=%pos, source=%src)
  return (%new)
}
)",
       {1, 6, 2, 3},
       {1, 2, 2, 3},
       1},
      {"old value read elsewhere",
       R"(graph(%cache: float32[1, 2, 6, 3], %src: float32[1, 2, 2, 3], %pos: int64[2]) {
  %new: float32[1, 2, 6, 3] = aten.index_copy.default(self=%cache, dim=2, index=%pos, source=%src)
  %old: float32[1, 2, 6, 3] = aten.mul.Tensor(self=%cache, other=%new)
  return (%new, %old)
}
)",
       {1, 2, 6, 3},
       {1, 2, 2, 3},
       2},
  };
  for (const Case& c : cases) {
    const Tensor initial = iota(DType::Float32, c.cache, 0);
    auto b = build(c.text, initial, 2);
    ASSERT_TRUE(b.has_value()) << c.what << ": " << b.status().message();
    ASSERT_EQ(b->writes.size(), 1u);
    EXPECT_FALSE(b->writes[0].in_place) << c.what;
    Tensor cache = initial.clone();
    const Tensor src = iota(DType::Float32, c.src, 100);
    Tensor out = run(*b, cache, {src, positions({5, 0})});
    EXPECT_EQ(max_abs_diff(out, written(initial, c.dim, {5, 0}, src)), 0.0) << c.what;
    EXPECT_EQ(max_abs_diff(cache, initial), 0.0) << c.what << ": the engine left the cache to the copy-back";
    EXPECT_NE(out.storage(), cache.storage()) << c.what;
  }
}

TEST(BufferWrites, DynamicCacheLengthIsCopiedBack) {
  const std::string text = R"(graph(%cache: float32[1, 2, s0, 3], %src: float32[1, 2, 2, 3], %pos: int64[2]) {
  %new: float32[1, 2, s0, 3] = aten.index_copy.default(self=%cache, dim=2, index=%pos, source=%src)
  return (%new)
}
)";
  const Tensor initial = iota(DType::Float32, {1, 2, 6, 3}, 0);
  auto b = build(text, initial, 2);
  ASSERT_TRUE(b.has_value()) << b.status().message();
  ASSERT_EQ(b->writes.size(), 1u);
  EXPECT_FALSE(b->writes[0].in_place);
}

// A plan whose alias map does not match its layers is refused on load.
TEST(BufferWrites, AliasMapMustMatchTheLayers) {
  const std::string text = R"(graph(%cache: float32[1, 2, 6, 3], %src: float32[1, 2, 2, 3], %pos: int64[2]) {
  %new: float32[1, 2, 6, 3] = aten.index_copy.default(self=%cache, dim=2, index=%pos, source=%src)
  return (%new)
}
)";
  auto b = build(text, iota(DType::Float32, {1, 2, 6, 3}, 0), 2);
  ASSERT_TRUE(b.has_value()) << b.status().message();
  const program::SegmentRecord& seg = b->exec->program().segments.at(0);
  auto plan = engine::deserialize_plan(seg.plan, "cpu", "plan");
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  ASSERT_EQ(plan->aliases.size(), 1u);
  plan->aliases.clear();  // claims a copy-back while the layer writes in place
  auto bad = engine::deserialize_plan(engine::serialize_plan(*plan), "cpu", "plan");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("alias map"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace kiln
