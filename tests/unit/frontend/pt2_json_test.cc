// The model JSON reader (parse_exported_program_json) on documents written
// here in the form torch.export writes (schema 8): every argument kind it
// reads, the signature's input and output kinds, symbols with their ranges,
// respelled ops, and the errors for what it cannot take, each naming the
// document and where in it.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "frontend/pt2_loader.h"
#include "ir/printer.h"

namespace kiln::frontend {
namespace {

using json = nlohmann::json;

constexpr int64_t kFloat = 7, kHalf = 6, kLong = 5;

json meta(int64_t dtype, std::vector<json> sizes) {
  return {{"dtype", dtype}, {"sizes", sizes}, {"layout", 7}, {"device", {{"type", "cpu"}}}};
}
json n(int64_t v) { return {{"as_int", v}}; }
json s0() { return {{"as_expr", {{"expr_str", "Symbol('s0', positive=True, integer=True)"}, {"hint", n(3)}}}}; }
json tensor(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }
json arg(const std::string& name, json a) { return {{"name", name}, {"arg", std::move(a)}, {"kind", 1}}; }
json node(const std::string& target, std::vector<json> inputs, std::vector<json> outputs, const std::string& name) {
  return {{"target", target}, {"inputs", inputs}, {"outputs", outputs}, {"name", name}, {"metadata", json::object()}};
}

// x: f32[s0, 4] (user input), w: f32[8, 4] (parameter fc.weight), run:
// f32[8] (non-persistent buffer), c: i64[2] (a lifted constant), and a
// constant bool input export specialized away.
json document() {
  json g;
  g["inputs"] = {tensor("p_w"), tensor("b_run"), tensor("c_t"), tensor("x"), {{"as_bool", true}}};
  g["tensor_values"] = {
      {"p_w", meta(kFloat, {n(8), n(4)})},
      {"b_run", meta(kFloat, {n(8)})},
      {"c_t", meta(kLong, {n(2)})},
      {"x", meta(kFloat, {s0(), n(4)})},
      {"linear", meta(kFloat, {s0(), n(8)})},
      {"view", meta(kFloat, {s0(), n(2), n(4)})},
      {"half", meta(kHalf, {s0(), n(2), n(4)})},
      {"mt", meta(kFloat, {s0(), n(4), n(2)})},
      {"a", meta(kFloat, {s0(), n(1), n(4)})},
      {"b", meta(kFloat, {s0(), n(1), n(4)})},
      {"filled", meta(kFloat, {s0(), n(8)})},
      {"new_run", meta(kFloat, {n(8)})},
      {"picked", meta(kFloat, {n(2)})},
  };
  g["sym_int_values"] = {{"size", s0()}};
  g["nodes"] = {
      node("torch.ops.aten.sym_size.int", {arg("self", tensor("x")), arg("dim", n(0))},
           {{{"as_sym_int", {{"as_name", "size"}}}}}, "size"),
      node("torch.ops.aten.linear.default",
           {arg("input", tensor("x")), arg("weight", tensor("p_w")), arg("bias", {{"as_none", nullptr}})},
           {tensor("linear")}, "linear"),
      node("torch.ops.aten.view.default",
           {arg("self", tensor("linear")),
            arg("size", {{"as_sym_ints", {{{"as_name", "size"}}, {{"as_int", 2}}, {{"as_int", 4}}}}})},
           {tensor("view")}, "view"),
      node("torch.ops.aten._to_copy.default",
           {arg("self", tensor("view")), arg("dtype", {{"as_scalar_type", kHalf}}),
            arg("device", {{"as_device", {{"type", "cuda"}, {"index", 1}}}}),
            arg("memory_format", {{"as_memory_format", 1}})},
           {tensor("half")}, "half"),
      // Respelled: x.mT is transpose(-2, -1).
      node("torch.ops.aten.mT.default", {arg("self", tensor("view"))}, {tensor("mt")}, "mt"),
      node("torch.ops.aten.split_with_sizes.default",
           {arg("self", tensor("view")), arg("split_sizes", {{"as_ints", {1, 1}}}), arg("dim", n(1))},
           {{{"as_tensors", {{{"name", "a"}}, {{"name", "b"}}}}}}, "split"),
      node("torch.ops.aten.masked_fill.Scalar",
           {arg("self", tensor("linear")), arg("mask", tensor("linear")), arg("value", {{"as_float", "-Infinity"}})},
           {tensor("filled")}, "filled"),
      node("torch.ops.aten.index.Tensor",
           {arg("self", tensor("b_run")),
            arg("indices", {{"as_optional_tensors", {{{"as_tensor", {{"name", "c_t"}}}}, {{"as_none", nullptr}}}}})},
           {tensor("picked")}, "picked"),
      node("torch.ops.aten.add.Tensor",
           {arg("self", tensor("b_run")), arg("other", tensor("b_run")), arg("alpha", {{"as_float", 0.5}})},
           {tensor("new_run")}, "new_run"),
  };
  g["outputs"] = {tensor("new_run"), tensor("half"),   tensor("mt"),
                  tensor("b"),       tensor("filled"), {{"as_sym_int", {{"as_name", "size"}}}}};
  json sig;
  sig["input_specs"] = {
      {{"parameter", {{"arg", {{"name", "p_w"}}}, {"parameter_name", "fc.weight"}}}},
      {{"buffer", {{"arg", {{"name", "b_run"}}}, {"buffer_name", "run"}, {"persistent", false}}}},
      {{"tensor_constant", {{"arg", {{"name", "c_t"}}}, {"tensor_constant_name", "lifted_0"}}}},
      {{"user_input", {{"arg", {{"as_tensor", {{"name", "x"}}}}}}}},
      {{"constant_input", {{"name", "flag"}, {"value", {{"as_bool", true}}}}}},
  };
  sig["output_specs"] = {
      {{"buffer_mutation", {{"arg", {{"name", "new_run"}}}, {"buffer_name", "run"}}}},
      {{"user_output", {{"arg", tensor("half")}}}},
      {{"user_output", {{"arg", tensor("mt")}}}},
      {{"user_output", {{"arg", tensor("b")}}}},
      {{"user_output", {{"arg", tensor("filled")}}}},
      {{"user_output", {{"arg", {{"as_sym_int", {{"as_name", "size"}}}}}}}},
  };
  json root;
  root["schema_version"] = {{"major", 8}, {"minor", 17}};
  root["torch_version"] = "2.11.0";
  root["verifiers"] = {"ATEN"};
  root["range_constraints"] = {{"s0", {{"min_val", 2}, {"max_val", 64}}}};
  root["graph_module"] = {{"graph", g}, {"signature", sig}};
  return root;
}

Expected<ir::Module> read(const json& j) { return parse_exported_program_json(j.dump(), "model.json"); }

const ir::Node& node_named(const ir::Module& m, const std::string& name) {
  for (const auto& nd : m.graph.nodes())
    if (nd->name == name) return *nd;
  ADD_FAILURE() << "no node " << name;
  return *m.graph.nodes().front();
}

TEST(Pt2Json, EveryArgumentKindAndTheSignatureAreRead) {
  auto m = read(document());
  ASSERT_TRUE(m.has_value()) << m.status().message();
  EXPECT_EQ(m->torch_version, "2.11.0");
  EXPECT_EQ(m->dialect, "ATEN");
  ASSERT_EQ(m->symbols.count("s0"), 1u);
  EXPECT_EQ(m->symbols.at("s0").min, 2);
  EXPECT_EQ(m->symbols.at("s0").max, 64);

  // The constant bool input is not an input of the program; the others keep their kinds and targets.
  ASSERT_EQ(m->graph.inputs().size(), 4u);
  ASSERT_EQ(m->input_specs.size(), 4u);
  EXPECT_EQ(m->input_specs[0].kind, ir::InputSpec::Kind::kParameter);
  EXPECT_EQ(m->input_specs[0].target, "fc.weight");
  EXPECT_EQ(m->input_specs[1].kind, ir::InputSpec::Kind::kBuffer);
  EXPECT_EQ(m->input_specs[1].target, "run");
  EXPECT_FALSE(m->input_specs[1].persistent);
  EXPECT_EQ(m->input_specs[2].kind, ir::InputSpec::Kind::kConstant);
  EXPECT_EQ(m->input_specs[2].target, "lifted_0");
  EXPECT_EQ(m->input_specs[3].kind, ir::InputSpec::Kind::kUserInput);
  EXPECT_EQ(m->graph.inputs()[3]->type.to_string(), "float32[s0, 4]");
  EXPECT_EQ(m->graph.inputs()[2]->type.to_string(), "int64[2]");

  ASSERT_EQ(m->output_specs.size(), 6u);
  EXPECT_EQ(m->output_specs[0].kind, ir::OutputSpec::Kind::kBufferMutation);
  EXPECT_EQ(m->output_specs[0].target, "run");
  EXPECT_EQ(m->graph.outputs()[5]->kind, ir::ValueKind::kSymInt);
  ASSERT_TRUE(m->graph.outputs()[5]->sym);
  EXPECT_EQ(m->graph.outputs()[5]->sym->to_string(), "s0");

  // Arguments, kind by kind.
  const ir::Node& linear = node_named(*m, "linear");
  EXPECT_TRUE(std::holds_alternative<ir::NoneArg>(*linear.find("bias")));
  const ir::Node& view = node_named(*m, "view");
  const auto& size = std::get<std::vector<ir::SymInt>>(*view.find("size"));
  ASSERT_EQ(size.size(), 3u);
  EXPECT_EQ(std::get<ir::Value*>(size[0])->name, "size");
  EXPECT_EQ(std::get<int64_t>(size[1]), 2);
  EXPECT_EQ(view.outputs[0]->type.to_string(), "float32[s0, 2, 4]");
  const ir::Node& half = node_named(*m, "half");
  EXPECT_EQ(std::get<DType>(*half.find("dtype")), DType::Float16);
  const auto& device = std::get<ir::Device>(*half.find("device"));
  EXPECT_EQ(device.type, "cuda");
  EXPECT_EQ(device.index, 1);
  EXPECT_EQ(std::get<int64_t>(*half.find("memory_format")), 1);
  const ir::Node& mt = node_named(*m, "mt");
  EXPECT_EQ(mt.op, ir::OpKind::kTranspose);
  EXPECT_EQ(std::get<int64_t>(*mt.find("dim0")), -2);
  EXPECT_EQ(std::get<int64_t>(*mt.find("dim1")), -1);
  const ir::Node& split = node_named(*m, "split");
  EXPECT_EQ(std::get<std::vector<int64_t>>(*split.find("split_sizes")), (std::vector<int64_t>{1, 1}));
  ASSERT_EQ(split.outputs.size(), 2u);
  EXPECT_EQ(split.outputs[1]->name, "b");
  EXPECT_EQ(split.outputs[1]->output_index, 1);
  const double fill = std::get<double>(*node_named(*m, "filled").find("value"));
  EXPECT_TRUE(std::isinf(fill) && fill < 0);
  const auto& indices = std::get<std::vector<std::optional<ir::Value*>>>(*node_named(*m, "picked").find("indices"));
  ASSERT_EQ(indices.size(), 2u);
  EXPECT_EQ((*indices[0])->name, "c_t");
  EXPECT_FALSE(indices[1].has_value());
  EXPECT_EQ(std::get<double>(*node_named(*m, "new_run").find("alpha")), 0.5);

  // What was read prints and reads back as the same graph.
  auto again = ir::parse_graph(ir::print_graph(m->graph));
  ASSERT_TRUE(again.has_value()) << again.status().message();
  std::string why;
  EXPECT_TRUE(ir::graphs_equal(m->graph, *again, &why)) << why;
}

// One document changed by `edit`: reading it fails with a message holding each of `want`.
void expect_refused(const std::function<void(json&)>& edit, std::vector<std::string> want) {
  json j = document();
  edit(j);
  auto m = read(j);
  ASSERT_FALSE(m.has_value()) << "read: " << want.front();
  for (const std::string& w : want) EXPECT_NE(m.status().message().find(w), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("model.json"), std::string::npos) << m.status().message();
}

TEST(Pt2Json, WhatCannotBeReadIsRefusedNamingWhere) {
  json& (*nodes)(json&) = [](json& j) -> json& { return j["graph_module"]["graph"]["nodes"]; };
  expect_refused([&](json& j) { nodes(j)[1]["target"] = "torch.ops.aten.no_such_op.default"; },
                 {"node 'linear'", "unknown op 'torch.ops.aten.no_such_op.default'"});
  expect_refused([&](json& j) { nodes(j)[1]["inputs"][0]["arg"] = tensor("nowhere"); },
                 {"node 'linear' argument 'input'", "undefined value 'nowhere'"});
  expect_refused([&](json& j) { nodes(j)[2]["outputs"][0] = tensor("linear"); },
                 {"node 'view' output 0", "'linear' is defined twice"});
  expect_refused(
      [&](json& j) {
        nodes(j)[3]["inputs"][1]["arg"] = {{"as_scalar_type", 99}};
      },
      {"node 'half' argument 'dtype'", "dtype code 99"});
  expect_refused(
      [&](json& j) {
        nodes(j)[1]["inputs"][2]["arg"] = {{"as_custom_obj", {{"name", "obj"}}}};
      },
      {"node 'linear' argument 'bias'", "argument kind 'as_custom_obj' is not supported"});
  expect_refused(
      [&](json& j) {
        nodes(j)[1]["inputs"][2]["arg"] = {{"as_int", 1}, {"as_none", nullptr}};
      },
      {"node 'linear' argument 'bias'", "single-key union"});
  expect_refused(
      [&](json& j) {
        nodes(j)[6]["inputs"][2]["arg"] = {{"as_float", "many"}};
      },
      {"node 'filled' argument 'value'", "expected a number"});
  expect_refused([&](json& j) { j["graph_module"]["graph"]["tensor_values"]["x"]["layout"] = 2; },
                 {"tensor_values.x", "only strided tensors"});
  expect_refused([&](json& j) { j["graph_module"]["signature"]["input_specs"].erase(0); },
                 {"input_specs has 4 entries for 5 graph inputs"});
  expect_refused([&](json& j) { j["graph_module"]["signature"]["input_specs"][0]["parameter"]["arg"]["name"] = "p_v"; },
                 {"signature.input_specs[0]", "names 'p_v' but graph input 0 is 'p_w'"});
  expect_refused(
      [&](json& j) {
        j["graph_module"]["signature"]["output_specs"][0] = {
            {"user_input_mutation", {{"arg", tensor("new_run")}, {"user_input_name", "b_run"}}}};
      },
      {"signature.output_specs[0]", "names 'b_run', which is not a user input"});
  expect_refused(
      [&](json& j) {
        j["graph_module"]["signature"]["output_specs"][1] = {{"gradient_to_parameter", {}}};
      },
      {"signature.output_specs[1]", "output kind 'gradient_to_parameter' is not supported"});
  expect_refused(
      [&](json& j) {
        j["graph_module"]["signature"]["input_specs"][4] = {{"token", {}}};
      },
      {"signature.input_specs[4]"});
  // Arguments against the op's schema (ir::check_arguments): a name the op
  // does not declare, a required argument left out, a tensor where the
  // schema wants an int, and no tensor where it wants one.
  expect_refused([&](json& j) { nodes(j)[1]["inputs"].push_back(arg("scale", n(2))); },
                 {"node 'linear' (aten.linear.default)", "argument 'scale' is not one the op declares",
                  "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"});
  expect_refused([&](json& j) { nodes(j)[1]["inputs"].erase(1); },
                 {"node 'linear'", "argument 'weight' (Tensor) is not given"});
  expect_refused([&](json& j) { nodes(j)[5]["inputs"][2]["arg"] = tensor("x"); },
                 {"node 'split'", "argument 'dim' is int, not a tensor"});
  expect_refused(
      [&](json& j) {
        nodes(j)[1]["inputs"][1]["arg"] = {{"as_string", "w"}};
      },
      {"node 'linear'", "argument 'weight' must be a tensor"});
}

}  // namespace
}  // namespace kiln::frontend
