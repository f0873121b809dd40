// pipetype/compile/verify_lowered.hpp — proves a lowered program completes under NCCL's rules.
//
// The model (NCCL user guide: point-to-point, group calls, streams; docs/08_architecture.md):
//   • each rank has two in-order streams (compute, comm); ops of one stream run one at a time;
//   • an op's record_event is recorded when the op completes; an op's wait_event holds the op
//     back until the op that recorded it — the latest one issued before it on the rank, as CUDA
//     resolves it at call time — has completed;
//   • a group completes when every send/recv in it has met its partner: point-to-point is a
//     blocking rendezvous, the k-th send from a to b on a communicator matches the k-th recv at
//     b from a on it (FIFO per communicator and peer), and everything inside one group
//     progresses together, so a partner counts as met once its group has been reached;
//   • both ends of a communicator must be its members.
// It also checks that every buffer shared by the two streams of a rank is ordered by events
// (no op reads or overwrites a slot that the other stream may still be using).
// Completion is proved the fast way when the ops carry a consistent tick certificate (the
// lowering's lock-step ticks; see step 5), otherwise by simulating the lanes. If the simulation
// stalls, some ops wait on each other in a cycle: `nccl_deadlock` at the first stalled op. Any plan this library lowers
// passes (lower.hpp argues why); the check is the proof on the exact ops the executors issue, and it rejects hand-made
// programs that would hang.
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

#include "pipetype/compile/diagnostics.hpp"
#include "pipetype/compile/lowered.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/detail/scratch.hpp"

namespace pipetype {

namespace detail {

constexpr verdict at_op(errc e, int rank, const lowered_op& o, int index, const char* why) {
  const bool has_kind = o.code == op_code::compute || o.code == op_code::send || o.code == op_code::recv;
  return refusal(e, why)
      .on_rank(rank)
      .on_stage(o.stage)
      .on_microbatch(o.microbatch)
      .on_kind(has_kind ? kind_char(o.what) : '?')
      .on_index(index);
}

}  // namespace detail

namespace detail {

/// An op's code and peer, from an array of ops or, reading no more than those, from an op_span.
struct code_and_peer {
  op_code code;
  int peer;
};
template <class Ops>
constexpr code_and_peer code_and_peer_of(const Ops& ops, int i) {
  if constexpr (std::is_same_v<Ops, op_span>)
    return {ops.code(static_cast<std::size_t>(i)), ops.peer(static_cast<std::size_t>(i))};
  else
    return {ops[i].code, ops[i].peer};
}

/// verify_lowered's scratch as pointers (run time: build_plan, hand-made programs).
struct verify_scratch_ptrs {
  int *group_of, *waits_on, *group_end_of, *last_record, *last_cover, *use, *t_op, *t_ch, *partner, *send_list,
      *recv_list;
  int *send_begin, *recv_begin, *send_fill, *recv_fill, *lane_begin, *pc, *lane_ops;
  long long* last_phase;
  signed char* direction;
  char *done, *reached;
};

/// The same scratch as fixed arrays, for make_plan: at most `Ops` ops, `Events` events and
/// `Slots` slots per pool on a rank, `Channels` channels and `Lanes` lanes. g++'s constant
/// evaluator reads an element of an array named through a reference at almost no cost, but
/// builds new trees for every read through a pointer (≈ 250 bytes each, kept until the end of the
/// evaluation), so make_plan hands verify_lowered_in its tables and scratch as arrays.
template <int Ops, int Events, int Slots, int Channels, int Lanes>
struct verify_scratch_fixed {
  int group_of[Ops + 1], waits_on[Ops + 1], group_end_of[Ops + 1], last_record[Events + 1], last_cover[Events + 1];
  long long last_phase[Events + 1];
  int use[8 * Slots + 8];
  int t_op[Ops + 1], t_ch[Ops + 1], partner[Ops + 1], send_list[Ops + 1], recv_list[Ops + 1];
  int send_begin[Channels + 1], recv_begin[Channels + 1], send_fill[Channels + 1], recv_fill[Channels + 1];
  int lane_begin[Lanes + 1], pc[Lanes + 1], lane_ops[Ops + 1];
  signed char direction[Ops + 2];
  char done[Ops + 1], reached[Ops + 1];
};

/// verify_lowered over tables and scratch given as arrays or pointers (the same code indexes
/// either): P ranks, N ops, C communicators, NL slot-list entries. `event_bound` and
/// `slot_bound` are the events and slots per pool on a rank that a fixed scratch holds (a rank
/// declaring more is refused), or -1 where the scratch was sized from the tables themselves.
template <class Ops, class Ints, class Comms, class Res, class Lists, class Scratch>
constexpr verdict verify_lowered_in(int P, int N, int C, int NL, const Ops& ops, const Ints& beg, const Comms& comms,
                                    const Res& res, const Lists& lists, Scratch& w, int event_bound, int slot_bound,
                                    bool* by_certificate) {
  // Flat loops and plain indexing: this runs inside make_plan's constant evaluation.
  auto& last_record = w.last_record;  // per event: the op that last recorded it on this rank
  auto& last_cover = w.last_cover;    // and where that record completes: its group's last transfer
  auto& last_phase = w.last_phase;    // and 2 · its phase (below) + its stream
  auto& use = w.use;
  auto& direction = w.direction;
  auto& t_op = w.t_op;
  auto& t_ch = w.t_ch;
  auto& send_begin = w.send_begin;  // [channels + 1] counts, then prefix sums
  auto& recv_begin = w.recv_begin;
  auto& send_fill = w.send_fill;  // fill cursors
  auto& recv_fill = w.recv_fill;

  // 1. One pass per rank: group structure, communicator membership, the record each wait refers
  //    to (the latest op issued before it on the rank that records that event), and buffer
  //    ordering — every buffer shared by the two streams of a rank must be ordered by events.
  //    use[(pool·slots + slot)·4 + {writer s0, writer s1, reader s0, reader s1}] holds the index
  //    at which that use completes; known[s] the furthest op of the other stream s has waited for.
  int slots = 0, events = 0;
  for (int r = 0; r < P; ++r) {
    const int sl = res[r].activation_slots > res[r].gradient_slots ? res[r].activation_slots : res[r].gradient_slots;
    slots = sl > slots ? sl : slots;
    events = res[r].events > events ? res[r].events : events;
  }
  if ((event_bound >= 0 && events > event_bound) || (slot_bound >= 0 && slots > slot_bound)) {
    return refusal(errc::index_out_of_range, "a rank's events or buffer slots exceed what the plan's tables hold");
  }
  // the rank issuing an op (error paths only). A lambda's parameters in a template are checked
  // against the user's globals by g++'s -Wshadow, hence the long name
  const auto rank_of = [&](int op_index) {
    int lo = 0, hi = P;  // the last r with beg[r] <= op_index
    while (hi - lo > 1) (beg[(lo + hi) / 2] <= op_index ? lo : hi) = (lo + hi) / 2;
    return lo;
  };
  bool certified = true;  // see step 5
  // groups per peer: each tick's peer order, +1 increasing, -1 decreasing. Ticks are certificate
  // data only: one outside [0, N) (no lowering makes one; there are fewer ticks than ops) voids
  // the certificate (step 1), so the table stays within N
  for (int t = 0; t < N; ++t) direction[t] = 0;
  // transfers in issue order with their channel: 2c carries rank_a → rank_b, 2c+1 back
  const int channels = 2 * C;
  int nt = 0;
  for (int c = 0; c <= channels; ++c) send_begin[c] = 0, recv_begin[c] = 0;
  constexpr const char* race = "a buffer is used before the other stream's use of it is waited for";
  for (int r = 0; r < P; ++r) {
    // this rank's events and slots only (each within the scratch: the maxima above)
    const int nslots[2] = {res[r].activation_slots, res[r].gradient_slots};
    const int nevents = res[r].events;
    for (int e = 0; e < nevents; ++e) last_record[e] = -1, last_cover[e] = -1;
    for (int u = 0; u < 4 * nslots[0]; ++u) use[u] = -1;
    for (int u = 0; u < 4 * nslots[1]; ++u) use[4 * slots + u] = -1;
    int known[stream_count] = {-1, -1};
    long long prev_phase = -1;
    int last_group_tick = -2147483647 - 1, last_group_peer = -1;  // -1: several
    int group_end = -1;  // the last transfer of the group being read (a transfer after it is ungrouped)
    for (int i = beg[r]; i < beg[r + 1]; ++i) {
      const lowered_op o = ops[i];  // a copy: the cheapest read in constant evaluation
      const int local = i - beg[r], s = static_cast<int>(o.stream), other = 1 - s;
      // the tick certificate (step 5): phases 2·tick (groups, transfers) and 2·tick + 1 (computes)
      // never decrease along the rank, and a rank has one group per tick or, per tick, one group
      // per peer in increasing or decreasing peer order, the same for every rank in that tick
      // (group_policy::per_peer)
      const long long phase = 2LL * o.tick + (o.code == op_code::compute ? 1 : 0);
      certified = phase < prev_phase || o.tick < 0 || o.tick >= N ? false : certified, prev_phase = phase;
      // Fast paths (clang's constexpr step limit counts statements, so these are few): a compute
      // op without slot lists and a transfer in a group, whose checks below all pass, take the
      // same updates here; an op that fails any check goes on to the checks, which name it.
      if (o.code == op_code::compute && o.link < 0) {
        const int wv = o.wait_event, rec = wv >= 0 && wv < nevents ? last_record[wv] : -1,
                  covered = rec < 0 ? -1 : last_cover[wv],
                  kn = rec >= 0 && (last_phase[wv] & 1) != s && covered > known[s] ? covered : known[s],
                  pool = o.what == kind::F ? 0 : 1, ui = 4 * o.slot, ug = 4 * (slots + o.grad_slot),
                  uo = 4 * (pool * slots + o.out_slot);
        if ((wv < 0 || rec >= 0) && o.record_event < nevents &&
            (o.slot < 0 || (o.slot < nslots[0] && use[ui + other] <= kn)) &&
            (o.grad_slot < 0 || (o.grad_slot < nslots[1] && use[ug + other] <= kn)) &&
            (o.out_slot < 0 || (o.out_slot < nslots[pool] && use[uo + other] <= kn && use[uo + 2 + other] <= kn))) {
          known[s] = kn, certified = wv >= 0 && (last_phase[wv] >> 1) >= phase ? false : certified,
          (o.slot >= 0 ? use[ui + 2 + s] = i : 0), (o.grad_slot >= 0 ? use[ug + 2 + s] = i : 0),
          (o.out_slot >= 0 ? use[uo + s] = i : 0),
          (o.record_event >= 0 ? (last_record[o.record_event] = i, last_cover[o.record_event] = i,
                                  last_phase[o.record_event] = 2 * phase + s)
                               : 0);
          continue;
        }
      } else if ((o.code == op_code::send || o.code == op_code::recv) && o.stream == stream_id::comm) {
        const bool member = o.comm >= 0 && o.comm < C &&
                            ((comms[o.comm].rank_a == r && comms[o.comm].rank_b == o.peer) ||
                             (comms[o.comm].rank_b == r && comms[o.comm].rank_a == o.peer));
        const bool sending = o.code == op_code::send;
        const int pool = o.what == kind::F ? 0 : 1, ub = 4 * (pool * slots + o.slot),
                  chn = member ? 2 * o.comm + (comms[o.comm].rank_a == (sending ? r : o.peer) ? 0 : 1) : 0;
        if (i <= group_end && member && o.wait_event < 0 && o.record_event < 0 &&
            (o.slot < 0 ||
             (o.slot < nslots[pool] && use[ub + other] <= known[s] && (sending || use[ub + 2 + other] <= known[s])))) {
          t_op[nt] = i, t_ch[nt] = 2 * chn + (sending ? 1 : 0), ++nt,
          (sending ? ++send_begin[chn + 1] : ++recv_begin[chn + 1]),
          (o.slot >= 0 ? use[ub + (sending ? 2 : 0) + s] = group_end : 0);
          continue;
        }
      }
      if (o.code == op_code::group) {  // one group per tick, or one per peer in the tick's peer order
        // a group op and the transfers that directly follow it are one NCCL group: [i, e]
        int e = i, peer = -1;
        for (; e + 1 < beg[r + 1]; ++e) {
          const code_and_peer next = code_and_peer_of(ops, e + 1);
          if (next.code != op_code::send && next.code != op_code::recv) break;
          peer = e == i ? next.peer : (next.peer != peer ? -1 : peer);
        }
        if (o.tick == last_group_tick) {  // groups per peer: the tick's one direction on every rank
          if (peer < 0 || last_group_peer < 0 || peer == last_group_peer || o.tick < 0 || o.tick >= N)
            certified = false;
          else {
            const signed char now = peer > last_group_peer ? 1 : -1;
            if (direction[o.tick] == 0) direction[o.tick] = now;
            if (direction[o.tick] != now) certified = false;
          }
        }
        last_group_tick = o.tick;
        last_group_peer = peer;
        if (o.stream != stream_id::comm)
          return at_op(errc::nccl_deadlock, r, o, local, "a group off the communication stream");
        group_end = e;
      } else if (o.code == op_code::send || o.code == op_code::recv) {
        if (o.stream != stream_id::comm)
          return at_op(errc::nccl_deadlock, r, o, local, "transfer outside the communication stream");
        if (i > group_end) {  // an ungrouped transfer is a group of one
          group_end = i;
          certified = false;
        }
        if (o.comm < 0 || o.comm >= C)
          return at_op(errc::transfer_mismatch, r, o, local, "communicator id out of range");
        const comm_desc& cm = comms[o.comm];
        if (!((cm.rank_a == r && cm.rank_b == o.peer) || (cm.rank_b == r && cm.rank_a == o.peer)))
          return at_op(errc::transfer_mismatch, r, o, local, "rank or peer is not a member of the communicator");
        const bool sending = o.code == op_code::send;
        const int chn = 2 * o.comm + (cm.rank_a == (sending ? r : o.peer) ? 0 : 1);
        t_op[nt] = i;
        t_ch[nt] = 2 * chn + (sending ? 1 : 0);  // its channel, and 1 for a send
        ++nt;
        if (sending)
          ++send_begin[chn + 1];
        else
          ++recv_begin[chn + 1];
      }
      // events
      if ((o.code == op_code::send || o.code == op_code::recv) && (o.wait_event >= 0 || o.record_event >= 0))
        return at_op(errc::event_misuse, r, o, local, "events ride on compute and group ops, not on transfers");
      if (o.wait_event >= 0) {
        if (o.wait_event >= nevents) return at_op(errc::event_misuse, r, o, local, "event id outside the rank's pool");
        const int rec = last_record[o.wait_event];
        if (rec < 0) return at_op(errc::event_misuse, r, o, local, "a wait on an event never recorded before it");
        // the certificate: a wait refers to an op of an earlier phase
        if ((last_phase[o.wait_event] >> 1) >= phase) certified = false;
        const int covered = last_cover[o.wait_event];  // a group records when it ends
        if ((last_phase[o.wait_event] & 1) != s && covered > known[s]) known[s] = covered;
      }
      // buffers: each slot this op reads or writes must not still be in use by the other stream
      // (a read needs the other stream's last write waited for; a write also its last read).
      // Written out per op kind: a loop or a call costs more than these comparisons.
      if (o.code == op_code::send || o.code == op_code::recv) {
        if (o.slot >= 0) {
          const int pool = o.what == kind::F ? 0 : 1;
          if (o.slot >= nslots[pool])
            return at_op(errc::index_out_of_range, r, o, local, "buffer slot outside the rank's pool");
          const int u = 4 * (pool * slots + o.slot);
          const bool write = o.code == op_code::recv;
          if (use[u + other] > known[s] || (write && use[u + 2 + other] > known[s]))
            return at_op(errc::event_misuse, r, o, local, race);
          use[u + (write ? 0 : 2) + s] = group_end;
        }
      } else if (o.code == op_code::compute && o.link >= 0) {  // a stage-graph op's lists (op_slots)
        const int h = o.link;                                  // n_in, n_grad, n_out, then the slots
        if (h + 3 > NL || lists[h] < 0 || lists[h + 1] < 0 || lists[h + 2] < 0 ||
            h + 3 + lists[h] + lists[h + 1] + lists[h + 2] > NL)
          return at_op(errc::index_out_of_range, r, o, local, "a compute op's slot list is outside the plan's lists");
        const int ni = lists[h], ng = lists[h + 1], total = ni + ng + lists[h + 2];
        for (int k = 0; k < total; ++k) {
          const bool out = k >= ni + ng;
          const int pool = out ? (o.what == kind::F ? 0 : 1) : (k >= ni ? 1 : 0);
          const int slot = lists[h + 3 + k];
          if (slot == -1 && out && o.what != kind::F) continue;  // no gradient back over a detached edge
          if (slot < 0 || slot >= nslots[pool])
            return at_op(errc::index_out_of_range, r, o, local, "buffer slot outside the rank's pool");
          const int u = 4 * (pool * slots + slot);
          // a B or I with several gradients sums them into the first: a write too
          const bool write = out || (k == ni && sums_into_first(o.what, static_cast<std::size_t>(ng)));
          if (use[u + other] > known[s] || (write && use[u + 2 + other] > known[s]))
            return at_op(errc::event_misuse, r, o, local, race);
          use[u + (write ? 0 : 2) + s] = i;
        }
      } else if (o.code == op_code::compute) {
        if (o.slot >= 0) {
          if (o.slot >= nslots[0])
            return at_op(errc::index_out_of_range, r, o, local, "buffer slot outside the rank's pool");
          if (use[4 * o.slot + other] > known[s]) return at_op(errc::event_misuse, r, o, local, race);
          use[4 * o.slot + 2 + s] = i;
        }
        if (o.grad_slot >= 0) {
          if (o.grad_slot >= nslots[1])
            return at_op(errc::index_out_of_range, r, o, local, "buffer slot outside the rank's pool");
          const int u = 4 * (slots + o.grad_slot);
          if (use[u + other] > known[s]) return at_op(errc::event_misuse, r, o, local, race);
          use[u + 2 + s] = i;
        }
        if (o.out_slot >= 0) {
          const int pool = o.what == kind::F ? 0 : 1;
          if (o.out_slot >= nslots[pool])
            return at_op(errc::index_out_of_range, r, o, local, "buffer slot outside the rank's pool");
          const int u = 4 * (pool * slots + o.out_slot);
          if (use[u + other] > known[s] || use[u + 2 + other] > known[s])
            return at_op(errc::event_misuse, r, o, local, race);
          use[u + s] = i;
        }
      }
      if (o.record_event >= 0) {
        if (o.record_event >= nevents)
          return at_op(errc::event_misuse, r, o, local, "event id outside the rank's pool");
        last_record[o.record_event] = i, last_cover[o.record_event] = o.code == op_code::group ? group_end : i,
        last_phase[o.record_event] = 2 * phase + s;
      }
    }
  }

  // 2. FIFO matching per (communicator, direction): the sends and recvs of each channel in issue
  //    order; the k-th of each must carry the same data.
  auto& send_list = w.send_list;
  auto& recv_list = w.recv_list;
  for (int c = 0; c < channels; ++c) {
    send_begin[c + 1] += send_begin[c];
    recv_begin[c + 1] += recv_begin[c];
  }
  for (int c = 0; c < channels; ++c) send_fill[c] = send_begin[c], recv_fill[c] = recv_begin[c];
  for (int k = 0; k < nt; ++k) {
    if (t_ch[k] & 1)
      send_list[send_fill[t_ch[k] >> 1]++] = t_op[k];
    else
      recv_list[recv_fill[t_ch[k] >> 1]++] = t_op[k];
  }
  for (int c = 0; c < channels; ++c) {
    const int ns = send_begin[c + 1] - send_begin[c], nr = recv_begin[c + 1] - recv_begin[c];
    const int common = ns < nr ? ns : nr;
    for (int k = 0; k < common; ++k) {
      const int si = send_list[send_begin[c] + k], ri = recv_list[recv_begin[c] + k];
      const lowered_op a = ops[si];
      const lowered_op b = ops[ri];
      if (a.what != b.what || a.stage != b.stage || a.microbatch != b.microbatch || a.link != b.link)
        return at_op(errc::transfer_mismatch, rank_of(ri), b, ri - beg[rank_of(ri)],
                     "the recv matches (FIFO per communicator and peer) a send of other data");
      if (a.tick != b.tick) certified = false;
    }
    if (ns != nr) {
      const int i = ns > nr ? send_list[send_begin[c] + common] : recv_list[recv_begin[c] + common];
      return at_op(errc::transfer_mismatch, rank_of(i), ops[i], i - beg[rank_of(i)],
                   ns > nr ? "a send with no matching recv" : "a recv with no matching send");
    }
  }

  // 5. progress. The fast proof: the ops carry a tick certificate (the lowering's lock-step ticks)
  //    and the checks above found it consistent — along each rank phases 2·tick (a group and its
  //    transfers) then 2·tick + 1 (computes) never decrease, a rank has one group per tick (or one
  //    per peer, in increasing or decreasing peer order, one direction per tick on every rank),
  //    both ends of every transfer have the same tick, and
  //    every wait refers to an op of an earlier phase. Then, by induction over phases, every group
  //    of tick t is reached once phases below 2t are done (its lane predecessor and wait source
  //    are earlier), so all groups of tick t (partners included) complete — with groups per peer,
  //    by induction over (tick, rank pair) in lexicographic order or, in a tick whose direction is
  //    decreasing, its reverse, which every rank follows — then
  //    the computes of tick t: the program completes. Any program without a valid certificate
  //    (hand-made ones) gets the simulation below.
  if (by_certificate) *by_certificate = certified;
  if (certified) return {};
  //    The simulation: run every (rank, stream) lane as far as it can until all finish or none moves.
  //    A group completes once every partner's group has been reached (grouped ops progress
  //    together; a rendezvous needs both ends posted). Its tables, which the checks above found
  //    consistent, are made here: each op's group, its wait's record and each transfer's partner.
  auto& group_of = w.group_of;          // -1: a compute op
  auto& group_end_of = w.group_end_of;  // the group's last transfer
  auto& waits_on = w.waits_on;          // -1: no wait
  auto& partner = w.partner;
  for (int r = 0; r < P; ++r) {
    for (int e = 0; e < res[r].events; ++e) last_record[e] = -1;
    int group = -1, group_end = -1;
    for (int i = beg[r]; i < beg[r + 1]; ++i) {
      const lowered_op o = ops[i];
      if (o.code == op_code::group) {
        group = i, group_end = i;
        while (group_end + 1 < beg[r + 1] &&
               (ops[group_end + 1].code == op_code::send || ops[group_end + 1].code == op_code::recv))
          ++group_end;
      } else if (o.code != op_code::compute && i > group_end) {
        group = i, group_end = i;
      }
      group_of[i] = o.code == op_code::compute ? -1 : group, group_end_of[i] = group_end;
      waits_on[i] = o.wait_event >= 0 ? last_record[o.wait_event] : -1;
      if (o.record_event >= 0) last_record[o.record_event] = i;
    }
  }
  for (int c = 0; c < channels; ++c)
    for (int k = 0; k < send_begin[c + 1] - send_begin[c]; ++k)
      partner[send_list[send_begin[c] + k]] = recv_list[recv_begin[c] + k],
                                        partner[recv_list[recv_begin[c] + k]] = send_list[send_begin[c] + k];
  const int lanes = P * stream_count;
  auto& lane_begin = w.lane_begin;  // [lanes + 1]
  auto& pc = w.pc;
  auto& lane_ops = w.lane_ops;
  auto& done = w.done;
  auto& reached = w.reached;  // a group op (or lone transfer) some lane arrived at
  for (int l = 0; l <= lanes; ++l) lane_begin[l] = 0;
  for (int i = 0; i < N; ++i) done[i] = 0, reached[i] = 0;
  for (int r = 0; r < P; ++r)
    for (int i = beg[r]; i < beg[r + 1]; ++i) ++lane_begin[r * stream_count + static_cast<int>(ops[i].stream) + 1];
  for (int l = 0; l < lanes; ++l) lane_begin[l + 1] += lane_begin[l];
  for (int l = 0; l < lanes; ++l) pc[l] = lane_begin[l];
  for (int r = 0; r < P; ++r)
    for (int i = beg[r]; i < beg[r + 1]; ++i) lane_ops[pc[r * stream_count + static_cast<int>(ops[i].stream)]++] = i;
  for (int l = 0; l < lanes; ++l) pc[l] = lane_begin[l];
  int remaining = N;
  while (remaining > 0) {
    bool progressed = false;
    for (int l = 0; l < lanes; ++l) {
      while (pc[l] < lane_begin[l + 1]) {
        const int i = lane_ops[pc[l]];
        const op_code code = ops[i].code;
        if (waits_on[i] >= 0 && !done[waits_on[i]]) break;
        if (code == op_code::group || code == op_code::send || code == op_code::recv) {
          const int g = group_of[i], e = group_end_of[i];
          reached[g] = 1;
          bool all = true;
          for (int j = g; j <= e && all; ++j)
            if (ops[j].code == op_code::send || ops[j].code == op_code::recv) all = reached[group_of[partner[j]]] != 0;
          if (!all) break;
          for (int j = g; j <= e; ++j) done[j] = 1;
          pc[l] += e - g + 1;
          remaining -= e - g + 1;
          progressed = true;
          continue;
        }
        done[i] = 1;  // compute
        ++pc[l];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      for (int l = 0; l < lanes; ++l)
        if (pc[l] < lane_begin[l + 1]) {
          const int r = l / stream_count, i = lane_ops[pc[l]];
          return at_op(errc::nccl_deadlock, r, ops[i], i - beg[r],
                       "this op can never complete: its partners wait on each other in a cycle");
        }
    }
  }
  return {};
}

}  // namespace detail

/// `by_certificate`, when given, says whether completion was proved by the tick certificate (the
/// fast proof every lowering's output takes) rather than by the simulation.
constexpr verdict verify_lowered(lowered_view L, bool* by_certificate = nullptr) {
  const int P = L.ranks, N = static_cast<int>(L.ops.size()), C = static_cast<int>(L.comms.size());
  // A hand-made program's tables are sized by what it declares: held to pipetype::limits first
  // (its ranks; events and slots, in all ranks together, at most limits::actions each), so
  // that the scratch below and the per-rank resets stay bounded.
  long long all_slots = 0, all_events = 0;
  int slots = 0, events = 0;  // the largest rank's, which size the scratch
  bool negative = P < 0 || static_cast<long long>(L.begin.size()) < static_cast<long long>(P) + 1 ||
                  static_cast<long long>(L.resources.size()) < P;
  for (int r = 0; r < P && !negative; ++r) {
    const rank_resources& q = L.resources[static_cast<std::size_t>(r)];
    negative = q.activation_slots < 0 || q.gradient_slots < 0 || q.events < 0;
    all_slots += static_cast<long long>(q.activation_slots) + q.gradient_slots, all_events += q.events;
    slots = q.activation_slots > slots ? q.activation_slots : slots;
    slots = q.gradient_slots > slots ? q.gradient_slots : slots;
    events = q.events > events ? q.events : events;
  }
  if (negative || P > limits::ranks || all_slots > limits::actions || all_events > limits::actions) {
    return negative ? refusal(errc::index_out_of_range,
                              "a negative rank count, slot count or event count, or fewer tables than ranks")
                    : refusal(errc::too_large,
                              "more ranks than pipetype::limits::ranks, or more buffer slots or events in all ranks "
                              "together than pipetype::limits::actions");
  }
  const int channels = 2 * C, lanes = P * stream_count;
  // one block of ints: nine of N + 1, two of the events, the slots' uses, four of channels + 1, two of lanes + 1.
  // A program with a tick certificate (every lowering's) touches only the transfers' lists of these
  // (the rest is the simulation's), so most of the block never costs memory
  const int n1 = N + 1, c1 = channels + 1, l1 = lanes + 1;
  detail::scratch<int> ints(9 * n1 + 2 * (events + 1) + (8 * slots + 8) + 4 * c1 + 2 * l1, detail::unset);
  detail::scratch<char> chars(2 * n1, detail::unset);
  detail::scratch<signed char> dir(N + 2, detail::unset);
  detail::scratch<long long> phases(events + 1, detail::unset);
  detail::pieces<int> q{ints.data()};
  detail::verify_scratch_ptrs w{};
  w.group_of = q.next(n1), w.waits_on = q.next(n1), w.group_end_of = q.next(n1), w.t_op = q.next(n1),
  w.t_ch = q.next(n1), w.partner = q.next(n1), w.send_list = q.next(n1), w.recv_list = q.next(n1),
  w.lane_ops = q.next(n1);
  w.last_record = q.next(events + 1), w.last_cover = q.next(events + 1), w.use = q.next(8 * slots + 8);
  w.send_begin = q.next(c1), w.recv_begin = q.next(c1), w.send_fill = q.next(c1), w.recv_fill = q.next(c1);
  w.lane_begin = q.next(l1), w.pc = q.next(l1);
  w.done = chars.data(), w.reached = chars.data() + n1, w.direction = dir.data(), w.last_phase = phases.data();
  return detail::verify_lowered_in(P, N, C, static_cast<int>(L.slot_lists.size()), L.ops, L.begin.data(),
                                   L.comms.data(), L.resources.data(), L.slot_lists.data(), w, -1, -1, by_certificate);
}

}  // namespace pipetype
