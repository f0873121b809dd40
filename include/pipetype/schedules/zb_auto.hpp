// pipetype/schedules/zb_auto.hpp — an automatic zero-bubble scheduler that runs at compile time.
//
// Source: Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §3 (automatic scheduling:
// a heuristic, refined there by an ILP). The search
// below is ours.
//
// Problem (`zb_problem`): p ranks with one stage each, m microbatches, a cost model (F, I, W per
// stage and, optionally, per microbatch — unequal sequence lengths make microbatches unequal, as
// WLB-LLM reports — and the transfer latency), and a memory limit in microbatch activations per
// rank. Memory is counted as in the paper: an F holds one activation of its stage, I releases
// half of it and W the other half (`memory_model`, per stage if `stage_memory` says so).
// Output: a program with split backwards that verifies like any other.
//
// Objective: the largest rank span (a rank's last end − its first start). With the optimizer's
// post-validation (paper §4) consecutive steps overlap, so the span, not the isolated step's
// makespan, is the step period; "zero bubble" means every rank's span equals its work.
// Ties go to the shorter makespan.
//
// Search. Candidates are scored by their simulated rank span and the best kept:
//   • a list scheduler: simulated time runs forward; whenever a rank is free it takes, among the
//     actions whose inputs have arrived, the one that can start first — I before F before W on a
//     tie (I is on the critical path, W on none) — subject to the memory limit (an F that does
//     not fit waits for W's to release memory). Its knobs, all tried:
//       warm-up cap   before its first I, rank r runs at most (p − r) + k forwards, k = 0 .. p,
//                     or as many as memory allows (1F1B's warm-up at k = 0, ZB-H2's at
//                     k = p − r − 1);
//       W filling     a W starts whenever the rank would idle, or only when it ends before the
//                     next input already scheduled to arrive (an input whose producer is not
//                     placed yet cannot be waited for, so the W may still delay it);
//       tie order     I before F, or F before I;
//   • a refinement from the best of those: each rank's warm-up cap in turn, over the same range,
//     kept when it shortens the span, or the makespan at an equal span (`zb_problem::refine`
//     passes, default 1);
//   • the hand-written schedules that fit the limit: 1F1B with each backward split in place,
//     ZB-H1, ZB-H2, GPipe with split backwards.
// So the result is never worse than the best hand-written one-stage-per-rank schedule within
// the same memory. The reference heuristic (schedules.md §15b) grid-searches three flags; the
// grid here covers the same decisions (how many warm-up forwards, whether a W may delay the
// next input, whether I preempts F) with a finer, per-rank warm-up. bench/zb_compare.sh prints
// the comparison (bench/README.md has the figures).
// Figures (simulator, uniform costs F = I = W, no latency; checked in tests/schedules):
//   limit p     rank span m(F + I + W) + (p − 1)(F + I − W), ZB-H1's
//   limit 2p    rank span m(F + I + W), zero bubble, for m ≥ 2p − 1
// Cost: 4(p + 2) list-scheduler runs plus p(p + 1) per refinement pass, each O(p·m) steps with
// flat tables (a step scans the ranks up to 32 of them, past that a tournament tree: O(log p)),
// and up to 4 simulations — within a budget
// (`zb_problem::budget`, 2^26 placements): past it the caps tried are -1, 0, 1, 2, 4, ..., p and
// the refinement stops when the budget is spent, so p = 64, m = 512 takes seconds, not minutes. Run time: about a
// millisecond at p = 8, m = 32. Compile time (g++ 12): p = 4, m = 8 in 1.2 s; p = 8, m = 16 in 5.5 s and needs
// -fconstexpr-ops-limit (docs/03_diagnostics.md); p·m up to about 72 fits the default limit.
#pragma once

#include <stdexcept>
#include <string_view>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/analysis/simulate.hpp"
#include "pipetype/core/memory.hpp"
#include "pipetype/core/schedule.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/detail/scratch.hpp"
#include "pipetype/graph/placement.hpp"
#include "pipetype/schedules/family.hpp"
#include "pipetype/schedules/one_f_one_b.hpp"
#include "pipetype/schedules/zb_h1.hpp"
#include "pipetype/schedules/zb_h2.hpp"

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
  /// Work the search may spend, in list-scheduler placements (one run places 3·p·m actions).
  /// Small problems never reach it; a large one tries warm-up caps -1, 0, 1, 2, 4, ... instead
  /// of every cap, and refines ranks until the budget is spent (at least one run per knob pair).
  long long budget = 1LL << 26;

  constexpr const memory_model& memory_of(int s) const {
    return static_cast<std::size_t>(s) < stage_memory.size() ? stage_memory[static_cast<std::size_t>(s)] : memory;
  }
};

/// The list scheduler's knobs (see the header comment).
struct zb_knobs {
  int warmup_extra = -1;  // k: at most (p − r) + k forwards before the first I; < 0: memory only
  bool fill_only_gaps = false;
  bool forward_first = false;
  std::vector<int> rank_extra{};  // per rank, overrides warmup_extra (the refinement's result)
};

struct zb_result {
  program schedule;
  double rank_span = 0;
  double makespan = 0;
  /// Which candidate won: "list" (with `knobs`) or the name of a hand-written schedule.
  const char* source = "";
  zb_knobs knobs{};
  int candidates = 0;  // how many were scored
};

/// Why the problem cannot be scheduled, or nullptr.
constexpr const char* zb_problem_error(const zb_problem& pr) {
  if (pr.ranks < 1 || pr.microbatches < 1) return "zb_auto: ranks and microbatches must be positive";
  if (pr.mem_limit < 0) return "zb_auto: the memory limit must not be negative";
  for (int s = 0; s < pr.ranks; ++s) {
    const memory_model& mm = pr.memory_of(s);
    if (mm.f <= 0 || mm.unit <= 0 || mm.i > 0 || mm.w > 0 || mm.f + mm.i + mm.w != 0)
      return "zb_auto: a stage's memory model must have F hold a positive amount that I and W release";
    if (pr.mem_limit > 0 && pr.mem_limit * mm.unit < mm.f)
      return "zb_auto: the memory limit is below one microbatch activation";
  }
  return nullptr;
}

namespace detail {

/// Units of memory allowed on stage s (a large number when unlimited).
constexpr int zb_limit_units(const zb_problem& pr, int s) {
  if (pr.mem_limit <= 0) return never;
  return static_cast<int>(pr.mem_limit * pr.memory_of(s).unit + 1e-9);
}

/// True when every rank's running memory stays within the limit.
constexpr bool zb_fits(program_view p, const zb_problem& pr) {
  for (int r = 0; r < p.ranks; ++r) {
    int live = 0;
    for (const action& a : p.rank_actions(r)) {
      live += pr.memory_of(a.stage).delta(a.what);
      if (live > zb_limit_units(pr, a.stage)) return false;
    }
  }
  return true;
}

/// One run of the list scheduler: the actions in the order it placed them (each rank's list is
/// its subsequence) and the figures of the timeline it built, which is exactly the one the
/// simulator gives that program (every action starts as soon as its rank and inputs allow).
struct zb_run {
  bool ok = false;  // false: the limit let no action start
  std::vector<action> placed;
  double rank_span = 0, makespan = 0;
};

/// The problem in flat tables, built once per search: the list scheduler runs dozens of times
/// and, inside the compiler, every function call and vector access costs far more than the
/// arithmetic (the same style as verify.hpp's check_into).
struct zb_tables {
  int P = 0, m = 0;
  std::vector<double> t;    // [3 · P · m]: F, I, W time of (rank, microbatch) at (kind · P + r) · m + j
  std::vector<double> lat;  // [2 · P]: latency into r from r − 1 (F), from r + 1 (I)
  std::vector<int> mem;     // [4 · P]: per rank: F, I, W units and the limit
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
  return z;
}

constexpr zb_run zb_list_schedule(const zb_tables& z, const zb_knobs& knobs) {
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
    ndirty = 0;
    dirty[ndirty++] = r;                     // its own state changed,
    if (r > 0) dirty[ndirty++] = r - 1;      // an I of the rank above may now be ready,
    if (r + 1 < P) dirty[ndirty++] = r + 1;  // and an F of the rank below
  }
  double lo = 0, hi = 0;
  for (int q = 0; q < P; ++q) {
    const double span = free_at[q] - first[q];
    out.rank_span = span > out.rank_span ? span : out.rank_span;
    lo = q == 0 || first[q] < lo ? first[q] : lo;
    hi = free_at[q] > hi ? free_at[q] : hi;
  }
  out.makespan = hi - lo;
  out.ok = true;
  return out;
}

/// One run for a problem (builds the tables; the search builds them once).
constexpr zb_run zb_list_schedule(const zb_problem& pr, const zb_knobs& knobs) {
  return zb_list_schedule(zb_tables_of(pr), knobs);
}

/// The program of a list-scheduler run (each action on its stage's rank).
constexpr program zb_program_of(const zb_problem& pr, const zb_run& run) {
  program_builder b{pr.ranks, pr.ranks, pr.microbatches};
  b.placement(looped_placement(pr.ranks, 1));
  for (const action& a : run.placed) b.rank(a.stage).add(a);
  return std::move(b).build("zb-auto");
}

/// 1F1B with each backward split in place (I then W): the baseline every split schedule beats.
constexpr program zb_one_f_one_b_split(int p, int m) {
  program base = make_one_f_one_b(p, m);
  program_builder b{p, p, m};
  b.placement(base.stage_rank);
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    for (const action& a : base.view().rank_actions(r)) {
      if (a.what == kind::B)
        b.add(I(a.stage, a.microbatch)).add(W(a.stage, a.microbatch));
      else
        b.add(a);
    }
  }
  return std::move(b).build("1f1b-split");
}

constexpr program zb_gpipe_split(int p, int m) {
  program_builder b{p, p, m};
  b.placement(looped_placement(p, 1));
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    for (int j = 0; j < m; ++j) b.add(F(r, j));
    for (int j = 0; j < m; ++j) b.add(I(r, j)).add(W(r, j));
  }
  return std::move(b).build("gpipe-split");
}

}  // namespace detail

/// Runs the search and says which candidate won. Throws std::invalid_argument for a problem
/// that cannot be scheduled (zb_problem_error).
constexpr zb_result zb_auto_search(const zb_problem& pr) {
  if (const char* e = zb_problem_error(pr)) throw std::invalid_argument(e);
  const int P = pr.ranks, m = pr.microbatches;
  zb_result best;
  bool have = false;
  detail::zb_run best_run;
  auto better = [&](double span, double ms) {
    return !have || span < best.rank_span || (span == best.rank_span && ms < best.makespan);
  };
  // list-scheduler runs: their own timeline is the simulator's, and they respect the limit
  auto consider_run = [&](detail::zb_run run, const zb_knobs& knobs) {
    if (!run.ok) return false;
    ++best.candidates;
    if (!better(run.rank_span, run.makespan)) return false;
    have = true;
    best.rank_span = run.rank_span;
    best.makespan = run.makespan;
    best.source = "list";
    best.knobs = knobs;
    best_run = std::move(run);
    return true;
  };
  const detail::zb_tables tables = detail::zb_tables_of(pr);
  const bool flags[2] = {false, true};
  // the budget: each run costs 3·p·m placements; the grid may spend half of it
  const long long run_cost = 3LL * P * m;
  long long left = pr.budget;
  std::vector<int> caps, sparse{-1};  // every warm-up cap, and -1, 0, 1, 2, 4, ..., P
  for (int k = -1; k <= P; ++k) caps.push_back(k);
  for (int k = 0; k < P; k = k == 0 ? 1 : 2 * k) sparse.push_back(k);
  sparse.push_back(P);
  const std::vector<int>& grid = 4 * static_cast<long long>(caps.size()) * run_cost <= pr.budget / 2 ? caps : sparse;
  for (const int k : grid) {
    if (k != grid.front() && left < 4 * run_cost) break;
    for (bool gaps : flags)
      for (bool ff : flags) consider_run(detail::zb_list_schedule(tables, {k, gaps, ff}), {k, gaps, ff});
    left -= 4 * run_cost;
  }
  // refinement: per-rank warm-up caps, one rank at a time, from the best uniform setting
  if (have && pr.refine > 0) {
    zb_knobs kn = best.knobs;
    kn.rank_extra.assign(static_cast<std::size_t>(P), kn.warmup_extra);
    for (int pass = 0; pass < pr.refine && left >= run_cost; ++pass) {
      bool improved = false;
      const std::vector<int>& tries =
          static_cast<long long>(P) * static_cast<long long>(caps.size()) * run_cost <= left ? caps : sparse;
      for (int r = 0; r < P && left >= run_cost; ++r)
        for (const int k : tries) {
          if (k == kn.rank_extra[static_cast<std::size_t>(r)]) continue;
          if (left < run_cost) break;
          left -= run_cost;
          zb_knobs t = kn;
          t.rank_extra[static_cast<std::size_t>(r)] = k;
          if (consider_run(detail::zb_list_schedule(tables, t), t)) kn = t, improved = true;
        }
      if (!improved) break;
    }
  }
  if (have) best.schedule = detail::zb_program_of(pr, best_run);
  // the hand-written schedules that fit the limit
  auto consider = [&](program prog, const char* source) {
    if (!detail::zb_fits(prog.view(), pr)) return;
    ++best.candidates;
    const timeline t = simulate(prog.view(), pr.costs, pr.memory);
    if (!t.complete || !better(t.max_rank_span(), t.makespan())) return;
    have = true;
    best.schedule = std::move(prog);
    best.rank_span = t.max_rank_span();
    best.makespan = t.makespan();
    best.source = source;
    best.knobs = {};
  };
  consider(make_zb_h1(P, m), "zb-h1");
  consider(make_zb_h2(P, m), "zb-h2");
  consider(detail::zb_one_f_one_b_split(P, m), "1f1b-split");
  consider(detail::zb_gpipe_split(P, m), "gpipe-split");
  if (!have) throw std::invalid_argument("zb_auto: no schedule fits the memory limit");
  best.schedule.name = "zb-auto";
  return best;
}

/// The best schedule found for the problem (see zb_auto_search).
constexpr program make_zb_auto(const zb_problem& pr) { return zb_auto_search(pr).schedule; }

/// zb_auto for tools that pick a schedule by name (registry.hpp): uniform costs and the memory
/// limit come from `schedule_params`.
struct zb_auto_family {
  static constexpr std::string_view name = "zb-auto";
  static constexpr std::string_view summary = "automatic zero-bubble search for the given costs and --mem-limit";
  static constexpr int chunks = 1;
  static constexpr bool split = true;
  static constexpr const char* error(int, int, int) noexcept { return nullptr; }
  static constexpr program make(int p, int m, int, const schedule_params& params) {
    zb_problem pr;
    pr.ranks = p;
    pr.microbatches = m;
    pr.costs = cost_model{params.cost};
    pr.mem_limit = params.mem_limit;
    return make_zb_auto(pr);
  }
};

/// The compile-time form: costs as a type with `static constexpr pipetype::costs value` (uniform)
/// or `static constexpr pipetype::cost_model model()` (per stage / microbatch), and the memory
/// limit in whole microbatch activations per rank (0: none; use the run-time form for halves).
///
///   struct my_costs { static constexpr pipetype::costs value{.f = 1, .b = 2}; };
///   using s = pipetype::zb_auto<ranks<4>, microbatches<8>, my_costs, 4>;
template <rank_count Ranks, microbatch_count Microbatches, class Costs, int MemLimit = 0>
struct zb_auto {
  using family = zb_auto_family;
  static_assert(MemLimit >= 0, "zb_auto: the memory limit must not be negative (0 means none)");
  static constexpr cost_model model() {
    if constexpr (requires { Costs::model(); })
      return Costs::model();
    else
      return cost_model{Costs::value};
  }
  static constexpr zb_problem problem() {
    zb_problem pr;
    pr.ranks = Ranks::value;
    pr.microbatches = Microbatches::value;
    pr.costs = model();
    pr.mem_limit = MemLimit;
    return pr;
  }
  static_assert(zb_problem_error(problem()) == nullptr,
                "zb_auto: the problem cannot be scheduled (a memory limit below one activation?)");
  static constexpr program generate() { return make_zb_auto(problem()); }
  static constexpr program_extent extent() { return split_extent(Ranks::value, Microbatches::value); }
};

}  // namespace pipetype
