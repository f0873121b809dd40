// The CUDA + NCCL driver compiled by the host compiler in a .cpp; what runs without a GPU: NCCL's
// version, the device count, and the errors a missing device produces.
#include <pipetype/cuda/executor.hpp>
#include <pipetype/cuda/runtime.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_runtime {

namespace pc = pipetype::cuda;

TEST_CASE("cuda runtime: NCCL answers without a GPU, and the driver satisfies the concept") {
  const std::string v = pc::nccl_version();
  CHECK(v.rfind("NCCL 2.", 0) == 0);
  static_assert(pc::device_driver<pc::runtime_driver>);
  CHECK(pc::device_count() >= 0);
}

TEST_CASE("cuda runtime: without a device, the driver's first call fails with rank, call and CUDA's words") {
  if (pc::device_count() > 0) {
    MESSAGE("a CUDA device is present: the no-device error path is not exercised here");
    return;
  }
  try {
    pc::runtime_driver d{3, 0};
    FAIL("cudaSetDevice should have failed without a device");
  } catch (const pc::device_error& e) {
    const std::string what = e.what();
    CHECK(what.find("rank 3") != std::string::npos);
    CHECK(what.find("cudaSetDevice failed") != std::string::npos);
    CHECK(what.find("cudaError") != std::string::npos);  // the error's name, e.g. cudaErrorInsufficientDriver
  }
}

TEST_CASE("cuda runtime: NCCL's unique id without a way to share it is refused with what to do") {
  ::unsetenv("NCCL_COMM_ID");
  pc::launch_info l;
  l.rank = 1;
  l.world = 4;
  CHECK_THROWS_WITH(pc::unique_id(l), doctest::Contains("set NCCL_COMM_ID=<host>:<port> or give a file"));
}

TEST_CASE("cuda runtime: NCCL_COMM_ID gives every rank the same id, computed locally") {
  ::setenv("NCCL_COMM_ID", "127.0.0.1:29517", 1);
  pc::launch_info a, b;
  a.world = b.world = 2;
  b.rank = 1;
  const ncclUniqueId x = pc::unique_id(a), y = pc::unique_id(b);
  ::unsetenv("NCCL_COMM_ID");
  CHECK(std::memcmp(x.internal, y.internal, sizeof(x.internal)) == 0);
}

}  // namespace test_runtime
}  // namespace
