// LibTorch's CUDA header and CUDA's own inside torch/cuda/: both allowed.
#pragma once
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include "pipetype/torch/ok.hpp"
