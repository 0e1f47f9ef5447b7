// kiln's CUDA kernel templates (src/backends/cuda/kernels/*.cuh, embedded):
// every header compiles alone with NVRTC, and every instantiation a kernel
// generator can ask for compiles for sm_90, with its sizes compiled in and
// read at run time (no GPU needed).
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/cuda_builder.h"
#include "backends/cuda/kernel_headers.h"
#include "backends/cuda/kernel_source.h"
#include "backends/cuda/nvrtc_compile.h"

namespace kiln::cuda {
namespace {

StridedLayout contiguous(DType t, std::vector<int64_t> sizes) {
  StridedLayout l{t, sizes, std::vector<int64_t>(sizes.size(), 1)};
  for (size_t d = sizes.size(); d-- > 1;) l.strides[d - 1] = l.strides[d] * sizes[d];
  return l;
}

// Compiles `ks` into one module as the builder does, every size compiled in
// (or read at run time), and checks each instance got a kernel of its own.
void expect_compiles(const std::vector<GeneratedKernel>& ks, bool sizes_at_run_time) {
  std::vector<KernelChoice> choices;
  std::vector<std::string> names;
  for (size_t i = 0; i < ks.size(); ++i) {
    choices.emplace_back(ks[i], std::vector<bool>(ks[i].dims.size(), sizes_at_run_time));
    names.push_back("k" + std::to_string(i));
  }
  std::vector<const KernelChoice*> all;
  for (const KernelChoice& c : choices) all.push_back(&c);
  auto m = compile_kernels(all, names, "sm_90");
  ASSERT_TRUE(m.has_value()) << m.status().message();
  ASSERT_EQ(m->lowered_names.size(), ks.size());
  for (size_t i = 0; i < ks.size(); ++i) {
    EXPECT_NE(names[i], "k" + std::to_string(i)) << "instance " << i << " kept its placeholder name";
    EXPECT_EQ(names[i].rfind("_Z", 0), 0u) << names[i];  // a mangled template instance
  }
}

// Compiles `ks` with every size compiled in, then, with every size read at
// run time (which changes only the kernels' last parameter), one kernel of
// each distinct `key`.
template <typename Key>
void expect_compiles_both_ways(const std::vector<GeneratedKernel>& ks, Key key) {
  expect_compiles(ks, false);
  std::vector<GeneratedKernel> some;
  std::set<std::string> seen;
  for (const GeneratedKernel& k : ks)
    if (seen.insert(key(k)).second) some.push_back(k);
  expect_compiles(some, true);
}

TEST(KernelTemplates, EveryHeaderCompilesAlone) {
  ASSERT_FALSE(kernel_headers().empty());
  for (const KernelHeader& h : kernel_headers()) {
    auto m = compile_cuda_source(std::string("#include \"") + h.name + "\"\n", "sm_90");
    EXPECT_TRUE(m.has_value()) << h.name << ": " << m.status().message();
  }
  EXPECT_FALSE(kernel_header("kiln/prelude.cuh").empty());
  EXPECT_TRUE(kernel_header("kiln/none.cuh").empty());
}

// gemv: every element type, row count and split of k, and every
// activation with and without a bias, from the generator.
TEST(KernelTemplates, EveryGemvInstantiationCompiles) {
  std::vector<GeneratedKernel> ks;
  auto add = [&ks](DType t, int64_t m, int64_t n, int64_t k, const char* act, bool bias, bool fp8 = false) {
    GemvShape g;
    g.fp8_weights = fp8;
    g.dtype = t;
    g.m = m;
    g.n = g.ldc = n;
    g.k = g.lda = g.ldw = k;
    g.activation = act;
    g.has_bias = bias;
    g.alpha = 0.5f;
    if (g.activation == "swiglu") g.up_row = n;  // w holds 2n rows: gate, then up
    auto kern = gemv_kernel(g);
    ASSERT_TRUE(kern.has_value()) << kern.status().message();
    ks.push_back(*kern);
  };
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16}) {
    for (int64_t m = 1; m <= kGemvMaxRows; ++m)
      // n and k that make the generator split k among 1, 2, 4 and 8 warps.
      for (auto [n, k] : {std::pair<int64_t, int64_t>{100000, 4096}, {2048, 8192}, {1024, 8192}, {512, 8192}})
        add(t, m, n, k, "none", false);
    for (const char* act : {"none", "relu", "gelu"})
      for (bool bias : {false, true}) add(t, 1, 100000, 4096, act, bias);
    // A gated MLP's gate and up at once, k split or not, one row and several.
    for (int64_t m : {1, 3, 8})
      for (auto [n, k] : {std::pair<int64_t, int64_t>{8192, 2048}, {256, 8192}})
        for (bool bias : {false, true}) add(t, m, n, k, "swiglu", bias);
    // FP8 weights with a scale per row: every row count and split, each epilogue.
    for (int64_t m = 1; m <= kGemvMaxRows; ++m)
      for (auto [n, k] : {std::pair<int64_t, int64_t>{100000, 4096}, {2048, 8192}, {512, 8192}})
        add(t, m, n, k, "none", false, true);
    for (const char* act : {"relu", "gelu", "swiglu"})
      for (bool bias : {false, true}) add(t, 1, 8192, 2048, act, bias, true);
  }
  if (::testing::Test::HasFatalFailure()) return;
  std::set<std::string> splits;
  for (const GeneratedKernel& k : ks) splits.insert(k.targs[2]);
  EXPECT_EQ(splits, (std::set<std::string>{"1", "2", "4", "8"}));
  expect_compiles_both_ways(ks, [](const GeneratedKernel& k) { return k.templ + k.targs[0] + k.targs[2]; });
}

// Row kernels: norms (a block per row and a warp per row: every
// combination of residual, written sum, weight and bias of both kinds in
// every element type, and every count of 16-byte vectors per lane), softmax
// and log-softmax, and the cast RMSNorm, at every block size.
TEST(KernelTemplates, EveryRowInstantiationCompiles) {
  std::vector<GeneratedKernel> ks;
  auto add = [&ks](Expected<GeneratedKernel> k) {
    ASSERT_TRUE(k.has_value()) << k.status().message();
    ks.push_back(*k);
  };
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64})
    for (RowOp op : {RowOp::kLayerNorm, RowOp::kRmsNorm})
      for (int flags = 0; flags < 16; ++flags) {
        if ((flags & 8) != 0 && (flags & 4) == 0) continue;  // a sum is written only with a residual
        NormRows p{op, t, 10, 768, 1e-5, (flags & 1) != 0, (flags & 2) != 0};
        p.residual = (flags & 4) != 0;
        p.write_sum = (flags & 8) != 0;
        add(norm_rows_kernel(p));
        if (t == DType::Float64) continue;
        p.vectorized = true;
        add(norm_rows_kernel(p));
      }
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16}) {
    const int64_t per_vector = 16 / static_cast<int64_t>(dtype_size(t));
    for (int64_t nvec : {1, 31, 32, 33, 64, 65, 128, 160, 192, 224, 256}) {
      NormRows p{RowOp::kLayerNorm, t, 10, nvec * per_vector, 1e-5, true, true};
      p.vectorized = true;
      add(norm_rows_kernel(p));
    }
  }
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64})
    for (int64_t cols : {768, 4096, 8192}) {  // 128, 256 and 1024 threads
      add(norm_rows_kernel({RowOp::kRmsNorm, t, 10, cols, 1e-6, true, false}));
      for (RowOp op : {RowOp::kSoftmax, RowOp::kLogSoftmax}) add(row_kernel(op, t, 10, cols, 0, false, false));
      if (t == DType::Float16 || t == DType::BFloat16) add(rms_norm_cast_kernel(t, 10, cols, 1e-6));
    }
  if (::testing::Test::HasFatalFailure()) return;
  std::set<std::string> threads, nvecs;
  for (const GeneratedKernel& k : ks) {
    if (k.templ == "kiln::norm_rows_block") threads.insert(k.targs[2]);
    if (k.templ == "kiln::norm_rows_warp") nvecs.insert(k.targs[2]);
  }
  EXPECT_EQ(threads, (std::set<std::string>{"128", "256", "1024"}));
  EXPECT_EQ(nvecs.size(), 11u + 1u);  // and 96: 768 columns of a 16-bit type (192 for float32 is listed)
  expect_compiles_both_ways(ks, [](const GeneratedKernel& k) { return k.templ + k.targs[0]; });
}

// Gathers and index writes in every element type and index type; channel
// padding and im2col in each 16-bit type and float32 over the filter
// geometries of image models; the attention softmax with every mask type,
// causal or not, at every block size; integer positions and sizes.
TEST(KernelTemplates, EveryIndexFillAndConvolutionPrepInstantiationCompiles) {
  std::vector<GeneratedKernel> ks;
  auto add = [&ks](Expected<GeneratedKernel> k) {
    ASSERT_TRUE(k.has_value()) << k.status().message();
    ks.push_back(*k);
  };
  const std::vector<DType> all{DType::Float32, DType::Float16, DType::BFloat16, DType::Float64,
                               DType::Int64,   DType::Int32,   DType::Bool,     DType::UInt8};
  for (DType t : all)
    for (DType i : {DType::Int64, DType::Int32}) {
      add(gather_rows_kernel(t, i, 5, 100, 64, 3));
      add(index_select_kernel(t, i, 4, 30, 7, 9, 3));
      add(index_copy_kernel(t, i, 2, 1, 64, 16, 4));
    }
  auto image = [](DType t, int64_t c) {
    StridedLayout l{t, {2, c, 14, 14}, {c * 196, 196, 14, 1}};
    return l;
  };
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16}) {
    add(pad_channels_kernel(image(t, 3), 8));
    for (Im2colParams p : {Im2colParams{7, 7, 2, 2, 3, 3, 1, 1, 7, 7}, Im2colParams{3, 3, 1, 1, 1, 1, 1, 1, 14, 14},
                           Im2colParams{3, 3, 2, 2, 1, 1, 2, 2, 6, 6}, Im2colParams{1, 1, 1, 1, 0, 0, 1, 1, 14, 14}})
      add(im2col_kernel(p, image(t, 16)));
    for (int64_t S : {100, 1000, 3000}) {  // 64, 128 and 256 threads
      for (bool causal : {false, true}) {
        add(attention_softmax_kernel(t, 1, 2, 3, S, nullptr, causal));
        for (DType m : {DType::Bool, DType::Float32, DType::Float16, DType::BFloat16}) {
          const StridedLayout mask{m, {1, 2, 3, S}, {0, 0, S, 1}};
          add(attention_softmax_kernel(t, 1, 2, 3, S, &mask, causal));
        }
      }
    }
  }
  for (DType t : {DType::Int64, DType::Int32}) add(arange_kernel(t, 100, 5, -2));
  add(scalar_fill_kernel(42));
  if (::testing::Test::HasFatalFailure()) return;
  for (const GeneratedKernel& k : ks) EXPECT_TRUE(k.is_template()) << k.identity();
  expect_compiles_both_ways(
      ks, [](const GeneratedKernel& k) { return k.templ + (k.targs.empty() ? "" : k.targs.front()); });
}

// Strided kernels: copies between every pair of dtypes; loops of rank 1 to 6
// with 32- and 64-bit indices; where over floating and integer values;
// every floating comparison with a number and with a tensor of each
// floating type; every integer operator on int64 and int32 (bitwise on bool
// too), with a tensor and with a number.
TEST(KernelTemplates, EveryStridedInstantiationCompiles) {
  std::vector<GeneratedKernel> ks;
  auto add = [&ks](Expected<GeneratedKernel> k) {
    ASSERT_TRUE(k.has_value()) << k.status().message();
    ks.push_back(*k);
  };
  const std::vector<DType> all{DType::Float32, DType::Float16, DType::BFloat16, DType::Float64,
                               DType::Int64,   DType::Int32,   DType::Bool,     DType::UInt8};
  const StridedLayout transposed_in{DType::Float32, {6, 5}, {1, 6}};
  for (DType to : all)
    for (DType from : all) {
      StridedLayout in = transposed_in;
      in.dtype = from;
      add(copy_kernel(contiguous(to, {6, 5}), in));
    }
  // Ranks 1..6 (dims that cannot merge: every other one transposed), and one past 2^31 elements.
  for (size_t r = 1; r <= 6; ++r) {
    std::vector<int64_t> sizes(r, 3);
    StridedLayout out = contiguous(DType::Float16, sizes), in = out;
    for (size_t d = 0; d + 1 < r; d += 2) std::swap(in.strides[d], in.strides[d + 1]);
    add(copy_kernel(out, in));
  }
  add(copy_kernel(contiguous(DType::Float16, {3, int64_t{1} << 30}),
                  StridedLayout{DType::Float16, {3, int64_t{1} << 30}, {1, 3}}));
  const StridedLayout cond{DType::Bool, {4, 6}, {0, 1}};
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16})
    for (DType a : {DType::Float32, DType::Float16, DType::BFloat16})
      add(where_kernel(contiguous(t, {4, 6}), cond, contiguous(a, {4, 6}), StridedLayout{t, {4, 6}, {0, 0}}));
  for (DType t : {DType::Int64, DType::Int32, DType::Bool, DType::Float64})
    add(where_kernel(contiguous(t, {4, 6}), cond, contiguous(t, {4, 6}), contiguous(t, {4, 6})));
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int64, DType::Int32, DType::Bool})
    add(fill_kernel(StridedLayout{t, {4, 6}, {12, 1}}, 1.0));
  for (const char* op : {"<", "<=", ">", ">=", "==", "!="})
    for (DType a : {DType::Float32, DType::Float16, DType::BFloat16}) {
      add(compare_kernel(op, contiguous(DType::Bool, {4, 6}), contiguous(a, {4, 6}), nullptr, 0.5));
      for (DType b : {DType::Float32, DType::Float16, DType::BFloat16}) {
        const StridedLayout row{b, {4, 6}, {0, 1}};
        add(compare_kernel(op, contiguous(DType::Bool, {4, 6}), contiguous(a, {4, 6}), &row, 0));
      }
    }
  for (const char* op : {"+", "-", "*", "&", "|", "^", "<", "<=", ">", ">=", "==", "!="})
    for (DType t : {DType::Int64, DType::Int32, DType::Bool}) {
      const bool bitwise = op[0] == '&' || op[0] == '|' || op[0] == '^';
      const bool compare = !bitwise && op[0] != '+' && op[0] != '-' && op[0] != '*';
      if (t == DType::Bool && !bitwise) continue;
      const StridedLayout out = contiguous(compare ? DType::Bool : t, {4, 6});
      const StridedLayout b{t, {4, 6}, {1, 0}};
      add(integer_binary_kernel(op, out, contiguous(t, {4, 6}), &b, 0, -3));
      add(integer_binary_kernel(op, out, contiguous(t, {4, 6}), nullptr, 7, 2));
    }
  if (::testing::Test::HasFatalFailure()) return;
  std::set<std::string> ranks, index_types;
  for (const GeneratedKernel& k : ks) {
    EXPECT_EQ(k.header, "kiln/strided.cuh") << k.identity();
    ranks.insert(k.targs.back());
    index_types.insert(k.targs[k.targs.size() - 2]);
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"1", "2", "3", "4", "5", "6"}));
  EXPECT_EQ(index_types, (std::set<std::string>{"int", "long long"}));
  expect_compiles_both_ways(ks, [](const GeneratedKernel& k) { return k.templ + k.targs.back(); });
}

// torch.gather along each dim of ranks 1 to 4; torch.index with 1 to 4 index
// tensors of mixed index types; the rotary embedding over ranks 2 to 4;
// every reduction over kept and reduced ranks 0 to 3; every pooling kind,
// channels inner or not, over the window geometries of image models; each in
// every floating type.
TEST(KernelTemplates, EveryGatherRotaryReduceAndPoolInstantiationCompiles) {
  std::vector<GeneratedKernel> ks;
  auto add = [&ks](Expected<GeneratedKernel> k) {
    ASSERT_TRUE(k.has_value()) << k.status().message();
    ks.push_back(*k);
  };
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    for (size_t r = 1; r <= 4; ++r)
      for (size_t dim = 0; dim < r; ++dim)
        for (DType i : {DType::Int64, DType::Int32}) {
          const std::vector<int64_t> sizes(r, 3);
          add(gather_kernel(contiguous(t, sizes), contiguous(t, sizes), contiguous(i, sizes),
                            static_cast<int64_t>(dim), 5));
        }
    // x [2, 3, 4, 5] indexed along dims 1.. by `count` index tensors broadcast to [6].
    for (int64_t count = 1; count <= 3; ++count) {
      std::vector<int64_t> out_sizes{2, 6};
      for (int64_t d = 1 + count; d < 4; ++d) out_sizes.push_back(2 + d);
      std::vector<StridedLayout> idx;
      for (int64_t m = 0; m < count; ++m) {
        StridedLayout l{m % 2 == 0 ? DType::Int64 : DType::Int32, out_sizes,
                        std::vector<int64_t>(out_sizes.size(), 0)};
        l.strides[1] = 1;
        idx.push_back(l);
      }
      add(index_kernel(contiguous(t, out_sizes), contiguous(t, {2, 3, 4, 5}), idx, 1, 1, 6));
    }
    {
      std::vector<StridedLayout> idx;
      for (int64_t m = 0; m < 4; ++m) idx.push_back(StridedLayout{DType::Int64, {6}, {1}});
      add(index_kernel(contiguous(t, {6}), contiguous(t, {2, 3, 4, 5}), idx, 0, 1, 6));
    }
    if (t != DType::Float64)
      for (size_t r = 2; r <= 4; ++r) {
        std::vector<int64_t> sizes(r, 3);
        sizes.back() = 8;
        StridedLayout table = contiguous(t, sizes);
        for (size_t d = 0; d + 1 < r; ++d) table.strides[d] = d == 0 ? 0 : table.strides[d];
        add(rotary_kernel(contiguous(t, sizes), contiguous(t, sizes), table, table));
      }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin})
      for (size_t kept = 0; kept <= 3; ++kept)
        for (size_t red = 1; red <= 3; ++red) {
          ReduceDims d;
          d.kept_sizes.assign(kept, 2);
          d.kept_strides.assign(kept, 5);
          d.reduced_sizes.assign(red, 3);
          d.reduced_strides.assign(red, 1);
          add(reduce_kernel(op, t, d));
        }
    const StridedLayout nchw = contiguous(t, {2, 4, 9, 9});
    const StridedLayout nhwc{t, {2, 4, 9, 9}, {324, 1, 36, 4}};
    for (const StridedLayout* in : {&nchw, &nhwc}) {
      PoolParams mx{PoolParams::Kind::kMax, 3, 3, 2, 2, 1, 1, 1, 1};
      add(pool2d_kernel(mx, contiguous(t, {2, 4, 5, 5}), *in));
      PoolParams avg{PoolParams::Kind::kAvg, 2, 2, 2, 2, 0, 0, 1, 1, false};
      add(pool2d_kernel(avg, contiguous(t, {2, 4, 4, 4}), *in));
      avg.count_include_pad = true;
      avg.divisor_override = 3;
      add(pool2d_kernel(avg, contiguous(t, {2, 4, 4, 4}), *in));
      PoolParams adaptive{PoolParams::Kind::kAdaptiveAvg};
      add(pool2d_kernel(adaptive, contiguous(t, {2, 4, 1, 1}), *in));
    }
  }
  // Integer and bool reductions: sums to int64, max and min in the input's type.
  for (DType in : {DType::Bool, DType::UInt8, DType::Int32, DType::Int64})
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin})
      for (size_t kept = 0; kept <= 2; ++kept) {
        ReduceDims d;
        d.kept_sizes.assign(kept, 2);
        d.kept_strides.assign(kept, 5);
        d.reduced_sizes.assign(2, 3);
        d.reduced_strides.assign(2, 1);
        add(reduce_int_kernel(op, op == ReduceOp::kSum ? DType::Int64 : in, in, d));
      }
  EXPECT_FALSE(reduce_int_kernel(ReduceOp::kMean, DType::Int64, DType::Int64, {}).has_value());
  EXPECT_FALSE(reduce_int_kernel(ReduceOp::kSum, DType::Int32, DType::Int32, {}).has_value());
  // argmax / argmin of every dtype, over one dim or all; cumsum keeping a
  // floating dtype, integers and bool to int64.
  for (DType in : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Bool, DType::UInt8,
                   DType::Int32, DType::Int64}) {
    for (bool is_max : {true, false})
      for (size_t kept : {0, 2}) {
        ReduceDims d;
        d.kept_sizes.assign(kept, 2);
        d.kept_strides.assign(kept, 5);
        d.reduced_sizes.assign(kept == 0 ? 2 : 1, 3);
        d.reduced_strides.assign(kept == 0 ? 2 : 1, 1);
        add(arg_reduce_kernel(is_max, in, d));
      }
    add(cumsum_kernel(is_floating(in) ? in : DType::Int64, in, 2, 7, 3));
    add(cumsum_kernel(is_floating(in) ? in : DType::Int64, in, 2, 7, 3, ScanOp::kProd));
    if (is_floating(in)) add(cumsum_kernel(in, in, 2, 7, 3, ScanOp::kLogSumExp));
  }
  EXPECT_FALSE(cumsum_kernel(DType::Float32, DType::Int32, 1, 4, 1).has_value());
  EXPECT_FALSE(cumsum_kernel(DType::Float16, DType::Float32, 1, 4, 1).has_value());
  EXPECT_FALSE(cumsum_kernel(DType::Int64, DType::Int32, 1, 4, 1, ScanOp::kLogSumExp).has_value());
  if (::testing::Test::HasFatalFailure()) return;
  std::set<std::string> templates;
  for (const GeneratedKernel& k : ks) templates.insert(k.templ);
  EXPECT_EQ(templates, (std::set<std::string>{"kiln::gather", "kiln::index1", "kiln::index2", "kiln::index3",
                                              "kiln::index4", "kiln::rotary", "kiln::reduce", "kiln::reduce_int",
                                              "kiln::pool2d", "kiln::arg_reduce", "kiln::cumsum"}));
  expect_compiles_both_ways(ks, [](const GeneratedKernel& k) { return k.templ + k.targs[0]; });
}

// Pools over 3 spatial dims (with indices too), products, insertion points,
// histc, grid sampling, segment reductions and orderings, in each dtype each
// takes.
TEST(KernelTemplates, EveryPoolSearchSampleSegmentAndOrderInstantiationCompiles) {
  std::vector<GeneratedKernel> ks;
  auto add = [&ks](Expected<GeneratedKernel> k) {
    ASSERT_TRUE(k.has_value()) << k.status().message();
    ks.push_back(*k);
  };
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    const StridedLayout in = contiguous(t, {2, 3, 5, 6, 7});
    Pool3dParams mx;
    mx.k = {2, 3, 3};
    mx.stride = {1, 2, 2};
    mx.pad = {0, 1, 1};
    add(pool3d_kernel(mx, contiguous(t, {2, 3, 4, 3, 4}), in, true));
    add(pool3d_kernel(mx, contiguous(t, {2, 3, 4, 3, 4}), in, false));
    Pool3dParams avg = mx;
    avg.kind = Pool3dParams::Kind::kAvg;
    avg.count_include_pad = false;
    add(pool3d_kernel(avg, contiguous(t, {2, 3, 4, 3, 4}), in, false));
    for (auto kind : {Pool3dParams::Kind::kAdaptiveAvg, Pool3dParams::Kind::kAdaptiveMax}) {
      Pool3dParams a;
      a.kind = kind;
      add(pool3d_kernel(a, contiguous(t, {2, 3, 2, 2, 2}), in, kind == Pool3dParams::Kind::kAdaptiveMax));
    }
    ReduceDims d;
    d.kept_sizes = {2};
    d.kept_strides = {3};
    d.reduced_sizes = {3};
    d.reduced_strides = {1};
    add(reduce_kernel(ReduceOp::kProd, t, d));
    add(histogram_range_kernel(t, 0.0, 0.0, 40));
    add(histogram_kernel(t, 7, 40, t == DType::Float32));
    for (int mode : {0, 1, 2})
      for (int padding : {0, 1, 2}) {
        add(grid_sampler_kernel(t, t, {2, 3, 6, 7}, 20, mode, padding, padding == 1));
        if (mode < 2) add(grid_sampler_kernel(t, DType::Float32, {2, 3, 4, 6, 7}, 24, mode, padding, false));
      }
    for (int reduce = 0; reduce <= 4; ++reduce)
      add(segment_reduce_kernel(t, reduce, reduce % 2 == 1, reduce == 4 ? std::optional<double>(2.0) : std::nullopt, 2,
                                12, 3, 4, 1));
  }
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int64, DType::Int32}) {
    for (bool sorter : {false, true}) add(search_sorted_kernel(DType::Int64, t, 9, 5, 20, sorter, sorter, 1));
    add(search_sorted_kernel(DType::Int32, t, 9, 0, 20, true, false, 1));
    add(isin_kernel(t, t, 20, 7, t == DType::Int32));
    for (int mode = 0; mode <= 3; ++mode)
      for (bool descending : {false, true}) add(order_kernel(t, mode, descending, 3, mode == 0 ? 700 : 9, 2, 3));
  }
  for (DType in : {DType::Bool, DType::Int32, DType::Int64}) {
    ReduceDims d;
    d.reduced_sizes = {3};
    d.reduced_strides = {1};
    add(reduce_int_kernel(ReduceOp::kProd, DType::Int64, in, d));
  }
  EXPECT_FALSE(order_kernel(DType::Float32, 0, false, 1, 2049, 1, 2049).has_value());
  EXPECT_FALSE(order_kernel(DType::Bool, 0, false, 1, 8, 1, 8).has_value());
  EXPECT_FALSE(grid_sampler_kernel(DType::Float32, DType::Float32, {1, 1, 2, 2, 2}, 8, 2, 0, false).has_value());
  EXPECT_FALSE(search_sorted_kernel(DType::Float32, DType::Float32, 9, 0, 9, false, false, 1).has_value());
  if (::testing::Test::HasFatalFailure()) return;
  std::set<std::string> templates;
  for (const GeneratedKernel& k : ks) templates.insert(k.templ);
  EXPECT_EQ(templates, (std::set<std::string>{"kiln::pool3d", "kiln::pool3d_indices", "kiln::reduce",
                                              "kiln::reduce_int", "kiln::histogram_range", "kiln::histogram_counts",
                                              "kiln::grid_sampler", "kiln::segment_reduce", "kiln::search_sorted",
                                              "kiln::search_sorted_by", "kiln::order_slices", "kiln::isin"}));
  expect_compiles_both_ways(ks, [](const GeneratedKernel& k) { return k.templ + k.targs[0]; });
}

// Attention: a warp per row and on tensor cores, in each type each takes,
// causal or not, with each kind of mask, over the head sizes each takes; a
// row kernel whose tiles would not fit in shared memory is refused by name.
TEST(KernelTemplates, EveryAttentionInstantiationCompiles) {
  std::vector<GeneratedKernel> ks;
  auto add = [&ks](Expected<GeneratedKernel> k) {
    ASSERT_TRUE(k.has_value()) << k.status().message();
    ks.push_back(*k);
  };
  auto params = [](DType t, int64_t e, int64_t ev, bool causal, std::optional<DType> mask) {
    AttentionParams p;
    p.q = contiguous(t, {1, 4, 70, e});
    p.k = contiguous(t, {1, 2, 90, e});
    p.v = contiguous(t, {1, 2, 90, ev});
    p.causal = causal;
    p.scale = 0.125;
    if (mask) {
      p.has_mask = true;
      p.mask = StridedLayout{*mask, {1, 4, 70, 90}, {0, 0, 90, 1}};
    }
    return p;
  };
  const std::vector<std::optional<DType>> masks{std::nullopt, DType::Bool, DType::Float32, DType::Float16,
                                                DType::BFloat16};
  // A row at a time: every type, mask and causality at one head size; head
  // sizes from 1 to the most shared memory holds (Ev 200 with E 64) at one.
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16})
    for (bool causal : {false, true})
      for (const auto& m : masks) add(attention_kernel(params(t, 64, 64, causal, m)));
  for (auto [e, ev] : {std::pair<int64_t, int64_t>{1, 1}, {16, 8}, {33, 64}, {128, 128}, {64, 200}})
    add(attention_kernel(params(DType::Float16, e, ev, true, DType::Bool)));
  auto too_big = attention_kernel(params(DType::Float32, 256, 256, false, std::nullopt));
  ASSERT_FALSE(too_big.has_value());
  EXPECT_EQ(too_big.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(too_big.status().message().find("shared memory"), std::string::npos) << too_big.status().message();
  // On tensor cores: every type, mask and causality at head size 64; every head size at one.
  for (DType t : {DType::Float16, DType::BFloat16})
    for (bool causal : {false, true})
      for (const auto& m : masks)
        add(flash_attention_kernel(params(t, 64, 64, causal, m), contiguous(t, {1, 4, 70, 64})));
  for (int64_t e = 16; e <= 128; e += 16)
    add(flash_attention_kernel(params(DType::BFloat16, e, e, false, std::nullopt),
                               contiguous(DType::BFloat16, {1, 4, 70, e})));
  if (::testing::Test::HasFatalFailure()) return;
  expect_compiles_both_ways(
      ks, [](const GeneratedKernel& k) { return k.templ + k.targs[0] + k.targs[k.targs.size() - 1]; });
}

// Sizes become template arguments (a run-time size reads KilnDims, which the
// kernel then takes): no kernel text is edited or generated.
TEST(KernelTemplates, AnInstanceNamesItsSizesAndWhichAreReadAtRunTime) {
  GemvShape g;
  g.dtype = DType::Float16;
  g.m = 2;
  g.n = g.ldc = 64;
  g.k = g.lda = g.ldw = 128;
  auto k = gemv_kernel(g);
  ASSERT_TRUE(k.has_value());
  EXPECT_TRUE(k->source.empty());
  auto fixed = kernel_instance(*k, {});
  ASSERT_TRUE(fixed.has_value());
  EXPECT_EQ(*fixed,
            "kiln::gemv<__half, 2, 1, 0, kiln::Sizes<0x0ULL, 64LL, 128LL, 16LL, 128LL, 64LL, 1065353216LL, 2LL>>");
  auto some = kernel_instance(*k, {true, false, false, false, true});
  ASSERT_TRUE(some.has_value());
  EXPECT_EQ(*some,
            "kiln::gemv<__half, 2, 1, 0, kiln::Sizes<0x11ULL, 0LL, 128LL, 16LL, 128LL, 0LL, 1065353216LL, 2LL>, "
            "KilnDims>");
  EXPECT_FALSE(kernel_definition(*k, "k0", {}).has_value());  // not text
  EXPECT_NE(k->identity().find("kiln/gemv.cuh:kiln::gemv<__half, 2, 1, 0>"), std::string::npos) << k->identity();
}

}  // namespace
}  // namespace kiln::cuda
