// pipetype/analysis/bounds.hpp — a lower bound on a program's makespan under a cost model.
//
// No schedule of the same actions on the same placement can finish a step faster than
//   busiest rank   max over ranks r of  head(r) + work(r): the rank's own actions (a pair at its
//                  pair time) after the earliest moment any of them could start, the forward
//                  chain of a microbatch up to the rank's first stage, with transfer latencies;
//   critical path  max over microbatches j of the dependency chain F(0..S−1, j) → B/I(S−1..0, j)
//                  → W(0, j) within each lane, each crossing between ranks adding its latency
//                  (a forward-only program: the forward chain alone).
// The zero-bubble paper (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024) bounds its
// schedules by the first (p·(F+B+W)-style busiest-rank work) and the second (the first and last
// microbatch's chain). `gap = makespan / bound − 1` says how far a schedule is from it; 0 means
// provably optimal for these costs and this placement.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/core/program.hpp"

namespace pipetype {

struct makespan_bound {
  double busiest_rank = 0;   // max over ranks of head + work
  double critical_path = 0;  // max over microbatches of its dependency chain
  constexpr double value() const noexcept { return busiest_rank > critical_path ? busiest_rank : critical_path; }
  /// makespan / value() − 1 (0 when the bound is 0).
  constexpr double gap(double makespan) const noexcept { return value() > 0 ? makespan / value() - 1 : 0; }
};

/// The bound for `p` under `c` (see the header comment).
template <cost_source C = costs>
constexpr makespan_bound makespan_lower_bound(program_view p, const C& c = {}) {
  makespan_bound out;
  const int S = p.stages, m = p.microbatches, P = p.ranks;
  if (S <= 0 || m <= 0 || P <= 0) return out;
  const std::vector<int> owner = detail::stage_owners(p);
  const int L = p.lane_length();
  auto hop = [&](int from, int to) {  // the latency of a hand-off from stage `from` to `to`
    const int a = owner[static_cast<std::size_t>(from)], b = owner[static_cast<std::size_t>(to)];
    return a >= 0 && b >= 0 && a != b ? static_cast<double>(c.latency(from, to)) : 0.0;
  };
  // ready[s·m + j]: the earliest F(s, j) could start, from its lane's head (forward chain); with
  // edges, from every producer, stages taken in a topological order
  std::vector<double> ready(static_cast<std::size_t>(S) * static_cast<std::size_t>(m), 0);
  // (assigned, not `c ? f() : T{}`: g++ 12 destroys that twice in a constant expression)
  detail::stage_links links;
  std::vector<int> order;
  if (p.has_edges()) {
    links = detail::links_of(p);
    order = detail::link_order(links, S);
  }
  for (int s = 0; s < S && !p.has_edges(); ++s)
    for (int j = 0; j < m; ++j) {
      if (p.lane_head(s)) continue;
      const std::size_t q = detail::key(s, j, m), in = detail::key(s - 1, j, m);
      ready[q] = ready[in] + static_cast<double>(c.time(F(s - 1, j))) + hop(s - 1, s);
    }
  for (int stage : order)
    for (int e = links.pred_begin[static_cast<std::size_t>(stage)];
         e < links.pred_begin[static_cast<std::size_t>(stage) + 1]; ++e) {
      const int producer_stage = links.pred[static_cast<std::size_t>(e)];
      for (int j = 0; j < m; ++j) {
        const double t = ready[detail::key(producer_stage, j, m)] + static_cast<double>(c.time(F(producer_stage, j))) +
                         hop(producer_stage, stage);
        double& r = ready[detail::key(stage, j, m)];
        r = t > r ? t : r;
      }
    }
  // busiest rank: head + work
  for (int r = 0; r < P; ++r) {
    const auto acts = p.rank_actions(r);
    if (acts.empty()) continue;
    double work = 0, head = -1;
    for (std::size_t k = 0; k < acts.size(); ++k) {
      const action& a = acts[k];
      if (a.overlapped && k + 1 < acts.size()) {
        work += static_cast<double>(c.pair_time(a, acts[k + 1]));
        ++k;
      } else {
        work += static_cast<double>(c.time(a));
      }
      if (a.what == kind::F) {
        const double e = ready[detail::key(a.stage, a.microbatch, m)];
        head = head < 0 || e < head ? e : head;
      }
    }
    out.busiest_rank = std::max(out.busiest_rank, (head < 0 ? 0 : head) + work);
  }
  // critical path of each microbatch in each lane: forwards down, input backwards up (B or I, as
  // the program has it), then the lane head's W when it has one
  std::vector<char> split(static_cast<std::size_t>(S) * static_cast<std::size_t>(m), 0);
  for (const action& a : p.actions)
    if (a.what == kind::I) split[detail::key(a.stage, a.microbatch, m)] = 1;
  if (is_forward_only(p)) {  // no backward: each microbatch's path ends with its last forward
    for (const action& a : p.actions)
      out.critical_path = std::max(out.critical_path, ready[detail::key(a.stage, a.microbatch, m)] +
                                                          static_cast<double>(c.time(F(a.stage, a.microbatch))));
    return out;
  }
  if (p.has_edges()) {  // the longest path: forwards down every edge, input backwards back up them
    std::vector<double> back(static_cast<std::size_t>(S) * static_cast<std::size_t>(m), 0);
    for (std::size_t k = order.size(); k-- > 0;) {
      const int s = order[k];
      const auto su = static_cast<std::size_t>(s);
      for (int j = 0; j < m; ++j) {
        if (!p.runs_through(s, j)) continue;  // another lane's copy of the graph
        const std::size_t q = detail::key(s, j, m);
        double t = links.grad_begin[su] == links.grad_begin[su + 1]
                       ? ready[q] + static_cast<double>(c.time(F(s, j)))  // a loss: its backward follows its forward
                       : 0.0;
        for (int e = links.grad_begin[su]; e < links.grad_begin[su + 1]; ++e) {  // (not over a detached edge)
          const int consumer = links.grad[static_cast<std::size_t>(e)];
          const double g = back[detail::key(consumer, j, m)] + hop(consumer, s);
          t = g > t ? g : t;
        }
        back[q] = t + static_cast<double>(c.time(split[q] ? I(s, j) : B(s, j)));
        const double end = back[q] + (split[q] ? static_cast<double>(c.time(W(s, j))) : 0.0);
        out.critical_path = std::max(out.critical_path, end);
      }
    }
    return out;
  }
  for (int j = 0; j < m; ++j)
    for (int head = 0; head < S; head += L) {
      const int tail = head + L - 1;
      if (!p.runs_through(head, j)) continue;
      double t = ready[detail::key(tail, j, m)] + static_cast<double>(c.time(F(tail, j)));
      for (int s = tail; s >= head; --s) {
        t += static_cast<double>(c.time(split[detail::key(s, j, m)] ? I(s, j) : B(s, j)));
        if (s > head) t += hop(s, s - 1);
      }
      if (split[detail::key(head, j, m)]) t += static_cast<double>(c.time(W(head, j)));
      out.critical_path = std::max(out.critical_path, t);
    }
  return out;
}

}  // namespace pipetype
