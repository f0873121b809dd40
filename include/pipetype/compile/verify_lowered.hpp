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
#include <vector>

#include "pipetype/compile/diagnostics.hpp"
#include "pipetype/compile/lowered.hpp"
#include "pipetype/detail/scratch.hpp"

namespace pipetype {

namespace detail {

constexpr verdict at_op(errc e, int rank, const lowered_op& o, int index, const char* why) {
  verdict v;
  v.code = e;
  v.rank = rank;
  v.stage = o.stage;
  v.microbatch = o.microbatch;
  v.kind = o.code == op_code::compute || o.code == op_code::send || o.code == op_code::recv ? kind_char(o.what) : '?';
  v.index = index;
  v.detail = why;
  return v;
}

}  // namespace detail

/// `by_certificate`, when given, says whether completion was proved by the tick certificate (the
/// fast proof every lowering's output takes) rather than by the simulation.
constexpr verdict verify_lowered(lowered_view L, bool* by_certificate = nullptr) {
  // Flat loops over raw pointers: this runs inside make_plan's constant evaluation.
  using detail::at_op;
  const int P = L.ranks;
  const int N = static_cast<int>(L.ops.size());
  const int C = static_cast<int>(L.comms.size());
  const lowered_op* ops = L.ops.data();
  const int* beg = L.begin.data();
  const comm_desc* comms = L.comms.data();

  // 1. One pass per rank: group structure, communicator membership, the record each wait refers
  //    to (the latest op issued before it on the rank that records that event), and buffer
  //    ordering — every buffer shared by the two streams of a rank must be ordered by events.
  //    use[(pool·slots + slot)·4 + {writer s0, writer s1, reader s0, reader s1}] holds the index
  //    at which that use completes; known[s] the furthest op of the other stream s has waited for.
  const rank_resources* res = L.resources.data();
  int slots = 0, events = 0;
  for (int r = 0; r < P; ++r) {
    const int sl = res[r].activation_slots > res[r].gradient_slots ? res[r].activation_slots : res[r].gradient_slots;
    slots = sl > slots ? sl : slots;
    events = res[r].events > events ? res[r].events : events;
  }
  detail::scratch<int> iv(2 * N + 1, -1), iv_unset(N + 1, detail::unset);
  int* group_of = iv.data();            // -1: not in a group (yet)
  int* waits_on = group_of + N;         // -1: no wait
  int* group_end_of = iv_unset.data();  // written wherever group_of is
  const auto rank_of = [&](int i) {     // the rank issuing op i (error paths only)
    int lo = 0, hi = P;                 // the last r with beg[r] <= i
    while (hi - lo > 1) (beg[(lo + hi) / 2] <= i ? lo : hi) = (lo + hi) / 2;
    return lo;
  };
  detail::scratch<int> last_record_v(events + 1, -1);
  int* last_record = last_record_v.data();
  detail::scratch<int> use_v(8 * slots + 8, -1);
  bool certified = true;  // see step 5
  // groups per peer: each tick's peer order, +1 increasing, -1 decreasing. Ticks are certificate
  // data only: one outside [0, N) (no lowering makes one; there are fewer ticks than ops) voids
  // the certificate, so the table stays within N
  int max_tick = 0;
  for (int i = 0; i < N; ++i)  // (one statement: clang's step limit counts statements)
    certified = ops[i].tick < 0 || ops[i].tick >= N ? false : certified,
    max_tick = ops[i].tick >= 0 && ops[i].tick < N && ops[i].tick >= max_tick ? ops[i].tick + 1 : max_tick;
  detail::scratch<signed char> direction_v(max_tick + 1, 0);
  signed char* direction = direction_v.data();
  // transfers in issue order with their channel: 2c carries rank_a → rank_b, 2c+1 back
  const int channels = 2 * C;
  detail::scratch<int> tv(2 * N + 2, detail::unset);
  int* t_op = tv.data();
  int* t_ch = t_op + N + 1;
  int nt = 0;
  detail::scratch<int> cv(4 * (channels + 1), 0);
  int* send_begin = cv.data();  // [channels + 1] counts, then prefix sums; then fill cursors
  int* recv_begin = send_begin + (channels + 1);
  int* send_fill = recv_begin + (channels + 1);
  int* recv_fill = send_fill + (channels + 1);
  constexpr const char* race = "a buffer is used before the other stream's use of it is waited for";
  int* use = use_v.data();
  for (int r = 0; r < P; ++r) {
    for (int e = 0; e < events; ++e) last_record[e] = -1;
    for (int u = 0; u < 8 * slots; ++u) use[u] = -1;
    const int nslots[2] = {res[r].activation_slots, res[r].gradient_slots};
    int known[stream_count] = {-1, -1};
    long long prev_phase = -1;
    int last_group_tick = -2147483647 - 1, last_group_peer = -1;  // -1: several
    for (int i = beg[r]; i < beg[r + 1]; ++i) {
      const lowered_op o = ops[i];  // a copy: in constant evaluation, cheaper to read than through a reference
      const int local = i - beg[r], s = static_cast<int>(o.stream), other = 1 - s;
      // the tick certificate (step 5): phases 2·tick (groups, transfers) and 2·tick + 1 (computes)
      // never decrease along the rank, and a rank has one group per tick or, per tick, one group
      // per peer in increasing or decreasing peer order, the same for every rank in that tick
      // (group_policy::per_peer)
      const long long phase = 2LL * o.tick + (o.code == op_code::compute ? 1 : 0);
      certified = phase < prev_phase ? false : certified, prev_phase = phase;
      // Fast paths (clang's constexpr step limit counts statements, so these are few): a compute
      // op without slot lists and a transfer in a group, whose checks below all pass, take the
      // same updates here; an op that fails any check goes on to the checks, which name it.
      if (o.code == op_code::compute && o.link < 0) {
        const int w = o.wait_event, rec = w >= 0 && w < res[r].events ? last_record[w] : -1,
                  covered = rec < 0 ? -1 : (ops[rec].code == op_code::group ? group_end_of[rec] : rec),
                  kn = rec >= 0 && static_cast<int>(ops[rec].stream) != s && covered > known[s] ? covered : known[s],
                  pool = o.what == kind::F ? 0 : 1, ui = 4 * o.slot, ug = 4 * (slots + o.grad_slot),
                  uo = 4 * (pool * slots + o.out_slot);
        if ((w < 0 || rec >= 0) && o.record_event < res[r].events &&
            (o.slot < 0 || (o.slot < nslots[0] && use[ui + other] <= kn)) &&
            (o.grad_slot < 0 || (o.grad_slot < nslots[1] && use[ug + other] <= kn)) &&
            (o.out_slot < 0 || (o.out_slot < nslots[pool] && use[uo + other] <= kn && use[uo + 2 + other] <= kn))) {
          (w >= 0 ? waits_on[i] = rec : 0),
              known[s] = kn,
              certified = w >= 0 && 2LL * ops[rec].tick + (ops[rec].code == op_code::compute ? 1 : 0) >= phase
                              ? false
                              : certified,
              (o.slot >= 0 ? use[ui + 2 + s] = i : 0), (o.grad_slot >= 0 ? use[ug + 2 + s] = i : 0),
              (o.out_slot >= 0 ? use[uo + s] = i : 0), (o.record_event >= 0 ? last_record[o.record_event] = i : 0);
          continue;
        }
      } else if ((o.code == op_code::send || o.code == op_code::recv) && o.stream == stream_id::comm) {
        const comm_desc* cm = o.comm >= 0 && o.comm < C ? comms + o.comm : nullptr;
        const bool sending = o.code == op_code::send;
        const int pool = o.what == kind::F ? 0 : 1, ub = 4 * (pool * slots + o.slot),
                  chn = cm ? 2 * o.comm + (cm->rank_a == (sending ? r : o.peer) ? 0 : 1) : 0;
        if (group_of[i] >= 0 && cm &&
            ((cm->rank_a == r && cm->rank_b == o.peer) || (cm->rank_b == r && cm->rank_a == o.peer)) &&
            o.wait_event < 0 && o.record_event < 0 &&
            (o.slot < 0 ||
             (o.slot < nslots[pool] && use[ub + other] <= known[s] && (sending || use[ub + 2 + other] <= known[s])))) {
          t_op[nt] = i, t_ch[nt] = chn, ++nt, ++(sending ? send_begin : recv_begin)[chn + 1],
          (o.slot >= 0 ? use[ub + (sending ? 2 : 0) + s] = group_end_of[i] : 0);
          continue;
        }
      }
      if (o.code == op_code::group) {  // one group per tick, or one per peer in the tick's peer order
        // a group op and the transfers that directly follow it are one NCCL group: [i, e]
        int e = i, peer = -1;
        while (e + 1 < beg[r + 1]) {
          const lowered_op t = ops[e + 1];  // a copy: each read once
          if (t.code != op_code::send && t.code != op_code::recv) break;
          peer = e == i ? t.peer : (t.peer != peer ? -1 : peer), ++e;
        }
        if (o.tick == last_group_tick) {  // groups per peer: the tick's one direction on every rank
          if (peer < 0 || last_group_peer < 0 || peer == last_group_peer || o.tick < 0 || o.tick >= max_tick)
            certified = false;
          else {
            signed char& d = direction[o.tick];
            const signed char now = peer > last_group_peer ? 1 : -1;
            if (d == 0) d = now;
            if (d != now) certified = false;
          }
        }
        last_group_tick = o.tick;
        last_group_peer = peer;
        if (o.stream != stream_id::comm)
          return at_op(errc::nccl_deadlock, r, o, local, "a group off the communication stream");
        for (int j = i; j <= e; ++j) group_of[j] = i, group_end_of[j] = e;
      } else if (o.code == op_code::send || o.code == op_code::recv) {
        if (o.stream != stream_id::comm)
          return at_op(errc::nccl_deadlock, r, o, local, "transfer outside the communication stream");
        if (group_of[i] < 0) {  // an ungrouped transfer is a group of one
          group_of[i] = i, group_end_of[i] = i;
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
        t_ch[nt] = chn;
        ++nt;
        ++(sending ? send_begin : recv_begin)[chn + 1];
      }
      // events
      if ((o.code == op_code::send || o.code == op_code::recv) && (o.wait_event >= 0 || o.record_event >= 0))
        return at_op(errc::event_misuse, r, o, local, "events ride on compute and group ops, not on transfers");
      if (o.wait_event >= 0) {
        if (o.wait_event >= res[r].events)
          return at_op(errc::event_misuse, r, o, local, "event id outside the rank's pool");
        const int rec = last_record[o.wait_event];
        if (rec < 0) return at_op(errc::event_misuse, r, o, local, "a wait on an event never recorded before it");
        waits_on[i] = rec;
        // the certificate: a wait refers to an op of an earlier phase
        if (2LL * ops[rec].tick + (ops[rec].code == op_code::compute ? 1 : 0) >= phase) certified = false;
        const int covered = ops[rec].code == op_code::group ? group_end_of[rec] : rec;  // a group records when it ends
        if (static_cast<int>(ops[rec].stream) != s && covered > known[s]) known[s] = covered;
      }
      // buffers: each slot this op reads or writes must not still be in use by the other stream
      // (a read needs the other stream's last write waited for; a write also its last read).
      // Written out per op kind: a loop or a call costs more than these comparisons.
      if (o.code == op_code::send || o.code == op_code::recv) {
        if (o.slot >= 0) {
          const int pool = o.what == kind::F ? 0 : 1;
          if (o.slot >= nslots[pool])
            return at_op(errc::index_out_of_range, r, o, local, "buffer slot outside the rank's pool");
          int* u = use + 4 * (pool * slots + o.slot);
          const bool write = o.code == op_code::recv;
          if (u[other] > known[s] || (write && u[2 + other] > known[s]))
            return at_op(errc::event_misuse, r, o, local, race);
          u[(write ? 0 : 2) + s] = group_end_of[i];
        }
      } else if (o.code == op_code::compute && o.link >= 0) {  // a stage-graph op's lists (op_slots)
        const int nl = static_cast<int>(L.slot_lists.size());
        const int* head = o.link + 3 <= nl ? L.slot_lists.data() + o.link : nullptr;  // n_in, n_grad, n_out
        if (!head || head[0] < 0 || head[1] < 0 || head[2] < 0 || o.link + 3 + head[0] + head[1] + head[2] > nl)
          return at_op(errc::index_out_of_range, r, o, local, "a compute op's slot list is outside the plan's lists");
        const op_slots sl = L.slots_of(o);
        const int ni = static_cast<int>(sl.in.size()), ng = static_cast<int>(sl.grad.size());
        const int total = ni + ng + static_cast<int>(sl.out.size());
        for (int k = 0; k < total; ++k) {
          const bool out = k >= ni + ng;
          const int pool = out ? (o.what == kind::F ? 0 : 1) : (k >= ni ? 1 : 0);
          const int slot = k < ni ? sl.in[static_cast<std::size_t>(k)]
                           : out  ? sl.out[static_cast<std::size_t>(k - ni - ng)]
                                  : sl.grad[static_cast<std::size_t>(k - ni)];
          if (slot < 0 || slot >= nslots[pool])
            return at_op(errc::index_out_of_range, r, o, local, "buffer slot outside the rank's pool");
          int* u = use + 4 * (pool * slots + slot);
          // a B or I with several gradients sums them into the first: a write too
          const bool write = out || (k == ni && sums_into_first(o.what, sl.grad.size()));
          if (u[other] > known[s] || (write && u[2 + other] > known[s]))
            return at_op(errc::event_misuse, r, o, local, race);
          u[(write ? 0 : 2) + s] = i;
        }
      } else if (o.code == op_code::compute) {
        if (o.slot >= 0) {
          if (o.slot >= nslots[0])
            return at_op(errc::index_out_of_range, r, o, local, "buffer slot outside the rank's pool");
          int* u = use + 4 * o.slot;
          if (u[other] > known[s]) return at_op(errc::event_misuse, r, o, local, race);
          u[2 + s] = i;
        }
        if (o.grad_slot >= 0) {
          if (o.grad_slot >= nslots[1])
            return at_op(errc::index_out_of_range, r, o, local, "buffer slot outside the rank's pool");
          int* u = use + 4 * (slots + o.grad_slot);
          if (u[other] > known[s]) return at_op(errc::event_misuse, r, o, local, race);
          u[2 + s] = i;
        }
        if (o.out_slot >= 0) {
          const int pool = o.what == kind::F ? 0 : 1;
          if (o.out_slot >= nslots[pool])
            return at_op(errc::index_out_of_range, r, o, local, "buffer slot outside the rank's pool");
          int* u = use + 4 * (pool * slots + o.out_slot);
          if (u[other] > known[s] || u[2 + other] > known[s]) return at_op(errc::event_misuse, r, o, local, race);
          u[s] = i;
        }
      }
      if (o.record_event >= 0) {
        if (o.record_event >= res[r].events)
          return at_op(errc::event_misuse, r, o, local, "event id outside the rank's pool");
        last_record[o.record_event] = i;
      }
    }
  }

  // 2. FIFO matching per (communicator, direction): the sends and recvs of each channel in issue
  //    order; the k-th of each must carry the same data.
  detail::scratch<int> partner_v(N + 1, detail::unset);
  int* partner = partner_v.data();
  {
    detail::scratch<int> lists(2 * nt + 2, detail::unset);
    int* send_list = lists.data();
    int* recv_list = send_list + nt + 1;
    for (int c = 0; c < channels; ++c) {
      send_begin[c + 1] += send_begin[c];
      recv_begin[c + 1] += recv_begin[c];
    }
    for (int c = 0; c < channels; ++c) send_fill[c] = send_begin[c], recv_fill[c] = recv_begin[c];
    for (int k = 0; k < nt; ++k) {
      if (ops[t_op[k]].code == op_code::send)
        send_list[send_fill[t_ch[k]]++] = t_op[k];
      else
        recv_list[recv_fill[t_ch[k]]++] = t_op[k];
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
        partner[si] = ri;
        partner[ri] = si;
      }
      if (ns != nr) {
        const int i = ns > nr ? send_list[send_begin[c] + common] : recv_list[recv_begin[c] + common];
        return at_op(errc::transfer_mismatch, rank_of(i), ops[i], i - beg[rank_of(i)],
                     ns > nr ? "a send with no matching recv" : "a recv with no matching send");
      }
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
  //    together; a rendezvous needs both ends posted).
  const int lanes = P * stream_count;
  detail::scratch<int> lv(2 * lanes + 2 + N, 0);
  int* lane_begin = lv.data();  // [lanes + 1]
  int* pc = lane_begin + lanes + 1;
  int* lane_ops = pc + lanes;
  for (int r = 0; r < P; ++r)
    for (int i = beg[r]; i < beg[r + 1]; ++i) ++lane_begin[r * stream_count + static_cast<int>(ops[i].stream) + 1];
  for (int l = 0; l < lanes; ++l) lane_begin[l + 1] += lane_begin[l];
  for (int l = 0; l < lanes; ++l) pc[l] = lane_begin[l];
  for (int r = 0; r < P; ++r)
    for (int i = beg[r]; i < beg[r + 1]; ++i) lane_ops[pc[r * stream_count + static_cast<int>(ops[i].stream)]++] = i;
  for (int l = 0; l < lanes; ++l) pc[l] = lane_begin[l];
  detail::scratch<char> flags_v(2 * N + 2, 0);
  char* done = flags_v.data();
  char* reached = done + N + 1;  // a group op (or lone transfer) some lane arrived at
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

}  // namespace pipetype
