// pipetype/schedules/zb_list.hpp — zb_auto's list scheduler.
//
// Simulated time runs forward; whenever a rank is free it takes, among the actions whose inputs
// have arrived, the one that can start first — I before F before W on a tie (I is on the critical
// path, W on none) — subject to the memory limit (an F that does not fit waits for W's to release
// memory). Its knobs (`zb_knobs`, zb_auto tries them all):
//   warm-up cap   before its first I, rank r runs at most (p − r) + k forwards, k = 0 .. p, or as
//                 many as memory allows (1F1B's warm-up at k = 0, ZB-H2's at k = p − r − 1);
//                 per rank when `rank_extra` is set (zb_auto's refinement);
//   W filling     a W starts whenever the rank would idle, or only when it ends before the next
//                 input already scheduled to arrive (an input whose producer is not placed yet
//                 cannot be waited for, so the W may still delay it);
//   tie order     I before F, or F before I.
// One run is O(p·m) placements with flat tables: a placement scans the ranks up to 32 of them,
// past that a tournament tree keeps the choice at its root (O(log p)). With `cutoff` > 0 a run
// stops (not ok) once a rank's span must exceed it: the search passes its best span so far.
#pragma once

#include <vector>

#include "pipetype/schedules/zb_model.hpp"

namespace pipetype {

namespace detail {

/// One run: the actions in the order it placed them and the figures of the timeline it built,
/// which is exactly the one the simulator gives that program (every action starts as soon as its
/// rank and inputs allow).
constexpr zb_run zb_list_schedule(const zb_tables& z, const zb_knobs& knobs, double cutoff = 0) {
  const int P = z.P, m = z.m;
  const auto Pu = static_cast<std::size_t>(P);
  constexpr double unknown = -1;
  const double* TF = z.t.data();
  const double* TI = TF + P * m;
  const double* TW = TF + 2 * P * m;
  const double* LAT = z.lat.data();
  const int* MEM = z.mem.data();
  const int* EXTRA = knobs.rank_extra.size() == Pu ? knobs.rank_extra.data() : nullptr;
  scratch<double> dv(6 * P * 1 + 2 * P * m, unknown);
  scratch<double> rest(P, 0.0);  // work still to do on each rank
  for (int r = 0; r < P; ++r)
    for (int k = 0; k < 3; ++k)
      for (int j = 0; j < m; ++j) rest[r] += z.time(k, r, j);
  double* fend = dv.data();  // [P · m] end of F(r, j), of I(r, j)
  double* gend = fend + P * m;
  double* free_at = gend + P * m;  // [P] each
  double* first = free_at + P;
  double* cand = first + P;
  for (int r = 0; r < P; ++r) free_at[r] = 0;
  scratch<int> iv(6 * P, 0);
  int* nf = iv.data();
  int* ni = nf + P;
  int* nw = nf + 2 * P;
  int* live = nf + 3 * P;
  int* ckind = nf + 4 * P;  // 0 I, 1 F, 2 W
  int* dirty = nf + 5 * P;
  const bool ff = knobs.forward_first, gaps = knobs.fill_only_gaps;
  zb_run out;
  out.placed.resize(static_cast<std::size_t>(3 * P * m));
  action* placed_out = out.placed.data();
  // The rank to place next: the earliest candidate start, then the kind (I, F, W), then the
  // lowest rank. Past 32 ranks a tournament tree over the ranks keeps that choice at its root: a
  // placement changes at most three ranks' candidates (its own and its two neighbours'), so a
  // step costs O(log p) instead of a scan of every rank. Up to 32 the scan stays: in the constant
  // evaluator it is cheaper than the tree's bookkeeping (zb_auto<> compiles at these sizes).
  int leaves = P > 32 ? 1 : 0;
  while (leaves > 0 && leaves < P) leaves *= 2;
  scratch<int> tree_v(2 * leaves + 1, -1);
  int* tree = tree_v.data();
  auto wins = [&](int a, int b) {  // a is placed before b
    if (b < 0 || cand[b] == unknown) return a >= 0 && cand[a] != unknown;
    if (a < 0 || cand[a] == unknown) return false;
    return cand[a] != cand[b] ? cand[a] < cand[b] : ckind[a] != ckind[b] ? ckind[a] < ckind[b] : a < b;
  };
  int ndirty = P;
  for (int r = 0; r < P; ++r) dirty[r] = r;  // the ranks whose candidate must be recomputed
  for (int placed = 0, total = 3 * P * m; placed < total; ++placed) {
    for (int d = 0; d < ndirty; ++d) {
      const int r = dirty[d];
      {  // the rank's next choice: the earliest start; ties I, F (or F, I); W fills
        const double t = free_at[r];
        double s_i = unknown, s_f = unknown;
        if (ni[r] < nf[r]) {
          double ready = fend[r * m + ni[r]];
          if (r + 1 < P) {
            const double g = gend[(r + 1) * m + ni[r]];
            ready = g == unknown ? unknown : (g + LAT[2 * r + 1] > ready ? g + LAT[2 * r + 1] : ready);
          }
          if (ready != unknown) s_i = ready > t ? ready : t;
        }
        const int extra = EXTRA ? EXTRA[r] : knobs.warmup_extra;
        if (nf[r] < m && (extra < 0 || ni[r] > 0 || nf[r] < (P - r) + extra) &&
            live[r] + MEM[4 * r] <= MEM[4 * r + 3]) {
          double ready = 0;
          if (r > 0) {
            const double e = fend[(r - 1) * m + nf[r]];
            ready = e == unknown ? unknown : e + LAT[2 * r];
          }
          if (ready != unknown) s_f = ready > t ? ready : t;
        }
        int k = 2;
        double s = unknown;
        const double s1 = ff ? s_f : s_i, s2 = ff ? s_i : s_f;
        if (s1 != unknown) k = ff ? 1 : 0, s = s1;
        if (s2 != unknown && (s == unknown || s2 < s)) k = ff ? 0 : 1, s = s2;
        // a W when the rank would idle; with fill_only_gaps only if it ends before the next input
        if (nw[r] < ni[r] && (s == unknown || t < s) && (!gaps || s == unknown || t + TW[r * m + nw[r]] <= s))
          k = 2, s = t;
        cand[r] = s;
        ckind[r] = k;
      }
      if (leaves == 0) continue;
      int node = leaves + r;
      tree[node] = r;
      for (node /= 2; node >= 1; node /= 2) {
        const int a = tree[2 * node], b = tree[2 * node + 1];
        tree[node] = wins(b, a) ? b : a;
      }
    }
    int best = leaves > 0 ? tree[1] : -1;
    if (leaves == 0)
      for (int r = 0; r < P; ++r)
        if (cand[r] != unknown &&
            (best < 0 || cand[r] < cand[best] || (cand[r] == cand[best] && ckind[r] < ckind[best])))
          best = r;
    if (best < 0 || cand[best] == unknown) return out;  // nothing can start: the limit is too tight
    const int r = best;
    const double start = cand[r];
    double end = start;
    if (ckind[r] == 1) {
      const int j = nf[r]++;
      live[r] += MEM[4 * r];
      end += TF[r * m + j];
      fend[r * m + j] = end;
      placed_out[placed] = F(r, j);
    } else if (ckind[r] == 0) {
      const int j = ni[r]++;
      live[r] += MEM[4 * r + 1];
      end += TI[r * m + j];
      gend[r * m + j] = end;
      placed_out[placed] = I(r, j);
    } else {
      const int j = nw[r]++;
      live[r] += MEM[4 * r + 2];
      end += TW[r * m + j];
      placed_out[placed] = W(r, j);
    }
    if (first[r] == unknown) first[r] = start;
    free_at[r] = end;
    rest[r] -= end - start;
    if (cutoff > 0 && end + rest[r] - first[r] > cutoff) return out;  // cannot beat the best so far
    ndirty = 0;
    dirty[ndirty++] = r;                     // its own state changed,
    if (r > 0) dirty[ndirty++] = r - 1;      // an I of the rank above may now be ready,
    if (r + 1 < P) dirty[ndirty++] = r + 1;  // and an F of the rank below
  }
  zb_figures(out, P, first, free_at);
  out.ok = true;
  return out;
}

}  // namespace detail

}  // namespace pipetype
