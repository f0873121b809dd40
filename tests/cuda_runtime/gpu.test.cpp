// GPU tests (CTest label `gpu`): NCCL grouped self send/recv on a one-rank communicator, the
// device executor running a one-rank plan whose stages launch a kernel on the stream it hands
// them, and two loopback ranks on one GPU carrying a set of tensors (one varying, one without a
// gradient) to a sink that reads its targets and writes its losses.
#include <pipetype/cuda/executor.hpp>
#include <pipetype/cuda/loopback.hpp>
#include <pipetype/cuda/runtime.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
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

// Hidden states (varying: 2 floats per token, 4 tokens at most) and token ids (no gradient) pass
// through; the sink's loss is its target + the first id + the hidden states it received.
struct relay {
  using input = pt::tensors<pt::varying<pt::tensor<float, 8>>, pt::no_grad<pt::tensor<std::int32_t, 2>>>;
  using output = input;
  using target = pt::tensor<float, 1>;
  // (on a rank's thread: a failure throws, and the pipeline's step rethrows it)
  static void copy(void* to, const void* from, std::size_t bytes, void* stream) {
    if (cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)) != cudaSuccess)
      throw std::runtime_error("relay: cudaMemcpyAsync failed");
  }
  void forward(const pt::forward_ctx<relay>& c) {
    const auto [hidden, ids] = c.input;
    if (c.loss != nullptr) {
      gpu_test::score(c.target.data(), ids.data(), static_cast<float>(hidden.size()), c.loss, c.stream);
      return;
    }
    const auto [out_hidden, out_ids] = c.output;
    if (out_hidden.size() != hidden.size()) throw std::runtime_error("relay: the output's length is not the input's");
    copy(out_hidden.data(), hidden.data(), hidden.size_bytes(), c.stream);
    copy(out_ids.data(), ids.data(), ids.size_bytes(), c.stream);
  }
  void backward(const pt::backward_ctx<relay>& c) {
    if (!c.grad_input.get<0>().empty() && !c.grad_output.get<0>().empty())
      copy(c.grad_input.get<0>().data(), c.grad_output.get<0>().data(), c.grad_input.get<0>().size_bytes(), c.stream);
  }
};

template <class T>
T* upload(pc::runtime_driver& d, const std::vector<T>& h) {
  auto* p = static_cast<T*>(d.allocate(h.size() * sizeof(T)));
  REQUIRE(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  return p;
}

}  // namespace

TEST_CASE("gpu: two loopback ranks carry a set edge at each microbatch's length to a sink that writes its losses") {
  const auto plan = pt::build_plan(pt::make_one_f_one_b(2, 3));
  REQUIRE(plan.ok());
  pt::uniform_chain<relay> model(std::vector<relay>(2));
  std::vector<std::unique_ptr<pc::runtime_driver>> drivers;
  std::vector<pc::runtime_driver*> ptrs;
  for (int r = 0; r < 2; ++r) {
    drivers.push_back(std::make_unique<pc::runtime_driver>(r, 0));
    ptrs.push_back(drivers.back().get());
  }
  pc::loopback_pipeline<pc::runtime_driver> pipe{plan, model, ptrs};
  const std::vector<float> hidden(3 * 8, 0.5f), targets{10, 20, 30};
  const std::vector<std::int32_t> ids{1, 0, 2, 0, 3, 0};
  const std::vector<std::size_t> lens{4, 1, 0};
  pt::batch b;
  b.input(std::span<const float>(upload(*drivers[0], hidden), hidden.size()))
      .input(std::span<const std::int32_t>(upload(*drivers[0], ids), ids.size()))
      .target(std::span<const float>(upload(*drivers[1], targets), targets.size()))
      .lengths(lens, 4);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  pipe.step(b);
  for (auto& d : drivers) d->synchronize();
  REQUIRE(pipe.rank(0).losses() == nullptr);
  REQUIRE(pipe.rank(1).losses() != nullptr);
  std::vector<float> losses(3);
  REQUIRE(cudaMemcpy(losses.data(), pipe.rank(1).losses(), 3 * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  // target + id + 2 floats per token of the microbatch's length
  CHECK(losses == std::vector<float>{10 + 1 + 8, 20 + 2 + 2, 30 + 3 + 0});
  CHECK(pipe.rank(1).loss_scale() == doctest::Approx(1.0 / 3));
  pt::batch short_of_targets;  // one target missing: refused before any rank starts
  short_of_targets.input(std::span<const float>(upload(*drivers[0], hidden), hidden.size()))
      .input(std::span<const std::int32_t>(upload(*drivers[0], ids), ids.size()));
  CHECK_THROWS_AS(pipe.step(short_of_targets), pt::shape_error);
  pipe.step(b);  // still usable
  for (auto& d : drivers) d->synchronize();
  CHECK(cudaGetLastError() == cudaSuccess);
}

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
