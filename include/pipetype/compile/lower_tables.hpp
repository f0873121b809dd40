// pipetype/compile/lower_tables.hpp — the lowering's passes 0–4 (compile/lower.hpp says the rules).
//
//   lowering_tables      each stage's rank and edges, each action's position (pass 0)
//   lower_communicators  the communicator of every crossing edge (comm_policy)
//   lower_transfers      every buffer as an interval of positions on one rank, every transfer
//                        with its tick, ends and buffers
//   assign_slots         the slot of every buffer (interval colouring) and of every compute op
//   order_ends           each rank's transfer ends in tick order, split into groups (group_policy)
// Each makes a flat table that the next passes read; pass 5 (lower_rank, compile/lower.hpp) reads
// them all. The `_in` functions take their tables as pointers or arrays, so that make_plan runs
// them on arrays of a literal room (compile/plan.hpp) and the run-time wrappers on scratch
// allocations.
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

// Passes 0–4 take their tables as pointers or arrays (compile/lower.hpp's header says why); the
// run-time wrappers (lowering_tables_of, lower_transfers, assign_slots, order_ends) hand them
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
  // the edges a gradient comes back over: cut[e] is 1 where edge e is detached, and grad lists
  // each stage's other outgoing edges (CSR, edge order)
  const int* cut = nullptr;         // [E]
  const int* grad_begin = nullptr;  // [S + 1]
  const int* grad = nullptr;        // [E]
};

/// Pass 0: the lowering's own inputs into `t` (members owner [S], posF, posG, last [n], from,
/// to, pred, succ, cut, grad [E], pred_begin, succ_begin, grad_begin [S + 1], and scratch fill
/// [3S + 1]): each stage's rank, the positions of each (stage, microbatch)'s F, input-gradient
/// action and last backward, and the stage graph's edges with each stage's in and out edges (and
/// the out edges a gradient comes back over).
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
  auto& cut = t.cut;
  auto& grad_begin = t.grad_begin;
  auto& grad = t.grad;
  auto& fill = t.fill;
  fill_in(owner, S, 0), fill_in(pred, E, 0), fill_in(succ, E, 0), fill_in(cut, E, 0), fill_in(grad, E, 0);
  for (int s = 0; s <= S; ++s) pred_begin[s] = 0, succ_begin[s] = 0, grad_begin[s] = 0;
  for (int q = 0; q < n; ++q) posF[q] = -1, posG[q] = -1, last[q] = -1;
  for (int e = 0; e < E; ++e) {
    if (sh.graph) {
      const stage_edge g = p.edges[static_cast<std::size_t>(e)];
      from[e] = g.from, to[e] = g.to, cut[e] = g.detached ? 1 : 0;
    } else {
      from[e] = p.lane_tail(e) ? -1 : e, to[e] = e + 1;
    }
    if (from[e] < 0) continue;
    ++pred_begin[to[e] + 1];
    ++succ_begin[from[e] + 1];
    grad_begin[from[e] + 1] += 1 - cut[e];
  }
  for (int s = 0; s < S; ++s)
    pred_begin[s + 1] += pred_begin[s], succ_begin[s + 1] += succ_begin[s], grad_begin[s + 1] += grad_begin[s];
  for (int s = 0; s < S; ++s) fill[s] = pred_begin[s], fill[S + s] = succ_begin[s], fill[2 * S + s] = grad_begin[s];
  for (int e = 0; e < E; ++e)
    if (from[e] >= 0) {
      pred[fill[to[e]]++] = e, succ[fill[S + from[e]]++] = e;
      if (!cut[e]) grad[fill[2 * S + from[e]]++] = e;
    }
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
  paged<int> x;     // struct of arrays, max_x each: tick, pool, stage, mb, src, dst, src id, dst id, edge
  int max_iv = 0, niv = 0, max_x = 0, nx = 0;
  constexpr const int* iv_field(int f) const { return iv.data() + f * max_iv; }
  constexpr field_of<paged<int>> x_field(int f) const { return {&x, f * max_x}; }
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
    if (u < 0 || in.cut[e]) continue;  // no edge, or a detached one: no gradient
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
  transfer_table tt{scratch<int>(5 * max_iv, unset), paged<int>(9 * max_x), max_iv, 0, max_x, 0};
  int* iv = tt.iv.data();
  paged<int>& x = tt.x;
  lower_transfers_in(in, iv, max_iv, x, max_x, tt.niv, tt.nx);
  return tt;
}

/// Pass 3's result: the slot of every buffer, by pool · stride + id, and of every compute op.
struct slot_table {
  scratch<int> of_buffer;  // [2 · stride]
  paged<int> compute;      // [3N]: input, incoming gradient, output per action (-1: none)
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
  // (the heaps are written before they are read: left unset, a run touches only what they hold at
  // once, about a rank's peak of live buffers, not a word per interval)
  fill_in(compute, 3 * N, -1), fill_in(slot_of, 2 * stride, -1);
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
  const auto& cut = in.cut;
  const auto& grad_begin = in.grad_begin;
  const auto& grad = in.grad;
  const int g0 = stride, o_gin = N, o_out = 2 * N;  // the gradient pool in slot_of; compute's fields
  for (int r = 0; r < P; ++r)
    for (int k = in.beg[r]; k < in.beg[r + 1]; ++k) {
      const action a = A[k];  // a copy: the cheapest read in constant evaluation
      const int s = a.stage, j = a.microbatch, pb = pred_begin[s], pe = pred_begin[s + 1], sb = grad_begin[s],
                nin = pe - pb, ngrad = a.what == kind::F ? 0 : grad_begin[s + 1] - sb,
                nout = a.what == kind::F   ? (succ_begin[s + 1] > succ_begin[s] ? 1 : 0)
                       : a.what == kind::W ? 0
                                           : pe - pb;
      // an input read over edge e (u → s): u's output when u is here, else e's received copy; the
      // gradient a backward writes for e: where the producer reads it, or its staging copy (none
      // over a detached edge: -1)
      if (nin <= 1 && ngrad <= 1 && nout <= 1) {  // (written out: a chain's every action comes here)
        const int e = nin == 1 ? pred[pb] : -1;
        const bool here = e >= 0 && owner[from[e]] == r;
        compute[k] = nin == 1 ? (here ? slot_of[2 * (from[e] * m + j) + 1] : slot_of[2 * (e * m + j)]) : -1,
        compute[o_gin + k] = ngrad == 1 ? slot_of[g0 + 2 * (grad[sb] * m + j)] : -1,
        compute[o_out + k] = nout != 1           ? -1
                             : a.what == kind::F ? slot_of[2 * (s * m + j) + 1]
                             : cut[e]            ? -1
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
      for (int i = 0; i < ngrad; ++i) lists.push_back(slot_of[g0 + 2 * (grad[sb + i] * m + j)]);
      if (a.what == kind::F && nout == 1) lists.push_back(slot_of[2 * (s * m + j) + 1]);
      if (a.what != kind::F)
        for (int i = 0; i < nout; ++i) {
          const int e = pred[pb + i];
          lists.push_back(cut[e] ? -1 : slot_of[g0 + 2 * (e * m + j) + (owner[from[e]] == r ? 0 : 1)]);
        }
    }
}

/// Pass 3 at run time.
constexpr slot_table assign_slots(const lowering_input& in, const transfer_table& tt, rank_resources* res) {
  const int P = in.P, N = in.N, niv = tt.niv;
  slot_table st{scratch<int>(2 * slot_table::stride_for(in), unset),
                paged<int>(3 * N),
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
  paged<int>& compute = st.compute;
  int* link = st.link.data();
  assign_slots_in(in, tt.iv.data(), tt.max_iv, niv, st.stride, res, slot_of, compute, link, st.lists, w);
  return st;
}

/// Pass 4's result: every transfer end, rank by rank and within a rank in issue order.
struct end_table {
  paged<int> fields;  // x, tick, slot, peer: one block, `stride` each (pass 5 frees it as it goes)
  scratch<char> own_send;
  scratch<int> own_begin;
  int* rank_begin = nullptr;  // [P + 1]: rank r's ends are [rank_begin[r], rank_begin[r + 1])
  char* send = nullptr;       // 1: the send end, 0: the receive
  int stride = 0;
  constexpr field_of<paged<int>> x() const { return {&fields, 0}; }  // each end's transfer
  constexpr field_of<paged<int>> tick() const { return {&fields, stride}; }
  constexpr field_of<paged<int>> slot() const { return {&fields, 2 * stride}; }  // its buffer's slot
  /// the rank on the other end (per_peer), or 0 (per_tick: one group a tick)
  constexpr field_of<paged<int>> peer() const { return {&fields, 3 * stride}; }
};

/// Pass 4: each rank's transfer ends in tick order (a stable sort of the transfers by tick, then
/// of their two ends by rank, so both ends of a channel see its transfers in one order), then
/// per group_policy: per_peer orders each (rank, tick) by peer, stably — one group per peer,
/// lowest peer first, or highest first where the tick's vote says so (below); every rank uses
/// the tick's one direction, so all take their (tick, rank pair) groups in one global order;
/// per_tick counts every end as the same "peer", so each tick keeps one group. Writes `ends`
/// (x, tick, slot, peer: EX each, EX ≥ 2·nx), send [EX] and rank_begin [P + 1]; `w` is scratch:
/// start [max(T + 3, P + 1)], order [nx + 1], key [2·nx + 2] and vote [2(T + 3)] (per_peer only).
template <class In, class X, class Slots, class Ends, class Send, class Begin, class Work>
constexpr void order_ends_in(const In& in, const X& x, int max_x, int nx, const Slots& slot_of, int stride,
                             group_policy groups, Ends& ends, int EX, Send& send, Begin& rank_begin, Work& w) {
  const int P = in.P;
  using tt = transfer_table;
  const int x_pool = tt::x_pool * max_x, x_mb = tt::x_mb * max_x, x_src = tt::x_src * max_x, x_dst = tt::x_dst * max_x,
            x_sid = tt::x_sid * max_x, x_did = tt::x_did * max_x, x_edge = tt::x_edge * max_x;
  auto& order = w.order;
  auto& key = w.key;
  auto& at = w.start;  // each rank's next end, once the sort by tick is done with `start`
  const int e_tick = EX, e_slot = 2 * EX, e_peer = 3 * EX;
  fill_in(ends, 4 * EX, 0);                               // (make_plan keeps the spare room too)
  counting_order_in(x, 0, nx, in.T + 2, w.start, order);  // by tick (field 0)
  // then by rank, stably: each transfer's send end, then its receive end, at its rank's next place
  for (int r = 0; r <= P; ++r) rank_begin[r] = 0;
  for (int t = 0; t < nx; ++t) ++rank_begin[x[x_src + t] + 1], ++rank_begin[x[x_dst + t] + 1];
  for (int r = 0; r < P; ++r) rank_begin[r + 1] += rank_begin[r];
  for (int r = 0; r < P; ++r) at[r] = rank_begin[r];
  for (int o = 0; o < nx; ++o) {
    const int t = order[o], es = at[x[x_src + t]]++, er = at[x[x_dst + t]]++, pool = x[x_pool + t] * stride;
    ends[es] = t, send[es] = 1, ends[e_tick + es] = x[t], ends[e_peer + es] = 0,
    ends[e_slot + es] = slot_of[pool + x[x_sid + t]];
    ends[er] = t, send[er] = 0, ends[e_tick + er] = x[t], ends[e_peer + er] = 0,
    ends[e_slot + er] = slot_of[pool + x[x_did + t]];
  }
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
  // per tick (a rank's ends of one tick are together), by key: one group per peer in the tick's
  // order. Per tick, every end has the same "peer" and nothing moves
  if (groups == group_policy::per_peer)
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
  end_table et{paged<int>(4 * stride), scratch<char>(stride, unset), scratch<int>(P + 1, unset)};
  et.rank_begin = et.own_begin.data(), et.send = et.own_send.data(), et.stride = stride;
  const int starts = (in.T + 3 > P + 1 ? in.T + 3 : P + 1);
  scratch<int> ints(starts + (nx + 1) + (2 * nx + 2) + 2 * (in.T + 3), unset);
  struct {
    int *start, *order, *key, *vote;
  } w{};
  w.start = ints.data(), w.order = w.start + starts, w.key = w.order + nx + 1, w.vote = w.key + 2 * nx + 2;
  order_ends_in(in, tt.x, tt.max_x, nx, st.of_buffer.data(), st.stride, groups, et.fields, stride, et.send,
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
  return count_ops_in(in, tt.nx, et.fields, et.stride, et.rank_begin);
}

/// The lowering's own inputs at run time (lowering_tables_in): stage owners, action positions
/// (by stage · m + microbatch) and the stage graph's edges.
struct lowering_tables {
  scratch<int> owner;
  scratch<int> pos;    // [3n]: posF, posG, last
  scratch<int> links;  // from, to [E], pred_begin [S + 1], pred [E], succ_begin [S + 1], succ [E], cut [E],
                       // grad_begin [S + 1], grad [E]
  lowering_shape shape;
};
constexpr lowering_tables lowering_tables_of(program_view p, const int* tick) {
  const lowering_shape sh = lowering_shape_of(p, tick);
  const int S = sh.S, n = sh.n, E = sh.E;
  lowering_tables lt{scratch<int>(S + 1, unset), scratch<int>(3 * n + 1, unset),
                     scratch<int>(6 * E + 3 * (S + 1) + 1, unset), sh};
  scratch<int> fill(3 * S + 1, unset);
  struct {
    int *owner, *posF, *posG, *last, *from, *to, *pred_begin, *pred, *succ_begin, *succ, *cut, *grad_begin, *grad,
        *fill;
  } t{};
  t.owner = lt.owner.data(), t.posF = lt.pos.data(), t.posG = t.posF + n, t.last = t.posF + 2 * n,
  t.from = lt.links.data(), t.to = t.from + E, t.pred_begin = t.to + E, t.pred = t.pred_begin + S + 1,
  t.succ_begin = t.pred + E, t.succ = t.succ_begin + S + 1, t.cut = t.succ + E, t.grad_begin = t.cut + E,
  t.grad = t.grad_begin + S + 1, t.fill = fill.data();
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
  in.cut = in.succ + in.E;
  in.grad_begin = in.cut + in.E;
  in.grad = in.grad_begin + in.S + 1;
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

}  // namespace pipetype
