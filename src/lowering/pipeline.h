// The lowering pipeline as data: an ordered list of named passes.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ir/ops.h"
#include "ir/pass_context.h"
#include "lowering/pass.h"

namespace kiln::lowering {

struct PassInfo {
  std::string name;
  Status (*run)(ir::Module&);
  std::string description;
  // Ops the rewrite can remove from the graph (into a fused op or a constant):
  // the pass is skipped when one of them is forced out of engines, so that the
  // op stays a node of its own, for the partitioner to keep in fallback.
  std::vector<ir::OpKind> absorbs = {};
  // For a pass that rewrites each op on its own (decompositions): the pass
  // run leaving the ops forced out of engines alone, instead of skipped.
  Status (*run_keeping)(ir::Module&, const std::function<bool(ir::OpKind)>& kept) = nullptr;
  // The program cannot run without it (in-place writes, complex values,
  // composite ops, the output order): it cannot be disabled.
  bool required = false;
};

// The passes a program goes through before it runs, in order.
const std::vector<PassInfo>& default_pipeline();

// The pass context (disabled passes, dumps, timing), and:
struct PipelineOptions : ir::PassContext {
  // Op entries forced out of engines (CompileOptions::fallback_ops): passes
  // that would absorb one of them are skipped.
  std::vector<std::string> keep_ops;
};

// Runs `passes` in order, skipping those the context disables; an error
// names the pass that failed.
Status run_pipeline(ir::Module& m, const std::vector<PassInfo>& passes, const PipelineOptions& options = {});

}  // namespace kiln::lowering
