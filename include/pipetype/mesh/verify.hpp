// pipetype/mesh/verify.hpp — the proof of a mesh step (mesh/lower.hpp writes it). build_mesh, which
// lowers and proves in one call at run time, is mesh/plan.hpp's (beside the compile-time mesh_plan).
//
// verify_mesh() proves that the step completes under NCCL's semantics on every communicator at
// once: every member of a communicator issues the same collectives on it in the same order (the
// k-th on each member must be the same operation of the same stage, or `collective_mismatch`);
// a collective holds its stream until every member has reached it; point-to-point is a blocking
// rendezvous, FIFO per communicator and direction, progressing with its group; a wait holds its
// stream until the latest record of that event issued before it on the rank has completed. It
// runs every (rank, stream) lane as far as it can; if some stop for good, it names the wait-for
// cycle across ranks, streams and communicators (`nccl_deadlock`). The pipeline's own proof
// (verify_lowered) still covers each replica alone; this one covers their composition. On a
// sharded step it then proves the parameter slots (verify_param_slots): no slot gathered into
// while its previous holder may still be read, no compute reading a slot outside its stage's
// UNSHARD … RESHARD, for every timing; and with the optimizer in the step, that each OPT_STEP
// comes after what it reads and what reads the parameters it writes (verify_optimizer_steps).
//
// A bucketed step's backward records its bucket events while it runs (mesh/lower.hpp); the proof
// takes them as recorded when it completes. That is the strictest case: every op's start is a
// monotone function of when the events it waits for are recorded (a lane in order, a rendezvous
// once its last partner arrives), so a step that completes with the records at the backward's end
// completes with any earlier ones too. The simulation (mesh/simulate.hpp) takes bucket b's event
// at (b + 1) / buckets of the backward's time, and the happens-before of the slot proofs
// (stream_clocks.hpp) at its start: what waits for a bucket is not ordered after the backward.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pipetype/mesh/lower.hpp"
#include "pipetype/mesh/stream_clocks.hpp"

namespace pipetype {

namespace detail {

/// The group op at i and the transfers right after it (before e) are one NCCL group: marks
/// group_of (its head) and group_end (its last op) for each.
constexpr void mark_group(const mesh_program& mp, int i, int e, std::vector<int>& group_of,
                          std::vector<int>& group_end) {
  int j = i;
  while (j + 1 < e && (mp.ops[static_cast<std::size_t>(j) + 1].code == mesh_op_code::send ||
                       mp.ops[static_cast<std::size_t>(j) + 1].code == mesh_op_code::recv))
    ++j;
  for (int k = i; k <= j; ++k) group_of[static_cast<std::size_t>(k)] = i, group_end[static_cast<std::size_t>(k)] = j;
}

/// An op as a verdict names it: a collective by the action it carries out (PyTorch's names), a
/// transfer as SEND_F / RECV_B, the others by their op.
constexpr const char* mesh_action_name(const mesh_op& o) noexcept {
  switch (o.code) {
    case mesh_op_code::all_reduce:
      return o.tie >= 0 ? "TIE" : "REDUCE_GRAD";
    case mesh_op_code::local_sum:
      return "TIE";
    case mesh_op_code::reduce_scatter:
      return "REDUCE_GRAD";
    case mesh_op_code::all_gather:
      return "UNSHARD";
    case mesh_op_code::release:
      return "RESHARD";
    case mesh_op_code::send:
      return o.what == kind::F ? "SEND_F" : "SEND_B";
    case mesh_op_code::recv:
      return o.what == kind::F ? "RECV_F" : "RECV_B";
    case mesh_op_code::offload:
      return "OFFLOAD";
    case mesh_op_code::reload:
      return "RELOAD";
    case mesh_op_code::recompute:
      return "RECOMPUTE";
    case mesh_op_code::grad_norm:
      return "GRAD_NORM";
    case mesh_op_code::finite_check:
      return "FINITE_CHECK";
    case mesh_op_code::optimizer_step:
      return "OPT_STEP";
    case mesh_op_code::param_sync:
      return "PARAM_SYNC";
    default:
      return mesh_op_name(o.code);
  }
}

/// A collective's (or a release's, a local sum's) name as executors, failures and traces give it:
/// "REDUCE_GRAD(1)", "TIE(0)", a bucket's "REDUCE_GRAD(1) bucket 2", and with its communicator
/// "REDUCE_GRAD(1) on communicator 5"
/// (io/step_trace.hpp reads that form back from a measured trace).
inline std::string mesh_op_label(const mesh_op& o, bool with_comm = true) {
  std::string out = mesh_action_name(o);
  if (o.code != mesh_op_code::grad_norm && o.code != mesh_op_code::finite_check) {  // (of no stage: "GRAD_NORM")
    out += "(" + std::to_string(o.tie >= 0 ? o.tie : o.stage);
    if (is_copy(o.code) || o.code == mesh_op_code::recompute) out += "," + std::to_string(o.microbatch);
    out += ")";
  }
  if (o.bucket >= 0) out += " bucket " + std::to_string(o.bucket);
  if (with_comm && o.comm >= 0) out += " on communicator " + std::to_string(o.comm);
  return out;
}

constexpr verdict mesh_error(errc code, const mesh_program& mp, int g, int i, const char* why) {
  const mesh_op& o = mp.ops[static_cast<std::size_t>(i)];
  const bool compute = o.code == mesh_op_code::compute;
  return refusal(code, why)
      .on_rank(g)
      .on_stage(o.stage)
      .on_microbatch(o.microbatch)
      .on_kind(compute ? kind_char(o.what) : '?')
      .on_op(compute ? "" : mesh_action_name(o))
      .on_index(i - mp.begin[static_cast<std::size_t>(g)]);
}

constexpr wait_link mesh_link(const mesh_program& mp, int g, int at, int needs, int from) {
  const mesh_op& a = mp.ops[static_cast<std::size_t>(at)];
  const mesh_op& b = mp.ops[static_cast<std::size_t>(needs)];
  wait_link w;
  w.rank = g;
  w.index = at - mp.begin[static_cast<std::size_t>(g)];
  w.at_kind = a.code == mesh_op_code::compute ? kind_char(a.what) : '?';
  w.at_stage = a.stage;
  w.at_microbatch = a.microbatch;
  w.at_name = a.code == mesh_op_code::compute ? nullptr : mesh_action_name(a);
  w.needs_kind = b.code == mesh_op_code::compute ? kind_char(b.what) : '?';
  w.needs_stage = b.stage;
  w.needs_microbatch = b.microbatch;
  w.needs_name = b.code == mesh_op_code::compute ? nullptr : mesh_action_name(b);
  w.from = from;
  w.comm = is_collective(b.code) || b.code == mesh_op_code::send || b.code == mesh_op_code::recv ? b.comm : -1;
  return w;
}

/// What the proof and the timing both read of a mesh program: per op its rank, the op its wait
/// refers to (the latest record of that event issued before it on the rank), its NCCL group (head
/// and last op: a lone transfer is a group of one), its transfer's partner (FIFO per communicator
/// and direction), its position among its rank's collectives on its communicator; per
/// communicator and member those collectives; per (rank, stream) lane its ops in issue order.
struct mesh_index {
  std::vector<int> rank_of, waits_on, group_of, group_end, partner, coll_pos;
  // a wait on a bucket's event (mesh_op::bucket_event): the bucket, and so the part of its
  // backward that has run when the event is recorded, (bucket + 1) / buckets; −1 elsewhere
  std::vector<int> waits_bucket;
  std::vector<std::vector<std::vector<int>>> colls;  // [communicator][member, in members' order]
  std::vector<std::vector<int>> lanes;               // [g · mesh_stream_count + stream]
};

/// One end of a transfer: its channel (communicator, sender, receiver) and op, ordered by channel
/// and then by op (a rank's ops are in issue order).
struct channel_end {
  int comm = -1, from = -1, to = -1, op = -1;
  constexpr bool same_channel(const channel_end& o) const noexcept {
    return comm == o.comm && from == o.from && to == o.to;
  }
  friend constexpr bool operator<(const channel_end& a, const channel_end& b) noexcept {
    if (a.comm != b.comm) return a.comm < b.comm;
    if (a.from != b.from) return a.from < b.from;
    if (a.to != b.to) return a.to < b.to;
    return a.op < b.op;
  }
};
/// Where each channel's run of sorted ends begins, and the end (one past the last run).
constexpr std::vector<std::size_t> channel_runs(const std::vector<channel_end>& ends) {
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k < ends.size(); ++k)
    if (k == 0 || !ends[k].same_channel(ends[k - 1])) out.push_back(k);
  out.push_back(ends.size());
  return out;
}
/// The run of `ends` on `e`'s channel ([b, b) when there is none).
constexpr std::pair<std::size_t, std::size_t> channel_of(const std::vector<channel_end>& ends,
                                                         const std::vector<std::size_t>& runs, const channel_end& e) {
  std::size_t lo = 0, hi = runs.size() - 1;  // runs are in channel order: a binary search
  const channel_end key{e.comm, e.from, e.to, -1};
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (ends[runs[mid]] < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo + 1 < runs.size() && ends[runs[lo]].same_channel(e)) return {runs[lo], runs[lo + 1]};
  return {0, 0};
}

/// Builds `x`, checking every rule but progress on the way (verify_mesh's list): the first op that
/// breaks one, as its verdict.
constexpr verdict index_mesh(const mesh_program& mp, mesh_index& x) {
  const int G = mp.shape.size(), N = static_cast<int>(mp.ops.size()), C = static_cast<int>(mp.comms.size());
  if (static_cast<int>(mp.begin.size()) != G + 1 || static_cast<int>(mp.events.size()) != G) {
    return refusal(errc::index_out_of_range, "a mesh program without one op list and one event pool per rank");
  }
  if (mp.buckets < 1 || mp.buckets > limits::buckets)
    return refusal(errc::index_out_of_range,
                   "a mesh program whose reductions have fewer than 1 or more than 1024 buckets");
  auto member = [&](int comm, int g) {
    const std::vector<int>& ms = mp.comms[static_cast<std::size_t>(comm)].members;
    return std::binary_search(ms.begin(), ms.end(), g);
  };
  const auto n = static_cast<std::size_t>(N);
  x.rank_of.assign(n, -1), x.waits_on.assign(n, -1), x.group_of.assign(n, -1), x.group_end.assign(n, -1);
  x.partner.assign(n, -1), x.coll_pos.assign(n, -1);
  x.waits_bucket.assign(mp.buckets > 1 ? n : 0, -1);  // (a step without buckets: none, and no cost)
  x.colls.assign(static_cast<std::size_t>(C), {});
  for (int c = 0; c < C; ++c)
    x.colls[static_cast<std::size_t>(c)].resize(mp.comms[static_cast<std::size_t>(c)].members.size());
  x.lanes.assign(static_cast<std::size_t>(G * mesh_stream_count), {});
  // transfers per channel (comm, from, to), in issue order once sorted
  std::vector<channel_end> sends, recvs;
  for (int g = 0; g < G; ++g) {
    const int b = mp.begin[static_cast<std::size_t>(g)], e = mp.begin[static_cast<std::size_t>(g) + 1];
    std::vector<int> last_record(static_cast<std::size_t>(mp.events[static_cast<std::size_t>(g)]), -1);
    std::vector<int> bucket_of_event(mp.buckets > 1 ? last_record.size() : 0, -1);  // recorded by a backward
    auto event_ok = [&](int ev) { return ev >= 0 && ev < static_cast<int>(last_record.size()); };
    for (int i = b; i < e; ++i) {
      const mesh_op& o = mp.ops[static_cast<std::size_t>(i)];
      x.rank_of[static_cast<std::size_t>(i)] = g;
      if (o.stream < 0 || o.stream >= mesh_stream_count)
        return mesh_error(errc::index_out_of_range, mp, g, i, "a stream outside the rank's four");
      x.lanes[static_cast<std::size_t>(g * mesh_stream_count + o.stream)].push_back(i);
      const int wait = o.code == mesh_op_code::wait ? o.event : o.wait_event;
      if (wait >= 0 || o.code == mesh_op_code::wait) {
        if (!event_ok(wait) || last_record[static_cast<std::size_t>(wait)] < 0)
          return mesh_error(errc::event_misuse, mp, g, i, "a wait on an event never recorded before it");
        x.waits_on[static_cast<std::size_t>(i)] = last_record[static_cast<std::size_t>(wait)];
        if (mp.buckets > 1)
          x.waits_bucket[static_cast<std::size_t>(i)] = bucket_of_event[static_cast<std::size_t>(wait)];
      }
      if (o.code == mesh_op_code::group) {
        if (o.stream != static_cast<int>(stream_id::comm))
          return mesh_error(errc::nccl_deadlock, mp, g, i, "a group off the communication stream");
        mark_group(mp, i, e, x.group_of, x.group_end);
      } else if (o.code == mesh_op_code::send || o.code == mesh_op_code::recv) {
        if (x.group_of[static_cast<std::size_t>(i)] < 0)  // a group of one
          x.group_of[static_cast<std::size_t>(i)] = i, x.group_end[static_cast<std::size_t>(i)] = i;
        if (o.comm < 0 || o.comm >= C || o.peer < 0 || o.peer >= G || !member(o.comm, g) || !member(o.comm, o.peer))
          return mesh_error(errc::transfer_mismatch, mp, g, i,
                            "rank or peer is not a member of the transfer's communicator");
        const bool sending = o.code == mesh_op_code::send;
        (sending ? sends : recvs).push_back({o.comm, sending ? g : o.peer, sending ? o.peer : g, i});
      } else if (is_collective(o.code)) {  // (on any stream: lower_mesh uses the dp stream, NCCL allows any)
        if (o.comm < 0 || o.comm >= C || !member(o.comm, g))
          return mesh_error(errc::collective_mismatch, mp, g, i,
                            "a collective on a communicator the rank is not a member of");
        if (o.bucket < -1 || o.bucket >= mp.buckets || (o.bucket >= 0 && o.tie >= 0))
          return mesh_error(errc::index_out_of_range, mp, g, i, "a collective of a bucket the step does not have");
        const std::vector<int>& ms = mp.comms[static_cast<std::size_t>(o.comm)].members;
        const auto at = static_cast<std::size_t>(std::lower_bound(ms.begin(), ms.end(), g) - ms.begin());
        std::vector<int>& mine = x.colls[static_cast<std::size_t>(o.comm)][at];
        x.coll_pos[static_cast<std::size_t>(i)] = static_cast<int>(mine.size());
        mine.push_back(i);
      }
      const int rec = o.code == mesh_op_code::record ? o.event : o.record_event;
      if (rec >= 0 || o.code == mesh_op_code::record) {
        if (!event_ok(rec)) return mesh_error(errc::event_misuse, mp, g, i, "an event outside the rank's pool");
        last_record[static_cast<std::size_t>(rec)] = i;
        if (mp.buckets > 1) bucket_of_event[static_cast<std::size_t>(rec)] = -1;
      }
      if (o.bucket_event >= 0) {  // a backward's buckets: recorded while it runs, by the end of it
        if (mp.buckets < 2 || o.code != mesh_op_code::compute || (o.what != kind::B && o.what != kind::W) ||
            !event_ok(o.bucket_event) || !event_ok(o.bucket_event + mp.buckets - 1))
          return mesh_error(errc::event_misuse, mp, g, i,
                            "bucket events on an op that is no weight backward, or outside the rank's pool");
        for (int k = 0; k < mp.buckets; ++k) {
          last_record[static_cast<std::size_t>(o.bucket_event + k)] = i;
          bucket_of_event[static_cast<std::size_t>(o.bucket_event + k)] = k;
        }
      }
    }
  }
  // point-to-point: the k-th send matches the k-th recv of its channel and carries the same data
  std::sort(sends.begin(), sends.end());
  std::sort(recvs.begin(), recvs.end());
  const std::vector<std::size_t> send_runs = channel_runs(sends), recv_runs = channel_runs(recvs);
  for (std::size_t u = 0; u + 1 < send_runs.size(); ++u) {
    const std::size_t sb = send_runs[u], se = send_runs[u + 1];
    const auto [rb, re] = channel_of(recvs, recv_runs, sends[sb]);
    const std::size_t ns = se - sb, nr = re - rb;
    for (std::size_t k = 0; k < std::min(ns, nr); ++k) {
      const int si = sends[sb + k].op, ri = recvs[rb + k].op;
      const mesh_op &a = mp.ops[static_cast<std::size_t>(si)], &bo = mp.ops[static_cast<std::size_t>(ri)];
      if (a.what != bo.what || a.stage != bo.stage || a.microbatch != bo.microbatch)
        return mesh_error(errc::transfer_mismatch, mp, x.rank_of[static_cast<std::size_t>(ri)], ri,
                          "the recv matches (FIFO per communicator and peer) a send of other data");
      x.partner[static_cast<std::size_t>(si)] = ri, x.partner[static_cast<std::size_t>(ri)] = si;
    }
    if (ns > nr)
      return mesh_error(errc::transfer_mismatch, mp, x.rank_of[static_cast<std::size_t>(sends[sb + nr].op)],
                        sends[sb + nr].op, "a send with no matching recv");
  }
  for (std::size_t u = 0; u + 1 < recv_runs.size(); ++u) {
    const std::size_t rb = recv_runs[u], re = recv_runs[u + 1];
    const auto [sb, se] = channel_of(sends, send_runs, recvs[rb]);
    if (re - rb > se - sb)
      return mesh_error(errc::transfer_mismatch, mp, x.rank_of[static_cast<std::size_t>(recvs[rb + (se - sb)].op)],
                        recvs[rb + (se - sb)].op, "a recv with no matching send");
  }
  // collectives: every member issues the same sequence on each communicator
  for (int c = 0; c < C; ++c) {
    const std::vector<std::vector<int>>& per = x.colls[static_cast<std::size_t>(c)];
    if (per.empty()) continue;
    std::size_t most = 0;
    for (const std::vector<int>& q : per) most = std::max(most, q.size());
    for (std::size_t k = 0; k < most; ++k)
      for (std::size_t u = 0; u < per.size(); ++u) {
        if (k >= per[u].size()) {  // member u stops short: name a member that issues the k-th
          std::size_t v = 0;
          while (k >= per[v].size()) ++v;
          return mesh_error(errc::collective_mismatch, mp, mp.comms[static_cast<std::size_t>(c)].members[v], per[v][k],
                            "a collective that another member of its communicator never issues");
        }
        const mesh_op &a = mp.ops[static_cast<std::size_t>(per[0][k])],
                      &o = mp.ops[static_cast<std::size_t>(per[u][k])];
        if (a.code != o.code || a.stage != o.stage || a.tie != o.tie || a.bucket != o.bucket)
          return mesh_error(errc::collective_mismatch, mp, mp.comms[static_cast<std::size_t>(c)].members[u], per[u][k],
                            "members of a communicator issue different collectives at one position (each must "
                            "issue the same sequence on it)");
      }
  }
  return {};
}

/// Running a mesh program's lanes: how far each lane is, when each op started and ended, and when
/// each rendezvous op (a group head, a collective) was reached (−1: not yet).
struct mesh_run {
  std::vector<std::size_t> pc;
  std::vector<double> clock, reach, start, end;
  std::vector<char> done;
  double makespan = 0;
  bool completed = false;
};

/// What holds op i back: an op that must complete first (its wait's record) or be reached first
/// (a rendezvous partner: another group's transfer, another member's collective); −1 when none.
/// Reaching i at time `at` is recorded on the way, as a rendezvous needs.
constexpr int mesh_blocker(const mesh_program& mp, const mesh_index& x, mesh_run& run, int i, double at) {
  const mesh_op& o = mp.ops[static_cast<std::size_t>(i)];
  const int w = x.waits_on[static_cast<std::size_t>(i)];
  if (w >= 0 && !run.done[static_cast<std::size_t>(w)]) return w;
  if (o.code == mesh_op_code::group || o.code == mesh_op_code::send || o.code == mesh_op_code::recv) {
    const int g0 = x.group_of[static_cast<std::size_t>(i)], e = x.group_end[static_cast<std::size_t>(i)];
    if (run.reach[static_cast<std::size_t>(g0)] < 0) run.reach[static_cast<std::size_t>(g0)] = at;
    for (int j = g0; j <= e; ++j) {
      const mesh_op& t = mp.ops[static_cast<std::size_t>(j)];
      if (t.code != mesh_op_code::send && t.code != mesh_op_code::recv) continue;
      const int q = x.partner[static_cast<std::size_t>(j)];
      if (run.reach[static_cast<std::size_t>(x.group_of[static_cast<std::size_t>(q)])] < 0) return q;
    }
  } else if (is_collective(o.code)) {
    if (run.reach[static_cast<std::size_t>(i)] < 0) run.reach[static_cast<std::size_t>(i)] = at;
    for (const std::vector<int>& q : x.colls[static_cast<std::size_t>(o.comm)]) {
      const int peer_op = q[static_cast<std::size_t>(x.coll_pos[static_cast<std::size_t>(i)])];
      if (run.reach[static_cast<std::size_t>(peer_op)] < 0) return peer_op;
    }
  }
  return -1;
}

/// Runs every lane as far as it can: an op starts when its lane is free, its wait's op has ended
/// and (a rendezvous) the last of its partners has arrived, and takes duration[i] (a group: its
/// head's, for the whole group). `run.completed` says whether every op ran.
constexpr void run_mesh(const mesh_program& mp, const mesh_index& x, const std::vector<double>& duration,
                        mesh_run& run) {
  const std::size_t N = mp.ops.size(), L = x.lanes.size();
  run.pc.assign(L, 0), run.clock.assign(L, 0);
  run.reach.assign(N, -1), run.start.assign(N, 0), run.end.assign(N, 0), run.done.assign(N, 0);
  run.makespan = 0;
  std::size_t remaining = N;
  while (remaining > 0) {
    bool progressed = false;
    for (std::size_t l = 0; l < L; ++l) {
      const std::vector<int>& q = x.lanes[l];
      while (run.pc[l] < q.size()) {
        const int i = q[run.pc[l]];
        const int w = x.waits_on[static_cast<std::size_t>(i)];
        double ready = w >= 0 ? run.end[static_cast<std::size_t>(w)] : 0.0;
        if (const int b = mp.buckets > 1 ? x.waits_bucket[static_cast<std::size_t>(i)] : -1;
            b >= 0 && b + 1 < mp.buckets)
          ready = run.start[static_cast<std::size_t>(w)] +
                  (ready - run.start[static_cast<std::size_t>(w)]) * (b + 1) / mp.buckets;
        const double at = std::max(run.clock[l], ready);
        if (mesh_blocker(mp, x, run, i, at) >= 0) break;
        const mesh_op& o = mp.ops[static_cast<std::size_t>(i)];
        double begin = at;  // a rendezvous begins when its last partner arrives
        int n = 1;
        if (o.code == mesh_op_code::group || o.code == mesh_op_code::send || o.code == mesh_op_code::recv) {
          const int g0 = x.group_of[static_cast<std::size_t>(i)], e = x.group_end[static_cast<std::size_t>(i)];
          for (int j = g0; j <= e; ++j)
            if (const int pj = x.partner[static_cast<std::size_t>(j)]; pj >= 0)
              begin = std::max(begin, run.reach[static_cast<std::size_t>(x.group_of[static_cast<std::size_t>(pj)])]);
          n = e - g0 + 1;
        } else if (is_collective(o.code)) {
          for (const std::vector<int>& mq : x.colls[static_cast<std::size_t>(o.comm)])
            begin = std::max(begin, run.reach[static_cast<std::size_t>(
                                        mq[static_cast<std::size_t>(x.coll_pos[static_cast<std::size_t>(i)])])]);
        }
        const double finish = begin + duration[static_cast<std::size_t>(i)];
        for (int j = 0; j < n; ++j) {
          const auto k = static_cast<std::size_t>(i + j);
          run.start[k] = begin, run.end[k] = finish, run.done[k] = 1;
        }
        run.clock[l] = finish;
        run.makespan = std::max(run.makespan, finish);
        run.pc[l] += static_cast<std::size_t>(n);
        remaining -= static_cast<std::size_t>(n);
        progressed = true;
      }
    }
    if (!progressed) return;
  }
  run.completed = true;
}

/// The parameter slots of a sharded step (mesh/lower.hpp), on every global rank: an UNSHARD
/// gathers into a slot no stage holds, and only after every op of its previous holder (the gather,
/// each compute and RECOMPUTE that read it, its RESHARD) has completed; a compute or RECOMPUTE of
/// a stage reads the slot its stage was gathered into, after the gather completed and before its
/// RESHARD; a RESHARD returns its own stage's slot after each of its readers; a gather of a stage
/// comes after its previous RESHARD (an executor that gathers into the stage's own array). "After" is
/// happens-before on the rank (stream_clocks.hpp). A step with no slots (not sharded) has no
/// UNSHARD or RESHARD.
constexpr verdict verify_param_slots(const mesh_program& mp) {
  if (mp.param_slots.empty()) {
    for (int g = 0; g < mp.shape.size(); ++g)
      for (int i = mp.begin[static_cast<std::size_t>(g)]; i < mp.begin[static_cast<std::size_t>(g) + 1]; ++i)
        if (const mesh_op_code c = mp.ops[static_cast<std::size_t>(i)].code;
            c == mesh_op_code::all_gather || c == mesh_op_code::release)
          return mesh_error(errc::event_misuse, mp, g, i, "a step with UNSHARD or RESHARD has no parameter slots");
    return {};
  }
  if (mp.param_slots.size() != static_cast<std::size_t>(mp.shape.size()))
    return refusal(errc::index_out_of_range, "the step's parameter slots are not one count per global rank");
  for (int g = 0; g < mp.shape.size(); ++g) {
    const std::span<const mesh_op> ops = mp.rank_ops(g);
    const std::vector<stream_clock> clock = rank_clocks(mp, g);
    const int b = mp.begin[static_cast<std::size_t>(g)];
    struct holder {
      int stage = -1;        // the stage gathered into it; −1: free
      std::vector<int> ops;  // its holder's ops: the gather, the readers, the RESHARD
    };
    std::vector<holder> slot(static_cast<std::size_t>(std::max(0, mp.param_slots[static_cast<std::size_t>(g)])));
    std::vector<int> where, last_release;  // per stage: its slot while gathered, else −1; its last RESHARD
    auto fail = [&](std::size_t i, const char* why) {
      return mesh_error(errc::event_misuse, mp, g, b + static_cast<int>(i), why);
    };
    auto after_all = [&](const holder& h, std::size_t i) {
      for (const int a : h.ops)
        if (!happens_before(ops, clock, a, static_cast<int>(i))) return false;
      return true;
    };
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const mesh_op& o = ops[i];
      const bool gathers = o.code == mesh_op_code::all_gather, releases = o.code == mesh_op_code::release;
      const bool reads = o.code == mesh_op_code::compute || o.code == mesh_op_code::recompute;
      if (!gathers && !releases && !reads) continue;
      if (o.stage < 0) return fail(i, "a parameter-slot op of no stage");
      if (static_cast<std::size_t>(o.stage) >= where.size()) {
        where.resize(static_cast<std::size_t>(o.stage) + 1, -1);
        last_release.resize(where.size(), -1);
      }
      int& at = where[static_cast<std::size_t>(o.stage)];
      if ((gathers || releases) && (o.param_slot < 0 || o.param_slot >= static_cast<int>(slot.size())))
        return fail(i, "an UNSHARD or RESHARD names a parameter slot past the rank's pool");
      if (gathers) {
        holder& h = slot[static_cast<std::size_t>(o.param_slot)];
        if (at >= 0) return fail(i, "an UNSHARD of a stage whose parameters are gathered already");
        if (h.stage >= 0) return fail(i, "an UNSHARD into a parameter slot another stage still holds");
        if (!after_all(h, i))
          return fail(i, "an UNSHARD may overwrite a parameter slot while an op of its previous holder still uses it");
        // (an executor may gather into the stage's own array: after the RESHARD that released it)
        if (const int r = last_release[static_cast<std::size_t>(o.stage)];
            r >= 0 && !happens_before(ops, clock, r, static_cast<int>(i)))
          return fail(i, "an UNSHARD may overwrite its stage's parameters before their previous RESHARD completes");
        h.stage = o.stage, h.ops.assign(1, static_cast<int>(i)), at = o.param_slot;
        continue;
      }
      if (at < 0 || o.param_slot != at)
        return fail(i, releases ? "a RESHARD of a parameter slot its stage is not gathered into"
                                : "a compute of a sharded stage reads its parameters from no slot its stage is "
                                  "gathered into (no UNSHARD before it, or a RESHARD since)");
      holder& h = slot[static_cast<std::size_t>(at)];
      if (releases) {
        if (!after_all(h, i)) return fail(i, "a RESHARD may return a parameter slot while an op still reads it");
        h.stage = -1, at = -1;
        last_release[static_cast<std::size_t>(o.stage)] = static_cast<int>(i);
      } else if (!happens_before(ops, clock, h.ops.front(), static_cast<int>(i))) {
        return fail(i, "a compute may read its stage's parameters before their UNSHARD completes");
      }
      h.ops.push_back(static_cast<int>(i));
    }
  }
  return {};
}

/// The optimizer's actions (mesh/collectives.hpp), on every global rank: an OPT_STEP of a stage
/// runs after every compute and RECOMPUTE of the stage there (it writes the parameters they
/// read), after the stage's REDUCE_GRAD (each bucket), its tie groups' reductions and the rank's
/// GRAD_NORM and FINITE_CHECK (the gradients it reads, the norm it clips by, whether it skips); a
/// stage has one OPT_STEP at most; a
/// PARAM_SYNC comes after its stage's OPT_STEP (it gathers what that wrote). "After" is
/// happens-before on the rank (stream_clocks.hpp). A step without OPT_STEP or PARAM_SYNC passes.
constexpr verdict verify_optimizer_steps(const mesh_program& mp) {
  for (int g = 0; g < mp.shape.size(); ++g) {
    const std::span<const mesh_op> ops = mp.rank_ops(g);
    bool any = false;
    for (const mesh_op& o : ops)
      any = any || o.code == mesh_op_code::optimizer_step || o.code == mesh_op_code::param_sync;
    if (!any) continue;
    const std::vector<stream_clock> clock = rank_clocks(mp, g);
    const int b = mp.begin[static_cast<std::size_t>(g)];
    auto fail = [&](std::size_t i, const char* why) {
      return mesh_error(errc::event_misuse, mp, g, b + static_cast<int>(i), why);
    };
    auto tied_to = [&](const mesh_op& o, int stage) {
      if (o.tie < 0 || static_cast<std::size_t>(o.tie) >= mp.ties.size()) return false;
      const std::vector<int>& grp = mp.ties[static_cast<std::size_t>(o.tie)];
      return std::find(grp.begin(), grp.end(), stage) != grp.end();
    };
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const mesh_op& o = ops[i];
      if (o.code != mesh_op_code::optimizer_step && o.code != mesh_op_code::param_sync) continue;
      bool stepped = false;  // (a PARAM_SYNC: its OPT_STEP happens before it)
      for (std::size_t j = 0; j < ops.size(); ++j) {
        if (j == i) continue;
        const mesh_op& x = ops[j];
        const bool before = happens_before(ops, clock, static_cast<int>(j), static_cast<int>(i));
        if (o.code == mesh_op_code::param_sync) {
          stepped = stepped || (x.code == mesh_op_code::optimizer_step && x.stage == o.stage && before);
          continue;
        }
        if (x.code == mesh_op_code::optimizer_step && x.stage == o.stage)
          return fail(i, "a second OPT_STEP of the stage");
        const bool reads = (x.code == mesh_op_code::compute || x.code == mesh_op_code::recompute) && x.stage == o.stage;
        const bool reduces = (x.code == mesh_op_code::all_reduce || x.code == mesh_op_code::reduce_scatter ||
                              x.code == mesh_op_code::local_sum) &&
                             (x.tie >= 0 ? tied_to(x, o.stage) : x.stage == o.stage);
        if (before) continue;
        if (reads)
          return fail(i, "an OPT_STEP may update its stage's parameters while a compute of the stage reads them");
        if (reduces) return fail(i, "an OPT_STEP may read its stage's gradient before their reduction completes");
        if (x.code == mesh_op_code::grad_norm)
          return fail(i, "an OPT_STEP may run before the rank's GRAD_NORM completes (the norm it clips by)");
        if (x.code == mesh_op_code::finite_check)
          return fail(i, "an OPT_STEP may run before the rank's FINITE_CHECK completes (whether it skips)");
      }
      if (o.code == mesh_op_code::param_sync && !stepped)
        return fail(i, "a PARAM_SYNC may gather its stage's parameters before their OPT_STEP completes");
    }
  }
  return {};
}

}  // namespace detail

/// Ok when every op of `mp` completes under NCCL's semantics (the top of this file), or the
/// first reason it cannot: a malformed op (`index_out_of_range`, `event_misuse`), a transfer
/// whose ends disagree (`transfer_mismatch`), members of a communicator issuing different
/// collectives (`collective_mismatch`), or a wait-for cycle (`nccl_deadlock`, with the cycle);
/// on a sharded step, then, a parameter slot used out of order (`event_misuse`, verify_param_slots);
/// with the optimizer's actions, one out of order (`event_misuse`, verify_optimizer_steps).
constexpr verdict verify_mesh(const mesh_program& mp) {
  detail::mesh_index x;
  if (verdict v = detail::index_mesh(mp, x); !v.ok()) return v;
  detail::mesh_run run;
  detail::run_mesh(mp, x, std::vector<double>(mp.ops.size(), 0.0), run);
  if (run.completed) {
    if (verdict v = detail::verify_param_slots(mp); !v.ok()) return v;
    return detail::verify_optimizer_steps(mp);
  }
  // stalled: follow who-waits-for-whom from the first stopped lane until a lane repeats
  const int lanes = static_cast<int>(x.lanes.size());
  auto head = [&](int l) { return x.lanes[static_cast<std::size_t>(l)][run.pc[static_cast<std::size_t>(l)]]; };
  auto blocker = [&](int i) { return detail::mesh_blocker(mp, x, run, i, 0); };
  auto lane_of = [&](int i) {
    return x.rank_of[static_cast<std::size_t>(i)] * mesh_stream_count + mp.ops[static_cast<std::size_t>(i)].stream;
  };
  int l = 0;
  while (run.pc[static_cast<std::size_t>(l)] >= x.lanes[static_cast<std::size_t>(l)].size()) ++l;
  std::vector<int> seen(static_cast<std::size_t>(lanes), -1), path;
  while (seen[static_cast<std::size_t>(l)] < 0) {
    seen[static_cast<std::size_t>(l)] = static_cast<int>(path.size());
    path.push_back(l);
    l = lane_of(blocker(head(l)));
  }
  verdict v = detail::mesh_error(errc::nccl_deadlock, mp, l / mesh_stream_count, head(l),
                                 "this op can never complete: ranks and streams wait on each other in a cycle "
                                 "across their communicators");
  for (std::size_t k = static_cast<std::size_t>(seen[static_cast<std::size_t>(l)]); k < path.size(); ++k) {
    const int at = head(path[k]), needs = blocker(at);
    if (v.cycle_length < max_cycle)
      v.cycle[v.cycle_length] =
          detail::mesh_link(mp, path[k] / mesh_stream_count, at, needs, x.rank_of[static_cast<std::size_t>(needs)]);
    ++v.cycle_length;
  }
  return v;
}

}  // namespace pipetype
