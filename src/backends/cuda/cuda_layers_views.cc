// The CUDA builder's layers, views: strides over the same bytes (no step), identities, casts, concatenation,
// constant padding.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string_view>

#include "backends/cuda/cuda_layers.h"

namespace kiln::cuda::layers {

Status emit_view(Builder& b, const ir::Node& n) {
  const std::string& layer = n.name;
  const ir::Value* self = n.operands().empty() ? nullptr : n.operands()[0];
  if (!self) return internal_error("view without an operand");
  KILN_ASSIGN_OR_RETURN(TRef in, b.ref(self));
  const ir::Value* out = n.outputs[0];
  const std::vector<int64_t> out_sizes = static_sizes(out);
  const size_t rank = in.sizes.size();
  // A dim argument within [0, rank) once wrapped: a .pt2's attributes and
  // tensor_meta are not trusted to agree with the operand.
  auto dim_in = [&](int64_t d, size_t of_rank, const char* what) -> Expected<size_t> {
    const int64_t nd = norm_dim(d, of_rank);
    if (nd < 0 || nd >= static_cast<int64_t>(of_rank))
      return invalid_argument(std::string(what) + " dim " + std::to_string(d) + " of a " + std::to_string(of_rank) +
                              "-d tensor");
    return static_cast<size_t>(nd);
  };
  auto same_rank = [&](const std::vector<int64_t>& os, size_t want) -> Status {
    if (os.size() != want)
      return invalid_argument("the exported output " + shape_to_string(os) + " of a view of " +
                              shape_to_string(in.sizes) + " has rank " + std::to_string(os.size()) + ", not " +
                              std::to_string(want));
    return Status::ok();
  };
  switch (n.op) {
    case OpKind::kDiagonal: {
      // The other dims in order, then the diagonal: its stride the sum of
      // both dims', its start `offset` along dim2 (above) or dim1 (below).
      if (rank < 2) return invalid_argument("diagonal of a " + std::to_string(rank) + "-d tensor");
      KILN_ASSIGN_OR_RETURN(const size_t d1, dim_in(int_arg(n, "dim1").value_or(0), rank, "diagonal"));
      KILN_ASSIGN_OR_RETURN(const size_t d2, dim_in(int_arg(n, "dim2").value_or(1), rank, "diagonal"));
      if (d1 == d2) return invalid_argument("diagonal of dim " + std::to_string(d1) + " with itself");
      const int64_t off = int_arg(n, "offset").value_or(0);
      const int64_t len = std::max<int64_t>(
          0, off >= 0 ? std::min(in.sizes[d1], in.sizes[d2] - off) : std::min(in.sizes[d1] + off, in.sizes[d2]));
      TRef r = in;
      r.sizes.clear();
      r.strides.clear();
      for (size_t d = 0; d < rank; ++d)
        if (d != d1 && d != d2) {
          r.sizes.push_back(in.sizes[d]);
          r.strides.push_back(in.strides[d]);
        }
      r.sizes.push_back(len);
      r.strides.push_back(in.strides[d1] + in.strides[d2]);
      if (len > 0)
        r.buf.offset +=
            (off >= 0 ? off * in.strides[d2] : -off * in.strides[d1]) * static_cast<int64_t>(dtype_size(in.dtype));
      if (r.sizes != out_sizes)
        return invalid_argument("the exported output " + shape_to_string(out_sizes) + " of a diagonal of " +
                                shape_to_string(in.sizes) + " is not " + shape_to_string(r.sizes));
      b.bind(out, r);
      return Status::ok();
    }
    case OpKind::kPermute: {
      auto dims = ints_arg(n, "dims");
      if (!dims || dims->size() != rank) return invalid_argument("permute: bad dims");
      TRef r = in;
      std::vector<bool> seen(rank, false);
      for (size_t d = 0; d < rank; ++d) {
        KILN_ASSIGN_OR_RETURN(const size_t s, dim_in((*dims)[d], rank, "permute"));
        if (seen[s]) return invalid_argument("permute names dim " + std::to_string(s) + " twice");
        seen[s] = true;
        r.sizes[d] = in.sizes[s];
        r.strides[d] = in.strides[s];
      }
      b.bind(out, r);
      return Status::ok();
    }
    case OpKind::kTranspose:
    case OpKind::kT: {
      TRef r = in;
      if (rank >= 2) {
        KILN_ASSIGN_OR_RETURN(const size_t d0,
                              dim_in(n.op == OpKind::kT ? 0 : int_arg(n, "dim0").value_or(0), rank, "transpose"));
        KILN_ASSIGN_OR_RETURN(const size_t d1,
                              dim_in(n.op == OpKind::kT ? 1 : int_arg(n, "dim1").value_or(1), rank, "transpose"));
        std::swap(r.sizes[d0], r.sizes[d1]);
        std::swap(r.strides[d0], r.strides[d1]);
      }
      b.bind(out, r);
      return Status::ok();
    }
    case OpKind::kExpand:
    case OpKind::kExpandAs: {
      KILN_ASSIGN_OR_RETURN(TRef r, expanded(in, out_sizes));
      b.bind(out, r);
      return Status::ok();
    }
    case OpKind::kSelectInt: {
      KILN_ASSIGN_OR_RETURN(const size_t d, dim_in(int_arg(n, "dim").value_or(0), rank, "select"));
      int64_t idx = int_arg(n, "index").value_or(0);
      if (idx < 0) idx += in.sizes[d];
      if (idx < 0 || idx >= in.sizes[d])
        return invalid_argument("select of index " + std::to_string(int_arg(n, "index").value_or(0)) +
                                " along a dim of size " + std::to_string(in.sizes[d]));
      TRef r = narrowed(in, d, idx, 1);
      r.sizes.erase(r.sizes.begin() + static_cast<long>(d));
      r.strides.erase(r.strides.begin() + static_cast<long>(d));
      b.bind(out, r);
      return Status::ok();
    }
    case OpKind::kSliceTensor:
    case OpKind::kNarrow: {
      KILN_ASSIGN_OR_RETURN(const size_t d, dim_in(int_arg(n, "dim").value_or(0), rank, "slice"));
      KILN_TRY(same_rank(out_sizes, rank));
      int64_t start = int_arg(n, "start").value_or(0);
      if (start < 0) start += in.sizes[d];
      start = std::clamp<int64_t>(start, 0, in.sizes[d]);
      const int64_t step = n.op == OpKind::kSliceTensor ? int_arg(n, "step").value_or(1) : 1;
      // The exported length must lie inside the operand along d.
      if (step < 1 || out_sizes[d] < 0 || (out_sizes[d] > 0 && start + (out_sizes[d] - 1) * step >= in.sizes[d]))
        return invalid_argument("a slice of " + std::to_string(out_sizes[d]) + " from " + std::to_string(start) +
                                " step " + std::to_string(step) + " along a dim of size " +
                                std::to_string(in.sizes[d]));
      b.bind(out, narrowed(in, d, start, out_sizes[d], step));
      return Status::ok();
    }
    case OpKind::kSplitTensor:
    case OpKind::kSplitWithSizes:
    case OpKind::kChunk:
    case OpKind::kUnbind: {
      KILN_ASSIGN_OR_RETURN(const size_t d, dim_in(int_arg(n, "dim").value_or(0), rank, "split"));
      int64_t start = 0;
      for (const ir::Value* o : n.outputs) {
        const std::vector<int64_t> os = static_sizes(o);
        KILN_TRY(same_rank(os, n.op == OpKind::kUnbind ? rank - 1 : rank));
        if (start + (n.op == OpKind::kUnbind ? 1 : os[d]) > in.sizes[d])
          return invalid_argument("the parts of a split along dim " + std::to_string(d) + " are longer than its " +
                                  std::to_string(in.sizes[d]));
        if (n.op == OpKind::kUnbind) {
          TRef r = narrowed(in, d, start, 1);
          r.sizes.erase(r.sizes.begin() + static_cast<long>(d));
          r.strides.erase(r.strides.begin() + static_cast<long>(d));
          b.bind(o, r);
          start += 1;
        } else {
          b.bind(o, narrowed(in, d, start, os[d]));
          start += os[d];
        }
      }
      return Status::ok();
    }
    default: break;
  }
  // view, reshape, flatten, unflatten, squeeze, unsqueeze and identities
  KILN_ASSIGN_OR_RETURN(TRef r, reshaped(b, in, out_sizes, layer));
  b.bind(out, r);
  return Status::ok();
}

Status emit_cat(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  const DType dt = b.compute_dtype(out->type.dtype);
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  if (!ins) return internal_error("cat without tensors");
  const std::vector<int64_t> os = static_sizes(out);
  const int64_t nd = norm_dim(int_arg(n, "dim").value_or(0), os.size());
  if (nd < 0 || nd >= static_cast<int64_t>(os.size()))
    return invalid_argument("cat along dim " + std::to_string(int_arg(n, "dim").value_or(0)) + " of " +
                            shape_to_string(os));
  const auto d = static_cast<size_t>(nd);
  TRef o = b.new_tensor(dt, os);
  int64_t start = 0;
  for (const ir::Value* v : *ins) {
    KILN_ASSIGN_OR_RETURN(TRef r, b.ref(v));
    if (r.sizes.size() != os.size()) continue;  // legacy empty 1-D operands
    bool fits = start + r.sizes[d] <= os[d];
    for (size_t k = 0; k < os.size(); ++k) fits = fits && (k == d || r.sizes[k] == os[k]);
    if (!fits)
      return invalid_argument("cat of " + shape_to_string(r.sizes) + " at " + std::to_string(start) + " along dim " +
                              std::to_string(d) + " does not fit the exported output " + shape_to_string(os));
    TRef slice = narrowed(o, d, start, r.sizes[d]);
    start += r.sizes[d];
    if (prod(r.sizes) == 0) continue;
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k, copy_kernel(slice.layout(), r.layout()));
    KILN_TRY(b.launch(n.name, std::move(k), {slice.buf, r.buf}));
  }
  b.bind(out, o);
  return Status::ok();
}

// constant_pad_nd: the output filled with the value where padding grows a
// dim, then the input (cropped where padding is negative) copied into place.
namespace {

// A pad node's mode: aten.pad's, or its op's (reflection_padNd, replication_padNd).
std::string pad_mode(const ir::Node& n) {
  switch (n.op) {
    case OpKind::kPad: {
      const std::string m = string_arg(n, "mode");
      return m.empty() ? "constant" : m;
    }
    case OpKind::kReflectionPad1d:
    case OpKind::kReflectionPad2d:
    case OpKind::kReflectionPad3d: return "reflect";
    case OpKind::kReplicationPad1d:
    case OpKind::kReplicationPad2d:
    case OpKind::kReplicationPad3d: return "replicate";
    default: return "constant";
  }
}

// The pads, last dim first, before and after each.
std::optional<std::vector<int64_t>> pad_list(const ir::Node& n) {
  return ints_arg(n, n.op == OpKind::kConstantPadNd || n.op == OpKind::kPad ? "pad" : "padding");
}

// A pad that reads past the edges: one gather kernel.
Status emit_pad_edges(Builder& b, const ir::Node& n, const std::string& mode) {
  const ir::Value* out = n.outputs[0];
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(n.operands()[0]));
  const DType dt = b.compute_dtype(out->type.dtype);
  if (x.dtype != dt) {
    KILN_ASSIGN_OR_RETURN(x, b.contiguous(x, n.name, dt));
  }
  const std::vector<int64_t> os = static_sizes(out);
  const auto pad = pad_list(n);
  if (!pad || pad->size() % 2 != 0 || pad->size() / 2 > x.sizes.size() || os.size() != x.sizes.size())
    return invalid_argument(n.name + ": a " + mode + " pad of " + shape_to_string(x.sizes) + " to " +
                            shape_to_string(os));
  std::vector<int64_t> before(os.size(), 0);
  for (size_t k = 0; k < pad->size() / 2; ++k) {
    const size_t d = x.sizes.size() - 1 - k;
    const int64_t lo = (*pad)[2 * k], hi = (*pad)[2 * k + 1], len = x.sizes[d];
    if (len + lo + hi != os[d])
      return invalid_argument(n.name + ": a pad of " + shape_to_string(x.sizes) + " by " + std::to_string(lo) + ", " +
                              std::to_string(hi) + " along dim " + std::to_string(d) + " does not give the exported " +
                              shape_to_string(os));
    if (mode == "reflect" ? lo >= len || hi >= len : mode == "circular" ? lo > len || hi > len : len < 1)
      return invalid_argument(n.name + ": a " + mode + " pad of " + std::to_string(lo) + ", " + std::to_string(hi) +
                              " along dim " + std::to_string(d) + " of size " + std::to_string(len) +
                              " reaches past the other edge");
    before[d] = lo;
  }
  TRef o = b.new_tensor(dt, os);
  if (prod(os) > 0) {
    const int m = mode == "reflect" ? 0 : mode == "replicate" ? 1 : 2;
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k, pad_edges_kernel(o.layout(), x.layout(), before, m));
    KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf}));
  }
  b.bind(out, o);
  return Status::ok();
}

}  // namespace

Status emit_pad(Builder& b, const ir::Node& n) {
  if (const std::string mode = pad_mode(n); mode != "constant") return emit_pad_edges(b, n, mode);
  const ir::Value* out = n.outputs[0];
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(n.operands()[0]));
  const DType dt = b.compute_dtype(out->type.dtype);
  const std::vector<int64_t> os = static_sizes(out);
  const auto pad = pad_list(n);
  if (!pad || pad->size() % 2 != 0 || pad->size() / 2 > x.sizes.size() || os.size() != x.sizes.size())
    return invalid_argument("constant_pad_nd of " + shape_to_string(x.sizes) + " to " + shape_to_string(os));
  TRef o = b.new_tensor(dt, os);
  TRef src = x, dst = o;
  bool grows = false;
  for (size_t k = 0; k < pad->size() / 2; ++k) {
    const size_t d = x.sizes.size() - 1 - k;
    const int64_t lo = (*pad)[2 * k], hi = (*pad)[2 * k + 1];
    if (x.sizes[d] + lo + hi != os[d])
      return invalid_argument("constant_pad_nd of " + shape_to_string(x.sizes) + " by " + std::to_string(lo) + ", " +
                              std::to_string(hi) + " along dim " + std::to_string(d) + " does not give the exported " +
                              shape_to_string(os));
    grows = grows || lo > 0 || hi > 0;
    const int64_t keep = std::max<int64_t>(0, x.sizes[d] - std::max<int64_t>(-lo, 0) - std::max<int64_t>(-hi, 0));
    src = narrowed(src, d, keep > 0 ? std::max<int64_t>(-lo, 0) : 0, keep);
    dst = narrowed(dst, d, keep > 0 ? std::max<int64_t>(lo, 0) : 0, keep);
  }
  const bool copies = prod(src.sizes) > 0;
  if (prod(os) > 0 && (grows || !copies)) {
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k, fill_kernel(o.layout(), double_arg(n, "value").value_or(0.0)));
    KILN_TRY(b.launch(n.name, std::move(k), {o.buf}));
  }
  if (copies) {
    KILN_ASSIGN_OR_RETURN(GeneratedKernel k, copy_kernel(dst.layout(), src.layout()));
    KILN_TRY(b.launch(n.name, std::move(k), {dst.buf, src.buf}));
  }
  b.bind(out, o);
  return Status::ok();
}

Status emit_cast(Builder& b, const ir::Node& n) {
  const ir::Value* out = n.outputs[0];
  KILN_ASSIGN_OR_RETURN(TRef x, b.ref(n.operands()[0]));
  const DType dt = b.compute_dtype(out->type.dtype);
  if (x.dtype == dt) {
    b.bind(out, x);
    return Status::ok();
  }
  TRef o = b.new_tensor(dt, x.sizes);
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, copy_kernel(o.layout(), x.layout()));
  KILN_TRY(b.launch(n.name, std::move(k), {o.buf, x.buf}));
  b.bind(out, o);
  return Status::ok();
}

// Aliases, clones and inference-mode dropout of a tensor.
std::string identity_refusal(const ir::Node& n) {
  const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  if (n.operands().empty() || n.operands()[0]->kind != ir::ValueKind::kTensor || !out)
    return "an identity of something that is not a tensor";
  if (n.op == OpKind::kDropout && bool_arg(n, "train")) return "dropout in training mode";
  return "";
}

// Conversions of a tensor to another dtype (or device: the same memory here).
std::string cast_refusal(const ir::Node& n) {
  const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  if (!out || out->kind != ir::ValueKind::kTensor || n.operands().empty() ||
      n.operands()[0]->kind != ir::ValueKind::kTensor)
    return "not a tensor cast";
  return "";
}

std::string as_strided_refusal(const ir::Node& n) {
  const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  const ir::Value* self = n.operands().empty() ? nullptr : n.operands()[0];
  if (!out || !self || self->kind != ir::ValueKind::kTensor) return "not a tensor view";
  const auto stride = ints_arg(n, "stride");
  const auto offset = int_arg(n, "storage_offset");
  if (n.find("storage_offset") && !is_none(n, "storage_offset") && (!offset || *offset != 0))
    return "as_strided with a storage offset";
  if (!self->producer || ir::op_category(self->producer->op) == ir::OpCategory::kView)
    return "as_strided of a view or an input (it reads the storage beneath)";
  const std::vector<int64_t> os = static_sizes(out);
  if (!stride || stride->size() != os.size() || prod(os) != prod(static_sizes(self)))
    return "as_strided to a different number of elements";
  const std::vector<int64_t> contiguous = contiguous_strides_of(os);
  for (size_t d = 0; d < os.size(); ++d)
    if (os[d] != 1 && (*stride)[d] != contiguous[d]) return "as_strided other than a reshape";
  return "";
}

// Constant padding (negative amounts crop) by a number.
std::string pad_refusal(const ir::Node& n) {
  const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  if (!out || n.operands().empty() || n.operands()[0]->kind != ir::ValueKind::kTensor) return "not a tensor pad";
  const auto pad = pad_list(n);
  if (!pad || pad->size() % 2 != 0 || pad->size() / 2 > rank(out)) return "a pad list that is not pairs of the dims";
  if (const std::string mode = pad_mode(n);
      mode != "constant" && mode != "reflect" && mode != "replicate" && mode != "circular")
    return "a pad of mode '" + mode + "'";
  if (n.find("value") && !is_none(n, "value") && !double_arg(n, "value")) return "a pad value that is not a number";
  if (n.operands()[0]->type.dtype != out->type.dtype) return "a pad that changes the dtype";
  return "";
}

// Concatenation of tensors of one dtype.
std::string cat_refusal(const ir::Node& n) {
  const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  if (!ins || !out) return "cat without a tensor list";
  for (const ir::Value* v : *ins)
    if (v->type.dtype != out->type.dtype) return "cat of mixed dtypes";
  return "";
}

}  // namespace kiln::cuda::layers
