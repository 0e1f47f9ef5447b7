// kiln generate MODEL --prompt-ids 1,2,3 --max-new-tokens N [--eos-id K] [--method M] [compile options]
//
// The decode step is method M, else the method named "decode", else the
// first. A method named "prefill" (of a program compiled from several
// exports) takes the prompt when it fits its token count.
// Greedy decoding (kiln::generate in kiln.h): the KV caches are buffers of the
// program and live in one session; on CUDA they, the logits and the tokens
// stay on the device.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "kiln/kiln.h"

namespace kiln::cli {

namespace {

Expected<std::vector<int64_t>> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 0)
      return invalid_argument("--prompt-ids: '" + item + "' is not a token id (a non-negative integer)");
    ids.push_back(v);
    start = comma + 1;
  }
  return ids;
}

Expected<int64_t> parse_count(const std::string& option, const std::string& text) {
  size_t used = 0;
  long long v = -1;
  try {
    v = std::stoll(text, &used);
  } catch (...) {
    used = 0;
  }
  if (text.empty() || used != text.size() || v < 0)
    return invalid_argument("--" + option + ": '" + text + "' is not a non-negative integer");
  return v;
}

}  // namespace

int run_generate(int argc, char** argv) {
  auto args =
      parse_args(argc, argv, 2, with({"prompt-ids", "max-new-tokens", "eos-id"}, kCompileValued), kCompileFlags);
  if (!args) return fail(args.status());
  if (args->positional.size() != 1 || !args->get("prompt-ids") || !args->get("max-new-tokens"))
    return fail(invalid_argument(
        "usage: kiln generate MODEL --prompt-ids 1,2,3 --max-new-tokens N [--eos-id K] [compile options]"));
  auto prompt = parse_ids(*args->get("prompt-ids"));
  if (!prompt) return fail(prompt.status());
  auto max_new = parse_count("max-new-tokens", *args->get("max-new-tokens"));
  if (!max_new) return fail(max_new.status());
  std::optional<int64_t> eos;
  if (auto e = args->get("eos-id")) {
    auto v = parse_count("eos-id", *e);
    if (!v) return fail(v.status());
    eos = *v;
  }
  auto options = load_options(*args, false);
  if (!options) return fail(options.status());
  auto program = load_program(args->positional[0], *args, *options);
  if (!program) return fail(program.status());
  Session session(*program);  // one state for every method
  GenerateOptions go;
  if (auto m = args->get("method")) go.method = *m;
  go.max_new_tokens = *max_new;
  go.eos_id = eos;
  auto g = generate(session, *prompt, go);
  if (!g) return fail(g.status());
  std::string list;
  for (int64_t t : g->tokens) list += (list.empty() ? "" : ",") + std::to_string(t);
  std::printf("tokens: %s\n", list.c_str());
  const size_t steps = g->token_ms.size();  // decode calls after the prompt
  std::printf("prompt: %zu tokens in %.2f ms (method %s); decode: %zu steps in %.2f ms", prompt->size(), g->prompt_ms,
              g->prompt_method.c_str(), steps, g->decode_ms);
  if (steps > 0) {
    std::vector<double> ms = g->token_ms;
    std::sort(ms.begin(), ms.end());
    std::printf(", %.2f ms per token (median %.3f ms, slowest %.3f ms), %.1f tokens/s",
                g->decode_ms / static_cast<double>(steps), ms[ms.size() / 2], ms.back(),
                1000.0 * static_cast<double>(steps) / g->decode_ms);
  }
  if (g->on_device && !g->host_ms.empty()) {
    std::vector<double> host = g->host_ms;
    std::sort(host.begin(), host.end());
    std::printf(" (tokens chosen on the device; the host enqueues a step in %.3f ms)", host[host.size() / 2]);
  }
  std::printf("\n");
  return kExitOk;
}

}  // namespace kiln::cli
