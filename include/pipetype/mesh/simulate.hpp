// pipetype/mesh/simulate.hpp — how long a mesh step takes, and how much of its data-parallel
// communication shows.
//
// simulate_mesh() runs a mesh program (mesh/lower.hpp) as verify_mesh proves it runs —
// every (rank, stream) lane in order, a wait until its event's op has ended, a group once its
// partners' groups are reached, a collective once every member has reached it — with times:
//   compute      the cost model's time of its action (an overlapped pair: the pair's time on its
//                first op, 0 on its second, as the single-replica simulator counts it)
//   group        the cost model's transfer latency, from the last of its rendezvous to arrive
//   collective   α + the bytes over the bus bandwidth times NCCL's factor for n members
//                (nccl-tests' PERFORMANCE.md): all-reduce 2(n−1)/n, reduce-scatter and all-gather
//                (n−1)/n; from the last member to arrive. A bucket of a bucketed REDUCE_GRAD moves
//                1/buckets of the stage's bytes, and may start once (b + 1)/buckets of the
//                backward it waits for has run (a backward writes its buckets at an even pace)
//   copy         OFFLOAD and RELOAD: copy_alpha + the bytes they move (memory_sizes: saved, or
//                kept for a recomputed forward) over copy_bandwidth — one copy stream per rank, so
//                PCIe is one serial resource per rank that overlaps compute
//   recompute    the cost model's time of the forward it repeats
//   OPT_STEP     the parameter bytes it updates (its stage's, a replica's shard of them when the
//                step scatters: ZeRO-1, FSDP) over optimizer_bandwidth (0: free)
//   the rest     0 (records, waits, releases)
// A stage's bytes are its parameters' (mesh_costs::param_bytes, per plan stage, or one value for
// every stage); a tie group's all-reduce moves tie_bytes. The makespan is when the last op ends.
// exposed_dp() is the makespan's growth over the same plan on the same mesh without its
// collectives: the data-parallel time the schedule fails to hide behind compute.
#pragma once

#include <algorithm>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/mesh/verify.hpp"

namespace pipetype {

struct mesh_costs {
  std::vector<double> param_bytes{};  // per plan stage; one value: every stage; empty: 0
  double tie_bytes = 0;               // a tie group's parameter
  double bandwidth = 1;               // bytes per time unit of one link (the bus bandwidth)
  double alpha = 0;                   // a collective's fixed latency
  memory_sizes activations{};         // what OFFLOAD and RELOAD move
  double copy_bandwidth = 1;          // bytes per time unit of a rank's host link (PCIe), one direction at a time
  double copy_alpha = 0;              // a copy's fixed latency
  double optimizer_bandwidth = 0;     // parameter bytes per time unit an OPT_STEP updates (0: it takes no time)

  double stage_bytes(int s) const {
    if (param_bytes.empty() || s < 0) return 0;
    return param_bytes.size() == 1
               ? param_bytes.front()
               : (static_cast<std::size_t>(s) < param_bytes.size() ? param_bytes[static_cast<std::size_t>(s)] : 0);
  }
  /// The time of collective `o` among n members, in a step whose reductions have `buckets` (a
  /// bucket moves its share of the stage's bytes, and pays α of its own).
  double time(const mesh_op& o, int n, int buckets = 1) const {
    if (n <= 1 || bandwidth <= 0) return alpha;
    const double bytes = o.tie >= 0 ? tie_bytes : stage_bytes(o.stage) / (o.bucket >= 0 && buckets > 1 ? buckets : 1);
    const double factor = (o.code == mesh_op_code::all_reduce ? 2.0 : 1.0) * (n - 1) / n;
    return alpha + factor * bytes / bandwidth;
  }
  /// The time of OPT_STEP `o` over 1/parts of its stage's parameters.
  double optimizer_time(const mesh_op& o, int parts) const {
    return optimizer_bandwidth > 0 ? stage_bytes(o.stage) / (parts > 1 ? parts : 1) / optimizer_bandwidth : 0;
  }
  /// The time of OFFLOAD or RELOAD `o`.
  double copy_time(const mesh_op& o) const {
    const auto bytes = static_cast<double>(o.kept_only ? activations.kept_of(o.stage) : activations.saved_of(o.stage));
    return copy_bandwidth > 0 ? copy_alpha + bytes / copy_bandwidth : copy_alpha;
  }
};

/// When each op of a mesh step ends, and the step's makespan.
struct mesh_timeline {
  std::vector<double> start, end;  // per op of the mesh program
  double makespan = 0;
  bool completed = false;  // false: the program cannot complete (verify_mesh says why)
};

/// The step of `mp` under `c` (compute and transfers) and `d` (collectives); see the top of this
/// file. `mp` should pass verify_mesh: one that does not gives completed = false.
template <class Costs>
mesh_timeline simulate_mesh(const mesh_program& mp, const Costs& c, const mesh_costs& d) {
  mesh_timeline t;
  detail::mesh_index x;
  if (!detail::index_mesh(mp, x).ok()) return t;
  std::vector<double> duration(mp.ops.size(), 0);
  for (int g = 0; g < mp.shape.size(); ++g) {
    const int e = mp.begin[static_cast<std::size_t>(g) + 1];
    bool pair_second = false;  // the op is the second of an overlapped pair: its time is on the first
    for (int i = mp.begin[static_cast<std::size_t>(g)]; i < e; ++i) {
      const mesh_op& o = mp.ops[static_cast<std::size_t>(i)];
      double& dt = duration[static_cast<std::size_t>(i)];
      if (o.code == mesh_op_code::compute) {
        const action a{o.what, o.stage, o.microbatch, o.overlapped};
        if (o.overlapped) {
          int j = i + 1;
          while (j < e && mp.ops[static_cast<std::size_t>(j)].code != mesh_op_code::compute) ++j;
          const mesh_op* second = j < e ? &mp.ops[static_cast<std::size_t>(j)] : nullptr;
          dt = second ? c.pair_time(a, action{second->what, second->stage, second->microbatch, false}) : c.time(a);
        } else {
          dt = pair_second ? 0 : c.time(a);
        }
        pair_second = o.overlapped;
      } else if ((o.code == mesh_op_code::group || o.code == mesh_op_code::send || o.code == mesh_op_code::recv) &&
                 x.group_of[static_cast<std::size_t>(i)] == i) {
        dt = c.latency(-1, -1);  // a group's head (a lone transfer heads its own)
      } else if (is_collective(o.code)) {
        dt = d.time(o, static_cast<int>(mp.comms[static_cast<std::size_t>(o.comm)].members.size()), mp.buckets);
      } else if (is_copy(o.code)) {
        dt = d.copy_time(o);
      } else if (o.code == mesh_op_code::recompute) {
        dt = c.time(action{kind::F, o.stage, o.microbatch, false});
      } else if (o.code == mesh_op_code::optimizer_step) {
        dt = d.optimizer_time(o, mp.scatters_gradients() ? mp.shape.dp : 1);
      }
    }
  }
  detail::mesh_run run;
  detail::run_mesh(mp, x, duration, run);
  t.start = std::move(run.start);
  t.end = std::move(run.end);
  t.makespan = run.makespan;
  t.completed = run.completed;
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
