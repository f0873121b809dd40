// pipetype/host/stragglers.hpp — the detector of a plan set (schedules/plan_set.hpp): each rank's
// speed from the last step's measured compute times.
//
// A traced step (executor_options::trace) records each op's start and end. Each compute op gives
// a pace: the plan's cost model's time for its action at nominal speed over its measured span. A
// rank's pace is the median of its ops' (so that an op or two stretched by the host, a thread
// preempted on a loaded machine, a page fault, do not move it), and its speed is that pace over
// the fastest rank's, the fastest 1: what plan_set::choose takes. Waiting for an input is not
// counted (only compute ops are), so a rank stalled by a slow neighbour reads as nominal, and
// the slow one as slow.
//
// One step read on a loaded host can still mislead (every op of a rank stretched by a busy
// neighbour process), so `speed_window` keeps the last few steps' speeds and gives each rank's
// median over them: a plan is chosen on what several steps agree on.
//
//   ph::executor ex{set.plans[k].prog ..., model_k, {.trace = true}};
//   ph::speed_window watch{3};
//   ex.step(batch);
//   watch.add(ph::measured_speeds(ex.trace(), plan_k.compute(), costs_k));
//   if (watch.full()) next = set.choose(watch.speeds(), k);
//
// The switch itself is the caller's, between two steps: every rank has finished the step (step()
// returned), so every rank starts the next one under the same plan; the plans' executors were bound
// once, each with its own buffers, and the model's parameters move from one layout to the other
// (a copy) while nothing runs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/compile/lowered.hpp"
#include "pipetype/core/program.hpp"

namespace pipetype::host {

namespace detail {
/// The lower median of `v` (not empty; reordered).
inline double lower_median(std::vector<double>& v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>((v.size() - 1) / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}
}  // namespace detail

/// Each rank's speed in a traced step (see the header comment); 1 where a rank ran nothing.
template <cost_source C>
std::vector<double> measured_speeds(const std::vector<op_time>& trace, program_view plan, const C& costs) {
  const auto P = static_cast<std::size_t>(std::max(0, plan.ranks));
  std::vector<std::vector<double>> paces(P);
  for (const op_time& t : trace) {
    if (t.code != op_code::compute || t.rank < 0 || static_cast<std::size_t>(t.rank) >= P || !(t.end > t.start))
      continue;
    const double modelled = static_cast<double>(costs.time(action{t.what, t.stage, t.microbatch, false}));
    if (modelled > 0) paces[static_cast<std::size_t>(t.rank)].push_back(modelled / (t.end - t.start));
  }
  std::vector<double> pace(P, 0.0), speed(P, 1.0);
  double fastest = 0;
  for (std::size_t r = 0; r < P; ++r) {
    if (paces[r].empty()) continue;
    fastest = std::max(fastest, pace[r] = detail::lower_median(paces[r]));
  }
  if (fastest <= 0) return speed;
  for (std::size_t r = 0; r < P; ++r)
    if (pace[r] > 0) speed[r] = pace[r] / fastest;
  return speed;
}

/// The last `steps` steps' measured speeds (see the header comment): each rank's median over them.
class speed_window {
 public:
  explicit speed_window(int steps = 3) : steps_(static_cast<std::size_t>(std::max(1, steps))) {}
  /// One step's speeds (measured_speeds), the oldest forgotten beyond the window.
  void add(std::vector<double> speeds) {
    if (!seen_.empty() && seen_.front().size() != speeds.size()) seen_.clear();  // another pipeline
    seen_.push_back(std::move(speeds));
    if (seen_.size() > steps_) seen_.erase(seen_.begin());
  }
  /// The window holds `steps` steps.
  bool full() const noexcept { return seen_.size() == steps_; }
  /// Per rank, the lower median of its speeds in the window; empty before the first step.
  std::vector<double> speeds() const {
    if (seen_.empty()) return {};
    std::vector<double> out(seen_.front().size()), v;
    for (std::size_t r = 0; r < out.size(); ++r) {
      v.clear();
      for (const std::vector<double>& s : seen_) v.push_back(s[r]);
      out[r] = detail::lower_median(v);
    }
    return out;
  }

 private:
  std::size_t steps_;
  std::vector<std::vector<double>> seen_;
};

}  // namespace pipetype::host
