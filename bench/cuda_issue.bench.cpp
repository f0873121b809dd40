// What issuing one rank's step through the device executor costs on the host, next to a
// hand-written sequence of the same driver calls.
//
//   ./build/release/bench/bench_cuda_issue
//
// The driver counts its calls and does nothing else (a CUDA driver's calls enqueue work
// asynchronously; their own cost is the same in every row, so it is left out). The stage calls
// go through the same function pointers and bound ops in every row. Per case (0: 1F1B p = 4,
// m = 8; 1: DualPipeV p = 4, m = 8; rank 1 of both):
//   BM_executor_step   executor::step, the bound issue list walked in lowered order.
//   BM_executor_unrolled  executor::step_unrolled on the compile-time plan of the same
//                      schedule: the issue list unrolled by the compiler into straight-line code.
//   BM_straight_line   the hand-written baseline: a function whose body is the same calls
//                      written out in order, constants inlined, buffers a pool's base plus a
//                      constant offset, no loop and no dispatch. gen_straight_line.cpp writes it
//                      at build time from one recorded step (straight_line.gen.cpp in the build
//                      folder); the row checks that it makes as many driver calls as the executor.
//   BM_flat_replay     the same calls read from a flat array of records with a switch (what
//                      issuing code that interprets a recording costs).
// The target: executor ≤ 1.05 × straight line.
#include "cuda_issue.hpp"

#include <pipetype/cuda/record.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

namespace pc = pipetype::cuda;
using namespace pipetype_bench;

namespace {

void count_ops(benchmark::State& state, int ops) {
  state.counters["ops"] = ops;
  state.counters["ns_per_op"] = benchmark::Counter(static_cast<double>(ops) * static_cast<double>(state.iterations()),
                                                   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_executor_step(benchmark::State& state) {
  const pt::runtime_plan plan = plan_of(static_cast<int>(state.range(0)));
  auto model = model_of(plan);
  counting_driver d;
  auto ex = executor_of(plan, model, d);
  const std::vector<float> batch = batch_of(plan);
  for (auto _ : state) ex.step(batch.data());
  count_ops(state, ex.ops());
}

constexpr auto static_1f1b = pt::make_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>>();
constexpr auto static_dualpipe_v = pt::make_plan<pt::dualpipe_v<pt::ranks<4>, pt::microbatches<8>>>();

template <const auto& Plan>
void run_unrolled(benchmark::State& state, const pt::runtime_plan& plan) {
  auto model = model_of(plan);
  counting_driver d, check;
  pc::executor<counting_driver> ex{
      Plan, model, d, {.rank = bench_rank, .comms = std::vector<int>(Plan.lowered().comms.size(), 0)}};
  const std::vector<float> batch = batch_of(plan);
  {  // the same program as the run-time plan's: as many ops and driver calls
    auto rt = executor_of(plan, model, check);
    rt.step(batch.data());
    ex.step_unrolled<Plan, bench_rank>(batch.data());
    if (d.calls != check.calls || rt.ops() != ex.ops()) {
      state.SkipWithError("the compile-time plan differs from the run-time plan");
      return;
    }
  }
  for (auto _ : state) ex.step_unrolled<Plan, bench_rank>(batch.data());
  count_ops(state, ex.ops());
}

void BM_executor_unrolled(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const pt::runtime_plan plan = plan_of(which);
  if (which == 0)
    run_unrolled<static_1f1b>(state, plan);
  else
    run_unrolled<static_dualpipe_v>(state, plan);
}

// The generated straight-line step, over pools allocated as the executor allocates them.
void BM_straight_line(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const straight_line& sl = straight_line_of(which);
  const pt::runtime_plan plan = plan_of(which);
  auto model = model_of(plan);
  const std::vector<pt::stage_entry> entries = pt::entries_of(model);
  counting_driver d;
  std::vector<std::byte*> pools;
  for (const std::size_t n : sl.pool_bytes) pools.push_back(static_cast<std::byte*>(d.allocate(n)));
  std::vector<pt::bound_op> calls(static_cast<std::size_t>(sl.stage_calls));
  sl.bind(d, pools.data(), entries.data(), calls.data());
  const std::vector<float> batch = batch_of(plan);
  const pt::feed_tensor source{reinterpret_cast<const std::byte*>(batch.data()), 16 * sizeof(float)};
  const pt::step_feed b{&source};
  {  // as many driver calls as the executor's step
    counting_driver ed;
    auto ex = executor_of(plan, model, ed);
    ex.step(batch.data());
    sl.step(d, pools.data(), calls.data(), b);
    if (d.calls != ed.calls || sl.ops != ex.ops()) {
      state.SkipWithError("the generated step does not match the executor's (rebuild gen_straight_line)");
      return;
    }
  }
  for (auto _ : state) sl.step(d, pools.data(), calls.data(), b);
  count_ops(state, sl.ops);
}

// The same calls replayed from a flat array recorded from one step.
void BM_flat_replay(benchmark::State& state) {
  const pt::runtime_plan plan = plan_of(static_cast<int>(state.range(0)));
  auto model = model_of(plan);
  pc::record_driver rec;
  auto ex = executor_of(plan, model, rec);
  std::vector<float> batch = batch_of(plan);
  rec.clear();
  ex.step(batch.data());
  // compact: one 32-byte record per call; the stage calls' contexts in a side table
  const auto entries = pt::entries_of(model);
  struct flat {
    pc::record_driver::call_kind what;
    int a, b, c;  // stream, event or comm, peer / stage-call index
    std::size_t n;
    const void* p;
  };
  std::vector<flat> calls;
  std::vector<pt::bound_op> stage_calls;
  const int L = plan.compute().lane_length();
  for (const auto& c : rec.calls()) {
    flat f{
        c.what,
        c.stream,
        c.what == pc::record_driver::call_kind::send || c.what == pc::record_driver::call_kind::recv ? c.comm : c.event,
        c.peer,
        c.bytes,
        c.ptr};
    if (c.what == pc::record_driver::call_kind::compute) {
      const auto& e = entries[static_cast<std::size_t>(c.stage % L)];
      pt::bound_op op;
      op.fn = e.fn[c.kind == 'F' ? 0 : c.kind == 'B' ? 1 : c.kind == 'I' ? 2 : 3];
      op.obj = e.obj;
      op.microbatch = c.microbatch;
      op.entry = &e;
      op.in = reinterpret_cast<std::byte*>(batch.data());
      f.c = static_cast<int>(stage_calls.size());
      stage_calls.push_back(op);
    }
    calls.push_back(f);
  }
  counting_driver d;
  const pt::step_feed b{};  // every op reads its `in`
  using ck = pc::record_driver::call_kind;
  for (auto _ : state)
    for (const flat& f : calls) switch (f.what) {
        case ck::wait:
          d.wait(f.a, f.b);
          break;
        case ck::record:
          d.record(f.b, f.a);
          break;
        case ck::group_start:
          d.group_start();
          break;
        case ck::group_end:
          d.group_end();
          break;
        case ck::send:
          d.send(f.p, f.n, f.c, f.b, f.a);
          break;
        case ck::recv:
          d.recv(const_cast<void*>(f.p), f.n, f.c, f.b, f.a);
          break;
        case ck::compute: {
          const pt::bound_op& op = stage_calls[static_cast<std::size_t>(f.c)];
          op.fn(op.obj, op, b);
          break;
        }
        default:
          break;
      }
  count_ops(state, ex.ops());
}

}  // namespace

// 0: 1F1B p = 4, m = 8; 1: DualPipeV p = 4, m = 8 (rank 1)
BENCHMARK(BM_executor_step)->Arg(0)->Arg(1);
BENCHMARK(BM_executor_unrolled)->Arg(0)->Arg(1);
BENCHMARK(BM_straight_line)->Arg(0)->Arg(1);
BENCHMARK(BM_flat_replay)->Arg(0)->Arg(1);

BENCHMARK_MAIN();
