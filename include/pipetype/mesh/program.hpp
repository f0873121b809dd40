// pipetype/mesh/program.hpp — a whole mesh step, op by op, and its proof.
//
// lower_mesh() takes one verified pipeline plan (its compute program and lowered program), a
// mesh (core/mesh.hpp) and the step's collectives (mesh/collectives.hpp), and writes what
// every global rank issues: its pipeline rank's lowered ops, on its replica's communicators,
// with the collectives inserted where they were placed, on a third stream of their own:
//
//   stream 0  compute   the stage calls, in the pipeline's order; a RESHARD releases there
//   stream 1  comm      the pipeline's NCCL groups of sends and recvs
//   stream 2  dp        the collectives: all-reduce (REDUCE_GRAD, TIE), reduce-scatter
//                       (REDUCE_GRAD, sharded), all-gather (UNSHARD)
//
// Events order them, as the pipeline's own streams are ordered: a reduction waits for an event
// recorded after its stage's last backward on the compute stream; a stage's first compute after
// an UNSHARD waits for the gather's event (an overlapped pair waits before its first half for both
// halves' stages); a RESHARD with no compute since its stage's UNSHARD waits for that gather; a
// gather waits for the event of the stage's previous RESHARD (it overwrites what that released). A step ends when every
// op, collectives included, has completed.
//
// Communicators (mesh_comm): each replica's copy of every pipeline communicator (its two ranks
// mapped into the replica), one per DP group (pipeline rank r's replicas), and one per tie group
// and replica that spans two ranks or more. A tie group within one rank needs none: its sum is a
// `local_sum` on the dp stream, ordered by events as an all-reduce would be.
//
// verify_mesh() proves that the step completes under NCCL's semantics on every communicator at
// once: every member of a communicator issues the same collectives on it in the same order (the
// k-th on each member must be the same operation of the same stage, or `collective_mismatch`);
// a collective holds its stream until every member has reached it; point-to-point is a blocking
// rendezvous, FIFO per communicator and direction, progressing with its group; a wait holds its
// stream until the latest record of that event issued before it on the rank has completed. It
// runs every (rank, stream) lane as far as it can; if some stop for good, it names the wait-for
// cycle across ranks, streams and communicators (`nccl_deadlock`). The pipeline's own proof
// (verify_lowered) still covers each replica alone; this one covers their composition.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pipetype/mesh/activation_slots.hpp"
#include "pipetype/mesh/collectives.hpp"
#include "pipetype/compile/lowered.hpp"
#include "pipetype/mesh/memory_actions.hpp"
#include "pipetype/mesh/memory_slots.hpp"
#include "pipetype/mesh/ops.hpp"
#include "pipetype/core/mesh.hpp"
#include "pipetype/core/program.hpp"

namespace pipetype {

/// Every global rank's ops for `p` lowered as `l`, on mesh `m`, with the collectives `c` of
/// options `o` (see the top of this file). `p` must be the program `l` was lowered from, with
/// m.pp ranks, and `c` placed for it (check_collectives); throws std::invalid_argument otherwise.
constexpr mesh_program lower_mesh(program_view p, lowered_view l, const mesh& m, const collective_program& c,
                                  const dp_options& o, const memory_program& mem) {
  if (!check_mesh(m).ok() || p.ranks != m.pp || l.ranks != m.pp)
    throw std::invalid_argument("pipetype::lower_mesh: the mesh's pipeline ranks (pp = " + std::to_string(m.pp) +
                                ") are not the plan's " + std::to_string(p.ranks));
  if (c.ranks != p.ranks) throw std::invalid_argument("pipetype::lower_mesh: collectives of another program");
  if (mem.ranks != p.ranks || mem.begin.size() != static_cast<std::size_t>(p.ranks) + 1)
    throw std::invalid_argument("pipetype::lower_mesh: memory actions of another program");
  if (const verdict v = check_mesh_ops(m, static_cast<long long>(l.ops.size() + c.ops.size() + mem.ops.size()));
      !v.ok())
    throw std::length_error(std::string("pipetype::lower_mesh: ") + v.detail);
  mesh_program out;
  out.shape = m;
  out.ties = o.ties;
  if (!mem.empty()) out.memory = mem;
  const int C = static_cast<int>(l.comms.size());
  // communicators: the replicas' pipeline communicators, the DP groups, the tie groups
  for (int d = 0; d < m.dp; ++d)
    for (int k = 0; k < C; ++k) {
      const comm_desc& cd = l.comms[static_cast<std::size_t>(k)];
      std::vector<int> members{m.global(cd.rank_a, d), m.global(cd.rank_b, d)};
      std::sort(members.begin(), members.end());
      out.comms.push_back({mesh_comm_kind::pipeline, k, d, std::move(members)});
    }
  std::vector<int> dp_comm(static_cast<std::size_t>(m.pp), -1);
  if (m.dp > 1)
    for (int r = 0; r < m.pp; ++r) {
      std::vector<int> members;
      for (int d = 0; d < m.dp; ++d) members.push_back(m.global(r, d));
      std::sort(members.begin(), members.end());
      dp_comm[static_cast<std::size_t>(r)] = static_cast<int>(out.comms.size());
      out.comms.push_back({mesh_comm_kind::data_parallel, r, -1, std::move(members)});
    }
  // tie_comm[t · dp + d]
  std::vector<int> tie_comm(o.ties.size() * static_cast<std::size_t>(m.dp), -1);
  for (std::size_t t = 0; t < o.ties.size(); ++t) {
    std::vector<int> ranks;
    for (const int s : o.ties[t])
      if (s >= 0 && s < p.stages && p.stage_rank[static_cast<std::size_t>(s)] >= 0)
        ranks.push_back(p.stage_rank[static_cast<std::size_t>(s)]);
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    if (ranks.size() < 2) continue;  // local: no communicator
    for (int d = 0; d < m.dp; ++d) {
      std::vector<int> members;
      for (const int r : ranks) members.push_back(m.global(r, d));
      std::sort(members.begin(), members.end());
      tie_comm[t * static_cast<std::size_t>(m.dp) + static_cast<std::size_t>(d)] = static_cast<int>(out.comms.size());
      out.comms.push_back({mesh_comm_kind::tie, static_cast<int>(t), d, std::move(members)});
    }
  }
  // each global rank's ops
  out.begin.assign(static_cast<std::size_t>(m.size()) + 1, 0);
  out.events.assign(static_cast<std::size_t>(m.size()), 0);
  for (int g = 0; g < m.size(); ++g) {
    const int r = m.pipeline_rank(g), d = m.replica(g);
    const std::span<const lowered_op> ops = l.rank_ops(r);
    const std::span<const action> acts = p.rank_actions(r);
    // (kind, stage, microbatch) → its index in acts
    const auto key = [&](kind k, int s, int j) {
      return (static_cast<std::size_t>(k) * static_cast<std::size_t>(p.stages) + static_cast<std::size_t>(s)) *
                 static_cast<std::size_t>(p.microbatches) +
             static_cast<std::size_t>(j);
    };
    const auto known = [&](int s, int j) { return s >= 0 && s < p.stages && j >= 0 && j < p.microbatches; };
    std::vector<int> action_at(static_cast<std::size_t>(kind_count) * static_cast<std::size_t>(p.stages) *
                                   static_cast<std::size_t>(p.microbatches),
                               -1);
    for (int a = 0; a < static_cast<int>(acts.size()); ++a) {
      const action& x = acts[static_cast<std::size_t>(a)];
      if (known(x.stage, x.microbatch) && action_at[key(x.what, x.stage, x.microbatch)] < 0)
        action_at[key(x.what, x.stage, x.microbatch)] = a;
    }
    const std::span<const collective> coll = c.rank_ops(r);
    int events = l.resources[static_cast<std::size_t>(r)].events;
    std::vector<int> gathered(static_cast<std::size_t>(p.stages), -1);  // a gather's event, until a compute waits
    std::vector<int> released(static_cast<std::size_t>(p.stages), -1);  // the last RESHARD's event
    std::size_t next = 0;                                               // the next collective
    std::vector<mesh_op> mine;
    // memory actions (mesh/memory_actions.hpp): per (stage, microbatch) the event a RELOAD
    // records until its first reader waits, whether it is recomputed (only its input moves); per
    // action the OFFLOADs' events it waits for (their `until`)
    const std::span<const memory_action> mops = mem.rank_ops(r);
    std::size_t mnext = 0;
    const auto cell = [&](int s, int j) {
      return static_cast<std::size_t>(s) * static_cast<std::size_t>(p.microbatches) + static_cast<std::size_t>(j);
    };
    std::vector<int> reloaded(static_cast<std::size_t>(p.stages) * static_cast<std::size_t>(p.microbatches), -1);
    std::vector<char> kept_only(reloaded.size(), 0);
    std::vector<std::vector<int>> until_waits(acts.size() + 1);
    for (const memory_action& a : mops)
      if (!known(a.stage, a.microbatch) || a.after < -1 || a.after >= static_cast<int>(acts.size()))
        throw std::invalid_argument("pipetype::lower_mesh: rank " + std::to_string(r) +
                                    " has a memory action outside its program (check_memory_actions)");
      else if (a.what == memory_kind::recompute)
        kept_only[cell(a.stage, a.microbatch)] = 1;
    auto wait_on = [&](int stream, int event) {
      mine.push_back({mesh_op_code::wait, stream, kind::F, false, -1, -1, -1, -1, -1, event});
    };
    auto record_on = [&](int stream, int event) {
      mine.push_back({mesh_op_code::record, stream, kind::F, false, -1, -1, -1, -1, -1, event});
    };
    // the memory actions issued after action k: a copy waits for the compute stream up to k (an
    // OFFLOAD reads what the forward wrote, a RELOAD writes where a backward up to k freed) and
    // records its event; a RECOMPUTE runs on the compute stream, after the RELOAD it reads
    auto issue_memory = [&](int k) {
      bool copy_waited = k < 0;
      for (; mnext < mops.size() && mops[mnext].after == k; ++mnext) {
        const memory_action& a = mops[mnext];
        const std::size_t q = cell(a.stage, a.microbatch);
        mesh_op op{};
        op.stage = a.stage;
        op.microbatch = a.microbatch;
        op.kept_only = kept_only[q] != 0;
        if (a.what == memory_kind::recompute) {
          if (reloaded[q] >= 0) wait_on(0, reloaded[q]), reloaded[q] = -1;
          op.code = mesh_op_code::recompute;
          mine.push_back(op);
          continue;
        }
        if (!copy_waited) {
          const int e = events++;
          record_on(0, e);
          wait_on(copy_stream, e);
          copy_waited = true;
        }
        op.code = a.what == memory_kind::offload ? mesh_op_code::offload : mesh_op_code::reload;
        op.stream = copy_stream;
        mine.push_back(op);
        const int done = events++;
        record_on(copy_stream, done);
        if (a.what == memory_kind::reload)
          reloaded[q] = done;
        else if (a.until >= 0 && a.until < static_cast<int>(acts.size()))  // (at the step's end: its fence)
          until_waits[static_cast<std::size_t>(a.until)].push_back(done);
      }
    };
    // the collectives placed after action k (k = −1: before the first), ordered after what ran
    auto issue_collectives = [&](int k) {
      int after_compute = -1;  // the event recorded after action k on the compute stream, lazily
      auto after_k = [&] {     // the dp stream waits for it once
        if (k < 0 || after_compute >= 0) return;
        after_compute = events++;
        mine.push_back({mesh_op_code::record, 0, kind::F, false, -1, -1, -1, -1, -1, after_compute});
        mine.push_back({mesh_op_code::wait, dp_stream, kind::F, false, -1, -1, -1, -1, -1, after_compute});
      };
      for (; next < coll.size() && coll[next].after == k; ++next) {
        const collective& x = coll[next];
        mesh_op op{};
        op.stream = dp_stream;
        op.stage = x.stage;
        switch (x.what) {
          case collective_kind::reduce_grad:
            if (m.dp <= 1) continue;
            after_k();
            op.code = o.shard ? mesh_op_code::reduce_scatter : mesh_op_code::all_reduce;
            op.comm = dp_comm[static_cast<std::size_t>(r)];
            mine.push_back(op);
            break;
          case collective_kind::reduce_tied: {
            const std::size_t at =
                static_cast<std::size_t>(x.tie) * static_cast<std::size_t>(m.dp) + static_cast<std::size_t>(d);
            if (x.tie < 0 || at >= tie_comm.size()) continue;
            after_k();
            op.code = tie_comm[at] < 0 ? mesh_op_code::local_sum : mesh_op_code::all_reduce;  // one rank: local
            op.comm = tie_comm[at];
            op.tie = x.tie;
            op.stage = -1;
            mine.push_back(op);
            break;
          }
          case collective_kind::unshard: {
            if (m.dp <= 1) continue;
            const auto s = static_cast<std::size_t>(x.stage);
            if (released[s] >= 0) {
              mine.push_back({mesh_op_code::wait, dp_stream, kind::F, false, -1, -1, -1, -1, -1, released[s]});
              released[s] = -1;
            }
            op.code = mesh_op_code::all_gather;
            op.comm = dp_comm[static_cast<std::size_t>(r)];
            mine.push_back(op);
            gathered[s] = events++;
            mine.push_back({mesh_op_code::record, dp_stream, kind::F, false, -1, -1, -1, -1, -1, gathered[s]});
            break;
          }
          case collective_kind::reshard: {
            if (m.dp <= 1) continue;
            const auto s = static_cast<std::size_t>(x.stage);
            op.code = mesh_op_code::release;
            op.stream = 0;
            if (gathered[s] >= 0) {  // a gather no compute waited for: the release must not overtake it
              mine.push_back({mesh_op_code::wait, 0, kind::F, false, -1, -1, -1, -1, -1, gathered[s]});
              gathered[s] = -1;
            }
            mine.push_back(op);
            released[s] = events++;
            mine.push_back({mesh_op_code::record, 0, kind::F, false, -1, -1, -1, -1, -1, released[s]});
            break;
          }
        }
      }
    };
    issue_collectives(-1);
    issue_memory(-1);
    int deferred = -1;  // the first action of an overlapped pair, whose collectives wait for the second
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const lowered_op& x = ops[static_cast<std::size_t>(i)];
      mesh_op op{};
      op.code = x.code == op_code::compute ? mesh_op_code::compute
                : x.code == op_code::send  ? mesh_op_code::send
                : x.code == op_code::recv  ? mesh_op_code::recv
                                           : mesh_op_code::group;
      op.stream = static_cast<int>(x.stream);
      op.what = x.what;
      op.overlapped = x.overlapped;
      op.stage = x.stage;
      op.microbatch = x.microbatch;
      op.peer = x.peer >= 0 ? m.global(x.peer, d) : -1;
      op.comm = x.comm >= 0 ? d * C + x.comm : -1;
      op.wait_event = x.wait_event;
      op.record_event = x.record_event;
      op.source = i;
      int k = -1;  // the compute action this op runs
      // the gathers a compute waits for: its stage's; an overlapped pair's first half also waits
      // for its second half's stage (the second half may run on a stream forked before it)
      auto wait_gathered = [&](int stage) {
        if (stage >= 0 && stage < p.stages && gathered[static_cast<std::size_t>(stage)] >= 0) {
          mine.push_back(
              {mesh_op_code::wait, 0, kind::F, false, -1, -1, -1, -1, -1, gathered[static_cast<std::size_t>(stage)]});
          gathered[static_cast<std::size_t>(stage)] = -1;
        }
      };
      // a backward waits for the RELOAD of what it reads
      auto wait_reloaded = [&](const lowered_op& y) {
        if (y.what == kind::F || !known(y.stage, y.microbatch)) return;
        int& e = reloaded[cell(y.stage, y.microbatch)];
        if (e >= 0) wait_on(0, e), e = -1;
      };
      if (x.code == op_code::compute) {
        if (known(x.stage, x.microbatch)) k = action_at[key(x.what, x.stage, x.microbatch)];
        if (k >= 0)  // the OFFLOADs that complete before it: it may reuse their bytes
          for (const int e : until_waits[static_cast<std::size_t>(k)]) wait_on(0, e);
        wait_gathered(x.stage);
        wait_reloaded(x);
        if (x.overlapped)
          for (std::size_t j = static_cast<std::size_t>(i) + 1; j < ops.size(); ++j)
            if (ops[j].code == op_code::compute) {
              wait_gathered(ops[j].stage);
              wait_reloaded(ops[j]);
              break;
            }
      }
      mine.push_back(op);
      // an overlapped pair's two computes stay together: what follows its first goes after both
      if (k >= 0 && x.overlapped) {
        deferred = k;
      } else if (k >= 0) {
        if (deferred >= 0) issue_collectives(deferred), issue_memory(deferred), deferred = -1;
        issue_collectives(k);
        issue_memory(k);
      }
    }
    if (next != coll.size())
      throw std::invalid_argument("pipetype::lower_mesh: rank " + std::to_string(r) +
                                  "'s collectives are not in the order of its actions (check_collectives)");
    if (mnext != mops.size())
      throw std::invalid_argument("pipetype::lower_mesh: rank " + std::to_string(r) +
                                  "'s memory actions are not in the order of its actions (check_memory_actions)");
    out.ops.insert(out.ops.end(), mine.begin(), mine.end());
    out.begin[static_cast<std::size_t>(g) + 1] = static_cast<int>(out.ops.size());
    out.events[static_cast<std::size_t>(g)] = events;
  }
  if (!mem.empty()) {
    detail::assign_activation_slots(p, l, out);  // the activation slots (mesh/activation_slots.hpp)
    detail::assign_memory_slots(p, mem, out);    // the stash and host slots (mesh/memory_slots.hpp)
  }
  return out;
}

/// The same with no memory actions.
constexpr mesh_program lower_mesh(program_view p, lowered_view l, const mesh& m, const collective_program& c,
                                  const dp_options& o) {
  return lower_mesh(p, l, m, c, o, no_memory_actions(p));
}

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
    default:
      return mesh_op_name(o.code);
  }
}

/// A collective's (or a release's, a local sum's) name as executors, failures and traces give it:
/// "REDUCE_GRAD(1)", "TIE(0)", and with its communicator "REDUCE_GRAD(1) on communicator 5"
/// (io/step_trace.hpp reads that form back from a measured trace).
inline std::string mesh_op_label(const mesh_op& o, bool with_comm = true) {
  std::string out = std::string(mesh_action_name(o)) + "(" + std::to_string(o.tie >= 0 ? o.tie : o.stage);
  if (is_copy(o.code) || o.code == mesh_op_code::recompute) out += "," + std::to_string(o.microbatch);
  out += ")";
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
  auto member = [&](int comm, int g) {
    const std::vector<int>& ms = mp.comms[static_cast<std::size_t>(comm)].members;
    return std::binary_search(ms.begin(), ms.end(), g);
  };
  const auto n = static_cast<std::size_t>(N);
  x.rank_of.assign(n, -1), x.waits_on.assign(n, -1), x.group_of.assign(n, -1), x.group_end.assign(n, -1);
  x.partner.assign(n, -1), x.coll_pos.assign(n, -1);
  x.colls.assign(static_cast<std::size_t>(C), {});
  for (int c = 0; c < C; ++c)
    x.colls[static_cast<std::size_t>(c)].resize(mp.comms[static_cast<std::size_t>(c)].members.size());
  x.lanes.assign(static_cast<std::size_t>(G * mesh_stream_count), {});
  // transfers per channel (comm, from, to), in issue order once sorted
  std::vector<channel_end> sends, recvs;
  for (int g = 0; g < G; ++g) {
    const int b = mp.begin[static_cast<std::size_t>(g)], e = mp.begin[static_cast<std::size_t>(g) + 1];
    std::vector<int> last_record(static_cast<std::size_t>(mp.events[static_cast<std::size_t>(g)]), -1);
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
        if (a.code != o.code || a.stage != o.stage || a.tie != o.tie)
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
        const double at = std::max(run.clock[l], w >= 0 ? run.end[static_cast<std::size_t>(w)] : 0.0);
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

}  // namespace detail

/// Ok when every op of `mp` completes under NCCL's semantics (the top of this file), or the
/// first reason it cannot: a malformed op (`index_out_of_range`, `event_misuse`), a transfer
/// whose ends disagree (`transfer_mismatch`), members of a communicator issuing different
/// collectives (`collective_mismatch`), or a wait-for cycle (`nccl_deadlock`, with the cycle).
constexpr verdict verify_mesh(const mesh_program& mp) {
  detail::mesh_index x;
  if (verdict v = detail::index_mesh(mp, x); !v.ok()) return v;
  detail::mesh_run run;
  detail::run_mesh(mp, x, std::vector<double>(mp.ops.size(), 0.0), run);
  if (run.completed) return {};
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

namespace detail {
/// build_mesh's checks of its inputs (the mesh, its fit to the plan and the options, the
/// collectives); std::invalid_argument with one sentence (prefixed `who`).
inline void check_mesh_inputs(program_view p, const mesh& m, const collective_program& c, const dp_options& o,
                              const std::string& who) {
  if (const verdict mv = check_mesh(m); !mv.ok()) throw std::invalid_argument(who + ": " + describe(mv));
  if (m.pp != p.ranks)
    throw std::invalid_argument(who + ": the mesh has " + std::to_string(m.pp) + " pipeline ranks (pp), the plan " +
                                std::to_string(p.ranks));
  if (o.dp != m.dp)
    throw std::invalid_argument(who + ": dp_options::dp is " + std::to_string(o.dp) + " but the mesh has " +
                                std::to_string(m.dp) + " replicas");
  if (const verdict cv = check_collectives(p, c, o); !cv.ok()) throw std::invalid_argument(who + ": " + describe(cv));
}
}  // namespace detail

/// The proven mesh step of `p` lowered as `l` on mesh `m` with collectives `c` (options `o`):
/// check_mesh, check_collectives, lower_mesh, verify_mesh; std::invalid_argument with one
/// sentence (prefixed `who`) otherwise. What the executors bind each global rank from (with
/// memory actions: mesh/verify_memory.hpp's build_mesh).
inline mesh_program build_mesh(program_view p, lowered_view l, const mesh& m, const collective_program& c,
                               const dp_options& o, const std::string& who = "pipetype") {
  detail::check_mesh_inputs(p, m, c, o, who);
  mesh_program mp = lower_mesh(p, l, m, c, o);
  if (const verdict v = verify_mesh(mp); !v.ok()) throw std::invalid_argument(who + ": " + describe(v));
  return mp;
}
/// The same with the collectives place_collectives(p, o) writes.
inline mesh_program build_mesh(program_view p, lowered_view l, const mesh& m, const dp_options& o,
                               const std::string& who = "pipetype") {
  return build_mesh(p, l, m, place_collectives(p, o), o, who);
}

}  // namespace pipetype
