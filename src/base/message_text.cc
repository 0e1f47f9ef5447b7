#include "base/message_text.h"

namespace kiln {

namespace {
constexpr char kDigits[] = "0123456789abcdef";
}

std::string hex(uint64_t v) {
  std::string s;
  do {
    s.insert(s.begin(), kDigits[v & 0xF]);
    v >>= 4;
  } while (v != 0);
  return "0x" + s;
}

std::string printable(std::string_view bytes) {
  std::string s;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      s += static_cast<char>(c);
    } else {
      s += "\\x";
      s += kDigits[c >> 4];
      s += kDigits[c & 0xF];
    }
  }
  return s;
}

}  // namespace kiln
