// pipetype/host/mesh_binding.hpp — a mesh step bound to its replicas' stages, for host threads.
//
// bind_mesh() binds each replica's pipeline program to that replica's model (binding.hpp: its
// buffers, its stages' entry points), then writes every global rank's op lists from the proven
// mesh program (mesh/lower.hpp, proved by mesh/verify.hpp), one bound op per mesh op: the pipeline's ops as the
// replica bound them, on the replica's copies of the communicators; on the data-parallel stream
// each collective as a call into the mesh's `collectives` (collective.hpp), which carries the
// member's arrays (a stage's weight_gradients(), parameters() or tied_gradients(tie)); a RESHARD
// as a release on the compute stream; an event's record or wait as an op that does nothing else.
// Events resolve as in binding.hpp, now over three streams. Nothing is decided here either: the
// bound ops are the mesh program's, in its order.
//
// With memory actions (mesh_binding_options::memory; mesh/memory_actions.hpp) the stashes are in
// the slots the step's lowering gave them (mesh/memory_slots.hpp), not the replicas' bindings,
// per global rank: a stash pool of the step's peak in slots, a host pool, a scratch stash for
// recomputed forwards and a scratch output for RECOMPUTE; an OFFLOAD and a RELOAD are copies on the
// copy stream (an OFFLOAD then fills the device slot with 0xFF bytes, NaN in a float, with
// poison_offloaded, so that a read before the RELOAD shows), a RECOMPUTE the microbatch's forward
// again into its slot; every op that takes or frees a slot counts it in the rank's memory_use (the
// measured high-water mark).
//
// Refused, with one sentence each (shape_error for the model, std::invalid_argument for the
// plan): a mesh that is not the plan's (pp) or the options' (dp); a plan with several lanes
// (DualPipe: not over a mesh yet); collectives check_collectives or verify_mesh reject; a stage
// whose gradients pipetype cannot see (no weight_grad) when replicas reduce them; a sharded stage
// without parameters(); a tied stage without tied_gradients(tie), or tied arrays of different sizes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pipetype/bind/layout.hpp"
#include "pipetype/bind/memory_layout.hpp"
#include "pipetype/bind/norm_parts.hpp"
#include "pipetype/core/mesh.hpp"
#include "pipetype/host/binding.hpp"
#include "pipetype/host/collective.hpp"
#include "pipetype/mesh/collectives.hpp"
#include "pipetype/mesh/plan.hpp"
#include "pipetype/mesh/verify.hpp"
#include "pipetype/mesh/verify_memory.hpp"

namespace pipetype::host {

/// One global rank's pools for a step with memory actions: the slots the lowering assigned
/// (mesh/memory_slots.hpp), handed over by bind/memory_layout.hpp.
struct stash_pool {
  pipetype::detail::aligned_bytes device, host, scratch_stash, scratch_out;
  std::size_t stride = 0;       // a stash slot
  std::size_t host_stride = 0;  // a host slot: a stash, then the inputs the copy moves (activation slots)
  int device_slots = 0, host_slots = 0;
  memory_use use;  // slots in use as the ops run, and the most at once
  // the activation pool the step plans (mesh/activation_slots.hpp), and its fan-ins' address lists
  pipetype::detail::aligned_bytes activations;
  std::size_t activation_stride = 0;
  int activation_slots = 0, lowered_activation_slots = 0;  // the step's, and the lowering's without actions
  std::vector<std::byte*> lists;
};

/// One global rank's parameters under FSDP when its stages lend them (graph/stage.hpp,
/// lends_parameters): each lending stage's own shard, held for good, and the slots the step's
/// gathers fill (mesh/lower.hpp: mesh_program::param_slots), each the size of the rank's largest
/// lending stage. The stages' own parameters() arrays are read once, at binding, for the shards.
struct param_pool {
  std::vector<pipetype::detail::aligned_bytes> shards;  // per plan stage: its shard (empty: not lent here)
  std::vector<shard_range> ranges;                      // per plan stage: the shard's elements
  std::vector<std::size_t> elem_size;                   // per plan stage: its parameters' element size
  pipetype::detail::aligned_bytes slots;
  std::size_t stride = 0;  // a slot's bytes
  int slot_count = 0;
  memory_use use;  // slots in use as the ops run, and the most at once
  std::size_t bytes() const noexcept {
    std::size_t n = stride * static_cast<std::size_t>(slot_count);
    for (std::size_t s = 0; s < shards.size(); ++s) n += ranges[s].size() * elem_size[s];
    return n;
  }
};

/// An OFFLOAD's or RELOAD's copy: its stash, then each input it moves.
struct copy_call {
  struct part {
    const std::byte* from = nullptr;
    std::byte* to = nullptr;
    std::size_t bytes = 0;
    std::byte* poison = nullptr;  // filled with 0xFF after the copy (an OFFLOAD's device slot); nullptr: none
  };
  std::vector<part> parts;
};

/// An OPT_STEP (the stage's optimizer hook, graph/stage.hpp): what the dp-stream op calls.
struct optimizer_call {
  void* stage = nullptr;
  optimize_fn fn = nullptr;  // nullptr: a stage without parameters, nothing to update
  optimizer_args args{};
  const double* norm_sq = nullptr;  // the rank's GRAD_NORM total, read as the call runs (nullptr: none)
  const char* finite = nullptr;     // the rank's FINITE_CHECK answer, likewise (nullptr: none)
};

/// What a bound mesh program keeps beside its op lists: the lists point into it.
struct mesh_state {
  mesh shape{};
  dp_options options{};
  mesh_program program;                 // the proven program the lists were written from
  std::vector<bound_program> replicas;  // replica d's pipeline bound to its model (buffers, entries)
  std::deque<collective_call> calls;    // the data-parallel stream's ops' objects
  std::unique_ptr<collectives> fabric;
  std::vector<int> replica_of;                     // per global rank
  memory_program memory{};                         // the memory actions (ranks 0: none)
  std::vector<std::unique_ptr<stash_pool>> pools;  // per global rank, with memory actions
  std::deque<copy_call> copies;
  std::vector<std::unique_ptr<param_pool>> params;  // per global rank, sharded: nullptr where no stage lends
  std::vector<int> stage_rank;                      // per plan stage: its pipeline rank
  std::deque<bucket_marks> marks;                   // a bucketed step: its last weight backwards' buckets
  std::vector<double> grad_norm_sq;                 // per global rank: the last GRAD_NORM's total (Σ x²)
  std::vector<char> finite;                         // per global rank: the last FINITE_CHECK's answer
  std::deque<optimizer_call> optimizer_calls;       // the OPT_STEPs' (dp_options::optimizer, zero)
};

struct mesh_binding_options {
  binding_options bind{};
  std::chrono::milliseconds deadline{std::chrono::seconds(30)};
  bool poison_released = true;             // a release (RESHARD) fills the parameters a replica does not own with NaN
  const memory_program* memory = nullptr;  // OFFLOAD, RELOAD, RECOMPUTE (nullptr or empty: none)
  bool poison_offloaded = true;            // an OFFLOAD fills the device slot it copied with 0xFF bytes
};

namespace detail {

inline void run_collective_call(void* obj, const bound_op&, const step_feed&) {
  collective_call& c = *static_cast<collective_call*>(obj);
  c.fabric->run(c);
}

inline void run_optimizer_call(void* obj, const bound_op&, const step_feed&) {
  optimizer_call& c = *static_cast<optimizer_call*>(obj);
  if (c.norm_sq) c.args.grad_norm = std::sqrt(*c.norm_sq);
  if (c.finite) c.args.finite = *c.finite != 0;
  if (c.fn) c.fn(c.stage, c.args);
}

inline void run_copy_call(void* obj, const bound_op&, const step_feed&) {
  for (const copy_call::part& c : static_cast<const copy_call*>(obj)->parts) {
    if (c.bytes) std::memcpy(c.to, c.from, c.bytes);
    if (c.poison && c.bytes) std::memset(c.poison, 0xFF, c.bytes);
  }
}

}  // namespace detail

/// Binds the mesh step of plan `v` on mesh `m` with collectives `c` (placed for options `o`) to
/// each replica's stages (`entries[d]`, one list per replica), filling `st`; returns every global
/// rank's op lists.
inline bound_program bind_mesh(const plan_views& v, const mesh& m, const dp_options& o, const collective_program& c,
                               std::vector<std::vector<stage_entry>> entries, const mesh_binding_options& opt,
                               mesh_state& st) {
  const program_view& p = v.compute;
  const lowered_view& l = v.lowered;
  const std::string who = "pipetype::host: ";
  if (p.lanes > 1)
    throw std::invalid_argument(who + "a plan of " + std::to_string(p.lanes) +
                                " lanes (DualPipe) does not run over a mesh yet: each stage lives on two ranks of a "
                                "replica, whose copies would need a reduction of their own");
  st.shape = m;
  st.options = o;
  const bool with_memory = opt.memory != nullptr && !opt.memory->empty();
  st.memory = with_memory ? *opt.memory : memory_program{};
  st.program = with_memory ? build_mesh(p, l, m, c, o, st.memory, "pipetype::host")
                           : build_mesh(p, l, m, c, o, "pipetype::host");
  const mesh_program& mp = st.program;
  if (static_cast<int>(entries.size()) != m.dp && m.dp >= 1)
    throw std::invalid_argument(who + "the mesh has " + std::to_string(m.dp) + " replicas but " +
                                std::to_string(entries.size()) + " models were given (one per replica)");

  st.replicas.clear();
  binding_options bo = opt.bind;
  bo.place_stashes = !with_memory;  // with memory actions, the mesh step's slots hold them
  for (int d = 0; d < m.dp; ++d)
    st.replicas.push_back(host::bind(v, std::move(entries[static_cast<std::size_t>(d)]), bo));
  st.pools.clear();
  st.copies.clear();
  st.params.clear();
  st.params.resize(static_cast<std::size_t>(m.size()));
  st.stage_rank.assign(p.stage_rank.begin(), p.stage_rank.end());
  std::vector<std::vector<int>> members;
  for (const mesh_comm& mc : mp.comms)
    members.push_back(mc.what == mesh_comm_kind::pipeline ? std::vector<int>{} : mc.members);
  st.fabric = std::make_unique<collectives>(std::move(members), opt.deadline);
  st.calls.clear();
  st.optimizer_calls.clear();
  st.replica_of.assign(static_cast<std::size_t>(m.size()), 0);

  bound_program out;
  out.ranks = m.size();
  out.stages = p.stages;
  out.microbatches = p.microbatches;
  out.forward_only = is_forward_only(p);
  out.comms = static_cast<int>(mp.comms.size());
  out.sources = st.replicas.front().sources;
  out.batch_bytes = st.replicas.front().batch_bytes;
  out.batch = st.replicas.front().batch;
  out.rank.resize(static_cast<std::size_t>(m.size()));
  const int L = p.lane_length();
  // GRAD_NORM's parts on global rank g (bind/norm_parts.hpp), each squared by its stage's sumsq
  st.grad_norm_sq.assign(static_cast<std::size_t>(m.size()), 0.0);
  st.finite.assign(static_cast<std::size_t>(m.size()), 1);
  auto norm_parts_of = [&](collective_call& call, int r, int g, auto&& entry_of) {
    std::vector<int> here;
    for (int s = 0; s < p.stages; ++s)
      if (p.stage_rank[static_cast<std::size_t>(s)] == r) here.push_back(s);
    auto squares = [](const stage_entry& e, int s) {
      if (!e.sumsq)
        throw shape_error("pipetype::host: stage " + std::to_string(s) +
                          "'s weight gradients are of no arithmetic type: GRAD_NORM cannot square them");
    };
    for (const pipetype::detail::norm_part& q :
         pipetype::detail::norm_parts(mp, here, g, entry_of, squares, "pipetype::host"))
      call.norm_parts.push_back({q.array.data(), q.begin, q.end, entry_of(q.stage).sumsq});
  };
  for (int g = 0; g < m.size(); ++g) {
    const int r = m.pipeline_rank(g), d = m.replica(g);
    st.replica_of[static_cast<std::size_t>(g)] = d;
    const bound_program& rep = st.replicas[static_cast<std::size_t>(d)];
    const bound_rank& br = rep.rank[static_cast<std::size_t>(r)];
    const std::vector<stage_entry>& E = rep.entries;
    auto entry_of = [&](int stage) -> const stage_entry& {  // a plan stage's (a later lane's: its model stage's)
      return E[static_cast<std::size_t>(stage % L) % E.size()];
    };
    // where each lowered op of the pipeline rank was bound: (stream, position)
    std::vector<std::pair<int, int>> where(l.rank_ops(r).size(), {-1, -1});
    for (int s = 0; s < stream_count; ++s)
      for (std::size_t k = 0; k < br.ops[s].size(); ++k)
        where.at(static_cast<std::size_t>(br.ops[s][k].index)) = {s, static_cast<int>(k)};
    bound_rank& nr = out.rank[static_cast<std::size_t>(g)];
    nr.adds = br.adds;  // the ops' add_begin index these
    pipetype::detail::op_lists lists(nr, mp.events[static_cast<std::size_t>(g)]);
    // with memory actions: the rank's pools, and where each op's stash is
    pipetype::detail::memory_layout ml;
    stash_pool* pool = nullptr;
    if (with_memory) {
      ml = pipetype::detail::memory_layout_of(st.memory, mp, g, br.stash_stride);
      pipetype::detail::check_offloads_movable(mp, g, entry_of);
      pool = st.pools.emplace_back(std::make_unique<stash_pool>()).get();
      pool->stride = ml.stride;
      pool->device_slots = ml.device_slots;
      pool->host_slots = ml.host_slots;
      pool->device = pipetype::detail::aligned_bytes(ml.stride * static_cast<std::size_t>(ml.device_slots));
      pool->scratch_stash = pipetype::detail::aligned_bytes(ml.stride);
      std::size_t out_bytes = 0;
      for (const action& a : p.rank_actions(r))
        out_bytes = std::max(out_bytes, entry_of(a.stage).out.bytes);
      pool->scratch_out = pipetype::detail::aligned_bytes(pipetype::detail::round_up64(out_bytes));
      pool->activation_stride = br.activation_stride;
      pool->activation_slots = mp.activation_slots.at(static_cast<std::size_t>(g));
      pool->lowered_activation_slots = l.resources[static_cast<std::size_t>(r)].activation_slots;
      pool->activations =
          pipetype::detail::aligned_bytes(pool->activation_stride * static_cast<std::size_t>(pool->activation_slots));
      pool->lists.reserve(br.lists.capacity());
      pool->host_stride = ml.stride + pool->activation_stride * pipetype::detail::most_moved_inputs(mp, g);
      pool->host = pipetype::detail::aligned_bytes(pool->host_stride * static_cast<std::size_t>(ml.host_slots));
    }
    // sharded, with stages that lend their parameters: the rank's shards and parameter slots
    param_pool* lent = nullptr;
    if (!mp.param_slots.empty()) {
      const std::size_t stride = pipetype::detail::lent_slot_bytes(
          p.stages, [&](int s) { return p.stage_rank[static_cast<std::size_t>(s)] == r; }, entry_of, 64);
      if (stride > 0) {
        lent = (st.params[static_cast<std::size_t>(g)] = std::make_unique<param_pool>()).get();
        lent->stride = stride;
        lent->slot_count = mp.param_slots[static_cast<std::size_t>(g)];
        lent->slots = pipetype::detail::aligned_bytes(stride * static_cast<std::size_t>(lent->slot_count));
        lent->shards.resize(static_cast<std::size_t>(p.stages));
        lent->ranges.resize(static_cast<std::size_t>(p.stages));
        lent->elem_size.assign(static_cast<std::size_t>(p.stages), 0);
        for (int s = 0; s < p.stages; ++s) {
          const stage_entry& e = entry_of(s);
          if (p.stage_rank[static_cast<std::size_t>(s)] != r || !e.lends_params) continue;
          const std::span<std::byte> own_array = pipetype::detail::lent_array(e, who + "stage " + std::to_string(s));
          const shard_range own = shard_of(e.param_elems, m.dp, d);
          const auto k = static_cast<std::size_t>(s);
          lent->ranges[k] = own;
          lent->elem_size[k] = e.param_size;
          lent->shards[k] = pipetype::detail::aligned_bytes(own.size() * e.param_size);
          if (own.size() > 0)
            std::memcpy(lent->shards[k].data(), own_array.data() + own.begin * e.param_size, own.size() * e.param_size);
        }
      }
    }
    // the slot a lending stage's op reads or fills (nullptr: the stage's own array)
    auto held_slot = [&](int stage, int slot) -> std::byte* {
      if (lent == nullptr || slot < 0 || stage < 0 || !entry_of(stage).lends_params) return nullptr;
      return lent->slots.data() + lent->stride * static_cast<std::size_t>(slot);
    };
    auto device_at = [&](std::size_t i) -> std::byte* {
      const mesh_op& held = ml.ops[i];
      if (held.scratch) return ml.stride ? pool->scratch_stash.data() : nullptr;
      return held.stash_slot >= 0 && ml.stride
                 ? pool->device.data() + ml.stride * static_cast<std::size_t>(held.stash_slot)
                 : nullptr;
    };
    // the step's own activation slots (mesh/activation_slots.hpp): an address the replica bound
    // into its lowered pool becomes the one this op finds it at in the step's pool
    const op_span low = l.rank_ops(r);
    auto act_of = [&](int slot) {
      return slot < 0 ? nullptr : pool->activations.data() + pool->activation_stride * static_cast<std::size_t>(slot);
    };
    auto lowered_at = [&](int slot) {
      return slot < 0 ? nullptr : br.activations.data() + br.activation_stride * static_cast<std::size_t>(slot);
    };
    auto move_to_step = [&](bound_op& b, const mesh_op& at, const lowered_op& x, bool outputs) {
      auto moved = [&](std::byte* bound, int lowered) {
        if (bound == nullptr || bound != lowered_at(lowered)) return bound;  // the batch, or a kept output
        const int k = mp.act_slot(at, lowered);
        if (k < 0) throw std::logic_error("pipetype::host: an activation the mesh step does not place");
        return act_of(k);
      };
      if (x.code == op_code::send || x.code == op_code::recv) {
        if (x.what == kind::F) b.buf = moved(b.buf, x.slot);
        return;
      }
      const op_slots sl = l.slots_of(x);
      if (!sl.in.empty()) b.in = moved(b.in, sl.in[0]);
      if (b.n_inputs > 1) {
        std::byte* const* first = pool->lists.data() + pool->lists.size();
        for (std::size_t q = 0; q < sl.in.size(); ++q) pool->lists.push_back(moved(b.in_list[q], sl.in[q]));
        b.in_list = first;
      }
      if (outputs && x.what == kind::F && !sl.out.empty()) b.out = moved(b.out, sl.out[0]);
    };
    const std::span<const mesh_op> gops = mp.rank_ops(g);
    for (const mesh_op& o2 : gops) {
      bound_op b;
      std::string label;
      int wait_event = o2.wait_event, record_event = o2.record_event;
      bool force_record = false;  // a bucketed backward publishes its end, recording or not
      const auto i = static_cast<std::size_t>(&o2 - gops.data());
      if (o2.source >= 0) {  // the pipeline's op, as the replica bound it
        const auto [s, k] = where.at(static_cast<std::size_t>(o2.source));
        b = br.ops[s][static_cast<std::size_t>(k)];
        label = br.labels[s][static_cast<std::size_t>(k)];
        b.wait = 0;
        b.record = false;
        if (b.code == op_code::send || b.code == op_code::recv) {
          b.comm = o2.comm;
          b.peer = o2.peer;
        }
        if (b.code == op_code::compute) b.set_params(held_slot(o2.stage, o2.param_slot));
        if (o2.bucket_event >= 0) {
          // a bucketed step's last weight backward: a mark op before it per bucket, whose position
          // the bucket's reduction waits for; the backward publishes them as it adds each bucket
          // (add_buckets_through), at its end at the latest (it records)
          const int first = static_cast<int>(nr.ops[static_cast<std::size_t>(o2.stream)].size()) + 1;
          for (int q = 0; q < mp.buckets; ++q)
            lists.add_mark(o2.stream, "bucket " + std::to_string(q) + " of " + label, o2.bucket_event + q,
                           static_cast<int>(i));
          if (b.entry && b.entry->add_range) {
            bucket_marks& mk = st.marks.emplace_back();
            mk.signal = {mp.buckets, &pipetype::detail::buckets_ready_call, &mk};
            mk.rank = g;
            mk.first = first;
            mk.elems = b.entry->weight_grad_elems;
            mk.stage = b.obj;
            mk.adds = nr.adds.data() + b.add_begin;
            mk.add_count = b.add_count;
            mk.add_range = b.entry->add_range;
            mk.call = b.fn;
            b.set_marks(&mk);
            b.fn = &pipetype::detail::run_bucketed;  // its adds are the marks' now
            b.add_count = 0;
          }
          force_record = true;
        }
        if (pool && b.code == op_code::compute) {
          b.stash = device_at(i);
          b.recomputed = ml.ops[i].scratch;  // (its RECOMPUTE, below, copies the replica's op: false)
        }
        if (pool && o2.act >= 0) move_to_step(b, o2, low[static_cast<std::size_t>(o2.source)], true);
      } else if (pool && (is_copy(o2.code) || o2.code == mesh_op_code::recompute)) {
        const stage_entry& e = entry_of(o2.stage);
        label = pipetype::detail::mesh_op_label(o2, false);
        if (o2.code == mesh_op_code::recompute) {  // the microbatch's forward again, into its slot
          const bound_op* f = nullptr;
          for (const bound_op& x : br.ops[0])
            if (x.code == op_code::compute && x.what == kind::F && x.plan_stage == o2.stage &&
                x.microbatch == o2.microbatch)
              f = &x;
          if (f == nullptr) throw std::invalid_argument("pipetype::host: a RECOMPUTE with no forward on its rank");
          b = *f;
          b.wait = 0;
          b.record = false;
          b.stash = device_at(i);
          if (o2.act >= 0) move_to_step(b, o2, low[static_cast<std::size_t>(f->index)], false);
          b.out = pool->scratch_out.data();  // its output is read from the forward's slot, not this one
          b.set_params(held_slot(o2.stage, o2.param_slot));
        } else {
          copy_call& cc = st.copies.emplace_back();
          const bool out_of = o2.code == mesh_op_code::offload;
          std::byte* hst = ml.ops[i].host_slot >= 0 && pool->host_stride
                               ? pool->host.data() + pool->host_stride * static_cast<std::size_t>(ml.ops[i].host_slot)
                               : nullptr;
          // its stash, then each input it moves, each in a block of the host slot
          auto part = [&](std::byte* dev, std::byte* host, std::size_t bytes) {
            if (!dev || !host || !bytes) return;  // (a recomputed forward's: nothing is on the device)
            cc.parts.push_back(
                {out_of ? dev : host, out_of ? host : dev, bytes, out_of && opt.poison_offloaded ? dev : nullptr});
          };
          if (ml.stride) part(device_at(i), hst, e.stash_bytes());
          for (int q = 0; q < mp.act_count(o2); ++q)
            part(act_of(mp.act_at(o2, q).slot),
                 hst ? hst + ml.stride + pool->activation_stride * static_cast<std::size_t>(q) : nullptr,
                 pipetype::detail::moved_input_bytes(e, mp.act_count(o2), pool->activation_stride));
          b.code = op_code::collective;
          b.stage = o2.stage % L;
          b.plan_stage = o2.stage;
          b.microbatch = o2.microbatch;
          b.fn = &detail::run_copy_call;
          b.obj = &cc;
        }
      } else if (o2.code == mesh_op_code::optimizer_step) {
        // the stage's optimizer on the part this replica updates: its shard when the gradients are
        // scattered (where pipetype holds it, when lent), else the whole
        const stage_entry& e = entry_of(o2.stage);
        const shard_range own =
            pipetype::detail::optimizer_part(e, o2.stage, scatters_gradients(o), m.dp, d, "pipetype::host");
        const bool held = lent != nullptr && e.lends_params;
        optimizer_call& oc = st.optimizer_calls.emplace_back();
        if (e.optimize) {  // (none: a stage without parameters, which may lack parameters() too)
          oc.stage = e.obj;
          oc.fn = e.optimize;
          oc.args.stage = o2.stage % L;
          oc.args.params = held ? lent->shards[static_cast<std::size_t>(o2.stage)].data()
                                : e.params_of(e.obj, -1).data() + own.begin * e.param_size;
          oc.args.grads = e.weight_grads_of(e.obj, -1).data();
          oc.args.offset = own.begin;
          oc.args.elems = own.size();
          oc.args.replica = d;
          oc.args.replicas = m.dp;
        }
        if (o.grad_norm) oc.norm_sq = &st.grad_norm_sq[static_cast<std::size_t>(g)];
        if (o.finite_check) oc.finite = &st.finite[static_cast<std::size_t>(g)];
        b.code = op_code::collective;
        b.stage = o2.stage % L;
        b.plan_stage = o2.stage;
        b.fn = &detail::run_optimizer_call;
        b.obj = &oc;
        label = pipetype::detail::mesh_op_label(o2, false);
      } else {
        b.code = op_code::collective;
        b.stage = o2.stage >= 0 ? o2.stage % L : -1;
        b.plan_stage = o2.stage;
        if (o2.code == mesh_op_code::record || o2.code == mesh_op_code::wait) {
          (o2.code == mesh_op_code::record ? record_event : wait_event) = o2.event;
          label = std::string(o2.code == mesh_op_code::record ? "record" : "wait") + " e" + std::to_string(o2.event);
        } else {
          collective_call& call = st.calls.emplace_back();
          call.what = o2.code;
          call.comm = o2.comm;
          call.rank = g;
          call.stage = o2.stage;
          call.tie = o2.tie;
          call.fabric = st.fabric.get();
          if (o2.comm >= 0) {
            const std::vector<int>& ms = mp.comms[static_cast<std::size_t>(o2.comm)].members;
            call.members = static_cast<int>(ms.size());
            call.member = static_cast<int>(std::lower_bound(ms.begin(), ms.end(), g) - ms.begin());
          } else if (o2.code == mesh_op_code::release) {
            call.members = m.dp;  // the DP group's shards: replica d owns shard d
            call.member = d;
          }
          // the stages whose arrays it works on: its stage, or the tie group's stages on this rank
          // (GRAD_NORM: none; its parts are every stage's of the rank, norm_parts_of's)
          std::vector<int> stages;
          if (o2.code == mesh_op_code::grad_norm || o2.code == mesh_op_code::finite_check) {
            norm_parts_of(call, r, g, entry_of);  // (FINITE_CHECK: the same parts, whether their sum is finite)
            if (o2.code == mesh_op_code::grad_norm)
              call.norm_sum = &st.grad_norm_sq[static_cast<std::size_t>(g)];
            else
              call.finite = &st.finite[static_cast<std::size_t>(g)];
          } else if (o2.tie >= 0) {
            for (const int s : mp.ties.at(static_cast<std::size_t>(o2.tie)))
              if (p.stage_rank[static_cast<std::size_t>(s)] == r) stages.push_back(s);
            std::sort(stages.begin(), stages.end());
          } else {
            stages.push_back(o2.stage);
          }
          for (const int s : stages) {
            const stage_entry& e = entry_of(s);
            std::size_t size = 0;
            const bool of_params = o2.code == mesh_op_code::all_gather || o2.code == mesh_op_code::release ||
                                   o2.code == mesh_op_code::param_sync;
            std::span<std::byte> a =
                pipetype::detail::collective_array(e, of_params, o2.tie, s, size, "pipetype::host");
            if (std::byte* slot = of_params ? held_slot(s, o2.param_slot) : nullptr) {
              // held by pipetype: the gather fills the slot from the shards; the release returns it
              a = {slot, e.param_elems * e.param_size};
              call.held = true;
              call.shard = lent->shards[static_cast<std::size_t>(s)].data();
              b.use = &lent->use;
              b.counted = true;
              (o2.code == mesh_op_code::all_gather ? b.taken : b.freed_after) =
                  static_cast<std::int8_t>(o2.code == mesh_op_code::all_gather ? 1 : -1);
            }
            std::size_t elems = size ? a.size() / size : 0;
            if (o2.bucket >= 0) {  // a bucket of a REDUCE_GRAD: its part of the gradient (bucket_of)
              if (elems != 0 && elems < static_cast<std::size_t>(mp.buckets))
                throw shape_error(who + "stage " + std::to_string(s) + " has " + std::to_string(elems) +
                                  " weight-gradient elements, fewer than the step's " + std::to_string(mp.buckets) +
                                  " buckets");
              const shard_range part = bucket_of(elems, mp.buckets, o2.bucket);
              a = a.subspan(part.begin * size, part.size() * size);
              call.offset = part.begin;
              call.whole = elems;
              elems = part.size();
              call.bucket = o2.bucket;
            }
            if (!call.parts.empty() && elems != call.elems)
              throw shape_error(who + "tie group " + std::to_string(o2.tie) + "'s tied gradients differ in size: " +
                                std::to_string(call.elems) + " elements on stage " + std::to_string(stages.front()) +
                                ", " + std::to_string(elems) + " on stage " + std::to_string(s));
            call.parts.push_back(a.data());
            call.elems = elems;
            call.size = size;
            call.reduce = e.reduce;
            if (opt.poison_released) call.poison = e.poison;
          }
          call.label = pipetype::detail::mesh_op_label(o2);
          label = call.label;
          b.fn = &detail::run_collective_call;
          b.obj = &call;
        }
      }
      b.index = static_cast<int>(i);  // failures() name the mesh program's op
      if (pool && (ml.ops[i].freed_before || ml.ops[i].taken || ml.ops[i].freed_after)) {
        b.use = &pool->use;
        b.counted = true;
        b.freed_before = ml.ops[i].freed_before;
        b.taken = ml.ops[i].taken;
        b.freed_after = ml.ops[i].freed_after;
      }
      lists.add(b, o2.stream, std::move(label), wait_event, record_event);
      if (force_record) nr.ops[static_cast<std::size_t>(o2.stream)].back().record = true;
    }
  }
  return out;
}

}  // namespace pipetype::host
