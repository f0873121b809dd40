// pipetype/schedules/zb_greedy.hpp — the zero-bubble authors' heuristic, as one of zb_auto's
// candidates.
//
// Source: Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §3.1 (the heuristic), and the
// decisions of its reference scheduler (sail-sg/zero-bubble-pipeline-parallelism,
// `Graph.manual_order` and `initial_solution`, read for its search space; this code is ours).
// zb_auto runs it so that it is never worse than that scheduler on the same model.
//
// The heuristic builds the ranks' orders microbatch by microbatch, timing each action as it goes
// (as early as its rank and inputs allow, the same timeline as the simulator's):
//   warm-up   microbatch 0's F on every rank; then, from the last rank up, as many extra F's as
//             fit before that rank's first I can arrive (and memory allows) — with
//             `bubble_before_first_i`, one more that may delay it — trimmed so that each rank
//             runs fewer than the one above; those F's, then microbatch 0's I from the last rank
//             up;
//   steady    per microbatch, every rank that has F's left takes one more — unless, with
//             `prioritize_i`, it is two F's ahead of the rank below and the F (and the W's memory
//             would force before it) would delay that rank's next I, or the wait is within the
//             worst rank's bubble so far — and a rank takes one only if the rank below does; then
//             its I from the last rank up. Before each F or I: W's while memory would overflow,
//             W's that end before the input arrives, and one more W into a shorter gap (with
//             `greedy_fill` always, without it only when the gap is larger than the worst rank's
//             bubble so far, which it is cheaper to leave idle); rank 0 runs all its W's before
//             its I's once its F's are done;
//   tail      the remaining W's.
// The eight settings of the three flags are tried and the shortest rank span kept. A setting that
// runs out of W's to free memory, or that would place an action before its input, is no
// candidate.
#pragma once

#include <vector>

#include "pipetype/schedules/zb_model.hpp"

namespace pipetype {

namespace detail {

/// The flags as bits: 1 bubble_before_first_i, 2 prioritize_i, 4 greedy_fill.
constexpr int zb_greedy_bits(const zb_greedy_flags& fl) {
  return (fl.bubble_before_first_i ? 1 : 0) | (fl.prioritize_i ? 2 : 0) | (fl.greedy_fill ? 4 : 0);
}

/// One run of the heuristic under `fl`, cut short (not ok) once a rank's span must exceed
/// `cutoff` > 0. With `matters` it also says, as zb_greedy_bits, which flags any of its decisions
/// depended on: under flags that differ only in the others the run is the same, step for step.
constexpr zb_run zb_greedy_schedule(const zb_tables& z, const zb_greedy_flags& fl, double cutoff = 0,
                                    int* matters = nullptr) {
  const int P = z.P, m = z.m;
  constexpr double unknown = -1;
  // raw pointers into the tables: inside the compiler each accessor call costs more than the step
  const double* T = z.t.data();  // F, I, W time of (r, j): T[(kind · P + r) · m + j]
  const double *TF = T, *TI = T + P * m, *TW = T + 2 * P * m;
  const double* LAT = z.lat.data();
  const int* MEM = z.mem.data();
  zb_run out;
  zb_clock clock(P, m);
  double *fend = clock.fend, *iend = clock.iend, *free_at = clock.free_at, *first = clock.first;
  double* bubble = clock.extra;  // idle time after the rank's first F
  scratch<int> iv(5 * P, 0);
  int* nf = iv.data();
  int* ni = nf + P;
  int* nw = nf + 2 * P;
  int* live = nf + 3 * P;
  int* want = nf + 4 * P;          // F's to place this round
  scratch<double> rest(P, unset);  // work still to do on the rank
  for (int r = 0; r < P; ++r) rest[r] = z.work[static_cast<std::size_t>(r)];
  double worst_bubble = 0;
  const double cut = zb_cut_at(cutoff);
  int dummy = 0;
  int& depends = matters ? *matters : dummy;
  depends = 0;
  out.m = m;
  out.placed = scratch<int>(3 * P * m, unset);
  int* placed_out = out.placed.data();
  int placed = 0;
  // Places the rank's next action of kind k (0 F, 1 I, 2 W); false if its input is not placed, or
  // if the rank's span must now exceed `cutoff`.
  auto put = [&](int r, int k) {
    const int j = k == 0 ? nf[r] : k == 1 ? ni[r] : nw[r];
    double ready = 0;
    if (k == 0 && r > 0) {
      if (fend[(r - 1) * m + j] == unknown) return false;
      ready = fend[(r - 1) * m + j] + LAT[2 * r];
    } else if (k == 1) {
      if (fend[r * m + j] == unknown || (r + 1 < P && iend[(r + 1) * m + j] == unknown)) return false;
      ready = fend[r * m + j];
      if (r + 1 < P && iend[(r + 1) * m + j] + LAT[2 * r + 1] > ready) ready = iend[(r + 1) * m + j] + LAT[2 * r + 1];
    }
    const double start = ready > free_at[r] ? ready : free_at[r];
    if (nf[r] > 0) {
      bubble[r] += start - free_at[r];
      worst_bubble = bubble[r] > worst_bubble ? bubble[r] : worst_bubble;
    }
    if (first[r] == unknown) first[r] = start;
    free_at[r] = start + T[(k * P + r) * m + j];
    rest[r] -= free_at[r] - start;
    live[r] += MEM[4 * r + k];
    if (k == 0) fend[r * m + j] = free_at[r], ++nf[r], placed_out[placed++] = zb_code(r, 0, j, m);
    if (k == 1) iend[r * m + j] = free_at[r], ++ni[r], placed_out[placed++] = zb_code(r, 1, j, m);
    if (k == 2) ++nw[r], placed_out[placed++] = zb_code(r, 2, j, m);
    return free_at[r] + rest[r] - first[r] <= cut;
  };
  // Before the rank's next action of kind k, whose input arrives at `arrives` (< 0: no input):
  // W's for memory, W's that fit before the input, one W into a shorter gap. False: no W frees
  // the memory, or the run is cut.
  auto fill = [&](int r, int k, double arrives) {
    while (live[r] + MEM[4 * r + k] > MEM[4 * r + 3]) {
      if (nw[r] >= ni[r] || !put(r, 2)) return false;
    }
    if (arrives < 0) return true;
    while (nw[r] < ni[r] && free_at[r] + TW[r * m + nw[r]] <= arrives)
      if (!put(r, 2)) return false;
    if (nw[r] < ni[r] && free_at[r] < arrives) {
      const bool wide = arrives - free_at[r] > worst_bubble - bubble[r];
      if (!wide) depends |= 4;
      if ((fl.greedy_fill || wide) && !put(r, 2)) return false;
    }
    return true;
  };
  // the warm-up
  for (int r = 0; r < P; ++r)
    if (!put(r, 0)) return out;
  double arrival = 0;  // when microbatch 0's I reaches the rank below the current one
  for (int r = P - 1; r >= 0; --r) {
    want[r] = 0;
    if (r == P - 1) {
      arrival = fend[r * m] + TI[r * m];
      continue;
    }
    int mem = live[r];
    double t = free_at[r];
    const double due = arrival + LAT[2 * r + 1];
    for (int j = nf[r]; j < m && mem + MEM[4 * r] <= MEM[4 * r + 3]; ++j) {
      const bool delays = t + TF[r * m + j] > due, late = t >= due;
      if (delays != late) depends |= 1;
      if (fl.bubble_before_first_i ? delays : late) break;
      mem += MEM[4 * r];
      t += TF[r * m + j];
      ++want[r];
    }
    arrival = (t > due ? t : due) + TI[r * m];
  }
  for (int r = 1; r < P; ++r)  // each rank fewer than the one above (when it has F's left)
    while ((want[r] > 0 && want[r] >= want[r - 1] && nf[r] + want[r] < m) || want[r] > want[r - 1]) --want[r];
  for (int r = 0; r < P; ++r)
    for (int q = 0; q < want[r]; ++q)
      if (!put(r, 0)) return out;
  for (int r = P - 1; r >= 0; --r)
    if (!put(r, 1)) return out;
  // the steady state: one microbatch's I per round, and the F's that go before it
  for (int i = 1; i < m; ++i) {
    for (int r = 0; r < P; ++r) {
      want[r] = nf[r] < m ? 1 : 0;
      if (!want[r] || (!fl.prioritize_i && !matters) || r + 1 == P || nf[r] < nf[r + 1] + 2) continue;
      // would prioritize_i hold this F back?
      const double next = free_at[r + 1] + TF[(r + 1) * m + nf[r + 1]] + TI[(r + 1) * m + ni[r + 1]] + LAT[2 * r + 1];
      bool hold = free_at[r] >= next;
      if (!hold) {
        double w_time = 0;  // the W's memory would force before this F
        for (int mem = live[r] + MEM[4 * r], q = nw[r]; mem > MEM[4 * r + 3] && q < ni[r]; ++q)
          w_time += TW[r * m + q], mem += MEM[4 * r + 2];
        hold = free_at[r] + TF[r * m + nf[r]] + w_time > next && next - free_at[r] <= worst_bubble - bubble[r];
      }
      if (hold) depends |= 2;
      if (hold && fl.prioritize_i) want[r] = 0;
    }
    for (int r = P - 2; r >= 0; --r) want[r] = want[r] < want[r + 1] ? want[r] : want[r + 1];
    for (int r = 0; r < P; ++r) {
      if (!want[r]) continue;
      if (r > 0 && fend[(r - 1) * m + nf[r]] == unknown) return out;
      if (!fill(r, 0, r > 0 ? fend[(r - 1) * m + nf[r]] + LAT[2 * r] : -1) || !put(r, 0)) return out;
    }
    for (int r = P - 1; r >= 0; --r) {
      if (r + 1 < P && iend[(r + 1) * m + i] == unknown) return out;
      if (!fill(r, 1, r + 1 < P ? iend[(r + 1) * m + i] + LAT[2 * r + 1] : -1)) return out;
      if (r == 0 && nf[0] == m)
        while (nw[0] < ni[0])
          if (!put(0, 2)) return out;
      if (!put(r, 1)) return out;
    }
  }
  // the tail
  for (int r = 0; r < P; ++r)
    while (nw[r] < m)
      if (!put(r, 2)) return out;
  zb_figures(out, P, first, free_at);
  out.ok = true;
  return out;
}

}  // namespace detail

}  // namespace pipetype
