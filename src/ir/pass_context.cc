#include "ir/pass_context.h"

#include <chrono>

#include "ir/printer.h"

namespace kiln::ir {

Status PassContext::run_pass(const std::string& pass, const std::function<Status()>& run, const Graph& graph,
                             const std::string& label) const {
  const auto start = std::chrono::steady_clock::now();
  KILN_TRY_CTX(run(), "pass '" + pass + "'");
  if (timed) timed(pass, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  if (shows_after(pass)) dump(label.empty() ? pass : pass + " (" + label + ")", print_graph(graph));
  return Status::ok();
}

}  // namespace kiln::ir
