// A slow rank, a plan set, and a switch between steps, measured on the host executor
// (schedules/plan_set.hpp, host/stragglers.hpp). Stages sleep for their layers (F = --f ms and
// B = --b ms per decoder layer); the stage on rank --slow-rank sleeps --factor times as long, as a
// throttled device would run. Two runs of --steps steps each:
//   fixed     the nominal plan throughout (what a pipeline without a plan set does)
//   switched  the plan set (the nominal plan and one for each rank slowed by --factor): the
//             nominal plan first; after each step the detector reads each rank's speed from the
//             step's trace and the set chooses the plan to run next
// It prints each run's median step, the modelled makespans of both plans under the slowdown, the
// step at which the switch happened and what choosing and switching took (their time between two
// steps), and the ratio switched / fixed. The model's layers are `--layers` decoder layers over
// --ranks stages; the layers move with the plan (a sleeping stage has no parameters to copy).
//
//   ./build/release/bench/bench_stragglers [--schedule 1f1b] [--ranks 4] [--microbatches 8]
//       [--layers 32] [--slow-rank 1] [--factor 1.5] [--steps 8] [--f 0.5] [--b 1] [--json]
//
// --json prints one object: stragglers.fixed_step_ms, switched_step_ms (measured medians),
// switched_at, chosen, switch_ms, and the modelled fixed_makespan_ms and switched_makespan_ms.
#include <pipetype/host.hpp>
#include <pipetype/pipetype.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../examples/figures.hpp"
#include "../examples/pace.hpp"

namespace pt = pipetype;
namespace ph = pipetype::host;

namespace {

struct layers_sleeper {
  using input = pt::tensor<float, 16>;
  using output = pt::tensor<float, 16>;
  using weight_grad = pt::tensor<float, 1>;
  int layers = 1;
  double factor = 1, f_ms = 1, b_ms = 2;
  float grad[1] = {0};
  void hold(double ms) const { examples::hold(std::chrono::microseconds(static_cast<long>(ms * 1000 * layers * factor))); }
  void forward(const pt::forward_ctx<layers_sleeper>&) { hold(f_ms); }
  void backward(const pt::backward_ctx<layers_sleeper>&) { hold(b_ms); }
  void backward_input(const pt::backward_ctx<layers_sleeper>&) { hold(b_ms / 2); }
  void backward_weight(const pt::backward_ctx<layers_sleeper>&) { hold(b_ms / 2); }
  std::span<float> weight_gradients() { return grad; }
};

}  // namespace

int main(int argc, char** argv) {
  std::string schedule = "1f1b";
  int p = 4, m = 8, layers = 32, slow = 1, steps = 8;
  double factor = 1.5, f = 0.5, b = 1;
  bool json = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--json") {
      json = true, --i;
      continue;
    }
    if (i + 1 >= argc) break;
    const std::string v = argv[i + 1];
    const double x = std::atof(v.c_str());
    if (k == "--schedule")
      schedule = v;
    else if (k == "--ranks")
      p = static_cast<int>(x);
    else if (k == "--microbatches")
      m = static_cast<int>(x);
    else if (k == "--layers")
      layers = static_cast<int>(x);
    else if (k == "--slow-rank")
      slow = static_cast<int>(x);
    else if (k == "--factor")
      factor = x;
    else if (k == "--steps")
      steps = static_cast<int>(x);
    else if (k == "--f")
      f = x;
    else if (k == "--b")
      b = x;
  }
  if (steps < 1 || p < 1 || m < 1 || layers < p) {
    std::fprintf(stderr,
                 "bench_stragglers: --steps, --ranks and --microbatches at least 1, --layers at least --ranks\n");
    return 2;
  }
  if (const char* e = pt::slowdown_error({slow, factor}, p)) {
    std::fprintf(stderr, "bench_stragglers: %s\n", e);
    return 2;
  }
  try {
    std::string text;  // the nominal layout: the layers as evenly as they go
    for (int r = 0; r < p; ++r) text += (r ? "|t*" : "t*") + std::to_string((r + 1) * layers / p - r * layers / p);
    const pt::layer_layout layout = pt::parse_layout(text);
    std::vector<pt::slowdown> scenarios;  // the set holds a plan for each rank slowed by the factor
    for (int r = 0; r < p; ++r) scenarios.push_back({r, factor});
    const pt::plan_set set = pt::make_plan_set(schedule, p, m, layout, pt::costs{.f = f, .b = b}, scenarios);
    std::vector<double> slowed(static_cast<std::size_t>(p), 1.0);
    slowed[static_cast<std::size_t>(slow)] = 1 / factor;
    // every plan bound once: its own model (the layers its layout gives each stage) and executor
    std::deque<pt::uniform_chain<layers_sleeper>> models;
    std::vector<std::unique_ptr<ph::executor<pt::uniform_chain<layers_sleeper>>>> exs;
    std::vector<pt::runtime_plan> plans;
    for (const pt::scenario_plan& sp : set.plans) {
      plans.push_back(pt::build_plan(sp.prog));
      if (!plans.back().ok()) throw std::runtime_error(pt::describe(plans.back().result));
      std::vector<layers_sleeper> stages(static_cast<std::size_t>(p));
      for (int s = 0; s < p; ++s) {
        layers_sleeper& st = stages[static_cast<std::size_t>(s)];
        st.layers = sp.layout.stages[static_cast<std::size_t>(s)].decoder;
        st.factor = s == slow ? factor : 1;  // (one stage per rank: stage s runs on rank s)
        st.f_ms = f, st.b_ms = b;
      }
      models.emplace_back(std::move(stages));
      exs.push_back(std::make_unique<ph::executor<pt::uniform_chain<layers_sleeper>>>(
          plans.back(), models.back(), ph::executor_options{.ordered_gradients = false, .trace = true}));
    }
    std::vector<float> batch(16 * static_cast<std::size_t>(m));
    // fixed: the nominal plan throughout
    exs[0]->step(batch);  // warm-up
    std::vector<double> fixed;
    for (int i = 0; i < steps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      exs[0]->step(batch);
      fixed.push_back(examples::since_ms(t0));
    }
    // switched: the detector after each step, the plan it chooses for the next
    int current = 0, switched_at = -1, chosen = 0;
    double switch_ms = 0;
    std::vector<double> after;
    for (int i = 0; i < steps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      exs[static_cast<std::size_t>(current)]->step(batch);
      const double step_ms = examples::since_ms(t0);
      if (switched_at >= 0) after.push_back(step_ms);
      const auto c0 = std::chrono::steady_clock::now();
      const std::vector<double> speed =
          ph::measured_speeds(exs[static_cast<std::size_t>(current)]->trace(),
                              plans[static_cast<std::size_t>(current)].compute(), set.costs_of(current));
      const int next = set.choose(speed, current);
      if (next != current && switched_at < 0) {
        switched_at = i + 1, switch_ms = examples::since_ms(c0), chosen = next;
        if (!json) {
          std::printf("after step %d the ranks' measured speeds were", i + 1);
          for (const double s : speed) std::printf(" %.3f", s);
          std::printf(": plan %d next\n", next);
        }
      }
      current = next;
    }
    const double fx = examples::median(fixed), sw = examples::median(after);
    if (json) {
      std::printf(
          "{\"schedule\": \"%s\", \"ranks\": %d, \"microbatches\": %d, \"layers\": %d, \"stragglers\": "
          "{\"slow_rank\": %d, \"factor\": %g, \"fixed_step_ms\": %.3f, \"switched_step_ms\": %.3f, \"switched_at\": "
          "%d, "
          "\"chosen\": %d, \"switch_ms\": %.4f, \"fixed_makespan_ms\": %.3f, \"switched_makespan_ms\": %.3f}}\n",
          schedule.c_str(), p, m, layers, slow, factor, fx, sw, switched_at, chosen, switch_ms, set.makespan(0, slowed),
          set.makespan(chosen, slowed));
      return 0;
    }
    std::printf(
        "%s, %d ranks, %d microbatches, %d layers; rank %d runs %.2f× as long; F = %.1f ms, B = %.1f ms a layer\n",
        schedule.c_str(), p, m, layers, slow, factor, f, b);
    for (int k = 0; k < static_cast<int>(set.plans.size()); ++k) {
      std::printf("plan %d: layers", k);
      for (const pt::stage_layers& s : set.plans[static_cast<std::size_t>(k)].layout.stages)
        std::printf(" %d", s.decoder);
      std::printf("; modelled makespan %.2f ms nominal, %.2f ms with the slow rank\n",
                  set.makespan(k, std::vector<double>(static_cast<std::size_t>(p), 1.0)), set.makespan(k, slowed));
    }
    std::printf(
        "fixed plan: median step %.2f ms; with the plan set: median step %.2f ms after the switch (step %d); "
        "switched / fixed %.3f (modelled %.3f); choosing and switching took %.3f ms\n",
        fx, sw, switched_at, sw / fx, set.makespan(chosen, slowed) / set.makespan(0, slowed), switch_ms);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_stragglers: %s\n", e.what());
    return 2;
  }
}
