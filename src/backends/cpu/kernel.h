// The CPU reference backend's kernel interface: one function per op kind,
// reading its arguments by schema name from the node and the values
// computed so far, and producing the node's outputs.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/value.h"
#include "ir/graph.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln::cpu {

// A value at run time (engine/value.h): the CPU kernels read and make these.
using engine::rt_value_to_tensor;
using engine::RtValue;
using engine::tensor_to_rt_value;

// A Python number as ATen's Scalar: keeps whether it was an int, float or bool
// (this decides result dtypes, e.g. int tensor * 2 stays int, * 2.5 is float).
struct Scalar {
  enum class Kind { kInt, kFloat, kBool };
  Kind kind = Kind::kInt;
  double f = 0;
  int64_t i = 0;
  static Scalar of_int(int64_t v) { return {Kind::kInt, static_cast<double>(v), v}; }
  static Scalar of_float(double v) {
    // The integer view of a float saturates (NaN gives 0): casting an
    // out-of-range double to int64 is undefined in C++.
    int64_t i = 0;
    if (v >= 9.2233720368547758e18)
      i = INT64_MAX;
    else if (v <= -9.2233720368547758e18)
      i = INT64_MIN;
    else if (v == v)
      i = static_cast<int64_t>(v);
    return {Kind::kFloat, v, i};
  }
  static Scalar of_bool(bool v) { return {Kind::kBool, v ? 1.0 : 0.0, v ? 1 : 0}; }
  double to_double() const { return f; }
};

class KernelArgs {
 public:
  // `env` maps Value::id to the value computed for it.
  KernelArgs(const ir::Node& node, std::span<const RtValue> env) : node_(node), env_(env) {}

  const ir::Node& node() const { return node_; }
  // True when the argument is present and not None.
  bool has(std::string_view name) const;

  Expected<Tensor> tensor(std::string_view name) const;
  Expected<std::optional<Tensor>> optional_tensor(std::string_view name) const;
  Expected<std::vector<Tensor>> tensors(std::string_view name) const;
  Expected<std::vector<std::optional<Tensor>>> optional_tensors(std::string_view name) const;

  // Scalars and lists. An argument the node leaves out reads as the default
  // its op's schema declares (ir::argument_or_default; torch.export leaves
  // defaults out); `fallback` serves ops without a schema (kiln's own) and
  // arguments whose declared default is None. Without either a missing
  // argument is an error naming the node.
  Expected<int64_t> int_arg(std::string_view name, std::optional<int64_t> fallback = std::nullopt) const;
  // A dim argument of a rank-`rank` tensor, wrapped into [0, rank) (a 0-d
  // tensor takes -1 and 0); an error naming the argument when out of range.
  Expected<int64_t> dim_arg(std::string_view name, int64_t rank, std::optional<int64_t> fallback = std::nullopt) const;
  Expected<std::optional<int64_t>> optional_int(std::string_view name) const;
  Expected<double> float_arg(std::string_view name, std::optional<double> fallback = std::nullopt) const;
  Expected<std::optional<double>> optional_float(std::string_view name) const;
  Expected<bool> bool_arg(std::string_view name, std::optional<bool> fallback = std::nullopt) const;
  Expected<std::vector<int64_t>> ints(std::string_view name,
                                      std::optional<std::vector<int64_t>> fallback = std::nullopt) const;
  Expected<std::optional<std::vector<int64_t>>> optional_ints(std::string_view name) const;
  // A Scalar argument (Python number or SymInt/SymFloat value).
  Expected<Scalar> scalar(std::string_view name, std::optional<Scalar> fallback = std::nullopt) const;
  Expected<std::optional<Scalar>> optional_scalar(std::string_view name) const;
  Expected<std::optional<DType>> dtype_arg(std::string_view name) const;
  Expected<std::string> string_arg(std::string_view name, std::optional<std::string> fallback = std::nullopt) const;

  // An error that names the node: "node 'add_3' (aten.add.Tensor): <message>".
  Status error(const std::string& message) const;

  // Outputs, one per node output; the kernel must fill every one.
  std::vector<RtValue>& outputs() { return outputs_; }
  void set_output(size_t i, RtValue v) {
    if (outputs_.size() <= i) outputs_.resize(i + 1);
    outputs_[i] = std::move(v);
  }

 private:
  Expected<const ir::Arg*> require(std::string_view name) const;
  Expected<int64_t> resolve_int(const ir::SymInt& s) const;

  const ir::Node& node_;
  std::span<const RtValue> env_;
  std::vector<RtValue> outputs_;
};

using KernelFn = Status (*)(KernelArgs& args);

class KernelRegistry {
 public:
  void add(ir::OpKind op, KernelFn fn);
  KernelFn find(ir::OpKind op) const;

 private:
  std::vector<KernelFn> table_;
};

// convolution.default with three spatial dims (volume.cc), for conv.cc's kernel.
Status convolution3d(KernelArgs& a, const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                     bool transposed);

// Registers every CPU reference kernel (one call per op family file).
void register_cpu_kernels(KernelRegistry& registry);
// The process-wide registry with every CPU kernel registered.
const KernelRegistry& cpu_kernels();

// Per-family registration functions (one per file in src/backends/cpu/).
void register_elementwise_kernels(KernelRegistry& r);
void register_special_kernels(KernelRegistry& r);
void register_creation_kernels(KernelRegistry& r);
void register_copy_kernels(KernelRegistry& r);
void register_view_kernels(KernelRegistry& r);
void register_scatter_kernels(KernelRegistry& r);
void register_scatter_reduce_kernels(KernelRegistry& r);
void register_cumulative_kernels(KernelRegistry& r);
void register_sort_kernels(KernelRegistry& r);
void register_window_kernels(KernelRegistry& r);
void register_indexing_kernels(KernelRegistry& r);
void register_reduction_kernels(KernelRegistry& r);
void register_linalg_kernels(KernelRegistry& r);
void register_factorize_kernels(KernelRegistry& r);
void register_volume_kernels(KernelRegistry& r);
void register_loss_kernels(KernelRegistry& r);
void register_conv_kernels(KernelRegistry& r);
void register_pool_kernels(KernelRegistry& r);
void register_norm_kernels(KernelRegistry& r);
void register_attention_kernels(KernelRegistry& r);
void register_symbolic_kernels(KernelRegistry& r);
void register_fused_kernels(KernelRegistry& r);
void register_fused_elementwise_kernels(KernelRegistry& r);

}  // namespace kiln::cpu
