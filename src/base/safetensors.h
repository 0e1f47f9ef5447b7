// Parsing safetensors images held in memory; reading and writing files is
// the public kiln/safetensors.h.
#pragma once

#include <memory>
#include <string>

#include "kiln/safetensors.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln::base {

// Parses a safetensors image held in memory (read_safetensors on a mapped file).
//   bytes: the whole file; the tensors borrow it and keep it alive.
//   display_name: names the file in error messages.
Expected<SafetensorsFile> parse_safetensors(std::shared_ptr<Storage> bytes, const std::string& display_name);

}  // namespace kiln::base
