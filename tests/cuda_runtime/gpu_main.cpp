// The GPU tests' entry: exit code 77 (CTest: skipped) with a clear message when no CUDA device
// is visible, doctest otherwise.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <pipetype/cuda/runtime.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  if (pipetype::cuda::device_count() == 0) {
    std::printf("pipetype GPU tests: skipped, no CUDA device (cudaGetDeviceCount found none or failed)\n");
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
