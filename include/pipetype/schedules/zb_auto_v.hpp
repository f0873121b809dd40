// pipetype/schedules/zb_auto_v.hpp — zb_auto on the V placement: two stages per rank, as ZB-V.
//
// Source: Qi, Wan, Huang, Lin, "Pipeline Parallelism with Controllable Memory", NeurIPS 2024
// (the V placement and its zero-bubble schedule within 1F1B's memory). The search is ours.
//
// Placement: rank r holds stage r (chunk 0, on the way down) and stage 2p − 1 − r (chunk 1, on
// the way back up); the turn p − 1 → p stays on rank p − 1. `zb_problem::costs` then gives each
// of the 2p stages its own time (a chunk is about half a rank's share), and the memory limit
// still counts activations of a rank's whole share: a chunk's F holds half of one, so a rank may
// hold 2 · limit chunk activations (`memory_of(s)` units each).
//
// Candidates, scored on the simulator by the largest rank span, then the makespan:
//   • ZB-V, when it fits the limit;
//   • a list scheduler over the V: whenever a rank is free it takes, of the actions of its two
//     stages whose inputs have arrived, the one that can start first — I before F before W on a
//     tie, and between the two stages the one the knob prefers — within the memory limit. Its
//     knobs: a cap on the forwards (both chunks) a rank runs before its first I, (p − r) + k for
//     k = 0 .. 2p, or memory only; which chunk wins a tie (the returning chunk 1, which finishes
//     a microbatch sooner, or chunk 0); whether F or I wins a tie; W filling as in zb_list.hpp.
// Run time: 8(2p + 2) list runs of O(p·m) placements, each scanning the ranks; all constexpr.
#pragma once

#include <stdexcept>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/analysis/simulate.hpp"
#include "pipetype/core/memory.hpp"
#include "pipetype/core/schedule.hpp"
#include "pipetype/graph/placement.hpp"
#include "pipetype/schedules/zb_model.hpp"
#include "pipetype/schedules/zb_v.hpp"

namespace pipetype {

/// The V list scheduler's knobs (see the header comment).
struct zb_v_knobs {
  int warmup_extra = -1;  // k: at most (p − r) + k forwards before the rank's first I; < 0: memory only
  bool chunk0_first = false;
  bool forward_first = false;
  bool fill_only_gaps = false;
};

namespace detail {

/// One run of the V list scheduler; an empty program (no actions) when the limit let no action
/// start.
constexpr program zb_v_list_schedule(const zb_problem& pr, const zb_v_knobs& kn) {
  const int P = pr.ranks, S = 2 * P, m = pr.microbatches;
  constexpr double unknown = -1;
  auto rank_of = [&](int s) { return s < P ? s : S - 1 - s; };
  std::vector<double> fend(static_cast<std::size_t>(S * m), unknown), iend(fend);
  std::vector<int> nf(static_cast<std::size_t>(S), 0), ni(nf), nw(nf);
  std::vector<int> live(static_cast<std::size_t>(P), 0), forwards(live), backwards(live);
  std::vector<double> free_at(static_cast<std::size_t>(P), 0);
  auto at = [&](int s, int j) { return static_cast<std::size_t>(s * m + j); };
  auto u = [](int i) { return static_cast<std::size_t>(i); };
  program_builder b{P, S, m};
  b.placement(v_shape_placement(P));
  for (int placed = 0, total = 3 * S * m; placed < total; ++placed) {
    int best_r = -1, best_s = -1, best_k = -1;
    double best_t = unknown;
    auto rank_of_kind = [&](int k, int s) {  // the tie order: 0 I, 1 F, 2 W; chunk by the knob
      const int kind_rank = k == 1 ? (kn.forward_first ? 1 : 0) : k == 0 ? (kn.forward_first ? 0 : 1) : 2;
      const bool chunk0 = s < P;
      return kind_rank * 2 + (chunk0 == kn.chunk0_first ? 0 : 1);
    };
    for (int r = 0; r < P; ++r) {
      const double t = free_at[u(r)];
      double r_best = unknown;
      int rs = -1, rk = -1;
      auto offer = [&](double start, int s, int k) {
        if (start == unknown) return;
        if (r_best == unknown || start < r_best || (start == r_best && rank_of_kind(k, s) < rank_of_kind(rk, rs)))
          r_best = start, rs = s, rk = k;
      };
      const int cap = kn.warmup_extra < 0 ? never : (P - r) + kn.warmup_extra;
      for (const int s : {r, S - 1 - r}) {
        // F
        if (const int j = nf[u(s)]; j < m && live[u(r)] + pr.memory_of(s).f <= zb_limit_units(pr, r) &&
                                    (backwards[u(r)] > 0 || forwards[u(r)] < cap)) {
          double ready = 0;
          bool ok = true;
          if (s > 0) {
            const double e = fend[at(s - 1, j)];
            ok = e != unknown;
            ready = e + (rank_of(s - 1) != r ? static_cast<double>(pr.costs.latency(s - 1, s)) : 0.0);
          }
          if (ok) offer(ready > t ? ready : t, s, 1);
        }
        // I
        if (const int j = ni[u(s)]; j < nf[u(s)]) {
          double ready = fend[at(s, j)];
          bool ok = true;
          if (s + 1 < S) {
            const double g = iend[at(s + 1, j)];
            ok = g != unknown;
            const double in = g + (rank_of(s + 1) != r ? static_cast<double>(pr.costs.latency(s + 1, s)) : 0.0);
            ready = in > ready ? in : ready;
          }
          if (ok) offer(ready > t ? ready : t, s, 0);
        }
      }
      // a W when the rank would idle (with fill_only_gaps, only if it ends before what comes next)
      for (const int s : {r, S - 1 - r}) {
        if (nw[u(s)] >= ni[u(s)]) continue;
        const double d = static_cast<double>(pr.costs.time(W(s, nw[u(s)])));
        if (r_best == unknown || (t < r_best && (!kn.fill_only_gaps || t + d <= r_best))) {
          r_best = t, rs = s, rk = 2;
          break;
        }
      }
      if (rs < 0) continue;
      if (best_r < 0 || r_best < best_t || (r_best == best_t && rank_of_kind(rk, rs) < rank_of_kind(best_k, best_s)))
        best_r = r, best_s = rs, best_k = rk, best_t = r_best;
    }
    if (best_r < 0) return program_builder{P, S, m}.build("zb-auto");  // nothing can start
    const int r = best_r, s = best_s;
    const int j = best_k == 1 ? nf[u(s)]++ : best_k == 0 ? ni[u(s)]++ : nw[u(s)]++;
    const action a = best_k == 1 ? F(s, j) : best_k == 0 ? I(s, j) : W(s, j);
    const double end = best_t + static_cast<double>(pr.costs.time(a));
    live[u(r)] += pr.memory_of(s).delta(a.what);
    if (best_k == 1) fend[at(s, j)] = end, ++forwards[u(r)];
    if (best_k == 0) iend[at(s, j)] = end, ++backwards[u(r)];
    free_at[u(r)] = end;
    b.rank(r).add(a);  // the builder keeps each rank's order
  }
  return std::move(b).build("zb-auto");
}

}  // namespace detail

/// The V search's answer (zb_result's fields; `bound` is the busiest rank's work).
constexpr zb_result zb_auto_v_search(const zb_problem& pr) {
  if (const char* e = zb_problem_error(pr)) throw std::invalid_argument(e);
  const int P = pr.ranks, m = pr.microbatches;
  zb_result best;
  bool have = false;
  auto consider = [&](program prog, const char* source) {
    if (prog.actions.empty() || !detail::zb_fits(prog.view(), pr)) return;
    ++best.candidates;
    const timeline t = simulate(prog.view(), pr.costs, pr.memory);
    if (!t.complete) return;
    if (have &&
        !(t.max_rank_span() < best.rank_span || (t.max_rank_span() == best.rank_span && t.makespan() < best.makespan)))
      return;
    have = true;
    best.rank_span = t.max_rank_span();
    best.makespan = t.makespan();
    best.source = source;
    best.schedule = std::move(prog);
  };
  consider(make_zb_v(P, m), "zb-v");
  for (int k = -1; k <= 2 * P; ++k)
    for (const bool c0 : {false, true})
      for (const bool ff : {false, true})
        for (const bool gaps : {false, true}) consider(detail::zb_v_list_schedule(pr, {k, c0, ff, gaps}), "v-list");
  if (!have) throw std::invalid_argument("zb_auto: no V schedule fits the memory limit");
  for (int r = 0; r < P; ++r) {
    double work = 0;
    for (const action& a : best.schedule.view().rank_actions(r)) work += static_cast<double>(pr.costs.time(a));
    best.bound.work = work > best.bound.work ? work : best.bound.work;
  }
  best.schedule.name = "zb-auto";
  return best;
}

}  // namespace pipetype
