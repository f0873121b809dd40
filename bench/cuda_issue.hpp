// What bench_cuda_issue and its generator (gen_straight_line.cpp) share: the cases, the stage,
// the counting driver, and the interface of the generated straight-line steps.
#pragma once

#include <pipetype/cuda/executor.hpp>
#include <pipetype/pipetype.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace pipetype_bench {

namespace pt = pipetype;

/// A stage that does nothing but hand its context's pointers to the optimizer.
struct quiet {
  using input = pt::tensor<float, 16>;
  using output = pt::tensor<float, 16>;
  void forward(const pt::forward_ctx<quiet>& c) { benchmark::DoNotOptimize(c.input.data()); }
  void backward(const pt::backward_ctx<quiet>& c) { benchmark::DoNotOptimize(c.grad_output.data()); }
  void backward_input(const pt::backward_ctx<quiet>& c) { benchmark::DoNotOptimize(c.grad_output.data()); }
  void backward_weight(const pt::backward_ctx<quiet>& c) { benchmark::DoNotOptimize(c.input.data()); }
};

// Counts calls; every argument goes through DoNotOptimize so nothing is folded away.
struct counting_driver {
  using stream = int;
  using event = int;
  using comm = int;
  std::uint64_t calls = 0;
  std::vector<std::vector<std::byte>> blocks;
  void* allocate(std::size_t n) {
    blocks.emplace_back(n ? n : 1);
    return blocks.back().data();
  }
  stream make_stream() { return streams++; }
  event make_event() { return events++; }
  void* native(stream s) const { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(s) + 1); }
  void record(event e, stream s) { note(e, s); }
  void wait(stream s, event e) { note(e, s); }
  void group_start() { ++calls; }
  void group_end() { ++calls; }
  void send(const void* p, std::size_t n, int peer, comm c, stream s) { note(p, n, peer, c, s); }
  void recv(void* p, std::size_t n, int peer, comm c, stream s) { note(p, n, peer, c, s); }
  template <class... A>
  void note(const A&... a) {
    (benchmark::DoNotOptimize(a), ...);
    ++calls;
  }
  int streams = 0, events = 0;
};

// ---- the cases: rank 1 of 0: 1F1B p = 4, m = 8; 1: DualPipeV p = 4, m = 8 --------------------
inline constexpr int bench_rank = 1;
inline constexpr int case_count = 2;
inline constexpr const char* case_names[case_count] = {"one_f_one_b", "dualpipe_v"};

inline pt::runtime_plan plan_of(int which) {
  return pt::build_plan(which == 0 ? pt::make_one_f_one_b(4, 8) : pt::make_dualpipe_v(4, 8));
}
/// One quiet stage per model stage of the plan.
inline pt::uniform_chain<quiet> model_of(const pt::runtime_plan& plan) {
  return pt::uniform_chain<quiet>(std::vector<quiet>(static_cast<std::size_t>(plan.compute().lane_length())));
}
/// Every microbatch's input to stage 0.
inline std::vector<float> batch_of(const pt::runtime_plan& plan) {
  return std::vector<float>(16 * static_cast<std::size_t>(plan.compute().microbatches));
}

/// Binds bench_rank of `plan` over `driver`, every communicator 0.
template <class D>
pipetype::cuda::executor<D> executor_of(const pt::runtime_plan& plan, pt::uniform_chain<quiet>& model, D& driver) {
  return {plan,
          model,
          driver,
          {.rank = bench_rank, .comms = std::vector<typename D::comm>(plan.lowered().comms.size(), 0)}};
}

// ---- the generated straight-line steps (straight_line.gen.cpp in the build folder) ------------

/// One case's step written out as the calls the executor makes, in order.
struct straight_line {
  int ops = 0;                              // the executor's ops for the rank (executor::ops)
  std::span<const std::size_t> pool_bytes;  // allocate these through the driver, in this order
  int stage_calls = 0;                      // the bound ops bind() fills
  /// Fills the stage calls' bound ops (what the executor's binding gives them) from the pools.
  void (*bind)(counting_driver& d, std::byte* const* pool, const pt::stage_entry* e, pt::bound_op* c);
  /// The step: driver calls with constant arguments, the stage calls through c[k].fn.
  void (*step)(counting_driver& d, std::byte* const* pool, const pt::bound_op* c, const pt::step_feed& feed);
};
const straight_line& straight_line_of(int which);

}  // namespace pipetype_bench
