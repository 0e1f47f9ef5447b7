// A timeline of calls, for Chrome's trace viewer (Perfetto, chrome://tracing):
// `kiln bench --trace FILE`, or RunOptions::trace from the library. A traced
// call reports one slice for the call, one per engine and per fallback node
// it runs, and one per step inside each engine (a CPU engine's nodes on the
// host; a CUDA engine's kernels and library calls on the device, timed by
// the device). A traced call runs its engines' steps one by one and waits
// for the device, so it is slower than an untraced call: trace a call apart
// from the calls you time.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/status.h"

namespace kiln {

class Trace {
 public:
  struct Event {
    std::string name;     // the call, an engine, a fallback node or a layer
    std::string detail;   // what it is: an op, a kernel, a library call
    std::string track;    // "host" or the device it ran on ("cuda")
    double start_us = 0;  // since the trace began
    double duration_us = 0;
  };

  Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // Microseconds since the trace began (a steady clock).
  double now_us() const;
  // Adds one slice; safe from several threads.
  void add(Event event);
  // The slices so far, in the order they were added.
  std::vector<Event> events() const;
  // The Trace Event Format's JSON object: {"traceEvents": [...]}, one
  // complete ("X") event per slice, one thread per track (named by metadata
  // events), times in microseconds.
  std::string chrome_json() const;
  // chrome_json() written to `path` (kIoError naming it when that fails).
  Status write(const std::string& path) const;

 private:
  std::chrono::steady_clock::time_point start_;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
};

}  // namespace kiln
