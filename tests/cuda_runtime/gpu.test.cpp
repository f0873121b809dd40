// GPU tests (CTest label `gpu`): NCCL grouped self send/recv on a one-rank communicator, and the
// device executor running a one-rank plan whose stages launch a kernel on the stream it hands them.
#include <pipetype/cuda/executor.hpp>
#include <pipetype/cuda/runtime.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <vector>

#include "kernels.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_gpu {

namespace pt = pipetype;
namespace pc = pipetype::cuda;

namespace {

ncclComm_t one_rank_comm() {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t c = nullptr;
  REQUIRE(ncclCommInitRank(&c, 1, id, 0) == ncclSuccess);
  return c;
}

// y = x + 1 forward; the gradient passes through unchanged backward
struct plus_one {
  using input = pt::tensor<float, 256>;
  using output = pt::tensor<float, 256>;
  void forward(const pt::forward_ctx<plus_one>& c) {
    if (!c.output.empty()) gpu_test::add(c.input.data(), c.output.data(), 256, 1.0f, c.stream);
  }
  void backward(const pt::backward_ctx<plus_one>& c) {
    if (!c.grad_input.empty()) gpu_test::add(c.grad_output.data(), c.grad_input.data(), 256, 0.0f, c.stream);
  }
};

}  // namespace

TEST_CASE("gpu: one-rank NCCL communicator, grouped send to self and recv from self") {
  pc::runtime_driver d{0, 0};
  ncclComm_t c = one_rank_comm();
  const std::size_t n = 1 << 16;
  auto* a = static_cast<unsigned char*>(d.allocate(n));
  auto* b = static_cast<unsigned char*>(d.allocate(n));
  std::vector<unsigned char> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned char>(i * 7 + 3);
  REQUIRE(cudaMemcpy(a, host.data(), n, cudaMemcpyHostToDevice) == cudaSuccess);
  const auto s = d.make_stream();
  d.group_start();
  d.send(a, n, 0, c, s);
  d.recv(b, n, 0, c, s);
  d.group_end();
  d.synchronize();
  std::vector<unsigned char> back(n);
  REQUIRE(cudaMemcpy(back.data(), b, n, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == host);
  ncclCommDestroy(c);
}

TEST_CASE("gpu: the device executor runs a one-rank plan, stages launching on the stream it hands them") {
  const auto plan = pt::build_plan(pt::make_one_f_one_b(1, 4));
  pt::uniform_chain<plus_one> model(std::vector<plus_one>(1));
  pc::runtime_driver d{0, 0};
  auto* batch = static_cast<float*>(d.allocate(4 * 256 * sizeof(float)));
  REQUIRE(cudaMemset(batch, 0, 4 * 256 * sizeof(float)) == cudaSuccess);
  pc::executor ex{plan, model, d};
  ex.step(batch);
  d.synchronize();
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("gpu: a captured step replays, and a new batch updates the graph in place") {
  const auto plan = pt::build_plan(pt::make_one_f_one_b(1, 4));
  pt::uniform_chain<plus_one> model(std::vector<plus_one>(1));
  pc::runtime_driver d{0, 0};
  auto* a = static_cast<float*>(d.allocate(4 * 256 * sizeof(float)));
  auto* b = static_cast<float*>(d.allocate(4 * 256 * sizeof(float)));
  REQUIRE(cudaMemset(a, 0, 4 * 256 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemset(b, 0, 4 * 256 * sizeof(float)) == cudaSuccess);
  pc::executor ex{plan, model, d};
  ex.capture(a);
  ex.replay();
  d.synchronize();
  ex.capture(b);
  CHECK(ex.instantiations() == 1);
  CHECK(ex.updates() == 1);
  ex.replay();
  d.synchronize();
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("gpu: a peer that never comes ends at the deadline in ncclCommAbort and an error, not a hang") {
  // a world of two ranks, but only rank 0 exists: the non-blocking init can never complete
  pc::runtime_driver d{0, 0, {.deadline = std::chrono::milliseconds(3000)}};
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  const auto plan = pt::build_plan(pt::make_one_f_one_b(2, 4));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(d.connect(id, 2, plan.lowered()), doctest::Contains("did not complete within 3000 ms"),
                       pc::device_error);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60));
  CHECK(d.aborted());
  CHECK_THROWS_WITH_AS(d.synchronize(), doctest::Contains("were aborted"), pc::device_error);
}

TEST_CASE("gpu: connect on a one-rank world gives a plan without communicators, and the step runs") {
  pc::runtime_driver d{0, 0};
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  const auto plan = pt::build_plan(pt::make_gpipe(1, 4));
  const std::vector<ncclComm_t> comms = d.connect(id, 1, plan.lowered());
  CHECK(comms.empty());
  CHECK(d.world() != nullptr);
  pt::uniform_chain<plus_one> model(std::vector<plus_one>(1));
  auto* batch = static_cast<float*>(d.allocate(4 * 256 * sizeof(float)));
  REQUIRE(cudaMemset(batch, 0, 4 * 256 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  pc::executor ex{plan, model, d, {.comms = comms}};
  ex.step(batch);
  d.synchronize();
  CHECK(cudaGetLastError() == cudaSuccess);
}

}  // namespace test_gpu
}  // namespace
