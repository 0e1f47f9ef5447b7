// Normalizations: batch_norm (inference, and training: batch statistics with
// the running statistics' update as outputs), _native_batch_norm_legit*,
// native_batch_norm, _batch_norm_with_update*, layer_norm, native_layer_norm, rms_norm, group_norm, native_group_norm.
//
// Statistics are computed in double with two passes (mean, then squared
// deviations), and each result is rounded once to the input's dtype.
// float16/bfloat16 inputs may come with float32 parameters ("mixed type"), as
// PyTorch's CPU kernels allow; their saved statistics are then float32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

bool is_reduced_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// Parameters as contiguous doubles (empty when absent).
struct Param {
  std::vector<double> v;
  bool present = false;
  double at(int64_t i, double fallback) const { return present ? v[static_cast<size_t>(i)] : fallback; }
};

Param load_param(const std::optional<Tensor>& t) {
  Param p;
  if (!t) return p;
  p.present = true;
  Tensor d = t->to(DType::Float64).contiguous();
  p.v.assign(d.data<double>(), d.data<double>() + d.numel());
  return p;
}

// Checks that each parameter is floating and, when given, of `numel` elements.
Status check_params(const KernelArgs& a, const Tensor& x,
                    const std::vector<std::pair<const char*, const std::optional<Tensor>*>>& ps, int64_t numel) {
  if (!is_floating(x.dtype())) return a.error("normalization needs a floating-point input, got " + x.type_string());
  for (const auto& [name, t] : ps) {
    if (!*t) continue;
    if (!is_floating((*t)->dtype()))
      return a.error("'" + std::string(name) + "' must be floating-point, got " + (*t)->type_string());
    if ((*t)->numel() != numel)
      return a.error("'" + std::string(name) + "' " + (*t)->type_string() + " should have " + std::to_string(numel) +
                     " elements");
  }
  return Status::ok();
}

// The dtype of saved statistics: float32 when a reduced-precision input comes with float32 parameters.
DType stats_dtype(const Tensor& x, const std::vector<const std::optional<Tensor>*>& ps) {
  if (is_reduced_float(x.dtype()))
    for (const auto* t : ps)
      if (*t && (*t)->dtype() == DType::Float32) return DType::Float32;
  return x.dtype();
}

// ---- batch norm (inference)

Expected<Tensor> batch_norm_eval(const KernelArgs& a, const Tensor& x, const std::optional<Tensor>& weight,
                                 const std::optional<Tensor>& bias, const std::optional<Tensor>& running_mean,
                                 const std::optional<Tensor>& running_var, double eps) {
  if (x.dim() < 2) return a.error("batch_norm needs an input of rank >= 2, got " + x.type_string());
  if (!running_mean || !running_var) return a.error("running_mean and running_var are required in evaluation mode");
  const int64_t C = x.size(1);
  KILN_TRY(check_params(
      a, x, {{"weight", &weight}, {"bias", &bias}, {"running_mean", &running_mean}, {"running_var", &running_var}}, C));
  const Param w = load_param(weight), b = load_param(bias), m = load_param(running_mean), v = load_param(running_var);
  const int64_t N = x.size(0), plane = C == 0 || N == 0 ? 0 : x.numel() / (N * C);
  Tensor xd = x.to(DType::Float64).contiguous();
  Tensor out = Tensor::zeros(DType::Float64, x.sizes());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const double invstd = 1.0 / std::sqrt(v.at(c, 1) + eps);
      const double scale = invstd * w.at(c, 1), shift = b.at(c, 0) - m.at(c, 0) * scale;
      const double* src = xd.data<double>() + (n * C + c) * plane;
      double* dst = out.data<double>() + (n * C + c) * plane;
      for (int64_t i = 0; i < plane; ++i) dst[i] = src[i] * scale + shift;
    }
  return out.to(x.dtype());
}

// ---- batch norm (training)

struct BatchStats {
  Tensor out, mean, rstd;            // rstd = 1 / sqrt(biased var + eps), per channel
  Tensor running_mean, running_var;  // updated (undefined when not given)
};

// Normalizes with the batch's own statistics over every dim but 1; the running
// statistics, when given, move by `momentum` toward the batch mean and the
// unbiased batch variance, as PyTorch updates them.
Expected<BatchStats> batch_norm_train(const KernelArgs& a, const Tensor& x, const std::optional<Tensor>& weight,
                                      const std::optional<Tensor>& bias, const std::optional<Tensor>& running_mean,
                                      const std::optional<Tensor>& running_var, double momentum, double eps) {
  if (x.dim() < 2) return a.error("batch_norm needs an input of rank >= 2, got " + x.type_string());
  const int64_t C = x.size(1);
  KILN_TRY(check_params(
      a, x, {{"weight", &weight}, {"bias", &bias}, {"running_mean", &running_mean}, {"running_var", &running_var}}, C));
  const int64_t N = x.size(0), plane = C == 0 || N == 0 ? 0 : x.numel() / (N * C), count = N * plane;
  if (count == 0 && C > 0) return a.error("batch_norm in training mode needs at least one value per channel");
  const Param w = load_param(weight), b = load_param(bias), m = load_param(running_mean), v = load_param(running_var);
  const Tensor xd = x.to(DType::Float64).contiguous();
  Tensor out = Tensor::zeros(DType::Float64, x.sizes());
  Tensor mean = Tensor::zeros(DType::Float64, {C}), rstd = Tensor::zeros(DType::Float64, {C});
  Tensor new_mean = Tensor::zeros(DType::Float64, {C}), new_var = Tensor::zeros(DType::Float64, {C});
  for (int64_t c = 0; c < C; ++c) {
    double mu = 0, var = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < plane; ++i) mu += xd.data<double>()[(n * C + c) * plane + i];
    mu /= static_cast<double>(count);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < plane; ++i) {
        const double d = xd.data<double>()[(n * C + c) * plane + i] - mu;
        var += d * d;
      }
    const double biased = var / static_cast<double>(count);
    const double unbiased = count > 1 ? var / static_cast<double>(count - 1) : std::numeric_limits<double>::infinity();
    const double rs = 1.0 / std::sqrt(biased + eps), scale = rs * w.at(c, 1), shift = b.at(c, 0) - mu * scale;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < plane; ++i) {
        const int64_t k = (n * C + c) * plane + i;
        out.data<double>()[k] = xd.data<double>()[k] * scale + shift;
      }
    mean.data<double>()[c] = mu;
    rstd.data<double>()[c] = rs;
    new_mean.data<double>()[c] = (1 - momentum) * m.at(c, 0) + momentum * mu;
    new_var.data<double>()[c] = (1 - momentum) * v.at(c, 1) + momentum * unbiased;
  }
  const DType st = stats_dtype(x, {&weight, &bias, &running_mean, &running_var});
  BatchStats r{out.to(x.dtype()), mean.to(st), rstd.to(st), {}, {}};
  if (running_mean) r.running_mean = new_mean.to(running_mean->dtype());
  if (running_var) r.running_var = new_var.to(running_var->dtype());
  return r;
}

// The batch norms with saved statistics, by where their arguments and outputs are:
//   native_batch_norm(input, weight, bias, running_mean?, running_var?, training, momentum, eps)
//     -> (out, save_mean, save_invstd)
//   _native_batch_norm_legit(... running_mean, running_var, training, momentum, eps) -> the same three
//   _native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps) -> the same three
//   _native_batch_norm_legit_functional(...) -> (out, mean, invstd, running_mean_out, running_var_out)
//   _batch_norm_with_update_functional(input, weight, bias, running_mean, running_var, momentum, eps)
//     -> (out, mean, invstd, reserve [0 bytes], running_mean_out, running_var_out)
// The training dialect's writing forms (_native_batch_norm_legit,
// _batch_norm_with_update) reach this kernel as their functional forms:
// functionalization turns their writes into those extra outputs.
Status native_batch_norm(KernelArgs& a) {
  const ir::OpKind op = a.node().op;
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("input"));
  KILN_ASSIGN_OR_RETURN(auto weight, a.optional_tensor("weight"));
  KILN_ASSIGN_OR_RETURN(auto bias, a.optional_tensor("bias"));
  std::optional<Tensor> rm, rv;
  if (a.has("running_mean")) {
    KILN_ASSIGN_OR_RETURN(rm, a.optional_tensor("running_mean"));
    KILN_ASSIGN_OR_RETURN(rv, a.optional_tensor("running_var"));
  }
  const bool update = op == ir::OpKind::kBatchNormWithUpdateFunctional;
  bool training = true;
  if (!update) {
    KILN_ASSIGN_OR_RETURN(training, a.bool_arg("training"));
  }
  KILN_ASSIGN_OR_RETURN(double momentum, a.float_arg("momentum", 0.1));
  KILN_ASSIGN_OR_RETURN(double eps, a.float_arg("eps", 1e-5));
  BatchStats st;
  if (training) {
    KILN_ASSIGN_OR_RETURN(st, batch_norm_train(a, x, weight, bias, rm, rv, momentum, eps));
  } else {
    KILN_ASSIGN_OR_RETURN(st.out, batch_norm_eval(a, x, weight, bias, rm, rv, eps));
    const DType sd = stats_dtype(x, {&weight, &bias, &rm, &rv});
    st.mean = Tensor::zeros(sd, {0});
    st.rstd = Tensor::zeros(sd, {0});
    if (rm) st.running_mean = *rm;
    if (rv) st.running_var = *rv;
  }
  a.set_output(0, st.out);
  a.set_output(1, st.mean);
  a.set_output(2, st.rstd);
  if (op == ir::OpKind::kNativeBatchNormLegitFunctional || update) {
    if (!rm || !rv) return a.error("running_mean and running_var are required");
    size_t next = 3;
    if (update) a.set_output(next++, Tensor::zeros(DType::UInt8, {0}));
    a.set_output(next++, st.running_mean);
    a.set_output(next, st.running_var);
  }
  return Status::ok();
}

// aten.batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled)
Status batch_norm(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("input"));
  KILN_ASSIGN_OR_RETURN(auto weight, a.optional_tensor("weight"));
  KILN_ASSIGN_OR_RETURN(auto bias, a.optional_tensor("bias"));
  KILN_ASSIGN_OR_RETURN(auto rm, a.optional_tensor("running_mean"));
  KILN_ASSIGN_OR_RETURN(auto rv, a.optional_tensor("running_var"));
  KILN_ASSIGN_OR_RETURN(bool training, a.bool_arg("training"));
  KILN_ASSIGN_OR_RETURN(double eps, a.float_arg("eps", 1e-5));
  if (training) {
    KILN_ASSIGN_OR_RETURN(double momentum, a.float_arg("momentum", 0.1));
    KILN_ASSIGN_OR_RETURN(BatchStats st, batch_norm_train(a, x, weight, bias, rm, rv, momentum, eps));
    a.set_output(0, st.out);
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(Tensor out, batch_norm_eval(a, x, weight, bias, rm, rv, eps));
  a.set_output(0, out);
  return Status::ok();
}

// aten._native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps)
// -> (out, save_mean [0], save_invstd [0]): inference saves no statistics.
Status native_batch_norm_no_training(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("input"));
  KILN_ASSIGN_OR_RETURN(auto weight, a.optional_tensor("weight"));
  KILN_ASSIGN_OR_RETURN(auto bias, a.optional_tensor("bias"));
  KILN_ASSIGN_OR_RETURN(auto rm, a.optional_tensor("running_mean"));
  KILN_ASSIGN_OR_RETURN(auto rv, a.optional_tensor("running_var"));
  KILN_ASSIGN_OR_RETURN(double eps, a.float_arg("eps", 1e-5));
  KILN_ASSIGN_OR_RETURN(Tensor out, batch_norm_eval(a, x, weight, bias, rm, rv, eps));
  const DType st = stats_dtype(x, {&weight, &bias, &rm, &rv});
  a.set_output(0, out);
  a.set_output(1, Tensor::zeros(st, {0}));
  a.set_output(2, Tensor::zeros(st, {0}));
  return Status::ok();
}

// ---- layer norm / rms norm

// Splits x into M rows of N trailing elements matching `normalized_shape`.
Status split_rows(const KernelArgs& a, const Tensor& x, const std::vector<int64_t>& normalized_shape,
                  const std::vector<std::pair<const char*, const std::optional<Tensor>*>>& params, int64_t& M,
                  int64_t& N) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  if (k == 0) return a.error("normalized_shape must have at least one dim");
  if (x.dim() < k || !std::equal(normalized_shape.begin(), normalized_shape.end(), x.sizes().end() - k))
    return a.error("normalized_shape " + shape_to_string(normalized_shape) + " does not match the trailing dims of " +
                   x.type_string());
  for (const auto& [name, t] : params)
    if (*t && (*t)->sizes() != normalized_shape)
      return a.error("'" + std::string(name) + "' " + (*t)->type_string() + " must have shape normalized_shape " +
                     shape_to_string(normalized_shape));
  N = 1;
  for (int64_t s : normalized_shape) N *= s;
  M = 1;
  for (int64_t d = 0; d < x.dim() - k; ++d) M *= x.size(d);
  return check_params(a, x, params, N);
}

// Layer norm: fills out, and mean/rstd per row.
Status layer_norm_common(KernelArgs& a, bool three_outputs) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("input"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, a.ints("normalized_shape"));
  KILN_ASSIGN_OR_RETURN(auto weight, a.optional_tensor("weight"));
  KILN_ASSIGN_OR_RETURN(auto bias, a.optional_tensor("bias"));
  KILN_ASSIGN_OR_RETURN(double eps, a.float_arg("eps", 1e-5));
  int64_t M = 0, N = 0;
  KILN_TRY(split_rows(a, x, shape, {{"weight", &weight}, {"bias", &bias}}, M, N));
  const Param w = load_param(weight), b = load_param(bias);
  Tensor xd = x.to(DType::Float64).contiguous();
  Tensor out = Tensor::zeros(DType::Float64, x.sizes());
  Shape stat_shape(x.sizes().begin(), x.sizes().end() - static_cast<int64_t>(shape.size()));
  stat_shape.resize(static_cast<size_t>(x.dim()), 1);
  Tensor mean = Tensor::zeros(DType::Float64, stat_shape), rstd = Tensor::zeros(DType::Float64, stat_shape);
  for (int64_t r = 0; r < M; ++r) {
    const double* src = xd.data<double>() + r * N;
    double* dst = out.data<double>() + r * N;
    double mu = 0, var = 0;
    for (int64_t i = 0; i < N; ++i) mu += src[i];
    mu /= static_cast<double>(N);
    for (int64_t i = 0; i < N; ++i) var += (src[i] - mu) * (src[i] - mu);
    var /= static_cast<double>(N);
    const double rs = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < N; ++i) dst[i] = (src[i] - mu) * rs * w.at(i, 1) + b.at(i, 0);
    mean.data<double>()[r] = mu;
    rstd.data<double>()[r] = rs;
  }
  a.set_output(0, out.to(x.dtype()));
  if (three_outputs) {
    const DType st = stats_dtype(x, {&weight, &bias});
    a.set_output(1, mean.to(st));
    a.set_output(2, rstd.to(st));
  }
  return Status::ok();
}

Status layer_norm(KernelArgs& a) { return layer_norm_common(a, false); }
Status native_layer_norm(KernelArgs& a) { return layer_norm_common(a, true); }

// rms_norm(input, normalized_shape, weight=None, eps=None): x * rsqrt(mean(x^2) + eps) * weight.
// eps=None is the machine epsilon of the compute type (float32 for float16/bfloat16/float32), as in ATen.
Status rms_norm(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("input"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, a.ints("normalized_shape"));
  KILN_ASSIGN_OR_RETURN(auto weight, a.optional_tensor("weight"));
  KILN_ASSIGN_OR_RETURN(auto eps_arg, a.optional_float("eps"));
  int64_t M = 0, N = 0;
  KILN_TRY(split_rows(a, x, shape, {{"weight", &weight}}, M, N));
  const double eps =
      eps_arg.value_or(x.dtype() == DType::Float64 ? std::numeric_limits<double>::epsilon()
                                                   : static_cast<double>(std::numeric_limits<float>::epsilon()));
  const Param w = load_param(weight);
  Tensor xd = x.to(DType::Float64).contiguous();
  Tensor out = Tensor::zeros(DType::Float64, x.sizes());
  for (int64_t r = 0; r < M; ++r) {
    const double* src = xd.data<double>() + r * N;
    double* dst = out.data<double>() + r * N;
    double ms = 0;
    for (int64_t i = 0; i < N; ++i) ms += src[i] * src[i];
    const double rs = 1.0 / std::sqrt(ms / static_cast<double>(N) + eps);
    for (int64_t i = 0; i < N; ++i) dst[i] = src[i] * rs * w.at(i, 1);
  }
  a.set_output(0, out.to(x.dtype()));
  return Status::ok();
}

// ---- group norm

// x [N, C, *] in groups of C/G channels; returns out and per-(n, g) mean/rstd.
Status group_norm_common(KernelArgs& a, const Tensor& x, int64_t groups, const std::optional<Tensor>& weight,
                         const std::optional<Tensor>& bias, double eps, Tensor& out, Tensor& mean, Tensor& rstd) {
  if (x.dim() < 2) return a.error("group_norm needs an input of rank >= 2, got " + x.type_string());
  const int64_t N = x.size(0), C = x.size(1);
  if (groups <= 0 || C % groups != 0)
    return a.error("num_groups " + std::to_string(groups) + " must divide the " + std::to_string(C) + " channels of " +
                   x.type_string());
  KILN_TRY(check_params(a, x, {{"weight", &weight}, {"bias", &bias}}, C));
  const int64_t plane = C == 0 || N == 0 ? 0 : x.numel() / (N * C), cg = C / groups, run = cg * plane;
  const Param w = load_param(weight), b = load_param(bias);
  Tensor xd = x.to(DType::Float64).contiguous();
  out = Tensor::zeros(DType::Float64, x.sizes());
  mean = Tensor::zeros(DType::Float64, {N, groups});
  rstd = Tensor::zeros(DType::Float64, {N, groups});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t base = (n * C + g * cg) * plane;
      const double* src = xd.data<double>() + base;
      double* dst = out.data<double>() + base;
      double mu = 0, var = 0;
      for (int64_t i = 0; i < run; ++i) mu += src[i];
      mu /= static_cast<double>(run);
      for (int64_t i = 0; i < run; ++i) var += (src[i] - mu) * (src[i] - mu);
      var /= static_cast<double>(run);
      const double rs = 1.0 / std::sqrt(var + eps);
      for (int64_t i = 0; i < run; ++i) {
        const int64_t c = g * cg + i / plane;
        dst[i] = (src[i] - mu) * rs * w.at(c, 1) + b.at(c, 0);
      }
      mean.data<double>()[n * groups + g] = mu;
      rstd.data<double>()[n * groups + g] = rs;
    }
  out = out.to(x.dtype());
  const DType st = stats_dtype(x, {&weight, &bias});
  mean = mean.to(st);
  rstd = rstd.to(st);
  return Status::ok();
}

// aten.group_norm(input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True)
Status group_norm(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("input"));
  KILN_ASSIGN_OR_RETURN(int64_t groups, a.int_arg("num_groups"));
  KILN_ASSIGN_OR_RETURN(auto weight, a.optional_tensor("weight"));
  KILN_ASSIGN_OR_RETURN(auto bias, a.optional_tensor("bias"));
  KILN_ASSIGN_OR_RETURN(double eps, a.float_arg("eps"));
  Tensor out, mean, rstd;
  KILN_TRY(group_norm_common(a, x, groups, weight, bias, eps, out, mean, rstd));
  a.set_output(0, out);
  return Status::ok();
}

// aten.native_group_norm(input, weight, bias, N, C, HxW, group, eps) -> (out, mean [N, group], rstd [N, group])
Status native_group_norm(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("input"));
  KILN_ASSIGN_OR_RETURN(auto weight, a.optional_tensor("weight"));
  KILN_ASSIGN_OR_RETURN(auto bias, a.optional_tensor("bias"));
  KILN_ASSIGN_OR_RETURN(int64_t N, a.int_arg("N"));
  KILN_ASSIGN_OR_RETURN(int64_t C, a.int_arg("C"));
  KILN_ASSIGN_OR_RETURN(int64_t HxW, a.int_arg("HxW"));
  KILN_ASSIGN_OR_RETURN(int64_t groups, a.int_arg("group"));
  KILN_ASSIGN_OR_RETURN(double eps, a.float_arg("eps"));
  if (x.dim() < 2 || x.size(0) != N || x.size(1) != C || x.numel() != N * C * HxW)
    return a.error("input " + x.type_string() + " does not match N=" + std::to_string(N) + ", C=" + std::to_string(C) +
                   ", HxW=" + std::to_string(HxW));
  Tensor out, mean, rstd;
  KILN_TRY(group_norm_common(a, x, groups, weight, bias, eps, out, mean, rstd));
  a.set_output(0, out);
  a.set_output(1, mean);
  a.set_output(2, rstd);
  return Status::ok();
}

}  // namespace

void register_norm_kernels(KernelRegistry& r) {
  r.add(ir::OpKind::kBatchNorm, &batch_norm);
  r.add(ir::OpKind::kNativeBatchNormNoTraining, &native_batch_norm_no_training);
  for (ir::OpKind k : {ir::OpKind::kNativeBatchNorm, ir::OpKind::kNativeBatchNormLegitNoStats,
                       ir::OpKind::kNativeBatchNormLegitFunctional, ir::OpKind::kBatchNormWithUpdateFunctional})
    r.add(k, &native_batch_norm);
  r.add(ir::OpKind::kLayerNorm, &layer_norm);
  r.add(ir::OpKind::kNativeLayerNorm, &native_layer_norm);
  r.add(ir::OpKind::kRmsNorm, &rms_norm);
  r.add(ir::OpKind::kGroupNorm, &group_norm);
  r.add(ir::OpKind::kNativeGroupNorm, &native_group_norm);
}

}  // namespace kiln::cpu
