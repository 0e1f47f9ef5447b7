// Pieces of error messages that several file readers write the same way.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

// "0x1f": a number in lowercase hexadecimal.
std::string hex(uint64_t v);

// `bytes` safe to quote in a message: anything outside printable ASCII, and
// the quote and backslash, are written as \xNN.
std::string printable(std::string_view bytes);

}  // namespace kiln
