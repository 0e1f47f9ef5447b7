// Template definitions for cuda_support.h.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

namespace kiln::cuda {

template <typename Fn>
Expected<std::vector<float>> time_each_on_stream(cudaStream_t stream, int warmup, int reps, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) KILN_TRY(fn());
  cudaEvent_t start = nullptr, stop = nullptr;
  KILN_CUDA_TRY(cudaEventCreate(&start));
  if (Status s = cuda_status(cudaEventCreate(&stop), "cudaEventCreate"); !s) {
    cudaEventDestroy(start);
    return s;
  }
  std::vector<float> times;
  Status status;
  for (int i = 0; i < reps && status.is_ok(); ++i) {
    status = cuda_status(cudaEventRecord(start, stream), "cudaEventRecord");
    if (status) status = fn();
    if (status) status = cuda_status(cudaEventRecord(stop, stream), "cudaEventRecord");
    if (status) status = cuda_status(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    if (status) status = cuda_status(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  KILN_TRY(status);
  return times;
}

template <typename Fn>
Expected<float> time_on_stream(cudaStream_t stream, int warmup, int reps, Fn&& fn) {
  KILN_ASSIGN_OR_RETURN(std::vector<float> times, time_each_on_stream(stream, warmup, reps, std::forward<Fn>(fn)));
  if (times.empty()) return invalid_argument("time_on_stream needs at least one timed run");
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

}  // namespace kiln::cuda
