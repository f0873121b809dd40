// pipetype/bench.hpp — microbenchmark schedules on your own stages (Google Benchmark).
//
//   struct my_workload {                       // your model and data
//     using model_type = pipetype::uniform_chain<my_stage>;
//     model_type make_model(int stages);        // the model cut into `stages` stages
//     std::span<const float> batch(model_type& model, int microbatches);  // a step's input
//   };
//   int main(int argc, char** argv) {
//     pipetype::bench::kit_options o;
//     o.sizes = {{4, 8}, {4, 16}};              // {ranks, microbatches, chunks, memory limit}
//     pipetype::bench::register_schedules<my_workload>("mine", o);
//     benchmark::Initialize(&argc, argv);
//     benchmark::RunSpecifiedBenchmarks();
//   }
//
// One benchmark per schedule and size, named "<prefix>/<schedule>/p:4/m:8/v:1/mem:0" (v: the
// chunks per rank the schedule runs with; mem: the memory limit in activations per rank, 0 for
// none; `--benchmark_filter` picks). Each iteration
// is one step of your model on the host executor (real time). After the timed steps one more
// step runs traced, and its trace gives the counters:
//   step_ms          the measured step time (mean over the iterations)
//   simulated_ms     the simulator's makespan of the plan under the costs that traced step
//                    measured (measure_costs: per stage and kind, and the transfer latency)
//   ratio            step_ms / simulated_ms: how far the executor is from the schedule's ideal
//   bubble           the simulated bubble fraction under those costs
//   measured_bubble  the traced step's own bubble fraction
//   peak_act         the plan's largest peak of live activations on a rank (a rank's share)
// A schedule that cannot take the sizes, a plan over the memory limit, or a model that lacks
// what the schedule needs (a split backward for the zero-bubble family) is reported as the
// benchmark's error, with the reason, and the other benchmarks run.
//
// `schedules` empty means every built-in schedule; zb-auto searches for the default costs (F = 1,
// B = 2) within the limit. `batch` is called once per benchmark, after make_model, so it may
// attach targets to the model; the span must stay valid while the benchmark runs. A workload may
// also have `void after_step(model_type&)`, called after each timed step: stages accumulate
// their weight gradients over steps, so clear them there if that matters to your stages.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetype/host.hpp"

namespace pipetype::bench {

struct size {
  int ranks = 4;
  int microbatches = 8;
  int chunks = 0;        // 0: the schedule's default (2 for chunked schedules)
  double mem_limit = 0;  // activations per rank, halves allowed; 0: none
};

struct kit_options {
  std::vector<std::string> schedules{};  // empty: every built-in schedule
  std::vector<size> sizes = {{4, 8}};
  int warmup = 1;  // untimed steps before the timed ones
  std::chrono::milliseconds deadline{std::chrono::seconds(60)};
};

template <class W>
concept workload = requires(W& w, typename W::model_type& m) {
  { w.make_model(4) } -> std::convertible_to<typename W::model_type>;
  w.batch(m, 8);
};

namespace detail {

/// The workload's `after_step(model)` when it has one (e.g. to clear accumulated gradients).
template <class W, class M>
void after_step(W& w, M& model) {
  if constexpr (requires { w.after_step(model); }) w.after_step(model);
}

/// The step's plan, or the reason there is none.
inline runtime_plan plan_for(const std::string& name, const size& z, std::string& why) {
  const schedule_info* s = find_schedule(name);
  if (!s) {
    why = "unknown schedule " + name;
    return {};
  }
  const int v = s->chunks ? s->chunks : default_chunks(*s, z.chunks);
  if (const char* e = schedule_error(name, z.ranks, z.microbatches, v)) {
    why = e;
    return {};
  }
  plan_options o;
  // the limit counts a rank's whole share of the model: v chunk activations each
  o.mem_limit_units = static_cast<int>(z.mem_limit * o.memory.unit * v);
  runtime_plan plan = build_plan(make_schedule(name, z.ranks, z.microbatches, v, {costs{}, z.mem_limit}), o);
  if (!plan.ok()) why = explain(plan.result);
  return plan;
}

template <workload W>
void run_one(benchmark::State& state, const std::string& name, const size& z, const kit_options& o) {
  std::string why;
  const runtime_plan plan = plan_for(name, z, why);
  if (!why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  W w;
  auto model = w.make_model(plan.compute().lane_length());
  const auto batch = w.batch(model, plan.compute().microbatches);
  try {
    double step_ms = 0;
    {
      host::executor ex{plan, model, {.deadline = o.deadline}};
      for (int k = 0; k < o.warmup; ++k) ex.step(batch);
      const auto t0 = std::chrono::steady_clock::now();
      for (auto _ : state) {
        ex.step(batch);
        after_step(w, model);
      }
      const std::chrono::duration<double, std::milli> spent = std::chrono::steady_clock::now() - t0;
      step_ms = state.iterations() > 0 ? spent.count() / static_cast<double>(state.iterations()) : 0;
    }
    host::executor traced{plan, model, {.deadline = o.deadline, .trace = true}};
    traced.step(batch);
    trace_options to;
    to.ranks = plan.compute().ranks;
    const step_trace measured = trace_of(traced.trace(), to);
    const cost_model c = measure_costs(measured);
    const timeline t = simulate(plan.compute(), c);
    const int v = std::max(1, plan.compute().lane_length() / std::max(1, plan.compute().ranks));
    double peak = 0;
    for (int r = 0; r < plan.compute().ranks; ++r) peak = std::max(peak, plan.peak_activations(r) / v);
    state.counters["step_ms"] = step_ms;
    state.counters["simulated_ms"] = t.makespan();
    state.counters["bubble"] = t.bubble_fraction();
    state.counters["measured_bubble"] = measured.bubble_fraction();
    state.counters["peak_act"] = peak;
    state.counters["ratio"] = t.makespan() > 0 ? step_ms / t.makespan() : 0;
  } catch (const std::exception& e) {  // the model does not fit the plan, or a step failed
    state.SkipWithError(e.what());
  }
}

inline std::string label(const std::string& prefix, const std::string& name, const size& z) {
  std::string mem = std::to_string(z.mem_limit);
  mem.erase(mem.find_last_not_of('0') + 1);
  if (!mem.empty() && mem.back() == '.') mem.pop_back();
  return prefix + "/" + name + "/p:" + std::to_string(z.ranks) + "/m:" + std::to_string(z.microbatches) +
         "/v:" + std::to_string(z.chunks) + "/mem:" + mem;
}

}  // namespace detail

/// Registers one benchmark per schedule and size (see the header comment).
template <workload W>
void register_schedules(const std::string& prefix, const kit_options& o = {}) {
  std::vector<std::string> names = o.schedules;
  if (names.empty())
    for (const schedule_info& s : schedule_infos) names.emplace_back(s.name);
  for (const std::string& name : names)
    for (size z : o.sizes) {
      if (const schedule_info* s = find_schedule(name)) z.chunks = s->chunks ? s->chunks : default_chunks(*s, z.chunks);
      benchmark::RegisterBenchmark(detail::label(prefix, name, z).c_str(),
                                   [name, z, o](benchmark::State& s) { detail::run_one<W>(s, name, z, o); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
}

}  // namespace pipetype::bench
