// Checking a program against outputs recorded elsewhere (PyTorch's, in a
// safetensors file): runs the program on the recorded inputs and compares,
// as `kiln check` does. The file's names follow this convention:
//   input.<i> / output.<j>                       one call
//   step<k>.input.<i> / step<k>.output.<j>       calls on one session, buffers carried over
//   final.buffer.<fqn>                           a buffer's value after the last call
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/options.h"
#include "kiln/runtime.h"
#include "kiln/safetensors.h"

namespace kiln {

struct Tolerance {
  double rtol = 1e-4;
  double atol = 1e-5;
  // The absolute tolerance is at least this fraction of the tensor's largest
  // magnitude (0: none): an engine that rounds to 16 bits loses a fraction of
  // the largest value that reaches each output, small outputs included.
  double atol_of_largest = 0;
};

struct TensorComparison {
  std::string name;      // "step1.output.0", "final.buffer.cache"
  std::string got_type;  // "float32[1, 10]"
  std::string want_type;
  double max_abs = 0;  // largest |got - want|
  double max_rel = 0;  // largest |got - want| / |want| over elements with |want| > atol
  bool exact = false;  // compared exactly (integer and bool tensors)
  bool pass = false;
  std::string problem;  // why it failed, when it did
};

struct CheckReport {
  std::vector<TensorComparison> tensors;
  int calls = 0;
  bool pass() const;
  double max_abs() const;
  double max_rel() const;
};

// The tolerance a fixture's manifest records for it: the io file names its
// fixture in its metadata ("fixture"), and manifest.json beside it lists
// that fixture with this io file and a tolerance (tools/export_fixtures.py
// measures each against a more precise reference). nullopt when the file
// names no fixture or no manifest lists it; an error naming the manifest
// when it cannot be read or its entry's tolerance is not two finite numbers
// >= 0.
//   io_path: the io file's path (the manifest is looked for in its directory)
Expected<std::optional<Tolerance>> manifest_tolerance(const std::string& io_path, const SafetensorsFile& io);

// `tol` for outputs of engines that compute at `precision`: a float32 model built for a 16-bit or TF32 engine
// converts its weights and activations, so its outputs carry that rounding
// through every layer; below fp32 the floor is 5e-2 relative and absolute,
// and the absolute tolerance at least 1e-2 of the tensor's largest magnitude
// (2.5 bfloat16 ulps of it: a model whose outputs reach 30 is held to 0.3).
Tolerance tolerance_at_precision(Tolerance tol, Precision precision);

// Compares one tensor; float types use |got - want| <= atol + rtol * |want|
// (with floors for float16 and bfloat16 outputs); NaN must match NaN.
TensorComparison compare_tensors(const std::string& name, const Tensor& got, const Tensor& want, Tolerance tol);

// Runs every call the fixture records on one session and compares every
// output and final buffer. Errors (not mismatches) come back as a Status.
//   bind_buffers: every buffer is first bound to memory the check allocates
//     (Session::bind_buffer), as a caller owning its KV caches would; the
//     final values are read from that memory, and a call that leaves a buffer
//     anywhere else is an error.
Expected<CheckReport> check_fixture(const std::shared_ptr<const Program>& program, const SafetensorsFile& io,
                                    Tolerance tol, bool bind_buffers = false);

}  // namespace kiln
