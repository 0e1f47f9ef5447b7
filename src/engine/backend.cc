#include "engine/backend.h"

namespace kiln::engine {

void BackendRegistry::add(std::unique_ptr<Backend> backend) { backends_.push_back(std::move(backend)); }

const Backend* BackendRegistry::find(std::string_view name) const {
  for (const auto& b : backends_)
    if (b->name() == name) return b.get();
  return nullptr;
}

std::vector<std::string> BackendRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& b : backends_) out.emplace_back(b->name());
  return out;
}

namespace {

class NullBackend final : public Backend {
 public:
  NullBackend() {
    target_.backend = "null";
    target_.implements = [](ir::OpKind) { return false; };
  }
  std::string_view name() const override { return "null"; }
  const TargetInfo& target() const override { return target_; }
  Expected<std::vector<uint8_t>> build(Network, const BuildOptions&) const override {
    return unsupported("backend 'null' builds no engines");
  }
  Expected<EngineHandle> load(std::span<const uint8_t>, const WeightLookup&, std::string_view what) const override {
    return unsupported(std::string(what) + ": backend 'null' loads no engines");
  }
  Status execute(EngineHandle, std::span<const Tensor>, std::vector<Tensor>&, void*) const override {
    return unsupported("backend 'null' runs no engines");
  }
  void destroy(EngineHandle) const override {}

 private:
  TargetInfo target_;
};

}  // namespace

std::unique_ptr<Backend> make_null_backend() { return std::make_unique<NullBackend>(); }

}  // namespace kiln::engine
