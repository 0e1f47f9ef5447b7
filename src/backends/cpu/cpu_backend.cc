#include "backends/cpu/cpu_backend.h"

#include <mutex>

#include "backends/cpu/fused_elementwise.h"
#include "backends/cpu/kernel.h"
#include "engine/elementwise_program.h"
#include "engine/fuse_elementwise.h"
#include "engine/plan.h"
#include "ir/liveness.h"

namespace kiln::cpu {

namespace {

using engine::EnginePlan;
using engine::Network;

// Which implementation runs a layer on the CPU, recorded in the plan.
std::string choose_kernel(const ir::Node& n) {
  if (n.op == ir::OpKind::kFusedElementwise) return "cpu.fused_elementwise";
  const bool blas_dtype =
      !n.outputs.empty() && (n.outputs[0]->type.dtype == DType::Float32 || n.outputs[0]->type.dtype == DType::Float64);
  switch (n.op) {
    case ir::OpKind::kMm:
    case ir::OpKind::kBmm:
    case ir::OpKind::kMatmul:
    case ir::OpKind::kAddmm:
    case ir::OpKind::kBaddbmm:
    case ir::OpKind::kLinear: return blas_dtype ? "cpu.gemm.blas" : "cpu.gemm.reference";
    case ir::OpKind::kConvolution:
    case ir::OpKind::kConv1d:
    case ir::OpKind::kConv2d: return blas_dtype ? "cpu.conv.im2col_blas" : "cpu.conv.reference";
    default: break;
  }
  switch (ir::op_category(n.op)) {
    case ir::OpCategory::kView: return "cpu.view";
    case ir::OpCategory::kSym: return "cpu.host_scalar";
    case ir::OpCategory::kCheck: return "cpu.check";
    default: return "cpu.reference";
  }
}

bool writes_into_arena(const ir::Node& n) { return n.op == ir::OpKind::kFusedElementwise; }

struct CpuEngine final : engine::EngineState {
  std::string what;
  Network net;
  engine::MemoryPlan memory;
  std::vector<KernelFn> kernels;                                 // per layer
  std::vector<std::optional<engine::ElementwiseProgram>> fused;  // per layer, fused layers only
  std::vector<std::vector<int>> release_after;                   // per layer: value ids dead after it
  std::vector<Tensor> constants;                                 // per network constant
  std::mutex pool_mutex;
  std::vector<std::shared_ptr<Storage>> arenas;  // free arenas, reused across calls

  std::shared_ptr<Storage> take_arena() {
    if (memory.arena_bytes == 0) return nullptr;
    std::lock_guard<std::mutex> lock(pool_mutex);
    if (!arenas.empty()) {
      auto a = std::move(arenas.back());
      arenas.pop_back();
      return a;
    }
    return Storage::allocate(static_cast<size_t>(memory.arena_bytes));
  }
  void give_back(std::shared_ptr<Storage> a) {
    if (!a || a.use_count() != 1) return;  // something still refers to it: let it go
    std::lock_guard<std::mutex> lock(pool_mutex);
    arenas.push_back(std::move(a));
  }
};

Expected<RtValue> bind_input(const ir::Value& v, const Tensor& t, size_t i, const std::string& what) {
  const std::string where = what + ": input " + std::to_string(i) + " ('" + v.name + "')";
  if (!t.defined()) return invalid_argument(where + " is undefined");
  if (!t.is_cpu())
    return invalid_argument(where + " lies on " + t.device().to_string() + "; the CPU backend computes in host memory");
  if (v.kind != ir::ValueKind::kTensor) {
    if (t.dim() != 0) return invalid_argument(where + " must be a 0-d tensor carrying a scalar");
    return tensor_to_rt_value(v.kind, t);
  }
  if (t.dtype() != v.type.dtype || t.dim() != static_cast<int64_t>(v.type.sizes.size()))
    return invalid_argument(where + " must be " + v.type.to_string() + ", got " + t.type_string());
  for (size_t d = 0; d < v.type.sizes.size(); ++d)
    if (v.type.sizes[d].is_static() && v.type.sizes[d].value != t.sizes()[d])
      return invalid_argument(where + " must be " + v.type.to_string() + ", got " + t.type_string());
  return RtValue(t);
}

class CpuBackend final : public engine::Backend {
 public:
  CpuBackend() {
    target_.backend = "cpu";
#define KILN_DTYPE(Enum, ...) target_.dtypes.push_back(DType::Enum);
#include "kiln/dtype.def"
#undef KILN_DTYPE
    target_.symbolic_dims = true;
    target_.implements = [](ir::OpKind op) { return cpu_kernels().find(op) != nullptr; };
    target_.passes = {engine::fuse_elementwise_pass()};
  }
  std::string_view name() const override { return "cpu"; }
  const engine::TargetInfo& target() const override { return target_; }

  Expected<std::vector<uint8_t>> build(Network net, const engine::BuildOptions& options) const override {
    KILN_TRY(net.verify());
    const size_t before = net.graph.nodes().size();
    KILN_TRY(engine::run_network_passes(net, target_.passes, options.passes));
    KILN_TRY(engine::canonicalize(net));
    net.kernels.clear();
    for (const auto& n : net.graph.nodes()) {
      if (!cpu_kernels().find(n->op)) return unsupported(n->describe() + ": the CPU backend has no kernel for it");
      net.kernels.push_back(choose_kernel(*n));
    }
    EnginePlan plan;
    plan.backend = "cpu";
    plan.memory = engine::plan_memory(net, writes_into_arena);
    KILN_ASSIGN_OR_RETURN(plan.aliases, engine::in_place_aliases(net));
    if (options.progress)
      options.progress(std::to_string(before) + " layers -> " + std::to_string(net.graph.nodes().size()) +
                       " after fusion, arena " + std::to_string(plan.memory.arena_bytes) + " bytes");
    plan.network = std::move(net);
    return engine::serialize_plan(plan);
  }

  Expected<engine::EngineHandle> load(std::span<const uint8_t> bytes, const engine::WeightLookup& weights,
                                      std::string_view what) const override {
    KILN_ASSIGN_OR_RETURN(EnginePlan plan, engine::deserialize_plan(bytes, "cpu", what));
    auto e = std::make_unique<CpuEngine>();
    e->what = std::string(what);
    const ir::Graph& g = plan.network.graph;
    for (size_t i = 0; i < plan.network.constant_names.size(); ++i) {
      const std::string& name = plan.network.constant_names[i];
      const ir::Value& v = *g.inputs()[plan.network.num_inputs + i];
      auto t = weights(name);
      if (!t) return as_format_error(t.status(), e->what + ": constant '" + name + "'");
      auto bound = bind_input(v, *t, plan.network.num_inputs + i, e->what);
      if (!bound)
        return format_error(e->what + ": constant '" + name + "' does not match the plan: " + bound.status().message());
      e->constants.push_back(*t);
    }
    const auto& nodes = g.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) {
      const ir::Node& n = *nodes[i];
      KernelFn fn = cpu_kernels().find(n.op);
      if (!fn) return format_error(FileFault::kUnknownOp, e->what + ": layer " + n.describe() + " has no CPU kernel");
      e->kernels.push_back(fn);
      if (n.op == ir::OpKind::kFusedElementwise) {
        const ir::Arg* p = n.find("program");
        const auto* text = p ? std::get_if<std::string>(p) : nullptr;
        if (!text) return format_error(e->what + ": fused layer " + n.describe() + " has no program");
        auto prog = engine::ElementwiseProgram::parse(*text);
        if (!prog) return as_format_error(prog.status(), e->what + ": fused layer " + n.describe());
        e->fused.push_back(std::move(*prog));
      } else {
        e->fused.push_back(std::nullopt);
      }
    }
    // The plan's liveness: a view's storage lives as long as its last view.
    e->release_after = ir::Liveness{plan.memory.last_use}.release_after(nodes.size());
    e->memory = std::move(plan.memory);
    e->net = std::move(plan.network);
    return e.release();
  }

  Status execute(const engine::ExecuteContext& context, engine::EngineHandle handle, std::span<const Tensor> inputs,
                 std::vector<Tensor>& outputs) const override {
    auto* e = static_cast<CpuEngine*>(handle);
    const engine::RowPadding* padding = context.padding;
    const ir::Graph& g = e->net.graph;
    if (inputs.size() != e->net.num_inputs)
      return invalid_argument(e->what + ": the engine takes " + std::to_string(e->net.num_inputs) + " inputs, got " +
                              std::to_string(inputs.size()));
    // A padded call: the padded inputs grown to the engine's rows here (the
    // engine's sizes are static), its cut outputs cut below.
    std::vector<Tensor> padded;
    if (padding) {
      auto static_sizes = [](const ir::Value* v) {
        Shape sizes;
        for (const ir::Dim& d : v->type.sizes) sizes.push_back(d.is_static() ? d.value : -1);
        return sizes;
      };
      std::vector<Shape> in_sizes, out_sizes;
      for (size_t i = 0; i < e->net.num_inputs; ++i) in_sizes.push_back(static_sizes(g.inputs()[i]));
      for (const ir::Value* v : g.outputs()) out_sizes.push_back(static_sizes(v));
      KILN_TRY(padding->check(in_sizes, out_sizes, e->what));
      for (size_t i = 0; i < inputs.size(); ++i) {
        const Shape want = engine::RowPadding::input_sizes(padding, i, in_sizes[i]);
        if (padding->inputs[i] && (!inputs[i].defined() || !inputs[i].is_cpu() || inputs[i].sizes() != want))
          return invalid_argument(e->what + ": input " + std::to_string(i) + " must be host memory of sizes " +
                                  shape_to_string(want) + ", got " +
                                  (inputs[i].defined() ? inputs[i].type_string() : std::string("an undefined tensor")));
        padded.push_back(padding->inputs[i] ? engine::pad_rows(inputs[i], in_sizes[i][0]) : inputs[i]);
      }
      inputs = padded;
    }
    std::vector<RtValue> env(g.num_values());
    for (size_t i = 0; i < inputs.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(env[static_cast<size_t>(g.inputs()[i]->id)],
                            bind_input(*g.inputs()[i], inputs[i], i, e->what));
    }
    for (size_t i = 0; i < e->constants.size(); ++i)
      env[static_cast<size_t>(g.inputs()[e->net.num_inputs + i]->id)] = e->constants[i];

    std::shared_ptr<Storage> arena = e->take_arena();
    const auto& nodes = g.nodes();
    Status status;
    for (size_t i = 0; i < nodes.size() && status.is_ok(); ++i) {
      const ir::Node& n = *nodes[i];
      const double start_us = context.trace ? context.trace->now_us() : 0;
      const int64_t offset = n.outputs.size() == 1 ? e->memory.offset[static_cast<size_t>(n.outputs[0]->id)] : -1;
      if (e->fused[i] && offset >= 0 && arena) {
        status = run_fused(*e, n, *e->fused[i], env, arena, offset);
      } else {
        KernelArgs args(n, env);
        status = e->kernels[i](args);
        if (status.is_ok() && args.outputs().size() < n.outputs.size())
          status = internal_error(n.describe() + ": kernel produced too few outputs");
        for (size_t o = 0; status.is_ok() && o < n.outputs.size(); ++o)
          env[static_cast<size_t>(n.outputs[o]->id)] = std::move(args.outputs()[o]);
      }
      for (int v : e->release_after[i]) env[static_cast<size_t>(v)] = std::monostate{};
      if (context.trace)
        context.trace->step(ir::op_target(n.op),
                            "node " + n.name + (e->fused[i] && offset >= 0 && arena ? ", fused elementwise" : ""),
                            start_us, context.trace->now_us() - start_us, false);
    }
    if (!status) {
      e->give_back(std::move(arena));
      return std::move(status).with_context(e->what);
    }
    std::vector<Tensor> results;
    for (const ir::Value* v : g.outputs()) results.push_back(rt_value_to_tensor(env[static_cast<size_t>(v->id)]));
    for (size_t o = 0; padding && o < results.size(); ++o) {
      if (padding->output_factors[o] <= 0) continue;
      const Tensor full = results[o].contiguous();  // the caller's rows: its leading rows
      results[o] = full.as_strided(engine::RowPadding::output_sizes(padding, o, full.sizes()), full.strides(),
                                   full.storage_offset());
    }
    env.clear();
    e->give_back(std::move(arena));
    if (outputs.empty()) {
      outputs = std::move(results);
      return Status::ok();
    }
    // Memory the caller gave for the outputs (host memory: this backend has no device).
    if (outputs.size() != results.size())
      return invalid_argument(e->what + ": the engine has " + std::to_string(results.size()) +
                              " outputs, got memory for " + std::to_string(outputs.size()));
    for (size_t o = 0; o < results.size(); ++o) {
      if (!outputs[o].defined()) {  // a new host tensor: the result itself
        outputs[o] = results[o];
        continue;
      }
      if (!outputs[o].is_cpu() || outputs[o].dtype() != results[o].dtype() || outputs[o].sizes() != results[o].sizes())
        return invalid_argument(e->what + ": output " + std::to_string(o) + " is " + results[o].type_string() +
                                ", got memory " +
                                (outputs[o].defined() ? outputs[o].type_string() : std::string("none")));
      if (outputs[o].storage() != results[o].storage()) outputs[o].copy_from(results[o]);
    }
    return Status::ok();
  }

  void destroy(engine::EngineHandle handle) const override { delete static_cast<CpuEngine*>(handle); }

 private:
  static Status run_fused(CpuEngine& e, const ir::Node& n, const engine::ElementwiseProgram& prog,
                          std::vector<RtValue>& env, const std::shared_ptr<Storage>& arena, int64_t offset) {
    KernelArgs args(n, env);
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> ins, args.tensors("inputs"));
    const ir::Value& outv = *n.outputs[0];
    Shape sizes;
    for (const ir::Dim& d : outv.type.sizes) sizes.push_back(d.value);
    Shape strides(sizes.size(), 1);
    for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
    const size_t esize = dtype_size(outv.type.dtype);
    if (offset % static_cast<int64_t>(esize) != 0) return internal_error(n.describe() + ": misaligned arena slot");
    KILN_ASSIGN_OR_RETURN(
        Tensor out, Tensor::from_storage(arena, outv.type.dtype, sizes, strides, offset / static_cast<int64_t>(esize)));
    KILN_TRY_CTX(run_fused_elementwise(prog, ins, out), n.describe());
    env[static_cast<size_t>(outv.id)] = std::move(out);
    return Status::ok();
  }

  engine::TargetInfo target_;
};

}  // namespace

std::unique_ptr<engine::Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace kiln::cpu
