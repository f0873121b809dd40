// Run-time cost of the pipeline the explorer runs (and make_plan runs at compile time):
// generate, check + lock-step ticks, lower, verify the lowered program (its ops plain, <false>, or
// packed as a plan keeps them, <true>), simulate.
// BM_build_plan_scaling: the whole of build_plan (check, lower, verify) for GPipe over 30 ranks
// at m = 8k … 64k (up to 3.9 M actions); `ns_per_action` must stay flat as m grows: a pass that
// scans its live slots (GPipe holds m stashes at once) shows as a per-action cost that grows
// with m (bench/README.md, "Plans at scale").
//
//   ./build/release/bench/bench_plan
//   ./build/release/bench/bench_plan --benchmark_filter=scaling
#include <pipetype/pipetype.hpp>

#include <benchmark/benchmark.h>

namespace pt = pipetype;

namespace {

pt::program make(int which, int p, int m) {
  return which == 0 ? pt::make_one_f_one_b(p, m) : pt::make_interleaved_1f1b(p, m, 2);
}

void BM_generate(benchmark::State& s) {
  for (auto _ : s)
    benchmark::DoNotOptimize(
        make(static_cast<int>(s.range(0)), static_cast<int>(s.range(1)), static_cast<int>(s.range(2))));
}
void BM_check(benchmark::State& s) {
  const pt::program p = make(static_cast<int>(s.range(0)), static_cast<int>(s.range(1)), static_cast<int>(s.range(2)));
  for (auto _ : s) benchmark::DoNotOptimize(pt::check_program(p.view()));
  s.SetItemsProcessed(static_cast<std::int64_t>(s.iterations()) * static_cast<std::int64_t>(p.actions.size()));
}
// Packed: the ops as build_plan keeps them (compile/packed_ops.hpp); plain: lower()'s lowered_op values.
template <bool Packed>
auto lowered(const pt::program& p, const pt::program_facts& f) {
  if constexpr (Packed)
    return pt::lower_packed(p.view(), f.tick);
  else
    return pt::lower(p.view(), f.tick);
}
template <bool Packed>
void BM_lower(benchmark::State& s) {
  const pt::program p = make(static_cast<int>(s.range(0)), static_cast<int>(s.range(1)), static_cast<int>(s.range(2)));
  const pt::program_facts f = pt::check_program(p.view());
  for (auto _ : s) benchmark::DoNotOptimize(lowered<Packed>(p, f));
  s.SetItemsProcessed(static_cast<std::int64_t>(s.iterations()) * static_cast<std::int64_t>(p.actions.size()));
}
template <bool Packed>
void BM_verify_lowered(benchmark::State& s) {
  const pt::program p = make(static_cast<int>(s.range(0)), static_cast<int>(s.range(1)), static_cast<int>(s.range(2)));
  const pt::program_facts f = pt::check_program(p.view());
  const auto l = lowered<Packed>(p, f);
  for (auto _ : s) benchmark::DoNotOptimize(pt::verify_lowered(l.view()));
  s.SetItemsProcessed(static_cast<std::int64_t>(s.iterations()) * static_cast<std::int64_t>(l.ops.size()));
}
void BM_simulate(benchmark::State& s) {
  const pt::program p = make(static_cast<int>(s.range(0)), static_cast<int>(s.range(1)), static_cast<int>(s.range(2)));
  for (auto _ : s) benchmark::DoNotOptimize(pt::simulate(p.view(), pt::costs{}));
  s.SetItemsProcessed(static_cast<std::int64_t>(s.iterations()) * static_cast<std::int64_t>(p.actions.size()));
}

void BM_build_plan_scaling(benchmark::State& s) {
  const pt::program p = pt::make_gpipe(30, static_cast<int>(s.range(0)));
  for (auto _ : s) {
    const pt::runtime_plan plan = pt::build_plan(p);
    if (!plan.ok()) s.SkipWithError("GPipe's plan was refused");
    const std::size_t ops = plan.ops().size();
    benchmark::DoNotOptimize(ops);
  }
  const auto n = static_cast<double>(p.actions.size());
  s.counters["actions"] = n;
  s.counters["ns_per_action"] = benchmark::Counter(n * static_cast<double>(s.iterations()) * 1e-9,
                                                   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// {schedule (0: 1F1B, 1: interleaved v=2), ranks, microbatches}
void sizes(benchmark::internal::Benchmark* b) { b->Args({0, 4, 8})->Args({0, 16, 128})->Args({1, 8, 64}); }

}  // namespace

BENCHMARK(BM_generate)->Apply(sizes);
BENCHMARK(BM_check)->Apply(sizes);
BENCHMARK_TEMPLATE(BM_lower, false)->Apply(sizes);
BENCHMARK_TEMPLATE(BM_lower, true)->Apply(sizes);
BENCHMARK_TEMPLATE(BM_verify_lowered, false)->Apply(sizes);
BENCHMARK_TEMPLATE(BM_verify_lowered, true)->Apply(sizes);
BENCHMARK(BM_simulate)->Apply(sizes);
BENCHMARK(BM_build_plan_scaling)
    ->RangeMultiplier(2)
    ->Range(8192, 65536)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2)
    ->UseRealTime();
BENCHMARK_MAIN();
