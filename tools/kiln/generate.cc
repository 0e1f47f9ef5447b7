// kiln generate MODEL --prompt-ids 1,2,3 --max-new-tokens N [--eos-id K] [--method M] [compile options]
//
// The decode step is method M, else the method named "decode", else the
// first. A method named "prefill" (of a program compiled from several
// exports) takes the prompt when it fits its token count.
// Greedy decoding with a decoder step exported the way transformers' ExecuTorch
// recipe does it (TorchExportableModuleWithStaticCache): inputs token ids
// int64 [1, T] and cache positions int64 [T], output 0 the logits [1, T, vocab];
// the KV caches are buffers of the program and live in one session. A step
// whose T is a dynamic dimension takes the whole prompt in one call; a static
// T of 1 takes it token by token. Each new token is the argmax of the last
// logits row (the first maximum, as torch.argmax).
#include <algorithm>
#include <bit>
#include <chrono>
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

// The step's shape: how many tokens one call takes (1, or up to `max_tokens` when dynamic).
struct StepShape {
  bool dynamic = false;
  int64_t max_tokens = 1;
};

Expected<StepShape> step_shape(const Program& p) {
  const auto& in = p.inputs();
  const std::string want =
      "a decoder step with inputs token ids int64 [1, T] and cache positions int64 [T] (transformers' "
      "TorchExportableModuleWithStaticCache)";
  if (in.size() != 2 || in[0].dtype != DType::Int64 || in[1].dtype != DType::Int64 || in[0].dims.size() != 2 ||
      in[1].dims.size() != 1 || in[0].dims[0] != "1" || in[0].dims[1] != in[1].dims[0])
    return invalid_argument("kiln generate needs " + want + "; " + p.source() + " takes " + std::to_string(in.size()) +
                            " inputs of another form");
  if (p.outputs().empty() || p.outputs()[0].dims.size() != 3)
    return invalid_argument("kiln generate needs " + want + " whose first output is the logits [1, T, vocab]");
  StepShape s;
  const std::string& t = in[0].dims[1];
  if (!t.empty() && t.find_first_not_of("0123456789") == std::string::npos) {
    s.max_tokens = std::stoll(t);  // static: exactly this many tokens per call
    return s;
  }
  for (const SymbolInfo& sym : p.symbols())
    if (sym.name == t) {
      s.dynamic = true;
      s.max_tokens = sym.max;
      return s;
    }
  return invalid_argument(
      "kiln generate needs a step whose token count is a number or a dynamic dimension; the token ids of " +
      p.source() + " are [1, " + t + "]");
}

// The positions the KV caches hold: dim 2 of the 4-d buffers ([batch, heads, max_seq, head_dim]).
int64_t cache_capacity(const Program& p) {
  int64_t cap = -1;
  for (const TensorSpec& b : p.buffers())
    if (b.dims.size() == 4) {
      try {
        const int64_t n = std::stoll(b.dims[2]);
        cap = cap < 0 ? n : std::min(cap, n);
      } catch (...) {
      }
    }
  return cap;
}

Tensor ids_tensor(const std::vector<int64_t>& ids, size_t from, size_t count, bool positions) {
  Tensor t = positions ? Tensor::zeros(DType::Int64, {static_cast<int64_t>(count)})
                       : Tensor::zeros(DType::Int64, {1, static_cast<int64_t>(count)});
  for (size_t i = 0; i < count; ++i) t.data<int64_t>()[i] = positions ? static_cast<int64_t>(from + i) : ids[from + i];
  return t;
}

// The first index of the largest of n values (each converted to float by
// `at`): a vectorizable pass for the maximum, then the first index holding it
// (NaN never wins, as with `>`).
template <typename At>
int64_t first_argmax(int64_t n, At at) {
  // Eight running maxima, so that the pass is not one long dependency chain.
  float lane[8];
  for (float& l : lane) l = at(0);
  int64_t v = 0;
  for (; v + 8 <= n; v += 8)
    for (int j = 0; j < 8; ++j) lane[j] = std::max(lane[j], at(v + j));
  float best = lane[0];
  for (int j = 1; j < 8; ++j) best = std::max(best, lane[j]);
  for (; v < n; ++v) best = std::max(best, at(v));
  for (v = 0; v < n; ++v)
    if (at(v) == best) return v;
  return 0;
}

// argmax over the last row of logits [1, T, vocab]: the first maximum. A
// vocabulary of 128K is scanned in tens of microseconds (a decode step of a
// 1B model takes about a millisecond).
int64_t last_row_argmax(const Tensor& logits) {
  const int64_t vocab = logits.size(2);
  const Tensor all = logits.contiguous();
  const Tensor row = all.as_strided({vocab}, {1}, all.storage_offset() + (logits.size(1) - 1) * vocab);
  if (row.dtype() == DType::BFloat16) {
    const auto* x = static_cast<const uint16_t*>(row.raw_data());
    return first_argmax(vocab, [x](int64_t i) { return std::bit_cast<float>(static_cast<uint32_t>(x[i]) << 16); });
  }
  const Tensor f = row.to(DType::Float32);
  const float* x = f.data<float>();
  return first_argmax(vocab, [x](int64_t i) { return x[i]; });
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
  std::string decode = (*program)->method_names()[0];
  if (auto m = args->get("method")) {
    decode = *m;
  } else if ((*program)->method("decode")) {
    decode = "decode";
  }
  const Program* dp = (*program)->method(decode);
  if (dp == nullptr) return fail(invalid_argument(args->positional[0] + " has no method '" + decode + "'"));
  const Program& p = *dp;
  auto shape = step_shape(p);
  if (!shape) return fail(shape.status());
  if (!shape->dynamic && shape->max_tokens != 1)
    return fail(invalid_argument("the decode step (method '" + decode + "') takes " +
                                 std::to_string(shape->max_tokens) + " tokens per call; it must take one"));
  // The prompt goes through "prefill" when that method takes it whole.
  std::string prompt_method = decode;
  StepShape prompt_shape = *shape;
  prompt_shape.max_tokens = shape->dynamic ? shape->max_tokens : 1;
  if (const Program* pp = (*program)->method("prefill"); pp && pp != dp) {
    auto ps = step_shape(*pp);
    if (!ps) return fail(ps.status().with_context("method 'prefill'"));
    const bool fits = ps->dynamic ? static_cast<int64_t>(prompt->size()) <= ps->max_tokens
                                  : static_cast<int64_t>(prompt->size()) == ps->max_tokens;
    if (fits) {
      prompt_method = "prefill";
      prompt_shape = *ps;
      prompt_shape.max_tokens = static_cast<int64_t>(prompt->size());
    }
  }
  const int64_t capacity = cache_capacity(p);
  const int64_t needed = static_cast<int64_t>(prompt->size()) + *max_new - (*max_new > 0 ? 1 : 0);
  if (capacity >= 0 && needed > capacity)
    return fail(invalid_argument("the program's KV caches hold " + std::to_string(capacity) + " positions; " +
                                 std::to_string(prompt->size()) + " prompt tokens and " + std::to_string(*max_new) +
                                 " new tokens need " + std::to_string(needed)));

  Session session(*program);  // one state for every method
  std::vector<int64_t> tokens = *prompt;
  int64_t next = -1;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  // The prompt: in chunks as large as the step takes.
  for (size_t at = 0; at < prompt->size();) {
    const size_t n =
        std::min<size_t>(prompt->size() - at, static_cast<size_t>(std::max<int64_t>(1, prompt_shape.max_tokens)));
    auto out = session.run(prompt_method, {ids_tensor(tokens, at, n, false), ids_tensor(tokens, at, n, true)});
    if (!out)
      return fail(out.status().with_context("prompt tokens " + std::to_string(at) + ".." + std::to_string(at + n - 1)));
    next = last_row_argmax((*out)[0]);
    at += n;
  }
  const auto t1 = Clock::now();
  std::vector<int64_t> generated;
  std::vector<double> step_ms;  // each decode step: the call and the argmax
  for (int64_t k = 0; k < *max_new; ++k) {
    generated.push_back(next);
    tokens.push_back(next);
    if ((eos && next == *eos) || k + 1 == *max_new) break;
    const auto s = Clock::now();
    auto out = session.run(
        decode, {ids_tensor(tokens, tokens.size() - 1, 1, false), ids_tensor(tokens, tokens.size() - 1, 1, true)});
    if (!out) return fail(out.status().with_context("generated token " + std::to_string(k + 1)));
    next = last_row_argmax((*out)[0]);
    step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count());
  }
  const auto t2 = Clock::now();
  std::string list;
  for (int64_t t : generated) list += (list.empty() ? "" : ",") + std::to_string(t);
  std::printf("tokens: %s\n", list.c_str());
  const double prompt_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const double decode_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
  const size_t steps = generated.empty() ? 0 : generated.size() - 1;  // decode calls after the prompt
  std::printf("prompt: %zu tokens in %.2f ms (method %s); decode: %zu steps in %.2f ms", prompt->size(), prompt_ms,
              prompt_method.c_str(), steps, decode_ms);
  if (steps > 0) {
    std::sort(step_ms.begin(), step_ms.end());
    std::printf(", %.2f ms per token (median %.3f ms, slowest %.3f ms), %.1f tokens/s",
                decode_ms / static_cast<double>(steps), step_ms[step_ms.size() / 2], step_ms.back(),
                1000.0 * static_cast<double>(steps) / decode_ms);
  }
  std::printf("\n");
  return kExitOk;
}

}  // namespace kiln::cli
