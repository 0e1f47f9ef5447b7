// The CUDA builder's layers, convolutions: cuDNN, or im2col and a GEMM, with a folded bias and activation.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string_view>

#include "backends/cuda/cuda_layers.h"

namespace kiln::cuda::layers {

namespace {

// The largest patch matrix a convolution is lowered to im2col + GEMM with.
constexpr int64_t kIm2colLimitBytes = int64_t{8} << 20;

// Small convolutions (batch 1 sizes) run as im2col + cuBLASLt GEMM; large ones
// stay on cuDNN, where the patch matrix or the residual copy would cost more
// than cuDNN's own kernels (measured on an H200: resnet50 fp16 batch 1 went
// from 0.78 to 0.47 ms this way, while routing batch-64 layers made it slower).
bool use_im2col_gemm(const ConvShape& s, DType dt) {
  if (!s.channels_last || s.groups != 1) return false;
  const int64_t esize = static_cast<int64_t>(dtype_size(dt));
  const int64_t m = s.n * s.out_h * s.out_w;
  const bool pointwise = s.r == 1 && s.s == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0;
  const int64_t col_bytes = pointwise ? 0 : m * s.r * s.s * s.c * esize;
  const int64_t out_bytes = m * s.k * esize;
  return m <= 16384 && col_bytes <= kIm2colLimitBytes && (!s.has_residual || out_bytes <= (int64_t{2} << 20));
}

// The channel count a 16-bit channels-last convolution's input is padded to when it has fewer.
constexpr int64_t kPaddedChannels = 8;

// Binds `r` ([N, C, H, W], `os`) to n's result; a 1-D convolution's drops
// the unit height again (a view).
Status bind_result(Builder& b, const ir::Node& n, const TRef& r, bool one_d, const std::vector<int64_t>& os) {
  if (!one_d) {
    b.bind(n.outputs[0], r);
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(TRef flat, reshaped(b, r, {os[0], os[1], os[3]}, n.name));
  b.bind(n.outputs[0], flat);
  return Status::ok();
}

bool is_transposed(const ir::Node& n) {
  return n.op == OpKind::kConvTranspose1d || n.op == OpKind::kConvTranspose2d ||
         (n.op == OpKind::kConvolution && bool_arg(n, "transposed"));
}

// A transposed convolution (groups 1) as a GEMM and a gather: the input's
// pixels as rows [N*H*W, Cin] times the filter [Cin, Cout*R*S] give each
// pixel's contributions, and col2im sums, at each output position, those of
// the taps that reach it (plus the bias). No atomics: the same bits every run.
Status emit_conv_transposed(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "input")));
  const bool one_d = x.sizes.size() == 3;
  if (one_d) {
    KILN_ASSIGN_OR_RETURN(x, reshaped(b, x, {x.sizes[0], x.sizes[1], 1, x.sizes[2]}, n.name));
  }
  if (x.sizes.size() != 4)
    return invalid_argument(n.name + ": a transposed convolution of " + shape_to_string(x.sizes));
  const int64_t N = x.sizes[0], C = x.sizes[1], H = x.sizes[2], W = x.sizes[3];
  // The input's pixels as rows of channels: [N, H, W, C] contiguous.
  TRef rows = x;
  rows.sizes = {N, H, W, C};
  rows.strides = {x.strides[0], x.strides[2], x.strides[3], x.strides[1]};
  KILN_ASSIGN_OR_RETURN(rows, b.contiguous(rows, n.name, dt));
  const ir::Value* wv = value_arg(n, "weight");
  TRef w;
  if (b.is_constant(wv)) {
    KILN_ASSIGN_OR_RETURN(w, b.constant(wv, dt));
  } else {
    KILN_ASSIGN_OR_RETURN(w, b.ref(wv));
    KILN_ASSIGN_OR_RETURN(w, b.contiguous(w, n.name, dt));
  }
  if (one_d && w.sizes.size() == 3) {
    KILN_ASSIGN_OR_RETURN(w, reshaped(b, w, {w.sizes[0], w.sizes[1], 1, w.sizes[2]}, n.name));
  }
  auto pair = [&](std::string_view name, int64_t def) {
    auto v = ints_arg(n, name).value_or(std::vector<int64_t>{def});
    if (v.empty()) v = {def};
    if (one_d) return std::make_pair(name == "stride" || name == "dilation" ? int64_t{1} : int64_t{0}, v[0]);
    return std::make_pair(v[0], v.size() > 1 ? v[1] : v[0]);
  };
  Col2imParams p;
  p.dtype = dt;
  p.n = N, p.h = H, p.w = W;
  std::tie(p.sh, p.sw) = pair("stride", 1);
  std::tie(p.ph, p.pw) = pair("padding", 0);
  std::tie(p.dh, p.dw) = pair("dilation", 1);
  const auto [oph, opw] = pair("output_padding", 0);
  std::vector<int64_t> os = static_sizes(out);
  if (one_d && os.size() == 3) os.insert(os.begin() + 2, 1);
  if (w.sizes.size() != 4 || w.sizes[0] != C || int_arg(n, "groups").value_or(1) != 1 || os.size() != 4)
    return invalid_argument(n.name + ": the transposed convolution of " + shape_to_string(x.sizes) + " by filter " +
                            shape_to_string(w.sizes) + " cannot give " + shape_to_string(os));
  p.k = w.sizes[1], p.r = w.sizes[2], p.s = w.sizes[3];
  p.oh = (H - 1) * p.sh - 2 * p.ph + p.dh * (p.r - 1) + 1 + oph;
  p.ow = (W - 1) * p.sw - 2 * p.pw + p.dw * (p.s - 1) + 1 + opw;
  if (os != std::vector<int64_t>{N, p.k, p.oh, p.ow})
    return invalid_argument(n.name + ": the transposed convolution of " + shape_to_string(x.sizes) + " by filter " +
                            shape_to_string(w.sizes) + " gives [" + std::to_string(N) + ", " + std::to_string(p.k) +
                            ", " + std::to_string(p.oh) + ", " + std::to_string(p.ow) + "], not the exported " +
                            shape_to_string(os));
  std::optional<TRef> bias;
  if (const ir::Value* bv = value_arg(n, "bias")) {
    KILN_ASSIGN_OR_RETURN(TRef br, b.ref(bv));
    KILN_ASSIGN_OR_RETURN(br, b.contiguous(br, n.name, dt));
    if (prod(br.sizes) != p.k)
      return invalid_argument(n.name + ": " + std::to_string(p.k) + " output channels with a bias of " +
                              shape_to_string(br.sizes));
    bias = br;
    p.has_bias = true;
  }
  TRef y = b.new_tensor(dt, os);
  if (prod(os) > 0) {
    TRef cols = b.new_tensor(dt, {N * H * W, p.k * p.r * p.s});
    if (prod(cols.sizes) > 0 && C > 0) {
      GemmLaunch g;
      GemmShape& gs = g.shape;
      gs.dtype = dt;
      gs.allow_tf32 = b.allow_tf32();
      gs.m = N * H * W;
      gs.n = p.k * p.r * p.s;
      gs.k = C;
      gs.lda = C;
      gs.ldb = gs.n;
      gs.ldc = gs.n;
      KILN_ASSIGN_OR_RETURN(rows, b.aligned(rows, n.name, static_cast<int64_t>(kGemmMinAlignment)));
      KILN_ASSIGN_OR_RETURN(w, b.aligned(w, n.name, static_cast<int64_t>(kGemmMinAlignment)));
      g.a = rows.buf;
      g.b = w.buf;
      g.c = cols.buf;
      KILN_TRY(gs.validate().with_context(n.name));
      b.add_gemm(n.name, g, {&rows, &w, &cols, &cols});
    } else if (prod(cols.sizes) > 0) {
      KILN_ASSIGN_OR_RETURN(GeneratedKernel z, fill_kernel(cols.layout(), 0.0));
      KILN_TRY(b.launch(n.name, std::move(z), {cols.buf}));
    }
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k, col2im_kernel(p));
    KILN_TRY(b.launch(n.name + " col2im", std::move(k), {y.buf, cols.buf, bias ? bias->buf : cols.buf}));
  }
  return bind_result(b, n, y, one_d, os);
}

}  // namespace

Status emit_conv(Builder& b, const ir::Node& n) {
  if (is_transposed(n)) return emit_conv_transposed(b, n);
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  const bool cl = dt == DType::Float16 || dt == DType::BFloat16;
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(value_arg(n, "input")));
  if (x.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  }
  // A 1-D convolution runs as a 2-D one over a unit height: [N, C, L] as [N, C, 1, L].
  const bool one_d = x.sizes.size() == 3;
  auto unit_height = [&](const TRef& t) -> Expected<TRef> {
    if (t.sizes.size() != 3) return invalid_argument("a 1-D convolution operand of " + shape_to_string(t.sizes));
    return reshaped(b, t, {t.sizes[0], t.sizes[1], 1, t.sizes[2]}, n.name);
  };
  if (one_d) {
    KILN_ASSIGN_OR_RETURN(x, unit_height(x));
  }
  const ir::Value* wv = value_arg(n, "weight");
  TRef w;
  // A few input channels (an image's 3) leave cuDNN's channels-last kernels
  // off the tensor cores: the input is copied into 8 channels, zeros past its
  // own, and the filter is stored with 8 channels to match.
  const bool pad_channels =
      !one_d && cl && int_arg(n, "groups").value_or(1) == 1 && x.sizes[1] < kPaddedChannels && b.is_constant(wv);
  if (pad_channels) {
    TRef xp = b.new_tensor(dt, {x.sizes[0], kPaddedChannels, x.sizes[2], x.sizes[3]}, true);
    KILN_ASSIGN_OR_RETURN(GeneratedKernel pk, pad_channels_kernel(x.layout(), kPaddedChannels));
    KILN_TRY(b.launch(n.name + " pad channels", std::move(pk), {xp.buf, x.buf}));
    x = xp;
  } else if (cl) {
    KILN_ASSIGN_OR_RETURN(x, b.channels_last(x, n.name));
  } else {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name));
  }
  if (pad_channels) {
    KILN_ASSIGN_OR_RETURN(w, b.constant(wv, dt, cl, false, kPaddedChannels));
  } else if (one_d) {
    // The filter [K, C/g, S] as [K, C/g, 1, S], made channels-last when the data is.
    if (b.is_constant(wv)) {
      KILN_ASSIGN_OR_RETURN(w, b.constant(wv, dt));
    } else {
      KILN_ASSIGN_OR_RETURN(w, b.ref(wv));
      KILN_ASSIGN_OR_RETURN(w, b.contiguous(w, n.name, dt));
    }
    KILN_ASSIGN_OR_RETURN(w, unit_height(w));
    if (cl) {
      KILN_ASSIGN_OR_RETURN(w, b.channels_last(w, n.name));
    }
  } else if (b.is_constant(wv)) {
    KILN_ASSIGN_OR_RETURN(w, b.constant(wv, dt, cl));
  } else {
    KILN_ASSIGN_OR_RETURN(w, b.ref(wv));
    if (w.dtype != dt) {
      KILN_ASSIGN_OR_RETURN(w, b.contiguous(w, n.name, dt));
    }
    if (cl) {
      KILN_ASSIGN_OR_RETURN(w, b.channels_last(w, n.name));
    } else {
      KILN_ASSIGN_OR_RETURN(w, b.contiguous(w, n.name));
    }
  }
  std::vector<int64_t> os = static_sizes(out);
  if (one_d && os.size() == 3) os.insert(os.begin() + 2, 1);
  ConvLaunch c;
  ConvShape& s = c.shape;
  s.dtype = dt;
  s.allow_tf32 = b.allow_tf32();
  s.n = x.sizes[0], s.c = x.sizes[1], s.h = x.sizes[2], s.w = x.sizes[3];
  s.k = w.sizes[0], s.r = w.sizes[2], s.s = w.sizes[3];
  s.groups = int_arg(n, "groups").value_or(1);
  auto pair = [&](std::string_view name, int64_t def) {
    auto v = ints_arg(n, name).value_or(std::vector<int64_t>{def});
    if (v.empty()) v = {def};
    if (one_d) return std::make_pair(name == "padding" ? int64_t{0} : int64_t{1}, v[0]);  // the unit height
    return std::make_pair(v[0], v.size() > 1 ? v[1] : v[0]);
  };
  std::tie(s.stride_h, s.stride_w) = pair("stride", 1);
  std::tie(s.pad_h, s.pad_w) = pair("padding", 0);
  std::tie(s.dilation_h, s.dilation_w) = pair("dilation", 1);
  // The exported output type against what the operands give (a .pt2's
  // tensor_meta is not trusted to agree): cuDNN writes n x k x out_h x out_w.
  if (os.size() != 4 || os[0] != s.n || os[1] != s.k || w.sizes.size() != 4 || s.groups < 1 ||
      w.sizes[1] * s.groups != s.c)
    return invalid_argument("the convolution of input " + shape_to_string(x.sizes) + " and filter " +
                            shape_to_string(w.sizes) + " in " + std::to_string(s.groups) +
                            " groups cannot give the exported output " + shape_to_string(os));
  s.out_h = os[2];
  s.out_w = os[3];
  s.channels_last = cl;
  TRef y = b.new_tensor(dt, os, cl);
  std::optional<TRef> bias, z;
  if (const ir::Value* bv = value_arg(n, "bias")) {
    KILN_ASSIGN_OR_RETURN(TRef br, b.ref(bv));
    if (br.dtype != dt) {
      KILN_ASSIGN_OR_RETURN(br, b.contiguous(br, n.name, dt));
    }
    KILN_ASSIGN_OR_RETURN(br, b.contiguous(br, n.name));
    if (prod(br.sizes) != s.k)
      return invalid_argument("a convolution of " + std::to_string(s.k) + " filters with a bias of " +
                              shape_to_string(br.sizes));
    bias = br;
    s.has_bias = true;
    c.bias = br.buf;
  }
  if (const ir::Value* zv = value_arg(n, "kiln_residual")) {
    KILN_ASSIGN_OR_RETURN(TRef zr, b.ref(zv));
    if (zr.dtype != dt) {
      KILN_ASSIGN_OR_RETURN(zr, b.contiguous(zr, n.name, dt));
    }
    if (one_d) {
      KILN_ASSIGN_OR_RETURN(zr, unit_height(zr));
    }
    if (cl) {
      KILN_ASSIGN_OR_RETURN(zr, b.channels_last(zr, n.name));
    } else {
      KILN_ASSIGN_OR_RETURN(zr, b.contiguous(zr, n.name));
    }
    z = zr;
    s.has_residual = true;
    c.z = zr.buf;
  }
  std::string act = n.op == OpKind::kConvAct ? string_arg(n, "activation") : "";
  if (string_arg(n, "kiln_act") == "relu") act = "relu";
  s.act = act == "relu" ? ConvActivation::kRelu : ConvActivation::kNone;
  c.x = x.buf;
  c.w = w.buf;
  c.y = y.buf;
  KILN_TRY(s.validate().with_context(n.name));
  // A 1x1, stride-1 convolution over channels-last data is a GEMM: [N*H*W, C] x [C, K]
  // (the KRSC filter read transposed), with cuBLASLt's bias (+ReLU) epilogue. cuDNN's
  // fused forms take 0.1-0.3 ms for these at batch 1 where the GEMM takes microseconds.
  const bool pointwise = cl && s.r == 1 && s.s == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 &&
                         s.pad_w == 0 && s.groups == 1 && !s.has_residual && s.has_bias;
  if (pointwise) {
    GemmLaunch g;
    GemmShape& gs = g.shape;
    gs.dtype = dt;
    gs.m = s.n * s.h * s.w;
    gs.n = s.k;
    gs.k = s.c;
    gs.lda = s.c;
    gs.trans_b = true;
    gs.ldb = s.c;
    gs.ldc = s.k;
    gs.epilogue = s.act == ConvActivation::kRelu ? GemmEpilogue::kBiasRelu : GemmEpilogue::kBias;
    g.a = x.buf;
    g.b = w.buf;
    g.c = y.buf;
    g.bias = bias->buf;
    g.has_bias = true;
    KILN_TRY(gs.validate().with_context(n.name));
    b.add_gemm(n.name, g, {&x, &w, &y, &*bias});
  } else if (use_im2col_gemm(s, dt)) {
    // Small convolutions (batch 1) as patches x filters on cuBLASLt: cuDNN's
    // convolutions take ~0.1 ms each at these sizes, the GEMM a few microseconds.
    Im2colParams ip;
    ip.r = s.r, ip.s = s.s, ip.sh = s.stride_h, ip.sw = s.stride_w, ip.ph = s.pad_h, ip.pw = s.pad_w;
    ip.dh = s.dilation_h, ip.dw = s.dilation_w, ip.oh = s.out_h, ip.ow = s.out_w;
    const int64_t kk = s.r * s.s * s.c;
    TRef col = x;  // a 1x1 stride-1 convolution reads the channels-last input as it is
    if (!(s.r == 1 && s.s == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0)) {
      col = b.new_tensor(dt, {s.n * s.out_h * s.out_w, kk});
      KILN_ASSIGN_OR_RETURN(GeneratedKernel k, im2col_kernel(ip, x.layout()));
      KILN_TRY(b.launch(n.name + " im2col", std::move(k), {col.buf, x.buf}));
    }
    GemmLaunch g;
    GemmShape& gs = g.shape;
    gs.dtype = dt;
    gs.m = s.n * s.out_h * s.out_w;
    gs.n = s.k;
    gs.k = kk;
    gs.lda = kk;
    gs.trans_b = true;
    gs.ldb = kk;
    gs.ldc = s.k;
    if (z) {
      // The residual goes into the output first and is accumulated into (beta = 1).
      KILN_ASSIGN_OR_RETURN(GeneratedKernel cp, copy_kernel(y.layout(), z->layout()));
      KILN_TRY(b.launch(n.name + " residual", std::move(cp), {y.buf, z->buf}));
      gs.beta = 1.0f;
    }
    const bool relu = s.act == ConvActivation::kRelu;
    if (bias) {
      gs.epilogue = relu ? GemmEpilogue::kBiasRelu : GemmEpilogue::kBias;
      g.bias = bias->buf;
      g.has_bias = true;
    }
    g.a = col.buf;
    g.b = w.buf;
    g.c = y.buf;
    KILN_TRY(gs.validate().with_context(n.name));
    b.add_gemm(n.name, g, {&col, &w, &y, bias ? &*bias : &y});
    if (relu && !bias) {
      engine::ElementwiseProgram prog;
      prog.num_inputs = 1;
      engine::ElementwiseInstr r;
      r.op = OpKind::kRelu;
      r.operands = {0};
      prog.instrs.push_back(r);
      TRef o = b.new_tensor(dt, os, cl);
      KILN_ASSIGN_OR_RETURN(GeneratedKernel rk, elementwise_kernel(prog, o.layout(), {y.layout()}));
      KILN_TRY(b.launch(n.name + " relu", std::move(rk), {o.buf, y.buf}));
      y = o;
    }
  } else {
    b.add_conv(n.name, c, {&x, &w, &y, bias ? &*bias : &y, z ? &*z : &y});
  }
  if (act.empty() || act == "none" || act == "relu") return bind_result(b, n, y, one_d, os);
  // Activations cuDNN does not fuse run as a generated kernel on the result.
  engine::ElementwiseInstr in;
  in.operands = {0};
  if (act == "silu")
    in.op = OpKind::kSilu;
  else if (act == "sigmoid")
    in.op = OpKind::kSigmoid;
  else if (act == "hardswish")
    in.op = OpKind::kHardswish;
  else if (act == "gelu" || act == "gelu_tanh") {
    in.op = OpKind::kGelu;
    in.mode = act == "gelu" ? "none" : "tanh";
  } else if (act == "hardtanh") {
    in.op = OpKind::kHardtanh;
    in.scalars = {double_arg(n, "min_val").value_or(-1.0), double_arg(n, "max_val").value_or(1.0)};
  } else {
    return unsupported("convolution activation '" + act + "'");
  }
  engine::ElementwiseProgram prog;
  prog.num_inputs = 1;
  prog.instrs.push_back(in);
  TRef o = b.new_tensor(dt, os, cl);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, elementwise_kernel(prog, o.layout(), {y.layout()}));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, y.buf}));
  return bind_result(b, n, o, one_d, os);
}

// Batched 1-D and 2-D convolutions with static geometry and a fused activation cuDNN or the epilogue takes.
std::string conv_refusal(const ir::Node& n) {
  const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  const ir::Value* x = value_arg(n, "input");
  const ir::Value* w = value_arg(n, "weight");
  const size_t r = rank(x);
  if ((r != 4 && r != 3) || rank(w) != r || rank(out) != r) return "convolutions other than batched 1-D and 2-D";
  if (is_transposed(n)) {
    if (int_arg(n, "groups").value_or(0) != 1) return "transposed convolution in groups";
    if (!is_none(n, "output_padding") && !ints_arg(n, "output_padding"))
      return "transposed convolution output padding that is not a static list";
  } else if (n.op == OpKind::kConvolution) {
    for (int64_t p : ints_arg(n, "output_padding").value_or(std::vector<int64_t>{}))
      if (p != 0) return "convolution with output padding";
  }
  if (!is_none(n, "padding") && !ints_arg(n, "padding")) return "convolution padding given as a string";
  for (const char* a : {"stride", "dilation"})
    if (!is_none(n, a) && !ints_arg(n, a)) return std::string("convolution ") + a + " that is not a static list";
  if (!floating(x->type.dtype) || x->type.dtype == DType::Float64) return "convolutions in this dtype";
  const std::string act = n.op == OpKind::kConvAct ? string_arg(n, "activation") : "";
  if (!act.empty() && act != "none" && act != "relu" && act != "silu" && act != "sigmoid" && act != "hardswish" &&
      act != "gelu" && act != "gelu_tanh" && act != "hardtanh")
    return "convolution activation '" + act + "'";
  return "";
}

}  // namespace kiln::cuda::layers
