// pipetype/mesh/place_memory.hpp — the pass that places OFFLOAD, RELOAD and RECOMPUTE.
//
// place_memory() writes a step's memory actions (mesh/memory_actions.hpp) for a compute
// program, its saved bytes and a cost model, under memory_options:
//
//   offload   none; all: every microbatch activation whose F→B gap holds the round trip;
//             automatic: only gaps of at least min_gap round trips (PipeOffload drops an offload
//             whose gap is under 3 round trips), the longest gaps first, and with a limit only as
//             many as bring the rank under it
//   recompute none; all: every forward with a backward; automatic: only with a limit, when the
//             offloads the rules allow do not bring the rank under it, the longest gaps first
//   limit     per rank, the device bytes of saved activations (memory_of's peak_bytes); 0: none
//
// Where: an OFFLOAD right after its forward; its `until` `overlap` actions on (1: one action
// overlaps the copy; where copies are slower than the forwards of a warm-up, the forwards are
// spaced out, into the slack they have before their backwards, rather than more memory held), or
// the first action predicted to start once it has ended; its RELOAD as late as
// possible while predicted to complete before the first backward (PipeOffload places reloads right to left); a
// RECOMPUTE right before the first backward, where 1F1B-like schedules leave the rank waiting for the gradient, so it
// runs in that bubble. Predictions come from the cost model's timeline and the rank's one copy stream, FIFO in issue
// order. They only place the actions: what the step then costs is the lowered step's simulation
// (mesh/simulate.hpp), and its correctness the checks' and proofs' (check_memory_actions,
// verify_mesh, verify_memory), whatever the timing.
//
// k, PipeOffload's ratio of a round trip to the compute it hides behind (offload_ratio): the
// largest over the stages of 2 · saved / copy_bandwidth over the stage's F + B time. Full offload
// costs about nothing at k ≤ 1.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "pipetype/analysis/simulate.hpp"
#include "pipetype/mesh/memory_actions.hpp"
#include "pipetype/core/verdict.hpp"

namespace pipetype {

enum class memory_policy : std::uint8_t { none, automatic, all };

struct memory_options {
  memory_policy offload = memory_policy::none;
  memory_policy recompute = memory_policy::none;
  std::int64_t limit = 0;     // per rank, device bytes of saved activations; 0: none
  double copy_bandwidth = 1;  // bytes per time unit of a rank's host link, one direction at a time
  double copy_alpha = 0;      // a copy's fixed latency
  double min_gap = 3;         // automatic offload: the least F→B gap, in round trips
  int overlap = 1;            // the actions an OFFLOAD overlaps before one waits for it (1: the second
                              // after it waits); 0: the first predicted to start once it has ended
  double density = 1;         // the share of the activations the rules allow that is offloaded, spread
                              // evenly in forward order (plan_memory lowers it while copies cost time)
};

/// The pass's answer: the actions, and ok or why a limit cannot be met.
struct memory_placement {
  memory_program actions;
  verdict result{};
};

/// PipeOffload's k for `p` (the top of this file); 0 when nothing is saved.
template <cost_source C>
constexpr double offload_ratio(program_view p, const memory_sizes& z, const C& c, const memory_options& o) {
  double k = 0;
  const bool split = p.split_backward();
  for (int s = 0; s < p.stages; ++s) {
    const double compute = c.time(action{kind::F, s, 0, false}) +
                           (split ? c.time(action{kind::I, s, 0, false}) + c.time(action{kind::W, s, 0, false})
                                  : c.time(action{kind::B, s, 0, false}));
    const double trip =
        2 * (o.copy_alpha + static_cast<double>(z.saved_of(s)) / (o.copy_bandwidth > 0 ? o.copy_bandwidth : 1));
    if (compute > 0) k = std::max(k, trip / compute);
  }
  return k;
}

namespace detail {

/// A (stage, microbatch) of one rank that the pass may act on: its forward and first backward
/// (indices in the rank's list) and the gap between them in the timeline.
struct memory_candidate {
  int stage = -1, microbatch = -1, forward = -1, backward = -1;
  double gap = 0;
};

/// The index after which an action issued "right after action i" goes: i, or the pair's second
/// half when i is a first half.
constexpr int issue_point(std::span<const action> acts, int i) {
  return i >= 0 && acts[static_cast<std::size_t>(i)].overlapped ? i + 1 : i;
}

/// Rank r's actions for the chosen offloads and recomputes (flags per candidate), placed as the top
/// of this file says, given the timeline `t` of the rank's actions (global indices from `first`).
template <class Times>
constexpr std::vector<memory_action> place_rank(std::span<const action> acts, const Times& start, const Times& end,
                                                std::size_t first, const std::vector<memory_candidate>& cand,
                                                const std::vector<char>& off, const std::vector<char>& rec,
                                                const memory_sizes& z, const memory_options& o) {
  const int n = static_cast<int>(acts.size());
  const auto st = [&](int i) { return start[first + static_cast<std::size_t>(i)]; };
  const auto en = [&](int i) { return end[first + static_cast<std::size_t>(i)]; };
  const auto copy_time = [&](const memory_candidate& x, bool kept) {
    const auto bytes = static_cast<double>(kept ? z.kept_of(x.stage) : z.saved_of(x.stage));
    return o.copy_alpha + bytes / (o.copy_bandwidth > 0 ? o.copy_bandwidth : 1);
  };
  struct copy_plan {
    int at = -1;    // issued after this action
    int order = 0;  // among those issued after it: offloads 0, reloads before them −1, after them 1
    bool reload = false;
    double end = 0;     // predicted
    std::size_t c = 0;  // candidate
  };
  std::vector<copy_plan> copies;
  // where an offload issued after action `after` and predicted to end at `t` completes (`until`):
  // `overlap` actions on, or (0) the first action predicted to start once it has ended
  const auto until_of = [&](int after, double t) {
    if (o.overlap > 0) return std::min(after + 1 + o.overlap, n);
    for (int i = after + 2; i < n; ++i)
      if (st(i) >= t - 1e-9 && !acts[static_cast<std::size_t>(i) - 1].overlapped) return i;
    return n;
  };
  const auto offload_end = [&](std::size_t c) {
    for (const copy_plan& y : copies)
      if (y.c == c && !y.reload) return y.end;
    return 0.0;
  };
  // predicted ends of the copies in FIFO issue order
  const auto replay = [&] {
    stable_sort(
        copies, [](const copy_plan& a, const copy_plan& b) { return a.at != b.at ? a.at < b.at : a.order < b.order; });
    double lane = 0;
    for (copy_plan& x : copies) {
      const double begin = std::max(lane, x.at >= 0 ? en(x.at) : 0.0);
      x.end = begin + copy_time(cand[x.c], rec[x.c] != 0);
      lane = x.end;
    }
  };
  // offloads right after their forwards
  for (std::size_t c = 0; c < cand.size(); ++c)
    if (off[c]) copies.push_back({issue_point(acts, cand[c].forward), 0, false, 0, c});
  replay();
  // reloads, earliest backward first, each as late as the FIFO lane lets it complete in time
  std::vector<std::size_t> order;
  for (std::size_t c = 0; c < cand.size(); ++c)
    if (off[c]) order.push_back(c);
  stable_sort(order, [&](std::size_t a, std::size_t b) { return cand[a].backward < cand[b].backward; });
  std::vector<int> reload_at(cand.size(), -1), until(cand.size(), n), recompute_at(cand.size(), -1);
  for (std::size_t c = 0; c < cand.size(); ++c) {
    if (!rec[c]) continue;
    int at = cand[c].backward - 1;  // right before the first backward (before its pair, if it is a second half)
    if (at >= 0 && acts[static_cast<std::size_t>(at)].overlapped) --at;
    recompute_at[c] = std::max(at, issue_point(acts, cand[c].forward));
  }
  for (const std::size_t c : order) {
    const memory_candidate& x = cand[c];
    until[c] = until_of(issue_point(acts, x.forward), offload_end(c));
    const int last = rec[c] ? recompute_at[c] : x.backward - 1;  // the reader waits for it
    const double deadline = st(rec[c] ? recompute_at[c] + 1 : x.backward);
    int best = -1, best_order = 1;
    for (int k = last; k >= until[c] && best < 0; --k) {
      if (acts[static_cast<std::size_t>(k)].overlapped) continue;
      for (const int place_at : {1, -1}) {  // behind the offloads issued with it (their `until` is safer), else ahead
        double fifo = en(k);                // it starts after action k and after every copy ahead of it
        for (const copy_plan& y : copies)
          if (y.at < k || (y.at == k && y.order <= place_at)) fifo = std::max(fifo, y.end);
        if (fifo + copy_time(x, rec[c] != 0) <= deadline + 1e-9) {
          best = k, best_order = place_at;
          break;
        }
      }
    }
    if (best < 0) {  // no reload would be back in time: not offloaded
      for (std::size_t y = 0; y < copies.size(); ++y)
        if (copies[y].c == c) {
          copies.erase(copies.begin() + static_cast<std::ptrdiff_t>(y));
          break;
        }
      replay();
      continue;
    }
    reload_at[c] = best;
    copies.push_back({best, best_order, true, 0, c});
    replay();
  }
  // the actions in the lane's order (the FIFO order the predictions assumed), then the recomputes;
  // an offload's `until` from the final lane, and its reload no earlier
  std::vector<int> until_at(cand.size(), -1);
  for (std::size_t c = 0; c < cand.size(); ++c) {
    if (reload_at[c] < 0) continue;
    const int from = issue_point(acts, cand[c].forward);
    int u = std::min(until_of(from, offload_end(c)), reload_at[c]);
    if (u > 0 && u < n && acts[static_cast<std::size_t>(u) - 1].overlapped) --u;  // before the whole pair
    until_at[c] = u > from ? u : from + 1;
  }
  std::vector<memory_action> out;
  for (const copy_plan& y : copies) {
    const memory_candidate& x = cand[y.c];
    if (reload_at[y.c] < 0) continue;
    if (!y.reload)
      out.push_back(offload(x.stage, x.microbatch, y.at, until_at[y.c]));
    else
      out.push_back(reload(x.stage, x.microbatch, std::max(y.at, until_at[y.c])));
  }
  for (std::size_t c = 0; c < cand.size(); ++c)
    if (rec[c]) out.push_back(recompute(cand[c].stage, cand[c].microbatch, recompute_at[c]));
  stable_sort(out, issued_before);
  return out;
}

}  // namespace detail

/// The memory actions for `p` with saved bytes `z` under cost model `c` and options `o` (the top
/// of this file); predictions from the timeline of `p` under `c`, or from `start` and `end` (per
/// action, as timeline has them) when given. result: ok, or errc::memory_limit_exceeded naming the rank when the limit
/// is below one microbatch's saved bytes there or the rules cannot bring the rank under it.
template <cost_source C = costs>
constexpr memory_placement place_memory(program_view p, const memory_sizes& z, const C& c = {},
                                        const memory_options& o = {}, const memory_model& model = {},
                                        const std::vector<double>* start = nullptr,
                                        const std::vector<double>* end = nullptr) {
  memory_placement out;
  out.actions = no_memory_actions(p);
  if (out.result = check_memory_sizes(z); !out.result.ok()) return out;
  if (o.offload == memory_policy::none && o.recompute == memory_policy::none && o.limit <= 0) return out;
  if (out.result = check_memory_limit(p, z, o.limit); !out.result.ok()) return out;
  timeline t = simulate(p, c, model);
  if (start && end && start->size() == t.start.size() && end->size() == t.end.size())
    t.start = *start, t.end = *end;  // predictions from a timing the caller measured (plan_memory)
  if (!t.complete) {
    out.result = refusal(errc::cross_rank_deadlock,
                         "the program cannot complete, so no memory actions can be placed (verify says why)");
    return out;
  }
  const bool forward_only = is_forward_only(p);
  std::vector<std::vector<memory_action>> per_rank(static_cast<std::size_t>(p.ranks));
  for (int r = 0; r < p.ranks && !forward_only; ++r) {
    const std::span<const action> acts = p.rank_actions(r);
    const auto first = static_cast<std::size_t>(p.begin[static_cast<std::size_t>(r)]);
    // candidates: every (stage, microbatch) with a backward, longest gap first; each forward's
    // first backward after it from the rank's backwards sorted by (stage, microbatch, position)
    // (a scan forward from each forward was quadratic: GPipe's are m actions apart)
    std::vector<detail::memory_candidate> cand;
    struct later {  // (not `stage`: in `x.stage < y` that name reads as the stage concept's template)
      int s, j, at;
    };
    std::vector<later> backs;
    for (int i = 0; i < static_cast<int>(acts.size()); ++i)
      if (acts[static_cast<std::size_t>(i)].what != kind::F)
        backs.push_back({acts[static_cast<std::size_t>(i)].stage, acts[static_cast<std::size_t>(i)].microbatch, i});
    const auto before = [](const later& x, const later& y) -> bool {
      if (x.s != y.s) return x.s < y.s;
      if (x.j != y.j) return x.j < y.j;
      return x.at < y.at;
    };
    detail::stable_sort(backs, before);
    for (int i = 0; i < static_cast<int>(acts.size()); ++i) {
      const action& a = acts[static_cast<std::size_t>(i)];
      if (a.what != kind::F) continue;
      std::size_t lo = 0, hi = backs.size();  // the first (stage, microbatch, at) after (a, i)
      while (lo < hi) {
        const std::size_t mid = (lo + hi) / 2;
        if (before(backs[mid], later{a.stage, a.microbatch, i}))
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo == backs.size() || backs[lo].s != a.stage || backs[lo].j != a.microbatch) continue;
      const int b = backs[lo].at;
      cand.push_back({a.stage, a.microbatch, i, b,
                      t.start[first + static_cast<std::size_t>(b)] - t.end[first + static_cast<std::size_t>(i)]});
    }
    detail::stable_sort(
        cand, [](const detail::memory_candidate& x, const detail::memory_candidate& y) { return x.gap > y.gap; });
    const auto trip = [&](const detail::memory_candidate& x) {
      return 2 *
             (o.copy_alpha + static_cast<double>(z.saved_of(x.stage)) / (o.copy_bandwidth > 0 ? o.copy_bandwidth : 1));
    };
    std::vector<char> off(cand.size(), 0), rec(cand.size(), 0);
    const auto place = [&] { return detail::place_rank(acts, t.start, t.end, first, cand, off, rec, z, o); };
    const auto peak = [&](std::vector<memory_action> mine) {  // this rank's device peak with `mine`
      detail::stable_sort(mine, detail::issued_before);
      std::int64_t most = 0;
      (void)detail::walk_memory(p, r, mine, z, model,
                                [&](std::int64_t d, std::int64_t, double) { most = std::max(most, d); });
      return most;
    };
    // the offloads the rules allow (all: the gap holds a round trip; automatic: min_gap of them),
    // thinned to `density` evenly in forward order
    std::vector<char> allowed(cand.size(), 0);
    if (o.offload != memory_policy::none) {
      std::vector<std::size_t> by_forward;
      for (std::size_t k = 0; k < cand.size(); ++k)
        if (cand[k].gap >= (o.offload == memory_policy::all ? 1.0 : o.min_gap) * trip(cand[k])) by_forward.push_back(k);
      detail::stable_sort(by_forward,
                                [&](std::size_t x, std::size_t y) { return cand[x].forward < cand[y].forward; });
      const double d = std::clamp(o.density, 0.0, 1.0);
      for (std::size_t i = 0; i < by_forward.size(); ++i)
        if (static_cast<long long>(static_cast<double>(i + 1) * d + 1e-9) >
            static_cast<long long>(static_cast<double>(i) * d + 1e-9))
          allowed[by_forward[i]] = 1;
    }
    for (std::size_t k = 0; k < cand.size(); ++k) {
      if (o.offload == memory_policy::all) off[k] = allowed[k];
      if (o.recompute == memory_policy::all) rec[k] = 1;
    }
    std::vector<memory_action> mine = place();
    if (o.offload == memory_policy::automatic || o.recompute == memory_policy::automatic) {
      const bool limited = o.limit > 0;
      // Automatic: without a limit every offload allowed; with one, the fewest candidates, longest
      // gaps first, that bring the rank under it (offloads first, then recomputes). The fewest is
      // found by bisection over how many are taken, so a rank places O(log n) times where adding
      // one at a time placed O(n) times. (The peak falls as more are taken, near enough: a later
      // offload can crowd an earlier one's reload off the copy lane. Whatever the bisection
      // settles on is under the limit: `hi` always is.)
      const auto choose = [](std::vector<char>& chosen, const std::vector<std::size_t>& pool, std::size_t j) {
        for (std::size_t i = 0; i < pool.size(); ++i) chosen[pool[i]] = i < j ? 1 : 0;
      };
      const auto take_first = [&](std::vector<char>& chosen, const std::vector<std::size_t>& pool, std::size_t j) {
        choose(chosen, pool, j);
        return place();
      };
      const auto fewest = [&](std::vector<char>& chosen, const std::vector<std::size_t>& pool) {
        if (pool.empty() || peak(mine) <= o.limit) return;
        std::size_t lo = 0, hi = pool.size();  // peak(first lo) > limit; first hi: the most there is
        std::vector<memory_action> at_hi = take_first(chosen, pool, hi);
        if (peak(at_hi) > o.limit) return void(mine = std::move(at_hi));  // even all of them: refused below
        while (hi - lo > 1) {
          const std::size_t mid = lo + (hi - lo) / 2;
          std::vector<memory_action> at_mid = take_first(chosen, pool, mid);
          if (peak(at_mid) <= o.limit)
            hi = mid, at_hi = std::move(at_mid);
          else
            lo = mid;
        }
        choose(chosen, pool, hi);
        mine = std::move(at_hi);
      };
      if (o.offload == memory_policy::automatic) {
        std::vector<std::size_t> pool;  // the allowed offloads, longest gaps first
        for (std::size_t k = 0; k < cand.size(); ++k)
          if (allowed[k] && !off[k]) pool.push_back(k);
        if (!limited) {
          for (const std::size_t k : pool) off[k] = 1;
          mine = place();
        } else {
          fewest(off, pool);
        }
      }
      if (o.recompute == memory_policy::automatic && limited) {
        std::vector<std::size_t> pool;
        for (std::size_t k = 0; k < cand.size(); ++k)
          if (!rec[k]) pool.push_back(k);
        fewest(rec, pool);
      }
    }
    if (o.limit > 0 && peak(mine) > o.limit) {
      // the advice names only what the options did not allow already
      out.result =
          refusal(errc::memory_limit_exceeded,
                  o.recompute == memory_policy::none
                      ? "the offloads and recomputes the options allow do not bring this rank's saved activations "
                        "under the limit (allow recompute, or offload with a smaller min_gap)"
                  : o.offload == memory_policy::none
                      ? "even recomputing every forward it may, this rank's saved activations stay over the limit "
                        "(allow offload too, or raise the limit)"
                      : "even with offload and recompute allowed, this rank's saved activations stay over the limit "
                        "(raise the limit, or offload with a smaller min_gap)")
              .on_rank(r);
      return out;
    }
    per_rank[static_cast<std::size_t>(r)] = std::move(mine);
  }
  out.actions = memory_program_of(p, std::move(per_rank));
  return out;
}

}  // namespace pipetype
