// Device memory, streams and timing for callers that keep tensors on a
// device (a framework's CUDA tensors, a benchmark's resident inputs): what
// the runtime itself uses to keep values on a device, told in kiln's own
// terms. The host (Device::cpu()) has no streams: these refuse it.
#pragma once

#include <memory>

#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {

// The stream every call on `device` without a stream of its own runs on (a
// cudaStream_t for CUDA); kUnsupported for the host or a device no backend
// of this kiln runs on.
Expected<void*> default_stream(Device device);

// A contiguous tensor of `dtype` and `sizes` in `device`'s memory, contents
// unspecified, freed when its last view goes, in `stream`'s order (null: the
// device's default stream; the tensor is then ready for any stream on
// return). An error naming the bytes when the device is out of memory.
Expected<Tensor> empty_on(Device device, DType dtype, const Shape& sizes, void* stream = nullptr);

// A point in a stream's work (as torch.cuda.Event(enable_timing=True)):
// everything enqueued on the stream when it was recorded.
class StreamEvent {
 public:
  // Records the point on `stream` of `device` (null: its default stream).
  static Expected<StreamEvent> record(Device device, void* stream = nullptr);
  StreamEvent(StreamEvent&&) noexcept;
  StreamEvent& operator=(StreamEvent&&) noexcept;
  ~StreamEvent();
  // Waits for the work before the point.
  Status wait() const;
  // Milliseconds of device time between `earlier` and this point, both
  // recorded on one stream of one device (waits for this one).
  Expected<double> ms_since(const StreamEvent& earlier) const;

 private:
  struct Impl;  // the device's fence (device_copy.cc)
  explicit StreamEvent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
