// Decoding with kiln: greedy generation over a session of a decoder program.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/runtime.h"

namespace kiln {

// Greedy decoding with a decoder step exported the way transformers'
// ExecuTorch recipe does it (TorchExportableModuleWithStaticCache): inputs
// token ids int64 [1, T] and cache positions int64 [T], output 0 the logits
// [1, T, vocab]; the KV caches are buffers of the program, kept by the
// session. The decode step is GenerateOptions::method, else the method named
// "decode", else the first; it takes one token per call (T is 1, or a dynamic
// dimension). A method named "prefill" takes the prompt in one call when it
// fits its token count; otherwise the decode step takes it in chunks as
// large as it allows. Each new token is the argmax of the last logits row
// (the first maximum, as torch.argmax).
//   On a session whose state lies on a device (a CUDA program), the tokens
// never leave it: the argmax runs there, each step's token is the next
// step's input in device memory, and the next step is enqueued before the
// host reads the token before it, so the device never waits for the host.
// When decoding stops at `eos_id`, the step after it has run too (its token
// is discarded; the session's caches hold one position more).
struct GenerateOptions {
  std::string method;  // the decode step (empty: "decode", else the first method)
  int64_t max_new_tokens = 0;
  std::optional<int64_t> eos_id;
  std::function<void(int64_t)> on_token;  // each new token, as the host learns it
};
struct Generation {
  std::vector<int64_t> tokens;  // the new tokens, the eos token included
  std::string prompt_method;
  double prompt_ms = 0;          // the prompt's calls up to its last logits (wall clock)
  double decode_ms = 0;          // from then until the last new token is known
  std::vector<double> token_ms;  // per decode step: the time between consecutive new tokens
  std::vector<double> host_ms;   // per decode step: the host's time to run or enqueue it (no wait)
  bool on_device = false;        // tokens chosen on the device
};
Expected<Generation> generate(Session& session, const std::vector<int64_t>& prompt, const GenerateOptions& options);

}  // namespace kiln
