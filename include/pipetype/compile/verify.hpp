// pipetype/compile/verify.hpp — checks a compute program and computes its lock-step ticks.
//
// Checks, in this order, each reported as a `verdict` naming the place (core/verdict.hpp):
//   1. sizes positive, lanes dividing stages and microbatches; builder ranks and every stage /
//      microbatch index in range, and each microbatch only on the stages of its lane;
//   2. each stage on exactly one rank (and on the rank its placement names);
//   3. no duplicate action; every (stage, microbatch) has one F and either one B or one I and
//      one W (never both forms);
//   4. overlapped pairs are one forward and one backward, of different (stage, microbatch);
//   5. on each rank, no action precedes the same-rank action producing its input
//      (B/I/W before its F is reported as backward-before-forward);
//   6. the lock-step run (below) finishes: otherwise ranks wait on each other — a deadlock,
//      reported with its wait-for cycle (verdict::cycle);
//   7. peak activations per rank within the limit, if one is given.
//
// Lock-step run: time advances in ticks; at each tick every rank runs its next action (or its
// next overlapped pair) if all its inputs were produced at an earlier tick, else idles. The tick
// of each action orders the transfers of the lowered program (lower.hpp) and is PyTorch's
// "time step" of a schedule. Dependencies (s−1 and s+1 within s's lane; program.hpp):
//   F(s,j) ← F(s−1,j)        B/I(s,j) ← F(s,j), B/I(s+1,j)        W(s,j) ← I(s,j)
// A program that carries its stage graph as edges (program.hpp, graph/dag.hpp) has the graph
// checked first (errc::invalid_graph) and then every producer u → s and consumer s → v in place
// of s − 1 and s + 1: F(s,j) ← F(u,j) for each u, B/I(s,j) ← F(s,j) and B/I(v,j) for each v.
//
// Memory is counted in `memory_model` units (core/memory.hpp): the running sum over a rank's
// list is its activation count, and its maximum the peak.
//
// Everything here is constexpr and allocation-transient: it runs inside make_plan at compile
// time and in the explorer at run time.
#pragma once

#include <cstddef>
#include <vector>

#include "pipetype/core/memory.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/core/verdict.hpp"
#include "pipetype/detail/scratch.hpp"
#include "pipetype/graph/dag.hpp"

namespace pipetype {

struct check_options {
  int mem_limit = 0;  // peak activations allowed per rank (microbatch activations); 0 = no limit
  memory_model memory{};
  int mem_limit_units = 0;  // the same limit in memory_model units (halves by default); wins when > 0
};

struct program_facts {
  verdict result;
  std::vector<int> tick;        // [actions] lock-step tick of each action (-1 if never run)
  int ticks = 0;                // ticks until the last action (lock-step makespan)
  std::vector<int> peak_units;  // [ranks] peak activation units
};

namespace detail {

/// Why `p` is past pipetype::limits, or nullptr: checked first, in 64 bits, before any table.
constexpr const char* too_large(program_view p) {
  return limits::exceeded(p.ranks, p.stages, p.microbatches, static_cast<long long>(p.actions.size()),
                          static_cast<long long>(p.edges.size()));
}

/// The cross-rank deadlock of a lock-step run that stopped: every unfinished rank waits on the
/// input `waits_on[r]` (done-table key, see check_in) at its action `waits_at[r]`, which the
/// rank owning that action's stage runs; that rank waits too (the same-rank order checks ran
/// first), so following "waits for" from any stuck rank ends in a cycle. The verdict is placed at
/// the cycle's lowest rank and lists the cycle from there (a rank that only waits into the cycle
/// is not on it).
constexpr verdict deadlock(program_view p, const int* owner, const int* ptr, const int* waits_on, const int* waits_at,
                           const int* posB) {
  const int P = p.ranks, m = p.microbatches, n = p.stages * m;
  const int* beg = p.begin.data();
  const action* A = p.actions.data();
  auto next_of = [&](int r) { return owner[(waits_on[r] % n) / m]; };
  int r = 0;
  while (ptr[r] >= beg[r + 1]) ++r;
  scratch<int> seen_v(P, 0);
  int* seen = seen_v.data();
  for (; !seen[r]; r = next_of(r)) seen[r] = 1;  // r is now on the cycle
  int low = r;
  for (int x = next_of(r); x != r; x = next_of(x)) low = x < low ? x : low;
  verdict v = at(errc::cross_rank_deadlock, low, A[waits_at[low]], waits_at[low] - beg[low],
                 "ranks wait on each other in a cycle");
  r = low;
  do {
    const int key = waits_on[r], q = key % n;
    const action head = A[waits_at[r]];
    const kind needs = key < n ? kind::F : key < 2 * n ? (posB[q] >= 0 ? kind::B : kind::I) : kind::I;
    const int from = owner[q / m];
    if (v.cycle_length < max_cycle)
      v.cycle[v.cycle_length] = {
          r,   waits_at[r] - beg[r], kind_char(head.what), head.stage, head.microbatch, kind_char(needs), q / m, q % m,
          from};
    ++v.cycle_length;
    r = from;
  } while (r != low);
  return v;
}

struct check_result {
  verdict result;
  int ticks = 0;
};

/// check_in's scratch as pointers (run time: check_into).
struct check_scratch_ptrs {
  int *owner, *pos, *done, *ptr, *queue, *wait_next, *waits_on, *waits_at, *wait_head;
};

/// The same as fixed arrays, for make_plan: S stages, n = S·m cells, P ranks.
template <int S, int n, int P>
struct check_scratch_fixed {
  int owner[S + 1], pos[kind_count * n + 1], done[3 * n + 1], ptr[P + 1], queue[2 * P + 1], wait_next[P + 1],
      waits_on[P + 1], waits_at[P + 1], wait_head[3 * n + 1];
};

/// check_program over the program's tables (A: actions, beg: P + 1 begins, placed: stage_rank)
/// given as pointers or arrays, writing the ticks (one per action) and peaks (one per rank) to
/// `tick` and `peak_units`; `w` is scratch (check_scratch_ptrs / check_scratch_fixed). Every
/// table is read by plain indexing: this runs inside make_plan's constant evaluation, where every
/// function call and every read through a pointer costs far more than the arithmetic around it
/// (verify_lowered.hpp, verify_scratch_fixed).
template <class Acts, class Ints, class Placed, class Tick, class Peak, class Work>
constexpr check_result check_in(program_view p, const Acts& A, const Ints& beg, const Placed& placed,
                                const check_options& opt, Tick& tick, Peak& peak_units, Work& w) {
  using detail::at;
  check_result out;
  auto fail = [&](verdict why) {
    out.result = why;
    return out;
  };
  if (!p.source_error.ok()) return fail(p.source_error);
  if (p.ranks < 1 || p.stages < 1 || p.microbatches < 1) {
    return fail(refusal(errc::empty_program, "ranks, stages and microbatches must be positive"));
  }
  if (const char* why = detail::too_large(p)) {
    return fail(refusal(errc::too_large, why));
  }
  if (p.lanes < 1 || p.stages % p.lanes != 0 || p.microbatches % p.lanes != 0) {
    return fail(refusal(errc::invalid_lanes, "lanes must be positive and divide both the stages and the microbatches"));
  }
  if (p.has_edges()) {  // the stage graph's own rules (graph/dag.hpp), on one lane's copy
    const int c = p.lanes, L = p.stages / p.lanes;
    const std::span<const stage_edge> lane0 = p.lane_edges();
    bool copies = p.edges.size() % static_cast<std::size_t>(c) == 0;
    for (std::size_t k = lane0.size(); copies && k < p.edges.size(); ++k) {
      const stage_edge e = lane0[k % lane0.size()];
      const int shift = static_cast<int>(k / lane0.size()) * L;
      copies = p.edges[k] == stage_edge{e.from + shift, e.to + shift, e.detached};
    }
    if (!copies) {
      return fail(refusal(errc::invalid_graph,
                          "with several lanes, the edges come lane by lane, each lane's those of lane 0 shifted by its "
                          "first stage, in the same order (every lane is a copy of the model)"));
    }
    stage_dag g;
    g.stages = L;
    g.edges.assign(lane0.begin(), lane0.end());
    if (const verdict v = check_dag(g); !v.ok()) return fail(v);
  }
  if (p.invalid_rank != no_rank) {
    return fail(refusal(errc::rank_out_of_range,
                        p.invalid_rank == -1 ? "an action was added to rank -1 or before any rank() was selected"
                                             : "an action was added to a rank outside [0, ranks)")
                    .on_rank(p.invalid_rank));
  }
  const int S = p.stages, m = p.microbatches, P = p.ranks;
  const int L = p.lane_length();  // stages per lane
  // with edges: producers and consumers as lists (a chain keeps its s − 1 / s + 1 arithmetic)
  const bool graph = p.has_edges();
  detail::stage_links links;  // (assigned: g++ 12 destroys `c ? f() : T{}` twice in a constant expression)
  if (graph) links = detail::links_of(p);
  const int* pred_begin = links.pred_begin.data();
  const int* pred = links.pred.data();
  const int* succ_begin = links.grad_begin.data();  // consumers whose gradients a backward waits for
  const int* succ = links.grad.data();
  const int n = S * m;
  const int N = static_cast<int>(p.actions.size());
  const int nplaced = static_cast<int>(p.stage_rank.size());

  // 1–2. indices and placement
  auto& owner = w.owner;
  detail::fill_in(owner, S, -1);
  for (int r = 0; r < P; ++r)
    for (int k = beg[r]; k < beg[r + 1]; ++k) {
      const action a = A[k];
      if (a.stage < 0 || a.stage >= S || a.microbatch < 0 || a.microbatch >= m)
        return fail(at(errc::index_out_of_range, r, a, k - beg[r],
                       a.stage < 0 || a.stage >= S ? "stage out of range" : "microbatch out of range"));
      if (owner[a.stage] == -1) owner[a.stage] = r;
      if (owner[a.stage] != r)
        return fail(at(errc::stage_on_two_ranks, r, a, k - beg[r], "the stage already has actions on another rank"));
      if (a.stage < nplaced && placed[a.stage] != -1 && placed[a.stage] != r)
        return fail(at(errc::stage_on_two_ranks, r, a, k - beg[r], "the placement puts this stage on another rank"));
      if (!p.runs_through(a.stage, a.microbatch))
        return fail(at(errc::index_out_of_range, r, a, k - beg[r],
                       "the microbatch runs through another lane of the stage graph"));
    }

  // 3. duplicates, then completeness; pos[kind·n + q] = index of that action in its rank's list
  // (pos[q] is F's, pos[oB + q] B's, pos[oI + q] I's, pos[oW + q] W's)
  auto& pos = w.pos;
  const int oB = n, oI = 2 * n, oW = 3 * n;
  detail::fill_in(pos, kind_count * n, -1);
  for (int r = 0; r < P; ++r)
    for (int k = beg[r]; k < beg[r + 1]; ++k) {
      const action a = A[k];
      const int at_q = static_cast<int>(a.what) * n + a.stage * m + a.microbatch;
      if (pos[at_q] != -1) return fail(at(errc::duplicate_action, r, a, k - beg[r]));
      pos[at_q] = k - beg[r];
    }
  // a program of forwards only (evaluation, inference) needs each F and nothing else
  bool forwards_only = N > 0;
  for (int k = 0; k < N && forwards_only; ++k) forwards_only = A[k].what == kind::F;
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < m; ++j) {
      if (!p.runs_through(s, j)) continue;
      const int q = s * m + j;
      const bool f = pos[q] >= 0, b = pos[oB + q] >= 0, i = pos[oI + q] >= 0, wt = pos[oW + q] >= 0;
      if (f && (b || forwards_only) && !i && !wt) continue;  // the common case
      const int r = owner[s] != -1 ? owner[s] : (s < nplaced ? placed[s] : -1);
      if (!f) return fail(at(errc::missing_action, r, action{kind::F, s, j, false}, -1, "no forward"));
      if (b && (i || wt)) return fail(at(errc::mixed_backward, r, action{i ? kind::I : kind::W, s, j, false}, -1));
      if (!b && !i)
        return fail(at(errc::missing_action, r, action{wt ? kind::I : kind::B, s, j, false}, -1,
                       wt ? "W without its I" : "no backward"));
      if (i && !wt) return fail(at(errc::missing_action, r, action{kind::W, s, j, false}, -1, "I without its W"));
    }

  // 4–5. overlapped pairs; same-rank order
  for (int r = 0; r < P; ++r)
    for (int k = beg[r]; k < beg[r + 1]; ++k) {
      const action a = A[k];
      const int idx = k - beg[r];
      if (a.overlapped) {
        if (k + 1 >= beg[r + 1])
          return fail(at(errc::invalid_overlap, r, a, idx, "an overlapped action needs a partner after it"));
        const action b = A[k + 1];
        const bool ok =
            !b.overlapped && ((a.what == kind::F) != (b.what == kind::F)) && a.what != kind::W && b.what != kind::W;
        if (!ok) return fail(at(errc::invalid_overlap, r, a, idx, "an overlapped pair is one F and one B or I"));
        if (a.stage == b.stage && a.microbatch == b.microbatch)  // the backward would wait for its partner
          return fail(at(errc::invalid_overlap, r, a, idx,
                         "an overlapped pair cannot hold the forward and backward of one stage and microbatch"));
      }
      const int q = a.stage * m + a.microbatch;
      if (a.what != kind::F && pos[q] > idx) return fail(at(errc::backward_before_forward, r, a, idx));
      if (a.what == kind::W && pos[oI + q] > idx)
        return fail(at(errc::action_before_its_input, r, a, idx, "W before its I"));
      // cross-stage inputs produced on this same rank
      if (graph) {
        if (a.what == kind::F)
          for (int e = pred_begin[a.stage]; e < pred_begin[a.stage + 1]; ++e)
            if (owner[pred[e]] == r && pos[pred[e] * m + a.microbatch] > idx)
              return fail(at(errc::action_before_its_input, r, a, idx, "F before the F of a stage it reads"));
        if (a.what == kind::B || a.what == kind::I)
          for (int e = succ_begin[a.stage]; e < succ_begin[a.stage + 1]; ++e) {
            const int c = succ[e] * m + a.microbatch;
            if (owner[succ[e]] == r && (pos[oB + c] >= 0 ? pos[oB + c] : pos[oI + c]) > idx)
              return fail(at(errc::action_before_its_input, r, a, idx,
                             "backward before the backward of a stage that reads it"));
          }
        continue;
      }
      if (a.what == kind::F && !p.lane_head(a.stage) && owner[a.stage - 1] == r && pos[q - m] > idx)
        return fail(at(errc::action_before_its_input, r, a, idx, "F before the F of the previous stage"));
      if ((a.what == kind::B || a.what == kind::I) && !p.lane_tail(a.stage) && owner[a.stage + 1] == r) {
        const int g = pos[oB + q + m] >= 0 ? pos[oB + q + m] : pos[oI + q + m];
        if (g > idx)
          return fail(at(errc::action_before_its_input, r, a, idx, "backward before the backward of the next stage"));
      }
    }

  // 6. lock-step run, event-driven: in tick t only the ranks that ran at t − 1, or that wait for
  // an input produced at t − 1, are looked at, so the run costs O(actions + ticks), not
  // O(ranks × ticks). done[0·n + q]: tick of F(q); done[1·n + q]: of B/I(q); done[2·n + q]: of
  // I(q). A rank whose next action lacks an input produced before t either retries at t + 1 (the
  // input came at t) or waits on that input's list (`wait_head`, linked by `wait_next`) until its
  // producer runs. Within a tick the order of the ranks does not matter: an action needs inputs
  // of earlier ticks only.
  // The ranks to look at in this tick and the next are two halves of `queue`, at cur and next.
  for (int k = 0; k < N; ++k) tick[k] = -1;
  auto& done = w.done;
  auto& ptr = w.ptr;
  auto& queue = w.queue;
  auto& wait_next = w.wait_next;
  auto& waits_on = w.waits_on;
  auto& waits_at = w.waits_at;
  auto& wait_head = w.wait_head;
  detail::fill_in(done, 3 * n, detail::never), detail::fill_in(wait_head, 3 * n, -1), detail::fill_in(wait_next, P, -1),
      detail::fill_in(waits_on, P, -1), detail::fill_in(waits_at, P, -1);
  int ncur = 0, cur = 0, next = P;
  for (int r = 0; r < P; ++r) {
    ptr[r] = beg[r];
    if (beg[r] < beg[r + 1]) queue[cur + ncur++] = r;
  }
  int remaining = N;
  for (int t = 0; remaining > 0; ++t) {
    if (ncur == 0) {
      // (the error path reads through pointers: it runs once)
      const int* const posB = &pos[oB];
      return fail(detail::deadlock(p, &owner[0], &ptr[0], &waits_on[0], &waits_at[0], posB));
    }
    int nnext = 0;
    for (int c = 0; c < ncur; ++c) {
      const int r = queue[cur + c];
      const int k = ptr[r];
      const int width = A[k].overlapped ? 2 : 1;
      int missing = -1, missing_at = k;  // the first input not produced before t
      for (int d = 0; d < width && missing < 0; ++d) {
        const action a = A[k + d];
        const int q = a.stage * m + a.microbatch;
        if (graph) {  // every producer's F, or every consumer's input gradient
          if (a.what == kind::F) {
            for (int e = pred_begin[a.stage]; e < pred_begin[a.stage + 1] && missing < 0; ++e)
              if (done[pred[e] * m + a.microbatch] >= t) missing = pred[e] * m + a.microbatch;
          } else if (a.what == kind::W) {
            if (done[2 * n + q] >= t) missing = 2 * n + q;
          } else if (done[q] >= t) {
            missing = q;
          } else {
            for (int e = succ_begin[a.stage]; e < succ_begin[a.stage + 1] && missing < 0; ++e)
              if (done[n + succ[e] * m + a.microbatch] >= t) missing = n + succ[e] * m + a.microbatch;
          }
        } else if (a.what == kind::F) {
          if (a.stage % L != 0 && done[q - m] >= t) missing = q - m;
        } else if (a.what == kind::W) {
          if (done[2 * n + q] >= t) missing = 2 * n + q;
        } else if (done[q] >= t) {
          missing = q;
        } else if ((a.stage + 1) % L != 0 && done[n + q + m] >= t) {
          missing = n + q + m;
        }
        missing_at = k + d;
      }
      if (missing >= 0) {
        if (done[missing] == t) {
          queue[next + nnext++] = r;
        } else {
          waits_on[r] = missing, waits_at[r] = missing_at;
          wait_next[r] = wait_head[missing];
          wait_head[missing] = r;
        }
        continue;
      }
      for (int d = 0; d < width; ++d) {
        const action a = A[k + d];
        const int q = a.stage * m + a.microbatch;
        const int made[2] = {a.what == kind::F   ? q
                             : a.what == kind::W ? -1
                                                 : n + q,
                             a.what == kind::I ? 2 * n + q : -1};
        for (const int key : made) {
          if (key < 0) continue;
          done[key] = t;
          for (int x = wait_head[key]; x != -1; x = wait_next[x]) queue[next + nnext++] = x;
          wait_head[key] = -1;
        }
        tick[k + d] = t;
      }
      ptr[r] = k + width;
      remaining -= width;
      out.ticks = t + 1;
      if (ptr[r] < beg[r + 1]) queue[next + nnext++] = r;
    }
    const int spent = cur;
    cur = next, next = spent, ncur = nnext;
  }

  // 7. memory
  const int delta[kind_count] = {opt.memory.f, opt.memory.b, opt.memory.i, opt.memory.w};
  const int limit = opt.mem_limit_units > 0 ? opt.mem_limit_units
                    : opt.mem_limit > 0     ? opt.mem_limit * opt.memory.unit
                                            : detail::never;
  for (int r = 0; r < P; ++r) {
    int live = 0, peak = 0;
    for (int k = beg[r]; k < beg[r + 1]; ++k) {
      // with edges, a stage holds an activation per input it reads (a fan-in several)
      const int held = graph ? detail::inputs_held(pred_begin, A[k].stage) : 1;
      live += delta[static_cast<int>(A[k].what)] * held;
      if (live > peak) {
        peak = live;
        if (peak > limit)
          return fail(at(errc::memory_limit_exceeded, r, A[k], k - beg[r], "activations above the limit"));
      }
      if (forwards_only) live -= delta[static_cast<int>(kind::F)] * held;  // nothing waits for a backward
    }
    peak_units[r] = peak;
  }
  return out;
}

/// check_in at run time, into caller storage (nullptr tables: only for a program past the limits,
/// which is answered before any table is read).
constexpr check_result check_into(program_view p, const check_options& opt, int* tick, int* peak_units) {
  check_scratch_ptrs w{};
  if (too_large(p))  // answered before any table is made or read
    return check_in(p, p.actions.data(), p.begin.data(), p.stage_rank.data(), opt, tick, peak_units, w);
  const int S = p.stages > 0 ? p.stages : 0, P = p.ranks > 0 ? p.ranks : 0;
  const int n = S * (p.microbatches > 0 ? p.microbatches : 0);
  detail::scratch<int> ints(S + 1 + kind_count * n + 1 + 3 * n + 1 + 7 * P + 1 + 3 * n + 1, unset);
  pieces<int> q{ints.data()};
  w.owner = q.next(S + 1), w.pos = q.next(kind_count * n + 1), w.done = q.next(3 * n + 1), w.ptr = q.next(P),
  w.queue = q.next(2 * P), w.wait_next = q.next(P), w.waits_on = q.next(P), w.waits_at = q.next(P),
  w.wait_head = q.next(3 * n + 1);
  return check_in(p, p.actions.data(), p.begin.data(), p.stage_rank.data(), opt, tick, peak_units, w);
}

}  // namespace detail

constexpr program_facts check_program(program_view p, const check_options& opt = {}) {
  program_facts out;
  if (detail::too_large(p)) {  // answered before any table is made (the builder keeps the sizes it was given)
    out.result = detail::check_into(p, opt, nullptr, nullptr).result;
    return out;
  }
  out.tick.assign(p.actions.size(), -1);
  out.peak_units.assign(static_cast<std::size_t>(p.ranks > 0 ? p.ranks : 0), 0);
  const detail::check_result r = detail::check_into(p, opt, out.tick.data(), out.peak_units.data());
  out.result = r.result;
  out.ticks = r.ticks;
  return out;
}

/// The verdict alone.
constexpr verdict verify(program_view p, const check_options& opt = {}) { return check_program(p, opt).result; }

}  // namespace pipetype
