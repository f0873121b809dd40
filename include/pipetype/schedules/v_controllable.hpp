// pipetype/schedules/v_controllable.hpp — the building-block builder behind v-min and v-half.
//
// Source: Qi, Wan, Huang, Lin, "Pipeline Parallelism with Controllable Memory", NeurIPS 2024
// (arXiv 2405.15362), §3-4, and the authors' greedy builder (zbv_greedy.py in
// sail-sg/zero-bubble-pipeline-parallelism, megatron/core/pipeline_parallel/zerobubble/scheduler),
// restated here in our own terms. v_min.hpp and v_half.hpp state each schedule and its formulas.
//
// On the V placement (rank r holds stage r, chunk 0, and stage 2p − 1 − r, chunk 1) every rank
// does, per microbatch, six unit "slots" of work. The builder counts time in those slots and keeps,
// for each rank, six lanes of m slot numbers each (lane k's j-th entry is microbatch j's op):
//   lane 0: F of chunk 0      lane 1: F of chunk 1      lane 2: I of chunk 1      lane 3: I of chunk 0
//   lane 4: W of chunk 1 (while W's are not split by chunk: 2m W's, one per I)   lane 5: W of chunk 0
// 1. The building block: rank r's lanes 0..3 start at four offsets (the schedule's) and repeat
//    every 6 slots; each free slot takes a pending W (chunk 1's first), in backward order.
// 2. Squeeze, W's placed: in the warm-up (up to rank 0's first chunk-0 I) and the cool-down (from
//    the first F of the last microbatch), in time order, each op moves to the earliest free slot
//    after its inputs at which its rank's peak memory (one unit from F to the W that frees it)
//    stays within the largest peak of any rank before the pass (else it stays); then every op is
//    started as early as its rank's order allows (unit costs).
// 3. The same with the W's taken out and the memory counted as if each free slot ran a pending W,
//    in the cool-down only; W's placed again as in 1 and every op started early; then the W's
//    placed a last time, now per chunk. Each rank's program is its ops in slot order.
// These are the authors' steps: same block, same order of moves, same tie-breaks (earlier slot,
// then lower rank, then lower lane).
#pragma once

#include <algorithm>
#include <vector>

#include "pipetype/core/schedule.hpp"
#include "pipetype/graph/placement.hpp"

namespace pipetype::detail {

/// Slot numbers of a V schedule under construction: rank r's lane k, one slot per microbatch
/// (2m in the merged W lane 4, one per backward of either chunk).
struct v_slots {
  int p = 0, m = 0, lanes = 0;
  int start[7] = {};   // where lane k starts within a rank; start[lanes]: a rank's size
  std::vector<int> t;  // rank by rank, lane by lane

  constexpr v_slots(int p_, int m_, int lanes_) : p(p_), m(m_), lanes(lanes_) {
    for (int k = 0; k < lanes; ++k) start[k + 1] = start[k] + count(k);
    t.assign(static_cast<std::size_t>(p * start[lanes]), 0);
  }
  constexpr int count(int k) const { return k == 4 && lanes == 5 ? 2 * m : m; }
  constexpr int& at(int r, int k, int j) { return t[static_cast<std::size_t>(r * start[lanes] + start[k] + j)]; }
  constexpr int at(int r, int k, int j) const { return t[static_cast<std::size_t>(r * start[lanes] + start[k] + j)]; }
  /// Rank r's last slot.
  constexpr int last(int r) const {
    int x = 0;
    for (int k = 0; k < lanes; ++k) x = std::max(x, at(r, k, count(k) - 1));
    return x;
  }
  /// Rank r's slots 0..last(r): the lane that occupies each, or −1.
  constexpr std::vector<int> occupancy(int r) const {
    std::vector<int> occ(static_cast<std::size_t>(last(r) + 1), -1);
    for (int k = 0; k < lanes; ++k)
      for (int j = 0; j < count(k); ++j) occ[static_cast<std::size_t>(at(r, k, j))] = k;
    return occ;
  }
  /// The first `keep` lanes only.
  constexpr v_slots first_lanes(int keep) const {
    v_slots out{p, m, keep};
    for (int r = 0; r < p; ++r)
      for (int k = 0; k < keep; ++k)
        for (int j = 0; j < count(k); ++j) out.at(r, k, j) = at(r, k, j);
    return out;
  }
};

/// The four lanes F0, F1, I1, I0 of `off` (p × 4 offsets) repeated every 6 slots.
constexpr v_slots v_block(int p, int m, const std::vector<int>& off) {
  v_slots s{p, m, 4};
  for (int r = 0; r < p; ++r)
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < m; ++j) s.at(r, k, j) = off[static_cast<std::size_t>(r * 4 + k)] + 6 * j;
  return s;
}

/// Lanes 0..3 plus their W's: each free slot, in order, takes the oldest pending W (chunk 1's
/// before chunk 0's when `by_chunk`, one lane 4 for all otherwise); the rest follow the last op.
constexpr v_slots v_add_w(const v_slots& in, bool by_chunk) {
  v_slots out{in.p, in.m, by_chunk ? 6 : 5};
  for (int r = 0; r < in.p; ++r) {
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < in.m; ++j) out.at(r, k, j) = in.at(r, k, j);
    const std::vector<int> occ = in.occupancy(r);
    int pending[2] = {0, 0}, placed[2] = {0, 0};
    const int bound = static_cast<int>(occ.size()) - 1;
    for (int i = 0; i <= bound; ++i) {
      const int k = occ[static_cast<std::size_t>(i)];
      if (k == 2 || k == 3) {
        ++pending[by_chunk ? k - 2 : 0];
      } else if (k < 0) {
        for (int w = 0; w < 2; ++w)
          if (pending[w] > 0) {
            --pending[w];
            out.at(r, 4 + w, placed[w]++) = i;
            break;
          }
      }
    }
    int i = bound;
    for (int w = 0; w < 2; ++w)
      while (pending[w] > 0) --pending[w], out.at(r, 4 + w, placed[w]++) = ++i;
  }
  return out;
}

/// Rank r's peak memory in the builder's model: +1 at each F, −1 at each W (with no W lanes,
/// each free slot runs a pending W, as v_add_w places them).
/// Counted over `n` slots of an occupancy (v_slots::occupancy); free slots after the last op
/// change nothing (they only lower the count).
constexpr int v_peak_of(const int* occ, int n, int lanes) {
  int cur = 0, peak = 0, pending = 0;
  for (int i = 0; i < n; ++i) {
    const int k = occ[i];
    if (k == 0 || k == 1)
      ++cur;
    else if (k == 2 || k == 3)
      ++pending;
    else if (k >= 4)
      --cur;
    else if (lanes == 4 && pending > 0)
      --pending, --cur;
    peak = std::max(peak, cur);
  }
  return peak;
}
constexpr int v_peak(const v_slots& s, int r) {
  const std::vector<int> occ = s.occupancy(r);
  return v_peak_of(occ.data(), static_cast<int>(occ.size()), s.lanes);
}

/// Every op started as early as its rank's order (by slot) and its inputs allow, unit costs and
/// no latency: the builder's inputs are the V's edges (F0 from the rank above, F1 and I0 from
/// the rank below, I1 from the rank above, each lane 1..3 after the lane before it on the same
/// rank and microbatch) and each lane's microbatches in order.
constexpr v_slots v_eager(const v_slots& s) {
  const int p = s.p, L = s.lanes, M = 2 * s.m;
  std::vector<long long> order;
  for (int r = 0; r < p; ++r)
    for (int k = 0; k < L; ++k)
      for (int j = 0; j < s.count(k); ++j)
        order.push_back(((static_cast<long long>(s.at(r, k, j)) * p + r) * L + k) * M + j);
  std::sort(order.begin(), order.end());
  v_slots end{p, s.m, L};
  std::vector<int> free(static_cast<std::size_t>(p), 0);
  for (long long key : order) {
    const int j = static_cast<int>(key % M), k = static_cast<int>(key / M % L), r = static_cast<int>(key / M / L % p);
    int start = free[static_cast<std::size_t>(r)];
    if ((k == 0 || k == 2) && r > 0) start = std::max(start, end.at(r - 1, k, j));
    if ((k == 1 || k == 3) && r + 1 < p) start = std::max(start, end.at(r + 1, k, j));
    if (k >= 1 && k <= 3) start = std::max(start, end.at(r, k - 1, j));
    if (j > 0) start = std::max(start, end.at(r, k, j - 1));
    end.at(r, k, j) = start + 1;
    free[static_cast<std::size_t>(r)] = start + 1;
  }
  for (int& x : end.t) --x;  // starts
  return end;
}

/// Step 2 (`with_w`) or 3 of the header: moves ops earlier where memory allows, then v_eager.
constexpr v_slots v_squeeze(const v_slots& in, bool with_w) {
  v_slots s = in;
  if (with_w) s = v_add_w(in, false);
  const int p = s.p, m = s.m, L = s.lanes;
  int limit = 0;
  for (int r = 0; r < p; ++r) limit = std::max(limit, v_peak(s, r));
  std::vector<int> from(static_cast<std::size_t>(p) + 1, 0);  // rank r's slots: used[from[r] + slot]
  for (int r = 0; r < p; ++r) from[static_cast<std::size_t>(r) + 1] = from[static_cast<std::size_t>(r)] + s.last(r) + 1;
  std::vector<char> used(static_cast<std::size_t>(from.back()), 0);
  std::vector<int> occ;  // every rank's occupancy at from[r], kept as ops move (moves only go earlier)
  for (int r = 0; r < p; ++r) {
    const std::vector<int> o = s.occupancy(r);
    occ.insert(occ.end(), o.begin(), o.end());
  }
  std::vector<int> next(static_cast<std::size_t>(p * L), 0);
  int phase = 0;  // 0 warm-up, 1 steady (kept), 2 cool-down
  int total = 0;
  for (int k = 0; k < L; ++k) total += p * s.count(k);
  for (int n = 0; n < total; ++n) {
    int br = -1, bk = -1, bt = 0;
    for (int r = 0; r < p; ++r)
      for (int k = 0; k < L; ++k) {
        const int j = next[static_cast<std::size_t>(r * L + k)];
        if (j < s.count(k) && (br < 0 || s.at(r, k, j) < bt)) br = r, bk = k, bt = s.at(r, k, j);
      }
    const int j = next[static_cast<std::size_t>(br * L + bk)]++;
    int& slot = s.at(br, bk, j);
    char* busy = used.data() + from[static_cast<std::size_t>(br)];
    if (bk == 3 && br == 0 && phase == 0) phase = 1;
    if (phase == 1 || (phase == 0 && !with_w)) {
      if (phase == 1 && bk == 0 && j == m - 1) phase = 2;
      busy[slot] = 1;
      continue;
    }
    int after = -1;  // the latest input's slot
    if ((bk == 0 || bk == 2) && br > 0) after = std::max(after, s.at(br - 1, bk, j));
    if ((bk == 1 || bk == 3) && br + 1 < p) after = std::max(after, s.at(br + 1, bk, j));
    if (bk >= 1 && bk <= 3) after = std::max(after, s.at(br, bk - 1, j));
    if (bk == 4) {  // the j-th backward (I) of either chunk on this rank
      int a = 0, b = 0, x = 0;
      for (int c = 0; c <= j; ++c)
        x = (b >= m || (a < m && s.at(br, 2, a) < s.at(br, 3, b))) ? s.at(br, 2, a++) : s.at(br, 3, b++);
      after = std::max(after, x);
    }
    if (j > 0) after = std::max(after, s.at(br, bk, j - 1));
    const int was = slot;
    int* lane_of = occ.data() + from[static_cast<std::size_t>(br)];
    const int n_slots = from[static_cast<std::size_t>(br) + 1] - from[static_cast<std::size_t>(br)];
    const auto move_to = [&](int c) { lane_of[slot] = -1, lane_of[c] = bk, slot = c; };
    bool ok = false;
    for (int c = after + 1; c < was && !ok; ++c)
      if (!busy[c]) {
        move_to(c);
        ok = v_peak_of(lane_of, n_slots, L) <= limit;
      }
    if (!ok) move_to(was);
    busy[slot] = 1;
  }
  if (!with_w) s = v_add_w(s, false);
  return v_eager(s);
}

/// The V program of the building block `off` (p × 4 offsets of lanes 0..3), built as the
/// header says.
constexpr program make_v_block_schedule(int p, int m, const std::vector<int>& off, const char* name) {
  const v_slots warm = v_squeeze(v_block(p, m, off), true);
  const v_slots s = v_add_w(v_squeeze(warm.first_lanes(4), false).first_lanes(4), true);
  program_builder b{p, 2 * p, m};
  b.placement(v_shape_placement(p));
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    const int up = 2 * p - 1 - r;
    const action lane[6] = {F(r, 0), F(up, 0), I(up, 0), I(r, 0), W(up, 0), W(r, 0)};
    std::vector<long long> order;  // (slot, lane, microbatch)
    for (int k = 0; k < 6; ++k)
      for (int j = 0; j < m; ++j) order.push_back((static_cast<long long>(s.at(r, k, j)) * 6 + k) * m + j);
    std::sort(order.begin(), order.end());
    for (long long key : order) {
      action a = lane[key / m % 6];
      a.microbatch = static_cast<int>(key % m);
      b.add(a);
    }
  }
  return std::move(b).build(name);
}

}  // namespace pipetype::detail
