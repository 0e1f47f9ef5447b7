#include "runtime/device_copy.h"

#include "kiln/device.h"
#include "kiln/runtime.h"
#include "program/compiled_program.h"

namespace kiln {

namespace runtime {

const engine::DeviceMemory* device_memory_of(Device d) {
  if (d.is_cpu()) return nullptr;
  const engine::BackendRegistry& backends = program::builtin_backends();
  for (const std::string& name : backends.names())
    if (const engine::DeviceMemory* m = backends.find(name)->device_memory(); m && m->device().type == d.type) return m;
  return nullptr;
}

}  // namespace runtime

namespace {

const engine::DeviceMemory* memory_on(Device device) { return runtime::device_memory_of(device); }

Status no_device(Device device) {
  return unsupported(device.is_cpu() ? std::string("the host has no streams")
                                     : "no backend of this kiln runs on " + device.to_string());
}

}  // namespace

Expected<void*> default_stream(Device device) {
  const engine::DeviceMemory* m = memory_on(device);
  if (!m) return no_device(device);
  return m->default_stream();
}

Expected<Tensor> empty_on(Device device, DType dtype, const Shape& sizes, void* stream) {
  if (device.is_cpu()) return Tensor::empty(dtype, sizes);
  const engine::DeviceMemory* m = memory_on(device);
  if (!m) return no_device(device);
  return m->empty(dtype, sizes, stream);
}

struct StreamEvent::Impl {
  std::unique_ptr<engine::Fence> fence;
};

StreamEvent::StreamEvent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StreamEvent::StreamEvent(StreamEvent&&) noexcept = default;
StreamEvent& StreamEvent::operator=(StreamEvent&&) noexcept = default;
StreamEvent::~StreamEvent() = default;

Expected<StreamEvent> StreamEvent::record(Device device, void* stream) {
  const engine::DeviceMemory* m = memory_on(device);
  if (!m) return no_device(device);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<engine::Fence> f, m->timed_fence(stream));
  return StreamEvent(std::make_unique<Impl>(Impl{std::move(f)}));
}

Status StreamEvent::wait() const { return impl_->fence->wait(); }

Expected<double> StreamEvent::ms_since(const StreamEvent& earlier) const {
  return impl_->fence->ms_since(*earlier.impl_->fence);
}

Expected<Tensor> to_host(const Tensor& t) {
  if (!t.defined() || t.is_cpu()) return t;
  Tensor host = Tensor::empty(t.dtype(), t.sizes());
  KILN_TRY(copy_tensor(host, t));
  return host;
}

Expected<Tensor> to_device(const Tensor& t, Device device) {
  if (device.is_cpu()) return to_host(t);
  if (!t.defined() || (!t.is_cpu() && t.device() == device && t.is_contiguous())) return t;
  const engine::DeviceMemory* m = runtime::device_memory_of(device);
  if (!m) return unsupported("no backend of this kiln runs on " + device.to_string());
  KILN_ASSIGN_OR_RETURN(Tensor out, m->empty(t.dtype(), t.sizes()));
  KILN_TRY(copy_tensor(out, t));
  return out;
}

Status copy_tensor(const Tensor& dst, const Tensor& src) {
  if (!dst.defined() || !src.defined() || dst.sizes() != src.sizes())
    return invalid_argument("copy into " + (dst.defined() ? dst.type_string() : std::string("nothing")) + " from " +
                            (src.defined() ? src.type_string() : std::string("nothing")));
  if (dst.is_cpu() && src.is_cpu()) {
    Tensor(dst).copy_from(src);
    return Status::ok();
  }
  const engine::DeviceMemory* m = runtime::device_memory_of(dst.is_cpu() ? src.device() : dst.device());
  if (m == nullptr)
    return unsupported("no backend of this kiln runs on " + (dst.is_cpu() ? src : dst).device().to_string());
  if (!src.is_cpu() && !dst.is_cpu() && src.device() != dst.device())
    return unsupported("a copy from " + src.device().to_string() + " to " + dst.device().to_string());
  // Host sides may be converted or laid out first; device sides are taken as they are.
  if (dst.dtype() != src.dtype() || !dst.is_contiguous() || !src.is_contiguous()) {
    if (!src.is_cpu() && dst.is_cpu() && src.is_contiguous()) {
      Tensor host = Tensor::empty(src.dtype(), src.sizes());
      KILN_TRY(m->copy(host, src));
      Tensor(dst).copy_from(host);
      return Status::ok();
    }
    if (src.is_cpu() && !dst.is_cpu() && dst.is_contiguous()) {
      Tensor staged = src.to(dst.dtype()).contiguous();
      return m->copy(dst, staged);
    }
    return invalid_argument("a copy into " + dst.type_string() + " from " + src.type_string() +
                            ": device tensors must be contiguous and of the same dtype");
  }
  return m->copy(dst, src);
}

}  // namespace kiln
