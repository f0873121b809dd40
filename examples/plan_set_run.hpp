// examples/plan_set_run.hpp — the run of a plan set (schedules/plan_set.hpp) that train_mlp and
// examples/gpt share for --plan-set: the nominal plan for the first half of the steps; then, with
// each rank's speed watched over the last 3 steps (host/stragglers.hpp), the set's rule picks the
// next step's plan, and the tool moves its parameters there between two steps. One switch at most.
#pragma once

#include <pipetype/host.hpp>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "figures.hpp"

namespace examples {

class plan_set_run {
 public:
  static constexpr int watched = 3;    // steps whose speeds choose (each rank's median over them)
  static constexpr int min_steps = 4;  // three watched, and one to run the choice

  /// Why `steps` steps cannot run a plan set, or nullptr.
  static const char* steps_error(int steps) {
    return steps < min_steps ? "--plan-set watches 3 steps before it chooses a plan, and runs it a step at least: "
                               "give --steps 4 or more"
                             : nullptr;
  }

  /// `plans[k]` bound from `set.plans[k]`; `slow` the rank slowed in this run; `steps` the run's.
  plan_set_run(const pipetype::plan_set& set, const std::vector<pipetype::runtime_plan>& plans, pipetype::slowdown slow,
               int steps)
      : set_(set),
        plans_(plans),
        slow_(slow),
        steps_(steps),
        slowed_(plans.empty() ? 0 : static_cast<std::size_t>(plans[0].compute().ranks), 1.0) {
    if (slow.rank >= 0 && static_cast<std::size_t>(slow.rank) < slowed_.size())
      slowed_[static_cast<std::size_t>(slow.rank)] = 1 / slow.factor;
  }

  /// The plan the next step runs.
  std::size_t current() const noexcept { return current_; }
  bool switched() const noexcept { return switched_at_ >= 0; }

  /// After a step under current() that took `ms`, `done` steps run in all, its trace `trace`: the
  /// detector watches it; from the half of the run on, with a step left, the rule may choose
  /// another plan, and `move(from, to)` moves the parameters to it (nothing runs meanwhile).
  template <class Move>
  void after(int done, double ms, const std::vector<pipetype::op_time>& trace, Move&& move) {
    (switched() ? switched_ms_ : fixed_ms_).push_back(ms);
    if (switched()) return;
    const auto c0 = std::chrono::steady_clock::now();
    const int k = static_cast<int>(current_);
    watch_.add(pipetype::host::measured_speeds(trace, plans_[current_].compute(), set_.costs_of(k)));
    if (2 * done < steps_ || done >= steps_ || !watch_.full()) return;
    const int next = set_.choose(watch_.speeds(), k);
    if (next == k) return;
    move(current_, static_cast<std::size_t>(next));
    switch_ms_ = since_ms(c0);
    current_ = static_cast<std::size_t>(next);
    switched_at_ = done;
  }

  double fixed_step_ms() const { return examples::median(fixed_ms_); }
  double switched_step_ms() const { return examples::median(switched_ms_); }
  /// The modelled makespans under the slowdown: the nominal plan's, and the plan run last's.
  double fixed_makespan() const { return set_.makespan(0, slowed_); }
  double switched_makespan() const { return set_.makespan(static_cast<int>(current_), slowed_); }

  /// --json's `, "stragglers": {...}` (switched_step_ms null and switched_at −1 where the nominal
  /// plan was kept).
  void print_json() const {
    std::printf(", \"stragglers\": {\"slow_rank\": %d, \"factor\": %g, \"plans\": %zu, \"fixed_step_ms\": %.6f, ",
                slow_.rank, slow_.factor, set_.plans.size(), fixed_step_ms());
    if (switched())
      std::printf("\"switched_step_ms\": %.6f, ", switched_step_ms());
    else
      std::printf("\"switched_step_ms\": null, ");
    std::printf(
        "\"switched_at\": %d, \"chosen\": %zu, \"switch_ms\": %.6f, \"fixed_makespan\": %.9g, \"switched_makespan\": "
        "%.9g}",
        switched_at_, current_, switch_ms_, fixed_makespan(), switched_makespan());
  }
  /// The run's lines of text.
  void print_text() const {
    std::printf("rank %d runs %g× as long; a plan set of %zu plans\n", slow_.rank, slow_.factor, set_.plans.size());
    if (switched())
      std::printf(
          "fixed plan: median step %.3f ms; switched to plan %zu after %d steps: median step %.3f ms (%.3f of it; "
          "modelled %.3f); choosing and switching took %.3f ms\n",
          fixed_step_ms(), current_, switched_at_, switched_step_ms(),
          fixed_step_ms() > 0 ? switched_step_ms() / fixed_step_ms() : 0.0, switched_makespan() / fixed_makespan(),
          switch_ms_);
    else
      std::printf("fixed plan: median step %.3f ms; the detector kept it (no plan shorter by more than %.0f %%)\n",
                  fixed_step_ms(), 100 * set_.margin);
  }

 private:
  const pipetype::plan_set& set_;
  const std::vector<pipetype::runtime_plan>& plans_;
  pipetype::slowdown slow_;
  int steps_;
  std::vector<double> slowed_;  // each rank's speed under the slowdown
  pipetype::host::speed_window watch_{watched};
  std::size_t current_ = 0;
  int switched_at_ = -1;  // the steps run before the switch
  double switch_ms_ = 0;
  std::vector<double> fixed_ms_, switched_ms_;
};

}  // namespace examples
