// The generated kernels compile with NVRTC for sm_90 (no GPU needed), and
// their launch shapes and parameters follow the documented contract.
#include "backends/cuda/kernel_source.h"

#include <gtest/gtest.h>

#include "backends/cuda/cuda_builder.h"
#include "backends/cuda/nvrtc_compile.h"

namespace kiln::cuda {
namespace {

StridedLayout contiguous(DType t, std::vector<int64_t> sizes) {
  StridedLayout l{t, sizes, std::vector<int64_t>(sizes.size(), 1)};
  for (size_t d = sizes.size(); d-- > 1;) l.strides[d - 1] = l.strides[d] * sizes[d];
  return l;
}

// Joins kernels into one module as the builder does (compile_kernels) and
// compiles it, with every size compiled in or every size (up to
// kMaxKernelDims) read at run time.
Expected<CompiledModule> compile_all(const std::vector<GeneratedKernel>& ks, bool sizes_at_run_time = false) {
  std::vector<KernelChoice> choices;
  std::vector<std::string> names;
  for (size_t i = 0; i < ks.size(); ++i) {
    choices.emplace_back(ks[i], std::vector<bool>(std::min(ks[i].dims.size(), kMaxKernelDims), sizes_at_run_time));
    names.push_back("k" + std::to_string(i));
  }
  std::vector<const KernelChoice*> all;
  for (const KernelChoice& c : choices) all.push_back(&c);
  return compile_kernels(all, names, "sm_90");
}

TEST(KernelSource, EveryGeneratorCompilesForSm90) {
  std::vector<GeneratedKernel> ks;
  // Every op elementwise programs know, in each floating dtype, with a broadcast operand.
  auto prog = engine::ElementwiseProgram::parse(
      "inputs 2; %2 = aten.add.Tensor(%0, %1, 2); %3 = aten.sub.Scalar(%2, 0.5, 1); %4 = aten.rsub.Scalar(%3, 1, 1); "
      "%5 = aten.mul.Tensor(%4, %1); %6 = aten.mul.Scalar(%5, 3); %7 = aten.div.Tensor(%6, %1); "
      "%8 = aten.div.Scalar(%7, 7); %9 = aten.pow.Tensor_Scalar(%8, 2); %10 = aten.pow.Tensor_Scalar(%9, 1.5); "
      "%11 = aten.neg.default(%10); %12 = aten.abs.default(%11); %13 = aten.exp.default(%12); "
      "%14 = aten.log.default(%13); %15 = aten.sqrt.default(%14); %16 = aten.rsqrt.default(%15); "
      "%17 = aten.reciprocal.default(%16); %18 = aten.sin.default(%17); %19 = aten.cos.default(%18); "
      "%20 = aten.tanh.default(%19); %21 = aten.erf.default(%20); %22 = aten.sigmoid.default(%21); "
      "%23 = aten.relu.default(%22); %24 = aten.gelu.default(%23, 'none'); %25 = aten.gelu.default(%24, 'tanh'); "
      "%26 = aten.silu.default(%25); %27 = aten.hardtanh.default(%26, -1, 1); %28 = aten.hardswish.default(%27); "
      "%29 = aten.hardsigmoid.default(%28); %30 = aten.clamp.default(%29, -inf, 2); "
      "%31 = aten.clamp_min.default(%30, 0.25); %32 = kiln.silu_mul(%31, %0)");
  ASSERT_TRUE(prog.has_value()) << prog.status().message();
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    StridedLayout out = contiguous(t, {4, 8, 16});
    StridedLayout bcast{t, {4, 8, 16}, {0, 16, 1}};
    auto k = elementwise_kernel(*prog, out, {out, bcast});
    ASSERT_TRUE(k.has_value()) << k.status().message();
    ks.push_back(*k);
  }
  for (auto [to, from] : {std::pair{DType::Float16, DType::Float32}, std::pair{DType::Float32, DType::BFloat16},
                          std::pair{DType::Int64, DType::Float16}, std::pair{DType::Bool, DType::Float32},
                          std::pair{DType::Float16, DType::Bool}, std::pair{DType::Int64, DType::Int64}}) {
    StridedLayout in{from, {2, 3, 5}, {1, 2, 6}};  // transposed-ish
    auto k = copy_kernel(contiguous(to, {2, 3, 5}), in);
    ASSERT_TRUE(k.has_value()) << k.status().message();
    ks.push_back(*k);
  }
  for (RowOp op : {RowOp::kLayerNorm, RowOp::kRmsNorm, RowOp::kSoftmax, RowOp::kLogSoftmax})
    for (DType t : {DType::Float32, DType::Float16, DType::Float64}) {
      const bool norm = op == RowOp::kLayerNorm || op == RowOp::kRmsNorm;
      auto k = row_kernel(op, t, 10, 768, 1e-5, norm, op == RowOp::kLayerNorm);
      ASSERT_TRUE(k.has_value()) << k.status().message();
      ks.push_back(*k);
    }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
    auto k = reduce_kernel(op, DType::Float16, {{2, 64}, {64 * 49, 1}, {7, 7}, {7 * 64, 64}});
    ASSERT_TRUE(k.has_value()) << k.status().message();
    ks.push_back(*k);
  }
  for (auto kind : {PoolParams::Kind::kMax, PoolParams::Kind::kAvg, PoolParams::Kind::kAdaptiveAvg}) {
    PoolParams p;
    p.kind = kind;
    p.kh = p.kw = 3;
    p.sh = p.sw = 2;
    p.ph = p.pw = 1;
    StridedLayout in{DType::Float16, {2, 8, 16, 16}, {2048, 1, 128, 8}};
    auto k = pool2d_kernel(p, contiguous(DType::Float16, {2, 8, 8, 8}), in);
    ASSERT_TRUE(k.has_value()) << k.status().message();
    ks.push_back(*k);
  }
  AttentionParams a;
  a.q = {DType::Float16, {2, 8, 10, 64}, {8 * 640, 64, 512, 1}};
  a.k = contiguous(DType::Float16, {2, 2, 12, 64});
  a.v = contiguous(DType::Float16, {2, 2, 12, 32});
  a.has_mask = true;
  a.mask = {DType::Bool, {2, 8, 10, 12}, {0, 0, 12, 1}};
  a.scale = 0.125;
  auto att = attention_kernel(a);
  ASSERT_TRUE(att.has_value()) << att.status().message();
  EXPECT_EQ(att->grid[1], 16u);  // batch x heads
  ks.push_back(*att);
  a.has_mask = false;
  a.causal = true;
  ks.push_back(*attention_kernel(a));
  {
    // Tensor-core attention: q read from [B, L, H, E] storage, grouped heads,
    // float16 with a float mask and bfloat16 causal with a bool mask.
    AttentionParams f;
    f.q = {DType::Float16, {2, 8, 70, 64}, {8 * 70 * 64, 64, 512, 1}};
    f.k = contiguous(DType::Float16, {2, 2, 90, 64});
    f.v = contiguous(DType::Float16, {2, 2, 90, 64});
    f.has_mask = true;
    f.mask = {DType::Float16, {2, 8, 70, 90}, {90, 0, 0, 1}};
    f.scale = 0.125;
    const StridedLayout fo{DType::Float16, {2, 8, 70, 64}, {8 * 70 * 64, 64, 512, 1}};
    ASSERT_TRUE(flash_attention_fits(f, fo));
    auto fk = flash_attention_kernel(f, fo);
    ASSERT_TRUE(fk.has_value()) << fk.status().message();
    EXPECT_EQ(fk->grid[0], 2u);  // 64 query rows per block
    EXPECT_EQ(fk->grid[1], 8u);
    EXPECT_EQ(fk->grid[2], 2u);
    ks.push_back(*fk);
    for (StridedLayout* t : {&f.q, &f.k, &f.v}) t->dtype = DType::BFloat16;
    StridedLayout bo = fo;
    bo.dtype = DType::BFloat16;
    f.mask = {DType::Bool, {2, 8, 70, 90}, {0, 0, 90, 1}};
    f.causal = true;
    auto bk = flash_attention_kernel(f, bo);
    ASSERT_TRUE(bk.has_value()) << bk.status().message();
    ks.push_back(*bk);
    // Too few blocks of 64 rows (32) for 132 multiprocessors: blocks of 16
    // rows, each row group's keys split between the block's 4 warps.
    auto sk = flash_attention_kernel(f, bo, 132);
    ASSERT_TRUE(sk.has_value()) << sk.status().message();
    EXPECT_EQ(sk->grid[0], 5u);
    EXPECT_EQ(sk->block[0], 128u);
    EXPECT_NE(sk->targs, bk->targs);
    ks.push_back(*sk);
    // As many blocks as multiprocessors: 64 rows a block, as without a count.
    auto hk = flash_attention_kernel(f, bo, 32);
    ASSERT_TRUE(hk.has_value()) << hk.status().message();
    EXPECT_EQ(hk->grid[0], 2u);
    EXPECT_EQ(hk->targs, bk->targs);
    // What it does not take: float32, a value head size of its own, head sizes off 16, odd strides.
    AttentionParams w = f;
    w.v = contiguous(DType::BFloat16, {2, 2, 90, 32});
    EXPECT_FALSE(flash_attention_fits(w, bo));
    w = f;
    for (StridedLayout* t : {&w.q, &w.k, &w.v}) t->dtype = DType::Float32;
    EXPECT_FALSE(flash_attention_fits(w, {DType::Float32, bo.sizes, bo.strides}));
    w = f;
    w.q = contiguous(DType::BFloat16, {2, 8, 70, 40});
    w.k = contiguous(DType::BFloat16, {2, 2, 90, 40});
    w.v = contiguous(DType::BFloat16, {2, 2, 90, 40});
    EXPECT_FALSE(flash_attention_fits(w, contiguous(DType::BFloat16, {2, 8, 70, 40})));
    w = f;
    w.k.strides = {2 * 90 * 65, 90 * 65, 65, 1};
    EXPECT_FALSE(flash_attention_fits(w, bo));
    EXPECT_FALSE(flash_attention_kernel(w, bo).has_value());
  }
  {
    // Decode attention in chunks of 64 keys: one new token, 4 query heads per
    // key head (bfloat16, a bool mask over a static cache of 1000), float32
    // with two rows per head, causal and unmasked; then the merge.
    AttentionParams d;
    d.q = {DType::BFloat16, {1, 32, 1, 64}, {2048, 64, 2048, 1}};
    d.k = contiguous(DType::BFloat16, {1, 8, 1000, 64});
    d.v = contiguous(DType::BFloat16, {1, 8, 1000, 64});
    d.has_mask = true;
    d.mask = {DType::Bool, {1, 32, 1, 1000}, {0, 0, 0, 1}};
    d.scale = 0.125;
    const StridedLayout dout = contiguous(DType::BFloat16, {1, 32, 1, 64});
    ASSERT_TRUE(decode_attention_fits(d, dout));
    EXPECT_EQ(decode_attention_part_floats(d), 8 * 16 * 4 * 66);
    auto dk = decode_attention_kernels(d, dout);
    ASSERT_TRUE(dk.has_value()) << dk.status().message();
    EXPECT_EQ((*dk)[0].grid, (std::array<uint32_t, 3>{16, 8, 1}));  // chunks x key heads x batch
    EXPECT_EQ((*dk)[1].grid[0], 8u);                                // 32 rows, 4 a block
    ks.push_back((*dk)[0]);
    ks.push_back((*dk)[1]);
    AttentionParams f = d;
    for (StridedLayout* t : {&f.q, &f.k, &f.v})
      *t = contiguous(DType::Float32, {1, t == &f.q ? 4 : 2, t == &f.q ? 2 : 70, 32});
    f.has_mask = false;
    f.causal = true;
    const StridedLayout fout = contiguous(DType::Float32, {1, 4, 2, 32});
    auto fk = decode_attention_kernels(f, fout);
    ASSERT_TRUE(fk.has_value()) << fk.status().message();
    ks.push_back((*fk)[0]);
    ks.push_back((*fk)[1]);
    // What it leaves to the other kernels: 16 query rows, more than 16 rows per key head, float32 heads above 64.
    AttentionParams w = d;
    w.q.sizes = {1, 32, 16, 64};
    EXPECT_FALSE(decode_attention_fits(w, contiguous(DType::BFloat16, {1, 32, 16, 64})));
    w.q.sizes = {1, 32, 5, 64};
    EXPECT_FALSE(decode_attention_fits(w, contiguous(DType::BFloat16, {1, 32, 5, 64})));
    w = f;
    for (StridedLayout* t : {&w.q, &w.k, &w.v}) t->sizes[3] = 80;
    EXPECT_FALSE(decode_attention_fits(w, contiguous(DType::Float32, {1, 4, 2, 80})));
  }
  {
    // Norms: a warp per row with 16-byte vectors, with and without a folded
    // residual add (and its sum written); a block per row where vectors do not fit.
    NormRows n;
    n.dtype = DType::Float16;
    n.rows = 4096;
    n.cols = 768;
    n.eps = 1e-12;
    n.has_weight = n.has_bias = true;
    n.residual = n.write_sum = n.vectorized = true;
    ASSERT_TRUE(norm_rows_vector_fits(n.dtype, n.cols));
    auto v = norm_rows_kernel(n);
    ASSERT_TRUE(v.has_value()) << v.status().message();
    EXPECT_EQ(v->grid[0], 1024u);  // four rows per block
    ks.push_back(*v);
    n.op = RowOp::kRmsNorm;
    n.dtype = DType::Float32;
    n.has_bias = n.write_sum = false;
    ks.push_back(*norm_rows_kernel(n));
    n.vectorized = false;
    n.cols = 34;
    n.write_sum = true;
    EXPECT_FALSE(norm_rows_vector_fits(DType::Float16, 36));
    EXPECT_FALSE(norm_rows_vector_fits(DType::Float32, 32 * 4 * kNormVectorsPerLane + 4));
    ks.push_back(*norm_rows_kernel(n));
    n.residual = false;
    EXPECT_FALSE(norm_rows_kernel(n).has_value());  // a sum without a residual
    n.write_sum = false;
    n.vectorized = true;
    EXPECT_FALSE(norm_rows_kernel(n).has_value());  // 34 float32 columns are not whole vectors
  }
  {
    // A contiguous elementwise program: 16-byte vectors, a quarter of the blocks.
    engine::ElementwiseProgram prog;
    prog.num_inputs = 2;
    prog.instrs.push_back({ir::OpKind::kAddTensor, {0, 1}, {1.0}, ""});
    prog.instrs.push_back({ir::OpKind::kGelu, {2}, {}, "none"});
    const StridedLayout flat = contiguous(DType::BFloat16, {64, 768});
    auto e = elementwise_kernel(prog, flat, {flat, flat});
    ASSERT_TRUE(e.has_value()) << e.status().message();
    EXPECT_NE(e->source.find("uint4"), std::string::npos);
    EXPECT_EQ(e->grid[0], 64u * 768 / 8 / 256);
    ks.push_back(*e);
  }
  {
    // An image's 3 channels (NCHW) into channels-last storage of 8.
    auto pc = pad_channels_kernel(contiguous(DType::Float16, {2, 3, 224, 224}), 8);
    ASSERT_TRUE(pc.has_value()) << pc.status().message();
    ks.push_back(*pc);
    EXPECT_FALSE(pad_channels_kernel(contiguous(DType::Float16, {2, 16, 4, 4}), 8).has_value());
  }
  auto g = gather_rows_kernel(DType::BFloat16, DType::Int64, 128, 30522, 768, 1);
  ASSERT_TRUE(g.has_value()) << g.status().message();
  ks.push_back(*g);

  auto gd = gather_kernel(contiguous(DType::Int64, {1, 128}), {DType::Int64, {1, 512}, {512, 1}},
                          {DType::Int64, {1, 128}, {0, 1}}, 1, 2);
  ASSERT_TRUE(gd.has_value()) << gd.status().message();
  ks.push_back(*gd);

  const StridedLayout amask{DType::Bool, {2, 8, 10, 12}, {0, 0, 12, 1}};
  for (const StridedLayout* m : {&amask, static_cast<const StridedLayout*>(nullptr)}) {
    auto sm = attention_softmax_kernel(DType::Float16, 2, 8, 10, 12, m, m == nullptr);
    ASSERT_TRUE(sm.has_value()) << sm.status().message();
    ks.push_back(*sm);
  }
  Im2colParams ip;
  ip.r = ip.s = 3;
  ip.ph = ip.pw = 1;
  ip.oh = ip.ow = 16;
  auto ic = im2col_kernel(ip, {DType::Float16, {1, 8, 16, 16}, {2048, 1, 128, 8}});
  ASSERT_TRUE(ic.has_value()) << ic.status().message();
  ks.push_back(*ic);

  // Row writes (index_copy, KV caches) and integer arithmetic and comparisons (positions, counters).
  auto w = index_copy_kernel(DType::BFloat16, DType::Int64, 8, 2, 64, 1024, 3);
  ASSERT_TRUE(w.has_value()) << w.status().message();
  ks.push_back(*w);
  const StridedLayout pos = contiguous(DType::Int64, {1, 4});
  const StridedLayout len{DType::Int64, {1, 4}, {0, 0}};
  for (const char* op : {"+", "-", "*", "<=", "=="}) {
    const bool cmp = op[0] == '<' || op[0] == '=';
    const StridedLayout out = contiguous(cmp ? DType::Bool : DType::Int64, {1, 4});
    auto k = integer_binary_kernel(op, out, pos, &len, 0, 2);
    ASSERT_TRUE(k.has_value()) << k.status().message();
    ks.push_back(*k);
    auto ks2 = integer_binary_kernel(op, out, pos, nullptr, -7, 1);
    ASSERT_TRUE(ks2.has_value()) << ks2.status().message();
    ks.push_back(*ks2);
  }

  // The folded RMSNorm of 16-bit models, and rotary embeddings over a transposed view with broadcast cos/sin.
  for (DType t : {DType::Float16, DType::BFloat16}) {
    auto k = rms_norm_cast_kernel(t, 3, 2048, 1e-5);
    ASSERT_TRUE(k.has_value()) << k.status().message();
    ks.push_back(*k);
  }
  for (DType t : {DType::Float32, DType::BFloat16}) {
    const StridedLayout out = contiguous(t, {1, 32, 1, 64});
    const StridedLayout x{t, {1, 32, 1, 64}, {2048, 64, 2048, 1}};
    const StridedLayout cs{t, {1, 32, 1, 64}, {64, 0, 64, 1}};
    auto k = rotary_kernel(out, x, cs, cs);
    ASSERT_TRUE(k.has_value()) << k.status().message();
    ks.push_back(*k);
  }
  // Matrix-vector products: one row and several, k split among warps or not, every epilogue.
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16}) {
    for (const char* act : {"none", "relu", "gelu"}) {
      GemvShape g;
      g.dtype = t;
      g.m = act[0] == 'n' ? 1 : 4;
      g.n = act[0] == 'g' ? 128256 : 24;
      g.k = g.lda = g.ldw = 2048;
      g.ldc = g.n;
      g.alpha = act[0] == 'r' ? 0.125f : 1.0f;
      g.has_bias = act[0] != 'n';
      g.activation = act;
      ASSERT_TRUE(gemv_fits(g));
      auto k = gemv_kernel(g);
      ASSERT_TRUE(k.has_value()) << k.status().message();
      EXPECT_EQ(k->block[0], 256u);
      ks.push_back(*k);
    }
  }

  auto m = compile_all(ks);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  EXPECT_GT(m->cubin.size(), 1000u);
  // Every generator reads its sizes through KD(i) or its kiln::Sizes, so the
  // same kernel compiles with all of them as run-time values.
  for (const GeneratedKernel& k : ks) EXPECT_FALSE(k.dims.empty()) << k.identity();
  auto r = compile_all(ks, true);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_GT(r->cubin.size(), 1000u);
}

// torch.where (with a converted value dtype), torch.index with index
// tensors (BERT's attention-mask rows), and bool & and |: their generated
// text compiles with NVRTC, also with every size read at run time.
TEST(KernelSource, WhereIndexAndBoolBitwiseCompileForSm90) {
  std::vector<GeneratedKernel> ks;
  StridedLayout out = contiguous(DType::Float16, {2, 1, 6, 6});
  StridedLayout cond{DType::Bool, {2, 1, 6, 6}, {6, 0, 0, 1}};
  StridedLayout zero{DType::Float32, {2, 1, 6, 6}, {0, 0, 0, 0}};
  auto w = where_kernel(out, cond, zero, StridedLayout{DType::Float16, {2, 1, 6, 6}, {0, 0, 0, 0}});
  ASSERT_TRUE(w.has_value()) << w.status().message();
  ks.push_back(*w);
  // mask [2, 6] indexed by rows [2, 1, 1, 1] and positions [1, 1, 1, 6]: out [2, 1, 1, 6].
  StridedLayout picked = contiguous(DType::Bool, {2, 1, 1, 6});
  StridedLayout rows{DType::Int64, {2, 1, 1, 6}, {1, 0, 0, 0}};
  StridedLayout cols{DType::Int32, {2, 1, 1, 6}, {0, 0, 0, 1}};
  auto ix = index_kernel(picked, contiguous(DType::Bool, {2, 6}), {rows, cols}, 0, 4, 1);
  ASSERT_TRUE(ix.has_value()) << ix.status().message();
  ks.push_back(*ix);
  // x[:, i] with dims kept on both sides: x [4, 5, 3], i [2, 2] -> out [4, 2, 2, 3].
  StridedLayout mid{DType::Int64, {4, 2, 2, 3}, {0, 2, 1, 0}};
  auto ix2 =
      index_kernel(contiguous(DType::BFloat16, {4, 2, 2, 3}), contiguous(DType::BFloat16, {4, 5, 3}), {mid}, 1, 2, 2);
  ASSERT_TRUE(ix2.has_value()) << ix2.status().message();
  ks.push_back(*ix2);
  EXPECT_FALSE(index_kernel(picked, contiguous(DType::Bool, {2, 6}), {rows}, 0, 2, 1).has_value());  // ranks
  for (const char* op : {"&", "|"}) {
    StridedLayout b = contiguous(DType::Bool, {2, 1, 6, 6});
    auto k = integer_binary_kernel(op, b, StridedLayout{DType::Bool, {2, 1, 6, 6}, {6, 0, 0, 1}}, &b, 0, 1);
    ASSERT_TRUE(k.has_value()) << k.status().message();
    ks.push_back(*k);
  }
  EXPECT_FALSE(integer_binary_kernel("+", contiguous(DType::Bool, {3}), contiguous(DType::Bool, {3}), nullptr, 1, 1)
                   .has_value());  // arithmetic on bools
  // Masks from floating scores: against a number, and against a broadcast tensor of another floating dtype.
  auto gt = compare_kernel(">", contiguous(DType::Bool, {4, 6}), contiguous(DType::Float16, {4, 6}), nullptr, 0.25);
  ASSERT_TRUE(gt.has_value()) << gt.status().message();
  ks.push_back(*gt);
  const StridedLayout row{DType::BFloat16, {4, 6}, {0, 1}};
  auto le = compare_kernel("<=", contiguous(DType::Bool, {4, 6}), contiguous(DType::Float32, {4, 6}), &row, 0);
  ASSERT_TRUE(le.has_value()) << le.status().message();
  ks.push_back(*le);
  EXPECT_EQ(gt->templ, "kiln::compare_scalar");
  EXPECT_EQ(gt->targs[1], "2");  // kiln::kGt
  EXPECT_FALSE(compare_kernel("+", contiguous(DType::Bool, {3}), contiguous(DType::Float32, {3}), nullptr, 1)
                   .has_value());  // not a comparison
  EXPECT_FALSE(compare_kernel("<", contiguous(DType::Float32, {3}), contiguous(DType::Float32, {3}), nullptr, 1)
                   .has_value());  // a result other than bool
  EXPECT_FALSE(compare_kernel("<", contiguous(DType::Bool, {3}), contiguous(DType::Int64, {3}), nullptr, 1)
                   .has_value());  // integers go to integer_binary_kernel
  for (bool runtime : {false, true}) {
    auto m = compile_all(ks, runtime);
    ASSERT_TRUE(m.has_value()) << m.status().message();
    EXPECT_FALSE(m->cubin.empty());
  }
}

TEST(KernelSource, SizesAreLiteralsOrRunTimeValuesWithoutEditingTheText) {
  auto prog = engine::ElementwiseProgram::parse("inputs 2; %2 = aten.add.Tensor(%0, %1, 1)");
  ASSERT_TRUE(prog.has_value());
  StridedLayout out = contiguous(DType::Float32, {3, 5, 7});
  StridedLayout bcast{DType::Float32, {3, 5, 7}, {0, 7, 1}};
  auto k = elementwise_kernel(*prog, out, {out, bcast});
  ASSERT_TRUE(k.has_value()) << k.status().message();
  // The broadcast operand keeps two dims apart: the element count and sizes and strides are read as sizes.
  ASSERT_GE(k->dims.size(), 3u);
  EXPECT_EQ(k->dims[0], 105);
  auto fixed = kernel_definition(*k, "add_fixed", {});
  ASSERT_TRUE(fixed.has_value());
  EXPECT_NE(fixed->find("#define KILN_KD_0 (105LL)"), std::string::npos) << *fixed;
  EXPECT_EQ(fixed->find("KilnDims kd"), std::string::npos);
  EXPECT_NE(fixed->find(k->source), std::string::npos);
  std::vector<bool> runtime(k->dims.size(), true);
  auto at_run_time = kernel_definition(*k, "add_runtime", runtime);
  ASSERT_TRUE(at_run_time.has_value());
  EXPECT_NE(at_run_time->find("#define KILN_KD_0 kd.v[0]"), std::string::npos) << *at_run_time;
  EXPECT_NE(at_run_time->find(", const KilnDims kd"), std::string::npos);
  EXPECT_NE(at_run_time->find(k->source), std::string::npos);
  // Both in one module: each definition undoes its macros.
  auto m = compile_cuda_source(kernel_prelude() + *fixed + *at_run_time, "sm_90");
  ASSERT_TRUE(m.has_value()) << m.status().message();
  // A size past the KilnDims capacity cannot be a run-time value.
  GeneratedKernel many = *k;
  many.dims.assign(kMaxKernelDims + 1, 1);
  std::vector<bool> all(kMaxKernelDims + 1, true);
  EXPECT_FALSE(kernel_definition(many, "too_many", all).has_value());
}

TEST(KernelSource, GemvTakesOnlyVectorAlignedFewRowShapes) {
  GemvShape g;
  g.dtype = DType::BFloat16;
  g.m = 1;
  g.n = 10;
  g.k = g.lda = g.ldw = 64;
  g.ldc = 10;
  EXPECT_TRUE(gemv_fits(g));
  GemvShape bad = g;
  bad.k = 60;  // not a whole number of 16-byte vectors
  EXPECT_FALSE(gemv_fits(bad));
  bad = g;
  bad.lda = 68;
  EXPECT_FALSE(gemv_fits(bad));
  bad = g;
  bad.m = kGemvMaxRows + 1;
  EXPECT_FALSE(gemv_fits(bad));
  bad = g;
  bad.dtype = DType::Int32;
  EXPECT_FALSE(gemv_fits(bad));
  bad = g;
  bad.activation = "silu";
  EXPECT_FALSE(gemv_fits(bad));
  EXPECT_FALSE(gemv_kernel(bad).has_value());
  // One column per warp when n fills the device; k split among a block's warps when it does not.
  g.n = g.ldc = 100000;
  g.k = g.lda = g.ldw = 4096;
  auto wide = gemv_kernel(g);
  ASSERT_TRUE(wide.has_value());
  EXPECT_EQ(wide->grid[0], 12500u);
  g.n = g.ldc = 512;
  auto narrow = gemv_kernel(g);
  ASSERT_TRUE(narrow.has_value());
  EXPECT_GT(narrow->grid[0], 64u);
  ASSERT_EQ(narrow->targs.size(), 4u);  // T, M, Split, Act
  EXPECT_NE(narrow->targs[2], "1");     // k split among warps
  // silu(gate) * up over two halves of w: each column reads two rows, so k
  // splits as it would for the product of both halves, and the halves' first
  // rows follow the other sizes.
  GemvShape both = g;
  both.n = both.ldc = 1024;
  GemvShape gated = g;
  gated.n = gated.ldc = 512;
  gated.activation = "swiglu";
  gated.gate_row = 512;
  gated.up_row = 0;
  ASSERT_TRUE(gemv_fits(gated));
  auto product = gemv_kernel(both);
  auto swiglu = gemv_kernel(gated);
  ASSERT_TRUE(product.has_value() && swiglu.has_value());
  EXPECT_EQ(swiglu->targs[2], product->targs[2]);
  EXPECT_EQ(swiglu->targs[3], "3");
  ASSERT_EQ(swiglu->dims.size(), product->dims.size() + 2);
  EXPECT_EQ(swiglu->dims[swiglu->dims.size() - 2], 512);
  EXPECT_EQ(swiglu->dims.back(), 0);
  EXPECT_EQ(swiglu->dims[0], 512);  // output columns
  gated.gate_row = -1;
  EXPECT_FALSE(gemv_fits(gated));
}

TEST(KernelSourceErrors, NvrtcErrorsShowTheSource) {
  auto m = compile_cuda_source("extern \"C\" __global__ void f() { undeclared_name(); }\n", "sm_90");
  ASSERT_FALSE(m.has_value());
  EXPECT_NE(m.status().message().find("undeclared_name"), std::string::npos) << m.status().message();
}

TEST(KernelSourceErrors, MismatchedOperandsAreRefused) {
  auto prog = engine::ElementwiseProgram::parse("inputs 1; %1 = aten.relu.default(%0)");
  ASSERT_TRUE(prog.has_value());
  auto k = elementwise_kernel(*prog, contiguous(DType::Float32, {4}), {contiguous(DType::Float16, {4})});
  ASSERT_FALSE(k.has_value());
  EXPECT_NE(k.status().message().find("dtype"), std::string::npos);
  auto c = copy_kernel(contiguous(DType::Float32, {4}), contiguous(DType::Float32, {5}));
  EXPECT_FALSE(c.has_value());
}

}  // namespace
}  // namespace kiln::cuda
