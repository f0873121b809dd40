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
// The passes, in order (each a function of its own, tested in tests/compile/lower.test.cpp;
// passes 0–4 in compile/lower_tables.hpp, pass 5 and the driver here):
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

#include "pipetype/compile/lower_tables.hpp"
#include "pipetype/compile/lowered.hpp"
#include "pipetype/compile/saved_slots.hpp"
#include "pipetype/compile/verify.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/detail/heap.hpp"
#include "pipetype/detail/scratch.hpp"

namespace pipetype {

namespace detail {

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
  field_of<paged<int>> x{};         // transfer_table::x
  const int* edge_comm = nullptr;   // per edge
  field_of<paged<int>> compute{};   // slot_table::compute
  const int* link = nullptr;        // [N] slot_table::link (with edges)
  const int* lists = nullptr;       // slot_table::lists
  const int* rank_begin = nullptr;  // [P + 1] end_table::rank_begin
  field_of<paged<int>> ends{};      // end_table::fields
  const char* e_send = nullptr;     // end_table::send
};

constexpr rank_input rank_input_of(const lowering_input& in, const transfer_table& tt, const slot_table& st,
                                   const end_table& et, const int* edge_comm) {
  rank_input v;
  v.A = in.A, v.tick = in.tick, v.beg = in.beg, v.P = in.P, v.N = in.N, v.graph = in.graph;
  v.x = {&tt.x, 0}, v.MX = tt.max_x, v.edge_comm = edge_comm, v.compute = {&st.compute, 0}, v.link = st.link.data(),
  v.lists = st.lists.data(), v.rank_begin = et.rank_begin, v.ends = {&et.fields, 0}, v.EX = et.stride,
  v.e_send = et.send;
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
constexpr int lower_rank(const lowering_input& in, int r, const transfer_table& tt, const slot_table& st,
                         const end_table& et, const int* edge_comm, rank_scratch& ws, rank_resources& rr,
                         lowered_op* ops_out, int nout) {
  return lower_rank_in(rank_input_of(in, tt, st, et, edge_comm), r, ws, rr, ops_out, nout);
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
  lowering_tables lt = lowering_tables_of(p, tick_span.data());
  const lowering_input in = lowering_input_of(p, tick_span.data(), lt);
  const scratch<int> edge_comm = lower_communicators(in, policy, comms);
  transfer_table tt = lower_transfers(in);
  // the action positions are read by pass 2 and by pass 4's vote on each tick's peer order only:
  // each table is freed once no later pass reads it
  const group_policy grouping = resolve(groups, p);
  if (grouping != group_policy::per_peer) lt.pos = scratch<int>(0, unset);
  slot_table st = assign_slots(in, tt, res);
  tt.iv = scratch<int>(0, unset);  // the intervals are coloured: free them before the ops are made
  end_table et = order_ends(in, tt, st, grouping);
  st.of_buffer = scratch<int>(0, unset);  // each end has its slot
  lt.pos = scratch<int>(0, unset);
  for (const int f : {transfer_table::x_tick, transfer_table::x_sid, transfer_table::x_did})  // pass 5 reads the rest
    tt.x.release(f * tt.max_x, (f + 1) * tt.max_x);
  return then(in, tt, st, et, edge_comm.data(), count_ops(in, tt, et));
}

/// The lowering: the five passes into `out`, each rank's ops appended to `packed` when given,
/// else to `plain`. (One function for both forms: g++ instantiates a constexpr function's
/// templates where it is defined, so each form of its own would cost every includer.)
constexpr void lower_into(lowered_tables& out, std::vector<lowered_op>* plain, packed_ops* packed, program_view p,
                          std::span<const int> tick_span, comm_policy policy, group_policy groups) {
  out.ranks = p.ranks;
  out.policy = policy;
  out.resources.assign(static_cast<std::size_t>(p.ranks > 0 ? p.ranks : 0), rank_resources{});
  rank_resources* res = out.resources.data();
  lower_passes(p, tick_span, policy, groups, out.comms, res,
               [&](const lowering_input& in, const transfer_table& tt, slot_table& st, end_table& et,
                   const int* edge_comm, int count) {
                 const rank_input input = rank_input_of(in, tt, st, et, edge_comm);
                 rank_scratch ws = rank_scratch_for(input, res);
                 std::size_t most = 0;  // room for the largest rank: its computes, ends and groups
                 for (int r = 0; r < in.P; ++r) {
                   const int n = in.beg[r + 1] - in.beg[r] + 2 * (et.rank_begin[r + 1] - et.rank_begin[r]);
                   most = static_cast<std::size_t>(n) > most ? static_cast<std::size_t>(n) : most;
                 }
                 std::vector<lowered_op> buffer(most);
                 int nout = 0;
                 if (packed)
                   packed->reserve(static_cast<std::size_t>(count));
                 else
                   plain->reserve(static_cast<std::size_t>(count));
                 out.begin.reserve(static_cast<std::size_t>(in.P) + 1);
                 out.begin.push_back(0);
                 lowered_op* const ops = buffer.data();
                 for (int r = 0; r < in.P; ++r) {
                   const int n = lower_rank_in(input, r, ws, res[r], ops, 0);
                   assign_saved_slots(ops, 0, n, p.stages, p.microbatches, p.lane_length(), res[r]);
                   if (packed)
                     packed->append(ops, static_cast<std::size_t>(n));
                   else
                     plain->insert(plain->end(), ops, ops + n);
                   out.begin.push_back(nout += n);
                   // the rank's ends and its actions' slots are read: hand their pages back while
                   // the packed ops grow (the two tables are rank-major)
                   for (int f = 0; f < 4; ++f) et.fields.release(f * et.stride, f * et.stride + et.rank_begin[r + 1]);
                   for (int f = 0; f < 3; ++f) st.compute.release(f * in.N, f * in.N + in.beg[r + 1]);
                 }
                 out.slot_lists = std::move(st.lists);
                 return 0;
               });
}

}  // namespace detail

/// Lowers a verified program. `tick` is check_program's lock-step tick per action.
constexpr lowered_program lower(program_view p, std::span<const int> tick, comm_policy policy = comm_policy::per_edge,
                                group_policy groups = group_policy::automatic) {
  lowered_program out;
  detail::lower_into(out, &out.ops, nullptr, p, tick, policy, groups);
  return out;
}

/// The same lowering, its ops packed as they are made (packed_ops.hpp): what build_plan keeps.
constexpr packed_program lower_packed(program_view p, std::span<const int> tick,
                                      comm_policy policy = comm_policy::per_edge,
                                      group_policy groups = group_policy::automatic) {
  packed_program out;
  detail::lower_into(out, nullptr, &out.ops, p, tick, policy, groups);
  return out;
}

}  // namespace pipetype
