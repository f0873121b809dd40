// pipetype/compile/lower.hpp — from a verified compute program to the ops an executor issues.
//
// Input: a program that passed check_program, and its lock-step ticks. Output: a
// lowered_program (lowered.hpp). The rules:
//
//   Transfers. Each stage-graph edge s→s+1 whose stages sit on different ranks carries the
//   activation of F(s,j) forward and the gradient of B/I(s+1,j) back. A tensor produced at tick t
//   is transferred at tick t+1 (send on the producer, receive on the consumer). When both stages
//   share a rank there is no transfer: the consumer reads the producer's slot (local hand-off).
//
//   Groups. Each rank issues, for every tick at which it sends or receives, one NCCL group with
//   all of that tick's transfers, ordered by (tensor kind, stage, microbatch) — the same order on
//   both ends — and then that tick's compute. Because every transfer's two ends are in the groups
//   of the same tick, a rank reaches its tick-t group after finishing ticks < t, whose groups
//   completed by induction: the program cannot deadlock under NCCL's blocking rendezvous, FIFO
//   per (communicator, peer) and grouped progress. verify_lowered re-proves this on the ops.
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
//   lowering inserts a record after the earlier op and a wait before the later one, unless that
//   stream has already waited past it. Events come from a per-rank pool; an event is reused once
//   its wait has been issued (CUDA waits on the record state at the time of the wait call).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/compile/verify.hpp"
#include "pipetype/core/program.hpp"

namespace pipetype {

namespace detail {

struct transfer {
  int tick;
  kind what;  // F: activation, B: gradient
  int stage;  // producing stage
  int mb;
  int src, dst;
  int comm;
  int src_slot, dst_slot;
};

struct interval {
  int alloc;  // position 2·tick (+1 for compute) of the op that first writes
  int free;   // position of the last op that uses it
  int id;     // which buffer (index into the caller's slot table)
};

/// Stable counting sort: the permutation that orders `keys` (each in [0, limit)) ascending.
constexpr std::vector<int> counting_order(const std::vector<int>& keys, int limit) {
  std::vector<int> start(static_cast<std::size_t>(limit) + 1, 0);
  int* st = start.data();
  const int* k = keys.data();
  const std::size_t n = keys.size();
  for (std::size_t i = 0; i < n; ++i) ++st[k[i] + 1];
  for (int i = 0; i < limit; ++i) st[i + 1] += st[i];
  std::vector<int> order(n, 0);
  int* o = order.data();
  for (std::size_t i = 0; i < n; ++i) o[st[k[i]]++] = static_cast<int>(i);
  return order;
}

/// Greedy interval colouring in allocation order (ties: in the order given). Writes slot[id];
/// returns the slot count. `limit` bounds the positions.
constexpr int assign_slots(const std::vector<interval>& iv, std::vector<int>& slot, int limit) {
  std::vector<int> keys(iv.size(), 0);
  for (std::size_t i = 0; i < iv.size(); ++i) keys[i] = iv[i].alloc;
  const std::vector<int> order = counting_order(keys, limit);
  std::vector<int> busy_until;  // per slot: free position of its current buffer
  const interval* v = iv.data();
  int* out = slot.data();
  for (const int i : order) {
    const interval& x = v[i];
    int chosen = -1;
    const int* b = busy_until.data();
    const int nb = static_cast<int>(busy_until.size());
    for (int s = 0; s < nb; ++s)
      if (b[s] < x.alloc) {
        chosen = s;
        break;
      }
    if (chosen < 0) {
      chosen = nb;
      busy_until.push_back(0);
    }
    busy_until[static_cast<std::size_t>(chosen)] = x.free;
    out[x.id] = chosen;
  }
  return static_cast<int>(busy_until.size());
}

}  // namespace detail

/// Lowers a verified program. `tick` is check_program's lock-step tick per action.
constexpr lowered_program lower(program_view p, std::span<const int> tick_span,
                                comm_policy policy = comm_policy::per_edge) {
  const int P = p.ranks, S = p.stages, m = p.microbatches;
  const int N = p.size();
  const int n = S * m;
  lowered_program out;
  out.ranks = P;
  out.policy = policy;
  const action* acts = p.actions.data();
  const int* tick = tick_span.data();
  const int* beg = p.begin.data();
  int T = 0;  // ticks
  for (int k = 0; k < N; ++k) T = tick[k] + 1 > T ? tick[k] + 1 : T;
  const int limit = 2 * T + 4;  // positions: 2·tick (group), 2·tick + 1 (compute)

  std::vector<int> owner_v(static_cast<std::size_t>(S), 0), rank_of_v(static_cast<std::size_t>(N), 0);
  int* owner = owner_v.data();
  int* rank_of = rank_of_v.data();
  for (int r = 0; r < P; ++r)
    for (int k = beg[r]; k < beg[r + 1]; ++k) {
      rank_of[k] = r;
      owner[acts[k].stage] = r;
    }
  // position of each action by kind and (stage, microbatch); G = the input-gradient action (B or I)
  std::vector<int> posF_v(static_cast<std::size_t>(n), -1), posG_v(static_cast<std::size_t>(n), -1),
      last_v(static_cast<std::size_t>(n), -1);
  int* posF = posF_v.data();
  int* posG = posG_v.data();
  int* last = last_v.data();  // last use of (s, j)'s input buffers: its B, or its W when split
  for (int k = 0; k < N; ++k) {
    const action& a = acts[k];
    const int q = a.stage * m + a.microbatch;
    const int ps = 2 * tick[k] + 1;
    if (a.what == kind::F)
      posF[q] = ps;
    else {
      if (a.what != kind::W) posG[q] = ps;
      if (ps > last[q]) last[q] = ps;
    }
  }

  // communicators
  std::vector<int> edge_comm_v(static_cast<std::size_t>(S), -1);
  int* edge_comm = edge_comm_v.data();
  if (policy == comm_policy::per_edge) {
    for (int s = 0; s + 1 < S; ++s) {
      const int a = owner[s], b = owner[s + 1];
      if (a == b) continue;
      edge_comm[s] = static_cast<int>(out.comms.size());
      out.comms.push_back({a < b ? a : b, a < b ? b : a, s});
    }
  } else {
    std::vector<int> pair_v(static_cast<std::size_t>(P * P), -1);
    int* pair = pair_v.data();
    for (int s = 0; s + 1 < S; ++s) {
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
      const int a = owner[s], b = owner[s + 1];
      if (a != b) edge_comm[s] = pair[(a < b ? a : b) * P + (a < b ? b : a)];
    }
  }

  // Buffers: for edge (s, j), s+1 < S: the activation of F(s,j) goes to stage s+1, the gradient of
  // G(s+1,j) to stage s. Buffer ids per pool: 2·q = the consumer's copy, 2·q+1 = the producer's
  // staging copy before a send. Transfers are made in (kind, stage, microbatch) order and then
  // stably ordered by tick, which gives both ends of every channel the same order.
  std::vector<std::vector<detail::interval>> iv_act(static_cast<std::size_t>(P)), iv_grad(static_cast<std::size_t>(P));
  std::vector<detail::transfer> made;
  for (int what = 0; what < 2; ++what)
    for (int s = 0; s + 1 < S; ++s) {
      const int ra = owner[s], rb = owner[s + 1];
      for (int j = 0; j < m; ++j) {
        const int q = s * m + j;
        const int id = 2 * q;
        if (what == 0) {  // activation: F(s,j) on ra → stage s+1 on rb
          const int pf = posF[q], use = last[q + m];
          if (ra == rb) {
            iv_act[static_cast<std::size_t>(ra)].push_back({pf, use, id});
          } else {
            const int t = (pf - 1) / 2 + 1;
            iv_act[static_cast<std::size_t>(ra)].push_back({pf, 2 * t, id + 1});
            iv_act[static_cast<std::size_t>(rb)].push_back({2 * t, use, id});
            made.push_back({t, kind::F, s, j, ra, rb, edge_comm[s], id + 1, id});
          }
        } else {  // gradient: G(s+1,j) on rb → stage s on ra
          const int pg = posG[q + m], use = last[q];
          if (ra == rb) {
            iv_grad[static_cast<std::size_t>(ra)].push_back({pg, use, id});
          } else {
            const int t = (pg - 1) / 2 + 1;
            iv_grad[static_cast<std::size_t>(rb)].push_back({pg, 2 * t, id + 1});
            iv_grad[static_cast<std::size_t>(ra)].push_back({2 * t, use, id});
            made.push_back({t, kind::B, s + 1, j, rb, ra, edge_comm[s], id + 1, id});
          }
        }
      }
    }
  std::vector<int> act_slot_v(static_cast<std::size_t>(2 * n + 2), -1),
      grad_slot_v(static_cast<std::size_t>(2 * n + 2), -1);
  out.resources.assign(static_cast<std::size_t>(P), rank_resources{});
  for (int r = 0; r < P; ++r) {
    rank_resources& res = out.resources[static_cast<std::size_t>(r)];
    res.activation_slots = detail::assign_slots(iv_act[static_cast<std::size_t>(r)], act_slot_v, limit);
    res.gradient_slots = detail::assign_slots(iv_grad[static_cast<std::size_t>(r)], grad_slot_v, limit);
  }
  const int* act_slot = act_slot_v.data();
  const int* grad_slot = grad_slot_v.data();
  std::vector<detail::transfer> xfers;
  {
    std::vector<int> keys(made.size(), 0);
    for (std::size_t i = 0; i < made.size(); ++i) keys[i] = made[i].tick;
    const std::vector<int> order = detail::counting_order(keys, T + 2);
    xfers.reserve(made.size());
    for (const int i : order) {
      detail::transfer x = made[static_cast<std::size_t>(i)];
      const int* pool_slot = x.what == kind::F ? act_slot : grad_slot;
      x.src_slot = pool_slot[x.src_slot];
      x.dst_slot = pool_slot[x.dst_slot];
      xfers.push_back(x);
    }
  }

  // per rank: its transfers in order
  std::vector<std::vector<int>> by_rank_xfer(static_cast<std::size_t>(P));
  for (std::size_t x = 0; x < xfers.size(); ++x) {
    by_rank_xfer[static_cast<std::size_t>(xfers[x].src)].push_back(static_cast<int>(x));
    by_rank_xfer[static_cast<std::size_t>(xfers[x].dst)].push_back(static_cast<int>(x));
  }
  out.begin.push_back(0);
  out.ops.reserve(static_cast<std::size_t>(N) + 3 * xfers.size());
  for (int r = 0; r < P; ++r) {
    rank_resources& res = out.resources[static_cast<std::size_t>(r)];
    // 1. the ops without events: per tick, its group (if any) then its compute
    std::vector<lowered_op> seq;
    seq.reserve(static_cast<std::size_t>(beg[r + 1] - beg[r]) * 4);
    const std::vector<int>& mine = by_rank_xfer[static_cast<std::size_t>(r)];
    const int* mx = mine.data();
    const int nx = static_cast<int>(mine.size());
    const detail::transfer* X = xfers.data();
    int xi = 0, k = beg[r];
    while (xi < nx || k < beg[r + 1]) {
      const int tx = xi < nx ? X[mx[xi]].tick : detail::never;
      const int tc = k < beg[r + 1] ? tick[k] : detail::never;
      if (tx <= tc) {
        lowered_op g;
        g.code = op_code::group_begin;
        g.stream = stream_id::comm;
        g.tick = tx;
        seq.push_back(g);
        for (; xi < nx && X[mx[xi]].tick == tx; ++xi) {
          const detail::transfer& x = X[mx[xi]];
          const bool sending = x.src == r;
          lowered_op o;
          o.code = sending ? op_code::send : op_code::recv;
          o.stream = stream_id::comm;
          o.what = x.what;
          o.stage = x.stage;
          o.microbatch = x.mb;
          o.peer = sending ? x.dst : x.src;
          o.comm = x.comm;
          o.slot = sending ? x.src_slot : x.dst_slot;
          o.tick = tx;
          seq.push_back(o);
          ++res.transfers;
        }
        g.code = op_code::group_end;
        seq.push_back(g);
        ++res.groups;
      } else {
        const action& a = acts[k];
        lowered_op o;
        o.stream = stream_id::compute;
        o.what = a.what;
        o.overlapped = a.overlapped;
        o.stage = a.stage;
        o.microbatch = a.microbatch;
        o.tick = tick[k];
        o.action = k;
        const int q = a.stage * m + a.microbatch;  // edge (s, j): this stage's output side
        const int qin = q - m;                     // edge (s−1, j): this stage's input side
        if (a.stage > 0) o.slot = act_slot[2 * qin];
        if (a.what == kind::F) {
          if (a.stage + 1 < S) o.out_slot = act_slot[2 * q + (owner[a.stage + 1] == r ? 0 : 1)];
        } else {
          if (a.stage + 1 < S) o.grad_slot = grad_slot[2 * q];
          if (a.what != kind::W && a.stage > 0) o.out_slot = grad_slot[2 * qin + (owner[a.stage - 1] == r ? 0 : 1)];
        }
        seq.push_back(o);
        ++k;
      }
    }

    // 2. which ops must wait for the other stream: hazards on the slots they touch
    const int ns = static_cast<int>(seq.size());
    lowered_op* sq = seq.data();
    std::vector<int> use_v(static_cast<std::size_t>(4 * (res.activation_slots + res.gradient_slots)), -1);
    int* use = use_v.data();  // per slot: [writer on stream 0, writer on 1, reader on 0, reader on 1]
    const int grad_base = 4 * res.activation_slots;
    std::vector<int> wait_for_v(static_cast<std::size_t>(ns), -1);
    std::vector<char> record_after_v(static_cast<std::size_t>(ns), 0);
    int* wait_for = wait_for_v.data();
    char* record_after = record_after_v.data();
    int waited[stream_count] = {-1, -1};
    auto touch = [&](int base, int slot, bool write, int s, int done_at, int& req) {
      if (slot < 0) return;
      int* u = use + base + 4 * slot;
      const int other = 1 - s;
      if (u[other] > req) req = u[other];
      if (write && u[2 + other] > req) req = u[2 + other];
      u[(write ? 0 : 2) + s] = done_at;
    };
    for (int i = 0; i < ns; ++i) {
      const lowered_op& o = sq[i];
      int req = -1, s = 0;
      if (o.code == op_code::group_begin) {
        s = 1;
        int e = i;
        while (sq[e].code != op_code::group_end) ++e;
        for (int j = i + 1; j < e; ++j)
          touch(sq[j].what == kind::F ? 0 : grad_base, sq[j].slot, sq[j].code == op_code::recv, 1, e, req);
      } else if (o.code == op_code::compute) {
        touch(0, o.slot, false, 0, i, req);
        touch(grad_base, o.grad_slot, false, 0, i, req);
        touch(o.what == kind::F ? 0 : grad_base, o.out_slot, true, 0, i, req);
      } else {
        continue;
      }
      if (req > waited[s]) {
        waited[s] = req;
        wait_for[i] = req;
        record_after[req] = 1;
      }
    }

    // 3. emit, with events from the rank's pool (free again once its wait is issued)
    std::vector<int> event_of_v(static_cast<std::size_t>(ns), -1);
    int* event_of = event_of_v.data();
    std::vector<char> in_use;
    for (int i = 0; i < ns; ++i) {
      if (wait_for[i] >= 0) {
        lowered_op w;
        w.code = op_code::wait;
        w.stream = sq[i].stream;
        w.event = event_of[wait_for[i]];
        w.tick = sq[i].tick;
        out.ops.push_back(w);
        in_use[static_cast<std::size_t>(w.event)] = 0;
      }
      out.ops.push_back(sq[i]);
      if (record_after[i]) {
        int e = 0;
        const int ne = static_cast<int>(in_use.size());
        while (e < ne && in_use[static_cast<std::size_t>(e)]) ++e;
        if (e == ne)
          in_use.push_back(1);
        else
          in_use[static_cast<std::size_t>(e)] = 1;
        lowered_op rec;
        rec.code = op_code::record;
        rec.stream = sq[i].stream;
        rec.event = e;
        rec.tick = sq[i].tick;
        event_of[i] = e;
        out.ops.push_back(rec);
      }
    }
    res.events = static_cast<int>(in_use.size());
    out.begin.push_back(static_cast<int>(out.ops.size()));
  }
  return out;
}

}  // namespace pipetype
