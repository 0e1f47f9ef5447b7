// Capability-based partitioning: cuts a module's graph into an ordered list
// of engine segments (nodes an engine can take) and fallback segments (nodes
// that run one by one outside any engine).
//
// A partition is a plain value that refers to the module's nodes and values
// by pointer: segment inputs and outputs are SSA values, never names, so a
// name shared by unrelated values cannot rewire anything. The pointers stay
// valid as long as the module's graph is alive and unchanged.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::partition {

// One node's answer to "can an engine take this node?".
struct Capability {
  bool supported = false;
  std::string reason;  // why not, when !supported (e.g. "output shape depends on tensor data")
  static Capability yes() { return {true, ""}; }
  static Capability no(std::string reason) { return {false, std::move(reason)}; }
};

// Answers for one node whether an engine can take it. Production code passes
// the converter registry's check; tests pass lambdas. Called at most once per
// node for each partition_by_capability call.
using CapabilityFn = std::function<Capability(const ir::Node&)>;

struct PartitionOptions {
  // Engine segments with fewer nodes of category Compute than this stay in
  // fallback (views, symbolic and check ops ride along but do not count).
  // 0 keeps every engine segment. Must not be negative.
  int min_block_size = 5;
  // Ops forced out of engines, each written as a full target
  // ("aten.relu.default"), a target without its overload ("aten.relu", every
  // overload) or a bare op name ("relu", every namespace and overload). Each
  // entry must name at least one op kiln knows.
  std::vector<std::string> fallback_ops;
  // When set, any node the capability check refuses (or fallback_ops forces
  // out) is an error, and min_block_size is ignored.
  bool require_full_compilation = false;
  // The backend keeps tensors on its device between segments and runs some
  // fallback nodes there (device_fallback). An engine segment below
  // min_block_size then stays an engine when a node it reads from or writes
  // to is in an engine or is such a fallback node: in fallback its values
  // would cross to the host and back, which a kernel on the device spares.
  bool fallback_on_device = false;
};

// How a fallback node runs in a call that keeps values on a device
// (Executable::run, and the partition report's crossings): kHost on the
// reference kernels (its operands cross to the host); kSizes reads only
// sizes (device tensors stay where they are); kSelect is a data-dependent
// selection the device makes (nonzero, boolean-mask indexing, masked_select
// of operands of one size, unique and unique_consecutive of the flattened
// tensor), its row count the one thing that crosses.
enum class DeviceFallback { kHost, kSizes, kSelect };
DeviceFallback device_fallback(const ir::Node& n);
// x[mask]'s mask (an index.Tensor node with one bool index over self's leading dims), else null.
const ir::Value* boolean_mask(const ir::Node& n);
// unique (_unique2) or unique_consecutive of the flattened tensor (no dim): values, inverse and counts.
bool unique_of_flattened(const ir::Node& n);

enum class SegmentKind { kEngine, kFallback };

struct Segment {
  SegmentKind kind = SegmentKind::kFallback;
  // In a valid execution order.
  std::vector<const ir::Node*> nodes;
  // Values read from outside: graph inputs that are not parameters or
  // constants, and outputs of earlier segments. Unique, in order of first use.
  std::vector<const ir::Value*> inputs;
  // Graph inputs whose InputSpec kind is kParameter or kConstant that this
  // segment reads. Unique, in order of first use; never in `inputs`.
  std::vector<const ir::Value*> constants;
  // Values defined here and read by a later segment or by the graph outputs.
  // Unique, in definition order; every such value is kept, including each
  // used output of a multi-output node.
  std::vector<const ir::Value*> outputs;
  // Fallback segments: parallel to `nodes`, why each node is not in an engine.
  // Empty for engine segments.
  std::vector<std::string> reasons;
};

struct Partition {
  // In execution order; a segment only reads graph inputs and outputs of
  // earlier segments.
  std::vector<Segment> segments;
};

// Splits m.graph into ordered engine and fallback segments.
//   m:        the module; its input_specs (one per graph input, or none at all,
//             which treats every input as a user input) say which graph inputs
//             are parameters or constants.
//   capable:  answers for each node whether an engine can take it.
//   options:  see PartitionOptions.
// Nodes are reordered (within the graph's dependencies) so that nodes of the
// same kind run together; segments are then maximal runs of one execution
// order, which makes cycles between segments impossible. The result depends
// only on the graph, the answers and the options.
// Errors: kInvalidArgument for a malformed graph, signature or option;
// kUnsupported when require_full_compilation is set and some node is refused
// (the message lists every refused node with its op and reason).
Expected<Partition> partition_by_capability(const ir::Module& m, const CapabilityFn& capable,
                                            const PartitionOptions& options = {});

// Human-readable report: one block per segment (kind, node count, ops with
// counts, inputs, constants and outputs) and, for every fallback node, its
// node name, op target and reason. Used by `kiln inspect --partition`.
//   m: the module `p` was computed from.
//   p: a partition of m.graph.
std::string describe_partition(const ir::Module& m, const Partition& p);

}  // namespace kiln::partition
