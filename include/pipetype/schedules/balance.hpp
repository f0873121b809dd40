// pipetype/schedules/balance.hpp — variable-length sequences packed into balanced microbatches.
//
// Source: WLB-LLM (workload-balanced 4D parallelism for LLM training, 2025) and HelixPipe: real
// batches are long-tailed in length and a sequence of t tokens costs about a·t (projections,
// MLP) + b·t² (attention), so microbatches of equal token counts are not of equal work, and a
// pipeline waits for its heaviest. WLB-LLM reports about 1.23× from balancing the packing.
//
// The cost model (`length_cost`): a sequence of t tokens costs t + t²/τ token units, τ
// (`quadratic_at`) the length at which its quadratic part equals its linear part (0: linear only).
// A microbatch costs the sum over its sequences; `scale` says it relative to one sequence of
// `cap` tokens, whose F and B the schedule's costs give (schedule_params::cost), so a packing's
// microbatch scales are schedule_params::microbatch_scale (analysis/costs.hpp: scaled_costs).
//
// Two packings of a step's sequences (lengths in arrival order) under a token cap per microbatch:
//   pack_in_order    arrival order: each sequence joins the open microbatch while the cap allows,
//                    else opens the next (what a data loader that packs as it reads does)
//   pack_balanced    the longest-processing-time rule under the cap: sequences by cost, heaviest
//                    first (ties by arrival), each into the lightest microbatch it fits in, a new
//                    one when none has room; as many microbatches as the tokens need at least
//                    (⌈Σt / cap⌉), or the schedule's next valid count. O(n log n + n·k), k the
//                    microbatches tried per sequence (one unless the cap is nearly full).
// `balance(lengths, cap, cost, schedule, p, v, params)` packs both ways, runs the schedule over each
// (make_schedule with the packing's scales: zb-auto searches with them) and simulates it. The
// balanced step is the best, by simulated makespan, of three packings in four orders each
// (heaviest first, lightest first, heaviest in the middle, as packed): the rule's into the fewest
// microbatches, the rule's into as many as the arrival order made, and the arrival packing itself
// last, so that it is never longer than the arrival order's and keeps the rule's on a tie:
// deterministic, twelve simulations. Each program is an ordinary one: build_plan verifies and
// lowers it.
// `fit_length_cost(lengths per microbatch, measured times)` calibrates τ from a run: the least-squares
// a·Σt + b·Σt² over its microbatches (examples/gpt --lengths fits it to its arrival half's trace).
// Refused with std::invalid_argument, in one sentence: no sequences, a length below 1 or above the
// cap, a cap below 1, a negative or non-finite τ, and a schedule that cannot run the arrival
// packing's microbatch count.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/analysis/simulate.hpp"
#include "pipetype/schedules/registry.hpp"

namespace pipetype {

/// A sequence's cost from its length: t + t²/quadratic_at token units (quadratic_at 0: t).
struct length_cost {
  double quadratic_at = 0;
  constexpr double of(double t) const noexcept { return quadratic_at > 0 ? t + t * t / quadratic_at : t; }
};

/// Sequences packed into microbatches, in the order they run.
struct packing {
  std::vector<std::vector<int>> microbatches;  // each microbatch's sequences (indices into the lengths)
  std::vector<std::int64_t> tokens;            // each microbatch's tokens
  std::vector<double> scale;                   // each microbatch's cost over one sequence of the cap's
  int size() const noexcept { return static_cast<int>(microbatches.size()); }
};

namespace detail {
inline void check_lengths(const std::vector<int>& lengths, int cap, const length_cost& cost) {
  if (cap < 1) throw std::invalid_argument("the token cap must be at least 1, got " + std::to_string(cap));
  if (!(cost.quadratic_at >= 0) || !std::isfinite(cost.quadratic_at))
    throw std::invalid_argument("the length at which attention costs what the rest does must be a finite number >= 0");
  if (lengths.empty()) throw std::invalid_argument("no sequences to pack");
  for (std::size_t i = 0; i < lengths.size(); ++i)
    if (lengths[i] < 1 || lengths[i] > cap)
      throw std::invalid_argument("sequence " + std::to_string(i + 1) + " has length " + std::to_string(lengths[i]) +
                                  (lengths[i] < 1 ? ", below 1" : ", above the token cap " + std::to_string(cap)));
}
/// tokens and scale of each microbatch of `p` (its sequences given).
inline void measure(packing& p, const std::vector<int>& lengths, int cap, const length_cost& cost) {
  p.tokens.assign(p.microbatches.size(), 0);
  p.scale.assign(p.microbatches.size(), 0.0);
  const double unit = cost.of(cap);
  for (std::size_t j = 0; j < p.microbatches.size(); ++j) {
    double c = 0;
    for (const int i : p.microbatches[j]) {
      p.tokens[j] += lengths[static_cast<std::size_t>(i)];
      c += cost.of(lengths[static_cast<std::size_t>(i)]);
    }
    p.scale[j] = c / unit;
  }
}
}  // namespace detail

/// A length_cost fitted to a measured run (`fit_length_cost`): time ≈ a·Σt + b·Σt² per microbatch.
struct length_fit {
  length_cost cost{};  // τ = a / b (0: b was not positive, the fit is linear)
  double a = 0, b = 0;
  std::size_t samples = 0;
};

/// The least-squares fit, through 0, of time_j ≈ a·Σt + b·Σt² over microbatches j, each given by
/// its sequences' lengths (`microbatch_lengths[j]`) and its measured time (`times[j]`, any unit):
/// calibrates the cost model from a run. A fit with b ≤ 0 is redone linear (τ = 0), one with
/// a ≤ 0 quadratic (τ tiny). std::invalid_argument for sizes that differ, no samples, or a time
/// that is negative or not finite.
inline length_fit fit_length_cost(const std::vector<std::vector<int>>& microbatch_lengths,
                                  const std::vector<double>& times) {
  if (microbatch_lengths.size() != times.size() || times.empty())
    throw std::invalid_argument("fit_length_cost: one measured time per microbatch, at least one");
  double s11 = 0, s12 = 0, s22 = 0, s1y = 0, s2y = 0;
  for (std::size_t j = 0; j < times.size(); ++j) {
    if (!(times[j] >= 0) || !std::isfinite(times[j]))
      throw std::invalid_argument("fit_length_cost: a measured time is negative or not finite");
    double x1 = 0, x2 = 0;
    for (const int t : microbatch_lengths[j]) x1 += t, x2 += static_cast<double>(t) * t;
    s11 += x1 * x1, s12 += x1 * x2, s22 += x2 * x2, s1y += x1 * times[j], s2y += x2 * times[j];
  }
  length_fit f;
  f.samples = times.size();
  const double det = s11 * s22 - s12 * s12;
  if (det > 1e-12 * s11 * s22) f.a = (s1y * s22 - s2y * s12) / det, f.b = (s11 * s2y - s12 * s1y) / det;
  if (!(f.b > 0))
    f.a = s11 > 0 ? s1y / s11 : 0, f.b = 0;  // linear
  else if (!(f.a > 0))
    f.a = 0, f.b = s22 > 0 ? s2y / s22 : 0;  // quadratic
  f.cost.quadratic_at = f.b > 0 ? (f.a > 0 ? f.a / f.b : 1e-9) : 0;
  return f;
}

/// Arrival order: each sequence joins the open microbatch while the cap allows.
inline packing pack_in_order(const std::vector<int>& lengths, int cap, const length_cost& cost = {}) {
  detail::check_lengths(lengths, cap, cost);
  packing p;
  std::int64_t open = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (p.microbatches.empty() || open + lengths[i] > cap) p.microbatches.emplace_back(), open = 0;
    p.microbatches.back().push_back(static_cast<int>(i));
    open += lengths[i];
  }
  detail::measure(p, lengths, cap, cost);
  return p;
}

/// The longest-processing-time rule under the cap, into at least `at_least` microbatches (see the
/// header comment); the microbatches in the order the rule opened them.
inline packing pack_balanced(const std::vector<int>& lengths, int cap, const length_cost& cost = {}, int at_least = 0) {
  detail::check_lengths(lengths, cap, cost);
  const std::int64_t total = std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
  const int n = static_cast<int>(lengths.size());
  const int k = std::min(n, std::max(at_least, static_cast<int>((total + cap - 1) / cap)));
  std::vector<int> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return lengths[static_cast<std::size_t>(a)] > lengths[static_cast<std::size_t>(b)];  // cost grows with t
  });
  packing p;
  p.microbatches.resize(static_cast<std::size_t>(k));
  std::vector<double> load(static_cast<std::size_t>(k), 0.0);
  std::vector<std::int64_t> room(static_cast<std::size_t>(k), cap);
  // the microbatches by (load, index) in a min-heap; a sequence takes the lightest one with room
  using entry = std::pair<double, int>;
  std::vector<entry> heap, skipped;
  for (int j = 0; j < k; ++j) heap.push_back({0.0, j});
  const auto lighter = [](const entry& a, const entry& b) { return a > b; };
  std::make_heap(heap.begin(), heap.end(), lighter);
  for (const int i : order) {
    const int t = lengths[static_cast<std::size_t>(i)];
    int chosen = -1;
    skipped.clear();
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), lighter);
      const entry e = heap.back();
      heap.pop_back();
      if (room[static_cast<std::size_t>(e.second)] >= t) {
        chosen = e.second;
        break;
      }
      skipped.push_back(e);
    }
    if (chosen < 0) {  // none has room: a new microbatch
      chosen = static_cast<int>(p.microbatches.size());
      p.microbatches.emplace_back();
      load.push_back(0.0);
      room.push_back(cap);
    }
    const auto c = static_cast<std::size_t>(chosen);
    p.microbatches[c].push_back(i);
    load[c] += cost.of(t);
    room[c] -= t;
    heap.push_back({load[c], chosen});
    std::push_heap(heap.begin(), heap.end(), lighter);
    for (const entry& e : skipped) {
      heap.push_back(e);
      std::push_heap(heap.begin(), heap.end(), lighter);
    }
  }
  for (std::vector<int>& mb : p.microbatches) std::sort(mb.begin(), mb.end());  // arrival order within
  detail::measure(p, lengths, cap, cost);
  return p;
}

/// `p` with its microbatches in `order`.
inline packing reordered(const packing& p, const std::vector<int>& order) {
  packing q;
  for (const int j : order) {
    q.microbatches.push_back(p.microbatches[static_cast<std::size_t>(j)]);
    q.tokens.push_back(p.tokens[static_cast<std::size_t>(j)]);
    q.scale.push_back(p.scale[static_cast<std::size_t>(j)]);
  }
  return q;
}

/// A packing run under a schedule: its program and simulated makespan.
struct packed_step {
  packing pack;
  program prog;
  double makespan = 0;
};

/// Both packings under one schedule (see the header comment).
struct balance_result {
  packed_step arrival, balanced;
  bool from_arrival = false;  // the balanced step keeps the arrival packing (only where strictly shorter)
  const char* order = "";     // the order of its microbatches that was kept
  double ratio() const noexcept { return arrival.makespan > 0 ? balanced.makespan / arrival.makespan : 1; }
};

namespace detail {
/// The schedule over packing `pk` (its scales the microbatch_scale), simulated.
inline packed_step run_packing(const packing& pk, std::string_view schedule, int p, int v, schedule_params params) {
  params.microbatch_scale = pk.scale;
  packed_step out{pk, make_schedule(schedule, p, pk.size(), v, params), 0};
  out.makespan = scaled_makespan(out.prog.view(), cost_model{params.cost}, params.rank_speed, params.microbatch_scale);
  return out;
}
}  // namespace detail

inline balance_result balance(const std::vector<int>& lengths, int cap, const length_cost& cost,
                              std::string_view schedule, int p, int v, const schedule_params& params) {
  balance_result r;
  const packing arrival = pack_in_order(lengths, cap, cost);
  if (const char* e = schedule_error(schedule, p, arrival.size(), v))
    throw std::invalid_argument("the arrival order packs " + std::to_string(arrival.size()) + " microbatches, which " +
                                std::string(schedule) + " cannot run: " + e);
  r.arrival = detail::run_packing(arrival, schedule, p, v, params);
  // the fewest microbatches the tokens need, or the next count the schedule runs
  const std::int64_t total = std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
  int at_least = static_cast<int>((total + cap - 1) / cap);
  while (at_least < static_cast<int>(lengths.size()) && schedule_error(schedule, p, at_least, v)) ++at_least;
  packing base = pack_balanced(lengths, cap, cost, at_least);
  // (at most one microbatch a sequence: past that the rule gives the same packing again)
  for (int extra = 0; schedule_error(schedule, p, base.size(), v) && base.size() < static_cast<int>(lengths.size()) &&
                      extra < static_cast<int>(lengths.size());
       ++extra)
    base = pack_balanced(lengths, cap, cost, base.size() + 1);
  if (const char* e = schedule_error(schedule, p, base.size(), v))
    throw std::invalid_argument("the balanced packing gives " + std::to_string(base.size()) + " microbatches, which " +
                                std::string(schedule) + " cannot run: " + e);
  // each packing in four orders: heaviest first, lightest first, heaviest in the middle, its own;
  // the rule's packing first, the arrival packing as it came last (kept only when strictly better)
  // and the rule again into as many microbatches as the arrival order made (more, smaller ones
  // shorten the fill and drain), when the schedule runs that count
  const packing wide = base.size() < arrival.size() ? pack_balanced(lengths, cap, cost, arrival.size()) : base;
  const bool wide_runs = wide.size() != base.size() && !schedule_error(schedule, p, wide.size(), v);
  bool first = true;
  for (const packing* pk : std::initializer_list<const packing*>{&base, &wide, &arrival}) {
    if (pk == &wide && !wide_runs) continue;
    const int m = pk->size();
    std::vector<int> heaviest(static_cast<std::size_t>(m)), middle(static_cast<std::size_t>(m)),
        own(static_cast<std::size_t>(m));
    std::iota(heaviest.begin(), heaviest.end(), 0);
    std::iota(own.begin(), own.end(), 0);
    std::stable_sort(heaviest.begin(), heaviest.end(), [&](int a, int b) {
      return pk->scale[static_cast<std::size_t>(a)] > pk->scale[static_cast<std::size_t>(b)];
    });
    const std::vector<int> lightest(heaviest.rbegin(), heaviest.rend());
    for (int k = 0, lo = 0, hi = m - 1; k < m; ++k)  // lightest at both ends, heaviest in the middle
      middle[static_cast<std::size_t>(k % 2 == 0 ? lo++ : hi--)] = lightest[static_cast<std::size_t>(k)];
    const char* names[] = {"heaviest first", "lightest first", "heaviest in the middle", "as packed"};
    const std::vector<int>* orders[] = {&heaviest, &lightest, &middle, &own};
    for (int o = 0; o < 4; ++o) {
      packed_step s = detail::run_packing(reordered(*pk, *orders[o]), schedule, p, v, params);
      if (first || s.makespan < r.balanced.makespan) {
        r.balanced = std::move(s);
        r.from_arrival = pk == &arrival;
        r.order = names[o];
      }
      first = false;
    }
  }
  return r;
}

}  // namespace pipetype
