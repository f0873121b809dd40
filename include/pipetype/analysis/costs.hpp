// pipetype/analysis/costs.hpp — how long each action takes, for the simulator.
//
// `costs` is the uniform model: one time per kind for every stage (a chunk is a stage), plus the
// latency of one transfer between ranks. Defaults: F = 1, B = 2, I = W = B/2, an overlapped F&B
// pair costs its F plus its backward unless `fb` is set, communication 0.
//
// `cost_model` adds overrides on top of a `costs`: per stage and kind (unbalanced stages, a heavy
// loss head), per microbatch (variable sequence lengths make microbatches unequal, as WLB-LLM
// reports), per stage as a scale (a slower device), or per single action. The last matching
// override wins; scales multiply.
//
// Both are usable in constant expressions; `costs` can also be a constexpr variable.
#pragma once

#include <cstddef>
#include <vector>

#include "pipetype/core/action.hpp"

namespace pipetype {

struct costs {
  double f = 1;
  double b = 2;
  double i = -1;   // < 0: b / 2
  double w = -1;   // < 0: b / 2
  double fb = -1;  // overlapped pair; < 0: the sum of its two actions
  double comm = 0;

  constexpr double of(kind k) const noexcept {
    switch (k) {
      case kind::F:
        return f;
      case kind::B:
        return b;
      case kind::I:
        return i < 0 ? b / 2 : i;
      case kind::W:
        return w < 0 ? b / 2 : w;
    }
    return 0;
  }
  constexpr double time(const action& a) const noexcept { return of(a.what); }
  constexpr double pair_time(const action& x, const action& y) const noexcept {
    return fb >= 0 ? fb : time(x) + time(y);
  }
  constexpr double latency(int /*from_stage*/, int /*to_stage*/) const noexcept { return comm; }
};

/// The times and scales pipetype simulates, so that every figure it computes (makespans, bounds,
/// bubbles: sums of up to limits::actions times and transfers) stays finite: a time (a cost or a
/// latency) in [0, max_time], a scale (a rank's speed, a microbatch's or a stage's scale) in
/// [min_scale, max_scale] (or 0 where a time may vanish: an empty stage of a layout, a microbatch;
/// never a speed), and a cost_model's scales above 1 multiplying to at most max_growth.
namespace cost_bounds {
inline constexpr double max_time = 1e12;
inline constexpr double min_scale = 1e-6;
inline constexpr double max_scale = 1e6;
inline constexpr double max_growth = 1e30;
}  // namespace cost_bounds

namespace detail {
constexpr bool time_in_bounds(double t) noexcept { return t >= 0 && t <= cost_bounds::max_time; }  // NaN: false
constexpr bool scale_in_bounds(double x, bool zero = false) noexcept {
  return (x >= cost_bounds::min_scale && x <= cost_bounds::max_scale) || (zero && x == 0);
}
}  // namespace detail

/// Why the times `c` cannot be simulated with finite results, or nullptr: F, B and comm, and I, W
/// and F&B where given (not negative), finite in [0, cost_bounds::max_time].
constexpr const char* cost_error(const costs& c) noexcept {
  auto given = [](double t) { return !(t < 0); };  // a negative I, W or F&B means "derived"; NaN is given
  if (!detail::time_in_bounds(c.f) || !detail::time_in_bounds(c.b) || !detail::time_in_bounds(c.comm) ||
      (given(c.i) && !detail::time_in_bounds(c.i)) || (given(c.w) && !detail::time_in_bounds(c.w)) ||
      (given(c.fb) && !detail::time_in_bounds(c.fb)))
    return "costs: every time (F, B, I, W, F&B, comm) must be a finite number in [0, 1e12] "
           "(pipetype::cost_bounds::max_time), so that simulated times stay finite";
  return nullptr;
}

/// Why rank speeds, microbatch scales or stage scales (scaled_costs, stage_scaled) cannot be
/// simulated with finite results, or nullptr: each finite in [cost_bounds::min_scale, max_scale]
/// (a microbatch or stage scale may also be 0).
constexpr const char* scale_error(const std::vector<double>& rank_speed, const std::vector<double>& microbatch_scale,
                                  const std::vector<double>& stage_scale = {}) noexcept {
  for (const double x : rank_speed)
    if (!detail::scale_in_bounds(x))
      return "rank speeds must be finite numbers in [1e-6, 1e6] (pipetype::cost_bounds), so that simulated times "
             "stay finite";
  for (const double x : microbatch_scale)
    if (!detail::scale_in_bounds(x, true))
      return "microbatch scales must be 0 or finite numbers in [1e-6, 1e6] (pipetype::cost_bounds), so that "
             "simulated times stay finite";
  for (const double x : stage_scale)
    if (!detail::scale_in_bounds(x, true))
      return "stage scales (a layout's weights) must be 0 or finite numbers in [1e-6, 1e6] (pipetype::cost_bounds), "
             "so that simulated times stay finite";
  return nullptr;
}

class cost_model {
 public:
  constexpr cost_model() = default;
  constexpr explicit cost_model(costs base) : base_(base) {}

  /// Time of kind `k` on stage `s`, for every microbatch.
  constexpr cost_model& stage(int s, kind k, double t) {
    rules_.push_back({s, -1, k, t, false});
    return *this;
  }
  /// Multiplies the time of every action on microbatch `mb` by `scale`.
  constexpr cost_model& microbatch(int mb, double scale) {
    rules_.push_back({-1, mb, kind::F, scale, true});
    return *this;
  }
  /// Multiplies the time of every action on stage `s` by `scale` (a rank on a slower device:
  /// scale each of its stages by 1 / its relative speed).
  constexpr cost_model& stage_scale(int s, double scale) {
    rules_.push_back({s, -1, kind::F, scale, true});
    return *this;
  }
  /// Time of one action.
  constexpr cost_model& exact(const action& a, double t) {
    rules_.push_back({a.stage, a.microbatch, a.what, t, false});
    return *this;
  }

  constexpr double time(const action& a) const noexcept {
    double t = base_.of(a.what), scale = 1;
    for (const rule& r : rules_) {
      if (r.scale) {
        if ((r.stage == -1 || r.stage == a.stage) && (r.microbatch == -1 || r.microbatch == a.microbatch))
          scale *= r.value;
        continue;
      }
      if (r.what == a.what && (r.stage == -1 || r.stage == a.stage) &&
          (r.microbatch == -1 || r.microbatch == a.microbatch))
        t = r.value;
    }
    return t * scale;
  }
  constexpr double pair_time(const action& x, const action& y) const noexcept {
    return base_.fb >= 0 ? base_.fb : time(x) + time(y);
  }
  constexpr double latency(int /*from_stage*/, int /*to_stage*/) const noexcept { return base_.comm; }
  constexpr const costs& base() const noexcept { return base_; }

  /// Why this model cannot be simulated with finite results, or nullptr: its base times as
  /// cost_error says, every time it sets in [0, cost_bounds::max_time], every scale in
  /// [min_scale, max_scale], and the scales above 1 that can meet in one action multiplying to at
  /// most max_growth (so no action takes an infinite time). An action meets its stage's scales
  /// and its microbatch's: the bound is the largest stage's product times the largest
  /// microbatch's (scales of different stages never meet, as an uneven layout's many weights).
  constexpr const char* error() const noexcept {
    if (const char* e = cost_error(base_)) return e;
    std::vector<double> by_stage, by_microbatch;  // the growth each stage's, each microbatch's scales make
    auto grow = [](std::vector<double>& by, int key, double g) {
      if (by.size() <= static_cast<std::size_t>(key)) by.resize(static_cast<std::size_t>(key) + 1, 1.0);
      by[static_cast<std::size_t>(key)] *= g;
    };
    double all = 1;  // scales that meet every action (none is made so; counted against each)
    for (const rule& r : rules_) {
      if (!r.scale) {
        if (!detail::time_in_bounds(r.value))
          return "cost_model: a stage's or an action's time must be a finite number in [0, 1e12] "
                 "(pipetype::cost_bounds::max_time)";
        continue;
      }
      if (!detail::scale_in_bounds(r.value, true))
        return "cost_model: a scale (a microbatch's or a stage's, or 1 / a rank's speed) must be 0 or a finite number "
               "in [1e-6, 1e6] (pipetype::cost_bounds)";
      const double g = r.value > 1 ? r.value : 1;
      if (r.stage >= 0 && r.microbatch < 0)
        grow(by_stage, r.stage, g);
      else if (r.microbatch >= 0 && r.stage < 0)
        grow(by_microbatch, r.microbatch, g);
      else
        all *= g;
    }
    double stage_most = 1, microbatch_most = 1;
    for (const double g : by_stage) stage_most = g > stage_most ? g : stage_most;
    for (const double g : by_microbatch) microbatch_most = g > microbatch_most ? g : microbatch_most;
    if (!(all * stage_most * microbatch_most <= cost_bounds::max_growth))  // (an overflow to inf: refused too)
      return "cost_model: its scales multiply an action's time by more than 1e30 (pipetype::cost_bounds::max_growth)";
    return nullptr;
  }

 private:
  struct rule {
    int stage;
    int microbatch;
    kind what;
    double value;
    bool scale;
  };
  costs base_{};
  std::vector<rule> rules_;
};

/// `c` with stage s's times scaled by scale[s] (stages past its end as they were): an uneven split's
/// stage weights (layout_costs, schedule_params::stage_scale).
constexpr cost_model stage_scaled(cost_model c, const std::vector<double>& scale) {
  for (std::size_t s = 0; s < scale.size(); ++s)
    if (scale[s] != 1) c.stage_scale(static_cast<int>(s), scale[s]);
  return c;
}

/// `base` (a `costs`, or a `cost_model` such as an uneven layout's) on uneven hardware and data:
/// every stage s scaled by 1 / rank_speed[stage_rank[s]] (a rank's relative speed, 1 nominal;
/// empty: all 1) and every microbatch j by microbatch_scale[j] (its length relative to the
/// others; empty: all 1). Speeds and scales must be positive.
constexpr cost_model scaled_costs(cost_model c, const std::vector<int>& stage_rank,
                                  const std::vector<double>& rank_speed, const std::vector<double>& microbatch_scale) {
  if (!rank_speed.empty())
    for (std::size_t s = 0; s < stage_rank.size(); ++s) {
      const auto r = static_cast<std::size_t>(stage_rank[s]);
      if (r < rank_speed.size() && rank_speed[r] != 1) c.stage_scale(static_cast<int>(s), 1 / rank_speed[r]);
    }
  for (std::size_t j = 0; j < microbatch_scale.size(); ++j)
    if (microbatch_scale[j] != 1) c.microbatch(static_cast<int>(j), microbatch_scale[j]);
  return c;
}
constexpr cost_model scaled_costs(costs base, const std::vector<int>& stage_rank, const std::vector<double>& rank_speed,
                                  const std::vector<double>& microbatch_scale) {
  return scaled_costs(cost_model{base}, stage_rank, rank_speed, microbatch_scale);
}

template <class C>
concept cost_source = requires(const C& c, const action& a) {
  { c.time(a) } -> std::convertible_to<double>;
  { c.pair_time(a, a) } -> std::convertible_to<double>;
  { c.latency(0, 1) } -> std::convertible_to<double>;
};

}  // namespace pipetype
