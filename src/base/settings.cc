#include "kiln/settings.h"

#include <mutex>

namespace kiln {

namespace {

std::mutex& settings_mutex() {
  static std::mutex m;
  return m;
}

Settings& current() {
  static Settings s;
  return s;
}

}  // namespace

Settings settings() {
  std::lock_guard<std::mutex> lock(settings_mutex());
  return current();
}

void set_settings(Settings s) {
  std::lock_guard<std::mutex> lock(settings_mutex());
  current() = std::move(s);
}

}  // namespace kiln
