#include "engine/elementwise_program.h"

#include <gtest/gtest.h>

#include <bit>
#include <clocale>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ir/printer.h"

namespace kiln::engine {
namespace {

using ir::OpKind;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Programs compare bit for bit (NaN scalars included).
void expect_same_program(const ElementwiseProgram& a, const ElementwiseProgram& b) {
  ASSERT_EQ(a.num_inputs, b.num_inputs);
  ASSERT_EQ(a.instrs.size(), b.instrs.size());
  for (size_t i = 0; i < a.instrs.size(); ++i) {
    const ElementwiseInstr& x = a.instrs[i];
    const ElementwiseInstr& y = b.instrs[i];
    EXPECT_EQ(x.op, y.op) << "instruction " << i;
    EXPECT_EQ(x.operands, y.operands) << "instruction " << i;
    EXPECT_EQ(x.mode, y.mode) << "instruction " << i;
    ASSERT_EQ(x.scalars.size(), y.scalars.size()) << "instruction " << i;
    for (size_t k = 0; k < x.scalars.size(); ++k)
      EXPECT_EQ(std::bit_cast<uint64_t>(x.scalars[k]), std::bit_cast<uint64_t>(y.scalars[k]))
          << "instruction " << i << " scalar " << k << ": " << x.scalars[k] << " vs " << y.scalars[k];
  }
}

ElementwiseProgram sample_program() {
  ElementwiseProgram p;
  p.num_inputs = 2;
  p.instrs = {
      {OpKind::kMulTensor, {0, 1}, {}, ""},
      {OpKind::kAddScalar, {2}, {0.1, -3}, ""},
      {OpKind::kGelu, {3}, {}, "tanh"},
      {OpKind::kClamp, {4}, {-kInf, 6.5}, ""},
      {OpKind::kPowTensorScalar, {5}, {1e-300}, ""},
      {OpKind::kSubTensor, {6, 0}, {2.5}, ""},
      {OpKind::kSigmoid, {7}, {}, ""},
  };
  return p;
}

constexpr const char* kSampleText =
    "inputs 2; %2 = aten.mul.Tensor(%0, %1); %3 = aten.add.Scalar(%2, 0.1, -3); %4 = aten.gelu.default(%3, 'tanh'); "
    "%5 = aten.clamp.default(%4, -inf, 6.5); %6 = aten.pow.Tensor_Scalar(%5, 1e-300); "
    "%7 = aten.sub.Tensor(%6, %0, 2.5); %8 = aten.sigmoid.default(%7)";

TEST(ElementwiseProgram, TextRoundTrip) {
  const ElementwiseProgram p = sample_program();
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().message();
  EXPECT_EQ(p.to_text(), kSampleText);
  auto back = ElementwiseProgram::parse(p.to_text());
  ASSERT_TRUE(back.has_value()) << back.status().message();
  expect_same_program(*back, p);
  EXPECT_EQ(back->to_text(), kSampleText);
}

TEST(ElementwiseProgram, ParseAcceptsSpacing) {
  auto p = ElementwiseProgram::parse("  inputs 2 ;%2=aten.mul.Tensor( %0 ,%1 );\n %3 = aten.gelu.default(%2,'none')  ");
  ASSERT_TRUE(p.has_value()) << p.status().message();
  EXPECT_EQ(p->to_text(), "inputs 2; %2 = aten.mul.Tensor(%0, %1); %3 = aten.gelu.default(%2, 'none')");
}

TEST(ElementwiseProgram, NumbersRoundTripExactly) {
  const std::vector<double> numbers = {
      0.1,
      -0.0,
      0.0,
      1.0 / 3.0,
      -2.5e-8,
      std::numeric_limits<double>::denorm_min(),
      std::numeric_limits<double>::max(),
      std::numeric_limits<double>::lowest(),
      9007199254740993.0,  // rounds to 2^53 as a double; written back as that double
      kInf,
      -kInf,
      std::bit_cast<double>(uint64_t{0x7ff8000000000000}),  // nan
      std::bit_cast<double>(uint64_t{0xfff8000000000000}),  // -nan
      std::bit_cast<double>(uint64_t{0x7ff0000000000123}),  // a signalling NaN with a payload
      std::bit_cast<double>(uint64_t{0xfff8000000abcdef}),  // a negative NaN with a payload
  };
  ElementwiseProgram p;
  p.num_inputs = 1;
  int reg = 0;
  for (double d : numbers) {
    p.instrs.push_back({OpKind::kClampMin, {reg}, {d}, ""});
    reg = p.num_inputs + static_cast<int>(p.instrs.size()) - 1;
  }
  const std::string text = p.to_text();
  EXPECT_NE(text.find(", -nan)"), std::string::npos) << text;
  EXPECT_NE(text.find("nan(0x7ff0000000000123)"), std::string::npos) << text;
  auto back = ElementwiseProgram::parse(text);
  ASSERT_TRUE(back.has_value()) << back.status().message() << "\n" << text;
  expect_same_program(*back, p);
}

TEST(ElementwiseProgram, TextDoesNotDependOnTheLocale) {
  const char* const candidates[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8", "ru_RU.UTF-8"};
  const char* set = nullptr;
  for (const char* c : candidates)
    if ((set = std::setlocale(LC_ALL, c)) != nullptr) break;
  if (set == nullptr) GTEST_SKIP() << "no locale with a decimal comma is installed";
  const std::string text = sample_program().to_text();
  auto back = ElementwiseProgram::parse(text);
  std::setlocale(LC_ALL, "C");
  EXPECT_EQ(text, kSampleText);
  ASSERT_TRUE(back.has_value()) << back.status().message();
  expect_same_program(*back, sample_program());
}

TEST(ElementwiseProgram, MalformedTextsAreFormatErrors) {
  const char* const texts[] = {
      "",
      "   ",
      "outputs 1; %1 = aten.neg.default(%0)",
      "inputs x; %1 = aten.neg.default(%0)",
      "inputs 0; %0 = aten.neg.default(%0)",
      "inputs 1",                                                       // no instruction
      "inputs 1 %1 = aten.neg.default(%0)",                             // missing ';'
      "inputs 1; %1 = aten.neg.default(%0);",                           // dangling ';'
      "inputs 1; %2 = aten.neg.default(%0)",                            // writes the wrong register
      "inputs 1; %1 aten.neg.default(%0)",                              // missing '='
      "inputs 1; %1 = aten.nope.default(%0)",                           // unknown op
      "inputs 1; %1 = aten.mm.default(%0, %0)",                         // not an elementwise program op
      "inputs 1; %1 = aten.div.Tensor_mode(%0, %0)",                    // only its normalized form, div.Tensor
      "inputs 1; %1 = aten.neg.default(%1)",                            // reads its own register
      "inputs 1; %1 = aten.neg.default(%2)",                            // forward reference
      "inputs 1; %1 = aten.neg.default(%-1)",                           // negative register
      "inputs 1; %1 = aten.neg.default(%0, %0)",                        // too many registers
      "inputs 1; %1 = aten.mul.Tensor(%0)",                             // too few registers
      "inputs 1; %1 = aten.add.Tensor(%0, 1)",                          // too few registers, too many numbers
      "inputs 1; %1 = aten.add.Scalar(%0, 1)",                          // missing alpha
      "inputs 1; %1 = aten.mul.Scalar(%0, 1, 2)",                       // one number too many
      "inputs 1; %1 = aten.add.Scalar(%0, 1x, 1)",                      // garbage number
      "inputs 1; %1 = aten.add.Scalar(%0, 0x10, 1)",                    // hex is not a number here
      "inputs 1; %1 = aten.add.Scalar(%0, infinity, 1)",                // only inf
      "inputs 1; %1 = aten.add.Scalar(%0, 1e999, 1)",                   // out of range
      "inputs 1; %1 = aten.add.Scalar(%0, , 1)",                        // empty number
      "inputs 1; %1 = aten.add.Scalar(%0, nan(0x1), 1)",                // that pattern is not a NaN
      "inputs 1; %1 = aten.add.Scalar(%0, nan(0x7ff8000000000000, 1)",  // unterminated pattern
      "inputs 1; %1 = aten.clamp.default(%0, 1, %0)",                   // register after a number
      "inputs 1; %1 = aten.gelu.default(%0, 'fast')",                   // unknown mode
      "inputs 1; %1 = aten.gelu.default(%0)",                           // gelu needs its mode
      "inputs 1; %1 = aten.gelu.default(%0, 'tanh",                     // unterminated mode
      "inputs 1; %1 = aten.gelu.default(%0, 'tanh', %0)",               // mode not last
      "inputs 1; %1 = aten.neg.default(%0, 'tanh')",                    // neg has no mode
      "inputs 1; %1 = aten.neg.default(%0",                             // unterminated argument list
      "inputs 1; %1 = aten.neg.default",                                // no argument list
      "inputs 1; %1 = (%0)",                                            // no op
  };
  for (const char* t : texts) {
    auto p = ElementwiseProgram::parse(t);
    ASSERT_FALSE(p.has_value()) << "parsed: " << t;
    EXPECT_EQ(p.status().code(), ErrorCode::kFormat) << t;
    EXPECT_NE(p.status().message().find("offset"), std::string::npos) << p.status().message();
  }
}

TEST(ElementwiseProgram, ErrorsNameTheOffsetAndInstruction) {
  auto p = ElementwiseProgram::parse("inputs 1; %1 = aten.neg.default(%0); %2 = aten.frob.default(%1)");
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.status().message().find("offset 42 (instruction 2)"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("aten.frob.default"), std::string::npos) << p.status().message();

  auto q = ElementwiseProgram::parse("inputs 1; %1 = aten.add.Scalar(%0, 2.5.1, 1)");
  ASSERT_FALSE(q.has_value());
  EXPECT_NE(q.status().message().find("offset 35 (instruction 1)"), std::string::npos) << q.status().message();
  EXPECT_NE(q.status().message().find("'2.5.1'"), std::string::npos) << q.status().message();
}

TEST(ElementwiseProgram, ValidateChecksProgramsBuiltInMemory) {
  EXPECT_TRUE(sample_program().validate().is_ok());
  ElementwiseProgram empty;
  EXPECT_EQ(empty.validate().code(), ErrorCode::kFormat);
  ElementwiseProgram no_instrs;
  no_instrs.num_inputs = 1;
  EXPECT_EQ(no_instrs.validate().code(), ErrorCode::kFormat);

  ElementwiseProgram forward = sample_program();
  forward.instrs[1].operands = {3};  // instruction 2 writes %3
  Status s = forward.validate();
  EXPECT_EQ(s.code(), ErrorCode::kFormat);
  EXPECT_NE(s.message().find("instruction 2"), std::string::npos) << s.message();

  ElementwiseProgram wrong_op = sample_program();
  wrong_op.instrs[0].op = OpKind::kMm;
  EXPECT_EQ(wrong_op.validate().code(), ErrorCode::kFormat);
  ElementwiseProgram wrong_count = sample_program();
  wrong_count.instrs[0].scalars = {1.0};
  EXPECT_EQ(wrong_count.validate().code(), ErrorCode::kFormat);
}

// ---- nodes as instructions

// The instruction of the graph's only node, and the tensor operands it reads (by name).
std::optional<ElementwiseInstr> instr_of(const std::string& inputs, const std::string& node,
                                         std::vector<std::string>* reads = nullptr) {
  auto g = ir::parse_graph("graph(" + inputs + ") {\n  " + node + "\n  return ()\n}\n");
  EXPECT_TRUE(g.has_value()) << g.status().message();
  if (!g.has_value()) return std::nullopt;
  const ir::Node& n = *g->nodes().back();
  std::vector<ir::Value*> tensors;
  auto in = elementwise_instr(n, &tensors);
  EXPECT_EQ(in.has_value(), is_fusible_elementwise(n));
  if (reads)
    for (const ir::Value* v : tensors) reads->push_back(v->name);
  return in;
}

constexpr const char* kXY = "%x: float32[2, 3], %y: float32[3]";

TEST(ElementwiseProgram, NodesBecomeInstructions) {
  struct Case {
    const char* node;
    OpKind op;
    std::vector<std::string> reads;
    std::vector<double> scalars;
    std::string mode;
  };
  const Case cases[] = {
      {"%z: float32[2, 3] = aten.add.Tensor(self=%x, other=%y)", OpKind::kAddTensor, {"x", "y"}, {1}, ""},
      {"%z: float32[2, 3] = aten.add.Tensor(self=%x, other=%y, alpha=2)", OpKind::kAddTensor, {"x", "y"}, {2}, ""},
      {"%z: float32[2, 3] = aten.add.Tensor(self=%x, other=2)", OpKind::kAddScalar, {"x"}, {2, 1}, ""},
      {"%z: float32[2, 3] = aten.sub.Tensor(self=%x, other=0.5, alpha=-3)", OpKind::kSubScalar, {"x"}, {0.5, -3}, ""},
      {"%z: float32[2, 3] = aten.sub.Scalar(self=%x, other=1.5)", OpKind::kSubScalar, {"x"}, {1.5, 1}, ""},
      {"%z: float32[2, 3] = aten.rsub.Scalar(self=%x, other=1)", OpKind::kRsubScalar, {"x"}, {1, 1}, ""},
      {"%z: float32[2, 3] = aten.rsub.Tensor(self=%x, other=4.0, alpha=2.0)", OpKind::kRsubScalar, {"x"}, {4, 2}, ""},
      {"%z: float32[2, 3] = aten.mul.Tensor(self=%x, other=%x)", OpKind::kMulTensor, {"x", "x"}, {}, ""},
      {"%z: float32[2, 3] = aten.mul.Tensor(self=%x, other=0.25)", OpKind::kMulScalar, {"x"}, {0.25}, ""},
      {"%z: float32[2, 3] = aten.div.Tensor(self=%y, other=%x)", OpKind::kDivTensor, {"y", "x"}, {}, ""},
      {"%z: float32[2, 3] = aten.div.Scalar(self=%x, other=3)", OpKind::kDivScalar, {"x"}, {3}, ""},
      {"%z: float32[2, 3] = aten.div.Tensor_mode(self=%x, other=%y, rounding_mode=None)",
       OpKind::kDivTensor,
       {"x", "y"},
       {},
       ""},
      {"%z: float32[2, 3] = aten.div.Tensor_mode(self=%x, other=2.0)", OpKind::kDivScalar, {"x"}, {2}, ""},
      {"%z: float32[2, 3] = aten.pow.Tensor_Scalar(self=%x, exponent=2)", OpKind::kPowTensorScalar, {"x"}, {2}, ""},
      {"%z: float32[2, 3] = aten.sigmoid.default(self=%x)", OpKind::kSigmoid, {"x"}, {}, ""},
      {"%z: float32[2, 3] = aten.relu.default(self=%x)", OpKind::kRelu, {"x"}, {}, ""},
      {"%z: float32[2, 3] = aten.gelu.default(self=%x)", OpKind::kGelu, {"x"}, {}, "none"},
      {"%z: float32[2, 3] = aten.gelu.default(self=%x, approximate=\"tanh\")", OpKind::kGelu, {"x"}, {}, "tanh"},
      {"%z: float32[2, 3] = aten.hardtanh.default(self=%x)", OpKind::kHardtanh, {"x"}, {-1, 1}, ""},
      {"%z: float32[2, 3] = aten.hardtanh.default(self=%x, min_val=0.0, max_val=6.0)",
       OpKind::kHardtanh,
       {"x"},
       {0, 6},
       ""},
      {"%z: float32[2, 3] = aten.clamp.default(self=%x, min=-1)", OpKind::kClamp, {"x"}, {-1, kInf}, ""},
      {"%z: float32[2, 3] = aten.clamp.default(self=%x, min=None, max=0.5)", OpKind::kClamp, {"x"}, {-kInf, 0.5}, ""},
      {"%z: float32[2, 3] = aten.clamp.default(self=%x, min=0, max=6)", OpKind::kClamp, {"x"}, {0, 6}, ""},
      {"%z: float32[2, 3] = aten.clamp_min.default(self=%x, min=1e-5)", OpKind::kClampMin, {"x"}, {1e-5}, ""},
      {"%z: float32[2, 3] = kiln.silu_mul(a=%y, b=%x)", OpKind::kSiluMul, {"y", "x"}, {}, ""},
  };
  for (const Case& c : cases) {
    std::vector<std::string> reads;
    auto in = instr_of(kXY, c.node, &reads);
    ASSERT_TRUE(in.has_value()) << c.node;
    EXPECT_EQ(in->op, c.op) << c.node;
    EXPECT_EQ(reads, c.reads) << c.node;
    std::vector<int> operands;
    for (size_t i = 0; i < c.reads.size(); ++i) operands.push_back(static_cast<int>(i));
    EXPECT_EQ(in->operands, operands) << c.node;
    EXPECT_EQ(in->scalars, c.scalars) << c.node;
    EXPECT_EQ(in->mode, c.mode) << c.node;
  }
}

TEST(ElementwiseProgram, WhatCannotBecomeAnInstruction) {
  const std::string inputs =
      "%x: float32[2, 3], %y: float32[3], %h: float16[3], %i: int64[2, 3], %k: float32[3, 3], %n: symint";
  const char* const nodes[] = {
      "%z: int64[2, 3] = aten.add.Tensor(self=%i, other=1)",  // not floating
      "%z: float32[2, 3] = kiln.silu_mul(a=%x, b=%h)",
      "%z: float32[2, 3] = kiln.silu_mul(a=%x, b=2.0)",
      "%z: float32[2, 3] = aten.mul.Tensor(self=%x, other=%h)",                   // two dtypes
      "%z: float16[2, 3] = aten.mul.Tensor(self=%x, other=2)",                    // output dtype differs
      "%z: float32[2, 3] = aten.mul.Tensor(self=%x, other=%n)",                   // SymInt operand
      "%z: float32[2, 3] = aten.add.Tensor(self=%x, other=2, alpha=true)",        // bool alpha
      "%z: float32[2, 3] = aten.add.Tensor(self=%x, other=true)",                 // bool number
      "%z: float32[2, 3] = aten.add.Tensor(self=%x, other=1152921504606846977)",  // not exact as a double
      "%z: float32[2, 3] = aten.add.Scalar(self=%x, other=%y)",                   // .Scalar with a tensor
      "%z: float32[2, 3] = aten.rsub.Tensor(self=%x, other=%y)",                  // rsub of two tensors
      "%z: float32[2, 3] = aten.div.Tensor_mode(self=%x, other=%y, rounding_mode=\"floor\")",
      "%z: float32[2, 3] = aten.clamp.default(self=%x)",                      // no bound
      "%z: float32[2, 3] = aten.clamp.default(self=%x, min=None, max=None)",  // no bound
      "%z: float32[2, 3] = aten.gelu.default(self=%x, approximate=\"erf\")",  // unknown mode
      "%z: float32[2, 3] = aten.pow.Tensor_Tensor(self=%x, exponent=%x)",     // not in the list
      "%z: float32[2, 3] = aten.pow.Tensor_Scalar(self=%x, exponent=%n)",     // symbolic exponent
      "%z: float32[2, 3] = aten.relu.default(self=%x, inplace=true)",         // unknown argument
      "%z: float32[3, 3] = aten.mm.default(self=%k, mat2=%k)",                // not elementwise
      "%z: bool[2, 3] = aten.gt.Scalar(self=%x, other=0)",                    // not in the list
  };
  for (const char* node : nodes) EXPECT_FALSE(instr_of(inputs, node).has_value()) << node;
}

}  // namespace
}  // namespace kiln::engine
