// Complex values as pairs of real tensors, and discrete Fourier transforms as
// products with constant DFT matrices.
//
// kiln holds no complex tensors: no backend has complex kernels and no file of
// kiln stores them. Programs still compute with complex values in the middle:
// FNet mixes tokens with the real part of a 2-d FFT, spectral features take
// |rfft(x)|, the original Llama code applies rotary embeddings through
// view_as_complex and view_as_real. This pass runs before the others. It gives
// each complex value a real part and an imaginary part (the latter absent
// where it is known to be zero), rewrites each op on complex values into ops
// on those parts, and replaces each op whose result is real again (real, imag,
// abs, angle, view_as_real, the complex-to-real transforms) by the real
// computation. A program whose complex values reach an input, an output or an
// op this pass does not split is refused, naming it.
//
// A DFT along one dim of static size N is a product with a constant matrix:
// x [.., r] @ W [r, K] with W[t, k] = exp(-+2 pi i t k / N) times the
// normalization. Zero padding (N above the input's r) is the rows the matrix
// leaves out; trimming slices the input first. One-sided results keep K =
// N/2 + 1 columns; complex-to-real folds Hermitian symmetry into row weights
// (1 for k = 0 and k = N/2, 2 between). That is N^2 multiply-adds per line
// against N log N for an FFT, which the matrix units pay back at the sizes
// models mix over; transforms longer than kMostPoints are refused.
#include <cmath>
#include <map>
#include <numbers>
#include <utility>

#include "lowering/decompose.h"
#include "lowering/pass.h"

namespace kiln::lowering {

namespace {

using ir::OpKind;

constexpr int64_t kMostPoints = 16384;

// A complex value's parts; a null `im` is zero.
struct Parts {
  ir::Value* re = nullptr;
  ir::Value* im = nullptr;
};

ir::TensorType part_type(const ir::TensorType& t) { return {complex_part(t.dtype), t.sizes}; }

bool complex_value(const ir::Value* v) { return v && v->kind == ir::ValueKind::kTensor && is_complex(v->type.dtype); }

// aten's normalization codes: 0 none, 1 by 1/sqrt(N), 2 by 1/N.
double norm_scale(int64_t code, int64_t points) {
  if (code == 1) return 1.0 / std::sqrt(static_cast<double>(points));
  if (code == 2) return 1.0 / static_cast<double>(points);
  return 1.0;
}

// torch.fft's norm string as aten's code, for a transform counted as forward
// (fft, rfft, hfft) or inverse (ifft, irfft, ihfft).
std::optional<int64_t> norm_code(const ir::Node& n, bool forward) {
  const ir::Arg* a = n.find("norm");
  std::string norm = "backward";
  if (a && !std::holds_alternative<ir::NoneArg>(*a)) {
    const auto* s = std::get_if<std::string>(a);
    if (!s) return std::nullopt;
    norm = *s;
  }
  if (norm == "ortho") return 1;
  if (norm == "backward") return forward ? 0 : 2;
  if (norm == "forward") return forward ? 2 : 0;
  return std::nullopt;
}

// cos and sin of 2 pi q / N, exact at the quarter turns.
std::pair<double, double> turn(int64_t q, int64_t points) {
  q %= points;
  if (q == 0) return {1, 0};
  if (4 * q == points) return {0, 1};
  if (2 * q == points) return {-1, 0};
  if (4 * q == 3 * points) return {0, -1};
  const double a = 2 * std::numbers::pi * static_cast<double>(q) / static_cast<double>(points);
  return {std::cos(a), std::sin(a)};
}

// A [rows, cols] matrix of f(i, j) in `dt` (float32 or float64).
Tensor matrix(DType dt, int64_t rows, int64_t cols, const std::function<double(int64_t, int64_t)>& f) {
  Tensor t = Tensor::zeros(dt, {rows, cols});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      if (dt == DType::Float64)
        t.data<double>()[i * cols + j] = f(i, j);
      else
        t.data<float>()[i * cols + j] = static_cast<float>(f(i, j));
    }
  return t;
}

Status check_points(const ir::Node& n, int64_t points, DType dt) {
  if (points < 1 || points > kMostPoints)
    return unsupported(n.describe() + ": a Fourier transform of " + std::to_string(points) +
                       " points (kiln's DFT matrices go up to " + std::to_string(kMostPoints) + ")");
  if (dt != DType::Float32 && dt != DType::Float64)
    return unsupported(n.describe() + ": a Fourier transform in " + std::string(dtype_name(dt)) +
                       " (kiln computes them in float32 and float64, as torch does on the CPU)");
  return Status::ok();
}

// A transform over several dims: complex to complex over each; real to
// complex over the last (one-sided when asked) and then the others; complex
// to real over the others and then the real inverse over the last, of its
// first points / 2 + 1 entries.
enum class Kind { kC2C, kR2C, kC2R };
struct Transform {
  Kind kind;
  std::vector<int64_t> dims;   // normalized, the last one last
  std::vector<int64_t> sizes;  // each dim's signal size (points)
  bool inverse;                // the exponent's sign + on the dims a DFT runs over
  bool one_sided;              // kR2C: K = N/2 + 1 on the last dim
  bool conjugate;              // kC2R: conjugate before the real inverse (hfft)
  int64_t normalization;       // aten's code over the product of the sizes
};

class Splitter {
 public:
  explicit Splitter(ir::Module& m) : ctx_(m) {}

  // Splits `n` when it reads or makes a complex value or is a transform.
  Status visit(ir::Node& n);
  // After every node: no complex value may reach an input or an output.
  Status check_edges();

 private:
  // The parts of `v` in `dt` (a real `v` is its own real part).
  Parts parts(Nodes& b, ir::Value* v, DType dt);
  ir::Value* cast(Nodes& b, ir::Value* v, DType dt);
  ir::Value* zeros(Nodes& b, ir::Value* like);
  ir::Value* im_or_zeros(Nodes& b, const Parts& p) { return p.im ? p.im : zeros(b, p.re); }
  // `v` expanded to `t`'s static sizes; null when they are symbolic.
  ir::Value* widen(Nodes& b, ir::Value* v, const ir::TensorType& t);
  // x [.., r at dim, ..] times w [r, K] along `dim`.
  ir::Value* along(Nodes& b, ir::Value* x, int64_t dim, const Tensor& w);
  Expected<int64_t> static_size(const ir::Node& n, const ir::Value* v, int64_t dim);
  // The first `rows` entries of `p` along dim.
  Parts first(Nodes& b, const Parts& p, int64_t dim, int64_t rows);
  // The DFT of N points along `dim` (K = N, or N/2 + 1 one-sided), with the
  // exponent's sign + when `inverse`, each entry times `scale`.
  Expected<Parts> dft(Nodes& b, const ir::Node& n, Parts x, int64_t dim, int64_t points, bool one_sided, bool inverse,
                      double scale);
  // The real inverse transform of N points along `dim` from its first N/2 + 1 entries.
  Expected<ir::Value*> c2r(Nodes& b, const ir::Node& n, Parts x, int64_t dim, int64_t points, double scale);

  // `t` of `x` as `n`'s result; the normalization goes into the first matrix.
  Status run(ir::Node& n, ir::Value* x, const Transform& t);
  Status transform(ir::Node& n);  // torch.fft's functions
  Status primitive(ir::Node& n);  // aten._fft_r2c, _fft_c2c, _fft_c2r
  Status stft(ir::Node& n);
  Status elementwise(ir::Node& n);
  Status mirror(ir::Node& n);
  // `n`'s one result is `p` (complex) or `v` (real).
  void define(ir::Node& n, Parts p) { parts_[n.outputs[0]] = p; }
  void define(ir::Node& n, ir::Value* v) { ctx_.replace_uses(n.outputs[0], v); }
  Status refuse(const ir::Node& n) const;

  PatternContext ctx_;
  std::map<const ir::Value*, Parts> parts_;
};

Status Splitter::refuse(const ir::Node& n) const {
  return unsupported(n.describe() +
                     " computes with complex tensors in a way kiln does not split into real and imaginary parts "
                     "(it splits the torch.fft transforms, views and reshapes, conj, casts, add, sub, mul, sums, "
                     "view_as_complex, complex, polar, and their real results: real, imag, abs, angle, view_as_real)");
}

ir::Value* Splitter::cast(Nodes& b, ir::Value* v, DType dt) {
  if (v->type.dtype == dt) return v;
  return b.add(OpKind::kToCopy, {{"self", v}, {"dtype", dt}}, {dt, v->type.sizes});
}

ir::Value* Splitter::zeros(Nodes& b, ir::Value* like) {
  return b.add(OpKind::kZerosLike, {{"self", like}}, like->type);
}

ir::Value* Splitter::widen(Nodes& b, ir::Value* v, const ir::TensorType& t) {
  if (!v || same_sizes(v->type.sizes, t.sizes)) return v;
  const auto sizes = static_sizes(t);
  if (!sizes) return nullptr;
  return b.add(OpKind::kExpand, {{"self", v}, {"size", *sizes}}, {v->type.dtype, t.sizes});
}

Parts Splitter::parts(Nodes& b, ir::Value* v, DType dt) {
  if (!complex_value(v)) return {cast(b, v, dt), nullptr};
  Parts p = parts_.at(v);
  return {cast(b, p.re, dt), p.im ? cast(b, p.im, dt) : nullptr};
}

Expected<int64_t> Splitter::static_size(const ir::Node& n, const ir::Value* v, int64_t dim) {
  const ir::Dim& d = v->type.sizes[static_cast<size_t>(dim)];
  if (!d.is_static())
    return unsupported(n.describe() + ": a Fourier transform along dim " + std::to_string(dim) + " of symbolic size " +
                       d.to_string() + " (kiln builds its DFT matrix for a static size)");
  return d.value;
}

ir::Value* Splitter::along(Nodes& b, ir::Value* x, int64_t dim, const Tensor& w) {
  const int64_t last = static_cast<int64_t>(x->type.sizes.size()) - 1;
  auto swapped = [&](ir::Value* v) {
    ir::TensorType t = v->type;
    std::swap(t.sizes[static_cast<size_t>(dim)], t.sizes[static_cast<size_t>(last)]);
    return b.add(OpKind::kTranspose, {{"self", v}, {"dim0", dim}, {"dim1", last}}, t);
  };
  ir::Value* v = dim == last ? x : swapped(x);
  ir::TensorType t = v->type;
  t.sizes.back() = ir::Dim::of(w.sizes()[1]);
  v = b.add(OpKind::kMatmul, {{"self", v}, {"other", b.constant(w)}}, t);
  return dim == last ? v : swapped(v);
}

Parts Splitter::first(Nodes& b, const Parts& p, int64_t dim, int64_t rows) {
  if (p.re->type.sizes[static_cast<size_t>(dim)].value <= rows) return p;
  return {b.slice(p.re, dim, 0, rows), p.im ? b.slice(p.im, dim, 0, rows) : nullptr};
}

Expected<Parts> Splitter::dft(Nodes& b, const ir::Node& n, Parts x, int64_t dim, int64_t points, bool one_sided,
                              bool inverse, double scale) {
  KILN_ASSIGN_OR_RETURN(int64_t size, static_size(n, x.re, dim));
  KILN_TRY(check_points(n, points, x.re->type.dtype));
  x = first(b, x, dim, std::min(size, points));
  const int64_t rows = std::min(size, points), cols = one_sided ? points / 2 + 1 : points;
  const DType dt = x.re->type.dtype;
  const double sign = inverse ? 1 : -1;
  const Tensor wr = matrix(dt, rows, cols, [&](int64_t t, int64_t k) { return turn(t * k, points).first * scale; });
  const Tensor wi =
      matrix(dt, rows, cols, [&](int64_t t, int64_t k) { return sign * turn(t * k, points).second * scale; });
  // (a + ib)(wr + i wi) = (a wr - b wi) + i (a wi + b wr)
  ir::Value* re = along(b, x.re, dim, wr);
  ir::Value* im = along(b, x.re, dim, wi);
  if (x.im) {
    re = b.binary(OpKind::kSubTensor, re, along(b, x.im, dim, wi), dt);
    im = b.binary(OpKind::kAddTensor, im, along(b, x.im, dim, wr), dt);
  }
  return Parts{re, im};
}

Expected<ir::Value*> Splitter::c2r(Nodes& b, const ir::Node& n, Parts x, int64_t dim, int64_t points, double scale) {
  KILN_ASSIGN_OR_RETURN(int64_t size, static_size(n, x.re, dim));
  KILN_TRY(check_points(n, points, x.re->type.dtype));
  const int64_t rows = std::min(size, points / 2 + 1);
  x = first(b, x, dim, rows);
  const DType dt = x.re->type.dtype;
  auto weight = [&](int64_t k) { return (k == 0 || 2 * k == points) ? 1.0 : 2.0; };
  // Re((a + ib) e^{i theta}) = a cos - b sin, over the Hermitian half.
  ir::Value* out = along(b, x.re, dim, matrix(dt, rows, points, [&](int64_t k, int64_t t) {
                           return weight(k) * turn(k * t, points).first * scale;
                         }));
  if (x.im) {
    const Tensor ws =
        matrix(dt, rows, points, [&](int64_t k, int64_t t) { return -weight(k) * turn(k * t, points).second * scale; });
    out = b.binary(OpKind::kAddTensor, out, along(b, x.im, dim, ws), dt);
  }
  return out;
}

Status Splitter::run(ir::Node& n, ir::Value* x, const Transform& t) {
  int64_t total = 1;
  for (int64_t size : t.sizes) total *= size;
  double scale = norm_scale(t.normalization, total);
  auto next_scale = [&] { return std::exchange(scale, 1.0); };
  Nodes b(ctx_, n);
  Parts p = parts(b, x, complex_part(n.outputs[0]->type.dtype));
  const size_t last = t.dims.size() - 1;
  if (t.kind == Kind::kR2C) {
    KILN_ASSIGN_OR_RETURN(p, dft(b, n, p, t.dims[last], t.sizes[last], t.one_sided, t.inverse, next_scale()));
  }
  const size_t others = t.kind == Kind::kC2C ? t.dims.size() : last;
  for (size_t i = 0; i < others; ++i) {
    KILN_ASSIGN_OR_RETURN(p, dft(b, n, p, t.dims[i], t.sizes[i], false, t.inverse, next_scale()));
  }
  if (t.kind != Kind::kC2R) {
    define(n, p);
    return Status::ok();
  }
  if (t.conjugate && p.im) p.im = b.unary(OpKind::kNeg, p.im);
  KILN_ASSIGN_OR_RETURN(ir::Value * r, c2r(b, n, p, t.dims[last], t.sizes[last], next_scale()));
  define(n, r);
  return Status::ok();
}

// torch.fft's functions, as torch._refs.fft writes them in prims: the
// complex-to-complex transform over each dim; rfft* one-sided over the last;
// ihfft* the same with the inverse exponent; irfft* and hfft* a transform over
// the other dims (hfft*: forward, then conjugated) and the real inverse over
// the last, of s[-1] or 2 (m - 1) points.
Status Splitter::transform(ir::Node& n) {
  struct Form {
    Kind kind;
    bool forward;  // the exponent's sign on the dims before the last, and the norm's direction
    int rank;      // 1: n and an int dim; 2: s and dims defaulting to the last two; 0: every dim
  };
  static const std::map<OpKind, Form> forms = {
      {OpKind::kFftFft, {Kind::kC2C, true, 1}},   {OpKind::kFftIfft, {Kind::kC2C, false, 1}},
      {OpKind::kFftRfft, {Kind::kR2C, true, 1}},  {OpKind::kFftIrfft, {Kind::kC2R, false, 1}},
      {OpKind::kFftHfft, {Kind::kC2R, true, 1}},  {OpKind::kFftIhfft, {Kind::kR2C, false, 1}},
      {OpKind::kFftFft2, {Kind::kC2C, true, 2}},  {OpKind::kFftIfft2, {Kind::kC2C, false, 2}},
      {OpKind::kFftRfft2, {Kind::kR2C, true, 2}}, {OpKind::kFftIrfft2, {Kind::kC2R, false, 2}},
      {OpKind::kFftHfft2, {Kind::kC2R, true, 2}}, {OpKind::kFftIhfft2, {Kind::kR2C, false, 2}},
      {OpKind::kFftFftn, {Kind::kC2C, true, 0}},  {OpKind::kFftIfftn, {Kind::kC2C, false, 0}},
      {OpKind::kFftRfftn, {Kind::kR2C, true, 0}}, {OpKind::kFftIrfftn, {Kind::kC2R, false, 0}},
      {OpKind::kFftHfftn, {Kind::kC2R, true, 0}}, {OpKind::kFftIhfftn, {Kind::kR2C, false, 0}},
  };
  const Form form = forms.at(n.op);
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1) return refuse(n);
  if (form.kind == Kind::kR2C && complex_value(x))
    return unsupported(n.describe() + " of a complex tensor (torch refuses it too)");
  const size_t rank = x->type.sizes.size();
  // The dims and their signal sizes (-1: the input's size).
  std::vector<int64_t> dims, sizes;
  bool sizes_given = false;
  if (form.rank == 1) {
    const auto d = int_value(n, "dim");
    const ir::Arg* a = n.find("n");
    const bool has_n = a && !std::holds_alternative<ir::NoneArg>(*a);
    const auto len = has_n ? int_value(n, "n") : std::optional<int64_t>(-1);
    if (!d || !len) return refuse(n);
    dims = {*d};
    sizes = {*len};
    sizes_given = has_n;
  } else {
    const ir::Arg* sa = n.find("s");
    const ir::Arg* da = n.find("dim");
    const bool has_s = sa && !std::holds_alternative<ir::NoneArg>(*sa);
    const bool has_dim = da && !std::holds_alternative<ir::NoneArg>(*da);
    if (has_s) {
      const auto s = int_list(n, "s");
      if (!s) return refuse(n);
      sizes = *s;
      sizes_given = true;
    }
    if (has_dim) {
      const auto d = int_list(n, "dim");
      if (!d) return refuse(n);
      dims = *d;
    } else if (form.rank == 2) {
      dims = {-2, -1};
    } else {
      const size_t count = has_s ? sizes.size() : rank;
      for (size_t i = rank - std::min(count, rank); i < rank; ++i) dims.push_back(static_cast<int64_t>(i));
    }
    if (!has_s) sizes.assign(dims.size(), -1);
  }
  if (dims.empty() || sizes.size() != dims.size()) return refuse(n);
  std::vector<bool> seen(rank, false);
  for (int64_t& d : dims) {
    d = norm_dim(d, rank);
    if (d < 0 || seen[static_cast<size_t>(d)]) return refuse(n);
    seen[static_cast<size_t>(d)] = true;
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    if (sizes[i] != -1) continue;
    KILN_ASSIGN_OR_RETURN(sizes[i], static_size(n, x, dims[i]));
  }
  if (form.kind == Kind::kC2R && !(sizes_given && sizes.back() != -1)) {
    KILN_ASSIGN_OR_RETURN(int64_t m, static_size(n, x, dims.back()));
    sizes.back() = 2 * (m - 1);
  }
  const auto code = norm_code(n, form.forward);
  if (!code) return refuse(n);
  // hfft*: the real inverse of the conjugate, after forward transforms of the other dims.
  return run(n, x, {form.kind, std::move(dims), std::move(sizes), !form.forward, true, form.kind == Kind::kC2R && form.forward, *code});
}

// aten's primitives: _fft_r2c(self, dim, normalization, onesided),
// _fft_c2c(self, dim, normalization, forward), _fft_c2r(self, dim,
// normalization, last_dim_size); the normalization is over every dim's points.
Status Splitter::primitive(ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto dims_arg = int_list(n, "dim");
  const auto code = int_value(n, "normalization");
  if (!x || !dims_arg || dims_arg->empty() || !code || n.outputs.size() != 1) return refuse(n);
  const size_t rank = x->type.sizes.size();
  std::vector<int64_t> dims;
  for (int64_t d : *dims_arg) {
    const int64_t nd = norm_dim(d, rank);
    if (nd < 0) return refuse(n);
    dims.push_back(nd);
  }
  std::vector<int64_t> sizes;
  for (int64_t d : dims) {
    KILN_ASSIGN_OR_RETURN(int64_t s, static_size(n, x, d));
    sizes.push_back(s);
  }
  if (n.op == OpKind::kFftC2r) {
    const auto last = int_value(n, "last_dim_size");
    if (!last) return refuse(n);
    sizes.back() = *last;
  }
  if (n.op == OpKind::kFftR2c) {
    const auto one_sided = bool_value(n, "onesided");
    if (!one_sided) return refuse(n);
    return run(n, x, {Kind::kR2C, std::move(dims), std::move(sizes), false, *one_sided, false, *code});
  }
  if (n.op == OpKind::kFftC2c) {
    const auto forward = bool_value(n, "forward");
    if (!forward) return refuse(n);
    return run(n, x, {Kind::kC2C, std::move(dims), std::move(sizes), !*forward, false, false, *code});
  }
  return run(n, x, {Kind::kC2R, std::move(dims), std::move(sizes), true, false, false, *code});
}

// stft(self [L] or [B, L], n_fft, hop_length, win_length, window, normalized,
// onesided, return_complex), as ATen computes it after torch.stft's centering
// pad: frames of n_fft every hop_length (default n_fft / 4), times the window
// (ones by default) padded to n_fft on both sides, each frame's one-sided DFT
// (scaled by 1/sqrt(n_fft) when normalized), frequencies before frames; with
// return_complex=False the parts stacked last.
Status Splitter::stft(ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* window = PatternContext::tensor_arg(n, "window");
  const auto n_fft = int_value(n, "n_fft");
  if (!x || complex_value(x) || (window && complex_value(window)) || !n_fft || *n_fft < 1 || n.outputs.size() != 1)
    return refuse(n);
  // return_complex=False: the result as view_as_real gives it, [.., freq, frames, 2].
  const bool as_real = !complex_value(n.outputs[0]);
  const auto hop = absent(n, "hop_length") ? std::optional<int64_t>(*n_fft / 4) : int_value(n, "hop_length");
  const auto win = absent(n, "win_length") ? std::optional<int64_t>(*n_fft) : int_value(n, "win_length");
  const auto normalized = bool_value(n, "normalized");
  const auto one_sided = absent(n, "onesided") ? std::optional<bool>(true) : bool_value(n, "onesided");
  const size_t rank = x->type.sizes.size();
  if (!hop || *hop < 1 || !win || *win < 1 || *win > *n_fft || !normalized || !one_sided || (rank != 1 && rank != 2))
    return refuse(n);
  KILN_ASSIGN_OR_RETURN(int64_t length, static_size(n, x, static_cast<int64_t>(rank) - 1));
  if (length < *n_fft) return refuse(n);
  const int64_t frames = 1 + (length - *n_fft) / *hop;
  Nodes b(ctx_, n);
  const DType dt = complex_part(n.outputs[0]->type.dtype);
  ir::Value* xs = cast(b, x, dt);
  ir::TensorType ft = xs->type;  // [.., frames, n_fft]
  ft.sizes.back() = ir::Dim::of(frames);
  ft.sizes.push_back(ir::Dim::of(*n_fft));
  ir::Value* f = b.add(OpKind::kUnfold,
                       {{"self", xs}, {"dimension", static_cast<int64_t>(rank) - 1}, {"size", *n_fft}, {"step", *hop}}, ft);
  if (window) {
    if (window->type.sizes.size() != 1) return refuse(n);
    ir::Value* w = cast(b, window, dt);
    if (*win < *n_fft) {
      const int64_t left = (*n_fft - *win) / 2;
      w = b.add(OpKind::kConstantPadNd, {{"self", w}, {"pad", std::vector<int64_t>{left, *n_fft - *win - left}}},
                static_type(dt, {*n_fft}));
    }
    f = b.binary(OpKind::kMulTensor, f, w, dt);
    if (!f) return refuse(n);
  }
  const int64_t last = static_cast<int64_t>(rank);
  KILN_ASSIGN_OR_RETURN(
      Parts p, dft(b, n, Parts{f, nullptr}, last, *n_fft, *one_sided, false, *normalized ? norm_scale(1, *n_fft) : 1.0));
  std::vector<int64_t> perm;
  for (int64_t d = 0; d + 2 <= last; ++d) perm.push_back(d);
  perm.push_back(last);
  perm.push_back(last - 1);
  ir::TensorType pt = part_type(n.outputs[0]->type);
  if (as_real) pt.sizes.pop_back();
  auto swap = [&](ir::Value* v) { return b.add(OpKind::kPermute, {{"self", v}, {"dims", perm}}, pt); };
  if (!as_real) {
    define(n, Parts{swap(p.re), swap(p.im)});
    return Status::ok();
  }
  define(n, b.add(OpKind::kStack, {{"tensors", std::vector<ir::Value*>{swap(p.re), swap(p.im)}}, {"dim", last + 1}},
                  n.outputs[0]->type));
  return Status::ok();
}

// Ops that move, pick or sum elements without mixing their parts: the same op
// on each part (an absent imaginary part stays absent).
bool mirrors(OpKind op) {
  switch (op) {
    case OpKind::kClone:
    case OpKind::kAlias:
    case OpKind::kContiguous:
    case OpKind::kDetach:
    case OpKind::kLiftFreshCopy:
    case OpKind::kSliceTensor:
    case OpKind::kSelectInt:
    case OpKind::kNarrow:
    case OpKind::kPermute:
    case OpKind::kTranspose:
    case OpKind::kT:
    case OpKind::kUnsqueeze:
    case OpKind::kSqueeze:
    case OpKind::kSqueezeDim:
    case OpKind::kSqueezeDims:
    case OpKind::kView:
    case OpKind::kReshape:
    case OpKind::kUnsafeView:
    case OpKind::kExpand:
    case OpKind::kFlip:
    case OpKind::kRoll:
    case OpKind::kRepeat:
    case OpKind::kMovedimInt:
    case OpKind::kMovedimIntlist:
    case OpKind::kFlatten:
    case OpKind::kUnflatten:
    case OpKind::kIndexSelect:
    case OpKind::kResolveConj:
    case OpKind::kResolveNeg:
    case OpKind::kFftFftshift:
    case OpKind::kFftIfftshift:
    case OpKind::kSplitTensor:
    case OpKind::kSplitWithSizes:
    case OpKind::kChunk:
    case OpKind::kUnbind:
    case OpKind::kSum:
    case OpKind::kSumDimIntList:
    case OpKind::kMean:
    case OpKind::kMeanDim:
    case OpKind::kConstantPadNd: return true;
    default: return false;
  }
}

Status Splitter::mirror(ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || !complex_value(x)) return refuse(n);
  for (ir::Value* v : n.operands())
    if (v != x && complex_value(v)) return refuse(n);
  if (n.op == OpKind::kConstantPadNd) {
    const auto value = ctx_.number(n, "value");
    if (n.find("value") && !absent(n, "value") && (!value || *value != 0)) return refuse(n);
  }
  Nodes b(ctx_, n);
  std::vector<ir::TensorType> types;
  for (const ir::Value* o : n.outputs) types.push_back(part_type(o->type));
  const Parts p = parts_.at(x);
  auto apply = [&](ir::Value* part) {
    std::vector<ir::NamedArg> args = n.args;
    for (ir::NamedArg& a : args) {
      if (auto* v = std::get_if<ir::Value*>(&a.value); v && *v == x) *v = part;
      if (auto* d = std::get_if<DType>(&a.value)) *d = complex_part(*d);
    }
    return b.add_multi(n.op, std::move(args), types);
  };
  const std::vector<ir::Value*> re = apply(p.re);
  const std::vector<ir::Value*> im = p.im ? apply(p.im) : std::vector<ir::Value*>(re.size(), nullptr);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (complex_value(n.outputs[i]))
      parts_[n.outputs[i]] = {re[i], im[i]};
    else
      ctx_.replace_uses(n.outputs[i], re[i]);  // a sum's real dtype argument
  }
  return Status::ok();
}

// Ops that combine parts: conj, casts, arithmetic, and the ops that build a
// complex tensor or give a real one.
Status Splitter::elementwise(ir::Node& n) {
  if (n.outputs.size() != 1) return refuse(n);
  ir::Value* out = n.outputs[0];
  const DType dt = complex_part(out->type.dtype);
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  Nodes b(ctx_, n);
  auto mul = [&](ir::Value* a, ir::Value* c) { return b.binary(OpKind::kMulTensor, a, c, dt); };
  switch (n.op) {
    case OpKind::kConj:
    case OpKind::kConjInternal:
    case OpKind::kConjPhysical:
    case OpKind::kConjPhysicalInternal: {
      if (!complex_value(x)) return refuse(n);
      Parts p = parts(b, x, dt);
      define(n, Parts{p.re, p.im ? b.unary(OpKind::kNeg, p.im) : nullptr});
      return Status::ok();
    }
    case OpKind::kToCopy:
    case OpKind::kTo:
    case OpKind::kToDtypeLayout:
    case OpKind::kTypeAs: {
      if (!x) return refuse(n);
      if (!complex_value(out)) {  // torch keeps the real part
        define(n, cast(b, parts(b, x, complex_part(x->type.dtype)).re, out->type.dtype));
        return Status::ok();
      }
      define(n, parts(b, x, dt));
      return Status::ok();
    }
    case OpKind::kNeg: {
      Parts p = parts(b, x, dt);
      define(n, Parts{b.unary(OpKind::kNeg, p.re), p.im ? b.unary(OpKind::kNeg, p.im) : nullptr});
      return Status::ok();
    }
    case OpKind::kMulScalar:
    case OpKind::kDivScalar: {
      const auto s = ctx_.number(n, "other");
      if (!x || !s) return refuse(n);
      Parts p = parts(b, x, dt);
      auto f = [&](ir::Value* v) { return v ? b.binary(n.op, v, *s, dt) : nullptr; };
      define(n, Parts{f(p.re), f(p.im)});
      return Status::ok();
    }
    case OpKind::kAddTensor:
    case OpKind::kSubTensor:
    case OpKind::kMulTensor:
    case OpKind::kDivTensor: {
      ir::Value* y = PatternContext::tensor_arg(n, "other");
      if (!x || !y || (!absent(n, "alpha") && ctx_.number(n, "alpha") != 1.0)) return refuse(n);
      if (n.op == OpKind::kDivTensor && complex_value(y)) return refuse(n);
      Parts p = parts(b, x, dt), q = parts(b, y, dt);
      if (n.op == OpKind::kMulTensor) {
        // (a + ib)(c + id) = (ac - bd) + i (ad + bc)
        ir::Value* re = mul(p.re, q.re);
        if (p.im && q.im) re = b.binary(OpKind::kSubTensor, re, mul(p.im, q.im), dt);
        ir::Value* im = nullptr;
        if (q.im) im = mul(p.re, q.im);
        if (p.im) im = im ? b.binary(OpKind::kAddTensor, im, mul(p.im, q.re), dt) : mul(p.im, q.re);
        if (!re || (p.im || q.im) != (im != nullptr)) return refuse(n);
        define(n, Parts{re, im});
        return Status::ok();
      }
      if (n.op == OpKind::kDivTensor) {
        define(n, Parts{b.binary(n.op, p.re, q.re, dt), p.im ? b.binary(n.op, p.im, q.re, dt) : nullptr});
        return Status::ok();
      }
      ir::Value* re = b.binary(n.op, p.re, q.re, dt);
      if (!re) return refuse(n);
      const ir::TensorType t = part_type(out->type);
      ir::Value* im = nullptr;
      if (p.im && q.im)
        im = b.binary(n.op, p.im, q.im, dt);
      else if (p.im)
        im = widen(b, p.im, t);
      else if (q.im)
        im = widen(b, n.op == OpKind::kAddTensor ? q.im : b.unary(OpKind::kNeg, q.im), t);
      if ((p.im || q.im) && !im) return refuse(n);
      define(n, Parts{re, im});
      return Status::ok();
    }
    case OpKind::kViewAsComplex: {
      if (!x || x->type.sizes.empty()) return refuse(n);
      const int64_t last = static_cast<int64_t>(x->type.sizes.size()) - 1;
      auto pick = [&](int64_t i) {
        return b.add(OpKind::kSelectInt, {{"self", x}, {"dim", last}, {"index", i}}, part_type(out->type));
      };
      define(n, Parts{pick(0), pick(1)});
      return Status::ok();
    }
    case OpKind::kComplex:
    case OpKind::kPolar: {
      const bool polar = n.op == OpKind::kPolar;
      ir::Value* a = PatternContext::tensor_arg(n, polar ? "abs" : "real");
      ir::Value* c = PatternContext::tensor_arg(n, polar ? "angle" : "imag");
      if (!a || !c || complex_value(a) || complex_value(c)) return refuse(n);
      const ir::TensorType t = part_type(out->type);
      a = widen(b, cast(b, a, dt), t);
      c = widen(b, cast(b, c, dt), t);
      if (!a || !c) return refuse(n);
      if (!polar) {
        define(n, Parts{a, c});
        return Status::ok();
      }
      define(n, Parts{mul(a, b.unary(OpKind::kCos, c)), mul(a, b.unary(OpKind::kSin, c))});
      return Status::ok();
    }
    default: break;
  }
  // Real results of complex values.
  if (!x || !complex_value(x)) return refuse(n);
  Parts p = parts(b, x, complex_part(x->type.dtype));
  switch (n.op) {
    case OpKind::kReal: define(n, p.re); return Status::ok();
    case OpKind::kImag: define(n, im_or_zeros(b, p)); return Status::ok();
    case OpKind::kViewAsReal:
      define(n, b.add(OpKind::kStack,
                      {{"tensors", std::vector<ir::Value*>{p.re, im_or_zeros(b, p)}},
                       {"dim", static_cast<int64_t>(p.re->type.sizes.size())}},
                      out->type));
      return Status::ok();
    case OpKind::kAbs:
      define(n, p.im ? b.binary(OpKind::kHypot, p.re, p.im, out->type.dtype) : b.unary(OpKind::kAbs, p.re));
      return Status::ok();
    case OpKind::kAngle:
      define(n, b.binary(OpKind::kAtan2, im_or_zeros(b, p), p.re, out->type.dtype));
      return Status::ok();
    default: return refuse(n);
  }
}

bool is_transform(OpKind op) {
  switch (op) {
    case OpKind::kFftFft:
    case OpKind::kFftIfft:
    case OpKind::kFftRfft:
    case OpKind::kFftIrfft:
    case OpKind::kFftHfft:
    case OpKind::kFftIhfft:
    case OpKind::kFftFft2:
    case OpKind::kFftIfft2:
    case OpKind::kFftRfft2:
    case OpKind::kFftIrfft2:
    case OpKind::kFftHfft2:
    case OpKind::kFftIhfft2:
    case OpKind::kFftFftn:
    case OpKind::kFftIfftn:
    case OpKind::kFftRfftn:
    case OpKind::kFftIrfftn:
    case OpKind::kFftHfftn:
    case OpKind::kFftIhfftn: return true;
    default: return false;
  }
}

bool is_primitive(OpKind op) { return op == OpKind::kFftR2c || op == OpKind::kFftC2c || op == OpKind::kFftC2r; }

// Ops this pass rewrites whatever their operands' and results' dtypes.
bool is_fourier(OpKind op) { return is_transform(op) || is_primitive(op) || op == OpKind::kStft; }

Status Splitter::visit(ir::Node& n) {
  bool touches = is_fourier(n.op) || n.op == OpKind::kViewAsComplex ||
                 n.op == OpKind::kComplex || n.op == OpKind::kPolar;
  for (const ir::Value* v : n.operands()) touches = touches || complex_value(v);
  for (const ir::Value* v : n.outputs) touches = touches || complex_value(v);
  if (!touches) return Status::ok();
  for (const ir::Value* v : n.operands())
    if (complex_value(v) && !parts_.count(v)) return refuse(n);
  if (is_transform(n.op)) return transform(n);
  if (is_primitive(n.op)) return primitive(n);
  if (n.op == OpKind::kStft) return stft(n);
  if (mirrors(n.op)) return mirror(n);
  return elementwise(n);
}

Status Splitter::check_edges() {
  const ir::Graph& g = ctx_.graph();
  for (const ir::Value* v : g.inputs())
    if (complex_value(v))
      return unsupported("input '" + v->name + "' is " + std::string(dtype_name(v->type.dtype)) +
                         "; kiln holds no complex tensors (complex values computed inside a program are split into "
                         "real and imaginary parts)");
  for (size_t i = 0; i < g.outputs().size(); ++i)
    if (complex_value(g.outputs()[i]))
      return unsupported("output " + std::to_string(i) + " ('" + g.outputs()[i]->name + "') is " +
                         std::string(dtype_name(g.outputs()[i]->type.dtype)) +
                         "; kiln holds no complex tensors: return torch.view_as_real(x), or x.real and x.imag");
  return Status::ok();
}

}  // namespace

Status split_complex(ir::Module& m) {
  bool any = false;
  for (const auto& n : m.graph.nodes()) {
    any = any || is_fourier(n->op) || n->op == OpKind::kViewAsComplex || n->op == OpKind::kComplex ||
          n->op == OpKind::kPolar;
    for (const ir::Value* v : n->outputs) any = any || complex_value(v);
  }
  for (const ir::Value* v : m.graph.inputs()) any = any || complex_value(v);
  if (!any) return Status::ok();
  Splitter s(m);
  KILN_TRY(s.check_edges());
  std::vector<ir::Node*> order;
  for (const auto& n : m.graph.nodes()) order.push_back(n.get());
  for (ir::Node* n : order) KILN_TRY(s.visit(*n));
  KILN_TRY(eliminate_dead_code(m));
  for (const auto& n : m.graph.nodes())
    for (const ir::Value* v : n->outputs)
      if (complex_value(v)) return internal_error(n->describe() + " still gives a complex tensor after split-complex");
  return Status::ok();
}

}  // namespace kiln::lowering
