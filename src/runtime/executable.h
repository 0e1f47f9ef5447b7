// A compiled program ready to run: its engines loaded, its schedule checked.
// Runs engine segments on their backends and, between them, fallback nodes on
// the reference kernels; a program with no fallback never touches them.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/backend.h"
#include "engine/value.h"
#include "kiln/trace.h"
#include "partition/partition.h"
#include "program/compiled_program.h"

namespace kiln::runtime {

// How a fallback node runs in a call that keeps values on a device: see
// partition::device_fallback.
using partition::device_fallback;
using partition::DeviceFallback;

class Executable {
 public:
  // Loads every engine plan with its backend and checks the dataflow: each
  // segment reads only graph inputs and values that earlier segments (or its
  // own earlier nodes) produce, and every graph output is produced.
  // With `load_engines` false the plans are not deserialized yet (a compile
  // that only writes the program to a file, an inspection); the first run
  // loads them, and a plan that fails to load fails that run.
  static Expected<std::unique_ptr<Executable>> load(program::CompiledProgram p, std::string_view what,
                                                    bool load_engines = true);

  struct RunOptions {
    // Handed to every engine, and the stream device memory for the call's
    // values is allocated on (null: the device's default stream).
    void* stream = nullptr;
    // The outputs of engines whose backend has a device of its own stay in
    // that device's memory (a value a fallback node or a host engine reads is
    // copied to the host first: it crosses), except user outputs no later
    // segment reads when `user_outputs_on_host` (written straight into host
    // memory); otherwise every engine output comes back in host memory.
    bool keep_on_device = false;
    bool user_outputs_on_host = false;
    // Per graph output (or empty): memory the value should be written into
    // directly (device memory; host memory for a user output wanted there),
    // a copied-back buffer's own memory. Taken where the value is
    // an output of the last segment, an engine, that writes it nowhere else
    // (the returned value is then that memory itself), ignored otherwise.
    std::vector<Tensor> output_memory;
    // >= 0: a call of a padded batch bucket (program().padded) with that many
    // rows: its padded user inputs have that many along dimension 0, and so
    // do the outputs it cuts (times the output's factor); the engines pad and
    // cut where they compute (engine::RowPadding).
    int64_t rows = -1;
    // Non-null: one slice per engine and per fallback node, and the steps
    // each engine reports (engine::StepTrace); every engine's work is waited
    // for before its slice ends.
    Trace* trace = nullptr;
  };
  // `graph_inputs` parallel to the module's graph inputs (tensors in host
  // memory or on a device); returns the values of its graph outputs. Device
  // work is only enqueued when every engine output stays on the device (see
  // engine::Backend::execute); anything that reaches host memory is complete.
  Expected<std::vector<engine::RtValue>> run(std::vector<engine::RtValue> graph_inputs,
                                             const RunOptions& options) const;
  Expected<std::vector<engine::RtValue>> run(std::vector<engine::RtValue> graph_inputs) const {
    return run(std::move(graph_inputs), RunOptions{});
  }
  // Waits for every engine's enqueued work and reports a device-side error an
  // asynchronous call left.
  Status synchronize() const;
  const program::CompiledProgram& program() const { return p_; }
  // Every buffer mutation, in graph output order: written in place by an engine or copied back.
  const std::vector<program::BufferWrite>& buffer_writes() const { return buffer_writes_; }
  // Per graph output: whether an engine writes it in place into its buffer (no copy-back).
  const std::vector<bool>& written_in_place() const { return written_in_place_; }
  program::CompiledProgram& program() { return p_; }

 private:
  // Loads every engine plan once (thread-safe); the status of that one attempt.
  Status ensure_engines() const;

  program::CompiledProgram p_;
  std::vector<program::BufferWrite> buffer_writes_;
  std::vector<bool> written_in_place_;  // derived from buffer_writes_ at load
  std::vector<bool> value_in_place_;    // per value id: a buffer's new value an engine writes where the buffer lies
  std::vector<bool> read_by_segment_;   // per value id: an engine segment's input or a fallback node's operand
  std::vector<bool> user_output_;       // per value id: a user output of the program
  std::vector<int> last_segment_reader_;  // per value id: the last segment that reads it (-1: none)
  // A padded batch bucket, per value id: a graph input the caller gives with
  // fewer rows; the factor a graph output is cut by (0: kept whole; -1: cut
  // only at the end).
  std::vector<bool> padded_input_;
  std::vector<int64_t> cut_factor_;
  // Per graph output: its value is an output of the last segment, an engine,
  // and no other graph output (RunOptions::output_memory may take it).
  std::vector<bool> takes_output_memory_;
  std::string what_;
  mutable std::once_flag engines_once_;
  mutable Status engines_status_;
  // Per segment; null for fallback segments. Shared with the hot set and other programs (engine_hot_set.h).
  mutable std::vector<std::shared_ptr<engine::Engine>> engines_;
  std::vector<std::vector<int>> release_after_;  // per segment: value ids no later segment reads
};

}  // namespace kiln::runtime
