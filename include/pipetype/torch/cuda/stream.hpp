// pipetype/torch/cuda/stream.hpp — LibTorch module stages on a CUDA device (docs/14_libtorch.md §14.9).
//
// The one header that includes both LibTorch's and CUDA's headers (the layer table, docs/08): it
// tells pipetype::torch::module_stage (torch/stage.hpp, which includes no CUDA header) how a device
// executor's stream, a cudaStream_t handed to every stage call as ctx.stream, becomes LibTorch's
// current stream (c10::cuda::getStreamFromExternal: LibTorch neither owns nor synchronises it).
// Include it once in a program that runs module stages with pipetype::cuda, and link
// pipetype::torch_cuda (LibTorch's CUDA libraries, with the NCCL and CUDA runtime its wheel ships).
#pragma once

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "pipetype/torch/stage.hpp"

namespace pipetype::torch::detail {

inline c10::Stream cuda_external_stream(void* stream, c10::DeviceIndex device) {
  return c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream), device).unwrap();
}

/// Set before main() in every program that includes this header.
inline const bool cuda_streams_known = (external_stream() = &cuda_external_stream, true);

}  // namespace pipetype::torch::detail
