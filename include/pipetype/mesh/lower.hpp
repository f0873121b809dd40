// pipetype/mesh/lower.hpp — a whole mesh step, op by op.
//
// lower_mesh() takes one verified pipeline plan (its compute program and lowered program), a
// mesh (core/mesh.hpp) and the step's collectives (mesh/collectives.hpp), and writes what
// every global rank issues: its pipeline rank's lowered ops, on its replica's communicators,
// with the collectives inserted where they were placed, on a third stream of their own:
//
//   stream 0  compute   the stage calls, in the pipeline's order; a RESHARD releases there
//   stream 1  comm      the pipeline's NCCL groups of sends and recvs
//   stream 2  dp        the collectives: all-reduce (REDUCE_GRAD, TIE), reduce-scatter
//                       (REDUCE_GRAD, sharded or ZeRO-1), all-gather (UNSHARD, PARAM_SYNC),
//                       GRAD_NORM, and the optimizer's OPT_STEP (local: after the compute
//                       stream's event, as a reduction)
//
// Events order them, as the pipeline's own streams are ordered: a reduction waits for an event
// recorded after its stage's last backward on the compute stream (bucketed, dp_options::buckets
// = N > 1: N all-reduces, bucket b of the gradient each (core/mesh.hpp bucket_of), and when the
// reduction follows its stage's own last weight backward, bucket b waits for the b-th of N events
// that backward records as it finishes writing bucket b — an executor records any it did not see
// at the backward's end — so the reduction overlaps the backward still running); a stage's first compute after
// an UNSHARD waits for the gather's event (an overlapped pair waits before its first half for both
// halves' stages); a RESHARD with no compute since its stage's UNSHARD waits for that gather; a
// gather waits for the event of the stage's previous RESHARD (it overwrites what that released). A step ends when every
// op, collectives included, has completed.
//
// Parameter slots (sharded, dp > 1): a rank holds each stage's shard for good and gathers a
// stage's whole parameters into a slot of its parameter pool. An UNSHARD takes the lowest free
// slot, a RESHARD returns it, in issue order; an UNSHARD also waits for the RESHARD that last
// returned its slot (another stage's, whose computes and RECOMPUTEs it overwrites). A compute or
// RECOMPUTE of a sharded stage names the slot it reads (mesh_op::param_slot), and
// mesh_program::param_slots is each rank's pool: at most the window, since the collectives hold
// at most `window` stages unsharded at once. The counts do not depend on the stages' sizes; an
// executor sizes a slot by the largest stage it holds. verify_mesh proves the slots
// (verify_param_slots).
//
// Communicators (mesh_comm): each replica's copy of every pipeline communicator (its two ranks
// mapped into the replica), one per DP group (pipeline rank r's replicas), one per tie group
// and replica that spans two ranks or more, and with GRAD_NORM or FINITE_CHECK (dp_options::grad_norm,
// finite_check) one of every global rank, after the others. A tie group within one rank needs none: its sum is a
// `local_sum` on the dp stream, ordered by events as an all-reduce would be.
//
// Its proof is mesh/verify.hpp's verify_mesh; build_mesh (mesh/plan.hpp) lowers and proves in one call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/core/mesh.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/mesh/activation_slots.hpp"
#include "pipetype/mesh/collectives.hpp"
#include "pipetype/mesh/memory_actions.hpp"
#include "pipetype/mesh/memory_slots.hpp"
#include "pipetype/mesh/ops.hpp"

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
  if (const verdict v = check_dp_options(o); !v.ok())
    throw std::invalid_argument(std::string("pipetype::lower_mesh: ") + v.detail);
  const int buckets = m.dp > 1 ? o.buckets : 1;
  if (const verdict v = check_mesh_ops(
          m, static_cast<long long>(l.ops.size() + c.ops.size() * static_cast<std::size_t>(buckets) + mem.ops.size()));
      !v.ok())
    throw std::length_error(std::string("pipetype::lower_mesh: ") + v.detail);
  mesh_program out;
  out.shape = m;
  out.buckets = buckets;
  out.zero = o.zero;
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
  // GRAD_NORM's and FINITE_CHECK's: every global rank, in increasing order
  int world_comm = -1;
  if (o.grad_norm || o.finite_check) {
    std::vector<int> members;
    for (int g = 0; g < m.size(); ++g) members.push_back(g);
    world_comm = static_cast<int>(out.comms.size());
    out.comms.push_back({mesh_comm_kind::world, -1, -1, std::move(members)});
  }
  // each global rank's ops
  out.begin.assign(static_cast<std::size_t>(m.size()) + 1, 0);
  out.events.assign(static_cast<std::size_t>(m.size()), 0);
  for (int g = 0; g < m.size(); ++g) {
    const int r = m.pipeline_rank(g), d = m.replica(g);
    const op_span ops = l.rank_ops(r);
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
    // parameter slots (sharded): the slot a gathered stage is in, the pool's states (0 free, 1
    // taken) and per slot the event of the RESHARD that last returned it
    std::vector<int> slot_of(static_cast<std::size_t>(p.stages), -1);
    std::vector<char> param_pool;
    std::vector<int> slot_released;
    std::size_t next = 0;  // the next collective
    std::vector<mesh_op> mine;
    // bucketed: per action, where in `mine` its compute op is (−1: none, or half of an overlapped
    // pair, which runs with its other half and records no bucket of its own)
    std::vector<int> compute_of(buckets > 1 ? acts.size() : 0, -1);
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
    // the gather a compute or RECOMPUTE of `stage` waits for on the compute stream, once (an
    // overlapped pair's first half also waits for its second half's stage: the second half may
    // run on a stream forked before it)
    auto wait_gathered = [&](int stage) {
      if (stage >= 0 && stage < p.stages && gathered[static_cast<std::size_t>(stage)] >= 0) {
        wait_on(0, gathered[static_cast<std::size_t>(stage)]);
        gathered[static_cast<std::size_t>(stage)] = -1;
      }
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
          // it runs the stage's forward, so it reads the parameters its UNSHARD gathers (issued
          // before it, with the collectives before the next action), as a compute does
          wait_gathered(a.stage);
          op.param_slot = slot_of[static_cast<std::size_t>(a.stage)];
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
          case collective_kind::reduce_grad: {
            if (m.dp <= 1) continue;
            op.code = scatters_gradients(o) ? mesh_op_code::reduce_scatter : mesh_op_code::all_reduce;
            op.comm = dp_comm[static_cast<std::size_t>(r)];
            // bucketed, right after the stage's own last weight backward: each bucket waits for the
            // event that backward records once it has written the bucket; else all wait for its end
            const int at = k >= 0 && static_cast<std::size_t>(k) < compute_of.size()
                               ? compute_of[static_cast<std::size_t>(k)]
                               : -1;
            mesh_op* wb = at >= 0 ? &mine[static_cast<std::size_t>(at)] : nullptr;
            const bool early =
                wb && wb->stage == x.stage && (wb->what == kind::B || wb->what == kind::W) && wb->bucket_event < 0;
            if (early) {
              wb->bucket_event = events;
              events += buckets;
            } else {
              after_k();
            }
            for (int b = 0; b < buckets; ++b) {
              if (early) wait_on(dp_stream, mine[static_cast<std::size_t>(at)].bucket_event + b);
              op.bucket = buckets > 1 ? b : -1;
              mine.push_back(op);
            }
            break;
          }
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
          case collective_kind::grad_norm:
          case collective_kind::finite_check:
            if (world_comm < 0) continue;
            after_k();
            op.code = x.what == collective_kind::grad_norm ? mesh_op_code::grad_norm : mesh_op_code::finite_check;
            op.comm = world_comm;
            op.stage = -1;
            mine.push_back(op);
            break;
          case collective_kind::optimizer_step:  // local: after what ran on the compute stream up to k
            after_k();
            op.code = mesh_op_code::optimizer_step;
            mine.push_back(op);
            break;
          case collective_kind::param_sync:
            if (m.dp <= 1) continue;
            op.code = mesh_op_code::param_sync;
            op.comm = dp_comm[static_cast<std::size_t>(r)];
            mine.push_back(op);
            break;
          case collective_kind::unshard: {
            if (m.dp <= 1) continue;
            const auto s = static_cast<std::size_t>(x.stage);
            bool reused = false;
            const int slot = detail::take_slot(param_pool, false, reused);
            if (static_cast<std::size_t>(slot) >= slot_released.size()) slot_released.push_back(-1);
            int& slot_free = slot_released[static_cast<std::size_t>(slot)];
            // it overwrites the stage's own array (parameters held by the stage) and its slot
            // (held by the executor): after the RESHARD of each
            if (released[s] >= 0) {
              wait_on(dp_stream, released[s]);
              if (slot_free == released[s]) slot_free = -1;
              released[s] = -1;
            }
            if (slot_free >= 0) wait_on(dp_stream, slot_free), slot_free = -1;
            slot_of[s] = slot;
            op.param_slot = slot;
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
              wait_on(0, gathered[s]);
              gathered[s] = -1;
            }
            op.param_slot = slot_of[s];
            if (slot_of[s] >= 0) param_pool[static_cast<std::size_t>(slot_of[s])] = 0;
            mine.push_back(op);
            released[s] = events++;
            record_on(0, released[s]);
            if (slot_of[s] >= 0) slot_released[static_cast<std::size_t>(slot_of[s])] = released[s];
            slot_of[s] = -1;
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
      if (x.code == op_code::compute && x.stage >= 0 && x.stage < p.stages)
        op.param_slot = slot_of[static_cast<std::size_t>(x.stage)];
      int k = -1;  // the compute action this op runs
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
      if (k >= 0 && !x.overlapped && deferred < 0 && static_cast<std::size_t>(k) < compute_of.size())
        compute_of[static_cast<std::size_t>(k)] = static_cast<int>(mine.size());
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
    if (o.shard && m.dp > 1) {
      out.param_slots.resize(static_cast<std::size_t>(m.size()), 0);
      out.param_slots[static_cast<std::size_t>(g)] = static_cast<int>(param_pool.size());
    }
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

}  // namespace pipetype
