// What issuing a rank's program costs on the host, next to a run-time scheduler doing the same.
//
//   ./build/release/bench/bench_executor
//
// BM_static_walk: the host executor's own issue path (executor::walk_rank: the bound ops of one
// rank in lowered order, event checks, stage calls through function pointers) with no-op stages
// and a transport that moves nothing, so no channel ever waits. BM_runtime_scheduler: the same
// rank's program executed the way run-time schedulers do it (PyTorch's pipelining runtime,
// DeepSpeed's PipeEngine): a list of heap-allocated action objects, a readiness check of every
// action's inputs against a dependency map before it runs, outputs marked ready after, dispatch
// through virtual calls and std::function. Both report ns per action (compute actions of the
// rank) in the `ns_per_action` counter; the targets are <= 5 ns and >= 20x.
//
// BM_step: a whole step (executor::step) of every rank with the same no-op stages, real
// transfers through the fabric and every stream on its rank thread; BM_walk_all: the same
// ranks' programs walked one after the other on the calling thread. `us_per_step` of the first
// minus `us_walk` (the second's) is the step's fixed cost: starting (or waking) the rank
// threads, the rendezvous hand-offs between them and the join.
#include <pipetype/host.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace pt = pipetype;
namespace ph = pipetype::host;

namespace {

struct noop {
  using input = pt::tensor<float, 16>;
  using output = pt::tensor<float, 16>;
  void forward(const pt::forward_ctx<noop>& c) { benchmark::DoNotOptimize(c.input.data()); }
  void backward(const pt::backward_ctx<noop>& c) { benchmark::DoNotOptimize(c.grad_output.data()); }
};

pt::runtime_plan plan_of(int which, int p, int m) {
  return pt::build_plan(which == 0 ? pt::make_one_f_one_b(p, m) : pt::make_interleaved_1f1b(p, m, 2));
}

constexpr int bench_rank = 1;

void set_counters(benchmark::State& s, const pt::runtime_plan& plan) {
  const auto actions = static_cast<double>(plan.compute().rank_actions(bench_rank).size());
  s.counters["ns_per_action"] = benchmark::Counter(static_cast<double>(s.iterations()) * actions,
                                                   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  s.counters["ops"] = static_cast<double>(plan.lowered().rank_ops(bench_rank).size());
  s.counters["actions"] = actions;
}

void BM_static_walk(benchmark::State& s) {
  const pt::runtime_plan plan =
      plan_of(static_cast<int>(s.range(0)), static_cast<int>(s.range(1)), static_cast<int>(s.range(2)));
  pt::uniform_chain<noop> model(std::vector<noop>(static_cast<std::size_t>(plan.compute().stages)));
  ph::executor ex{plan, model};
  std::vector<float> batch(16 * static_cast<std::size_t>(plan.compute().microbatches));
  for (auto _ : s) ex.walk_rank(bench_rank, batch);
  set_counters(s, plan);
}

void BM_step(benchmark::State& s) {
  const pt::runtime_plan plan = plan_of(0, static_cast<int>(s.range(0)), static_cast<int>(s.range(1)));
  pt::uniform_chain<noop> model(std::vector<noop>(static_cast<std::size_t>(plan.compute().stages)));
  ph::executor ex{plan, model};
  std::vector<float> batch(16 * static_cast<std::size_t>(plan.compute().microbatches));
  for (auto _ : s) ex.step(batch);
  s.counters["us_per_step"] = benchmark::Counter(static_cast<double>(s.iterations()) * 1e-6,
                                                 benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_walk_all(benchmark::State& s) {
  const pt::runtime_plan plan = plan_of(0, static_cast<int>(s.range(0)), static_cast<int>(s.range(1)));
  pt::uniform_chain<noop> model(std::vector<noop>(static_cast<std::size_t>(plan.compute().stages)));
  ph::executor ex{plan, model};
  std::vector<float> batch(16 * static_cast<std::size_t>(plan.compute().microbatches));
  for (auto _ : s)
    for (int r = 0; r < plan.compute().ranks; ++r) ex.walk_rank(r, batch);
  s.counters["us_walk"] = benchmark::Counter(static_cast<double>(s.iterations()) * 1e-6,
                                             benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// ---- the baseline: a run-time scheduler -----------------------------------------------------

struct tensor_key {
  char what;  // 'A' activation, 'G' gradient
  int stage, microbatch;
  std::uint64_t hash() const {
    return (static_cast<std::uint64_t>(static_cast<unsigned char>(what)) << 48) ^
           (static_cast<std::uint64_t>(static_cast<unsigned>(stage)) << 24) ^ static_cast<std::uint64_t>(microbatch);
  }
};

struct runtime_state {
  std::unordered_map<std::uint64_t, std::vector<float>> ready;  // tensors that exist, by key
  std::vector<std::function<void(int, int, char)>> stage_fn;    // per stage
  int stages = 0;
};

struct action_node {
  virtual ~action_node() = default;
  virtual void run(runtime_state& st) = 0;
};

void require(runtime_state& st, const tensor_key& k) {
  if (st.ready.find(k.hash()) == st.ready.end()) throw std::logic_error("input not ready");
}

struct compute_node final : action_node {
  pt::action a;
  void run(runtime_state& st) override {
    // readiness: the inputs this action reads must exist
    if (a.what == pt::kind::F) {
      if (a.stage > 0) require(st, {'A', a.stage - 1, a.microbatch});
    } else {
      require(st, {'A', a.stage, a.microbatch});
      if (a.stage + 1 < st.stages) require(st, {'G', a.stage + 1, a.microbatch});
    }
    st.stage_fn[static_cast<std::size_t>(a.stage)](a.stage, a.microbatch, pt::kind_char(a.what));
    // outputs become ready
    if (a.what == pt::kind::F)
      st.ready[tensor_key{'A', a.stage, a.microbatch}.hash()];
    else
      st.ready[tensor_key{'G', a.stage, a.microbatch}.hash()];
  }
};
struct send_node final : action_node {
  tensor_key k;
  void run(runtime_state& st) override { require(st, k); }
};
struct recv_node final : action_node {
  tensor_key k;
  void run(runtime_state& st) override { st.ready[k.hash()]; }  // arrives: now ready
};

void BM_runtime_scheduler(benchmark::State& s) {
  const pt::runtime_plan plan =
      plan_of(static_cast<int>(s.range(0)), static_cast<int>(s.range(1)), static_cast<int>(s.range(2)));
  noop stage;
  runtime_state st;
  st.stages = plan.compute().stages;
  for (int i = 0; i < st.stages; ++i)
    st.stage_fn.emplace_back([&stage](int sg, int mb, char k) {
      benchmark::DoNotOptimize(&stage);
      benchmark::DoNotOptimize(sg + mb + k);
    });
  // the rank's program as a list of action objects (the same ops the lowered program has)
  std::vector<std::unique_ptr<action_node>> actions;
  for (const pt::lowered_op& op : plan.lowered().rank_ops(bench_rank)) {
    if (op.code == pt::op_code::compute) {
      auto n = std::make_unique<compute_node>();
      n->a = {op.what, op.stage, op.microbatch, false};
      actions.push_back(std::move(n));
    } else if (op.code != pt::op_code::group) {
      const tensor_key k{op.what == pt::kind::F ? 'A' : 'G', op.stage, op.microbatch};
      if (op.code == pt::op_code::send) {
        auto n = std::make_unique<send_node>();
        n->k = k;
        actions.push_back(std::move(n));
      } else {
        auto n = std::make_unique<recv_node>();
        n->k = k;
        actions.push_back(std::move(n));
      }
    }
  }
  for (auto _ : s) {
    st.ready.clear();
    for (const auto& a : actions) a->run(st);
  }
  set_counters(s, plan);
}

// (schedule: 0 = 1F1B, 1 = interleaved v=2; ranks; microbatches)
void args(benchmark::internal::Benchmark* b) {
  b->Args({0, 4, 8})->Args({0, 4, 64})->Args({1, 4, 8})->Args({1, 4, 64});
}
BENCHMARK(BM_static_walk)->Apply(args);
BENCHMARK(BM_runtime_scheduler)->Apply(args);
// (ranks; microbatches), 1F1B
BENCHMARK(BM_step)->Args({1, 8})->Args({4, 8})->Args({8, 32})->UseRealTime();
BENCHMARK(BM_walk_all)->Args({1, 8})->Args({4, 8})->Args({8, 32});

}  // namespace

BENCHMARK_MAIN();
