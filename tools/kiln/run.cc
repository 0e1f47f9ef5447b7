// kiln run MODEL --inputs IN.safetensors --outputs OUT.safetensors
#include <iostream>

#include "cli.h"
#include "kiln/kiln.h"
#include "kiln/safetensors.h"

namespace kiln::cli {

int run_run(int argc, char** argv) {
  auto args = parse_args(argc, argv, 2, with({"inputs", "outputs"}, kCompileValued), kCompileFlags);
  if (!args) return fail(args.status());
  if (args->positional.size() != 1 || !args->get("inputs") || !args->get("outputs"))
    return fail(invalid_argument("usage: kiln run MODEL.pt2 --inputs IN.safetensors --outputs OUT.safetensors"));
  auto options = load_options(*args, false);
  if (!options) return fail(options.status());
  auto program = load_model(args->positional[0], *args, *options);
  if (!program) return fail(program.status());
  std::string in_path = *args->get("inputs");
  auto io = read_safetensors(in_path);
  if (!io) return fail(io.status());
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < (*program)->inputs().size(); ++i) {
    const Tensor* t = io->find("input." + std::to_string(i));
    if (!t)
      return fail(not_found(in_path + ": no tensor 'input." + std::to_string(i) + "' for input '" +
                            (*program)->inputs()[i].name + "'"));
    inputs.push_back(*t);
  }
  Session session(*program);
  auto outputs = session.run(inputs);
  if (!outputs) return fail(outputs.status());
  std::vector<std::pair<std::string, Tensor>> named;
  for (size_t j = 0; j < outputs->size(); ++j) named.emplace_back("output." + std::to_string(j), (*outputs)[j]);
  if (Status s = write_safetensors(*args->get("outputs"), named); !s) return fail(s);
  std::cout << "wrote " << named.size() << " output" << (named.size() == 1 ? "" : "s") << " to "
            << *args->get("outputs") << "\n";
  return kExitOk;
}

}  // namespace kiln::cli
