// pipetype/schedules/zb_exact.hpp — the optimum of zb_auto's model for tiny problems.
//
// A branch and bound over every program of the model (zb_model.hpp: each rank runs its F's, I's
// and W's in microbatch order, each action as early as its rank and inputs allow) that fits the
// memory limit, for the smallest largest rank span. It answers how far zb_auto is from optimal,
// not only from its bound, so it is meant for sizes like p ≤ 4, m ≤ 8; a node budget caps it,
// and the answer says whether the search finished (then the span is the optimum) or not (then
// it is the best found and the lower bound stands).
//
// Each program is built once: actions are appended in order of start time, ties by rank, so the
// sequence is unique (a positive duration makes every input and every earlier action on the rank
// start strictly before). At each node the candidates are, per rank, its next F (within memory),
// I or W whose inputs are placed and that starts no earlier than the last appended one; a rank
// whose every possible next action would start earlier is a dead end. A node is cut when a rank's
// span must exceed the best so far:
//   work     max(its free time, the current start) + the work it still has;
//   chain    the earliest end of its next I (the microbatch's forwards and input backwards below,
//            each after its rank's free time and the current start), then its later I's and the
//            W's from that microbatch on.
// The first incumbent is zb_auto's answer, so the search only looks for something shorter.
// Run time only (recursive, with a node budget); zero-cost actions are not supported (the
// answer then says so).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "pipetype/schedules/zb_auto.hpp"
#include "pipetype/schedules/zb_model.hpp"

namespace pipetype {

struct zb_exact_result {
  /// The shortest rank span found; with `optimal` no program of the model is shorter.
  double rank_span = 0;
  bool optimal = false;
  long long nodes = 0;
  /// The program of that span (zb_auto's when nothing shorter was found).
  program schedule;
  /// Why there is no answer (a problem zb_auto rejects, a zero-cost action), or nullptr.
  const char* error = nullptr;
};

namespace detail {

class zb_exact_search {
 public:
  zb_exact_search(const zb_tables& z, long long node_budget) : z_(z), P_(z.P), m_(z.m), budget_(node_budget) {
    const auto n = static_cast<std::size_t>(P_) * static_cast<std::size_t>(m_);
    fend_.assign(n, unknown);
    iend_.assign(n, unknown);
    const auto Pu = static_cast<std::size_t>(P_);
    nf_.assign(Pu, 0), ni_.assign(Pu, 0), nw_.assign(Pu, 0), live_.assign(Pu, 0);
    free_.assign(Pu, 0), rest_.assign(Pu, 0), first_.assign(Pu, 0), fe_.assign(Pu, 0);
    for (int r = 0; r < P_; ++r) {
      rest_[u(r)] = z.work[u(r)];
      // F(r, 0) is every rank's first action, so its start is fixed: the forward chain's
      first_[u(r)] = r == 0 ? 0 : first_[u(r - 1)] + z.time(0, r - 1, 0) + z.lat_f(r);
    }
  }

  /// Searches below `incumbent` (an ok run); returns the best run and whether it is proven.
  /// `ordered`: in start order (each program once); otherwise in any order, with a dominance
  /// test over the states seen (one program many times, but equal and later states cut).
  std::pair<zb_run, bool> run(zb_run incumbent, bool ordered) {
    best_span_ = incumbent.rank_span;
    best_ = std::move(incumbent);
    placed_.clear();
    ordered_ = ordered;
    nodes_ = 0;
    memo_index_.clear();
    memo_keys_.clear();
    memo_.clear();
    stored_ = 0;
    dfs(-1.0, -1);
    return {std::move(best_), nodes_ <= budget_};
  }

  long long nodes() const { return nodes_; }

 private:
  static constexpr double unknown = -1;
  static std::size_t u(int i) { return static_cast<std::size_t>(i); }
  std::size_t at(int r, int j) const { return u(r) * u(m_) + u(j); }

  // The earliest start of rank r's next action of kind k, or unknown (not possible now).
  double start_of(int r, int k) const {
    const double fr = free_[u(r)];
    if (k == 0) {
      const int j = nf_[u(r)];
      if (j >= m_ || live_[u(r)] + z_.units(r, 0) > z_.limit(r)) return unknown;
      if (r == 0) return fr;
      const double e = fend_[at(r - 1, j)];
      return e == unknown ? unknown : (e + z_.lat_f(r) > fr ? e + z_.lat_f(r) : fr);
    }
    if (k == 1) {
      const int j = ni_[u(r)];
      if (j >= nf_[u(r)]) return unknown;
      double ready = fend_[at(r, j)];
      if (r + 1 < P_) {
        const double g = iend_[at(r + 1, j)];
        if (g == unknown) return unknown;
        ready = g + z_.lat_i(r) > ready ? g + z_.lat_i(r) : ready;
      }
      return ready > fr ? ready : fr;
    }
    return nw_[u(r)] < ni_[u(r)] ? fr : unknown;
  }

  // The earliest end of I(r, j) from here (see the header comment: the chain bound).
  double earliest_i_end(int r, int j, double now) const {
    if (iend_[at(r, j)] != unknown) return iend_[at(r, j)];
    // the forward chain down to the last rank, then the input backwards back up to r
    double f = 0;
    std::vector<double>& fe = fe_;
    for (int s = 0; s < P_; ++s) {
      if (fend_[at(s, j)] != unknown) {
        f = fend_[at(s, j)];
      } else {
        double st = s > 0 ? f + z_.lat_f(s) : 0;
        st = st > now ? st : now;
        st = st > free_[u(s)] ? st : free_[u(s)];
        f = st + z_.time(0, s, j);
      }
      fe[u(s)] = f;
    }
    double g = 0;
    for (int s = P_ - 1; s >= r; --s) {
      if (iend_[at(s, j)] != unknown) {
        g = iend_[at(s, j)];
        continue;
      }
      double st = fe[u(s)];
      if (s + 1 < P_) st = g + z_.lat_i(s) > st ? g + z_.lat_i(s) : st;
      st = st > now ? st : now;
      st = st > free_[u(s)] ? st : free_[u(s)];
      g = st + z_.time(1, s, j);
    }
    return g;
  }

  bool cut(double now) const {
    for (int r = 0; r < P_; ++r) {
      const double fr = free_[u(r)], rest = rest_[u(r)];
      if ((rest > 0 ? (fr > now ? fr : now) + rest : fr) - first_[u(r)] >= best_span_) return true;
      const int j = ni_[u(r)];
      if (j < m_) {
        double after = 0;  // I(r, j+1..) and W(r, j..)
        for (int q = j + 1; q < m_; ++q) after += z_.time(1, r, q);
        for (int q = j; q < m_; ++q) after += z_.time(2, r, q);
        // F's that cannot fit before a release: when no W is pending, the next release is this I
        if (nw_[u(r)] == j) {
          const int room = (z_.limit(r) - live_[u(r)]) / z_.units(r, 0);
          for (int q = nf_[u(r)] + (room > 0 ? room : 0); q < m_; ++q) after += z_.time(0, r, q);
        }
        if (earliest_i_end(r, j, now) + after - first_[u(r)] >= best_span_) return true;
      }
    }
    return false;
  }

  // True when an explored state with the same counts was nowhere later (each continuation of
  // this one is no better there); otherwise remembers this one. Only for the unordered search.
  bool dominated() {
    key_.clear();
    for (int r = 0; r < P_; ++r) key_.push_back(nf_[u(r)]), key_.push_back(ni_[u(r)]), key_.push_back(nw_[u(r)]);
    times_.clear();
    for (int r = 0; r < P_; ++r) {
      times_.push_back(free_[u(r)]);
      if (r + 1 < P_)  // forwards the rank below has not consumed
        for (int j = nf_[u(r + 1)]; j < nf_[u(r)]; ++j) times_.push_back(fend_[at(r, j)]);
      if (r > 0)  // input gradients the rank above has not consumed
        for (int j = ni_[u(r - 1)]; j < ni_[u(r)]; ++j) times_.push_back(iend_[at(r, j)]);
    }
    std::vector<std::vector<double>>& seen = seen_with(key_);
    for (const std::vector<double>& t : seen) {
      bool le = t.size() == times_.size();
      for (std::size_t q = 0; q < t.size() && le; ++q) le = t[q] <= times_[q];
      if (le) return true;
    }
    if (stored_ < memo_limit) seen.push_back(times_), ++stored_;
    return false;
  }

  void place(int r, int k, double start) {
    const auto ru = u(r);
    const int j = k == 0 ? nf_[ru]++ : k == 1 ? ni_[ru]++ : nw_[ru]++;
    const double d = z_.time(k, r, j);
    saved_.push_back(free_[ru]);
    free_[ru] = start + d;
    rest_[ru] -= d;
    live_[ru] += z_.units(r, k);
    if (k == 0) fend_[at(r, j)] = start + d;
    if (k == 1) iend_[at(r, j)] = start + d;
    placed_.push_back(zb_code(r, k, j, m_));
  }

  void unplace(int r, int k) {
    const auto ru = u(r);
    const int j = k == 0 ? --nf_[ru] : k == 1 ? --ni_[ru] : --nw_[ru];
    const double d = z_.time(k, r, j);
    free_[ru] = saved_.back();
    saved_.pop_back();
    rest_[ru] += d;
    live_[ru] -= z_.units(r, k);
    if (k == 0) fend_[at(r, j)] = unknown;
    if (k == 1) iend_[at(r, j)] = unknown;
    placed_.pop_back();
  }

  void dfs(double now, int last_rank) {
    if (++nodes_ > budget_) return;
    if (static_cast<int>(placed_.size()) == 3 * P_ * m_) {
      double span = 0, hi = 0;
      for (int r = 0; r < P_; ++r) {
        span = free_[u(r)] - first_[u(r)] > span ? free_[u(r)] - first_[u(r)] : span;
        hi = free_[u(r)] > hi ? free_[u(r)] : hi;
      }
      if (span < best_span_) {
        best_span_ = span;
        best_.m = m_;
        best_.placed = scratch<int>(static_cast<int>(placed_.size()), unset);
        for (std::size_t q = 0; q < placed_.size(); ++q) best_.placed[static_cast<int>(q)] = placed_[q];
        best_.rank_span = span;
        best_.makespan = hi - first_[0];
        best_.ok = true;
      }
      return;
    }
    if (cut(now < 0 ? 0 : now) || (!ordered_ && dominated())) return;
    struct cand {
      double start;
      int r, k;
    };
    cand cs[96];
    int n = 0;
    for (int r = 0; r < P_; ++r) {
      bool alive = nf_[u(r)] == m_ && ni_[u(r)] == m_ && nw_[u(r)] == m_;  // done
      for (int k = 0; k < 3; ++k) {
        const double s = start_of(r, k);
        const bool later = s != unknown && (!ordered_ || s > now || (s == now && r > last_rank));
        if (later) cs[n++] = {s, r, k};
        // an action whose input is not placed yet can still come; one that could start now but
        // earlier than the last appended one never can
        if (later || (s == unknown && waits_for_input(r, k))) alive = true;
      }
      if (!alive) return;  // this rank can never go on
    }
    for (int a = 1; a < n; ++a)  // earliest first
      for (int b = a;
           b > 0 && (cs[b].start < cs[b - 1].start || (cs[b].start == cs[b - 1].start && cs[b].r < cs[b - 1].r)); --b)
        std::swap(cs[b], cs[b - 1]);
    for (int q = 0; q < n; ++q) {
      place(cs[q].r, cs[q].k, cs[q].start);
      dfs(ordered_ ? cs[q].start : -1.0, ordered_ ? cs[q].r : -1);
      unplace(cs[q].r, cs[q].k);
      if (nodes_ > budget_) return;
    }
  }

  // True when rank r's next action of kind k is not possible yet but may become so: its input is
  // not placed, or (an F) memory is full and an I or W that would free some is still to come.
  bool waits_for_input(int r, int k) const {
    if (k == 0) {
      const int j = nf_[u(r)];
      if (j >= m_) return false;
      if (live_[u(r)] + z_.units(r, 0) > z_.limit(r)) return nw_[u(r)] < ni_[u(r)] || ni_[u(r)] < nf_[u(r)];
      return r > 0 && fend_[at(r - 1, j)] == unknown;
    }
    if (k == 1) {
      const int j = ni_[u(r)];
      return j < nf_[u(r)] && r + 1 < P_ && iend_[at(r + 1, j)] == unknown;
    }
    return false;
  }

  const zb_tables& z_;
  int P_, m_;
  long long budget_, nodes_ = 0;
  double best_span_ = 0;
  zb_run best_;
  std::vector<double> fend_, iend_, free_, rest_, first_, saved_;
  mutable std::vector<double> fe_;  // earliest_i_end's forward chain
  std::vector<int> nf_, ni_, nw_, live_;
  std::vector<int> placed_;  // zb_codes
  bool ordered_ = true;
  static constexpr long long memo_limit = 4'000'000;  // states remembered for the dominance test
  long long stored_ = 0;
  // the states seen, by their counts: an open-addressing table (at most half full) of indices
  // into memo_keys_ and memo_, the explored finishing times under each key
  std::vector<int> memo_index_;  // -1: empty
  std::vector<std::vector<int>> memo_keys_;
  std::vector<std::vector<std::vector<double>>> memo_;

  static std::size_t hash_of(const std::vector<int>& key) {
    std::uint64_t h = 1469598103934665603ULL;  // FNV-1a over the counts
    for (const int v : key) h = (h ^ static_cast<std::uint32_t>(v)) * 1099511628211ULL;
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
  /// The finishing times seen under `key` (a new, empty list the first time).
  std::vector<std::vector<double>>& seen_with(const std::vector<int>& key) {
    if (2 * (memo_keys_.size() + 1) > memo_index_.size()) {  // grow: twice the room, every key placed again
      memo_index_.assign(memo_index_.empty() ? 1024 : 2 * memo_index_.size(), -1);
      for (std::size_t k = 0; k < memo_keys_.size(); ++k) {
        std::size_t h = hash_of(memo_keys_[k]) & (memo_index_.size() - 1);
        while (memo_index_[h] >= 0) h = (h + 1) & (memo_index_.size() - 1);
        memo_index_[h] = static_cast<int>(k);
      }
    }
    std::size_t h = hash_of(key) & (memo_index_.size() - 1);
    for (; memo_index_[h] >= 0; h = (h + 1) & (memo_index_.size() - 1))
      if (memo_keys_[static_cast<std::size_t>(memo_index_[h])] == key)
        return memo_[static_cast<std::size_t>(memo_index_[h])];
    memo_index_[h] = static_cast<int>(memo_keys_.size());
    memo_keys_.push_back(key);
    memo_.emplace_back();
    return memo_.back();
  }
  std::vector<int> key_;
  std::vector<double> times_;
};

}  // namespace detail

/// The optimum of the model for `pr` (see the header comment), searching at most `node_budget`
/// nodes. Meant for p ≤ 4, m ≤ 8; larger problems rarely finish within a budget.
inline zb_exact_result zb_exact(const zb_problem& pr, long long node_budget = 20'000'000) {
  zb_exact_result out;
  if (const char* e = zb_problem_error(pr)) {
    out.error = e;
    return out;
  }
  if (pr.ranks > 32) {
    out.error = "zb_exact: at most 32 ranks";
    return out;
  }
  const detail::zb_tables z = detail::zb_tables_of(pr);
  for (const double t : z.t)
    if (!(t > 0)) {
      out.error = "zb_exact: every action must take a positive time";
      return out;
    }
  const zb_result heuristic = zb_auto_search(pr);
  detail::zb_run incumbent;
  incumbent.ok = true;
  incumbent.m = pr.microbatches;
  incumbent.placed = detail::scratch<int>(static_cast<int>(heuristic.schedule.actions.size()), detail::unset);
  for (std::size_t q = 0; q < heuristic.schedule.actions.size(); ++q) {
    const action& a = heuristic.schedule.actions[q];
    incumbent.placed[static_cast<int>(q)] =
        detail::zb_code(a.stage, detail::zb_kind_index(a.what), a.microbatch, pr.microbatches);
  }
  incumbent.rank_span = heuristic.rank_span;
  incumbent.makespan = heuristic.makespan;
  if (heuristic.gap() <= 1e-12) {  // zb_auto already reached the bound
    out.rank_span = heuristic.rank_span;
    out.optimal = true;
    out.schedule = heuristic.schedule;
    return out;
  }
  // two searches, each with half the budget: in start order (fast per node, strong when memory
  // does not bind) and then, if that did not finish, in any order with the dominance test
  // (which cuts the memory-bound problems the first cannot finish)
  detail::zb_exact_search search{z, node_budget / 2};
  auto [best, finished] = search.run(std::move(incumbent), true);
  out.nodes = search.nodes();
  if (!finished) {
    auto [again, done] = search.run(std::move(best), false);
    best = std::move(again);
    finished = done;
    out.nodes += search.nodes();
  }
  out.rank_span = best.rank_span;
  out.optimal = finished;
  out.schedule = detail::zb_program_of(pr, best);
  out.schedule.name = "zb-exact";
  return out;
}

}  // namespace pipetype
