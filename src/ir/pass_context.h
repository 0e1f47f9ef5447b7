// What every pass pipeline takes besides its graph (the lowering pipeline
// over a program, a backend's network passes over each engine): which passes
// to skip, which to show, and an instrument timing each.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/status.h"

namespace kiln::ir {

class Graph;

struct PassContext {
  // Pass names skipped (CompileOptions::disabled_passes).
  std::vector<std::string> disabled;
  // Pass names after which `dump` receives the graph text ("all" for each).
  std::vector<std::string> print_after;
  std::function<void(const std::string& pass, const std::string& ir_text)> dump;
  // Receives each pass's wall time in milliseconds (may be empty).
  std::function<void(const std::string& pass, double ms)> timed;

  bool disables(std::string_view pass) const {
    return std::find(disabled.begin(), disabled.end(), pass) != disabled.end();
  }
  bool shows_after(std::string_view pass) const {
    return dump && (std::find(print_after.begin(), print_after.end(), pass) != print_after.end() ||
                    std::find(print_after.begin(), print_after.end(), "all") != print_after.end());
  }

  // Runs one pass (`run`) over `graph`: an error names it; then the
  // instrument times it and, when it is shown, the dump receives the graph's
  // text under the pass's name followed by `label` when there is one.
  // Whether the pass is disabled is the caller's to decide.
  Status run_pass(const std::string& pass, const std::function<Status()>& run, const Graph& graph,
                  const std::string& label = "") const;
};

}  // namespace kiln::ir
