// LibTorch module stages on a GPU (CTest label `gpu`; skipped with exit code 77 and a message where
// no CUDA device is visible): two loopback ranks of the device executor on one GPU run a chain of
// torch::nn modules whose parameters live on the device, each call on the stream the executor hands
// it (torch/cuda/stream.hpp), and give the gradients and losses of the same model run unpipelined
// on that GPU; a module on the wrong side of an executor is refused in a sentence.
#include <pipetype/cuda/loopback.hpp>
#include <pipetype/cuda/runtime.hpp>
#include <pipetype/host.hpp>
#include <pipetype/pipetype.hpp>
#include <pipetype/torch/cuda/stream.hpp>
#include <pipetype/torch/stage.hpp>

#include <torch/torch.h>

#include <doctest/doctest.h>

#include "../torch/spec.hpp"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace {
namespace test_torch_cuda {

namespace pt = pipetype;
namespace pc = pipetype::cuda;

constexpr std::int64_t rows = 4, width = 16;
using hidden = pt::tensor<float, pt::dynamic>;
using block_stage = pt::torch::module_stage<hidden, hidden, hidden>;

torch::nn::Sequential make_block(int k, int n, const torch::Device& on) {
  torch::manual_seed(static_cast<std::uint64_t>(200 + k));
  torch::nn::Sequential s(torch::nn::Linear(width, width));
  if (k < n - 1) s->push_back(torch::nn::Functional(torch::tanh));
  s->to(on);
  return s;
}

pt::torch::stage_spec spec_of(int k) { return torch_test::square_spec("gpu block " + std::to_string(k), rows, width); }

pt::uniform_chain<block_stage> make_model(int n, const torch::Device& on) {
  std::vector<block_stage> v;
  for (int k = 0; k < n; ++k) v.emplace_back(make_block(k, n, on), spec_of(k));
  return pt::uniform_chain<block_stage>(std::move(v));
}

std::vector<std::unique_ptr<pc::runtime_driver>> drivers_of(int ranks) {
  std::vector<std::unique_ptr<pc::runtime_driver>> d;
  for (int r = 0; r < ranks; ++r) d.push_back(std::make_unique<pc::runtime_driver>(r, 0));
  return d;
}

// One step of `model`, the plan's ranks as loopback ranks on GPU 0, every input and target 0.
void step_on_zeros(const pt::runtime_plan& plan, pt::uniform_chain<block_stage>& model) {
  auto drivers = drivers_of(plan.compute().ranks);
  std::vector<pc::runtime_driver*> ptrs;
  for (auto& d : drivers) ptrs.push_back(d.get());
  pc::loopback_pipeline<pc::runtime_driver> pipe{plan, model, ptrs};
  const at::Tensor x = torch::zeros({plan.compute().microbatches, rows, width}, torch::Device(torch::kCUDA, 0));
  pt::batch b;
  b.input(std::span<const float>(x.data_ptr<float>(), static_cast<std::size_t>(x.numel())))
      .target(std::span<const float>(x.data_ptr<float>(), static_cast<std::size_t>(x.numel())));
  pipe.step(b);
}

}  // namespace test_torch_cuda
}  // namespace

using namespace test_torch_cuda;

TEST_CASE("gpu torch: module stages on the device, 1F1B and ZB-H1 over two loopback ranks, give the unpipelined gradients") {
  const torch::Device gpu(torch::kCUDA, 0);
  const int ranks = 2, m = 4;
  torch::manual_seed(9);
  const at::Tensor x = torch::randn({m, rows, width}, gpu), y = torch::randn({m, rows, width}, gpu);
  for (const char* name : {"1f1b", "zb-h1"}) {
    CAPTURE(name);
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, ranks, m, 1));
    REQUIRE(plan.ok());
    auto model = make_model(ranks, gpu);
    auto drivers = drivers_of(ranks);
    std::vector<pc::runtime_driver*> ptrs;
    for (auto& d : drivers) ptrs.push_back(d.get());
    pc::loopback_pipeline<pc::runtime_driver> pipe{plan, model, ptrs};
    pt::batch b;
    b.input(std::span<const float>(x.data_ptr<float>(), static_cast<std::size_t>(x.numel())))
        .target(std::span<const float>(y.data_ptr<float>(), static_cast<std::size_t>(y.numel())));
    torch::cuda::synchronize();
    pipe.step(b);
    for (auto& d : drivers) d->synchronize();
    // the same model, unpipelined, microbatch after microbatch on the GPU
    std::vector<torch::nn::Sequential> ref;
    for (int k = 0; k < ranks; ++k) ref.push_back(make_block(k, ranks, gpu));
    std::vector<float> ref_losses;
    for (int j = 0; j < m; ++j) {
      at::Tensor h = x[j];
      for (auto& blk : ref) h = blk->forward(h);
      const at::Tensor loss = torch::mse_loss(h, y[j], at::Reduction::Sum);
      ref_losses.push_back(loss.item<float>());
      (loss * (1.0f / static_cast<float>(m))).backward();
    }
    std::vector<float> losses(static_cast<std::size_t>(m));
    REQUIRE(cudaMemcpy(losses.data(), pipe.rank(ranks - 1).losses(), losses.size() * sizeof(float),
                       cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int j = 0; j < m; ++j) CHECK(losses[static_cast<std::size_t>(j)] == doctest::Approx(ref_losses[static_cast<std::size_t>(j)]).epsilon(1e-5));
    for (int k = 0; k < ranks; ++k) {
      CAPTURE(k);
      block_stage& st = model.stage(k);
      CHECK(st.graphs_held() == 0);
      std::vector<at::Tensor> want;
      for (const auto& p : ref[static_cast<std::size_t>(k)]->parameters()) want.push_back(p.grad().reshape({-1}));
      const at::Tensor got = st.flat_gradients().cpu(), expect = torch::cat(want).cpu();
      CHECK(torch::allclose(got, expect, 1e-5, 1e-6));
    }
    CHECK(cudaGetLastError() == cudaSuccess);
  }
}

TEST_CASE("gpu torch: a module on the wrong side of its executor is refused in a sentence") {
  const torch::Device gpu(torch::kCUDA, 0);
  const int ranks = 2, m = 2;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", ranks, m, 1));
  REQUIRE(plan.ok());
  {  // parameters on the GPU, host threads
    auto model = make_model(ranks, gpu);
    pipetype::host::executor ex{plan, model};
    const std::vector<float> x(static_cast<std::size_t>(m * rows * width), 0.5f), y = x;
    pt::batch b;
    b.input(x).target(y);
    CHECK_THROWS_WITH(ex.step(b), doctest::Contains("but a host executor runs it"));
  }
  {  // parameters on the CPU, a device executor
    auto model = make_model(ranks, torch::Device(torch::kCPU));
    CHECK_THROWS_WITH(step_on_zeros(plan, model), doctest::Contains("but a device executor runs it"));
  }
}

TEST_CASE("gpu torch: a forward that synchronises the device is refused in a sentence naming the stage") {
  const torch::Device gpu(torch::kCUDA, 0);
  const int ranks = 2, m = 2;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", ranks, m, 1));
  REQUIRE(plan.ok());
  std::vector<block_stage> v;
  for (int k = 0; k < ranks; ++k) {
    auto lin = torch::nn::Linear(width, width);
    lin->to(gpu);
    v.emplace_back(lin.ptr(),
                   [lin, k](const std::vector<at::Tensor>& x) mutable -> std::vector<at::Tensor> {
                     at::Tensor y = lin->forward(x.at(0));
                     if (k == 0 && y.sum().item<float>() > 1e30f) y = y * 0;  // reads a value to the host
                     return {y};
                   },
                   spec_of(k));
  }
  pt::uniform_chain<block_stage> model(std::move(v));
  CHECK_THROWS_WITH(step_on_zeros(plan, model), doctest::Contains("stage 'gpu block 0''s forward failed in LibTorch"));
  // outside a stage's call, LibTorch synchronises as it likes again
  CHECK(torch::zeros({m, rows, width}, gpu).sum().item<float>() == 0.0f);
}
