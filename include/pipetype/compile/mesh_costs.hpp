// pipetype/compile/mesh_costs.hpp — how long a mesh step takes, and how much of its data-parallel
// communication shows.
//
// simulate_mesh() runs a mesh program (compile/mesh_program.hpp) as verify_mesh proves it runs —
// every (rank, stream) lane in order, a wait until its event's op has ended, a group once its
// partners' groups are reached, a collective once every member has reached it — with times:
//   compute      the cost model's time of its action (an overlapped pair: the pair's time on its
//                first op, 0 on its second, as the single-replica simulator counts it)
//   group        the cost model's transfer latency, from the last of its rendezvous to arrive
//   collective   α + the bytes over the bus bandwidth times NCCL's factor for n members
//                (nccl-tests' PERFORMANCE.md): all-reduce 2(n−1)/n, reduce-scatter and all-gather
//                (n−1)/n; from the last member to arrive
//   the rest     0 (records, waits, releases)
// A stage's bytes are its parameters' (mesh_costs::param_bytes, per plan stage, or one value for
// every stage); a tie group's all-reduce moves tie_bytes. The makespan is when the last op ends.
// exposed_dp() is the makespan's growth over the same plan on the same mesh without its
// collectives: the data-parallel time the schedule fails to hide behind compute.
#pragma once

#include <algorithm>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/compile/mesh_program.hpp"

namespace pipetype {

struct mesh_costs {
  std::vector<double> param_bytes{};  // per plan stage; one value: every stage; empty: 0
  double tie_bytes = 0;               // a tie group's parameter
  double bandwidth = 1;               // bytes per time unit of one link (the bus bandwidth)
  double alpha = 0;                   // a collective's fixed latency

  double stage_bytes(int s) const {
    if (param_bytes.empty() || s < 0) return 0;
    return param_bytes.size() == 1
               ? param_bytes.front()
               : (static_cast<std::size_t>(s) < param_bytes.size() ? param_bytes[static_cast<std::size_t>(s)] : 0);
  }
  /// The time of collective `o` among n members.
  double time(const mesh_op& o, int n) const {
    if (n <= 1 || bandwidth <= 0) return alpha;
    const double bytes = o.tie >= 0 ? tie_bytes : stage_bytes(o.stage);
    const double factor = (o.code == mesh_op_code::all_reduce ? 2.0 : 1.0) * (n - 1) / n;
    return alpha + factor * bytes / bandwidth;
  }
};

/// When each op of a mesh step ends, and the step's makespan.
struct mesh_timeline {
  std::vector<double> start, end;  // per op of the mesh program
  double makespan = 0;
  bool completed = false;  // false: the program cannot complete (verify_mesh says why)
};

/// The step of `mp` under `c` (compute and transfers) and `d` (collectives); see the top of this
/// file. `mp` should pass verify_mesh: a program that cannot complete gives completed = false.
template <class Costs>
mesh_timeline simulate_mesh(const mesh_program& mp, const Costs& c, const mesh_costs& d) {
  const int G = mp.shape.size(), N = static_cast<int>(mp.ops.size()), C = static_cast<int>(mp.comms.size());
  mesh_timeline t;
  t.start.assign(static_cast<std::size_t>(N), 0);
  t.end.assign(static_cast<std::size_t>(N), 0);
  std::vector<int> rank_of(static_cast<std::size_t>(N)), waits_on(static_cast<std::size_t>(N), -1),
      group_of(static_cast<std::size_t>(N), -1), group_end(static_cast<std::size_t>(N), -1),
      partner(static_cast<std::size_t>(N), -1), coll_pos(static_cast<std::size_t>(N), -1);
  std::vector<double> duration(static_cast<std::size_t>(N), 0);
  std::map<std::tuple<int, int, int>, std::vector<int>> sends, recvs;
  std::vector<std::vector<std::vector<int>>> colls(static_cast<std::size_t>(C));
  for (int k = 0; k < C; ++k)
    colls[static_cast<std::size_t>(k)].resize(mp.comms[static_cast<std::size_t>(k)].members.size());
  for (int g = 0; g < G; ++g) {
    std::vector<int> last_record(static_cast<std::size_t>(mp.events[static_cast<std::size_t>(g)]), -1);
    const int b = mp.begin[static_cast<std::size_t>(g)], e = mp.begin[static_cast<std::size_t>(g) + 1];
    bool pair_second = false;
    for (int i = b; i < e; ++i) {
      const mesh_op& o = mp.ops[static_cast<std::size_t>(i)];
      rank_of[static_cast<std::size_t>(i)] = g;
      const int wait = o.code == mesh_op_code::wait ? o.event : o.wait_event;
      if (wait >= 0 && wait < static_cast<int>(last_record.size()))
        waits_on[static_cast<std::size_t>(i)] = last_record[static_cast<std::size_t>(wait)];
      const int rec = o.code == mesh_op_code::record ? o.event : o.record_event;
      if (rec >= 0 && rec < static_cast<int>(last_record.size())) last_record[static_cast<std::size_t>(rec)] = i;
      if (o.code == mesh_op_code::compute) {
        const action a{o.what, o.stage, o.microbatch, o.overlapped};
        if (o.overlapped) {  // the pair's time on its first op; the second op is found below
          int j = i + 1;
          while (j < e && mp.ops[static_cast<std::size_t>(j)].code != mesh_op_code::compute) ++j;
          duration[static_cast<std::size_t>(i)] =
              j < e ? c.pair_time(
                          a, action{mp.ops[static_cast<std::size_t>(j)].what, mp.ops[static_cast<std::size_t>(j)].stage,
                                    mp.ops[static_cast<std::size_t>(j)].microbatch, false})
                    : c.time(a);
          pair_second = true;
        } else {
          duration[static_cast<std::size_t>(i)] = pair_second ? 0 : c.time(a);
          pair_second = false;
        }
      } else if (o.code == mesh_op_code::group) {
        duration[static_cast<std::size_t>(i)] = c.latency(-1, -1);
        detail::mark_group(mp, i, e, group_of, group_end);
      } else if (o.code == mesh_op_code::send || o.code == mesh_op_code::recv) {
        if (group_of[static_cast<std::size_t>(i)] < 0) {
          group_of[static_cast<std::size_t>(i)] = i, group_end[static_cast<std::size_t>(i)] = i;
          duration[static_cast<std::size_t>(i)] = c.latency(-1, -1);
        }
        const bool s = o.code == mesh_op_code::send;
        (s ? sends : recvs)[{o.comm, s ? g : o.peer, s ? o.peer : g}].push_back(i);
      } else if (is_collective(o.code) && o.comm >= 0 && o.comm < C) {
        const std::vector<int>& ms = mp.comms[static_cast<std::size_t>(o.comm)].members;
        const auto at = static_cast<std::size_t>(std::lower_bound(ms.begin(), ms.end(), g) - ms.begin());
        if (at < ms.size()) {
          coll_pos[static_cast<std::size_t>(i)] = static_cast<int>(colls[static_cast<std::size_t>(o.comm)][at].size());
          colls[static_cast<std::size_t>(o.comm)][at].push_back(i);
        }
        duration[static_cast<std::size_t>(i)] = d.time(o, static_cast<int>(ms.size()));
      }
    }
  }
  for (const auto& [key, s] : sends) {
    const std::vector<int>& r = recvs[key];
    for (std::size_t k = 0; k < s.size() && k < r.size(); ++k)
      partner[static_cast<std::size_t>(s[k])] = r[k], partner[static_cast<std::size_t>(r[k])] = s[k];
  }
  const int lanes = G * mesh_stream_count;
  const std::vector<std::vector<int>> lane = detail::lanes_of(mp, rank_of);
  std::vector<std::size_t> pc(static_cast<std::size_t>(lanes), 0);
  std::vector<double> clock(static_cast<std::size_t>(lanes), 0), reach(static_cast<std::size_t>(N), -1);
  std::vector<char> done(static_cast<std::size_t>(N), 0);
  int remaining = N;
  while (remaining > 0) {
    bool progressed = false;
    for (int l = 0; l < lanes; ++l) {
      const std::vector<int>& q = lane[static_cast<std::size_t>(l)];
      while (pc[static_cast<std::size_t>(l)] < q.size()) {
        const int i = q[pc[static_cast<std::size_t>(l)]];
        const mesh_op& o = mp.ops[static_cast<std::size_t>(i)];
        const int w = waits_on[static_cast<std::size_t>(i)];
        if (w >= 0 && !done[static_cast<std::size_t>(w)]) break;
        // reached: when the lane is free and its wait has ended
        const double at =
            std::max(clock[static_cast<std::size_t>(l)], w >= 0 ? t.end[static_cast<std::size_t>(w)] : 0.0);
        double begin = at;
        int n = 1;
        if (o.code == mesh_op_code::group || o.code == mesh_op_code::send || o.code == mesh_op_code::recv) {
          const int g0 = group_of[static_cast<std::size_t>(i)], e = group_end[static_cast<std::size_t>(i)];
          if (reach[static_cast<std::size_t>(g0)] < 0) reach[static_cast<std::size_t>(g0)] = at;
          bool all = true;
          for (int j = g0; j <= e && all; ++j) {
            const mesh_op& x = mp.ops[static_cast<std::size_t>(j)];
            if (x.code != mesh_op_code::send && x.code != mesh_op_code::recv) continue;
            const int pj = partner[static_cast<std::size_t>(j)];
            const double pr = pj < 0 ? -1 : reach[static_cast<std::size_t>(group_of[static_cast<std::size_t>(pj)])];
            if (pr < 0)
              all = false;
            else
              begin = std::max(begin, pr);
          }
          if (!all) break;
          n = e - g0 + 1;
        } else if (is_collective(o.code)) {
          if (reach[static_cast<std::size_t>(i)] < 0) reach[static_cast<std::size_t>(i)] = at;
          bool all = coll_pos[static_cast<std::size_t>(i)] >= 0;
          for (const std::vector<int>& mq : colls[static_cast<std::size_t>(o.comm)]) {
            const auto k = static_cast<std::size_t>(coll_pos[static_cast<std::size_t>(i)]);
            const double pr = k < mq.size() ? reach[static_cast<std::size_t>(mq[k])] : -1;
            if (pr < 0)
              all = false;
            else
              begin = std::max(begin, pr);
          }
          if (!all) break;
        }
        const double finish = begin + duration[static_cast<std::size_t>(i)];
        for (int j = 0; j < n; ++j) {
          t.start[static_cast<std::size_t>(i + j)] = begin;
          t.end[static_cast<std::size_t>(i + j)] = finish;
          done[static_cast<std::size_t>(i + j)] = 1;
        }
        clock[static_cast<std::size_t>(l)] = finish;
        t.makespan = std::max(t.makespan, finish);
        pc[static_cast<std::size_t>(l)] += static_cast<std::size_t>(n);
        remaining -= n;
        progressed = true;
      }
    }
    if (!progressed) return t;  // cannot complete
  }
  t.completed = true;
  return t;
}

/// The makespan's growth from the collectives: `with` (the step and its collectives) against the
/// same plan on the same mesh without them (lower_mesh with no collectives).
template <class Costs>
double exposed_dp(program_view p, lowered_view l, const mesh& m, const collective_program& with, const dp_options& o,
                  const Costs& c, const mesh_costs& d) {
  collective_program none;
  none.ranks = p.ranks;
  none.begin.assign(static_cast<std::size_t>(p.ranks) + 1, 0);
  const mesh_timeline a = simulate_mesh(lower_mesh(p, l, m, with, o), c, d);
  const mesh_timeline b = simulate_mesh(lower_mesh(p, l, m, none, o), c, d);
  return a.makespan - b.makespan;
}

}  // namespace pipetype
