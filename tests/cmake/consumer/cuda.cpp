// The CUDA target of the package: the CUDA + NCCL driver compiles and links (runs without a GPU).
#include <pipetype/cuda/executor.hpp>
#include <pipetype/cuda/runtime.hpp>

#include <cstdio>

int main() {
  std::printf("%s, %d device(s)\n", pipetype::cuda::nccl_version().c_str(), pipetype::cuda::device_count());
  return 0;
}
