// pipetype/torch/cuda/stream.hpp — LibTorch module stages on a CUDA device (docs/14_libtorch.md §14.9).
//
// The one header that includes both LibTorch's and CUDA's headers (the layer table, docs/08): it
// tells pipetype::torch::module_stage (torch/stage.hpp, which includes no CUDA header) how a device
// executor's stream, a cudaStream_t handed to every stage call as ctx.stream, becomes LibTorch's
// current stream (c10::cuda::getStreamFromExternal: LibTorch neither owns nor synchronises it).
// It also makes a stage's call refuse what would synchronise the device (cuda_device_call).
// Include it once in a program that runs module stages with pipetype::cuda, and link
// pipetype::torch_cuda (LibTorch's CUDA libraries, with the NCCL and CUDA runtime its wheel ships).
#pragma once

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <mutex>

#include "pipetype/torch/stage.hpp"

namespace pipetype::torch::detail {

inline c10::Stream cuda_external_stream(void* stream, c10::DeviceIndex device) {
  return c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream), device).unwrap();
}

/// While any module stage's call runs on a device, LibTorch's synchronisation check raises: a
/// forward that reads a value to the host (`.item()`, a copy to the CPU, a data-dependent shape)
/// would stall the executor's streams, and is refused in a sentence instead (LibTorch's
/// sync_debug_mode, set to error for the calls and put back as the last one ends).
inline void cuda_device_call(bool begins) {
  static std::mutex mu;
  static int running = 0;
  static c10::cuda::SyncDebugMode before = c10::cuda::SyncDebugMode::L_DISABLED;
  const std::lock_guard lock(mu);
  c10::cuda::WarningState& w = c10::cuda::warning_state();
  if (begins) {
    if (running++ == 0) {
      before = w.get_sync_debug_mode();
      w.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
    }
  } else if (--running == 0) {
    w.set_sync_debug_mode(before);
  }
}

/// Set before main() in every program that includes this header.
inline const bool cuda_streams_known =
    (external_stream() = &cuda_external_stream, device_call() = &cuda_device_call, true);

}  // namespace pipetype::torch::detail
