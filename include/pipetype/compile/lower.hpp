// pipetype/compile/lower.hpp — from a verified compute program to the ops an executor issues.
//
// Input: a program that passed check_program, and its lock-step ticks. Output: a
// lowered_program (lowered.hpp). The rules:
//
//   Transfers. Each stage-graph edge s→s+1 (within a chain: program.hpp) whose stages sit on
//   different ranks carries the activation of F(s,j) forward and the gradient of B/I(s+1,j)
//   back. A tensor produced at tick t is transferred at tick t+1 (send on the producer, receive
//   on the consumer). When both stages share a rank there is no transfer: the consumer reads the
//   producer's slot (local hand-off).
//
//   Groups. Each rank issues, for every tick at which it sends or receives, one NCCL group with
//   all of that tick's transfers, ordered by (tensor kind, stage, microbatch) — the same order on
//   both ends — and then that tick's compute. Because every transfer's two ends are in the groups
//   of the same tick, a rank reaches its tick-t group after finishing ticks < t, whose groups
//   completed by induction: the program cannot deadlock under NCCL's blocking rendezvous, FIFO
//   per (communicator, peer) and grouped progress. verify_lowered re-proves this on the ops.
//   group_policy::per_peer splits a tick's group into one per peer, lowest peer first: every rank
//   then meets its (tick, rank pair) groups in the same lexicographic order, and the same
//   induction runs over (tick, pair); a compute waits only for the group that carries its input.
//
//   Communicators. comm_policy::per_edge (default): one per crossing edge; per_rank_pair: one per
//   pair of ranks that talk. Both orders are consistent by the rule above.
//
//   Slots. Every buffer lives in a slot of its rank's activation or gradient pool from the op
//   that writes it to its last reader (F's output until the consumer's B, or W when the
//   backward is split; a send's staging copy until the send). Slots are assigned greedily in
//   issue order, reusing a slot only after its last use: optimal for intervals, so the pool size
//   is the true peak of live buffers.
//
//   Streams and events. Compute runs on stream 0, groups on stream 1. Wherever an op touches a
//   slot last touched by the other stream (data arriving, data leaving, a slot being reused), the
//   earlier op gets a record_event and the later a wait_event, unless that stream has already
//   waited past it. Events come from a per-rank pool; an event is reused once its wait has been
//   issued (CUDA waits on the record state at the time of the wait call). Every op keeps its tick:
//   the certificate verify_lowered checks to prove completion in one pass.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/compile/verify.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/detail/scratch.hpp"

namespace pipetype {

namespace detail {

/// Stable counting sort: the permutation that orders `keys` (each in [0, limit)) ascending.
constexpr scratch<int> counting_order(const int* keys, int n, int limit) {
  scratch<int> start_v(limit + 1, 0);
  int* start = start_v.data();
  for (int i = 0; i < n; ++i) ++start[keys[i] + 1];
  for (int i = 0; i < limit; ++i) start[i + 1] += start[i];
  scratch<int> order_v(n, unset);
  int* order = order_v.data();
  for (int i = 0; i < n; ++i) order[start[keys[i]]++] = i;
  return order_v;
}

/// The lowering, writing its ops where `storage(count)` says (a pointer to `count` ops, or
/// nullptr to give up). Written as flat loops over raw pointers: this runs inside make_plan's
/// constant evaluation, where every function call and every std::vector element costs far more
/// than the arithmetic around it.
template <class Storage>
constexpr lowered_program lower_with(program_view p, std::span<const int> tick_span, comm_policy policy,
                                     group_policy groups, Storage&& storage) {
  const int P = p.ranks, S = p.stages, m = p.microbatches;
  const int N = p.size();
  const int n = S * m;
  lowered_program out;
  out.ranks = P;
  out.policy = policy;
  const action* A = p.actions.data();
  const int* tick = tick_span.data();
  const int* beg = p.begin.data();
  int T = 0;  // ticks
  for (int k = 0; k < N; ++k) T = tick[k] + 1 > T ? tick[k] + 1 : T;
  const int limit = 2 * T + 4;  // positions: 2·tick (the tick's group), 2·tick + 1 (its compute)

  detail::scratch<int> owner_v(S, 0);
  int* owner = owner_v.data();
  for (int r = 0; r < P; ++r)
    for (int k = beg[r]; k < beg[r + 1]; ++k) owner[A[k].stage] = r;
  // positions by (stage, microbatch): F, the input-gradient action G (B or I), and the last use
  // of the stage's input buffers (its B, or its W when split)
  detail::scratch<int> posv(3 * n, -1);
  int* posF = posv.data();
  int* posG = posF + n;
  int* last = posF + 2 * n;
  for (int k = 0; k < N; ++k) {
    const int q = A[k].stage * m + A[k].microbatch;
    const int ps = 2 * tick[k] + 1;
    if (A[k].what == kind::F) {
      posF[q] = ps;
    } else {
      if (A[k].what != kind::W) posG[q] = ps;
      if (ps > last[q]) last[q] = ps;
    }
  }

  // communicators: edge_comm[s] for the edge s → s+1, -1 when both stages share a rank
  detail::scratch<int> edge_comm_v(S, -1);
  int* edge_comm = edge_comm_v.data();
  if (policy == comm_policy::per_edge) {
    for (int s = 0; s + 1 < S; ++s) {
      if (p.chain_tail(s)) continue;  // no edge between two chains
      const int a = owner[s], b = owner[s + 1];
      if (a == b) continue;
      edge_comm[s] = static_cast<int>(out.comms.size());
      out.comms.push_back({a < b ? a : b, a < b ? b : a, s});
    }
  } else {
    detail::scratch<int> pair_v(P * P, -1);
    int* pair = pair_v.data();
    for (int s = 0; s + 1 < S; ++s) {
      if (p.chain_tail(s)) continue;  // no edge between two chains
      const int a = owner[s], b = owner[s + 1];
      if (a != b) pair[(a < b ? a : b) * P + (a < b ? b : a)] = 0;
    }
    for (int a = 0; a < P; ++a)
      for (int b = a + 1; b < P; ++b)
        if (pair[a * P + b] == 0) {
          pair[a * P + b] = static_cast<int>(out.comms.size());
          out.comms.push_back({a, b, -1});
        }
    for (int s = 0; s + 1 < S; ++s) {
      if (p.chain_tail(s)) continue;  // no edge between two chains
      const int a = owner[s], b = owner[s + 1];
      if (a != b) edge_comm[s] = pair[(a < b ? a : b) * P + (a < b ? b : a)];
    }
  }

  // Buffers. For edge (s, j), s+1 < S, with q = s·m + j: the activation of F(s,j) goes to stage
  // s+1, the gradient of G(s+1,j) to stage s. Buffer id 2q is the consumer's copy, 2q+1 the
  // producer's staging copy before a send; pool 0 = activations, 1 = gradients. Each buffer is an
  // interval [alloc, free] of positions on one rank. Transfers are made in (kind, stage,
  // microbatch) order and later stably ordered by tick, which gives both ends of every channel the
  // same order.
  const int max_iv = 4 * n;
  detail::scratch<int> iv_v(5 * max_iv, detail::unset);
  int* iv_rank = iv_v.data();  // struct of arrays: rank, alloc, free, pool, id
  int* iv_alloc = iv_rank + max_iv;
  int* iv_free = iv_rank + 2 * max_iv;
  int* iv_pool = iv_rank + 3 * max_iv;
  int* iv_id = iv_rank + 4 * max_iv;
  int niv = 0;
  const int max_x = 2 * n;
  detail::scratch<int> xv(8 * max_x, detail::unset);
  int* x_tick = xv.data();  // struct of arrays: tick, pool, stage, mb, src, dst, src id, dst id
  int* x_pool = x_tick + max_x;
  int* x_stage = x_tick + 2 * max_x;
  int* x_mb = x_tick + 3 * max_x;
  int* x_src = x_tick + 4 * max_x;
  int* x_dst = x_tick + 5 * max_x;
  int* x_sid = x_tick + 6 * max_x;
  int* x_did = x_tick + 7 * max_x;
  int nx = 0;
  for (int pool_kind = 0; pool_kind < 2; ++pool_kind)
    for (int s = 0; s + 1 < S; ++s) {
      if (p.chain_tail(s)) continue;
      const int ra = owner[s], rb = owner[s + 1];
      const int from = pool_kind == 0 ? ra : rb, to = pool_kind == 0 ? rb : ra;
      for (int j = 0; j < m; ++j) {
        if (!p.runs_through(s, j)) continue;
        const int q = s * m + j;
        const int made = pool_kind == 0 ? posF[q] : posG[q + m];
        const int use = pool_kind == 0 ? last[q + m] : last[q];
        if (from == to) {
          iv_rank[niv] = from, iv_alloc[niv] = made, iv_free[niv] = use, iv_pool[niv] = pool_kind, iv_id[niv] = 2 * q;
          ++niv;
          continue;
        }
        const int t = (made - 1) / 2 + 1;  // transfer tick: the one after the producer's
        iv_rank[niv] = from, iv_alloc[niv] = made, iv_free[niv] = 2 * t, iv_pool[niv] = pool_kind,
        iv_id[niv] = 2 * q + 1;
        ++niv;
        iv_rank[niv] = to, iv_alloc[niv] = 2 * t, iv_free[niv] = use, iv_pool[niv] = pool_kind, iv_id[niv] = 2 * q;
        ++niv;
        x_tick[nx] = t, x_pool[nx] = pool_kind, x_stage[nx] = pool_kind == 0 ? s : s + 1, x_mb[nx] = j;
        x_src[nx] = from, x_dst[nx] = to, x_sid[nx] = 2 * q + 1, x_did[nx] = 2 * q;
        ++nx;
      }
    }

  // Slots: greedy interval colouring per (rank, pool) in allocation order, reusing a slot only
  // after its last use — optimal for intervals, so a pool's size is its peak of live buffers.
  out.resources.assign(static_cast<std::size_t>(P), rank_resources{});
  rank_resources* res = out.resources.data();
  detail::scratch<int> slot_v(2 * (2 * n + 2), detail::unset);
  int* slot_of = slot_v.data();  // [pool · (2n + 2) + id]
  {
    // Intervals in allocation order (a counting sort over positions), each coloured within its
    // (rank, pool) group; group g's busy list lives at busy[base[g] ..], as long as its count.
    const detail::scratch<int> order_v = detail::counting_order(iv_alloc, niv, limit);
    const int* order = order_v.data();
    detail::scratch<int> base_v(2 * P + 1, 0), nslots_v(2 * P, 0), busy_v(niv + 1, detail::unset);
    int* base = base_v.data();
    int* nslots = nslots_v.data();
    int* busy = busy_v.data();
    for (int i = 0; i < niv; ++i) ++base[iv_rank[i] * 2 + iv_pool[i] + 1];
    for (int g = 0; g < 2 * P; ++g) base[g + 1] += base[g];
    for (int o = 0; o < niv; ++o) {
      const int i = order[o];
      const int g = iv_rank[i] * 2 + iv_pool[i];
      int* b = busy + base[g];
      int chosen = 0;
      while (chosen < nslots[g] && b[chosen] >= iv_alloc[i]) ++chosen;
      if (chosen == nslots[g]) ++nslots[g];
      b[chosen] = iv_free[i];
      slot_of[iv_pool[i] * (2 * n + 2) + iv_id[i]] = chosen;
    }
    for (int r = 0; r < P; ++r) {
      res[r].activation_slots = nslots[2 * r];
      res[r].gradient_slots = nslots[2 * r + 1];
    }
  }
  const int* act_slot = slot_of;
  const int* grad_slot = slot_of + (2 * n + 2);

  // slots of every compute op
  detail::scratch<int> cs_v(3 * N, -1);
  int* in_slot = cs_v.data();
  int* gin_slot = in_slot + N;
  int* out_slot = in_slot + 2 * N;
  for (int r = 0; r < P; ++r)
    for (int k = beg[r]; k < beg[r + 1]; ++k) {
      const action& a = A[k];
      const int q = a.stage * m + a.microbatch;  // edge (s, j): this stage's output side
      const int qin = q - m;                     // edge (s−1, j): this stage's input side
      if (!p.chain_head(a.stage)) in_slot[k] = act_slot[2 * qin];
      if (a.what == kind::F) {
        if (!p.chain_tail(a.stage)) out_slot[k] = act_slot[2 * q + (owner[a.stage + 1] == r ? 0 : 1)];
      } else {
        if (!p.chain_tail(a.stage)) gin_slot[k] = grad_slot[2 * q];
        if (a.what != kind::W && !p.chain_head(a.stage))
          out_slot[k] = grad_slot[2 * qin + (owner[a.stage - 1] == r ? 0 : 1)];
      }
    }

  // Transfer ends per rank in tick order: stable sort of the transfers by tick, then of their two
  // ends by rank. end e = 2·x (the send) or 2·x + 1 (the recv).
  const detail::scratch<int> by_tick_v = detail::counting_order(x_tick, nx, T + 2);
  const int* by_tick = by_tick_v.data();
  detail::scratch<int> end_rank_v(2 * nx, detail::unset);
  detail::scratch<int> end_v(2 * nx, detail::unset);
  int* end_rank = end_rank_v.data();
  int* end_of = end_v.data();
  for (int o = 0; o < nx; ++o) {
    const int x = by_tick[o];
    end_of[2 * o] = 2 * x, end_rank[2 * o] = x_src[x];
    end_of[2 * o + 1] = 2 * x + 1, end_rank[2 * o + 1] = x_dst[x];
  }
  const detail::scratch<int> by_rank_v = detail::counting_order(end_rank, 2 * nx, P);
  const int* by_rank = by_rank_v.data();
  detail::scratch<int> rank_end_begin_v(P + 1, 0);
  int* rank_end_begin = rank_end_begin_v.data();
  for (int e = 0; e < 2 * nx; ++e) ++rank_end_begin[end_rank[e] + 1];
  for (int r = 0; r < P; ++r) rank_end_begin[r + 1] += rank_end_begin[r];

  // per end, in rank-then-tick order: its transfer, whether it sends, its tick and its slot
  detail::scratch<int> ev_v(4 * nx + 4, detail::unset);
  int* e_x = ev_v.data();
  int* e_tick = e_x + 2 * nx + 1;
  detail::scratch<int> es_v(2 * nx + 2, detail::unset);
  int* e_slot = es_v.data();
  detail::scratch<char> esend_v(2 * nx + 2, detail::unset);
  char* e_send = esend_v.data();
  for (int e = 0; e < 2 * nx; ++e) {
    const int en = end_of[by_rank[e]];
    const int x = en / 2;
    e_x[e] = x;
    e_send[e] = (en & 1) == 0 ? 1 : 0;
    e_tick[e] = x_tick[x];
    e_slot[e] = slot_of[x_pool[x] * (2 * n + 2) + ((en & 1) == 0 ? x_sid[x] : x_did[x])];
  }
  // group_policy::per_peer: within each (rank, tick), by peer, stably — one group per peer, lowest
  // peer first. Every rank thus takes its (tick, rank pair) groups in one global order, and a
  // compute waits only for the group that carries its input, not for another peer's. per_tick:
  // every end counts as the same "peer", so each tick keeps one group.
  detail::scratch<int> ep_v(2 * nx + 2, 0);
  int* e_peer = ep_v.data();
  if (groups == group_policy::per_peer)
    for (int e = 0; e < 2 * nx; ++e) e_peer[e] = e_send[e] ? x_dst[e_x[e]] : x_src[e_x[e]];
  for (int r = 0; r < P; ++r)
    for (int e = rank_end_begin[r] + 1; e < rank_end_begin[r + 1]; ++e)
      for (int f = e; f > rank_end_begin[r] && e_tick[f] == e_tick[f - 1] && e_peer[f] < e_peer[f - 1]; --f) {
        const int tx = e_x[f], ts = e_slot[f], tp = e_peer[f];
        const char tsend = e_send[f];
        e_x[f] = e_x[f - 1], e_slot[f] = e_slot[f - 1], e_send[f] = e_send[f - 1], e_peer[f] = e_peer[f - 1];
        e_x[f - 1] = tx, e_slot[f - 1] = ts, e_send[f - 1] = tsend, e_peer[f - 1] = tp;
      }
  // the op count: computes, a send and a recv per transfer, and one group op per (rank, tick,
  // peer) with transfers
  int nops = N + 2 * nx;
  for (int r = 0; r < P; ++r)
    for (int e = rank_end_begin[r]; e < rank_end_begin[r + 1]; ++e)
      if (e == rank_end_begin[r] || e_tick[e] != e_tick[e - 1] || e_peer[e] != e_peer[e - 1]) ++nops;
  lowered_op* const ops_out = storage(nops);
  if (ops_out == nullptr) return out;
  int nout = 0;
  out.begin.push_back(0);
  // per-rank scratch, sized for the largest rank
  int max_steps = 0;
  for (int r = 0; r < P; ++r) {
    const int steps = (beg[r + 1] - beg[r]) + (rank_end_begin[r + 1] - rank_end_begin[r]);
    max_steps = steps > max_steps ? steps : max_steps;
  }
  detail::scratch<int> step_v(4 * max_steps + 4, detail::unset);
  int* step_ref = step_v.data();         // compute: action index; group: first end (in by_rank order)
  int* step_end = step_ref + max_steps;  // group: one past its last end; compute: -1
  int* wait_for = step_ref + 2 * max_steps;
  int* event_of = step_ref + 3 * max_steps;
  detail::scratch<char> record_v(max_steps + 1, detail::unset);
  char* record_after = record_v.data();
  int max_slots = 0;
  for (int r = 0; r < P; ++r) {
    const int sl = res[r].activation_slots + res[r].gradient_slots;
    max_slots = sl > max_slots ? sl : max_slots;
  }
  detail::scratch<int> use_v(4 * max_slots + 4, detail::unset);
  int* use = use_v.data();  // per slot: [writer on stream 0, writer on 1, reader on 0, reader on 1]
  detail::scratch<char> in_use_v(max_steps + 1, detail::unset);
  char* in_use = in_use_v.data();

  for (int r = 0; r < P; ++r) {
    rank_resources& rr = res[r];
    // 1. per tick, its groups (one per peer, if any) then its compute
    int ns = 0;
    int e = rank_end_begin[r];
    const int eend = rank_end_begin[r + 1];
    int k = beg[r];
    while (e < eend || k < beg[r + 1]) {
      const int tx = e < eend ? e_tick[e] : detail::never;
      const int tc = k < beg[r + 1] ? tick[k] : detail::never;
      if (tx <= tc) {
        step_ref[ns] = e;
        const int peer = e_peer[e];
        while (e < eend && e_tick[e] == tx && e_peer[e] == peer) ++e;
        step_end[ns] = e;
        rr.transfers += e - step_ref[ns];
        ++rr.groups;
      } else {
        step_ref[ns] = k++;
        step_end[ns] = -1;
      }
      ++ns;
    }

    // 2. which steps wait for the other stream: hazards on the slots they touch. A group's
    //    transfers complete with the group, so its step index stands for the whole group.
    const int grad_base = 4 * rr.activation_slots;
    for (int i = 0; i < 4 * (rr.activation_slots + rr.gradient_slots); ++i) use[i] = -1;
    int waited0 = -1, waited1 = -1;
    for (int i = 0; i < ns; ++i) {
      wait_for[i] = -1;
      record_after[i] = 0;
    }
    for (int i = 0; i < ns; ++i) {
      const bool group = step_end[i] >= 0;
      const int sw = group ? 1 : 0, other = 1 - sw;
      int req = -1;
      if (group) {
        for (int g = step_ref[i]; g < step_end[i]; ++g) {
          const bool sending = e_send[g] != 0;
          int* u = use + (x_pool[e_x[g]] == 0 ? 0 : grad_base) + 4 * e_slot[g];
          if (u[other] > req) req = u[other];
          if (!sending && u[2 + other] > req) req = u[2 + other];
          u[(sending ? 2 : 0) + sw] = i;
        }
      } else {
        const int c = step_ref[i];
        if (in_slot[c] >= 0) {
          int* u = use + 4 * in_slot[c];
          if (u[other] > req) req = u[other];
          u[2] = i;
        }
        if (gin_slot[c] >= 0) {
          int* u = use + grad_base + 4 * gin_slot[c];
          if (u[other] > req) req = u[other];
          u[2] = i;
        }
        if (out_slot[c] >= 0) {
          int* u = use + (A[c].what == kind::F ? 0 : grad_base) + 4 * out_slot[c];
          if (u[other] > req) req = u[other];
          if (u[2 + other] > req) req = u[2 + other];
          u[0] = i;
        }
      }
      int& waited = group ? waited1 : waited0;
      if (req > waited) {
        waited = req;
        wait_for[i] = req;
        record_after[req] = 1;
      }
    }

    // 3. emit, with events from the rank's pool (free again once its wait is issued); a step's
    //    wait and record ride on its compute or group op.
    int nevents = 0;
    lowered_op gop, xop, cop;
    gop.code = op_code::group;
    gop.stream = xop.stream = stream_id::comm;
    cop.stream = stream_id::compute;
    for (int i = 0; i < ns; ++i) {
      const bool group = step_end[i] >= 0;
      const int t = group ? e_tick[step_ref[i]] : tick[step_ref[i]];
      int wait_ev = -1, record_ev = -1;
      if (wait_for[i] >= 0) {
        wait_ev = event_of[wait_for[i]];
        in_use[wait_ev] = 0;
      }
      if (record_after[i]) {
        record_ev = 0;
        while (record_ev < nevents && in_use[record_ev]) ++record_ev;
        if (record_ev == nevents) ++nevents;
        in_use[record_ev] = 1;
        event_of[i] = record_ev;
      }
      // (one object per op kind, only the fields that change written: cheapest in constant evaluation)
      if (group) {
        gop.wait_event = wait_ev;
        gop.record_event = record_ev;
        gop.tick = t;
        ops_out[nout++] = gop;
        xop.tick = t;
        for (int g = step_ref[i]; g < step_end[i]; ++g) {
          const int x = e_x[g];
          const bool sending = e_send[g] != 0;
          xop.code = sending ? op_code::send : op_code::recv;
          xop.what = x_pool[x] == 0 ? kind::F : kind::B;
          xop.stage = x_stage[x];
          xop.microbatch = x_mb[x];
          xop.peer = sending ? x_dst[x] : x_src[x];
          xop.comm = edge_comm[x_pool[x] == 0 ? x_stage[x] : x_stage[x] - 1];
          xop.slot = e_slot[g];
          ops_out[nout++] = xop;
        }
      } else {
        const int c = step_ref[i];
        const action& a = A[c];
        cop.what = a.what;
        cop.overlapped = a.overlapped;
        cop.stage = a.stage;
        cop.microbatch = a.microbatch;
        cop.slot = in_slot[c];
        cop.grad_slot = gin_slot[c];
        cop.out_slot = out_slot[c];
        cop.wait_event = wait_ev;
        cop.record_event = record_ev;
        cop.tick = t;
        ops_out[nout++] = cop;
      }
    }
    for (int ev = 0; ev < nevents; ++ev) in_use[ev] = 0;
    rr.events = nevents;
    out.begin.push_back(nout);
  }
  return out;
}

}  // namespace detail

/// Lowers a verified program. `tick` is check_program's lock-step tick per action.
constexpr lowered_program lower(program_view p, std::span<const int> tick, comm_policy policy = comm_policy::per_edge,
                                group_policy groups = group_policy::per_tick) {
  lowered_program out;
  lowered_program l = detail::lower_with(p, tick, policy, groups, [&](int count) {
    out.ops.resize(static_cast<std::size_t>(count));
    return out.ops.data();
  });
  l.ops = std::move(out.ops);
  return l;
}

}  // namespace pipetype
