// The micro-program of a fused elementwise layer (kiln.fused_elementwise).
//
// A program reads the layer's input tensors into registers [0, num_inputs)
// and runs a list of ATen elementwise ops; instruction i writes register
// num_inputs + i, and the last instruction's register is the layer's output.
// Every instruction computes exactly what the op's reference kernel computes
// (same precision, result rounded to the layer's dtype), so a fused layer
// gives the same bits as its ops run one by one.
//
// Text form (one line, so that it fits in a string attribute):
//
//   inputs 2; %2 = aten.mul.Tensor(%0, %1); %3 = aten.add.Scalar(%2, 0.5, 1);
//   %4 = aten.gelu.default(%3, 'tanh')
//
// Arguments are the registers read, then the numbers (shortest round-trip
// decimal, or inf, -inf, nan, -nan, nan(0x<64-bit pattern>)), then the mode
// in single quotes. Per op (the numbers in this order):
//
//   add/sub .Tensor      2 registers   alpha
//   add/sub/rsub .Scalar 1 register    other, alpha
//   mul/div .Tensor      2 registers
//   mul/div .Scalar      1 register    other
//   pow.Tensor_Scalar    1 register    exponent
//   clamp                1 register    min, max (an absent bound is -inf / inf)
//   clamp_min            1 register    min
//   hardtanh             1 register    min_val, max_val
//   gelu                 1 register    mode 'none' or 'tanh'
//   kiln.silu_mul        2 registers   (silu(a), rounded to the dtype, times b)
//   other unary ops      1 register
//
// A ".Tensor" node whose `other` is a Python number becomes the ".Scalar"
// instruction, and div.Tensor_mode without a rounding mode becomes div.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::engine {

struct ElementwiseInstr {
  ir::OpKind op = ir::OpKind::kUnknown;  // the ATen op it computes (aten.add.Tensor, aten.sigmoid.default, ...)
  std::vector<int> operands;             // registers read (see the file comment)
  std::vector<double> scalars;           // Python-number arguments, in the order the file comment gives
  std::string mode;                      // gelu's `approximate` ("none" | "tanh"); empty for every other op

  bool operator==(const ElementwiseInstr&) const = default;
};

struct ElementwiseProgram {
  int num_inputs = 0;
  std::vector<ElementwiseInstr> instrs;  // the last instruction's register is the layer's output

  // The text form above; deterministic and independent of the C locale.
  std::string to_text() const;
  // Parses and validates what to_text writes. Errors are kFormat and give the
  // byte offset and the instruction where the text went wrong.
  static Expected<ElementwiseProgram> parse(std::string_view text);
  // Checks a program built in memory: at least one input and one instruction,
  // known ops, register references in range (no forward references), operand
  // and scalar counts per op, modes. kFormat naming the instruction.
  Status validate() const;

  bool operator==(const ElementwiseProgram&) const = default;
};

// Whether elementwise programs know `op` at all (is_fusible_elementwise then
// decides for a node: dtypes and argument kinds).
bool is_elementwise_program_op(ir::OpKind op);

// `node` as an instruction, or nullopt when it cannot become one (see
// is_fusible_elementwise). The instruction's operands index
// `tensor_operands`, which receives the node's tensor operands in the order
// the instruction reads them (may be null).
std::optional<ElementwiseInstr> elementwise_instr(const ir::Node& node,
                                                  std::vector<ir::Value*>* tensor_operands = nullptr);

// Whether `node` can become an instruction: an op the programs know, one
// tensor output of a floating dtype (f32, f64, f16, bf16), tensor operands of
// that same dtype, and every other argument a Python number (integers exactly
// representable as doubles; no bools, no SymInt/SymFloat values) or the
// op's known string attribute.
bool is_fusible_elementwise(const ir::Node& node);

}  // namespace kiln::engine
