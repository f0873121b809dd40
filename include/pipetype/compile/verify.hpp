// pipetype/compile/verify.hpp — checks a compute program and computes its lock-step ticks.
//
// Checks, in this order, each reported as a `verdict` naming the place (diagnostics.hpp):
//   1. sizes positive; builder ranks and every stage / microbatch index in range;
//   2. each stage on exactly one rank (and on the rank its placement names);
//   3. no duplicate action; every (stage, microbatch) has one F and either one B or one I and
//      one W (never both forms);
//   4. overlapped pairs are one forward and one backward;
//   5. on each rank, no action precedes the same-rank action producing its input
//      (B/I/W before its F is reported as backward-before-forward);
//   6. the lock-step run (below) finishes: otherwise ranks wait on each other — a deadlock;
//   7. peak activations per rank within the limit, if one is given.
//
// Lock-step run: time advances in ticks; at each tick every rank runs its next action (or its
// next overlapped pair) if all its inputs were produced at an earlier tick, else idles. The tick
// of each action orders the transfers of the lowered program (lower.hpp) and is PyTorch's
// "time step" of a schedule. Dependencies:
//   F(s,j) ← F(s−1,j)        B/I(s,j) ← F(s,j), B/I(s+1,j)        W(s,j) ← I(s,j)
//
// Memory (in `memory_model` units, default two per microbatch activation of one stage, as in
// the zero-bubble paper's accounting): F adds `f`, B adds `b`, I adds `i`, W adds `w`; the
// running sum over a rank's list is its activation count, and its maximum the peak.
//
// Everything here is constexpr and allocation-transient: it runs inside make_plan at compile
// time and in the explorer at run time.
#pragma once

#include <cstddef>
#include <vector>

#include "pipetype/compile/diagnostics.hpp"
#include "pipetype/core/program.hpp"

namespace pipetype {

struct memory_model {
  int f = 2;
  int b = -2;
  int i = -1;
  int w = -1;
  int unit = 2;  // units per microbatch activation of one stage

  constexpr int delta(kind k) const noexcept {
    switch (k) {
      case kind::F:
        return f;
      case kind::B:
        return b;
      case kind::I:
        return i;
      case kind::W:
        return w;
    }
    return 0;
  }
};

struct check_options {
  int mem_limit = 0;  // peak activations allowed per rank (microbatch activations); 0 = no limit
  memory_model memory{};
};

struct program_facts {
  verdict result;
  std::vector<int> tick;        // [actions] lock-step tick of each action (-1 if never run)
  int ticks = 0;                // ticks until the last action (lock-step makespan)
  std::vector<int> peak_units;  // [ranks] peak activation units
};

namespace detail {

inline constexpr int never = 1 << 30;

constexpr verdict at(errc e, int rank, const action& a, int index, const char* detail = "") {
  verdict v;
  v.code = e;
  v.rank = rank;
  v.stage = a.stage;
  v.microbatch = a.microbatch;
  v.kind = kind_char(a.what);
  v.index = index;
  v.detail = detail;
  return v;
}

constexpr std::size_t key(int stage, int mb, int m) {
  return static_cast<std::size_t>(stage) * static_cast<std::size_t>(m) + static_cast<std::size_t>(mb);
}

}  // namespace detail

constexpr program_facts check_program(program_view p, const check_options& opt = {}) {
  using detail::at;
  using detail::key;
  program_facts out;
  auto fail = [&](verdict v) {
    out.result = v;
    return out;
  };
  if (!p.source_error.ok()) return fail(p.source_error);
  if (p.ranks < 1 || p.stages < 1 || p.microbatches < 1) {
    verdict v;
    v.code = errc::empty_program;
    v.detail = "ranks, stages and microbatches must be positive";
    return fail(v);
  }
  if (p.invalid_rank != no_rank) {
    verdict v;
    v.code = errc::rank_out_of_range;
    v.rank = p.invalid_rank;
    v.detail = "an action was added to a rank outside [0, ranks), or before a rank was selected";
    return fail(v);
  }
  const int S = p.stages, m = p.microbatches, P = p.ranks;
  const std::size_t n = static_cast<std::size_t>(S) * static_cast<std::size_t>(m);

  // 1–2. indices and placement
  std::vector<int> owner(static_cast<std::size_t>(S), -1);
  for (int r = 0; r < P; ++r) {
    const auto acts = p.rank_actions(r);
    for (std::size_t k = 0; k < acts.size(); ++k) {
      const action& a = acts[k];
      const int idx = static_cast<int>(k);
      if (a.stage < 0 || a.stage >= S || a.microbatch < 0 || a.microbatch >= m)
        return fail(at(errc::index_out_of_range, r, a, idx,
                       a.stage < 0 || a.stage >= S ? "stage out of range" : "microbatch out of range"));
      int& o = owner[static_cast<std::size_t>(a.stage)];
      if (o == -1) o = r;
      if (o != r) return fail(at(errc::stage_on_two_ranks, r, a, idx, "the stage already has actions on another rank"));
      const int placed = static_cast<std::size_t>(a.stage) < p.stage_rank.size()
                             ? p.stage_rank[static_cast<std::size_t>(a.stage)]
                             : -1;
      if (placed != -1 && placed != r)
        return fail(at(errc::stage_on_two_ranks, r, a, idx, "the placement puts this stage on another rank"));
    }
  }

  // 3. completeness and duplicates
  std::vector<int> count[kind_count];
  for (auto& c : count) c.assign(n, 0);
  for (int r = 0; r < P; ++r) {
    const auto acts = p.rank_actions(r);
    for (std::size_t k = 0; k < acts.size(); ++k) {
      const action& a = acts[k];
      int& c = count[static_cast<int>(a.what)][key(a.stage, a.microbatch, m)];
      if (++c > 1) return fail(at(errc::duplicate_action, r, a, static_cast<int>(k)));
    }
  }
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < m; ++j) {
      const std::size_t q = key(s, j, m);
      const int f = count[0][q], b = count[1][q], i = count[2][q], w = count[3][q];
      const int r =
          owner[static_cast<std::size_t>(s)] != -1
              ? owner[static_cast<std::size_t>(s)]
              : (static_cast<std::size_t>(s) < p.stage_rank.size() ? p.stage_rank[static_cast<std::size_t>(s)] : -1);
      auto missing = [&](kind k, const char* why) {
        return fail(at(errc::missing_action, r, action{k, s, j, false}, -1, why));
      };
      if (f == 0) return missing(kind::F, "no forward");
      if (b == 1 && (i + w) > 0)
        return fail(at(errc::mixed_backward, r, action{i ? kind::I : kind::W, s, j, false}, -1));
      if (b == 0 && i == 0) return missing(w ? kind::I : kind::B, w ? "W without its I" : "no backward");
      if (i == 1 && w == 0) return missing(kind::W, "I without its W");
    }

  // 4–5. overlapped pairs; same-rank order
  std::vector<int> pos[kind_count];
  for (auto& v : pos) v.assign(n, -1);
  for (int r = 0; r < P; ++r) {
    const auto acts = p.rank_actions(r);
    for (std::size_t k = 0; k < acts.size(); ++k)
      pos[static_cast<int>(acts[k].what)][key(acts[k].stage, acts[k].microbatch, m)] = static_cast<int>(k);
  }
  for (int r = 0; r < P; ++r) {
    const auto acts = p.rank_actions(r);
    for (std::size_t k = 0; k < acts.size(); ++k) {
      const action& a = acts[k];
      const int idx = static_cast<int>(k);
      if (a.overlapped) {
        if (k + 1 >= acts.size())
          return fail(at(errc::invalid_overlap, r, a, idx, "an overlapped action needs a partner after it"));
        const action& b = acts[k + 1];
        const bool ok = b.overlapped == false &&
                        ((a.what == kind::F && b.what != kind::F) || (a.what != kind::F && b.what == kind::F)) &&
                        a.what != kind::W && b.what != kind::W;
        if (!ok) return fail(at(errc::invalid_overlap, r, a, idx, "an overlapped pair is one F and one B or I"));
      }
      const std::size_t q = key(a.stage, a.microbatch, m);
      const int fpos = pos[0][q];
      if (a.what != kind::F && fpos > idx) return fail(at(errc::backward_before_forward, r, a, idx));
      if (a.what == kind::W && pos[2][q] > idx)
        return fail(at(errc::action_before_its_input, r, a, idx, "W before its I"));
      // cross-stage inputs produced on this same rank
      if (a.what == kind::F && a.stage > 0 && owner[static_cast<std::size_t>(a.stage - 1)] == r &&
          pos[0][key(a.stage - 1, a.microbatch, m)] > idx)
        return fail(at(errc::action_before_its_input, r, a, idx, "F before the F of the previous stage"));
      if (is_input_backward(a.what) && a.stage + 1 < S && owner[static_cast<std::size_t>(a.stage + 1)] == r) {
        const std::size_t q1 = key(a.stage + 1, a.microbatch, m);
        const int g = pos[1][q1] >= 0 ? pos[1][q1] : pos[2][q1];
        if (g > idx)
          return fail(at(errc::action_before_its_input, r, a, idx, "backward before the backward of the next stage"));
      }
    }
  }

  // 6. lock-step run
  out.tick.assign(p.actions.size(), -1);
  std::vector<int> fdone(n, detail::never), gdone(n, detail::never), idone(n, detail::never);
  std::vector<int> ptr(static_cast<std::size_t>(P), 0);
  for (int r = 0; r < P; ++r) ptr[static_cast<std::size_t>(r)] = p.begin[static_cast<std::size_t>(r)];
  auto ready = [&](const action& a, int t) {
    const std::size_t q = key(a.stage, a.microbatch, m);
    switch (a.what) {
      case kind::F:
        return a.stage == 0 || fdone[key(a.stage - 1, a.microbatch, m)] < t;
      case kind::B:
      case kind::I:
        return fdone[q] < t && (a.stage == S - 1 || gdone[key(a.stage + 1, a.microbatch, m)] < t);
      case kind::W:
        return idone[q] < t;
    }
    return false;
  };
  auto mark = [&](const action& a, int t) {
    const std::size_t q = key(a.stage, a.microbatch, m);
    if (a.what == kind::F) fdone[q] = t;
    if (is_input_backward(a.what)) gdone[q] = t;
    if (a.what == kind::I) idone[q] = t;
  };
  int remaining = static_cast<int>(p.actions.size());
  for (int t = 0; remaining > 0; ++t) {
    bool progressed = false;
    for (int r = 0; r < P; ++r) {
      int& k = ptr[static_cast<std::size_t>(r)];
      const int e = p.begin[static_cast<std::size_t>(r) + 1];
      if (k >= e) continue;
      const action& a = p.actions[static_cast<std::size_t>(k)];
      const int width = a.overlapped ? 2 : 1;
      bool ok = true;
      for (int d = 0; d < width; ++d) ok = ok && ready(p.actions[static_cast<std::size_t>(k + d)], t);
      if (!ok) continue;
      for (int d = 0; d < width; ++d) {
        mark(p.actions[static_cast<std::size_t>(k + d)], t);
        out.tick[static_cast<std::size_t>(k + d)] = t;
      }
      k += width;
      remaining -= width;
      progressed = true;
      out.ticks = t + 1;
    }
    if (!progressed) {
      for (int r = 0; r < P; ++r) {
        const int k = ptr[static_cast<std::size_t>(r)];
        if (k < p.begin[static_cast<std::size_t>(r) + 1])
          return fail(at(errc::cross_rank_deadlock, r, p.actions[static_cast<std::size_t>(k)],
                         k - p.begin[static_cast<std::size_t>(r)],
                         "waits for an input that a rank produces only after it"));
      }
    }
  }

  // 7. memory
  out.peak_units.assign(static_cast<std::size_t>(P), 0);
  for (int r = 0; r < P; ++r) {
    const auto acts = p.rank_actions(r);
    int live = 0, peak = 0;
    for (std::size_t k = 0; k < acts.size(); ++k) {
      live += opt.memory.delta(acts[k].what);
      if (live > peak) {
        peak = live;
        if (opt.mem_limit > 0 && peak > opt.mem_limit * opt.memory.unit)
          return fail(at(errc::memory_limit_exceeded, r, acts[k], static_cast<int>(k), "activations above the limit"));
      }
    }
    out.peak_units[static_cast<std::size_t>(r)] = peak;
  }
  return out;
}

/// The verdict alone.
constexpr verdict verify(program_view p, const check_options& opt = {}) { return check_program(p, opt).result; }

}  // namespace pipetype
