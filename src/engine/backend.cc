#include "engine/backend.h"

namespace kiln::engine {

Shape RowPadding::input_sizes(const RowPadding* padding, size_t i, Shape sizes) {
  if (padding && i < padding->inputs.size() && padding->inputs[i] && !sizes.empty()) sizes[0] = padding->rows;
  return sizes;
}

Shape RowPadding::output_sizes(const RowPadding* padding, size_t o, Shape sizes) {
  if (padding && o < padding->output_factors.size() && padding->output_factors[o] > 0 && !sizes.empty())
    sizes[0] = padding->rows * padding->output_factors[o];
  return sizes;
}

Status RowPadding::check(std::span<const Shape> engine_inputs, std::span<const Shape> engine_outputs,
                         std::string_view what) const {
  const std::string w(what);
  if (inputs.size() != engine_inputs.size() || output_factors.size() != engine_outputs.size())
    return internal_error(w + ": padding names " + std::to_string(inputs.size()) + " inputs and " +
                          std::to_string(output_factors.size()) + " outputs; the engine has " +
                          std::to_string(engine_inputs.size()) + " and " + std::to_string(engine_outputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i] && (engine_inputs[i].empty() || rows < 1 || rows > engine_inputs[i][0]))
      return invalid_argument(w + ": input " + std::to_string(i) + " cannot take " + std::to_string(rows) +
                              " rows padded");
  for (size_t o = 0; o < output_factors.size(); ++o)
    if (output_factors[o] > 0 && (engine_outputs[o].empty() || rows * output_factors[o] > engine_outputs[o][0]))
      return invalid_argument(w + ": output " + std::to_string(o) + " has fewer than " +
                              std::to_string(rows * output_factors[o]) + " rows");
  return Status::ok();
}

Tensor pad_rows(const Tensor& t, int64_t size) {
  const int64_t rows = t.sizes().at(0);
  Shape sizes = t.sizes();
  sizes[0] = size;
  Tensor padded = Tensor::empty(t.dtype(), sizes);
  padded.as_strided(t.sizes(), padded.strides(), 0).copy_from(t);
  if (size > rows) {
    // The last row, read again for every row past the caller's (stride 0).
    Shape extra = t.sizes(), repeat = t.strides();
    extra[0] = size - rows;
    repeat[0] = 0;
    const Tensor last = t.as_strided(extra, repeat, t.storage_offset() + (rows - 1) * t.strides()[0]);
    padded.as_strided(extra, padded.strides(), rows * padded.strides()[0]).copy_from(last);
  }
  return padded;
}

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
  Status execute(const ExecuteContext&, EngineHandle, std::span<const Tensor>, std::vector<Tensor>&) const override {
    return unsupported("backend 'null' runs no engines");
  }
  void destroy(EngineHandle) const override {}

 private:
  TargetInfo target_;
};

}  // namespace

std::unique_ptr<Backend> make_null_backend() { return std::make_unique<NullBackend>(); }

}  // namespace kiln::engine
