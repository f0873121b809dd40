// pipetype/schedules/zb_model.hpp — the problem zb_auto solves, in the form its searches share.
//
// Problem (`zb_problem`): p ranks with one stage each, m microbatches, a cost model (F, I, W per
// stage and per microbatch, and the transfer latency) and a memory limit in microbatch
// activations per rank. Memory is counted as in the zero-bubble paper (Qi et al., "Zero Bubble
// Pipeline Parallelism", ICLR 2024, §3): an F holds one activation of its stage, I releases half
// of it and W the other half (`memory_model`, per stage if `stage_memory` says so).
//
// The model every search here shares: each rank runs its F's, its I's and its W's in microbatch
// order, interleaved as the search decides, and every action starts as soon as its rank is free
// and its inputs have arrived (the simulator's timeline of that program). A candidate is scored by
// its largest rank span — a rank's last end − its first start, the step period when consecutive
// steps overlap (the paper's optimizer post-validation, §4) — then by its makespan.
//
// Also here:
//   zb_tables        the problem in flat arrays, built once per search (inside the compiler every
//                    function call and vector access costs far more than the arithmetic);
//   zb_orders        each rank's sequence, and zb_evaluate, its timeline's figures (the simulator's,
//                    in O(p·m) steps on the flat tables);
//   zb_span_bound    a lower bound on the rank span no schedule of the model can beat: the busiest
//                    rank's work, and per rank the forwards up to a microbatch, that microbatch's
//                    round trip through the ranks below (with latencies), then every I and W still
//                    to come (the paper states the first and the first/last microbatch's chain).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/core/memory.hpp"
#include "pipetype/core/schedule.hpp"
#include "pipetype/detail/scratch.hpp"
#include "pipetype/graph/placement.hpp"
#include "pipetype/schedules/family.hpp"

namespace pipetype {

struct zb_problem {
  int ranks = 1;
  int microbatches = 1;
  cost_model costs{};
  /// Peak activations allowed per rank, in microbatch activations (fractions allowed: I and W
  /// each release half of one). 0: no limit.
  double mem_limit = 0;
  memory_model memory{};
  /// Per-stage memory accounting (an I that releases more or less than half); empty: `memory`.
  std::vector<memory_model> stage_memory{};
  /// Passes of the per-rank refinement (0: the uniform grid only; each pass tries every rank's
  /// warm-up cap in turn and keeps what shortens the span).
  int refine = 1;
  /// Passes of the local search over the best candidate's orders (0: none; see zb_local.hpp).
  int local = 2;
  /// One stage per rank, or two in a V (zb_auto_v.hpp: `costs` then has 2p stages).
  /// `automatic` is for the registry's zb-auto, which builds both problems from a rank's share.
  search_placement placement = search_placement::one_per_rank;
  /// Work the search may spend, in list-scheduler placements (one run places 3·p·m actions).
  /// Small problems never reach it; a large one tries warm-up caps -1, 0, 1, 2, 4, ... instead
  /// of every cap, and refines ranks until the budget is spent (at least one run per knob pair).
  long long budget = 1LL << 26;

  constexpr const memory_model& memory_of(int s) const {
    return static_cast<std::size_t>(s) < stage_memory.size() ? stage_memory[static_cast<std::size_t>(s)] : memory;
  }
};

/// Why the problem cannot be scheduled, or nullptr.
constexpr const char* zb_problem_error(const zb_problem& pr) {
  if (pr.ranks < 1 || pr.microbatches < 1) return "zb_auto: ranks and microbatches must be positive";
  if (pr.mem_limit < 0) return "zb_auto: the memory limit must not be negative";
  if (pr.placement == search_placement::automatic)
    return "zb_auto: a problem has one placement (one_per_rank or v); the registry's zb-auto tries both";
  const int stages = pr.placement == search_placement::v ? 2 * pr.ranks : pr.ranks;
  for (int s = 0; s < stages; ++s) {
    const memory_model& mm = pr.memory_of(s);
    if (mm.f <= 0 || mm.unit <= 0 || mm.i > 0 || mm.w > 0 || mm.f + mm.i + mm.w != 0)
      return "zb_auto: a stage's memory model must have F hold a positive amount that I and W release";
    if (pr.mem_limit > 0 && pr.mem_limit * mm.unit < mm.f)
      return mm.f > mm.unit ? "zb_auto: the memory limit is below one microbatch's activations at a stage that "
                              "holds several (a stage graph's fan-in holds one per input)"
                            : "zb_auto: the memory limit is below one microbatch activation";
  }
  return nullptr;
}

namespace detail {

/// Units of memory allowed on rank r (a large number when unlimited): the limit in activations of
/// the rank's stage, or on the V of its chunks, two of which make a stage of the one-per-rank
/// problem.
constexpr int zb_limit_units(const zb_problem& pr, int r) {
  if (pr.mem_limit <= 0) return never;
  const double chunks = pr.placement == search_placement::v ? 2 : 1;
  return static_cast<int>(chunks * pr.mem_limit * pr.memory_of(r).unit + 1e-9);
}

/// True when every rank's running memory stays within the limit.
constexpr bool zb_fits(program_view p, const zb_problem& pr) {
  for (int r = 0; r < p.ranks; ++r) {
    int live = 0;
    for (const action& a : p.rank_actions(r)) {
      live += pr.memory_of(a.stage).delta(a.what);
      if (live > zb_limit_units(pr, r)) return false;
    }
  }
  return true;
}

/// Where a run with `cutoff` (> 0; else none) is cut: a rank's running bound, its last end plus
/// its remaining work minus its first start, sums in another order than the span does and may
/// exceed an equal span by rounding, so a run is cut only past the cutoff by a relative 1e-9
/// (a run that then ends equal or longer is still rejected by the exact comparison).
constexpr double zb_cut_at(double cutoff) { return cutoff > 0 ? cutoff * (1 + 1e-9) : 1e300; }

/// An action of a run as one int: (3 · rank + kind) · m + microbatch, kind 0 F, 1 I, 2 W.
constexpr int zb_code(int r, int k, int j, int m) { return (3 * r + k) * m + j; }
constexpr int zb_kind_index(kind k) { return k == kind::F ? 0 : k == kind::I ? 1 : 2; }
constexpr action zb_action(int code, int m) {
  const int r = code / (3 * m), k = code / m % 3, j = code % m;
  return k == 0 ? F(r, j) : k == 1 ? I(r, j) : W(r, j);
}

/// A candidate: the actions in an order whose subsequence on each rank is that rank's order (as
/// zb_codes in a flat array: inside the compiler filling a std::vector<action> costs more than
/// the run that computes it), and the figures of its timeline (the simulator's for that program).
struct zb_run {
  bool ok = false;  // false: the search found no order within the limit (or it was cut short)
  int m = 0;
  scratch<int> placed{0, unset};  // zb_codes, in the order the run placed them
  double rank_span = 0, makespan = 0;

  constexpr action at(int q) const { return zb_action(placed[q], m); }
  constexpr int size() const { return placed.size(); }

  constexpr zb_run() = default;
  constexpr zb_run(zb_run&&) noexcept = default;
  constexpr zb_run& operator=(zb_run&&) noexcept = default;
  constexpr zb_run(const zb_run& o)
      : ok(o.ok), m(o.m), placed(o.size(), unset), rank_span(o.rank_span), makespan(o.makespan) {
    for (int q = 0; q < o.size(); ++q) placed[q] = o.placed[q];
  }
  constexpr zb_run& operator=(const zb_run& o) {
    if (this != &o) *this = zb_run(o);
    return *this;
  }
};

/// The problem in flat tables (see the header comment).
struct zb_tables {
  int P = 0, m = 0;
  std::vector<double> t;     // [3 · P · m]: F, I, W time of (rank, microbatch) at (kind · P + r) · m + j
  std::vector<double> lat;   // [2 · P]: latency into r from r − 1 (F), from r + 1 (I)
  std::vector<int> mem;      // [4 · P]: per rank: F, I, W units and the limit
  std::vector<double> work;  // [P]: each rank's F + I + W time

  constexpr double time(int k, int r, int j) const {
    return t[(static_cast<std::size_t>(k) * static_cast<std::size_t>(P) + static_cast<std::size_t>(r)) *
                 static_cast<std::size_t>(m) +
             static_cast<std::size_t>(j)];
  }
  constexpr double lat_f(int r) const { return lat[2 * static_cast<std::size_t>(r)]; }      // into r, from r − 1
  constexpr double lat_i(int r) const { return lat[2 * static_cast<std::size_t>(r) + 1]; }  // into r, from r + 1
  constexpr int units(int r, int k) const { return mem[4 * static_cast<std::size_t>(r) + static_cast<std::size_t>(k)]; }
  constexpr int limit(int r) const { return mem[4 * static_cast<std::size_t>(r) + 3]; }
};

constexpr zb_tables zb_tables_of(const zb_problem& pr) {
  zb_tables z;
  z.P = pr.ranks;
  z.m = pr.microbatches;
  const auto P = static_cast<std::size_t>(z.P), m = static_cast<std::size_t>(z.m);
  z.t.assign(3 * P * m, 0.0);
  z.lat.assign(2 * P, 0.0);
  z.mem.assign(4 * P, 0);
  const kind kinds[3] = {kind::F, kind::I, kind::W};
  for (std::size_t k = 0; k < 3; ++k)
    for (std::size_t r = 0; r < P; ++r)
      for (std::size_t j = 0; j < m; ++j)
        z.t[(k * P + r) * m + j] = pr.costs.time(action{kinds[k], static_cast<int>(r), static_cast<int>(j), false});
  for (int r = 0; r < z.P; ++r) {
    const auto ru = static_cast<std::size_t>(r);
    z.lat[2 * ru] = r > 0 ? pr.costs.latency(r - 1, r) : 0.0;
    z.lat[2 * ru + 1] = r + 1 < z.P ? pr.costs.latency(r + 1, r) : 0.0;
    const memory_model& mm = pr.memory_of(r);
    z.mem[4 * ru] = mm.f;
    z.mem[4 * ru + 1] = mm.i;
    z.mem[4 * ru + 2] = mm.w;
    z.mem[4 * ru + 3] = zb_limit_units(pr, r);
  }
  z.work.assign(P, 0.0);
  for (std::size_t k = 0; k < 3; ++k)
    for (std::size_t r = 0; r < P; ++r)
      for (std::size_t j = 0; j < m; ++j) z.work[r] += z.t[(k * P + r) * m + j];
  return z;
}

/// The timing state of a run: the end of every F(r, j) and I(r, j) (-1: not placed), and per
/// rank its free time, its first start (-1: none yet) and one more value the run keeps.
struct zb_clock {
  scratch<double> v;
  double *fend, *iend, *free_at, *first, *extra;
  constexpr zb_clock(int P, int m)
      : v(2 * P * m + 3 * P, -1.0),
        fend(v.data()),
        iend(fend + P * m),
        free_at(iend + P * m),
        first(free_at + P),
        extra(first + P) {
    for (int r = 0; r < P; ++r) free_at[r] = extra[r] = 0;
  }
};

/// A finished run's figures from each rank's first start and last end.
constexpr void zb_figures(zb_run& out, int P, const double* first, const double* last) {
  double lo = 0, hi = 0;
  for (int q = 0; q < P; ++q) {
    const double span = last[q] - first[q];
    out.rank_span = span > out.rank_span ? span : out.rank_span;
    lo = q == 0 || first[q] < lo ? first[q] : lo;
    hi = last[q] > hi ? last[q] : hi;
  }
  out.makespan = hi - lo;
}

/// The program of a candidate (each action on its stage's rank).
constexpr program zb_program_of(const zb_problem& pr, const zb_run& run) {
  program_builder b{pr.ranks, pr.ranks, pr.microbatches};
  b.placement(looped_placement(pr.ranks, 1));
  for (int q = 0; q < run.size(); ++q) {
    const action a = run.at(q);
    b.rank(a.stage).add(a);
  }
  return std::move(b).build("zb-auto");
}

/// Each rank's sequence: rank r's k-th action is code[r · 3m + k], kind · m + microbatch with
/// kind 0 F, 1 I, 2 W.
struct zb_orders {
  int P = 0, m = 0;
  std::vector<int> code;
};

/// The orders of a program's actions (one stage per rank; a B counts as its I then its W).
constexpr zb_orders zb_orders_of(const zb_tables& z, const std::vector<action>& placed) {
  zb_orders o{z.P, z.m, std::vector<int>(3 * static_cast<std::size_t>(z.P) * static_cast<std::size_t>(z.m), 0)};
  scratch<int> n(z.P, 0);
  int* code = o.code.data();
  for (const action& a : placed) {
    int* at = code + a.stage * 3 * z.m;
    if (a.what == kind::B) {
      at[n[a.stage]++] = z.m + a.microbatch;
      at[n[a.stage]++] = 2 * z.m + a.microbatch;
    } else {
      at[n[a.stage]++] = zb_kind_index(a.what) * z.m + a.microbatch;
    }
  }
  return o;
}

/// The orders of a run.
constexpr zb_orders zb_orders_of(const zb_tables& z, const zb_run& run) {
  const int L = 3 * z.m;
  zb_orders o{z.P, z.m, std::vector<int>(static_cast<std::size_t>(z.P * L), 0)};
  scratch<int> n(z.P, 0);
  int* code = o.code.data();
  for (int q = 0; q < run.size(); ++q) {
    const int c = run.placed[q], r = c / L;
    code[r * L + n[r]++] = c - r * L;
  }
  return o;
}

/// The timeline of `o`: figures and the actions rank by rank; not ok when an order breaks the
/// model (a kind out of microbatch order, an I before its F, a W before its I), exceeds the
/// memory limit, or when the ranks wait for each other forever. With `cutoff` > 0 the evaluation
/// stops (not ok) as soon as a rank's span must exceed it.
constexpr zb_run zb_evaluate(const zb_tables& z, const zb_orders& o, double cutoff = 0) {
  const int P = z.P, m = z.m, L = 3 * m;
  constexpr double unknown = -1;
  const double cut = zb_cut_at(cutoff);
  zb_run out;
  zb_clock clock(P, m);
  // raw pointers into the tables: inside the compiler each accessor call costs more than the step
  double *fend = clock.fend, *iend = clock.iend, *free_at = clock.free_at, *first = clock.first;
  double* rest = clock.extra;  // work still to do on the rank
  const double* T = z.t.data();
  const double* LAT = z.lat.data();
  const int* MEM = z.mem.data();
  scratch<int> iv(5 * P, 0);
  int* pos = iv.data();
  int* live = pos + P;
  int* nk = pos + 2 * P;  // [3 · P] the next microbatch of each kind
  for (int r = 0; r < P; ++r) rest[r] = z.work[static_cast<std::size_t>(r)];
  const int* code = o.code.data();
  for (int done = 0, total = P * L, sweep = 0; done < total; ++sweep) {
    const int before = done;
    for (int q = 0; q < P; ++q) {  // down, then up: forwards flow down, backwards up
      const int r = sweep % 2 == 0 ? q : P - 1 - q;
      const int* seq = code + r * L;
      while (pos[r] < L) {
        const int c = seq[pos[r]], k = c / m, j = c % m;
        if (k < 0 || k > 2 || j != nk[k * P + r]) return out;  // out of microbatch order
        double ready = 0;
        if (k == 0) {
          if (r > 0) {
            const double e = fend[(r - 1) * m + j];
            if (e == unknown) break;
            ready = e + LAT[2 * r];
          }
        } else if (k == 1) {
          ready = fend[r * m + j];
          if (ready == unknown) return out;  // an I before its F
          if (r + 1 < P) {
            const double g = iend[(r + 1) * m + j];
            if (g == unknown) break;
            ready = g + LAT[2 * r + 1] > ready ? g + LAT[2 * r + 1] : ready;
          }
        } else if (iend[r * m + j] == unknown) {
          return out;  // a W before its I
        }
        live[r] += MEM[4 * r + k];
        if (live[r] > MEM[4 * r + 3]) return out;
        const double start = ready > free_at[r] ? ready : free_at[r];
        const double d = T[(k * P + r) * m + j];
        if (first[r] == unknown) first[r] = start;
        free_at[r] = start + d;
        rest[r] -= d;
        if (k == 0) fend[r * m + j] = start + d;
        if (k == 1) iend[r * m + j] = start + d;
        ++nk[k * P + r];
        ++pos[r];
        ++done;
        if (free_at[r] + rest[r] - first[r] > cut) return out;
      }
    }
    if (done == before) return out;  // every rank waits for another
  }
  zb_figures(out, P, first, free_at);
  out.m = m;
  out.placed = scratch<int>(P * L, unset);
  for (int q = 0; q < P * L; ++q) out.placed[q] = (q / L) * L + code[q];  // rank by rank
  out.ok = true;
  return out;
}

}  // namespace detail

/// A lower bound on the rank span of every schedule of the model (see the header comment):
/// `value()` is the larger of `work` and `chain`.
struct zb_bound {
  double work = 0;   // the busiest rank's F + I + W time
  double chain = 0;  // max over ranks r and microbatches j of forwards F(r, 0..j), j's round trip
                     // below r, then I(r, j..m−1) and W(r, j..m−1)
  constexpr double value() const noexcept { return work > chain ? work : chain; }
  /// span / value() − 1 (0 when the bound is 0).
  constexpr double gap(double span) const noexcept { return value() > 0 ? span / value() - 1 : 0; }
};

constexpr zb_bound zb_span_bound(const detail::zb_tables& z) {
  zb_bound b;
  const int P = z.P, m = z.m;
  for (int r = 0; r < P; ++r) {
    double work = 0, after = 0;  // after: I and W time of microbatches j..m−1
    for (int j = 0; j < m; ++j) work += z.time(0, r, j) + z.time(1, r, j) + z.time(2, r, j);
    b.work = work > b.work ? work : b.work;
    double forwards = 0;
    for (int j = 0; j < m; ++j) after += z.time(1, r, j) + z.time(2, r, j);
    for (int j = 0; j < m; ++j) {
      forwards += z.time(0, r, j);
      double trip = 0;  // F(r, j)'s end to I(r, j)'s earliest start
      for (int s = r + 1; s < P; ++s) trip += z.lat_f(s) + z.time(0, s, j) + z.time(1, s, j) + z.lat_i(s - 1);
      const double c = forwards + trip + after;
      b.chain = c > b.chain ? c : b.chain;
      after -= z.time(1, r, j) + z.time(2, r, j);
    }
  }
  return b;
}

/// The bound for a problem.
constexpr zb_bound zb_span_bound(const zb_problem& pr) { return zb_span_bound(detail::zb_tables_of(pr)); }

/// The list scheduler's knobs (zb_list.hpp).
struct zb_knobs {
  int warmup_extra = -1;  // k: at most (p − r) + k forwards before the first I; < 0: memory only
  bool fill_only_gaps = false;
  bool forward_first = false;
  std::vector<int> rank_extra{};  // per rank, overrides warmup_extra (the refinement's result)
};

/// The authors' heuristic's three flags (zb_greedy.hpp).
struct zb_greedy_flags {
  bool bubble_before_first_i = false;
  bool prioritize_i = false;
  bool greedy_fill = true;
};

/// What zb_auto_search returns.
struct zb_result {
  program schedule;
  double rank_span = 0;
  double makespan = 0;
  /// Which candidate won: "greedy" (with `flags`), "list" (with `knobs`), "v-list" (the V
  /// search) or the name of a hand-written schedule; `local_moves` says how many moves the
  /// local search kept on top.
  const char* source = "";
  zb_knobs knobs{};
  zb_greedy_flags flags{};
  int local_moves = 0;
  int candidates = 0;  // how many were scored
  /// No schedule of the model has a shorter rank span; gap() = rank_span / bound − 1.
  zb_bound bound{};
  constexpr double gap() const noexcept { return bound.gap(rank_span); }
};

}  // namespace pipetype
