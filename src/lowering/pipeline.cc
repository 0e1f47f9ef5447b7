#include "lowering/pipeline.h"

#include <algorithm>

#include "ir/printer.h"

namespace kiln::lowering {

const std::vector<PassInfo>& default_pipeline() {
  static const std::vector<PassInfo> passes = {
      {"functionalize", &functionalize, "in-place ops and writes through views become functional; buffer writes become outputs"},
      {"eliminate-dead-code", &eliminate_dead_code, "drop nodes whose results are unused"},
      {"fold-constants", &fold_constants, "evaluate nodes that depend only on weights and constants, once"},
  };
  return passes;
}

Status run_pipeline(ir::Module& m, const std::vector<PassInfo>& passes, const PipelineOptions& options) {
  for (const PassInfo& p : passes) {
    KILN_TRY_CTX(p.run(m), "pass '" + p.name + "'");
    const auto& pa = options.print_after;
    if (options.dump && (std::find(pa.begin(), pa.end(), p.name) != pa.end() ||
                         std::find(pa.begin(), pa.end(), "all") != pa.end()))
      options.dump(p.name, ir::print_graph(m.graph));
  }
  return Status::ok();
}

}  // namespace kiln::lowering
