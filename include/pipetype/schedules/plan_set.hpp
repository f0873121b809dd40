// pipetype/schedules/plan_set.hpp — stragglers without a runtime scheduler: plans held for
// slowdowns, one chosen between steps.
//
// Source: studies of large training fleets report ranks that slow down (thermal throttling, a
// noisy neighbour, a congested link); under pipeline parallelism a slow rank stalls every
// schedule, 1F1B's steady state running at the slowest stage's pace. The remedies in the
// literature re-balance layers across stages and re-plan the schedule for the measured speeds.
// pipetype keeps its promise — nothing decides inside a step what runs next — by building several
// static plans ahead and choosing one between steps.
//
// A plan set (`make_plan_set`) holds, for one schedule, p ranks, m microbatches and a model of
// decoder layers (a layer_layout, one stage per rank), one plan per scenario: the nominal speeds,
// and each `slowdown` (rank r runs `factor` times as long). A scenario's plan moves decoder layers
// off the slow rank (`rebalanced_layout`: the split that makes the busiest rank's time least, the
// embedding and loss kept where they are; then single layers moved from rank to rank while the
// simulated step shortens, since the fill and the drain count too) and runs the schedule over it
// with the scenario's rank speeds (zb-auto searches with them; the others are their own orders).
// Each plan is an ordinary program: build_plan verifies and lowers it.
//
// `choose(speeds)` is the detector's rule: the plan whose simulated makespan under the given
// per-rank speeds (measured: host/stragglers.hpp's measured_speeds) is least, keeping the current
// plan unless another is shorter by more than `margin` (5 % by default), so that noise does not
// flip plans step after step. Switching happens between two steps, so every rank switches at the
// same step, and each plan's buffers are its own executor's, bound once.
#pragma once

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/analysis/layout_costs.hpp"
#include "pipetype/analysis/simulate.hpp"
#include "pipetype/graph/layer_layout.hpp"
#include "pipetype/schedules/registry.hpp"

namespace pipetype {

/// Rank `rank` runs `factor` times as long as nominal (1.5: every action half again as long).
struct slowdown {
  int rank = 0;
  double factor = 1;
};

/// Why `s` is no slowdown of a pipeline of `ranks` ranks, or nullptr.
constexpr const char* slowdown_error(const slowdown& s, int ranks) noexcept {
  if (s.rank < 0 || s.rank >= ranks) return "the slowed rank is not a rank of the pipeline";
  if (!(s.factor > 0) || !std::isfinite(s.factor) || s.factor > 1e6)
    return "a slowdown factor must be a finite number above 0 (1.5: half again as long), at most 1e6";
  return nullptr;
}

/// The layout of `nominal`'s layers, one stage per rank, whose busiest rank is quickest when rank
/// r runs at `speed[r]` (1 nominal): each stage keeps its embedding and loss, and the decoder
/// layers are split so that max over r of weight(stage r) / speed[r] is least (ties: the earlier
/// ranks hold more), each stage keeping at least `at_least` of them. O(p log(L·p)).
inline layer_layout rebalanced_layout(const layer_layout& nominal, const std::vector<double>& speed,
                                      layer_weights w = {}, int at_least = 0) {
  const int p = nominal.size();
  if (static_cast<int>(speed.size()) != p)
    throw std::invalid_argument("rebalanced_layout: one speed per stage of the layout");
  if (const char* e = scale_error(speed, {}, {})) throw std::invalid_argument(e);
  if (!(w.decoder > 0) || !std::isfinite(w.decoder))
    throw std::invalid_argument("rebalanced_layout: a decoder layer must weigh more than 0");
  int decoder = 0;
  std::vector<double> fixed(static_cast<std::size_t>(p));  // each stage's weight without its decoder layers
  for (int r = 0; r < p; ++r) {
    stage_layers s = nominal.stages[static_cast<std::size_t>(r)];
    decoder += s.decoder - at_least;
    s.decoder = at_least;  // (each stage's own minimum counts as fixed)
    fixed[static_cast<std::size_t>(r)] = w.of(s);
  }
  if (at_least < 0 || decoder < 0)
    throw std::invalid_argument("rebalanced_layout: fewer decoder layers than " + std::to_string(at_least) +
                                " for each stage");
  // the decoder layers rank r can take within time T: floor((T·speed − fixed) / w.decoder)
  const auto fits = [&](double T, int r) {
    const double room = (T * speed[static_cast<std::size_t>(r)] - fixed[static_cast<std::size_t>(r)]) / w.decoder;
    return room < 0 ? 0 : static_cast<int>(std::min(room + 1e-9, 1e9));
  };
  const auto holds = [&](double T) {
    long long n = 0;
    for (int r = 0; r < p; ++r) n += fits(T, r);
    return n >= decoder;
  };
  double lo = 0, hi = 1;
  while (!holds(hi)) hi *= 2;
  for (int k = 0; k < 100; ++k) (holds((lo + hi) / 2) ? hi : lo) = (lo + hi) / 2;
  layer_layout out = nominal;
  int left = decoder;
  for (int r = 0; r < p; ++r) {
    const int take = std::min(left, fits(hi, r));
    out.stages[static_cast<std::size_t>(r)].decoder = at_least + take;
    left -= take;
  }
  return out;
}

/// One scenario's plan: the rank speeds it is for, its layout and its program.
struct scenario_plan {
  std::vector<double> speed;  // per rank (1 nominal)
  layer_layout layout;
  program prog;
};

/// Plans held for slowdowns (see the header comment); plans[0] is the nominal one.
struct plan_set {
  std::vector<scenario_plan> plans;
  cost_model per_layer{costs{}};  // the cost of one decoder layer (layout_costs scales it per stage)
  std::vector<double> microbatch_scale{};  // each microbatch's (schedule_params'), empty: all 1
  double margin = 0.05;                    // choose() switches only for a plan shorter by more than this share

  /// Plan k's costs at nominal speed: a decoder layer's, each stage's scaled by its layout weight
  /// (what host/stragglers.hpp's measured_speeds compares a traced step with).
  cost_model costs_of(int k) const {
    return stage_scaled(per_layer, layout_weights(plans.at(static_cast<std::size_t>(k)).layout));
  }
  /// Plan k's simulated makespan when the ranks run at `speed`.
  double makespan(int k, const std::vector<double>& speed) const {
    return scaled_makespan(plans.at(static_cast<std::size_t>(k)).prog.view(), costs_of(k), speed, microbatch_scale);
  }
  /// The plan to run next when the ranks run at `speed` and plan `current` runs now.
  int choose(const std::vector<double>& speed, int current = 0) const {
    int best = current;
    double best_time = makespan(current, speed);
    for (int k = 0; k < static_cast<int>(plans.size()); ++k) {
      const double t = makespan(k, speed);
      if (t < best_time * (1 - margin) || (best != current && t < best_time)) best = k, best_time = t;
    }
    return best;
  }
};

/// The plan set of `schedule` over p ranks (one stage each) and m microbatches for the model
/// `layout` (p stages), a decoder layer costing `per_layer`: the nominal plan, then one per
/// slowdown, in order, each stage of a moved layout keeping at least `at_least` decoder layers. std::invalid_argument
/// for a layout of another size, a bad slowdown or a schedule that is not one stage per rank.
inline plan_set make_plan_set(std::string_view schedule, int p, int m, const layer_layout& layout, costs per_layer,
                              const std::vector<slowdown>& slowdowns, const schedule_params& base = {},
                              int at_least = 0) {
  if (layout.size() != p)
    throw std::invalid_argument("a plan set places one stage per rank: the layout has " +
                                std::to_string(layout.size()) + " stages for " + std::to_string(p) + " ranks");
  const schedule_info* info = find_schedule(schedule);
  if (info && default_chunks(*info) != 1)
    throw std::invalid_argument("a plan set moves layers between one stage per rank: " + std::string(schedule) +
                                " holds " + std::to_string(default_chunks(*info)) + " stages a rank");
  plan_set out;
  out.per_layer = cost_model{per_layer};
  out.microbatch_scale = base.microbatch_scale;
  std::vector<std::vector<double>> speeds{std::vector<double>(static_cast<std::size_t>(p), 1.0)};
  for (const slowdown& s : slowdowns) {
    if (const char* e = slowdown_error(s, p)) throw std::invalid_argument(e);
    std::vector<double> v(static_cast<std::size_t>(p), 1.0);
    v[static_cast<std::size_t>(s.rank)] = 1 / s.factor;
    speeds.push_back(std::move(v));
  }
  // the schedule over a layout for speeds v, and its simulated makespan there
  const auto planned = [&](const layer_layout& l, const std::vector<double>& v) {
    schedule_params params = base;
    params.cost = per_layer;
    params.rank_speed = v;
    params.stage_scale = layout_weights(l);
    scenario_plan sp{v, l, make_schedule(schedule, p, m, 1, params)};
    const program_view pv = sp.prog.view();
    // the layouts put stage r on rank r: a V, two lanes or a graph's own order would not
    bool identity = pv.lanes == 1 && pv.stages == p;
    for (int s = 0; s < pv.stages && identity; ++s) identity = pv.stage_rank[static_cast<std::size_t>(s)] == s;
    if (!identity)
      throw std::invalid_argument("a plan set moves layers between one stage per rank, stage r on rank r: " +
                                  std::string(schedule) + " places its stages otherwise here");
    const double t =
        scaled_makespan(pv, stage_scaled(cost_model{per_layer}, params.stage_scale), v, base.microbatch_scale);
    return std::pair{std::move(sp), t};
  };
  for (const std::vector<double>& v : speeds) {
    if (out.plans.empty()) {  // the nominal plan keeps the model's own layout
      out.plans.push_back(planned(layout, v).first);
      continue;
    }
    // the balanced split, then single layers moved between ranks while the simulated step
    // shortens (the pipeline's fill and drain count too, not only the busiest rank)
    auto [best, best_time] = planned(rebalanced_layout(layout, v, {}, at_least), v);
    for (bool moved = true; moved;) {
      moved = false;
      for (int from = 0; from < p && !moved; ++from)
        for (int to = 0; to < p && !moved; ++to) {
          if (from == to || best.layout.stages[static_cast<std::size_t>(from)].decoder <= at_least) continue;
          layer_layout l = best.layout;
          --l.stages[static_cast<std::size_t>(from)].decoder;
          ++l.stages[static_cast<std::size_t>(to)].decoder;
          auto [cand, t] = planned(l, v);
          if (t < best_time - 1e-9) best = std::move(cand), best_time = t, moved = true;
        }
    }
    out.plans.push_back(std::move(best));
  }
  return out;
}

}  // namespace pipetype
