// kiln::generate: greedy decoding with a decoder step (kiln.h), on the host
// or, for a session whose state lies on a device, wholly on the device.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <deque>

#include "kiln/llm.h"
#include "runtime/device_copy.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
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
    return invalid_argument("generating needs " + want + "; " + p.source() + " takes " + std::to_string(in.size()) +
                            " inputs of another form");
  if (p.outputs().empty() || p.outputs()[0].dims.size() != 3)
    return invalid_argument("generating needs " + want + " whose first output is the logits [1, T, vocab]");
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
      "generating needs a step whose token count is a number or a dynamic dimension; the token "
      "ids of " +
      p.source() + " are [1, " + t + "]");
}

// The positions the KV caches hold: dim 2 of the 4-d buffers ([batch, heads, max_seq, head_dim]).
int64_t cache_capacity(const Program& p) {
  int64_t cap = -1;
  for (const TensorSpec& b : p.buffers())
    if (b.dims.size() == 4) {
      const std::string& d = b.dims[2];
      if (d.empty() || d.find_first_not_of("0123456789") != std::string::npos || d.size() > 15) continue;
      const int64_t n = std::stoll(d);
      cap = cap < 0 ? n : std::min(cap, n);
    }
  return cap;
}

// The first index of the largest of n values (each converted to float by
// `at`), a NaN above any number, as torch.argmax: a vectorizable pass for the
// maximum, then the first index holding it.
template <typename At>
int64_t first_argmax(int64_t n, At at) {
  for (int64_t v = 0; v < n; ++v)
    if (at(v) != at(v)) return v;  // NaN (rare: a quick scan first would cost as much)
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

// argmax over the last row of host logits [1, T, vocab].
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

// A [1, n] (or [n]) view of elements [from, from + n) of the 1-d tensor `t`.
Tensor window(const Tensor& t, int64_t from, int64_t n, bool row) {
  return row ? t.as_strided({1, n}, {n, 1}, t.storage_offset() + from)
             : t.as_strided({n}, {1}, t.storage_offset() + from);
}

Tensor ids_tensor(const std::vector<int64_t>& ids, int64_t from, int64_t n, bool positions) {
  Tensor t = Tensor::zeros(DType::Int64, {n});
  for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = positions ? from + i : ids[static_cast<size_t>(from + i)];
  return positions ? t : t.reshape({1, n});
}

}  // namespace

Expected<Generation> generate(Session& session, const std::vector<int64_t>& prompt, const GenerateOptions& options) {
  const Program& program = session.program();
  std::string decode = options.method;
  if (decode.empty()) decode = program.method("decode") ? "decode" : program.method_names()[0];
  const Program* dp = program.method(decode);
  if (dp == nullptr) return invalid_argument(program.source() + " has no method '" + decode + "'");
  if (prompt.empty()) return invalid_argument("the prompt has no tokens");
  for (int64_t id : prompt)
    if (id < 0) return invalid_argument("the prompt holds a negative token id (" + std::to_string(id) + ")");
  if (options.max_new_tokens < 0) return invalid_argument("max_new_tokens is negative");
  KILN_ASSIGN_OR_RETURN(StepShape shape, step_shape(*dp));
  if (!shape.dynamic && shape.max_tokens != 1)
    return invalid_argument("the decode step (method '" + decode + "') takes " + std::to_string(shape.max_tokens) +
                            " tokens per call; it must take one");
  Generation g;
  // The prompt goes through "prefill" when that method takes it whole.
  g.prompt_method = decode;
  int64_t chunk = shape.dynamic ? shape.max_tokens : 1;
  const int64_t p = static_cast<int64_t>(prompt.size());
  if (const Program* pp = program.method("prefill"); pp && pp != dp) {
    Expected<StepShape> prefill_shape = step_shape(*pp);
    if (!prefill_shape) return prefill_shape.status().with_context("method 'prefill'");
    const StepShape ps = *prefill_shape;
    if (ps.dynamic ? p <= ps.max_tokens : p == ps.max_tokens) {
      g.prompt_method = "prefill";
      chunk = p;
    }
  }
  chunk = std::max<int64_t>(1, chunk);
  const int64_t capacity = cache_capacity(*dp);
  const int64_t needed = p + options.max_new_tokens - (options.max_new_tokens > 0 ? 1 : 0);
  if (capacity >= 0 && needed > capacity)
    return invalid_argument("the program's KV caches hold " + std::to_string(capacity) + " positions; " +
                            std::to_string(p) + " prompt tokens and " + std::to_string(options.max_new_tokens) +
                            " new tokens need " + std::to_string(needed));
  const int64_t total = p + std::max<int64_t>(options.max_new_tokens, 1);
  auto emit = [&](int64_t token) {
    g.tokens.push_back(token);
    if (options.on_token) options.on_token(token);
    return options.eos_id && token == *options.eos_id;
  };

  const engine::DeviceMemory* device = runtime::device_memory_of(session.state_device());
  const auto t0 = Clock::now();
  if (device == nullptr) {
    // On the host: logits come back, the argmax is taken here.
    std::vector<int64_t> tokens = prompt;
    int64_t next = -1;
    for (int64_t at = 0; at < p; at += chunk) {
      const int64_t n = std::min(chunk, p - at);
      auto out = session.run(g.prompt_method, {ids_tensor(tokens, at, n, false), ids_tensor(tokens, at, n, true)});
      if (!out)
        return out.status().with_context("prompt tokens " + std::to_string(at) + ".." + std::to_string(at + n - 1));
      next = last_row_argmax((*out)[0]);
    }
    auto last = Clock::now();
    g.prompt_ms = ms_between(t0, last);
    for (int64_t k = 0; k < options.max_new_tokens; ++k) {
      tokens.push_back(next);
      if (emit(next) || k + 1 == options.max_new_tokens) break;
      const int64_t at = static_cast<int64_t>(tokens.size()) - 1;
      const auto started = Clock::now();
      auto out = session.run(decode, {ids_tensor(tokens, at, 1, false), ids_tensor(tokens, at, 1, true)});
      if (!out) return out.status().with_context("generated token " + std::to_string(k + 1));
      next = last_row_argmax((*out)[0]);
      const auto now = Clock::now();
      g.host_ms.push_back(ms_between(started, now));
      g.token_ms.push_back(ms_between(last, now));
      last = now;
    }
    g.decode_ms = ms_between(t0, last) - g.prompt_ms;
    return g;
  }

  // On the device: every token id in one device tensor (the prompt, then each
  // new token as its argmax writes it), every position in another.
  g.on_device = true;
  void* stream = device->default_stream();
  Tensor host_ids = Tensor::zeros(DType::Int64, {total});
  Tensor host_positions = Tensor::zeros(DType::Int64, {total});
  for (int64_t i = 0; i < total; ++i) {
    host_ids.data<int64_t>()[i] = i < p ? prompt[static_cast<size_t>(i)] : 0;
    host_positions.data<int64_t>()[i] = i;
  }
  KILN_ASSIGN_OR_RETURN(Tensor ids, device->empty(DType::Int64, {total}));
  KILN_ASSIGN_OR_RETURN(Tensor positions, device->empty(DType::Int64, {total}));
  KILN_TRY(device->copy(ids, host_ids));
  KILN_TRY(device->copy(positions, host_positions));
  // Runs the step on ids[at, at + n) and, when `pick`, writes the argmax of
  // its last logits row into ids[at + n] (a chunk of the prompt before its
  // last leaves the prompt's own ids there).
  auto step = [&](const std::string& method, int64_t at, int64_t n, bool pick) -> Status {
    RunOptions run;
    run.stream = stream;
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out,
                          session.run(method, {window(ids, at, n, true), window(positions, at, n, false)}, run));
    if (!pick) return Status::ok();
    const Tensor& logits = out[0];
    if (logits.is_cpu() || !logits.is_contiguous())
      return internal_error("the logits of method '" + method + "' did not stay on the device");
    const int64_t vocab = logits.size(2);
    const Tensor row =
        logits.as_strided({1, vocab}, {vocab, 1}, logits.storage_offset() + (logits.size(1) - 1) * vocab);
    return device->argmax_rows(row, window(ids, at + n, 1, false), stream);
  };
  // The host learns token k from a page-locked copy, once its fence passes.
  KILN_ASSIGN_OR_RETURN(Tensor seen, device->empty_pinned(DType::Int64, {total}));
  std::deque<std::unique_ptr<engine::Fence>> fences;
  auto publish = [&](int64_t index) -> Status {
    KILN_TRY(device->copy_to_host_async(window(seen, index, 1, false), window(ids, index, 1, false), stream));
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<engine::Fence> f, device->fence(stream));
    fences.push_back(std::move(f));
    return Status::ok();
  };
  for (int64_t at = 0; at < p; at += chunk) {
    const int64_t n = std::min(chunk, p - at);
    KILN_TRY(step(g.prompt_method, at, n, at + n == p)
                 .with_context("prompt tokens " + std::to_string(at) + ".." + std::to_string(at + n - 1)));
  }
  if (options.max_new_tokens == 0) {
    KILN_TRY(session.synchronize());
    g.prompt_ms = ms_between(t0, Clock::now());
    return g;
  }
  KILN_TRY(publish(p));
  // Token k lies at ids[p + k]; step k + 1 is enqueued before the host waits for token k.
  Clock::time_point last;
  for (int64_t k = 0; k < options.max_new_tokens; ++k) {
    if (k + 1 < options.max_new_tokens) {
      const auto enqueue = Clock::now();
      KILN_TRY(step(decode, p + k, 1, true).with_context("generated token " + std::to_string(k + 1)));
      KILN_TRY(publish(p + k + 1));
      g.host_ms.push_back(ms_between(enqueue, Clock::now()));
    }
    Status waited = fences.front()->wait();
    fences.pop_front();
    if (!waited) return waited.with_context("generated token " + std::to_string(k));
    const auto now = Clock::now();
    if (k == 0) {
      g.prompt_ms = ms_between(t0, now);
    } else {
      g.token_ms.push_back(ms_between(last, now));
    }
    last = now;
    if (emit(seen.data<int64_t>()[p + k])) break;
  }
  // A device-side error of any step (an id out of the vocabulary) is reported here.
  KILN_TRY(session.synchronize());
  g.decode_ms = ms_between(t0, last) - g.prompt_ms;
  return g;
}

}  // namespace kiln
