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

/// What a run's knobs decided, for zb_list_memo: per rank the F's it ran before its first I (-1:
/// the run stopped first), and whether the other W filling or the other tie order would have
/// changed any choice it computed.
struct zb_list_trace {
  int* warmup = nullptr;  // [P]
  bool gaps_matter = false;
  bool ties_matter = false;
};

/// One run: the actions in the order it placed them and the figures of the timeline it built,
/// which is exactly the one the simulator gives that program (every action starts as soon as its
/// rank and inputs allow).
constexpr zb_run zb_list_schedule(const zb_tables& z, const zb_knobs& knobs, double cutoff = 0,
                                  zb_list_trace* trace = nullptr) {
  int* warmup = trace ? trace->warmup : nullptr;
  const double cut = zb_cut_at(cutoff);
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
  scratch<double> rest(P, unset);  // work still to do on each rank
  for (int r = 0; r < P; ++r) rest[r] = z.work[static_cast<std::size_t>(r)];
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
  out.m = m;
  out.placed = scratch<int>(3 * P * m, unset);
  int* placed_out = out.placed.data();
  // The rank to place next: the earliest candidate start, then the kind (I, F, W), then the
  // lowest rank. Past 32 ranks a tournament tree over the ranks keeps that choice at its root: a
  // placement changes at most two ranks' candidates (its own and the neighbour waiting for it), so a
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
  if (warmup)
    for (int r = 0; r < P; ++r) warmup[r] = -1;
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
        const bool idle = nw[r] < ni[r] && (s == unknown || t < s);
        const bool fits = s == unknown || t + TW[r * m + nw[r]] <= s;
        if (trace && idle && !fits) trace->gaps_matter = true;
        if (idle && (!gaps || fits)) {
          k = 2, s = t;
        } else if (trace && s1 != unknown && s1 == s2) {
          trace->ties_matter = true;
        }
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
    if (leaves == 0) {
      double bc = unknown;
      int bk = 3;
      for (int q = 0; q < P; ++q) {
        const double c = cand[q];
        if (c != unknown && (bc == unknown || c < bc || (c == bc && ckind[q] < bk))) best = q, bc = c, bk = ckind[q];
      }
    }
    if (best < 0 || cand[best] == unknown) return out;  // nothing can start: the limit is too tight
    const int r = best;
    const double start = cand[r];
    double end = start;
    if (ckind[r] == 1) {
      const int j = nf[r]++;
      live[r] += MEM[4 * r];
      end += TF[r * m + j];
      fend[r * m + j] = end;
      placed_out[placed] = zb_code(r, 0, j, m);
    } else if (ckind[r] == 0) {
      if (warmup && ni[r] == 0) warmup[r] = nf[r];
      const int j = ni[r]++;
      live[r] += MEM[4 * r + 1];
      end += TI[r * m + j];
      gend[r * m + j] = end;
      placed_out[placed] = zb_code(r, 1, j, m);
    } else {
      const int j = nw[r]++;
      live[r] += MEM[4 * r + 2];
      end += TW[r * m + j];
      placed_out[placed] = zb_code(r, 2, j, m);
    }
    if (first[r] == unknown) first[r] = start;
    free_at[r] = end;
    rest[r] -= end - start;
    if (end + rest[r] - first[r] > cut) return out;  // cannot beat the best so far
    ndirty = 0;
    dirty[ndirty++] = r;  // its own state changed; a rank's choice reads only its neighbours' next inputs:
    if (ckind[r] == 0 && r > 0 && ni[r - 1] == ni[r] - 1) dirty[ndirty++] = r - 1;      // the I it waits for,
    if (ckind[r] == 1 && r + 1 < P && nf[r + 1] == nf[r] - 1) dirty[ndirty++] = r + 1;  // the F it waits for
  }
  zb_figures(out, P, first, free_at);
  out.ok = true;
  return out;
}

/// The list runs a search has made, to skip one it already knows. A run is a function of its
/// knobs only through the choices it computes, so another run whose knobs give every one of those
/// choices the same answer is the same run, step for step: it cannot beat it (and if that run was
/// cut short, neither can it). Two such cases are recorded:
///   - a warm-up cap only matters until the rank's first I: if rank r ran w F's before it, every
///     cap above w gives it the same choices (and memory or m cap a rank anyway);
///   - the other W filling, or the other tie order, when no choice of the run depended on it.
class zb_list_memo {
 public:
  constexpr explicit zb_list_memo(const zb_tables& z) : P_(z.P), reach_(static_cast<std::size_t>(z.P), 0) {
    for (int r = 0; r < P_; ++r) {  // memory alone stops rank r's warm-up at limit / F forwards
      const int by_memory = z.limit(r) / z.units(r, 0);
      reach_[static_cast<std::size_t>(r)] = by_memory < z.m ? by_memory : z.m;
    }
  }

  /// Runs the list scheduler unless a recorded run is the same one; a skipped run comes back not
  /// ok, as a cut one does.
  constexpr zb_run run(const zb_tables& z, const zb_knobs& knobs, double cutoff, bool& skipped) {
    const std::size_t at = caps_.size();
    for (int r = 0; r < P_; ++r) caps_.push_back(cap(knobs, r));
    const int order = order_of(knobs);
    skipped = seen(at, order);
    if (skipped) {
      while (caps_.size() > at) caps_.pop_back();
      return {};
    }
    for (int r = 0; r < P_; ++r) warm_.push_back(-1);  // (growing by resize trips clang's constant evaluator)
    zb_list_trace trace{warm_.data() + at};
    zb_run out = zb_list_schedule(z, knobs, cutoff, &trace);
    int covers = 1 << order;  // the tie orders and fillings that give this run
    if (!trace.gaps_matter) covers |= 1 << (order ^ 1);
    if (!trace.ties_matter) covers |= 1 << (order ^ 2);
    if (!trace.gaps_matter && !trace.ties_matter) covers |= 1 << (order ^ 3);
    covers_.push_back(covers);
    return out;
  }

 private:
  static constexpr int none = 1 << 30;  // no cap

  static constexpr int order_of(const zb_knobs& k) { return (k.fill_only_gaps ? 1 : 0) + (k.forward_first ? 2 : 0); }
  constexpr int cap(const zb_knobs& k, int r) const {
    const int extra = k.rank_extra.size() == static_cast<std::size_t>(P_) ? k.rank_extra[static_cast<std::size_t>(r)]
                                                                          : k.warmup_extra;
    const int c = (P_ - r) + extra;
    return extra < 0 || c >= reach_[static_cast<std::size_t>(r)] ? none : c;
  }
  // the caps at `at` (just appended) against every recorded run that covers `order`
  constexpr bool seen(std::size_t at, int order) const {
    const auto Pu = static_cast<std::size_t>(P_);
    for (std::size_t e = 0; e < covers_.size(); ++e) {
      if (!(covers_[e] >> order & 1)) continue;
      bool same = true;
      for (std::size_t r = 0; r < Pu && same; ++r) {
        const int was = caps_[e * Pu + r], now = caps_[at + r], w = warm_[e * Pu + r];
        same = was == now || (w >= 0 && was > w && now > w);
      }
      if (same) return true;
    }
    return false;
  }

  int P_;
  std::vector<int> reach_;   // [P] the most F's rank r can run before its first I
  std::vector<int> caps_;    // [runs · P] each run's cap per rank (none: no cap)
  std::vector<int> warm_;    // [runs · P] each run's F's before the first I (-1: not reached)
  std::vector<int> covers_;  // [runs] bit fill_only_gaps + 2 · forward_first: the settings it equals
};

}  // namespace detail

}  // namespace pipetype
