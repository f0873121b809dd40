// pipetype/compile/lower.hpp — from a verified compute program to the ops an executor issues.
//
// Input: a program that passed check_program, and its lock-step ticks. Output: a
// lowered_program (lowered.hpp). The rules:
//
//   Transfers. Each stage-graph edge u→v (s→s+1 within a chain's lane; a program's own edges
//   otherwise: program.hpp) whose stages sit on different ranks carries the activation of F(u,j)
//   forward and the gradient of B/I(v,j) back. A tensor produced at tick t is transferred at
//   tick t+1 (send on the producer, receive on the consumer). When both stages share a rank there
//   is no transfer: the consumer reads the producer's slot (local hand-off). A fan-out writes one
//   output that its local consumers read and each crossing edge sends (once per edge, the edge
//   in the op's `link`); a fan-in reads one slot per input, in edge order. A backward writes one
//   gradient per input edge, and a stage with several consumers gets one per consumer edge,
//   listed in edge order: the executor sums them in that order into the first before the
//   backward runs (lowered.hpp, op_slots), so the sum does not depend on the schedule.
//
//   Groups. Each rank issues, for every tick at which it sends or receives, one NCCL group with
//   all of that tick's transfers, ordered by (tensor kind, stage, microbatch) — the same order on
//   both ends — and then that tick's compute. Because every transfer's two ends are in the groups
//   of the same tick, a rank reaches its tick-t group after finishing ticks < t, whose groups
//   completed by induction: the program cannot deadlock under NCCL's blocking rendezvous, FIFO
//   per (communicator, peer) and grouped progress. verify_lowered re-proves this on the ops.
//   group_policy::per_peer splits a tick's group into one per peer, lowest peer first, or highest
//   first in a tick whose transfers read by the same tick's computes mostly come from above (a
//   chain's gradients; with none read at once, where most transfers go down): the group with a
//   rank's input then comes before the one that passes its output on. Every rank
//   then meets its (tick, rank pair) groups in one order, the lexicographic one or its reverse
//   per tick, and the same induction runs over (tick, pair); a compute waits only for the group
//   that carries its input. group_policy::automatic (the default) is per_peer for programs with
//   overlapped F&B pairs and per_tick otherwise (resolve()).
//
//   Communicators. comm_policy::per_edge (default): one per crossing edge; per_rank_pair: one per
//   pair of ranks that talk. Both orders are consistent by the rule above.
//
//   Slots. Every buffer lives in a slot of its rank's activation or gradient pool from the op
//   that writes it to its last reader (F's output until the consumer's B, or W when the
//   backward is split; a send's staging copy through its tick's compute, so that compute never
//   overwrites a slot its tick's group is still sending from and waits for the whole group,
//   often for another peer: on host threads that cost interleaved 1F1B 2 % of its step, and
//   avoiding it costs at most a slot or two per rank). Slots are assigned greedily in
//   issue order, taking the lowest slot whose last use has passed: optimal for intervals, so the
//   pool size is the true peak of live buffers; two heaps per pool make it O(n log n).
//
//   Streams and events. Compute runs on stream 0, groups on stream 1. Wherever an op touches a
//   slot last touched by the other stream (data arriving, data leaving, a slot being reused), the
//   earlier op gets a record_event and the later a wait_event, unless that stream has already
//   waited past it. Events come from a per-rank pool; an event is reused once its wait has been
//   issued (CUDA waits on the record state at the time of the wait call). Every op keeps its tick:
//   the certificate verify_lowered checks to prove completion in one pass.
//
// The passes, in order (each a function of its own below, tested in tests/compile/lower.test.cpp):
//   lower_communicators  the communicator of every crossing edge (comm_policy)
//   lower_transfers      every buffer as an interval of positions on one rank, every transfer
//                        with its tick, ends and buffers
//   assign_slots         the slot of every buffer (interval colouring) and of every compute op
//   order_ends           each rank's transfer ends in tick order, split into groups (group_policy)
//   lower_rank           per rank: groups and computes in tick order, their stream hazards as
//                        event waits and records from a pool, then the ops themselves
// Each pass works on flat arrays (struct of arrays in `scratch`): this runs inside make_plan's
// constant evaluation, where every function call and every std::vector element costs far more
// than the arithmetic around it, so a pass is one call over whole tables, never one per element.
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

/// A binary min-heap of `size` keys at h[0 ..]: add `key`.
constexpr void heap_push(long long* h, int& size, long long key) {
  int i = size++;
  while (i > 0 && h[(i - 1) / 2] > key) h[i] = h[(i - 1) / 2], i = (i - 1) / 2;
  h[i] = key;
}

/// The same heap: replace its least key by `key` (size > 0).
constexpr void heap_replace_top(long long* h, int size, long long key) {
  int i = 0;
  for (int c = 1; c < size; c = 2 * i + 1) {
    c += c + 1 < size && h[c + 1] < h[c] ? 1 : 0;
    if (h[c] >= key) break;
    h[i] = h[c], i = c;
  }
  h[i] = key;
}

/// The same heap: remove and return its least key (size > 0).
constexpr long long heap_pop(long long* h, int& size) {
  const long long top = h[0], key = h[--size];
  int i = 0;
  for (int c = 1; c < size; c = 2 * i + 1) {
    c += c + 1 < size && h[c + 1] < h[c] ? 1 : 0;
    if (h[c] >= key) break;
    h[i] = h[c], i = c;
  }
  if (size > 0) h[i] = key;
  return top;
}

/// What every pass reads: the program, its ticks and the positions they give each action
/// (2·tick for the tick's groups, 2·tick + 1 for its compute).
struct lowering_input {
  program_view p;
  const action* A = nullptr;
  const int* tick = nullptr;
  const int* beg = nullptr;
  int P = 0, S = 0, m = 0, N = 0, n = 0;  // ranks, stages, microbatches, actions, S·m
  int T = 0;                              // ticks
  const int* owner = nullptr;             // [S] the rank of each stage
  const int* posF = nullptr;              // [n] the position of F(s,j), by s·m + j
  const int* posG = nullptr;              // [n] of its input-gradient action (B or I)
  const int* last = nullptr;              // [n] of the last use of its input buffers (B, or W)
  // The stage graph's edges, numbered e: a chain's edge s → s+1 is e = s (from = -1 where s ends
  // a lane: no edge); a program with edges numbers them as it lists them. pred/succ list each
  // stage's edges in edge order (CSR).
  int E = 0;
  const int* from = nullptr;        // [E]
  const int* to = nullptr;          // [E]
  const int* pred_begin = nullptr;  // [S + 1]
  const int* pred = nullptr;        // [E] edge indices
  const int* succ_begin = nullptr;  // [S + 1]
  const int* succ = nullptr;        // [E]
  int lane_mb = 0;                  // microbatches per lane when they are routed by lane, else 0
  int lane_length = 1;              // stages per lane
  constexpr int limit() const noexcept { return 2 * T + 4; }
  /// The microbatches that run through stage s: [first_mb(s), end_mb(s)) (program_view::runs_through).
  constexpr int first_mb(int s) const noexcept { return lane_mb > 0 ? s / lane_length * lane_mb : 0; }
  constexpr int end_mb(int s) const noexcept { return lane_mb > 0 ? (s / lane_length + 1) * lane_mb : m; }
};

/// Pass 1: the communicator of each crossing edge e (`edge_comm[e]`, -1 when both stages share a
/// rank), appended to `comms`.
constexpr scratch<int> lower_communicators(const lowering_input& in, comm_policy policy,
                                           std::vector<comm_desc>& comms) {
  const int P = in.P, E = in.E;
  const int* owner = in.owner;
  const bool graph = in.p.has_edges();
  scratch<int> edge_comm_v(E + 1, -1);
  int* edge_comm = edge_comm_v.data();
  if (policy == comm_policy::per_edge) {
    for (int e = 0; e < E; ++e) {
      if (in.from[e] < 0) continue;  // no edge between two lanes
      const int a = owner[in.from[e]], b = owner[in.to[e]];
      if (a == b) continue;
      edge_comm[e] = static_cast<int>(comms.size());
      comms.push_back({a < b ? a : b, a < b ? b : a, in.from[e], graph ? e : -1});
    }
  } else {
    scratch<int> pair_v(P * P, -1);
    int* pair = pair_v.data();
    for (int e = 0; e < E; ++e) {
      if (in.from[e] < 0) continue;
      const int a = owner[in.from[e]], b = owner[in.to[e]];
      if (a != b) pair[(a < b ? a : b) * P + (a < b ? b : a)] = 0;
    }
    for (int a = 0; a < P; ++a)
      for (int b = a + 1; b < P; ++b)
        if (pair[a * P + b] == 0) {
          pair[a * P + b] = static_cast<int>(comms.size());
          comms.push_back({a, b, -1});
        }
    for (int e = 0; e < E; ++e) {
      if (in.from[e] < 0) continue;
      const int a = owner[in.from[e]], b = owner[in.to[e]];
      if (a != b) edge_comm[e] = pair[(a < b ? a : b) * P + (a < b ? b : a)];
    }
  }
  return edge_comm_v;
}

/// Where passes 2–4 write the tables pass 5 reads, when the caller gives room for them
/// (make_plan: arrays of its own, so that pass 5 runs in a constant evaluation of its own with no
/// copy); a null pointer, or too little room, and the pass uses its own.
struct pass_storage {
  int* x = nullptr;  // transfer_table's transfers: 9 fields of max_x
  int x_size = 0;
  int* compute = nullptr;  // slot_table::compute: 3N
  int compute_size = 0;
  int* ends = nullptr;       // end_table's x, tick, slot, peer: end_stride each
  char* send = nullptr;      // end_table::send: end_stride
  int* end_begin = nullptr;  // end_table::rank_begin: P + 1
  int end_stride = 0;
};

/// Pass 2's result. Buffers, by pool and id (q = s·m + j for a stage's output, q = e·m + j for
/// an edge's copy): pool 0 (activations) holds the output of F(s,j) at 2q + 1 on the stage's
/// rank — what every local consumer reads and every crossing edge sends from — and, per crossing
/// edge e, the consumer's received copy at 2q; pool 1 (gradients) holds per edge e the gradient
/// G(to, j) gives the producer: 2q on the producer's rank (received, or written there when both
/// stages share it), 2q + 1 its staging copy on the consumer's rank before a send. Each buffer is
/// an interval [alloc, free] of positions on one rank. Transfers are listed in (kind, stage,
/// microbatch, edge) order.
struct transfer_table {
  scratch<int> iv;  // struct of arrays, max_iv each: rank, alloc, free, pool, id
  scratch<int> x;   // struct of arrays, max_x each: tick, pool, stage, mb, src, dst, src id, dst id, edge
  int max_iv = 0, niv = 0, max_x = 0, nx = 0;
  int* xp = nullptr;  // x's data, or the caller's (pass_storage)
  constexpr const int* iv_field(int f) const { return iv.data() + f * max_iv; }
  constexpr const int* x_field(int f) const { return xp + f * max_x; }
  enum iv_fields { iv_rank, iv_alloc, iv_free, iv_pool, iv_id };
  enum x_fields { x_tick, x_pool, x_stage, x_mb, x_src, x_dst, x_sid, x_did, x_edge };
};

/// Pass 2: every buffer and every transfer. A tensor produced at tick t crosses at tick t + 1.
constexpr transfer_table lower_transfers(const lowering_input& in, const pass_storage& store = {}) {
  const int S = in.S, m = in.m, n = in.n, E = in.E;
  const int* owner = in.owner;
  const bool given = store.x != nullptr && store.x_size >= 9 * (2 * E * m + 1);
  transfer_table tt{scratch<int>(5 * (n + 3 * E * m + 1), unset),
                    scratch<int>(given ? 0 : 9 * (2 * E * m + 1), unset),
                    n + 3 * E * m + 1,
                    0,
                    2 * E * m + 1,
                    0};
  tt.xp = given ? store.x : tt.x.data();
  const int max_iv = tt.max_iv, max_x = tt.max_x;
  int* iv_rank = tt.iv.data();
  int* iv_alloc = iv_rank + max_iv;
  int* iv_free = iv_rank + 2 * max_iv;
  int* iv_pool = iv_rank + 3 * max_iv;
  int* iv_id = iv_rank + 4 * max_iv;
  int* x_tick = tt.xp;
  int* x_pool = x_tick + max_x;
  int* x_stage = x_tick + 2 * max_x;
  int* x_mb = x_tick + 3 * max_x;
  int* x_src = x_tick + 4 * max_x;
  int* x_dst = x_tick + 5 * max_x;
  int* x_sid = x_tick + 6 * max_x;
  int* x_did = x_tick + 7 * max_x;
  int* x_edge = x_tick + 8 * max_x;
  int niv = 0, nx = 0;
  // activations: each output, then the copy each crossing edge receives
  for (int s = 0; s < S; ++s) {
    const int sb = in.succ_begin[s], se = in.succ_begin[s + 1];
    if (sb == se) continue;  // a loss (or a lane's last stage): no output
    const int from = owner[s];
    // (Loop bodies kept to few statements: clang's constexpr step limit counts statements.)
    const int j0 = in.first_mb(s), j1 = in.end_mb(s);
    for (int j = j0; j < j1; ++j) {
      // transfer tick: the one after the producer's; a send's output lives through tick t's
      // compute (2t + 1). `out`: the output's interval, its end known once every consumer is seen
      const int q = s * m + j, made = in.posF[q], t = (made - 1) / 2 + 1, out = niv++;
      int free = made;
      for (int k = sb; k < se; ++k) {
        const int e = in.succ[k], c = in.to[e], to = owner[c], until = to == from ? in.last[c * m + j] : 2 * t + 1,
                  qe = e * m + j;
        free = until > free ? until : free;
        if (to != from)
          iv_rank[niv] = to, iv_alloc[niv] = 2 * t, iv_free[niv] = in.last[c * m + j], iv_pool[niv] = 0,
          iv_id[niv] = 2 * qe, ++niv, x_tick[nx] = t, x_pool[nx] = 0, x_stage[nx] = s, x_mb[nx] = j, x_edge[nx] = e,
          x_src[nx] = from, x_dst[nx] = to, x_sid[nx] = 2 * q + 1, x_did[nx] = 2 * qe, ++nx;
      }
      iv_rank[out] = from, iv_alloc[out] = made, iv_free[out] = free, iv_pool[out] = 0, iv_id[out] = 2 * q + 1;
    }
  }
  // gradients: per edge, from its consumer's backward to its producer's
  for (int e = 0; e < E; ++e) {
    const int u = in.from[e];
    if (u < 0) continue;
    const int c = in.to[e];
    const int from = owner[c], to = owner[u];
    const int j0 = in.first_mb(u), j1 = in.end_mb(u);
    for (int j = j0; j < j1; ++j) {
      const int q = e * m + j, made = in.posG[c * m + j], use = in.last[u * m + j], t = (made - 1) / 2 + 1;
      if (from == to)
        iv_rank[niv] = from, iv_alloc[niv] = made, iv_free[niv] = use, iv_pool[niv] = 1, iv_id[niv] = 2 * q, ++niv;
      else
        iv_rank[niv] = from, iv_alloc[niv] = made, iv_free[niv] = 2 * t + 1, iv_pool[niv] = 1, iv_id[niv] = 2 * q + 1,
        ++niv, iv_rank[niv] = to, iv_alloc[niv] = 2 * t, iv_free[niv] = use, iv_pool[niv] = 1, iv_id[niv] = 2 * q,
        ++niv, x_tick[nx] = t, x_pool[nx] = 1, x_stage[nx] = c, x_mb[nx] = j, x_edge[nx] = e, x_src[nx] = from,
        x_dst[nx] = to, x_sid[nx] = 2 * q + 1, x_did[nx] = 2 * q, ++nx;
    }
  }
  tt.niv = niv;
  tt.nx = nx;
  return tt;
}

/// Pass 3's result: the slot of every buffer, by pool · stride + id, and of every compute op.
struct slot_table {
  scratch<int> of_buffer;  // [2 · stride]
  scratch<int> own;        // compute's room, unless the caller gave it (pass_storage)
  int* compute = nullptr;  // [3N]: input, incoming gradient, output per action (-1: none)
  scratch<int> link;       // [N] with edges: the action's list in `lists` (-1: its three fields say it)
  std::vector<int> lists;  // lowered_view::slot_lists
  int stride = 0;          // 2 · max(S, E) · m + 2: the gradient pool's offset in of_buffer
  constexpr int buffer(int pool_kind, int id) const { return of_buffer[pool_kind * stride + id]; }
};

/// Pass 3: slots. Greedy interval colouring per (rank, pool) in allocation order, reusing a slot
/// only after its last use — optimal for intervals, so a pool's size is its peak of live buffers
/// (written to `res[r].activation_slots` / `gradient_slots`). Then each compute op's slots: one
/// per list in its three fields, or (several inputs, gradients or outputs) a list in edge order.
constexpr slot_table assign_slots(const lowering_input& in, const transfer_table& tt, rank_resources* res,
                                  const pass_storage& store = {}) {
  const int P = in.P, N = in.N, m = in.m;
  const int width_q = (in.S > in.E ? in.S : in.E) * m;
  const bool graph = in.p.has_edges();
  const bool given = store.compute != nullptr && store.compute_size >= 3 * N;
  slot_table st{scratch<int>(2 * (2 * width_q + 2), unset),
                scratch<int>(given ? 0 : 3 * N, unset),
                nullptr,
                scratch<int>(graph ? N : 1, -1),
                {},
                2 * width_q + 2};
  st.compute = given ? store.compute : st.own.data();
  for (int i = 0, *cp = st.compute; i < 3 * N; ++i) cp[i] = -1;
  int* slot_of = st.of_buffer.data();
  const int niv = tt.niv;
  const int* iv_rank = tt.iv_field(transfer_table::iv_rank);
  const int* iv_alloc = tt.iv_field(transfer_table::iv_alloc);
  const int* iv_free = tt.iv_field(transfer_table::iv_free);
  const int* iv_pool = tt.iv_field(transfer_table::iv_pool);
  const int* iv_id = tt.iv_field(transfer_table::iv_id);
  {
    // Intervals in allocation order (a counting sort over positions), each coloured within its
    // (rank, pool) group g. Group g keeps two binary min-heaps in its region [base[g], base[g+1])
    // of two arrays: `busy` holds (last use, slot) of its slots in use, `idle` the slots free
    // again. Positions only grow, so a slot whose last use precedes the current allocation stays
    // free until it is taken: popping those into `idle` and taking its least keeps the greedy
    // choice (the lowest free slot) in O(log n) per interval instead of a scan of every slot.
    const scratch<int> order_v = counting_order(iv_alloc, niv, in.limit());
    const int* order = order_v.data();
    scratch<int> base_v(2 * P + 1, 0), nslots_v(2 * P, 0), nbusy_v(2 * P, 0), nidle_v(2 * P, 0);
    scratch<long long> busy_v(niv + 1, 0), idle_v(niv + 1, 0);
    int* base = base_v.data();
    int* nslots = nslots_v.data();
    int* nbusy = nbusy_v.data();
    int* nidle = nidle_v.data();
    const long long width = niv + 1;  // busy keys: last use · width + slot
    for (int i = 0; i < niv; ++i) ++base[iv_rank[i] * 2 + iv_pool[i] + 1];
    for (int g = 0; g < 2 * P; ++g) base[g + 1] += base[g];
    long long* const busy0 = busy_v.data();
    long long* const idle0 = idle_v.data();
    for (int o = 0; o < niv; ++o) {
      const int i = order[o], g = iv_rank[i] * 2 + iv_pool[i];
      long long *busy = busy0 + base[g], *idle = idle0 + base[g];
      const int nb = nbusy[g];
      if (nidle[g] == 0 && nb > 0 && busy[0] / width < iv_alloc[i] &&
          (nb == 1 || (busy[1] / width >= iv_alloc[i] && (nb == 2 || busy[2] / width >= iv_alloc[i])))) {
        // the common case: exactly one slot free again and none idle, so it is the one taken
        const int chosen = static_cast<int>(busy[0] % width);
        heap_replace_top(busy, nb, iv_free[i] * width + chosen), slot_of[iv_pool[i] * st.stride + iv_id[i]] = chosen;
        continue;
      }
      while (nbusy[g] > 0 && busy[0] / width < iv_alloc[i]) heap_push(idle, nidle[g], heap_pop(busy, nbusy[g]) % width);
      const int chosen = nidle[g] > 0 ? static_cast<int>(heap_pop(idle, nidle[g])) : nslots[g]++;
      heap_push(busy, nbusy[g], iv_free[i] * width + chosen), slot_of[iv_pool[i] * st.stride + iv_id[i]] = chosen;
    }
    for (int r = 0; r < P; ++r) {
      res[r].activation_slots = nslots[2 * r];
      res[r].gradient_slots = nslots[2 * r + 1];
    }
  }
  const int* act_slot = slot_of;
  const int* grad_slot = slot_of + st.stride;
  int* in_slot = st.compute;
  int* gin_slot = in_slot + N;
  int* out_slot = in_slot + 2 * N;
  const action* A = in.A;
  const int* from = in.from;
  for (int r = 0; r < P; ++r)
    for (int k = in.beg[r]; k < in.beg[r + 1]; ++k) {
      const action a = A[k];
      const int s = a.stage, j = a.microbatch, pb = in.pred_begin[s], pe = in.pred_begin[s + 1], sb = in.succ_begin[s],
                se = in.succ_begin[s + 1], nin = pe - pb, ngrad = a.what == kind::F ? 0 : se - sb,
                nout = a.what == kind::F   ? (se > sb ? 1 : 0)
                       : a.what == kind::W ? 0
                                           : pe - pb;
      // an input read over edge e (u → s): u's output when u is here, else e's received copy; the
      // gradient a backward writes for e: where the producer reads it, or its staging copy
      if (nin <= 1 && ngrad <= 1 && nout <= 1) {  // (written out: a chain's every action comes here)
        const int e = nin == 1 ? in.pred[pb] : -1;
        const bool here = e >= 0 && in.owner[from[e]] == r;
        in_slot[k] = nin == 1 ? (here ? act_slot[2 * (from[e] * m + j) + 1] : act_slot[2 * (e * m + j)]) : in_slot[k],
        gin_slot[k] = ngrad == 1 ? grad_slot[2 * (in.succ[sb] * m + j)] : gin_slot[k],
        out_slot[k] = nout != 1           ? out_slot[k]
                      : a.what == kind::F ? act_slot[2 * (s * m + j) + 1]
                                          : grad_slot[2 * (e * m + j) + (here ? 0 : 1)];
        continue;
      }
      const auto input = [&](int e) {
        return in.owner[from[e]] == r ? act_slot[2 * (from[e] * m + j) + 1] : act_slot[2 * (e * m + j)];
      };
      const auto grad_out = [&](int e) { return grad_slot[2 * (e * m + j) + (in.owner[from[e]] == r ? 0 : 1)]; };
      st.link[k] = static_cast<int>(st.lists.size());
      st.lists.push_back(nin);
      st.lists.push_back(ngrad);
      st.lists.push_back(nout);
      for (int i = pb; i < pe; ++i) st.lists.push_back(input(in.pred[i]));
      for (int i = 0; i < ngrad; ++i) st.lists.push_back(grad_slot[2 * (in.succ[sb + i] * m + j)]);
      if (a.what == kind::F && nout == 1) st.lists.push_back(act_slot[2 * (s * m + j) + 1]);
      if (a.what != kind::F)
        for (int i = 0; i < nout; ++i) st.lists.push_back(grad_out(in.pred[pb + i]));
    }
  return st;
}

/// Pass 4's result: every transfer end, rank by rank and within a rank in issue order.
struct end_table {
  scratch<int> own;  // the fields' room, unless the caller gave it (pass_storage)
  scratch<char> own_send;
  int* rank_begin = nullptr;  // [P + 1]: rank r's ends are [rank_begin[r], rank_begin[r + 1])
  int* x = nullptr;           // its transfer
  int* tick = nullptr;        // its tick
  int* slot = nullptr;        // its buffer's slot
  char* send = nullptr;       // 1: the send end, 0: the receive
  int* peer = nullptr;        // the rank on the other end (per_peer), or 0 (per_tick: one group a tick)
  int stride = 0;             // x, tick, slot and peer are one block: tick = x + stride, and so on
};

/// Pass 4: each rank's transfer ends in tick order (a stable sort of the transfers by tick, then
/// of their two ends by rank, so both ends of a channel see its transfers in one order), then
/// per group_policy: per_peer orders each (rank, tick) by peer, stably — one group per peer,
/// lowest peer first, or highest first where the tick's vote says so (below); every rank uses
/// the tick's one direction, so all take their (tick, rank pair) groups in one global order;
/// per_tick counts every end as the same "peer", so each tick keeps one group.
constexpr end_table order_ends(const lowering_input& in, const transfer_table& tt, const slot_table& st,
                               group_policy groups, const pass_storage& store = {}) {
  const int P = in.P, nx = tt.nx;
  const int* x_tick = tt.x_field(transfer_table::x_tick);
  const int* x_pool = tt.x_field(transfer_table::x_pool);
  const int* x_src = tt.x_field(transfer_table::x_src);
  const int* x_dst = tt.x_field(transfer_table::x_dst);
  const int* x_sid = tt.x_field(transfer_table::x_sid);
  const int* x_did = tt.x_field(transfer_table::x_did);
  const scratch<int> by_tick_v = counting_order(x_tick, nx, in.T + 2);
  const int* by_tick = by_tick_v.data();
  scratch<int> end_rank_v(2 * nx, unset);
  scratch<int> end_v(2 * nx, unset);
  int* end_rank = end_rank_v.data();
  int* end_of = end_v.data();
  for (int o = 0; o < nx; ++o) {
    const int x = by_tick[o];
    end_of[2 * o] = 2 * x, end_rank[2 * o] = x_src[x], end_of[2 * o + 1] = 2 * x + 1, end_rank[2 * o + 1] = x_dst[x];
  }
  const scratch<int> by_rank_v = counting_order(end_rank, 2 * nx, P);
  const int* by_rank = by_rank_v.data();
  const bool given = store.ends != nullptr && store.end_stride >= 2 * nx + 2;
  const int stride = given ? store.end_stride : 2 * nx + 2;
  end_table et{scratch<int>(given ? 0 : 4 * stride + P + 1, unset), scratch<char>(given ? 0 : stride, unset)};
  int* const room = given ? store.ends : et.own.data();
  et.x = room, et.tick = room + stride, et.slot = room + 2 * stride, et.peer = room + 3 * stride, et.stride = stride,
  et.rank_begin = given ? store.end_begin : room + 4 * stride, et.send = given ? store.send : et.own_send.data();
  int* rank_begin = et.rank_begin;
  for (int r = 0; r <= P; ++r) rank_begin[r] = 0;
  for (int e = 0; e < 2 * nx; ++e) ++rank_begin[end_rank[e] + 1];
  for (int r = 0; r < P; ++r) rank_begin[r + 1] += rank_begin[r];
  int* e_x = et.x;
  int* e_tick = et.tick;
  int* e_slot = et.slot;
  char* e_send = et.send;
  int* e_peer = et.peer;
  const int* slot_of = st.of_buffer.data();
  for (int e = 0; e < 2 * nx; ++e) {
    const int en = end_of[by_rank[e]], x = en / 2;
    e_x[e] = x, e_send[e] = (en & 1) == 0 ? 1 : 0, e_tick[e] = x_tick[x], e_peer[e] = 0,
    e_slot[e] = slot_of[x_pool[x] * st.stride + ((en & 1) == 0 ? x_sid[x] : x_did[x])];
  }
  scratch<int> key_v(2 * nx + 2, 0);
  int* key = key_v.data();
  if (groups == group_policy::per_peer) {
    // per tick, a vote on its peer order: each transfer that a compute of the same tick reads
    // wants its sender's group first (a sender above the receiver: highest peer first); where no
    // such transfer votes, the direction most transfers take (mostly down: highest first)
    scratch<int> vote_v(2 * (in.T + 3), 0);
    int* vote = vote_v.data();
    int* lean = vote + in.T + 3;
    const int* x_edge = tt.x_field(transfer_table::x_edge);
    const int* x_mb = tt.x_field(transfer_table::x_mb);
    for (int x = 0; x < nx; ++x) {
      const int down = x_src[x] > x_dst[x] ? 1 : -1;
      lean[x_tick[x]] += down;
      const int e = x_edge[x], j = x_mb[x];
      const int use = x_pool[x] == 0 ? in.posF[in.to[e] * in.m + j] : in.posG[in.from[e] * in.m + j];
      if ((use - 1) / 2 == x_tick[x]) vote[x_tick[x]] += down;
    }
    for (int t = 0; t < in.T + 3; ++t)
      if (vote[t] == 0) vote[t] = lean[t];
    for (int e = 0; e < 2 * nx; ++e) {
      e_peer[e] = e_send[e] ? x_dst[e_x[e]] : x_src[e_x[e]];
      key[e] = vote[e_tick[e]] > 0 ? -e_peer[e] : e_peer[e];
    }
  }
  for (int r = 0; r < P; ++r)
    for (int e = rank_begin[r] + 1; e < rank_begin[r + 1]; ++e)
      for (int f = e; f > rank_begin[r] && e_tick[f] == e_tick[f - 1] && key[f] < key[f - 1]; --f) {
        const int tx = e_x[f], ts = e_slot[f], tp = e_peer[f], tk = key[f];
        const char tsend = e_send[f];
        e_x[f] = e_x[f - 1], e_slot[f] = e_slot[f - 1], e_send[f] = e_send[f - 1], e_peer[f] = e_peer[f - 1];
        key[f] = key[f - 1];
        e_x[f - 1] = tx, e_slot[f - 1] = ts, e_send[f - 1] = tsend, e_peer[f - 1] = tp, key[f - 1] = tk;
      }
  return et;
}

/// The op count: computes, a send and a recv per transfer, and one group op per (rank, tick,
/// peer) with transfers.
constexpr int count_ops(const lowering_input& in, const transfer_table& tt, const end_table& et) {
  int nops = in.N + 2 * tt.nx;
  const int* rb = et.rank_begin;
  const int* e_tick = et.tick;
  const int* e_peer = et.peer;
  for (int r = 0; r < in.P; ++r)
    for (int e = rb[r]; e < rb[r + 1]; ++e)
      if (e == rb[r] || e_tick[e] != e_tick[e - 1] || e_peer[e] != e_peer[e - 1]) ++nops;
  return nops;
}

/// What pass 5 reads, as flat tables: the program, and the tables of passes 1–4 (rank_input_of).
/// Three are blocks of fields: `x` the transfers' nine fields (transfer_table::x_fields) of MX
/// each, `compute` each action's three slots (slot_table::compute, N each), `ends` the ends' x,
/// tick, slot and peer (end_table, EX each). make_plan's pass 5 reads the same tables as arrays,
/// from its frozen copy of them (plan.hpp, static_rank_input): lower_rank_in indexes either.
struct rank_input {
  const action* A = nullptr;
  const int* tick = nullptr;  // [N]
  const int* beg = nullptr;   // [P + 1]
  int P = 0, N = 0, MX = 0, EX = 0;
  bool graph = false;
  const int* x = nullptr;
  const int* edge_comm = nullptr;  // per edge
  const int* compute = nullptr;
  const int* link = nullptr;        // [N] slot_table::link (with edges)
  const int* lists = nullptr;       // slot_table::lists
  const int* rank_begin = nullptr;  // [P + 1] end_table::rank_begin
  const int* ends = nullptr;
  const char* e_send = nullptr;  // end_table::send
};

constexpr rank_input rank_input_of(const lowering_input& in, const transfer_table& tt, const slot_table& st,
                                   const end_table& et, const int* edge_comm) {
  rank_input v;
  v.A = in.A, v.tick = in.tick, v.beg = in.beg, v.P = in.P, v.N = in.N, v.graph = in.p.has_edges();
  v.x = tt.xp, v.MX = tt.max_x, v.edge_comm = edge_comm, v.compute = st.compute, v.link = st.link.data(),
  v.lists = st.lists.data(), v.rank_begin = et.rank_begin, v.ends = et.x, v.EX = et.stride, v.e_send = et.send;
  return v;
}

/// One step of pass 5: a compute op, or a group with its transfer ends.
struct rank_step {
  int ref;            // compute: action index; group: first end
  int end;            // group: one past its last end; compute: -1
  int tick;           // its tick
  int wait_for;       // the step it waits for (-1: none)
  int event;          // the event it records (when record_after)
  int in, grad, out;  // compute: its slots (slot_table::compute)
  bool record_after;
};

/// Per-rank work space of pass 5, sized once for the largest rank: steps, each slot's last uses
/// (use[4·slot + {writer on stream 0, writer on 1, reader on 0, reader on 1}], the activation
/// pool's slots, then the gradient pool's) and the events in use.
struct rank_scratch {
  scratch<rank_step> own_steps;
  scratch<int> own_use;
  scratch<char> own_in_use;
  rank_step* steps = nullptr;
  int* use = nullptr;
  char* in_use = nullptr;
};

/// The same as fixed arrays (make_plan): at most `Steps` steps and `Slots` slots on a rank.
template <int Steps, int Slots>
struct rank_scratch_fixed {
  rank_step steps[Steps + 1];
  int use[4 * Slots + 4];
  char in_use[Steps + 1];
};

constexpr rank_scratch rank_scratch_for(const rank_input& v, const rank_resources* res) {
  int max_steps = 0, max_slots = 0;
  const int* rb = v.rank_begin;
  for (int r = 0; r < v.P; ++r) {
    const int steps = (v.beg[r + 1] - v.beg[r]) + (rb[r + 1] - rb[r]),
              sl = res[r].activation_slots + res[r].gradient_slots;
    max_steps = steps > max_steps ? steps : max_steps, max_slots = sl > max_slots ? sl : max_slots;
  }
  rank_scratch ws{scratch<rank_step>(max_steps + 1, unset), scratch<int>(4 * max_slots + 4, unset),
                  scratch<char>(max_steps + 1, unset)};
  ws.steps = ws.own_steps.data(), ws.use = ws.own_use.data(), ws.in_use = ws.own_in_use.data();
  return ws;
}

constexpr rank_scratch rank_scratch_for(const lowering_input& in, const end_table& et, const rank_resources* res) {
  rank_input v;
  v.beg = in.beg, v.P = in.P, v.rank_begin = et.rank_begin;
  return rank_scratch_for(v, res);
}

/// Pass 5, for rank r: (1) per tick, its groups (one per peer, if any) then its compute; (2)
/// which steps wait for the other stream — hazards on the slots they touch (a group's transfers
/// complete with the group, so its step index stands for the whole group); (3) the ops, with
/// events from the rank's pool (free again once its wait is issued), a step's wait and record
/// riding on its compute or group op. Writes ops_out[nout ..] and returns the new nout. `In`,
/// `Scratch` and `Out` hold pointers (rank_input, rank_scratch, lowered_op*) or arrays; every
/// table is read by plain indexing, the cheapest form for the constant evaluator.
template <class In, class Scratch, class Out>
constexpr int lower_rank_in(const In& v, int r, Scratch& ws, rank_resources& rr, Out& ops_out, int nout) {
  const auto& A = v.A;
  const auto& tick = v.tick;
  const auto& x = v.x;
  const auto& edge_comm = v.edge_comm;
  const auto& compute = v.compute;
  const auto& link = v.link;
  const auto& lists = v.lists;
  const auto& ends = v.ends;
  const auto& e_send = v.e_send;
  auto& steps = ws.steps;
  auto& use = ws.use;
  auto& in_use = ws.in_use;
  const bool graph = v.graph;
  const int N = v.N, MX = v.MX, EX = v.EX;
  // the fields' offsets in their blocks
  const int xo_pool = transfer_table::x_pool * MX, xo_stage = transfer_table::x_stage * MX,
            xo_mb = transfer_table::x_mb * MX, xo_src = transfer_table::x_src * MX, xo_dst = transfer_table::x_dst * MX,
            xo_edge = transfer_table::x_edge * MX, eo_tick = EX, eo_slot = 2 * EX, eo_peer = 3 * EX;

  // 1. steps (loop bodies kept to few statements: clang's constexpr step limit counts statements)
  int ns = 0, transfers = 0, groups = 0;
  int e = v.rank_begin[r];
  const int eend = v.rank_begin[r + 1];
  int k = v.beg[r];
  const int kend = v.beg[r + 1];
  while (e < eend || k < kend) {
    const int tx = e < eend ? ends[eo_tick + e] : never, tc = k < kend ? tick[k] : never,
              peer = e < eend ? ends[eo_peer + e] : 0, first = e;
    if (tx <= tc) {
      while (e < eend && ends[eo_tick + e] == tx && ends[eo_peer + e] == peer) ++e;
      steps[ns++] = {first, e, tx, -1, -1, -1, -1, -1, false}, transfers += e - first, ++groups;
    } else {
      steps[ns++] = {k, -1, tc, -1, -1, compute[k], compute[N + k], compute[2 * N + k], false}, ++k;
    }
  }
  rr.transfers += transfers, rr.groups += groups;

  // 2. hazards
  const int grad_base = 4 * rr.activation_slots;
  for (int i = 0; i < 4 * (rr.activation_slots + rr.gradient_slots); ++i) use[i] = -1;
  int waited[2] = {-1, -1};
  for (int i = 0; i < ns; ++i) {
    const rank_step step = steps[i];  // a copy: the cheapest read in constant evaluation
    const bool group = step.end >= 0;
    const int sw = group ? 1 : 0, other = 1 - sw;
    int req = -1;
    if (group) {
      for (int g = step.ref; g < step.end; ++g) {
        const bool sending = e_send[g] != 0;
        const int u = (x[xo_pool + ends[g]] == 0 ? 0 : grad_base) + 4 * ends[eo_slot + g];
        req = use[u + other] > req ? use[u + other] : req,
        req = !sending && use[u + 2 + other] > req ? use[u + 2 + other] : req, use[u + (sending ? 2 : 0) + sw] = i;
      }
    } else if (graph && link[step.ref] >= 0) {  // a list: reads, then the in-place sum, then writes
      const int c = step.ref, l = link[c];
      const int ni = lists[l], ng = lists[l + 1], no = lists[l + 2];
      for (int h = 0; h < ni + ng + no; ++h) {
        const bool grad = h >= ni, out = h >= ni + ng;
        const bool write = out || (h == ni && sums_into_first(A[c].what, static_cast<std::size_t>(ng)));
        const int u = ((out ? A[c].what != kind::F : grad) ? grad_base : 0) + 4 * lists[l + 3 + h];
        req = use[u + other] > req ? use[u + other] : req,
        req = write && use[u + 2 + other] > req ? use[u + 2 + other] : req, use[u + (write ? 0 : 2)] = i;
      }
    } else {
      if (step.in >= 0) {
        const int u = 4 * step.in;
        req = use[u + other] > req ? use[u + other] : req, use[u + 2] = i;
      }
      if (step.grad >= 0) {
        const int u = grad_base + 4 * step.grad;
        req = use[u + other] > req ? use[u + other] : req, use[u + 2] = i;
      }
      if (step.out >= 0) {
        const int u = (A[step.ref].what == kind::F ? 0 : grad_base) + 4 * step.out;
        req = use[u + other] > req ? use[u + other] : req, req = use[u + 2 + other] > req ? use[u + 2 + other] : req,
        use[u] = i;
      }
    }
    if (req > waited[sw]) waited[sw] = req, steps[i].wait_for = req, steps[req].record_after = true;
  }

  // 3. emit (one object per op kind, only the fields that change written: cheapest in constant
  //    evaluation)
  int nevents = 0;
  lowered_op gop, xop, cop;
  gop.code = op_code::group;
  gop.stream = xop.stream = stream_id::comm;
  cop.stream = stream_id::compute;
  for (int i = 0; i < ns; ++i) {
    const rank_step step = steps[i];  // a copy: the cheapest read in constant evaluation
    int wait_ev = -1, record_ev = -1;
    if (step.wait_for >= 0) wait_ev = steps[step.wait_for].event, in_use[wait_ev] = 0;
    if (step.record_after) {
      record_ev = 0;
      while (record_ev < nevents && in_use[record_ev]) ++record_ev;
      nevents += record_ev == nevents ? 1 : 0, in_use[record_ev] = 1, steps[i].event = record_ev;
    }
    if (step.end >= 0) {
      gop.wait_event = wait_ev, gop.record_event = record_ev, gop.tick = step.tick, ops_out[nout++] = gop,
      xop.tick = step.tick;
      for (int g = step.ref; g < step.end; ++g) {
        const int t = ends[g], edge = x[xo_edge + t];
        const bool sending = e_send[g] != 0;
        xop.code = sending ? op_code::send : op_code::recv, xop.what = x[xo_pool + t] == 0 ? kind::F : kind::B,
        xop.stage = x[xo_stage + t], xop.microbatch = x[xo_mb + t], xop.peer = sending ? x[xo_dst + t] : x[xo_src + t],
        xop.comm = edge_comm[edge], xop.link = graph ? edge : -1, xop.slot = ends[eo_slot + g], ops_out[nout++] = xop;
      }
    } else {
      const int c = step.ref;
      const action a = A[c];
      cop.what = a.what, cop.overlapped = a.overlapped, cop.stage = a.stage, cop.microbatch = a.microbatch,
      cop.slot = step.in, cop.grad_slot = step.grad, cop.out_slot = step.out, cop.wait_event = wait_ev,
      cop.record_event = record_ev, cop.tick = step.tick, cop.link = graph ? link[c] : -1, ops_out[nout++] = cop;
    }
  }
  for (int ev = 0; ev < nevents; ++ev) in_use[ev] = 0;
  rr.events = nevents;
  return nout;
}

/// Pass 5 from the tables of passes 1–4.
constexpr int lower_rank(const rank_input& v, int r, rank_scratch& ws, rank_resources& rr, lowered_op* ops_out,
                         int nout) {
  return lower_rank_in(v, r, ws, rr, ops_out, nout);
}
constexpr int lower_rank(const lowering_input& in, int r, const transfer_table& tt, const slot_table& st,
                         const end_table& et, const int* edge_comm, rank_scratch& ws, rank_resources& rr,
                         lowered_op* ops_out, int nout) {
  return lower_rank_in(rank_input_of(in, tt, st, et, edge_comm), r, ws, rr, ops_out, nout);
}

/// The lowering's own inputs: stage owners, action positions (by stage · m + microbatch) and the
/// stage graph's edges (lowering_input).
struct lowering_tables {
  scratch<int> owner;
  scratch<int> pos;    // [3n]: posF, posG, last
  scratch<int> links;  // from, to [E], pred_begin [S + 1], pred [E], succ_begin [S + 1], succ [E]
  int E = 0;
};
constexpr lowering_tables lowering_tables_of(program_view p, const int* tick) {
  const int S = p.stages, m = p.microbatches, n = S * m;
  const int E = p.has_edges() ? static_cast<int>(p.edges.size()) : (S > 1 ? S - 1 : 0);
  lowering_tables lt{scratch<int>(S, 0), scratch<int>(3 * n, -1), scratch<int>(4 * E + 2 * (S + 1) + 1, 0), E};
  {
    int* from = lt.links.data();
    int* to = from + E;
    int* pred_begin = to + E;
    int* pred = pred_begin + S + 1;
    int* succ_begin = pred + E;
    int* succ = succ_begin + S + 1;
    for (int e = 0; e < E; ++e) {
      if (p.has_edges()) {
        from[e] = p.edges[static_cast<std::size_t>(e)].from, to[e] = p.edges[static_cast<std::size_t>(e)].to;
      } else {
        from[e] = p.lane_tail(e) ? -1 : e, to[e] = e + 1;
      }
      if (from[e] < 0) continue;
      ++pred_begin[to[e] + 1];
      ++succ_begin[from[e] + 1];
    }
    for (int s = 0; s < S; ++s) pred_begin[s + 1] += pred_begin[s], succ_begin[s + 1] += succ_begin[s];
    scratch<int> fill_v(2 * S + 1, 0);
    int* fill = fill_v.data();
    for (int s = 0; s < S; ++s) fill[s] = pred_begin[s], fill[S + s] = succ_begin[s];
    for (int e = 0; e < E; ++e)
      if (from[e] >= 0) pred[fill[to[e]]++] = e, succ[fill[S + from[e]]++] = e;
  }
  int* owner = lt.owner.data();
  const action* A = p.actions.data();
  const int* beg = p.begin.data();
  for (int r = 0; r < p.ranks; ++r)
    for (int k = beg[r]; k < beg[r + 1]; ++k) owner[A[k].stage] = r;
  int* posF = lt.pos.data();
  int* posG = posF + n;
  int* last = posF + 2 * n;
  const int N = p.size();
  for (int k = 0; k < N; ++k) {
    const action a = A[k];  // a copy: in constant evaluation, cheaper to read than through a pointer
    const int q = a.stage * m + a.microbatch, ps = 2 * tick[k] + 1;
    const kind w = a.what;
    if (w == kind::F)
      posF[q] = ps;
    else
      posG[q] = w != kind::W ? ps : posG[q], last[q] = ps > last[q] ? ps : last[q];
  }
  return lt;
}

constexpr lowering_input lowering_input_of(program_view p, const int* tick, const lowering_tables& lt) {
  lowering_input in;
  in.p = p;
  in.A = p.actions.data();
  in.tick = tick;
  in.beg = p.begin.data();
  in.P = p.ranks;
  in.S = p.stages;
  in.m = p.microbatches;
  in.N = p.size();
  in.n = in.S * in.m;
  const int c = p.lanes;
  in.lane_length = p.lane_length();
  in.lane_mb = c <= 1 || p.stages % c != 0 || p.microbatches % c != 0 || p.microbatches < c ? 0 : p.microbatches / c;
  for (int k = 0; k < in.N; ++k) in.T = tick[k] + 1 > in.T ? tick[k] + 1 : in.T;
  in.owner = lt.owner.data();
  in.posF = lt.pos.data();
  in.posG = in.posF + in.n;
  in.last = in.posF + 2 * in.n;
  in.E = lt.E;
  in.from = lt.links.data();
  in.to = in.from + in.E;
  in.pred_begin = in.to + in.E;
  in.pred = in.pred_begin + in.S + 1;
  in.succ_begin = in.pred + in.E;
  in.succ = in.succ_begin + in.S + 1;
  return in;
}

}  // namespace detail

/// The grouping `groups` stands for on `p`: automatic is per_peer when `p` overlaps F&B pairs,
/// per_tick otherwise (lowered.hpp).
constexpr group_policy resolve(group_policy groups, program_view p) {
  if (groups != group_policy::automatic) return groups;
  for (const action& a : p.actions)
    if (a.overlapped) return group_policy::per_peer;
  return group_policy::per_tick;
}

namespace detail {

/// Passes 1–4: `then(in, tt, st, et, edge_comm, op_count)` receives their tables (the
/// communicators appended to `comms`, the slot counts written to `res`) and gives the result.
template <class Then>
constexpr auto lower_passes(program_view p, std::span<const int> tick_span, comm_policy policy, group_policy groups,
                            std::vector<comm_desc>& comms, rank_resources* res, const pass_storage& store,
                            Then&& then) {
  const lowering_tables lt = lowering_tables_of(p, tick_span.data());
  const lowering_input in = lowering_input_of(p, tick_span.data(), lt);
  const scratch<int> edge_comm = lower_communicators(in, policy, comms);
  transfer_table tt = lower_transfers(in, store);
  slot_table st = assign_slots(in, tt, res, store);
  tt.iv = scratch<int>(0, unset);  // the intervals are coloured: free them before the ops are made
  const end_table et = order_ends(in, tt, st, resolve(groups, p), store);
  st.of_buffer = scratch<int>(0, unset);  // each end has its slot
  return then(in, tt, st, et, edge_comm.data(), count_ops(in, tt, et));
}

/// The lowering: the five passes, writing the ops where `storage(count)` says (a pointer to
/// `count` ops, or nullptr to give up).
template <class Storage>
constexpr lowered_program lower_with(program_view p, std::span<const int> tick_span, comm_policy policy,
                                     group_policy groups, Storage&& storage) {
  lowered_program out;
  out.ranks = p.ranks;
  out.policy = policy;
  out.resources.assign(static_cast<std::size_t>(p.ranks > 0 ? p.ranks : 0), rank_resources{});
  rank_resources* res = out.resources.data();
  lower_passes(p, tick_span, policy, groups, out.comms, res, {},
               [&](const lowering_input& in, const transfer_table& tt, slot_table& st, const end_table& et,
                   const int* edge_comm, int count) {
                 lowered_op* const ops_out = storage(count);
                 if (ops_out == nullptr) return 0;
                 const rank_input input = rank_input_of(in, tt, st, et, edge_comm);
                 rank_scratch ws = rank_scratch_for(input, res);
                 int nout = 0;
                 out.begin.push_back(0);
                 for (int r = 0; r < in.P; ++r) {
                   nout = lower_rank(input, r, ws, res[r], ops_out, nout);
                   out.begin.push_back(nout);
                 }
                 out.slot_lists = std::move(st.lists);
                 return 0;
               });
  return out;
}

}  // namespace detail

/// Lowers a verified program. `tick` is check_program's lock-step tick per action.
constexpr lowered_program lower(program_view p, std::span<const int> tick, comm_policy policy = comm_policy::per_edge,
                                group_policy groups = group_policy::automatic) {
  lowered_program out;
  lowered_program l = detail::lower_with(p, tick, policy, groups, [&](int count) {
    out.ops.resize(static_cast<std::size_t>(count));
    return out.ops.data();
  });
  l.ops = std::move(out.ops);
  return l;
}

}  // namespace pipetype
