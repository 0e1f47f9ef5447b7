// Moving tensors between host memory and the devices kiln's backends run on:
// through the backend's engine::DeviceMemory, found by the tensor's device.
#pragma once

#include "engine/backend.h"

namespace kiln::runtime {

// The memory of the backend whose device is `d` (null for the host, or a
// device no built-in backend runs on).
const engine::DeviceMemory* device_memory_of(Device d);

}  // namespace kiln::runtime
