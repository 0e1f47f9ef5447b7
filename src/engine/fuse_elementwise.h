// Elementwise fusion: an engine builder pass over a Network.
//
// Every group of two or more connected fusible elementwise layers (see
// is_fusible_elementwise) becomes one kiln.fused_elementwise layer:
//
//   %y: f32[8, 16] = kiln.fused_elementwise(inputs=[%x, %b], program="inputs 2; %2 = ...")
//
// `inputs` are the group's outside tensor operands (deduplicated, in the order
// the group first reads them) and `program` is the group's
// ElementwiseProgram in text form.
#pragma once

#include "engine/network.h"
#include "kiln/status.h"

namespace kiln::engine {

// Fuses `net` in place.
//   net: a verified Network. A group is fused when exactly one of its values
//        is used outside it (a later layer or an engine output): that value
//        keeps its Value, type and name and is produced by the fused layer,
//        which takes the place of the group's last layer; the other layers
//        are removed. All of a group's tensors have one floating dtype (f32,
//        f64, f16, bf16) and its output's shape is the broadcast of its
//        inputs' shapes (symbolic sizes compared structurally; a group whose
//        shapes cannot be proven so is left alone). Groups grow from the last
//        layer backwards, so the result is deterministic.
// Clears net.kernels when it is not empty (kernels are chosen after fusion).
// Returns the result of verifying the rewritten network.
Status fuse_elementwise(Network& net);
// fuse_elementwise as the network pass "fuse-elementwise".
NetworkPass fuse_elementwise_pass();

}  // namespace kiln::engine
