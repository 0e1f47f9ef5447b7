#include <set>

#include "backends/cpu/kernel.h"
#include "frontend/pt2_loader.h"
#include "ir/graph.h"
#include "kiln/kiln.h"
#include "lowering/pipeline.h"
#include "runtime/interpreter.h"
#include "runtime/program_impl.h"

namespace kiln {

namespace {

TensorSpec spec_of(const ir::Value* v, std::string name, std::string kind) {
  TensorSpec s;
  s.name = std::move(name);
  s.dtype = v->type.dtype;
  for (const ir::Dim& d : v->type.sizes) s.dims.push_back(d.to_string());
  s.kind = std::move(kind);
  return s;
}

}  // namespace

Program::Program() : impl_(std::make_unique<Impl>()) {}
Program::~Program() = default;

Expected<std::shared_ptr<const Program>> Program::load(const std::string& path, const LoadOptions& options) {
  KILN_ASSIGN_OR_RETURN(ir::Module m, frontend::load_pt2(path));
  lowering::PipelineOptions po{options.print_after, options.dump};
  KILN_TRY_CTX(lowering::run_pipeline(m, lowering::default_pipeline(), po), path);

  // Every op must have a kernel: say which ones do not, with their nodes.
  auto missing = runtime::nodes_without_kernel(m.graph, cpu::cpu_kernels());
  if (!missing.empty()) {
    std::string list;
    std::set<std::string> seen;
    for (const ir::Node* n : missing)
      if (seen.insert(std::string(ir::op_target(n->op))).second)
        list += (list.empty() ? "" : ", ") + std::string(ir::op_target(n->op)) + " (node '" + n->name + "')";
    return unsupported(path + ": no CPU kernel for " + list);
  }

  std::shared_ptr<Program> p(new Program());
  Impl& im = *p->impl_;
  for (size_t i = 0; i < m.input_specs.size(); ++i) {
    const ir::InputSpec& s = m.input_specs[i];
    const ir::Value* v = m.graph.inputs()[i];
    switch (s.kind) {
      case ir::InputSpec::Kind::kUserInput: im.inputs.push_back(spec_of(v, v->name, "user_input")); break;
      case ir::InputSpec::Kind::kBuffer: im.buffers.push_back(spec_of(v, s.target, "buffer")); break;
      case ir::InputSpec::Kind::kParameter: im.weights.push_back(spec_of(v, s.target, "parameter")); break;
      case ir::InputSpec::Kind::kConstant: im.weights.push_back(spec_of(v, s.target, "constant")); break;
    }
  }
  for (size_t i = 0; i < m.output_specs.size(); ++i) {
    const ir::OutputSpec& s = m.output_specs[i];
    const ir::Value* v = m.graph.outputs()[i];
    if (s.kind == ir::OutputSpec::Kind::kUserOutput)
      im.outputs.push_back(spec_of(v, v->name, "user_output"));
    else if (s.kind == ir::OutputSpec::Kind::kBufferMutation)
      im.mutated.push_back(s.target);
  }
  for (const auto& [name, range] : m.symbols) im.symbols.push_back({name, range.min, range.max});
  im.module = std::move(m);
  return std::shared_ptr<const Program>(std::move(p));
}

const std::vector<TensorSpec>& Program::inputs() const { return impl_->inputs; }
const std::vector<TensorSpec>& Program::outputs() const { return impl_->outputs; }
const std::vector<TensorSpec>& Program::buffers() const { return impl_->buffers; }
const std::vector<TensorSpec>& Program::weights() const { return impl_->weights; }
const std::vector<SymbolInfo>& Program::symbols() const { return impl_->symbols; }
const std::vector<std::string>& Program::mutated_buffers() const { return impl_->mutated; }
std::string Program::dialect() const { return impl_->module.dialect; }
std::string Program::torch_version() const { return impl_->module.torch_version; }
const std::string& Program::source() const { return impl_->module.source; }
const ir::Module& Program::module() const { return impl_->module; }

std::map<std::string, int> Program::op_histogram() const {
  std::map<std::string, int> h;
  for (const auto& n : impl_->module.graph.nodes()) ++h[std::string(ir::op_target(n->op))];
  return h;
}

}  // namespace kiln
