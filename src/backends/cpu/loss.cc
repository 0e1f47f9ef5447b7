// Losses whose terms depend on the data's own structure, which decompositions
// into static-size core ops cannot express: multilabel_margin_loss.
#include <algorithm>
#include <string>
#include <vector>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

// multilabel_margin_loss(self, target, reduction): self [C] or [N, C] (0-d:
// one class), target the same shape of class numbers, each row's targets
// ending at its first -1. Per sample: the sum over its targets j and the
// classes i that are not targets of max(0, 1 - (x[j] - x[i])), over C.
// reduction 0 none, 1 mean, 2 sum.
Status multilabel_margin_loss(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor target, a.tensor("target"));
  KILN_ASSIGN_OR_RETURN(int64_t reduction, a.int_arg("reduction"));
  if (!is_floating(self.dtype())) return a.error("self must be floating-point, got " + self.type_string());
  if (self.dim() > 2 || target.sizes() != self.sizes() || !is_integral(target.dtype()))
    return a.error("target " + target.type_string() + " must be integers of self's shape " + self.type_string());
  if (reduction < 0 || reduction > 2) return a.error("reduction must be 0, 1 or 2, got " + std::to_string(reduction));
  const int64_t C = self.dim() == 0 ? 1 : self.size(-1), N = self.dim() == 2 ? self.size(0) : 1;
  const Tensor x = cast_copy(self, DType::Float64), t = cast_copy(target, DType::Int64);
  std::vector<double> losses;
  for (int64_t n = 0; n < N; ++n) {
    const double* xs = x.data<double>() + n * C;
    const int64_t* ts = t.data<int64_t>() + n * C;
    std::vector<bool> is_target(static_cast<size_t>(C), false);
    int64_t count = 0;
    for (; count < C && ts[count] != -1; ++count) {
      if (ts[count] < 0 || ts[count] >= C)
        return a.error("target " + std::to_string(ts[count]) + " is out of range for " + std::to_string(C) +
                       " classes");
      is_target[static_cast<size_t>(ts[count])] = true;
    }
    double sum = 0;
    for (int64_t k = 0; k < count; ++k)
      for (int64_t i = 0; i < C; ++i)
        if (!is_target[static_cast<size_t>(i)]) sum += std::max(0.0, 1 - (xs[ts[k]] - xs[i]));
    losses.push_back(sum / static_cast<double>(C));
  }
  Tensor out;
  if (reduction == 0) {
    out = Tensor::zeros(DType::Float64, self.dim() == 2 ? Shape{N} : Shape{});
    std::copy(losses.begin(), losses.end(), out.data<double>());
  } else {
    double total = 0;
    for (double l : losses) total += l;
    out = Tensor::scalar(DType::Float64, reduction == 1 ? total / static_cast<double>(N) : total);
  }
  a.set_output(0, out.to(self.dtype()));
  return Status::ok();
}

}  // namespace

void register_loss_kernels(KernelRegistry& r) { r.add(ir::OpKind::kMultilabelMarginLoss, &multilabel_margin_loss); }

}  // namespace kiln::cpu
