// An application that runs a compiled kiln program, built against the
// installed package with the runtime alone (find_package(kiln),
// kiln::runtime): it loads MODEL.kiln, runs it on the inputs of IO (input.0,
// input.1, ...) and compares its outputs with IO's output.0, output.1, ...
//
//   run_program MODEL.kiln IO.safetensors
//
// Prints one line per output and PASS or FAIL last; exit code 0 on PASS, 1 on
// FAIL, 2 on an error.
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/check.h"
#include "kiln/runtime.h"
#include "kiln/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: run_program MODEL.kiln IO.safetensors\n");
    return 2;
  }
  auto program = kiln::Program::load(argv[1]);
  if (!program) {
    std::fprintf(stderr, "error: %s\n", program.status().message().c_str());
    return 2;
  }
  auto io = kiln::read_safetensors(argv[2]);
  if (!io) {
    std::fprintf(stderr, "error: %s\n", io.status().message().c_str());
    return 2;
  }
  std::vector<kiln::Tensor> inputs;
  for (size_t i = 0; i < (*program)->inputs().size(); ++i) {
    const kiln::Tensor* t = io->find("input." + std::to_string(i));
    if (!t) {
      std::fprintf(stderr, "error: %s has no input.%zu\n", argv[2], i);
      return 2;
    }
    inputs.push_back(*t);
  }
  kiln::Session session(*program);
  auto outputs = session.run(inputs);
  if (!outputs) {
    std::fprintf(stderr, "error: %s\n", outputs.status().message().c_str());
    return 2;
  }
  bool pass = !outputs->empty();
  for (size_t j = 0; j < outputs->size(); ++j) {
    const std::string name = "output." + std::to_string(j);
    const kiln::Tensor* want = io->find(name);
    if (!want) {
      std::fprintf(stderr, "error: %s has no %s\n", argv[2], name.c_str());
      return 2;
    }
    const kiln::TensorComparison c = kiln::compare_tensors(name, (*outputs)[j], *want, kiln::Tolerance{});
    std::printf("%s %s: max abs err %.3g%s\n", name.c_str(), c.got_type.c_str(), c.max_abs,
                c.pass ? "" : (" " + c.problem).c_str());
    pass = pass && c.pass;
  }
  std::printf("%s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
