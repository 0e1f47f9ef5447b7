#include "runtime/engine_hot_set.h"

#include <cstdlib>
#include <cstring>

#include "base/sha256.h"

namespace kiln::runtime {

namespace {

bool same_weight(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  if (a.storage() == b.storage() && a.storage_offset() == b.storage_offset() && a.strides() == b.strides())
    return true;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == 0 || std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

size_t capacity_from_environment() {
  const char* v = std::getenv("KILN_HOT_ENGINES");
  if (!v || !*v) return 8;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n >= 0 ? static_cast<size_t>(n) : 8;
}

}  // namespace

EngineHotSet& EngineHotSet::instance() {
  static EngineHotSet* set = new EngineHotSet(capacity_from_environment());  // engines outlive static destruction order
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
  if (keep) {
    digest = hex(sha256(plan));
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->backend != backend.name() || it->plan_digest != digest) continue;
      bool match = true;
      for (const auto& [name, kept] : it->weights) {
        auto now = weights(name);
        if (!now || !same_weight(*now, kept)) {
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
    entries_.push_front({std::string(backend.name()), digest, std::move(asked), e});
    trim();
  }
  return e;
}

void EngineHotSet::trim() {
  while (entries_.size() > capacity_) entries_.pop_back();
  stats_.kept = entries_.size();
}

void EngineHotSet::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_ = capacity;
  trim();
}

EngineHotSet::Stats EngineHotSet::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s = stats_;
  s.kept = entries_.size();
  return s;
}

}  // namespace kiln::runtime
