// Functionalization: in-place ops become functional ops, writes through views
// become scatters into the base, and each mutated buffer gets an explicit
// buffer_mutation output (what torch.export's run_decompositions() produces).
// A written tensor constant becomes a buffer (state); a written parameter is
// refused.
//
// Every value is tracked as (base, chain of view nodes from the base, version
// of the base when it was made). A write bumps the base's version; a later
// read of any alias of that base replays its view chain on the base's newest
// value, so reads after a write see the write, as they do in eager PyTorch.
#include <map>

#include "lowering/pass.h"

namespace kiln::lowering {

namespace {

using ir::Node;
using ir::OpKind;
using ir::Value;

// Ops that write into arguments other than their first, with the functional
// form whose extra outputs carry the written values: argument name -> output.
struct ArgWrites {
  OpKind op, functional;
  std::vector<std::pair<const char*, size_t>> writes;
};

const ArgWrites* arg_writes_of(OpKind op) {
  // Batch norm in training mode updates its running statistics in place.
  static const ArgWrites kTable[] = {
      {OpKind::kNativeBatchNormLegit, OpKind::kNativeBatchNormLegitFunctional,
       {{"running_mean", 3}, {"running_var", 4}}},
      {OpKind::kBatchNormWithUpdate, OpKind::kBatchNormWithUpdateFunctional,
       {{"running_mean", 4}, {"running_var", 5}}},
  };
  for (const ArgWrites& w : kTable)
    if (w.op == op) return &w;
  return nullptr;
}

struct ViewStep {
  const Node* node;  // the view node in the source graph
  int output;        // which of its outputs (split/chunk/unbind have several)
};

struct Alias {
  const Value* base = nullptr;  // in the source graph
  std::vector<ViewStep> chain;
  int version = 0;
};

class Functionalizer {
 public:
  explicit Functionalizer(ir::Module& m) : m_(m) {}

  Status run() {
    const ir::Graph& src = m_.graph;
    for (const ir::OutputSpec& s : m_.output_specs)
      if (s.kind != ir::OutputSpec::Kind::kUserOutput)
        return unsupported(m_.source + ": the program has both in-place ops and explicit mutation outputs");
    for (const Value* v : src.inputs()) {
      Value* nv = out_.add_input(v->name, v->kind, v->type);
      nv->sym = v->sym;
      mapped_[v] = nv;
      alias_[v] = {v, {}, 0};
      current_[v] = nv;
    }
    for (const auto& n : src.nodes()) KILN_TRY(visit(*n));

    // Mutated buffers (and user inputs) first, in input order; then the
    // program's own outputs with their specs.
    std::vector<Value*> outputs;
    std::vector<ir::OutputSpec> specs;
    for (size_t i = 0; i < src.inputs().size(); ++i) {
      const Value* in = src.inputs()[i];
      if (version_[in] == 0) continue;
      ir::InputSpec& s = m_.input_specs[i];
      KILN_TRY(refuse_other_views(s));
      if (s.kind == ir::InputSpec::Kind::kConstant) {
        // A tensor constant the program writes is state: non-strict export
        // lifts tensors a module holds outside its registered buffers (a
        // static KV cache's) as constants and writes them in place, and
        // PyTorch's own runner keeps those writes across calls. It becomes a
        // (non-persistent) buffer: initial value from the archive, updated
        // like any buffer, shared by methods by name.
        s.kind = ir::InputSpec::Kind::kBuffer;
        s.persistent = false;
      }
      if (s.kind == ir::InputSpec::Kind::kBuffer) {
        outputs.push_back(current_[in]);
        specs.push_back({ir::OutputSpec::Kind::kBufferMutation, s.target});
      } else if (s.kind == ir::InputSpec::Kind::kUserInput) {
        outputs.push_back(current_[in]);
        specs.push_back({ir::OutputSpec::Kind::kUserInputMutation, in->name});
      } else {
        return unsupported(m_.source + ": the program writes into " + ir::input_kind_name(s.kind) + " '" + s.target +
                           "'; only buffers and user inputs may be mutated");
      }
    }
    for (size_t i = 0; i < src.outputs().size(); ++i) {
      KILN_ASSIGN_OR_RETURN(Value * v, read(src.outputs()[i]));
      outputs.push_back(v);
      specs.push_back(m_.output_specs[i]);
    }
    out_.outputs() = std::move(outputs);
    m_.output_specs = std::move(specs);
    m_.graph = std::move(out_);
    return m_.graph.verify();
  }

 private:
  // A written weight whose storage another weight views differently (another
  // offset, sizes or strides; one view is one tensor, merge_storage_aliases):
  // the write would have to reach that view too, and kiln does not keep
  // views of state, so it refuses rather than split them into copies.
  Status refuse_other_views(const ir::InputSpec& s) const {
    if (s.kind == ir::InputSpec::Kind::kUserInput) return Status::ok();
    auto it = m_.weights.find(s.target);
    if (it == m_.weights.end() || !it->second.defined()) return Status::ok();
    const Tensor& t = it->second;
    for (const auto& [name, other] : m_.weights) {
      if (name == s.target || !other.defined() || other.storage() != t.storage()) continue;
      return unsupported(m_.source + ": the program writes '" + s.target + "' (" + t.type_string() + " at offset " +
                         std::to_string(t.storage_offset()) + "), and '" + name + "' views the same storage as " +
                         other.type_string() + " at offset " + std::to_string(other.storage_offset()) +
                         "; kiln does not keep views of written tensors (export them as one tensor)");
    }
    return Status::ok();
  }

  // The new-graph value that reads of `v` must see now.
  Expected<Value*> read(const Value* v) {
    auto it = alias_.find(v);
    if (it == alias_.end()) return mapped_.at(v);
    const Alias& a = it->second;
    if (a.version == version_[a.base]) return mapped_.at(v);
    // Stale: replay the view chain on the base's newest value.
    Value* cur = current_[a.base];
    for (const ViewStep& step : a.chain) {
      KILN_ASSIGN_OR_RETURN(cur, replay(step, cur));
    }
    mapped_[v] = cur;
    alias_[v].version = version_[a.base];
    return cur;
  }

  // Emits a copy of view node `step` applied to `input` (a new-graph value).
  Expected<Value*> replay(const ViewStep& step, Value* input) {
    std::vector<ir::NamedArg> args;
    KILN_ASSIGN_OR_RETURN(args, map_args(*step.node, input));
    std::vector<std::pair<std::string, ir::TensorType>> outs;
    for (const Value* o : step.node->outputs) outs.push_back({o->name + "_r", o->type});
    Node* n = out_.add_node(step.node->op, step.node->name + "_r", std::move(args), std::move(outs));
    return n->outputs[static_cast<size_t>(step.output)];
  }

  // The node's arguments mapped into the new graph; the first argument is
  // replaced by `first` when given.
  Expected<std::vector<ir::NamedArg>> map_args(const Node& n, Value* first = nullptr) {
    std::vector<ir::NamedArg> args = n.args;
    bool first_done = false;
    for (ir::NamedArg& a : args) {
      if (auto* v = std::get_if<Value*>(&a.value)) {
        if (first && !first_done) {
          *v = first;
          first_done = true;
          continue;
        }
        KILN_ASSIGN_OR_RETURN(*v, read(*v));
      } else if (auto* l = std::get_if<std::vector<Value*>>(&a.value)) {
        for (Value*& x : *l) {
          KILN_ASSIGN_OR_RETURN(x, read(x));
        }
      } else if (auto* ol = std::get_if<std::vector<std::optional<Value*>>>(&a.value)) {
        for (auto& x : *ol)
          if (x) {
            KILN_ASSIGN_OR_RETURN(*x, read(*x));
          }
      } else if (auto* sl = std::get_if<std::vector<ir::SymInt>>(&a.value)) {
        for (ir::SymInt& s : *sl)
          if (auto* x = std::get_if<Value*>(&s)) {
            KILN_ASSIGN_OR_RETURN(*x, read(*x));
          }
      }
    }
    return args;
  }

  Node* emit(const Node& n, OpKind op, std::vector<ir::NamedArg> args) {
    std::vector<std::pair<std::string, ir::TensorType>> outs;
    for (const Value* o : n.outputs) outs.push_back({o->name, o->type});
    ir::ValueKind kind = n.outputs.empty() ? ir::ValueKind::kTensor : n.outputs[0]->kind;
    Node* nn = out_.add_node(op, n.name, std::move(args), std::move(outs), kind);
    nn->metadata = n.metadata;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      nn->outputs[i]->kind = n.outputs[i]->kind;
      nn->outputs[i]->sym = n.outputs[i]->sym;
      mapped_[n.outputs[i]] = nn->outputs[i];
    }
    return nn;
  }

  Status visit(const Node& n) {
    ir::OpCategory cat = ir::op_category(n.op);
    if (cat == ir::OpCategory::kInplace) return visit_inplace(n);
    if (const ArgWrites* w = arg_writes_of(n.op)) return visit_arg_writes(n, *w);
    KILN_ASSIGN_OR_RETURN(auto args, map_args(n));
    emit(n, n.op, std::move(args));
    if ((cat == ir::OpCategory::kView || converts_to_same_dtype(n)) && !n.args.empty()) {
      const Value* self = first_value(n);
      if (self && self->kind == ir::ValueKind::kTensor) {
        const Alias& a = alias_.at(self);
        for (size_t i = 0; i < n.outputs.size(); ++i) {
          Alias na = a;
          na.chain.push_back({&n, static_cast<int>(i)});
          na.version = version_[a.base];
          alias_[n.outputs[i]] = std::move(na);
        }
        return Status::ok();
      }
    }
    for (const Value* o : n.outputs) {
      alias_[o] = {o, {}, 0};
      current_[o] = mapped_[o];
    }
    return Status::ok();
  }

  // `x.to(dtype)` (and type_as) returns x itself when nothing changes, so an
  // in-place write to its result writes into x, as in eager PyTorch.
  static bool converts_to_same_dtype(const Node& n) {
    switch (n.op) {
      case OpKind::kTo:
      case OpKind::kToDtypeLayout:
      case OpKind::kToDevice:
      case OpKind::kTypeAs:
        break;
      default:
        return false;
    }
    const ir::Arg* copy = n.find("copy");
    if (copy && std::holds_alternative<bool>(*copy) && std::get<bool>(*copy)) return false;
    const Value* self = first_value(n);
    return self && n.outputs.size() == 1 && self->kind == ir::ValueKind::kTensor &&
           self->type.dtype == n.outputs[0]->type.dtype;
  }

  static const Value* first_value(const Node& n) {
    for (const ir::NamedArg& a : n.args)
      if (auto* v = std::get_if<Value*>(&a.value)) return *v;
    return nullptr;
  }

  Status visit_inplace(const Node& n) {
    const Value* target = first_value(n);
    if (!target) return internal_error(n.describe() + ": in-place op without a tensor to write");
    OpKind functional = *ir::functional_form(n.op);
    KILN_ASSIGN_OR_RETURN(auto args, map_args(n));
    for (ir::NamedArg& a : args)
      if (std::holds_alternative<Value*>(a.value)) {
        a.name = std::string(ir::functional_first_arg(n.op));
        break;
      }
    Node* fn = emit(n, functional, std::move(args));
    if (fn->outputs.empty()) {
      // Some in-place ops are serialized without a result; give the new value a name.
      Value* v = out_.add_value(n.name + "_functional", ir::ValueKind::kTensor, target->type);
      v->producer = fn;
      fn->outputs.push_back(v);
    }
    Value* updated = fn->outputs[0];
    updated->type = target->type;
    KILN_ASSIGN_OR_RETURN(const Alias a, write_back(target, updated));
    // The in-place op's own result aliases the target.
    for (const Value* o : n.outputs) {
      Alias oa = a;
      oa.version = version_[a.base];
      alias_[o] = std::move(oa);
    }
    if (!n.outputs.empty()) mapped_[n.outputs[0]] = fn->outputs[0];
    if (a.chain.empty() && !n.outputs.empty()) mapped_[n.outputs[0]] = current_[a.base];
    return Status::ok();
  }

  // An op writing into named arguments: its functional form, with each
  // written value written back into its argument.
  Status visit_arg_writes(const Node& n, const ArgWrites& w) {
    KILN_ASSIGN_OR_RETURN(auto args, map_args(n));
    std::vector<std::pair<std::string, ir::TensorType>> outs;
    for (const Value* o : n.outputs) outs.push_back({o->name, o->type});
    std::vector<const Value*> targets;
    for (const auto& [name, index] : w.writes) {
      const ir::Arg* arg = n.find(name);
      const Value* const* target = arg ? std::get_if<Value*>(arg) : nullptr;
      if (!target || !*target) return unsupported(n.describe() + ": writes into '" + name + "', which is not a tensor");
      if (outs.size() != index)
        return unsupported(n.describe() + ": expected " + std::to_string(index) + " outputs before the written '" +
                           name + "', got " + std::to_string(outs.size()));
      outs.push_back({n.name + "_" + name, (*target)->type});
      targets.push_back(*target);
    }
    Node* fn = out_.add_node(w.functional, n.name, std::move(args), std::move(outs));
    fn->metadata = n.metadata;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      mapped_[n.outputs[i]] = fn->outputs[i];
      alias_[n.outputs[i]] = {n.outputs[i], {}, 0};
      current_[n.outputs[i]] = fn->outputs[i];
    }
    for (size_t k = 0; k < targets.size(); ++k) {
      KILN_ASSIGN_OR_RETURN(Alias a, write_back(targets[k], fn->outputs[w.writes[k].second]));
      (void)a;
    }
    return Status::ok();
  }

  // Makes `updated` (a new-graph value) the value of `target` (a source
  // value), through the view chain from its base: scatters into each
  // enclosing view. Returns target's alias.
  Expected<Alias> write_back(const Value* target, Value* updated) {
    const Alias a = alias_.at(target);
    // levels[k] is the input of view step k, rebuilt from the base's newest value.
    std::vector<Value*> levels{current_[a.base]};
    for (size_t k = 1; k < a.chain.size(); ++k) {
      KILN_ASSIGN_OR_RETURN(Value * next, replay(a.chain[k - 1], levels.back()));
      levels.push_back(next);
    }
    for (size_t k = a.chain.size(); k-- > 0;) {
      KILN_ASSIGN_OR_RETURN(updated, scatter(a.chain[k], levels[k], updated));
    }
    current_[a.base] = updated;
    ++version_[a.base];
    return a;
  }

  // The value of `input` (a new-graph value) after `src` was written into the
  // part of it that view `step` selects.
  Expected<Value*> scatter(const ViewStep& step, Value* input, Value* src) {
    const Node& v = *step.node;
    auto arg = [&](const char* name) -> ir::Arg {
      const ir::Arg* a = v.find(name);
      return a ? *a : ir::Arg(ir::NoneArg{});
    };
    auto add = [&](OpKind op, std::vector<ir::NamedArg> args) {
      Node* n = out_.add_node(op, v.name + "_scatter", std::move(args), {{v.name + "_scatter", input->type}});
      return n->outputs[0];
    };
    auto mapped_arg = [&](const char* name) -> Expected<ir::Arg> {
      ir::Arg a = arg(name);
      if (auto* x = std::get_if<Value*>(&a)) {
        KILN_ASSIGN_OR_RETURN(Value * m, read(*x));
        return ir::Arg(m);
      }
      return a;
    };
    switch (v.op) {
      case OpKind::kSelectInt: {
        KILN_ASSIGN_OR_RETURN(ir::Arg dim, mapped_arg("dim"));
        KILN_ASSIGN_OR_RETURN(ir::Arg index, mapped_arg("index"));
        return add(OpKind::kSelectScatter, {{"self", input}, {"src", src}, {"dim", dim}, {"index", index}});
      }
      case OpKind::kSliceTensor: {
        std::vector<ir::NamedArg> args{{"self", input}, {"src", src}};
        for (const char* name : {"dim", "start", "end", "step"}) {
          if (!v.find(name)) continue;
          KILN_ASSIGN_OR_RETURN(ir::Arg x, mapped_arg(name));
          args.push_back({name, x});
        }
        return add(OpKind::kSliceScatter, std::move(args));
      }
      case OpKind::kNarrow: {
        return unsupported(v.describe() + ": writing through narrow() is not supported yet");
      }
      case OpKind::kUnbind: {
        KILN_ASSIGN_OR_RETURN(ir::Arg dim, mapped_arg("dim"));
        return add(OpKind::kSelectScatter,
                   {{"self", input}, {"src", src}, {"dim", dim}, {"index", static_cast<int64_t>(step.output)}});
      }
      case OpKind::kAlias:
      case OpKind::kDetach:
      case OpKind::kTo:
      case OpKind::kToDtypeLayout:
      case OpKind::kToDevice:
      case OpKind::kTypeAs:
        return src;
      case OpKind::kView:
      case OpKind::kUnsafeView:
      case OpKind::kReshape:
      case OpKind::kFlatten:
      case OpKind::kUnflatten:
      case OpKind::kUnsqueeze:
      case OpKind::kSqueeze:
      case OpKind::kSqueezeDim:
      case OpKind::kSqueezeDims: {
        // These views cover the whole input: the write replaces it, reshaped back.
        std::vector<ir::SymInt> sizes;
        for (const ir::Dim& d : input->type.sizes) {
          if (!d.is_static()) return unsupported(v.describe() + ": writing through a reshape of a dynamic-shape tensor");
          sizes.emplace_back(d.value);
        }
        std::vector<int64_t> ints;
        for (auto& s : sizes) ints.push_back(std::get<int64_t>(s));
        return add(OpKind::kReshape, {{"self", src}, {"shape", ints}});
      }
      case OpKind::kPermute:
      case OpKind::kTranspose:
      case OpKind::kT: {
        // Apply the inverse permutation.
        size_t rank = input->type.sizes.size();
        std::vector<int64_t> perm(rank);
        for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(i);
        auto norm = [&](int64_t d) { return d < 0 ? d + static_cast<int64_t>(rank) : d; };
        if (v.op == OpKind::kPermute) {
          const auto* dims = std::get_if<std::vector<int64_t>>(v.find("dims"));
          if (!dims || dims->size() != rank) return unsupported(v.describe() + ": cannot invert this permute");
          for (size_t i = 0; i < rank; ++i) perm[static_cast<size_t>(norm((*dims)[i]))] = static_cast<int64_t>(i);
        } else if (v.op == OpKind::kTranspose) {
          const auto* d0 = std::get_if<int64_t>(v.find("dim0"));
          const auto* d1 = std::get_if<int64_t>(v.find("dim1"));
          if (!d0 || !d1) return unsupported(v.describe() + ": cannot invert this transpose");
          std::swap(perm[static_cast<size_t>(norm(*d0))], perm[static_cast<size_t>(norm(*d1))]);
        } else if (rank == 2) {
          std::swap(perm[0], perm[1]);
        }
        return add(OpKind::kPermute, {{"self", src}, {"dims", perm}});
      }
      default:
        break;
    }
    return unsupported(v.describe() + ": an in-place write through this kind of view is not supported");
  }

  ir::Module& m_;
  ir::Graph out_;
  std::map<const Value*, Value*> mapped_;     // source value -> new value (as of its alias version)
  std::map<const Value*, Alias> alias_;       // source value -> what it views
  std::map<const Value*, Value*> current_;    // source base -> its newest new-graph value
  std::map<const Value*, int> version_;       // source base -> number of writes so far
};

}  // namespace

Status functionalize(ir::Module& m) {
  bool has_inplace = false;
  for (const auto& n : m.graph.nodes())
    has_inplace |= ir::op_category(n->op) == ir::OpCategory::kInplace || arg_writes_of(n->op) != nullptr;
  if (!has_inplace) return Status::ok();
  return Functionalizer(m).run();
}

}  // namespace kiln::lowering
