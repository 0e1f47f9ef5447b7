// Copy and conversion kernels: clone, copy, contiguous, to / _to_copy,
// type_as, dropout (inference only) and lift_fresh_copy. Every result is a
// fresh contiguous tensor; device, layout and memory_format are ignored.
#include <string>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

Status clone(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  a.set_output(0, cast_copy(self, self.dtype()));
  return Status::ok();
}

// copy(self, src): self's shape and dtype, src's values broadcast into it.
Status copy(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor src, a.tensor("src"));
  if (!can_expand(src.sizes(), self.sizes()))
    return a.error("src " + src.type_string() + " cannot be broadcast to self " + self.type_string());
  Tensor out = Tensor::zeros(self.dtype(), self.sizes());
  copy_into(out, expand_to(src, self.sizes()));
  a.set_output(0, out);
  return Status::ok();
}

// to.dtype(self, dtype) / to.dtype_layout(self, dtype=None) / _to_copy(self, dtype=None).
template <bool kDtypeRequired>
Status to_dtype(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::optional<DType> dtype, a.dtype_arg("dtype"));
  if (kDtypeRequired && !dtype) return a.error("missing argument 'dtype'");
  a.set_output(0, cast_copy(self, dtype.value_or(self.dtype())));
  return Status::ok();
}

Status type_as(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor other, a.tensor("other"));
  a.set_output(0, cast_copy(self, other.dtype()));
  return Status::ok();
}

// dropout(input, p, train): the identity in inference.
Status dropout(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor input, a.tensor("input"));
  KILN_ASSIGN_OR_RETURN(double p, a.float_arg("p", 0.5));
  KILN_ASSIGN_OR_RETURN(bool train, a.bool_arg("train"));
  if (p < 0 || p > 1) return a.error("dropout probability has to be between 0 and 1, but got " + std::to_string(p));
  if (train) return a.error("dropout in training mode is not supported (export the model in eval mode)");
  a.set_output(0, cast_copy(input, input.dtype()));
  return Status::ok();
}

}  // namespace

void register_copy_kernels(KernelRegistry& r) {
  using ir::OpKind;
  r.add(OpKind::kClone, &clone);
  r.add(OpKind::kCopy, &copy);
  r.add(OpKind::kContiguous, &clone);
  r.add(OpKind::kTo, &to_dtype<true>);
  r.add(OpKind::kToDtypeLayout, &to_dtype<false>);
  r.add(OpKind::kToCopy, &to_dtype<false>);
  // to.device: the reference backend runs on the host; the move is a copy.
  r.add(OpKind::kToDevice, &to_dtype<true>);
  r.add(OpKind::kTypeAs, &type_as);
  r.add(OpKind::kDropout, &dropout);
  r.add(OpKind::kLiftFreshCopy, &clone);
}

}  // namespace kiln::cpu
