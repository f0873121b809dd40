// pipetype/analysis/simulate.hpp — event simulation of a compute program under a cost model.
//
// Each rank runs its actions in order; an action starts when its rank is free and its inputs
// exist: F(s,j) after F(s−1,j), B/I(s,j) after F(s,j) and B/I(s+1,j) (s ± 1 within s's lane),
// W(s,j) after I(s,j), an input from another rank arriving `latency` after its producer ends.
// With a stage graph given as edges (program.hpp), F(s,j) waits for the F of every producer and
// B/I(s,j) for the input gradient of every consumer.
// An overlapped pair starts when both halves may and takes `pair_time`. This is the dataflow the
// executors realise; the rendezvous order of the lowered program is proved separately
// (verify_lowered.hpp).
//
// Figures:
//   makespan          one isolated step: first start to last end
//   rank span         a rank's last end − first start; `max_rank_span` is the step period when
//                     consecutive steps overlap (the figure the zero-bubble paper optimises)
//   busy / idle       per rank; idle = makespan − busy
//   bubble fraction   Σ idle / (ranks × makespan)
//   activation curve  per rank, live activations after each action (memory_model units)
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/core/memory.hpp"
#include "pipetype/core/program.hpp"

namespace pipetype {

struct rank_stats {
  double first_start = 0;
  double last_end = 0;
  double busy = 0;
  int peak_units = 0;
  constexpr double span() const noexcept { return last_end - first_start; }
};

namespace detail {

/// Fills start/end per action and stats per rank. Returns false if the program cannot finish
/// (verify reports why).
template <cost_source C>
constexpr bool simulate_into(program_view p, const C& c, const memory_model& mem, std::span<double> start,
                             std::span<double> end, std::span<int> live_after, std::span<rank_stats> stats) {
  const int S = p.stages, m = p.microbatches, P = p.ranks;
  const std::size_t n = static_cast<std::size_t>(S) * static_cast<std::size_t>(m);
  constexpr double unknown = -1;
  std::vector<double> fend(n, unknown), gend(n, unknown), iend(n, unknown);
  const std::vector<int> owner = detail::stage_owners(p);
  std::vector<int> ptr(p.begin.begin(), p.begin.end() - 1);
  std::vector<double> free_at(static_cast<std::size_t>(P), 0.0);
  std::vector<int> live(static_cast<std::size_t>(P), 0);
  for (auto& st : stats) st = rank_stats{};
  // a stage graph given as edges: every producer and consumer (program.hpp); a chain keeps s ± 1
  stage_links links;  // (assigned: g++ 12 destroys `c ? f() : T{}` twice in a constant expression)
  if (p.has_edges()) links = links_of(p);
  // Earliest start allowed by the inputs of `a` on rank r, or unknown; `missing` gets the key of
  // the first input not produced yet (kind · n + cell: 0 F, 1 B/I, 2 I).
  std::size_t missing = 0;
  auto input_time = [&](const action& a, int r) -> double {
    const std::size_t q = key(a.stage, a.microbatch, m);
    double t = 0;
    auto need = [&](double e, int stage, std::size_t k) {
      if (t == unknown) return;
      if (e == unknown) {
        t = unknown;
        missing = k;
        return;
      }
      const double arrive = owner[static_cast<std::size_t>(stage)] == r ? e : e + c.latency(stage, a.stage);
      if (arrive > t) t = arrive;
    };
    const auto st = static_cast<std::size_t>(a.stage);
    switch (a.what) {
      case kind::F:
        if (p.has_edges()) {  // all its inputs
          for (int e = links.pred_begin[st]; e < links.pred_begin[st + 1]; ++e) {
            const int producer_stage = links.pred[static_cast<std::size_t>(e)];
            need(fend[key(producer_stage, a.microbatch, m)], producer_stage, key(producer_stage, a.microbatch, m));
          }
        } else if (!p.lane_head(a.stage)) {
          const std::size_t in = key(a.stage - 1, a.microbatch, m);
          need(fend[in], a.stage - 1, in);
        }
        break;
      case kind::B:
      case kind::I:
        need(fend[q], a.stage, q);
        if (p.has_edges()) {  // the gradient of every consumer
          for (int e = links.grad_begin[st]; e < links.grad_begin[st + 1]; ++e) {  // (none over a detached edge)
            const int consumer = links.grad[static_cast<std::size_t>(e)];
            need(gend[key(consumer, a.microbatch, m)], consumer, n + key(consumer, a.microbatch, m));
          }
        } else if (!p.lane_tail(a.stage)) {
          const std::size_t in = key(a.stage + 1, a.microbatch, m);
          need(gend[in], a.stage + 1, n + in);
        }
        break;
      case kind::W:
        need(iend[q], a.stage, 2 * n + q);
        break;
    }
    return t;
  };
  // Event-driven: a rank runs as far as its inputs allow, then waits on the list of the input it
  // lacks (`wait_head`, linked by `wait_next`) until that input's producer wakes it. Start times
  // depend only on the inputs' end times and the rank's own order, not on which rank goes first,
  // so this is the dataflow above in O(actions), where sweeping every rank until none moves cost
  // up to O(ranks²) (a chain's backwards move one rank per sweep).
  std::size_t remaining = p.actions.size();
  std::vector<char> started(static_cast<std::size_t>(P), 0);
  const bool forwards_only = is_forward_only(p);  // an activation lives only through its F
  std::vector<int> ready;
  ready.reserve(static_cast<std::size_t>(P));
  for (int r = P - 1; r >= 0; --r)
    if (ptr[static_cast<std::size_t>(r)] < p.begin[static_cast<std::size_t>(r) + 1]) ready.push_back(r);
  std::vector<int> wait_head(3 * n, -1), wait_next(static_cast<std::size_t>(P), -1);
  auto produced = [&](std::size_t k) {
    for (int w = wait_head[k]; w != -1; w = wait_next[static_cast<std::size_t>(w)]) ready.push_back(w);
    wait_head[k] = -1;
  };
  while (!ready.empty()) {
    const int r = ready.back();
    ready.pop_back();
    const std::size_t ru = static_cast<std::size_t>(r);
    while (ptr[ru] < p.begin[ru + 1]) {
      const std::size_t k = static_cast<std::size_t>(ptr[ru]);
      const action& a = p.actions[k];
      const std::size_t width = a.overlapped ? 2 : 1;
      double t0 = free_at[ru];
      bool ok = true;
      for (std::size_t d = 0; d < width && ok; ++d) {
        const double t = input_time(p.actions[k + d], r);
        if (t == unknown)
          ok = false;
        else if (t > t0)
          t0 = t;
      }
      if (!ok) {
        wait_next[ru] = wait_head[missing];
        wait_head[missing] = r;
        break;
      }
      const double dur = width == 2 ? c.pair_time(a, p.actions[k + 1]) : c.time(a);
      for (std::size_t d = 0; d < width; ++d) {
        const action& x = p.actions[k + d];
        start[k + d] = t0;
        end[k + d] = t0 + dur;
        const std::size_t q = key(x.stage, x.microbatch, m);
        if (x.what == kind::F) fend[q] = t0 + dur, produced(q);
        if (is_input_backward(x.what)) gend[q] = t0 + dur, produced(n + q);
        if (x.what == kind::I) iend[q] = t0 + dur, produced(2 * n + q);
        live[ru] += mem.delta(x.what) * (p.has_edges() ? inputs_held(links.pred_begin.data(), x.stage) : 1);
        if (live[ru] > stats[ru].peak_units) stats[ru].peak_units = live[ru];
        if (forwards_only)
          live[ru] -= mem.delta(kind::F) * (p.has_edges() ? inputs_held(links.pred_begin.data(), x.stage) : 1);
        live_after[k + d] = live[ru];
      }
      if (!started[ru]) {
        started[ru] = 1;
        stats[ru].first_start = t0;
      }
      stats[ru].last_end = t0 + dur;
      stats[ru].busy += dur;
      free_at[ru] = t0 + dur;
      ptr[ru] += static_cast<int>(width);
      remaining -= width;
    }
  }
  return remaining == 0;
}

}  // namespace detail

struct timeline {
  bool complete = false;
  std::vector<double> start;      // [actions]
  std::vector<double> end;        // [actions]
  std::vector<int> live_after;    // [actions] live activation units on its rank after it
  std::vector<rank_stats> ranks;  // [ranks]
  int unit = 2;                   // memory_model::unit the units are counted in

  constexpr double makespan() const noexcept {
    double lo = 0, hi = 0;
    bool any = false;
    for (const rank_stats& r : ranks) {
      if (r.busy == 0 && r.last_end == 0) continue;
      if (!any || r.first_start < lo) lo = r.first_start;
      if (!any || r.last_end > hi) hi = r.last_end;
      any = true;
    }
    return hi - lo;
  }
  constexpr double max_rank_span() const noexcept {
    double s = 0;
    for (const rank_stats& r : ranks) s = r.span() > s ? r.span() : s;
    return s;
  }
  constexpr double busy(int r) const noexcept { return ranks[static_cast<std::size_t>(r)].busy; }
  constexpr double idle(int r) const noexcept { return makespan() - busy(r); }
  constexpr double bubble_fraction() const noexcept {
    const double ms = makespan();
    if (ms <= 0 || ranks.empty()) return 0;
    double idle_sum = 0;
    for (std::size_t r = 0; r < ranks.size(); ++r) idle_sum += ms - ranks[r].busy;
    return idle_sum / (static_cast<double>(ranks.size()) * ms);
  }
  constexpr double peak_activations(int r) const noexcept {
    return static_cast<double>(ranks[static_cast<std::size_t>(r)].peak_units) / unit;
  }
};

struct activation_point {
  double time;
  double activations;
  friend constexpr bool operator==(const activation_point&, const activation_point&) = default;
};

/// Rank r's activation curve: (time, live activations) after each of its actions ends, starting
/// with (first start, 0). A step function; its maximum is peak_activations(r).
constexpr std::vector<activation_point> activation_curve(program_view p, const timeline& t, int r) {
  std::vector<activation_point> out;
  const auto b = static_cast<std::size_t>(p.begin[static_cast<std::size_t>(r)]);
  const auto e = static_cast<std::size_t>(p.begin[static_cast<std::size_t>(r) + 1]);
  if (b == e) return out;
  out.push_back({t.start[b], 0});
  for (std::size_t k = b; k < e; ++k) {
    if (p.actions[k].overlapped) continue;  // a pair ends once, with its second half
    out.push_back({t.end[k], static_cast<double>(t.live_after[k]) / t.unit});
  }
  return out;
}

/// Simulates `p` under `c`. `complete` is false if some action can never start.
template <cost_source C = costs>
constexpr timeline simulate(program_view p, const C& c = {}, const memory_model& mem = {}) {
  timeline t;
  t.unit = mem.unit;
  t.start.assign(p.actions.size(), 0);
  t.end.assign(p.actions.size(), 0);
  t.live_after.assign(p.actions.size(), 0);
  t.ranks.assign(static_cast<std::size_t>(p.ranks), rank_stats{});
  t.complete = detail::simulate_into(p, c, mem, t.start, t.end, t.live_after, t.ranks);
  return t;
}

/// The makespan of `p` under `base` with each rank's speed and each microbatch's scale
/// (scaled_costs: empty, all 1).
constexpr double scaled_makespan(program_view p, const cost_model& base, const std::vector<double>& rank_speed,
                                 const std::vector<double>& microbatch_scale) {
  return simulate(p, scaled_costs(base, {p.stage_rank.begin(), p.stage_rank.end()}, rank_speed, microbatch_scale))
      .makespan();
}

}  // namespace pipetype
