#include "runtime/engine_hot_set.h"

#include <cstdlib>
#include <cstring>

#include "base/sha256.h"
#include "kiln/settings.h"

namespace kiln::runtime {

EngineHotSet& EngineHotSet::instance() {
  // Never destroyed: kept engines are not torn down in static destruction order.
  static EngineHotSet* set = [] {
    const Settings s = settings();
    return new EngineHotSet(static_cast<size_t>(s.hot_engines), s.hot_engine_mb << 20);
  }();
  return *set;
}

Expected<std::shared_ptr<engine::Engine>> EngineHotSet::load(const engine::Backend& backend,
                                                              std::span<const uint8_t> plan,
                                                              const engine::WeightLookup& weights,
                                                              std::string_view what, bool* reused) {
  *reused = false;
  std::lock_guard<std::mutex> lock(mutex_);
  const bool keep = capacity_ > 0 && backend.loads_onto_device();
  std::string digest;
  const std::string settings = keep ? backend.load_settings() : "";
  if (keep) {
    digest = hex(sha256(plan));
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->backend != backend.name() || it->plan_digest != digest || it->settings != settings) continue;
      bool match = true;
      for (const auto& [name, kept] : it->weights) {
        auto now = weights(name);
        if (!now || !now->same_bytes(kept)) {
          match = false;
          break;
        }
      }
      if (!match) continue;
      entries_.splice(entries_.begin(), entries_, it);
      ++stats_.reused;
      *reused = true;
      return entries_.front().engine;
    }
  }
  // Records every weight the backend asks for while it loads.
  std::vector<std::pair<std::string, Tensor>> asked;
  engine::WeightLookup recording = [&](const std::string& name) -> Expected<Tensor> {
    auto t = weights(name);
    if (t) asked.emplace_back(name, *t);
    return t;
  };
  KILN_ASSIGN_OR_RETURN(engine::EngineHandle h, backend.load(plan, recording, what));
  auto e = std::make_shared<engine::Engine>(&backend, h);
  ++stats_.loaded;
  if (keep) {
    uint64_t bytes = 0;
    for (const auto& [name, t] : asked) bytes += t.nbytes();
    entries_.push_front({std::string(backend.name()), settings, digest, bytes, std::move(asked), e});
    trim();
  }
  return e;
}

void EngineHotSet::trim() {
  uint64_t bytes = 0;
  for (const Entry& e : entries_) bytes += e.bytes;
  while (!entries_.empty() && (entries_.size() > capacity_ || bytes > max_bytes_)) {
    bytes -= entries_.back().bytes;
    entries_.pop_back();
  }
}

void EngineHotSet::set_capacity(size_t capacity, uint64_t max_weight_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_ = capacity;
  max_bytes_ = max_weight_bytes;
  trim();
}

EngineHotSet::Stats EngineHotSet::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s = stats_;
  s.kept = entries_.size();
  for (const Entry& e : entries_) s.kept_bytes += e.bytes;
  return s;
}

}  // namespace kiln::runtime
