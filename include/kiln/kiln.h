// kiln's C++ API: load a program exported by torch.export, open a session,
// run it with buffers that persist across calls.
//
//   auto program = kiln::Program::load("model.pt2");
//   if (!program) { std::cerr << program.status().message(); return 2; }
//   kiln::Session session(*program);
//   auto outputs = session.run({input});
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {

namespace ir {
struct Module;
}

// One input, output or buffer of a program.
struct TensorSpec {
  std::string name;               // user input/output name, or buffer fqn
  DType dtype = DType::Float32;
  std::vector<std::string> dims;  // "3", or a symbol expression such as "s0"
  std::string kind;               // "user_input", "parameter", "buffer", "constant", "user_output", "buffer_mutation"
};

struct SymbolInfo {
  std::string name;
  int64_t min = 0;
  int64_t max = 0;  // INT64_MAX when unbounded
};

struct LoadOptions {
  // Lowering passes after which to hand the IR text to `dump` ("all" for every pass).
  std::vector<std::string> print_after;
  std::function<void(const std::string& pass, const std::string& ir_text)> dump;
};

// A loaded and lowered program. Immutable once loaded: one Program may be
// shared by any number of sessions on any threads.
class Program {
 public:
  // Loads a .pt2 archive written by torch.export.save (PyTorch 2.9+).
  // Errors name the file, the archive entry, node or tensor at fault.
  static Expected<std::shared_ptr<const Program>> load(const std::string& path, const LoadOptions& options = {});

  const std::vector<TensorSpec>& inputs() const;    // user inputs, in call order
  const std::vector<TensorSpec>& outputs() const;   // user outputs, in result order
  const std::vector<TensorSpec>& buffers() const;   // mutable state, in program order
  const std::vector<TensorSpec>& weights() const;   // parameters and constants
  const std::vector<SymbolInfo>& symbols() const;   // dynamic dimensions and their ranges
  // Names of buffers the program writes (each becomes a buffer_mutation).
  const std::vector<std::string>& mutated_buffers() const;
  // Op target -> number of nodes, after lowering.
  std::map<std::string, int> op_histogram() const;
  std::string dialect() const;        // "TRAINING" or "ATEN" as exported
  std::string torch_version() const;  // PyTorch version that exported it
  const std::string& source() const;

  const ir::Module& module() const;  // the lowered IR (for tools)
  ~Program();

 private:
  Program();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend class Session;
};

// A program's state (its buffers) and calls on it. A session is used by one
// thread at a time; use one session per thread.
class Session {
 public:
  explicit Session(std::shared_ptr<const Program> program);

  // Runs the program on user inputs given in signature order and returns the
  // user outputs. Inputs are checked (count, dtype, rank, sizes, dynamic
  // ranges) before anything runs. Buffers change only when the whole call
  // succeeds; a failed call leaves the session as it was.
  Expected<std::vector<Tensor>> run(const std::vector<Tensor>& inputs);

  // Current value of buffer `fqn`.
  Expected<Tensor> buffer(std::string_view fqn) const;
  // Replaces buffer `fqn` (same dtype and shape).
  Status set_buffer(std::string_view fqn, const Tensor& value);
  // Restores every buffer to its initial value from the program.
  void reset();

  const Program& program() const { return *program_; }

 private:
  std::shared_ptr<const Program> program_;
  std::map<std::string, Tensor, std::less<>> buffers_;
};

}  // namespace kiln
