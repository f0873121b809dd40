// pipetype/schedules/zb_local.hpp — a bounded local search over a candidate's orders.
//
// A greedy scheduler decides each action once, by what it sees at that moment; with unequal
// costs, latencies and tight memory its early choices are often slightly off (a W that delays
// the input the rank below waits for, a warm-up forward one slot too early or too late). The
// local search starts from the best candidate and tries, on every rank in turn, moving each W and
// each F one or two places earlier or later in that rank's order (skipping moves that break the
// model: an action of the same kind, or the action's own input, in the way). Each move is scored
// on the same model (zb_evaluate, cut short once a rank must exceed the best span) and kept when
// it shortens the rank span, or the makespan at an equal span; passes repeat while one improves,
// up to `passes`, within the placements `budget` leaves, and stop early at `floor` (the lower
// bound: nothing can be shorter).
#pragma once

#include <utility>

#include "pipetype/schedules/zb_model.hpp"

namespace pipetype::detail {

struct zb_local_result {
  zb_run run;
  int moves = 0;  // moves kept
};

/// True when moving rank r's action at `from` to `to` keeps the rank's order in the model.
constexpr bool zb_move_keeps_order(const zb_orders& o, int r, int from, int to) {
  const int m = o.m, L = 3 * m;
  const int* code = o.code.data() + r * L;
  const int c = code[from], k = c / m, j = c % m;
  const int lo = from < to ? from + 1 : to, hi = from < to ? to : from - 1;
  for (int q = lo; q <= hi; ++q) {
    const int k2 = code[q] / m, j2 = code[q] % m;
    if (k2 == k) return false;                                   // passes an action of its own kind
    if (j2 == j && (from < to ? k2 > k : k2 < k)) return false;  // its own I/W (later) or F/I (earlier)
  }
  return true;
}

constexpr void zb_move(zb_orders& o, int r, int from, int to) {
  int* code = o.code.data() + r * 3 * o.m;
  const int c = code[from];
  if (from < to)
    for (int q = from; q < to; ++q) code[q] = code[q + 1];
  else
    for (int q = from; q > to; --q) code[q] = code[q - 1];
  code[to] = c;
}

constexpr zb_local_result zb_local_search(const zb_tables& z, zb_run start, int passes, long long& budget,
                                          double floor) {
  zb_local_result out{std::move(start), 0};
  if (!out.run.ok || passes <= 0) return out;
  const int P = z.P, m = z.m, L = 3 * m;
  const long long cost = 3LL * P * m;
  zb_orders o = zb_orders_of(z, out.run);
  for (int pass = 0; pass < passes && budget >= cost && out.run.rank_span > floor; ++pass) {
    bool improved = false;
    for (int r = 0; r < P && budget >= cost; ++r)
      for (int from = 0; from < L && budget >= cost; ++from) {
        if (o.code[static_cast<std::size_t>(r * L + from)] / m == 1) continue;  // I's stay; the others move around them
        for (const int d : {-2, -1, 1, 2}) {
          const int to = from + d;
          if (to < 0 || to >= L || !zb_move_keeps_order(o, r, from, to)) continue;
          if (budget < cost) break;
          budget -= cost;
          zb_move(o, r, from, to);
          zb_run t = zb_evaluate(z, o, out.run.rank_span);
          if (t.ok && (t.rank_span < out.run.rank_span ||
                       (t.rank_span == out.run.rank_span && t.makespan < out.run.makespan))) {
            out.run = std::move(t);
            ++out.moves;
            improved = true;
            break;  // the action moved: go on from its old place with the next one
          }
          zb_move(o, r, to, from);
        }
      }
    if (!improved) break;
  }
  return out;
}

}  // namespace pipetype::detail
