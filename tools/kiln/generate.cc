// kiln generate MODEL --prompt-ids 1,2,3 --max-new-tokens N [--eos-id K] [--method M]
//               [--bind-buffers] [--save-buffers FILE] [compile options]
//
// --bind-buffers keeps every buffer (the KV caches) in memory the caller
// owns, where the session keeps its state (device memory for a CUDA
// program), as an application holding its caches does; --save-buffers writes
// each buffer's value after the last step, read from that memory, under
// final.buffer.<name> for every name the program gives it.
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
#include <map>
#include <string>
#include <vector>

#include "cli.h"
#include "kiln/device.h"
#include "kiln/kiln.h"
#include "kiln/safetensors.h"

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
      parse_args(argc, argv, 2, with({"prompt-ids", "max-new-tokens", "eos-id", "save-buffers"}, kCompileValued),
                 with({"bind-buffers"}, kCompileFlags));
  if (!args) return fail(args.status());
  if (args->positional.size() != 1 || !args->get("prompt-ids") || !args->get("max-new-tokens"))
    return fail(invalid_argument(
        "usage: kiln generate MODEL --prompt-ids 1,2,3 --max-new-tokens N [--eos-id K] [--bind-buffers] "
        "[--save-buffers FILE] [compile options]"));
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
  std::map<std::string, Tensor> bound;
  if (args->flag("bind-buffers")) {
    for (const TensorSpec& b : (*program)->buffers()) {
      auto initial = session.buffer(b.name);
      if (!initial) return fail(initial.status());
      auto memory = empty_on(initial->device(), initial->dtype(), initial->sizes());
      if (!memory) return fail(memory.status());
      if (Status s = copy_tensor(*memory, *initial); !s) return fail(s);
      if (Status s = session.bind_buffer(b.name, *memory); !s) return fail(s);
      bound.emplace(b.name, *memory);
    }
  }
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
  if (auto path = args->get("save-buffers")) {
    if (Status s = session.synchronize(); !s) return fail(s);
    std::vector<std::pair<std::string, Tensor>> values;
    for (const TensorSpec& b : (*program)->buffers()) {
      auto it = bound.find(b.name);
      auto value = it != bound.end() ? Expected<Tensor>(it->second) : session.buffer(b.name);
      if (!value) return fail(value.status());
      auto host = to_host(*value);  // the caller's explicit copy of its memory
      if (!host) return fail(host.status());
      for (const std::string& name : (*program)->names_of(b.name)) values.emplace_back("final.buffer." + name, *host);
    }
    if (Status s = write_safetensors(*path, values); !s) return fail(s);
    std::printf("buffers: %zu written to %s%s\n", values.size(), path->c_str(),
                bound.empty() ? "" : " (from the memory bound to them)");
  }
  return kExitOk;
}

}  // namespace kiln::cli
