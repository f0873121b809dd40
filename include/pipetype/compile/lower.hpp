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
//   lowering_tables      each stage's rank and edges, each action's position (pass 0)
//   lower_communicators  the communicator of every crossing edge (comm_policy)
//   lower_transfers      every buffer as an interval of positions on one rank, every transfer
//                        with its tick, ends and buffers
//   assign_slots         the slot of every buffer (interval colouring) and of every compute op
//   order_ends           each rank's transfer ends in tick order, split into groups (group_policy)
//   lower_rank           per rank: groups and computes in tick order, their stream hazards as
//                        event waits and records from a pool, then the ops themselves
// Each pass (the `_in` function; the plain name is its run-time wrapper) works on flat tables,
// blocks of fields read by index: this runs inside make_plan's constant evaluation, where every
// function call, std::vector element and read through a pointer costs far more than the
// arithmetic around it, so a pass is one call over whole tables, never one per element, and
// make_plan hands it arrays where the run-time wrappers hand it pointers (plan.hpp, front_room).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/compile/saved_slots.hpp"
#include "pipetype/compile/verify.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/detail/heap.hpp"
#include "pipetype/detail/scratch.hpp"

namespace pipetype {

namespace detail {

// Passes 0–5 take their tables as pointers or arrays (the file's header says why); the run-time
// wrappers (lowering_tables_of, lower_transfers, assign_slots, order_ends, lower_rank) hand them
// pointers into scratch allocations, make_plan arrays of a literal room (plan.hpp, front_room).

/// Stable counting sort: `order` gets the permutation that orders keys[ko ..][0, n) (each in
/// [0, limit)) ascending; `start` has room for limit + 1 counts.
template <class Keys, class Start, class Order>
constexpr void counting_order_in(const Keys& keys, int ko, int n, int limit, Start& start, Order& order) {
  for (int i = 0; i <= limit; ++i) start[i] = 0;
  for (int i = 0; i < n; ++i) order[i] = 0;  // in order first (see fill_in)
  for (int i = 0; i < n; ++i) ++start[keys[ko + i] + 1];
  for (int i = 0; i < limit; ++i) start[i + 1] += start[i];
  for (int i = 0; i < n; ++i) order[start[keys[ko + i]]++] = i;
}

/// The sizes every pass reads. Positions: 2·tick for a tick's groups, 2·tick + 1 for its compute.
struct lowering_shape {
  int P = 0, S = 0, m = 0, N = 0, n = 0;  // ranks, stages, microbatches, actions, S·m
  int T = 0;                              // ticks
  // The stage graph's edges, numbered e: a chain's edge s → s+1 is e = s (from = -1 where s ends
  // a lane: no edge); a program with edges numbers them as it lists them.
  int E = 0;
  bool graph = false;   // the program lists its edges
  int lane_mb = 0;      // microbatches per lane when they are routed by lane, else 0
  int lane_length = 1;  // stages per lane
  constexpr int limit() const noexcept { return 2 * T + 4; }
  /// The microbatches that run through stage s: [first_mb(s), end_mb(s)) (program_view::runs_through).
  constexpr int first_mb(int s) const noexcept { return lane_mb > 0 ? s / lane_length * lane_mb : 0; }
  constexpr int end_mb(int s) const noexcept { return lane_mb > 0 ? (s / lane_length + 1) * lane_mb : m; }
};

/// The shape of program `p` with lock-step ticks `tick` (a pointer, or make_plan's array).
template <class Ticks>
constexpr lowering_shape lowering_shape_of(program_view p, const Ticks& tick) {
  lowering_shape sh;
  sh.P = p.ranks, sh.S = p.stages, sh.m = p.microbatches, sh.N = p.size(), sh.n = sh.S * sh.m;
  sh.graph = p.has_edges();
  sh.E = sh.graph ? static_cast<int>(p.edges.size()) : (sh.S > 1 ? sh.S - 1 : 0);
  const int c = p.lanes;
  sh.lane_length = p.lane_length();
  sh.lane_mb = c <= 1 || p.stages % c != 0 || p.microbatches % c != 0 || p.microbatches < c ? 0 : p.microbatches / c;
  for (int k = 0; k < sh.N; ++k) sh.T = tick[k] + 1 > sh.T ? tick[k] + 1 : sh.T;
  return sh;
}

/// What every pass reads: the program, its ticks and the positions they give each action.
struct lowering_input : lowering_shape {
  const action* A = nullptr;
  const int* tick = nullptr;
  const int* beg = nullptr;
  const int* owner = nullptr;  // [S] the rank of each stage
  const int* posF = nullptr;   // [n] the position of F(s,j), by s·m + j
  const int* posG = nullptr;   // [n] of its input-gradient action (B or I)
  const int* last = nullptr;   // [n] of the last use of its input buffers (B, or W)
  // pred/succ list each stage's edges in edge order (CSR)
  const int* from = nullptr;        // [E]
  const int* to = nullptr;          // [E]
  const int* pred_begin = nullptr;  // [S + 1]
  const int* pred = nullptr;        // [E] edge indices
  const int* succ_begin = nullptr;  // [S + 1]
  const int* succ = nullptr;        // [E]
};

/// Pass 0: the lowering's own inputs into `t` (members owner [S], posF, posG, last [n], from,
/// to, pred, succ [E], pred_begin, succ_begin [S + 1], and scratch fill [2S + 1]): each stage's
/// rank, the positions of each (stage, microbatch)'s F, input-gradient action and last backward,
/// and the stage graph's edges with each stage's in and out edges.
template <class Acts, class Ints, class Ticks, class Tables>
constexpr void lowering_tables_in(program_view p, const Acts& A, const Ints& beg, const Ticks& tick,
                                  const lowering_shape& sh, Tables& t) {
  const int S = sh.S, m = sh.m, n = sh.n, E = sh.E;
  auto& owner = t.owner;
  auto& posF = t.posF;
  auto& posG = t.posG;
  auto& last = t.last;
  auto& from = t.from;
  auto& to = t.to;
  auto& pred_begin = t.pred_begin;
  auto& pred = t.pred;
  auto& succ_begin = t.succ_begin;
  auto& succ = t.succ;
  auto& fill = t.fill;
  fill_in(owner, S, 0), fill_in(pred, E, 0), fill_in(succ, E, 0);
  for (int s = 0; s <= S; ++s) pred_begin[s] = 0, succ_begin[s] = 0;
  for (int q = 0; q < n; ++q) posF[q] = -1, posG[q] = -1, last[q] = -1;
  for (int e = 0; e < E; ++e) {
    if (sh.graph) {
      from[e] = p.edges[static_cast<std::size_t>(e)].from, to[e] = p.edges[static_cast<std::size_t>(e)].to;
    } else {
      from[e] = p.lane_tail(e) ? -1 : e, to[e] = e + 1;
    }
    if (from[e] < 0) continue;
    ++pred_begin[to[e] + 1];
    ++succ_begin[from[e] + 1];
  }
  for (int s = 0; s < S; ++s) pred_begin[s + 1] += pred_begin[s], succ_begin[s + 1] += succ_begin[s];
  for (int s = 0; s < S; ++s) fill[s] = pred_begin[s], fill[S + s] = succ_begin[s];
  for (int e = 0; e < E; ++e)
    if (from[e] >= 0) pred[fill[to[e]]++] = e, succ[fill[S + from[e]]++] = e;
  for (int r = 0; r < sh.P; ++r)
    for (int k = beg[r]; k < beg[r + 1]; ++k) owner[A[k].stage] = r;
  for (int k = 0; k < sh.N; ++k) {
    const action a = A[k];  // a copy: the cheapest read in constant evaluation
    const int q = a.stage * m + a.microbatch, ps = 2 * tick[k] + 1;
    if (a.what == kind::F)
      posF[q] = ps;
    else
      posG[q] = a.what != kind::W ? ps : posG[q], last[q] = ps > last[q] ? ps : last[q];
  }
  // a forward-only program: the F itself is its input's last reader
  for (int q = 0; q < n; ++q) last[q] = last[q] < 0 ? posF[q] : last[q];
}

/// Pass 1: the communicator of each crossing edge e (`edge_comm[e]`, -1 when both stages share a
/// rank), appended to `comms`; `pair` is scratch of P² (per_rank_pair).
template <class In, class EdgeComm, class Pair>
constexpr void lower_communicators_in(const In& in, comm_policy policy, std::vector<comm_desc>& comms,
                                      EdgeComm& edge_comm, Pair& pair) {
  const int P = in.P, E = in.E;
  const auto& owner = in.owner;
  const auto& from = in.from;
  const auto& to = in.to;
  for (int e = 0; e <= E; ++e) edge_comm[e] = -1;
  if (policy == comm_policy::per_edge) {
    for (int e = 0; e < E; ++e) {
      if (from[e] < 0) continue;  // no edge between two lanes
      const int a = owner[from[e]], b = owner[to[e]];
      if (a == b) continue;
      edge_comm[e] = static_cast<int>(comms.size());
      comms.push_back({a < b ? a : b, a < b ? b : a, from[e], in.graph ? e : -1});
    }
    return;
  }
  for (int i = 0; i < P * P; ++i) pair[i] = -1;
  for (int e = 0; e < E; ++e) {
    if (from[e] < 0) continue;
    const int a = owner[from[e]], b = owner[to[e]];
    if (a != b) pair[(a < b ? a : b) * P + (a < b ? b : a)] = 0;
  }
  for (int a = 0; a < P; ++a)
    for (int b = a + 1; b < P; ++b)
      if (pair[a * P + b] == 0) {
        pair[a * P + b] = static_cast<int>(comms.size());
        comms.push_back({a, b, -1});
      }
  for (int e = 0; e < E; ++e) {
    if (from[e] < 0) continue;
    const int a = owner[from[e]], b = owner[to[e]];
    if (a != b) edge_comm[e] = pair[(a < b ? a : b) * P + (a < b ? b : a)];
  }
}

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
  constexpr const int* iv_field(int f) const { return iv.data() + f * max_iv; }
  constexpr const int* x_field(int f) const { return x.data() + f * max_x; }
  enum iv_fields { iv_rank, iv_alloc, iv_free, iv_pool, iv_id };
  enum x_fields { x_tick, x_pool, x_stage, x_mb, x_src, x_dst, x_sid, x_did, x_edge };
  /// Room for a program of shape `sh`: buffers and transfers at most.
  static constexpr int buffers_for(const lowering_shape& sh) { return sh.n + 3 * sh.E * sh.m + 1; }
  static constexpr int transfers_for(const lowering_shape& sh) { return 2 * sh.E * sh.m + 1; }
};

/// Pass 2: every buffer (iv: five fields of max_iv) and every transfer (x: nine of max_x). A
/// tensor produced at tick t crosses at tick t + 1. Writes the counts to niv and nx.
template <class In, class IV, class X>
constexpr void lower_transfers_in(const In& in, IV& iv, int max_iv, X& x, int max_x, int& niv_out, int& nx_out) {
  const int S = in.S, m = in.m, E = in.E;
  const auto& owner = in.owner;
  const auto& succ_begin = in.succ_begin;
  const auto& succ = in.succ;
  const auto& to_of = in.to;
  const auto& last = in.last;
  const int i_alloc = max_iv, i_free = 2 * max_iv, i_pool = 3 * max_iv, i_id = 4 * max_iv;
  using tt = transfer_table;
  const int x_pool = tt::x_pool * max_x, x_stage = tt::x_stage * max_x, x_mb = tt::x_mb * max_x,
            x_src = tt::x_src * max_x, x_dst = tt::x_dst * max_x, x_sid = tt::x_sid * max_x, x_did = tt::x_did * max_x,
            x_edge = tt::x_edge * max_x;
  fill_in(iv, 5 * max_iv, 0), fill_in(x, 9 * max_x, 0);
  int niv = 0, nx = 0;
  // activations: each output, then the copy each crossing edge receives
  for (int s = 0; s < S; ++s) {
    const int sb = succ_begin[s], se = succ_begin[s + 1];
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
        const int e = succ[k], c = to_of[e], to = owner[c], until = to == from ? last[c * m + j] : 2 * t + 1,
                  qe = e * m + j;
        free = until > free ? until : free;
        if (to != from)
          iv[niv] = to, iv[i_alloc + niv] = 2 * t, iv[i_free + niv] = last[c * m + j], iv[i_pool + niv] = 0,
          iv[i_id + niv] = 2 * qe, ++niv, x[nx] = t, x[x_pool + nx] = 0, x[x_stage + nx] = s, x[x_mb + nx] = j,
          x[x_edge + nx] = e, x[x_src + nx] = from, x[x_dst + nx] = to, x[x_sid + nx] = 2 * q + 1,
          x[x_did + nx] = 2 * qe, ++nx;
      }
      iv[out] = from, iv[i_alloc + out] = made, iv[i_free + out] = free, iv[i_pool + out] = 0,
      iv[i_id + out] = 2 * q + 1;
    }
  }
  // gradients: per edge, from its consumer's backward to its producer's
  for (int e = 0; e < E; ++e) {
    const int u = in.from[e];
    if (u < 0) continue;
    const int c = to_of[e];
    const int from = owner[c], to = owner[u];
    const int j0 = in.first_mb(u), j1 = in.end_mb(u);
    for (int j = j0; j < j1; ++j) {
      const int q = e * m + j, made = in.posG[c * m + j], use = last[u * m + j], t = (made - 1) / 2 + 1;
      if (made < 0) continue;  // forward-only: no gradient
      if (from == to)
        iv[niv] = from, iv[i_alloc + niv] = made, iv[i_free + niv] = use, iv[i_pool + niv] = 1, iv[i_id + niv] = 2 * q,
        ++niv;
      else
        iv[niv] = from, iv[i_alloc + niv] = made, iv[i_free + niv] = 2 * t + 1, iv[i_pool + niv] = 1,
        iv[i_id + niv] = 2 * q + 1, ++niv, iv[niv] = to, iv[i_alloc + niv] = 2 * t, iv[i_free + niv] = use,
        iv[i_pool + niv] = 1, iv[i_id + niv] = 2 * q, ++niv, x[nx] = t, x[x_pool + nx] = 1, x[x_stage + nx] = c,
        x[x_mb + nx] = j, x[x_edge + nx] = e, x[x_src + nx] = from, x[x_dst + nx] = to, x[x_sid + nx] = 2 * q + 1,
        x[x_did + nx] = 2 * q, ++nx;
    }
  }
  niv_out = niv;
  nx_out = nx;
}

/// Pass 2 at run time.
constexpr transfer_table lower_transfers(const lowering_input& in) {
  const int max_iv = transfer_table::buffers_for(in), max_x = transfer_table::transfers_for(in);
  transfer_table tt{scratch<int>(5 * max_iv, unset), scratch<int>(9 * max_x, unset), max_iv, 0, max_x, 0};
  int* iv = tt.iv.data();
  int* x = tt.x.data();
  lower_transfers_in(in, iv, max_iv, x, max_x, tt.niv, tt.nx);
  return tt;
}

/// Pass 3's result: the slot of every buffer, by pool · stride + id, and of every compute op.
struct slot_table {
  scratch<int> of_buffer;  // [2 · stride]
  scratch<int> compute;    // [3N]: input, incoming gradient, output per action (-1: none)
  scratch<int> link;       // [N] with edges: the action's list in `lists` (-1: its three fields say it)
  std::vector<int> lists;  // lowered_view::slot_lists
  int stride = 0;          // 2 · max(S, E) · m + 2: the gradient pool's offset in of_buffer
  constexpr int buffer(int pool_kind, int id) const { return of_buffer[pool_kind * stride + id]; }
  static constexpr int stride_for(const lowering_shape& sh) { return 2 * (sh.S > sh.E ? sh.S : sh.E) * sh.m + 2; }
};

/// Pass 3: slots. Greedy interval colouring per (rank, pool) in allocation order, reusing a slot
/// only after its last use — optimal for intervals, so a pool's size is its peak of live buffers
/// (written to `res[r].activation_slots` / `gradient_slots`). Then each compute op's slots: one
/// per list in its three fields, or (several inputs, gradients or outputs) a list in edge order.
/// Writes slot_of [2·stride] (each buffer's), compute [3N] and, with edges, link [N] (-1: the
/// action's three fields say it) and lists; `w` is scratch: start [limit + 1], order [niv], base
/// [2P + 1], nslots, nbusy, nidle [2P], busy, idle [niv + 1] (long long).
template <class In, class IV, class Slots, class Compute, class Link, class Work>
constexpr void assign_slots_in(const In& in, const IV& iv, int max_iv, int niv, int stride, rank_resources* res,
                               Slots& slot_of, Compute& compute, Link& link, std::vector<int>& lists, Work& w) {
  const int P = in.P, N = in.N, m = in.m;
  fill_in(compute, 3 * N, -1), fill_in(slot_of, 2 * stride, -1), fill_in(w.busy, niv + 1, 0LL),
      fill_in(w.idle, niv + 1, 0LL);
  if (in.graph) fill_in(link, N, -1);
  const int i_alloc = max_iv, i_free = 2 * max_iv, i_pool = 3 * max_iv, i_id = 4 * max_iv;
  {
    // Intervals in allocation order (a counting sort over positions), each coloured within its
    // (rank, pool) group g. Group g keeps two binary min-heaps in its region [base[g], base[g+1])
    // of two arrays: `busy` holds (last use, slot) of its slots in use, `idle` the slots free
    // again. Positions only grow, so a slot whose last use precedes the current allocation stays
    // free until it is taken: popping those into `idle` and taking its least keeps the greedy
    // choice (the lowest free slot) in O(log n) per interval instead of a scan of every slot.
    auto& order = w.order;
    auto& base = w.base;
    auto& nslots = w.nslots;
    auto& nbusy = w.nbusy;
    auto& nidle = w.nidle;
    auto& busy = w.busy;
    auto& idle = w.idle;
    counting_order_in(iv, i_alloc, niv, in.limit(), w.start, order);
    for (int g = 0; g <= 2 * P; ++g) base[g] = 0;
    for (int g = 0; g < 2 * P; ++g) nslots[g] = 0, nbusy[g] = 0, nidle[g] = 0;
    const long long width = niv + 1;  // busy keys: last use · width + slot
    for (int i = 0; i < niv; ++i) ++base[iv[i] * 2 + iv[i_pool + i] + 1];
    for (int g = 0; g < 2 * P; ++g) base[g + 1] += base[g];
    for (int o = 0; o < niv; ++o) {
      const int i = order[o], g = iv[i] * 2 + iv[i_pool + i], b = base[g], nb = nbusy[g], alloc = iv[i_alloc + i];
      if (nidle[g] == 0 && nb > 0 && busy[b] / width < alloc &&
          (nb == 1 || (busy[b + 1] / width >= alloc && (nb == 2 || busy[b + 2] / width >= alloc)))) {
        // the common case: exactly one slot free again and none idle, so it is the one taken
        const int chosen = static_cast<int>(busy[b] % width);
        heap_replace_top(busy, b, nb, iv[i_free + i] * width + chosen),
            slot_of[iv[i_pool + i] * stride + iv[i_id + i]] = chosen;
        continue;
      }
      while (nbusy[g] > 0 && busy[b] / width < alloc) heap_push(idle, b, nidle[g], heap_pop(busy, b, nbusy[g]) % width);
      const int chosen = nidle[g] > 0 ? static_cast<int>(heap_pop(idle, b, nidle[g])) : nslots[g]++;
      heap_push(busy, b, nbusy[g], iv[i_free + i] * width + chosen),
          slot_of[iv[i_pool + i] * stride + iv[i_id + i]] = chosen;
    }
    for (int r = 0; r < P; ++r) {
      res[r].activation_slots = nslots[2 * r];
      res[r].gradient_slots = nslots[2 * r + 1];
    }
  }
  const auto& A = in.A;
  const auto& from = in.from;
  const auto& owner = in.owner;
  const auto& pred_begin = in.pred_begin;
  const auto& pred = in.pred;
  const auto& succ_begin = in.succ_begin;
  const auto& succ = in.succ;
  const int g0 = stride, o_gin = N, o_out = 2 * N;  // the gradient pool in slot_of; compute's fields
  for (int r = 0; r < P; ++r)
    for (int k = in.beg[r]; k < in.beg[r + 1]; ++k) {
      const action a = A[k];  // a copy: the cheapest read in constant evaluation
      const int s = a.stage, j = a.microbatch, pb = pred_begin[s], pe = pred_begin[s + 1], sb = succ_begin[s],
                se = succ_begin[s + 1], nin = pe - pb, ngrad = a.what == kind::F ? 0 : se - sb,
                nout = a.what == kind::F   ? (se > sb ? 1 : 0)
                       : a.what == kind::W ? 0
                                           : pe - pb;
      // an input read over edge e (u → s): u's output when u is here, else e's received copy; the
      // gradient a backward writes for e: where the producer reads it, or its staging copy
      if (nin <= 1 && ngrad <= 1 && nout <= 1) {  // (written out: a chain's every action comes here)
        const int e = nin == 1 ? pred[pb] : -1;
        const bool here = e >= 0 && owner[from[e]] == r;
        compute[k] = nin == 1 ? (here ? slot_of[2 * (from[e] * m + j) + 1] : slot_of[2 * (e * m + j)]) : -1,
        compute[o_gin + k] = ngrad == 1 ? slot_of[g0 + 2 * (succ[sb] * m + j)] : -1,
        compute[o_out + k] = nout != 1           ? -1
                             : a.what == kind::F ? slot_of[2 * (s * m + j) + 1]
                                                 : slot_of[g0 + 2 * (e * m + j) + (here ? 0 : 1)];
        continue;
      }
      link[k] = static_cast<int>(lists.size());
      lists.push_back(nin);
      lists.push_back(ngrad);
      lists.push_back(nout);
      for (int i = pb; i < pe; ++i) {
        const int e = pred[i];
        lists.push_back(owner[from[e]] == r ? slot_of[2 * (from[e] * m + j) + 1] : slot_of[2 * (e * m + j)]);
      }
      for (int i = 0; i < ngrad; ++i) lists.push_back(slot_of[g0 + 2 * (succ[sb + i] * m + j)]);
      if (a.what == kind::F && nout == 1) lists.push_back(slot_of[2 * (s * m + j) + 1]);
      if (a.what != kind::F)
        for (int i = 0; i < nout; ++i) {
          const int e = pred[pb + i];
          lists.push_back(slot_of[g0 + 2 * (e * m + j) + (owner[from[e]] == r ? 0 : 1)]);
        }
    }
}

/// Pass 3 at run time.
constexpr slot_table assign_slots(const lowering_input& in, const transfer_table& tt, rank_resources* res) {
  const int P = in.P, N = in.N, niv = tt.niv;
  slot_table st{scratch<int>(2 * slot_table::stride_for(in), unset),
                scratch<int>(3 * N, unset),
                scratch<int>(in.graph ? N : 1, unset),
                {},
                slot_table::stride_for(in)};
  scratch<int> ints(in.limit() + 1 + niv + (2 * P + 1) + 3 * (2 * P), unset);
  scratch<long long> heaps(2 * (niv + 1), unset);
  struct {
    int *start, *order, *base, *nslots, *nbusy, *nidle;
    long long *busy, *idle;
  } w{};
  w.start = ints.data(), w.order = w.start + in.limit() + 1, w.base = w.order + niv, w.nslots = w.base + 2 * P + 1,
  w.nbusy = w.nslots + 2 * P, w.nidle = w.nbusy + 2 * P, w.busy = heaps.data(), w.idle = w.busy + niv + 1;
  int* slot_of = st.of_buffer.data();
  int* compute = st.compute.data();
  int* link = st.link.data();
  assign_slots_in(in, tt.iv.data(), tt.max_iv, niv, st.stride, res, slot_of, compute, link, st.lists, w);
  return st;
}

/// Pass 4's result: every transfer end, rank by rank and within a rank in issue order.
struct end_table {
  scratch<int> own;  // the fields' room
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
/// per_tick counts every end as the same "peer", so each tick keeps one group. Writes `ends`
/// (x, tick, slot, peer: EX each, EX ≥ 2·nx), send [EX] and rank_begin [P + 1]; `w` is scratch:
/// start [max(T + 3, P + 1)], order, end_rank, end_of, key [2·nx + 2], vote [2(T + 3)].
template <class In, class X, class Slots, class Ends, class Send, class Begin, class Work>
constexpr void order_ends_in(const In& in, const X& x, int max_x, int nx, const Slots& slot_of, int stride,
                             group_policy groups, Ends& ends, int EX, Send& send, Begin& rank_begin, Work& w) {
  const int P = in.P;
  using tt = transfer_table;
  const int x_pool = tt::x_pool * max_x, x_mb = tt::x_mb * max_x, x_src = tt::x_src * max_x, x_dst = tt::x_dst * max_x,
            x_sid = tt::x_sid * max_x, x_did = tt::x_did * max_x, x_edge = tt::x_edge * max_x;
  auto& order = w.order;
  auto& end_rank = w.end_rank;
  auto& end_of = w.end_of;
  auto& key = w.key;
  const int e_tick = EX, e_slot = 2 * EX, e_peer = 3 * EX;
  fill_in(ends, 4 * EX, 0);
  counting_order_in(x, 0, nx, in.T + 2, w.start, order);  // by tick (field 0)
  for (int o = 0; o < nx; ++o) {
    const int t = order[o];
    end_of[2 * o] = 2 * t, end_rank[2 * o] = x[x_src + t], end_of[2 * o + 1] = 2 * t + 1,
               end_rank[2 * o + 1] = x[x_dst + t];
  }
  counting_order_in(end_rank, 0, 2 * nx, P, w.start, order);  // then by rank, stably
  for (int r = 0; r <= P; ++r) rank_begin[r] = 0;
  for (int e = 0; e < 2 * nx; ++e) ++rank_begin[end_rank[e] + 1];
  for (int r = 0; r < P; ++r) rank_begin[r + 1] += rank_begin[r];
  for (int e = 0; e < 2 * nx; ++e) {
    const int en = end_of[order[e]], t = en / 2;
    ends[e] = t, send[e] = (en & 1) == 0 ? 1 : 0, ends[e_tick + e] = x[t], ends[e_peer + e] = 0,
    ends[e_slot + e] = slot_of[x[x_pool + t] * stride + ((en & 1) == 0 ? x[x_sid + t] : x[x_did + t])];
  }
  for (int e = 0; e < 2 * nx + 2; ++e) key[e] = 0;
  if (groups == group_policy::per_peer) {
    // per tick, a vote on its peer order: each transfer that a compute of the same tick reads
    // wants its sender's group first (a sender above the receiver: highest peer first); where no
    // such transfer votes, the direction most transfers take (mostly down: highest first)
    auto& vote = w.vote;
    const int lean = in.T + 3;  // vote[lean + t]
    for (int t = 0; t < 2 * (in.T + 3); ++t) vote[t] = 0;
    for (int t = 0; t < nx; ++t) {
      const int down = x[x_src + t] > x[x_dst + t] ? 1 : -1;
      vote[lean + x[t]] += down;
      const int e = x[x_edge + t], j = x[x_mb + t];
      const int use = x[x_pool + t] == 0 ? in.posF[in.to[e] * in.m + j] : in.posG[in.from[e] * in.m + j];
      if ((use - 1) / 2 == x[t]) vote[x[t]] += down;
    }
    for (int t = 0; t < in.T + 3; ++t)
      if (vote[t] == 0) vote[t] = vote[lean + t];
    for (int e = 0; e < 2 * nx; ++e) {
      ends[e_peer + e] = send[e] ? x[x_dst + ends[e]] : x[x_src + ends[e]];
      key[e] = vote[ends[e_tick + e]] > 0 ? -ends[e_peer + e] : ends[e_peer + e];
    }
  }
  for (int r = 0; r < P; ++r)
    for (int e = rank_begin[r] + 1; e < rank_begin[r + 1]; ++e)
      for (int f = e; f > rank_begin[r] && ends[e_tick + f] == ends[e_tick + f - 1] && key[f] < key[f - 1]; --f) {
        const int tx = ends[f], ts = ends[e_slot + f], tp = ends[e_peer + f], tk = key[f];
        const char tsend = send[f];
        ends[f] = ends[f - 1], ends[e_slot + f] = ends[e_slot + f - 1], send[f] = send[f - 1],
        ends[e_peer + f] = ends[e_peer + f - 1], key[f] = key[f - 1];
        ends[f - 1] = tx, ends[e_slot + f - 1] = ts, send[f - 1] = tsend, ends[e_peer + f - 1] = tp, key[f - 1] = tk;
      }
}

/// Pass 4 at run time.
constexpr end_table order_ends(const lowering_input& in, const transfer_table& tt, const slot_table& st,
                               group_policy groups) {
  const int P = in.P, nx = tt.nx;
  const int stride = 2 * nx + 2;
  end_table et{scratch<int>(4 * stride + P + 1, unset), scratch<char>(stride, unset)};
  int* const room = et.own.data();
  et.x = room, et.tick = room + stride, et.slot = room + 2 * stride, et.peer = room + 3 * stride, et.stride = stride,
  et.rank_begin = room + 4 * stride, et.send = et.own_send.data();
  const int starts = (in.T + 3 > P + 1 ? in.T + 3 : P + 1);
  scratch<int> ints(starts + 4 * (2 * nx + 2) + 2 * (in.T + 3), unset);
  struct {
    int *start, *order, *end_rank, *end_of, *key, *vote;
  } w{};
  w.start = ints.data(), w.order = w.start + starts, w.end_rank = w.order + 2 * nx + 2,
  w.end_of = w.end_rank + 2 * nx + 2, w.key = w.end_of + 2 * nx + 2, w.vote = w.key + 2 * nx + 2;
  order_ends_in(in, tt.x.data(), tt.max_x, nx, st.of_buffer.data(), st.stride, groups, et.x, stride, et.send,
                et.rank_begin, w);
  return et;
}

/// The op count: computes, a send and a recv per transfer, and one group op per (rank, tick,
/// peer) with transfers (`ends` as order_ends writes them: x, tick, slot, peer, EX each).
template <class Ends, class Begin>
constexpr int count_ops_in(const lowering_shape& sh, int nx, const Ends& ends, int EX, const Begin& rb) {
  int nops = sh.N + 2 * nx;
  for (int r = 0; r < sh.P; ++r)
    for (int e = rb[r]; e < rb[r + 1]; ++e)
      if (e == rb[r] || ends[EX + e] != ends[EX + e - 1] || ends[3 * EX + e] != ends[3 * EX + e - 1]) ++nops;
  return nops;
}

constexpr int count_ops(const lowering_input& in, const transfer_table& tt, const end_table& et) {
  return count_ops_in(in, tt.nx, et.x, et.stride, et.rank_begin);
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
  v.A = in.A, v.tick = in.tick, v.beg = in.beg, v.P = in.P, v.N = in.N, v.graph = in.graph;
  v.x = tt.x.data(), v.MX = tt.max_x, v.edge_comm = edge_comm, v.compute = st.compute.data(), v.link = st.link.data(),
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

/// The lowering's own inputs at run time (lowering_tables_in): stage owners, action positions
/// (by stage · m + microbatch) and the stage graph's edges.
struct lowering_tables {
  scratch<int> owner;
  scratch<int> pos;    // [3n]: posF, posG, last
  scratch<int> links;  // from, to [E], pred_begin [S + 1], pred [E], succ_begin [S + 1], succ [E]
  lowering_shape shape;
};
constexpr lowering_tables lowering_tables_of(program_view p, const int* tick) {
  const lowering_shape sh = lowering_shape_of(p, tick);
  const int S = sh.S, n = sh.n, E = sh.E;
  lowering_tables lt{scratch<int>(S + 1, unset), scratch<int>(3 * n + 1, unset),
                     scratch<int>(4 * E + 2 * (S + 1) + 1, unset), sh};
  scratch<int> fill(2 * S + 1, unset);
  struct {
    int *owner, *posF, *posG, *last, *from, *to, *pred_begin, *pred, *succ_begin, *succ, *fill;
  } t{};
  t.owner = lt.owner.data(), t.posF = lt.pos.data(), t.posG = t.posF + n, t.last = t.posF + 2 * n,
  t.from = lt.links.data(), t.to = t.from + E, t.pred_begin = t.to + E, t.pred = t.pred_begin + S + 1,
  t.succ_begin = t.pred + E, t.succ = t.succ_begin + S + 1, t.fill = fill.data();
  lowering_tables_in(p, p.actions.data(), p.begin.data(), tick, sh, t);
  return lt;
}

constexpr lowering_input lowering_input_of(program_view p, const int* tick, const lowering_tables& lt) {
  lowering_input in;
  static_cast<lowering_shape&>(in) = lt.shape;
  in.A = p.actions.data();
  in.tick = tick;
  in.beg = p.begin.data();
  in.owner = lt.owner.data();
  in.posF = lt.pos.data();
  in.posG = in.posF + in.n;
  in.last = in.posF + 2 * in.n;
  in.from = lt.links.data();
  in.to = in.from + in.E;
  in.pred_begin = in.to + in.E;
  in.pred = in.pred_begin + in.S + 1;
  in.succ_begin = in.pred + in.E;
  in.succ = in.succ_begin + in.S + 1;
  return in;
}

/// Pass 1 at run time: the communicators, and each edge's (-1: none).
constexpr scratch<int> lower_communicators(const lowering_input& in, comm_policy policy,
                                           std::vector<comm_desc>& comms) {
  scratch<int> edge_comm(in.E + 1, unset);
  scratch<int> pair(policy == comm_policy::per_rank_pair ? in.P * in.P : 0, unset);
  int* ec = edge_comm.data();
  int* pp = pair.data();
  lower_communicators_in(in, policy, comms, ec, pp);
  return edge_comm;
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
                            std::vector<comm_desc>& comms, rank_resources* res, Then&& then) {
  const lowering_tables lt = lowering_tables_of(p, tick_span.data());
  const lowering_input in = lowering_input_of(p, tick_span.data(), lt);
  const scratch<int> edge_comm = lower_communicators(in, policy, comms);
  transfer_table tt = lower_transfers(in);
  slot_table st = assign_slots(in, tt, res);
  tt.iv = scratch<int>(0, unset);  // the intervals are coloured: free them before the ops are made
  const end_table et = order_ends(in, tt, st, resolve(groups, p));
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
  lower_passes(p, tick_span, policy, groups, out.comms, res,
               [&](const lowering_input& in, const transfer_table& tt, slot_table& st, const end_table& et,
                   const int* edge_comm, int count) {
                 lowered_op* const ops_out = storage(count);
                 if (ops_out == nullptr) return 0;
                 const rank_input input = rank_input_of(in, tt, st, et, edge_comm);
                 rank_scratch ws = rank_scratch_for(input, res);
                 int nout = 0;
                 out.begin.push_back(0);
                 for (int r = 0; r < in.P; ++r) {
                   const int first = nout;
                   nout = lower_rank(input, r, ws, res[r], ops_out, nout);
                   assign_saved_slots(ops_out, first, nout, p.stages, p.microbatches, p.lane_length(), res[r]);
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
