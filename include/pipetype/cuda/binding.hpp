// pipetype/cuda/binding.hpp — one rank's lowered program bound to a device driver, once.
//
// What the device executor (cuda/executor.hpp) does before its first step, as the host binding
// (host/binding.hpp) does for host threads: buffer slots become addresses in pools the driver
// allocates (activations, gradients, stashes; with memory actions the step's pools and a block
// of pinned host memory), event ids become events from the driver, stream ids its streams,
// communicator ids the transport's communicators, stages their erased calls (bind_compute).
// The result is the issue list the executor walks, one issue_op per op, in lowered order (a
// mesh step: its mesh program's order), and nothing a step allocates or decides.
//
// bind() is five steps, each a pass of its own over the rank's ops:
//   place_pools     the pools (the plan's, or a mesh step's with memory actions)
//   place_sinks     the losses and kept outputs of the sinks on this rank
//   place_weights   the held weight gradients and their adds (plan_weight_grads)
//   make_streams    events, streams, fences (pairs, a mesh's dp stream, a copy stream)
//   bind_ops        the issue list: bind_compute_op, bind_transfer, bind_memory_op (OFFLOAD,
//                   RELOAD, RECOMPUTE) and bind_mesh_op (a mesh step's records, waits, collectives)
// A binding refused half-way leaves what it allocated in `owned`, which free_owned() frees.
//
// The issue primitives both walks share (the eager run and the unrolled step, cuda/unrolled.hpp)
// live here too: compute, fence, add_later.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipetype/bind/batch.hpp"
#include "pipetype/bind/checks.hpp"
#include "pipetype/bind/layout.hpp"
#include "pipetype/bind/memory_layout.hpp"
#include "pipetype/bind/norm_parts.hpp"
#include "pipetype/bind/stage_entry.hpp"
#include "pipetype/compile/lowered.hpp"
#include "pipetype/core/mesh.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/cuda/capture.hpp"
#include "pipetype/cuda/driver.hpp"
#include "pipetype/mesh/verify.hpp"

#if defined(__GNUC__) || defined(__clang__)
#define PIPETYPE_INLINE [[gnu::always_inline]] inline
#else
#define PIPETYPE_INLINE inline
#endif

namespace pipetype::cuda::detail {

template <device_driver D>
struct device_binding {
  using stream = typename D::stream;
  using event = typename D::event;
  using comm = typename D::comm;

  struct transfer {
    bool send = false;
    int peer = -1;  // in the communicator
    void* buf = nullptr;
    std::size_t bytes = 0;
    comm c{};
    const bound_op* varies = nullptr;  // tensors that vary per microbatch: its bytes (transfer_bytes)
  };
  struct later_add {
    add_fn add = nullptr;
    void* obj = nullptr;
    const std::byte* grad = nullptr;
    int stage = -1, microbatch = -1;
  };
  // One collective of a mesh step, bound: the stage's array (device memory), its elements and
  // kind, the communicator, and (sharded) this member's shard and each member's part in staging.
  // An OFFLOAD or RELOAD: `n` bytes between the device slot `array` and the host slot `host`.
  // An OPT_STEP: the stage's hook (`optimize`), its arguments (the part `own` of the parameters in
  // `array`, the gradients) and the data-parallel stream it launches on.
  struct coll {
    mesh_op_code what = mesh_op_code::all_reduce;
    std::byte* array = nullptr;
    std::byte* host = nullptr;
    const std::byte* src = nullptr;  // a gather into a parameter slot: the member's own part, from its shard
    std::size_t n = 0, size = 0, chunk = 0;
    elem_kind t = elem_kind::other;
    comm c{};
    shard_range own{};
    const stage_entry* optimize = nullptr;  // OPT_STEP: the stage
    optimizer_args args{};                  // OPT_STEP: the call, filled at binding
    std::uint32_t parts = 0, parts_end = 0;  // GRAD_NORM, FINITE_CHECK: its norms[parts, parts_end)
  };
  // One stage's sum_squares call of a GRAD_NORM or FINITE_CHECK: elements [begin, end) of its
  // weight gradients (bind/norm_parts.hpp), written (the first) or added to the sum of squares.
  struct norm_call {
    const stage_entry* e = nullptr;
    const std::byte* array = nullptr;
    std::size_t begin = 0, end = 0;
  };
  static constexpr std::uint32_t no_collective = 0xffffffffu;
  // One op as issued: its stream and events resolved to the driver's handles.
  struct issue_op {
    op_code code = op_code::compute;
    bool has_wait = false, has_record = false;
    std::uint8_t pair = 0;    // an overlapped F&B pair: 1 its first half, 2 its second (on streams[2])
    std::uint8_t stream = 0;  // the program's stream (0 compute, 1 comm, 2 a mesh's dp), for failures
    std::uint32_t index = 0;  // compute: calls[index]; group: transfers[index, last); collective: colls[index]
                              // (a copy: colls[index, last), its parts)
    std::uint32_t last = 0;
    typename D::stream s{};  // (`stream` is the member above)
    typename D::event wait{}, record{};
  };

  // `global_rank`: a mesh step's global rank, or a pipeline's rank (mp nullptr)
  device_binding(D& driver, int global_rank, const mesh_program* mp, std::vector<stage_entry> es, std::vector<comm> cs,
                 bool keep)
      : d(driver),
        global(global_rank),
        rank(mp ? mp->shape.pipeline_rank(global_rank) : global_rank),
        mesh(mp),
        entries(std::move(es)),
        comms(std::move(cs)),
        keep_outputs(keep) {}
  device_binding(const device_binding&) = delete;
  device_binding& operator=(const device_binding&) = delete;

  // ---- what binding reads ----
  D& d;
  int global;                          // a mesh step's global rank (a pipeline's: its rank)
  int rank;                            // the pipeline rank
  const mesh_program* mesh = nullptr;  // a mesh step's program (nullptr: a pipeline)
  std::vector<stage_entry> entries;
  std::vector<comm> comms;
  bool keep_outputs = false;
  pipetype::detail::batch_layout batch;

  // ---- what it makes ----
  std::vector<issue_op> ops;
  std::vector<std::string> labels;  // per issue op, for errors
  std::vector<bound_op> calls;      // the compute ops' stage calls
  std::vector<transfer> transfers;
  std::vector<std::byte*> adds;    // held weight gradients, per op's [add_begin, + add_count)
  std::vector<std::byte*> lists;   // a stage graph's fan-in and fan-out addresses (bind_compute)
  std::deque<bound_op> varying;    // per transfer of varying tensors: what transfer_bytes reads
  float* losses = nullptr;         // sinks × microbatches, from the driver
  std::vector<bool> loss_written;  // per cell of losses: a forward on this rank writes it
  std::byte* outputs = nullptr;    // the sinks' kept outputs (keep_outputs)
  pipetype::detail::output_layout outputs_at;
  std::vector<later_add> later;  // added after the step
  void* compute_native = nullptr;
  std::vector<event> events;
  // compute, comm, the second compute stream of F&B pairs, a mesh's dp stream, its copy stream
  stream streams[5]{};
  int nstreams = 2;
  bool pairs = false;                              // F&B pairs: streams[2] is their second compute stream
  int dp = 0;                                      // the data-parallel stream's index (0: none)
  int copy = 0;                                    // the copy stream's (memory actions; 0: none)
  event fence_events[4]{};                         // the step's end (fence)
  event pair_fork{}, pair_join{};                  // F&B pairs
  std::vector<int> stages_here;                    // the plan stages this rank runs (a mesh's tie groups)
  std::vector<coll> colls;                         // a mesh step's collectives and copies
  std::vector<norm_call> norms;                    // GRAD_NORM's and FINITE_CHECK's stage calls
  double* squares = nullptr;                       // their sum of squares: one device double
  std::vector<std::byte*> owned;                   // everything alloc() allocated (freed with the executor)
  std::byte* host_pool = nullptr;                  // memory actions' offloaded stashes (allocate_host)
  std::byte* staging = nullptr;                    // the sharded collectives' parts, all members'
  // FSDP with stages that lend their parameters (graph/stage.hpp lends_parameters): per plan
  // stage lent on this rank, its shard in memory pipetype allocated (the stage's own parameters()
  // are read once, at binding), and the slots the step's gathers fill (mesh_program::param_slots),
  // each the rank's largest lent stage
  struct lent_params {
    std::byte* shard = nullptr;
    shard_range range{};
    std::size_t size = 0;  // an element's bytes (0: not lent here)
  };
  std::vector<lent_params> lent;
  std::byte* param_pool = nullptr;
  std::size_t param_stride = 0;
  int param_slot_count = 0;
  [[no_unique_address]] capture_for<D> capture{};  // whole-step graphs (captures_graphs drivers)

  void bind(const program_view& p, const lowered_view& l) {
    const int L = p.lane_length();
    const op_span rank_ops = l.rank_ops(rank);
    const rank_resources& res = l.resources[static_cast<std::size_t>(rank)];
    pools pl = place_pools(p, rank_ops, res, L);
    place_sinks(p, rank_ops, L);
    const weights w = place_weights(rank_ops, res, L);
    make_streams(rank_ops, mesh ? mesh->events[static_cast<std::size_t>(global)] : res.events);
    place_params(p, L);
    bind_ops(walk{p, l, rank_ops, L, pl, w, pipetype::detail::edge_input_positions(p)});
  }

  // Plan stage `stage`'s parameters as this rank holds them when it lends them (nullptr: it does not).
  const lent_params* lent_of(int stage) const noexcept {
    if (stage < 0 || static_cast<std::size_t>(stage) >= lent.size()) return nullptr;
    const lent_params& h = lent[static_cast<std::size_t>(stage)];
    return h.size ? &h : nullptr;
  }
  // The slot a lent stage's op reads or its gather fills (nullptr: the stage's own array).
  std::byte* held_slot(int stage, int slot) const noexcept {
    if (slot < 0 || !lent_of(stage)) return nullptr;
    return param_pool + param_stride * static_cast<std::size_t>(slot);
  }

  // ---- the issue primitives both walks share ----
  // A transfer's bytes this step (its microbatch's, when its tensors vary and the batch has lengths).
  static std::size_t bytes_of(const transfer& x, const step_feed& f) noexcept {
    return f.lengths && x.varies ? pipetype::detail::transfer_bytes(*x.varies, f) : x.bytes;
  }
  PIPETYPE_INLINE void compute(D& dr, const bound_op& c, stream s, const step_feed& b) {
    if constexpr (observes_compute<D>) dr.on_compute(s, kind_char(c.what), c.plan_stage, c.microbatch);
    c.fn(c.obj, c, b);
    for (int k = 0; k < c.add_count; ++k) c.add(c.obj, adds[static_cast<std::size_t>(c.add_begin + k)], c.stream);
  }
  // The step's end: each stream waits for the other's last op, so the next step's first ops
  // (a recv into a slot, a compute over one) come after every use in this step.
  // A mesh step's data-parallel stream joins in: the compute stream waits for it (the next
  // step's adds come after this step's reductions) and it for the compute stream (the next
  // gathers after this step's computes); so does the copy stream of memory actions.
  PIPETYPE_INLINE void fence(D& dr) {
    dr.record(fence_events[0], streams[0]);
    dr.record(fence_events[1], streams[1]);
    dr.wait(streams[1], fence_events[0]);
    dr.wait(streams[0], fence_events[1]);
    if (dp > 0) [[unlikely]] {
      dr.record(fence_events[2], streams[dp]);
      dr.wait(streams[0], fence_events[2]);
      dr.wait(streams[dp], fence_events[0]);
    }
    if (copy > 0) [[unlikely]] {  // the copy stream likewise (the next step's slots after this one's copies)
      dr.record(fence_events[3], streams[copy]);
      dr.wait(streams[0], fence_events[3]);
      dr.wait(streams[copy], fence_events[0]);
    }
  }
  void add_later() {
    for (const later_add& a : later) a.add(a.obj, a.grad, compute_native);  // later lanes', in order
  }

  void free_owned() noexcept {
    if constexpr (frees<D>)
      for (std::byte* p : owned) {
        try {
          d.free(p);
        } catch (...) {  // (never throws out: a device that fails here has failed already)
        }
      }
    owned.clear();
    if constexpr (moves_to_host<D>)
      if (host_pool) try {
          d.free_host(host_pool);
        } catch (...) {
        }
    host_pool = nullptr;
  }

 private:
  // FSDP, stages that lend their parameters: each one's shard, copied on the compute stream from
  // its parameters() before any step, and the rank's parameter slots.
  void place_params(const program_view& p, int L) {
    if (!mesh || mesh->param_slots.empty()) return;
    const std::size_t stride = pipetype::detail::lent_slot_bytes(
        p.stages, [&](int s) { return p.stage_rank[static_cast<std::size_t>(s)] == rank; },
        [&](int s) -> const stage_entry& { return entry(s, L); }, 256);
    if (stride == 0) return;
    if constexpr (!copies<D>) {
      throw std::invalid_argument(who() +
                                  ": its stages lend their parameters (FSDP) and the driver copies nothing (copies)");
    } else {
      param_stride = stride;
      param_slot_count = mesh->param_slots.at(static_cast<std::size_t>(global));
      param_pool = alloc(stride * static_cast<std::size_t>(param_slot_count));
      lent.assign(static_cast<std::size_t>(p.stages), lent_params{});
      for (int s = 0; s < p.stages; ++s) {
        const stage_entry& e = entry(s, L);
        if (p.stage_rank[static_cast<std::size_t>(s)] != rank || !e.lends_params) continue;
        const std::span<std::byte> own_array = pipetype::detail::lent_array(e, who() + ": stage " + std::to_string(s));
        lent_params& h = lent[static_cast<std::size_t>(s)];
        h.range = shard_of(e.param_elems, mesh->shape.dp, mesh->shape.replica(global));
        h.size = e.param_size;
        h.shard = alloc(h.range.size() * h.size);
        if (h.range.size() > 0)
          d.copy(h.shard, own_array.data() + h.range.begin * h.size, h.range.size() * h.size, streams[0]);
      }
      // the first step's gathers, on the data-parallel stream, come after the copies; and the
      // stage may free its array once the executor is built (a driver that can, waits here)
      if (dp > 0) {
        d.record(fence_events[0], streams[0]);
        d.wait(streams[dp], fence_events[0]);
      }
      if constexpr (requires(D & dr) { dr.synchronize(); }) d.synchronize();
    }
  }

  // The pools and where a slot is in them.
  struct pools {
    rank_pools layout;
    std::byte *acts = nullptr, *grads = nullptr, *stashes = nullptr;
    // a mesh step with memory actions: the stashes in a pool of the step's peak, in the slots its
    // lowering gave them (mesh/memory_slots.hpp), the offloaded ones in pinned host memory, and
    // the activations in the pool it planned (mesh/activation_slots.hpp)
    bool memory = false;
    pipetype::detail::memory_layout ml;
    std::size_t host_stride = 0;  // a host slot: a stash, then the inputs its copy moves
    std::byte *stash_pool = nullptr, *scratch_stash = nullptr, *scratch_out = nullptr;

    static std::byte* at(std::byte* pool, std::size_t stride, int slot) {
      return slot < 0 || pool == nullptr ? nullptr : pool + stride * static_cast<std::size_t>(slot);
    }
    std::byte* grad_at(int slot) const { return at(grads, layout.gradient_stride, slot); }
    // the activation slot of lowered slot `slot` at mesh op `here`: the lowering's, or with
    // memory actions the one the step's pool has it in there (act_slot)
    std::byte* act_at(const mesh_program* mp, const mesh_op* here, int slot) const {
      if (memory && slot >= 0) {
        const int k = here ? mp->act_slot(*here, slot) : -1;
        if (k < 0) throw std::logic_error("pipetype::cuda: an activation the mesh step does not place");
        return at(acts, layout.activation_stride, k);
      }
      return at(acts, layout.activation_stride, slot);
    }
    // mesh op k's stash: its slot in the pool, the scratch block (a forward that is recomputed), or none
    std::byte* stash_at(std::size_t k) const {
      if (ml.stride == 0) return nullptr;
      const mesh_op& o = ml.ops[k];
      if (o.scratch) return scratch_stash;
      return o.stash_slot >= 0 ? stash_pool + ml.stride * static_cast<std::size_t>(o.stash_slot) : nullptr;
    }
  };
  struct weights {
    pipetype::detail::weight_grad_plan plan;
    std::byte* grads = nullptr;
    std::byte* at(int slot) const { return grads + plan.offset[static_cast<std::size_t>(slot)]; }
  };
  // What the walk over the issue list reads, and the state it carries from op to op.
  struct walk {
    const program_view& p;
    const lowered_view& l;
    op_span rank_ops;
    int L;
    const pools& pl;
    const weights& wg;
    std::vector<int> edge_inputs;  // per-edge inputs' positions
    std::span<const mesh_op> mesh_ops{};
    const mesh_op* here = nullptr;    // the mesh op being bound (act_at)
    bool second_half = false;         // the next compute op is the second half of a pair
    void* aux_native = nullptr;       // the pairs' second compute stream, native
    std::vector<int> forward_call{};  // per (stage, microbatch): its forward's calls index (RECOMPUTE)
    std::vector<int> forward_op{};    // and lowered op
    std::size_t staging = 0;          // the largest sharded collective's parts, all members'
    std::size_t cell(int stage, int microbatch) const {
      return static_cast<std::size_t>(stage) * static_cast<std::size_t>(p.microbatches) +
             static_cast<std::size_t>(microbatch);
    }
  };

  const stage_entry& entry(int stage, int L) const { return entries[static_cast<std::size_t>(stage % L)]; }
  std::string who() const { return "pipetype::cuda: rank " + std::to_string(global); }

  std::byte* alloc(std::size_t n) {
    if (n == 0) return nullptr;
    owned.reserve(owned.size() + 1);  // (so that a pointer allocated is a pointer kept)
    owned.push_back(static_cast<std::byte*>(d.allocate(n)));
    return owned.back();
  }

  pools place_pools(const program_view& p, op_span rank_ops, const rank_resources& res, int L) {
    pools pl;
    pl.layout = pipetype::detail::layout_of(p, rank_ops, res, entries);  // the plan's pools (pools_of)
    pl.memory = mesh && !mesh->memory.empty();
    const std::size_t activation_slots =
        pl.memory ? static_cast<std::size_t>(mesh->activation_slots.at(static_cast<std::size_t>(global)))
                  : static_cast<std::size_t>(res.activation_slots);
    pl.acts = alloc(pl.layout.activation_stride * activation_slots);
    pl.grads = alloc(pl.layout.gradients);
    if (!pl.memory) {
      pl.stashes = alloc(pl.layout.stashes);
      return pl;
    }
    pl.ml = pipetype::detail::memory_layout_of(mesh->memory, *mesh, global, pl.layout.stash_stride);
    pipetype::detail::check_offloads_movable(*mesh, global,
                                             [&](int stage) -> const stage_entry& { return entry(stage, L); });
    pl.stash_pool = alloc(pl.ml.stride * static_cast<std::size_t>(pl.ml.device_slots));
    pl.scratch_stash = alloc(pl.ml.stride);
    std::size_t out_bytes = 0;
    for (const lowered_op& o : rank_ops)
      if (o.code == op_code::compute) out_bytes = std::max(out_bytes, entry(o.stage, L).out.bytes);
    pl.scratch_out = alloc(pipetype::detail::round_up64(out_bytes));
    pl.host_stride = pl.ml.stride + pl.layout.activation_stride * pipetype::detail::most_moved_inputs(*mesh, global);
    if (pl.ml.host_slots > 0 && pl.host_stride > 0) {
      if constexpr (moves_to_host<D>)
        host_pool =
            static_cast<std::byte*>(d.allocate_host(pl.host_stride * static_cast<std::size_t>(pl.ml.host_slots)));
      else
        throw std::invalid_argument(who() +
                                    ": the step offloads stashes to host memory and the driver cannot keep them "
                                    "there (moves_to_host: allocate_host, free_host, copy_to_host, copy_to_device)");
    }
    return pl;
  }

  // The plan stages this rank runs; the losses its sinks write and, with keep_outputs, their outputs.
  void place_sinks(const program_view& p, op_span rank_ops, int L) {
    bool sinks_here = false;
    for (const lowered_op& o : rank_ops) {
      if (o.code != op_code::compute) continue;
      if (std::find(stages_here.begin(), stages_here.end(), o.stage) == stages_here.end())
        stages_here.push_back(o.stage);
      sinks_here = sinks_here || batch.sink[static_cast<std::size_t>(o.stage % L)] >= 0;
    }
    if (!sinks_here) return;
    const std::size_t cells = static_cast<std::size_t>(batch.sinks) * static_cast<std::size_t>(p.microbatches);
    losses = reinterpret_cast<float*>(alloc(sizeof(float) * cells));
    loss_written.assign(cells, false);
    for (const lowered_op& o : rank_ops) {
      if (o.code != op_code::compute || o.what != kind::F) continue;
      if (const int k = batch.sink[static_cast<std::size_t>(o.stage % L)]; k >= 0)
        loss_written[static_cast<std::size_t>(k) * static_cast<std::size_t>(p.microbatches) +
                     static_cast<std::size_t>(o.microbatch)] = true;
    }
    if (keep_outputs) {
      outputs_at = pipetype::detail::output_layout_of(batch, entries, p.microbatches);
      outputs = alloc(outputs_at.bytes);
    }
  }

  weights place_weights(op_span rank_ops, const rank_resources& res, int L) {
    weights w{pipetype::detail::plan_weight_grads(rank_ops, res, entries)};
    w.grads = alloc(w.plan.bytes);
    for (const pipetype::detail::weight_grad_plan::held& h : w.plan.later)
      later.push_back({entry(h.stage, L).add, entry(h.stage, L).obj, w.at(h.slot), h.stage, h.microbatch});
    pipetype::detail::sort_later(later, L);
    return w;
  }

  // Events and streams, once (a mesh step's rank has the mesh program's events: the pipeline's and more).
  void make_streams(op_span rank_ops, int nevents) {
    for (int e = 0; e < nevents; ++e) events.push_back(d.make_event());
    streams[0] = d.make_stream();
    streams[1] = d.make_stream();
    compute_native = d.native(streams[0]);
    fence_events[0] = d.make_event();
    fence_events[1] = d.make_event();
    for (const lowered_op& o : rank_ops) pairs = pairs || (o.code == op_code::compute && o.overlapped);
    if (pairs) {  // the second compute stream of F&B pairs, with its fork and join events
      streams[2] = d.make_stream();
      nstreams = 3;
      pair_fork = d.make_event();
      pair_join = d.make_event();
    }
    if (mesh) {  // a mesh step's data-parallel stream, after the others
      dp = nstreams;
      streams[nstreams++] = d.make_stream();
      fence_events[2] = d.make_event();
    }
    if (mesh && !mesh->memory.empty()) {  // and its copy stream, with memory actions
      copy = nstreams;
      streams[nstreams++] = d.make_stream();
      fence_events[3] = d.make_event();
    }
    if constexpr (captures_graphs<D>) {  // the capture's origin stream and its fork/join with each stream
      capture.open(d);
      for (int k = 0; k < nstreams; ++k) capture.add(d, streams[k]);
    }
  }

 public:
  // The driver's stream of mesh stream `s` (compute, comm, dp, copy).
  stream stream_of(int s) const noexcept {
    return s == dp_stream ? streams[dp] : s == copy_stream ? streams[copy] : streams[s];
  }

 private:
  // The issue list: the rank's lowered ops, or (a mesh step) its mesh program's, whose ops copy
  // lowered ones (`source`) on the replica's communicators or are the mesh's own.
  void bind_ops(walk w) {
    const std::size_t nlists = pipetype::detail::list_pool_size(w.l, w.rank_ops);
    lists.reserve(nlists * (w.pl.memory ? 2 : 1));  // (with memory actions, room for each RECOMPUTE's inputs again)
    if (w.pl.memory) {
      w.forward_call.assign(static_cast<std::size_t>(w.p.stages) * static_cast<std::size_t>(w.p.microbatches), -1);
      w.forward_op.assign(w.forward_call.size(), -1);
    }
    w.aux_native = pairs ? d.native(streams[2]) : nullptr;
    if (mesh) w.mesh_ops = mesh->rank_ops(global);
    const std::size_t count = mesh ? w.mesh_ops.size() : w.rank_ops.size();
    for (std::size_t k = 0; k < count; ++k) {
      const mesh_op* m = mesh ? &w.mesh_ops[k] : nullptr;
      if (m && (is_copy(m->code) || m->code == mesh_op_code::recompute)) {
        bind_memory_op(w, *m, k);
        continue;
      }
      if (m && m->source < 0) {
        bind_mesh_op(*m, w.L, w.staging);
        continue;
      }
      const std::size_t i = m ? static_cast<std::size_t>(m->source) : k;
      w.here = m;  // (act_at: the slots this op finds its activations in)
      const lowered_op& o = w.rank_ops[i];
      if (o.code == op_code::send || o.code == op_code::recv)
        bind_transfer(w, o, m);
      else
        bind_compute_op(w, o, m, i, k);
    }
    if (w.staging) staging = alloc(w.staging);
  }

  // A send or recv: one transfer of the group before it.
  void bind_transfer(const walk& w, const lowered_op& o, const mesh_op* m) {
    const stage_entry& e = entry(pipetype::detail::transfer_stage(w.p, o), w.L);  // its end on this rank
    const int cid = m ? m->comm : o.comm;
    // the peer's rank in the communicator: its place among the members (a pipeline's rank_a is 0)
    int peer = o.peer == w.l.comms[static_cast<std::size_t>(o.comm)].rank_a ? 0 : 1;
    if (m) {
      const std::vector<int>& ms = mesh->comms[static_cast<std::size_t>(cid)].members;
      peer = static_cast<int>(std::lower_bound(ms.begin(), ms.end(), m->peer) - ms.begin());
    }
    const int edge_input = pipetype::detail::transfer_edge_input(w.edge_inputs, o);
    transfers.push_back(
        {o.code == op_code::send, peer, o.what == kind::F ? w.pl.act_at(mesh, w.here, o.slot) : w.pl.grad_at(o.slot),
         pipetype::detail::full_transfer_bytes(o, e, edge_input), comms[static_cast<std::size_t>(cid)], nullptr});
    if (e.varies) {  // its bytes per microbatch: an op that says which (kept in varying)
      bound_op& v = varying.emplace_back();
      v.code = o.code;
      v.what = o.what;
      v.microbatch = o.microbatch;
      v.entry = &e;
      v.edge_input = edge_input;
      v.bytes = transfers.back().bytes;
      transfers.back().varies = &v;
    }
    ops.back().last = static_cast<std::uint32_t>(transfers.size());
    std::string& label = labels.back();  // "group: send activation 1F3 to rank 2; recv …"
    label += label == "group" ? ": " : "; ";
    label += std::string(o.code == op_code::send ? "send " : "recv ") +
             (o.what == kind::F ? "activation " : "gradient ") + pipetype::detail::action_name(o) +
             (o.code == op_code::send ? " to rank " : " from rank ") + std::to_string(m ? m->peer : o.peer);
  }

  // A compute op (its stage's call) or a group (its transfers follow: bind_transfer).
  void bind_compute_op(walk& w, const lowered_op& o, const mesh_op* m, std::size_t i, std::size_t k) {
    const int wait_event = m ? m->wait_event : o.wait_event, record_event = m ? m->record_event : o.record_event;
    issue_op x;
    x.code = o.code;
    x.s = streams[static_cast<int>(o.stream)];
    x.stream = static_cast<std::uint8_t>(o.stream);
    x.has_wait = wait_event >= 0;
    x.has_record = record_event >= 0;
    if (x.has_wait) x.wait = events[static_cast<std::size_t>(wait_event)];
    if (x.has_record) x.record = events[static_cast<std::size_t>(record_event)];
    if (o.code == op_code::group) {
      x.index = x.last = static_cast<std::uint32_t>(transfers.size());
      labels.emplace_back("group");
      ops.push_back(x);
      return;
    }
    labels.push_back("compute " + pipetype::detail::action_name(o));
    if (w.second_half) {
      x.pair = 2;
      x.s = streams[2];
      w.second_half = false;
    } else if (o.overlapped) {
      x.pair = 1;
      w.second_half = true;
    }
    x.index = static_cast<std::uint32_t>(calls.size());
    bound_op& call = calls.emplace_back();
    const stage_entry& e = entry(o.stage, w.L);
    pipetype::detail::check_split(e, action{o.what, o.stage, o.microbatch, false}, "pipetype::cuda");
    const pools& pl = w.pl;
    const int st = pl.layout.stash_stride > 0 ? o.stash_slot : -1;
    const mesh_op* here = w.here;
    pipetype::detail::bind_compute(
        call, o, e, w.L, [&](int slot) { return pl.act_at(mesh, here, slot); },
        [&](int slot) { return pl.grad_at(slot); },
        pl.memory ? pl.stash_at(k)
        : st >= 0 ? pl.stashes + pl.layout.stash_stride * static_cast<std::size_t>(st)
                  : nullptr,
        w.l, batch, lists);
    if (pl.memory && o.what == kind::F) {
      call.recomputed = w.mesh_ops[k].scratch;
      w.forward_call[w.cell(o.stage, o.microbatch)] = static_cast<int>(x.index);
      w.forward_op[w.cell(o.stage, o.microbatch)] = static_cast<int>(i);
    }
    call.stream = x.pair == 2 ? w.aux_native : compute_native;
    if (m)  // a lent stage reads its parameters where its gather put them (ctx.params)
      if (const std::byte* slot = held_slot(o.stage, m->param_slot)) call.set_params(slot);
    // a sink's output, kept; a local loss's travels on in its slot, and is not kept
    if (outputs && o.what == kind::F && call.sink >= 0 && call.out != nullptr)
      throw std::invalid_argument("pipetype::cuda: keep_outputs with stage " + std::to_string(call.stage) +
                                  ", a loss whose output travels on over a detached edge: only a last stage's "
                                  "output is kept");
    if (outputs && o.what == kind::F && call.sink >= 0)
      call.out = outputs + outputs_at.at(call.sink, o.microbatch, w.p.microbatches);
    if (const weights& wg = w.wg; wg.plan.slot[i] >= 0) {
      call.weight_grad = wg.at(wg.plan.slot[i]);
      call.add = e.add;
      call.add_begin = static_cast<int>(adds.size());
      call.add_count = static_cast<int>(wg.plan.adds[i].size());
      for (int g : wg.plan.adds[i]) adds.push_back(wg.at(g));
    }
    ops.push_back(x);
    // a bucketed step's last weight backward: its buckets' events, recorded once it and its adds
    // are through (the device adds a microbatch's weight gradient whole, on the stream: no bucket
    // is ready before the end)
    for (int b = 0; m && m->bucket_event >= 0 && b < mesh->buckets; ++b) {
      issue_op r;
      r.code = op_code::collective;
      r.index = no_collective;
      r.s = x.s;
      r.stream = x.stream;
      r.has_record = true;
      r.record = events.at(static_cast<std::size_t>(m->bucket_event + b));
      labels.push_back("record e" + std::to_string(m->bucket_event + b) + " (bucket " + std::to_string(b) + ")");
      ops.push_back(r);
    }
  }

  // A memory action: a RECOMPUTE (its forward again, on the compute stream, into a slot of its
  // own) or an OFFLOAD / RELOAD (a copy between its device slots and its host slot, on the copy
  // stream).
  void bind_memory_op(walk& w, const mesh_op& m, std::size_t k) {
    const pools& pl = w.pl;
    issue_op x;
    x.s = stream_of(m.stream);
    x.stream = static_cast<std::uint8_t>(m.stream);
    if (m.code == mesh_op_code::recompute) {
      const int f = w.forward_call.empty() ? -1 : w.forward_call[w.cell(m.stage, m.microbatch)];
      if (f < 0)
        throw std::invalid_argument(who() + ": " + pipetype::detail::mesh_op_label(m) + " comes before its forward");
      bound_op again = calls[static_cast<std::size_t>(f)];
      // its inputs where the RECOMPUTE finds them (a RELOAD may have brought them back elsewhere)
      const lowered_op forward = w.rank_ops[static_cast<std::size_t>(w.forward_op[w.cell(m.stage, m.microbatch)])];
      const op_slots sl = w.l.slots_of(forward);  // (a chain op's slots are read from the op itself)
      w.here = &m;
      if (!sl.in.empty()) again.in = pl.act_at(mesh, &m, sl.in[0]);
      if (sl.in.size() > 1) {
        if (lists.size() + sl.in.size() > lists.capacity())
          throw std::logic_error("pipetype::cuda: the list pool is smaller than its RECOMPUTEs need");
        again.in_list = lists.data() + lists.size();
        for (const int slot : sl.in) lists.push_back(pl.act_at(mesh, &m, slot));
      }
      again.stash = pl.stash_at(k);
      again.stream = compute_native;  // (on the compute stream, after the RELOAD it waits for)
      again.out = pl.scratch_out;     // (its output is the forward's, still in its slot)
      again.add_count = 0;
      again.recomputed = false;  // (the forward it repeats keeps nothing; this one builds the backward's state)
      if (const std::byte* slot = held_slot(m.stage, m.param_slot)) again.set_params(slot);
      x.code = op_code::compute;
      x.index = static_cast<std::uint32_t>(calls.size());
      calls.push_back(again);
    } else {
      std::byte* host = pl.ml.ops[k].host_slot >= 0 && host_pool
                            ? host_pool + pl.host_stride * static_cast<std::size_t>(pl.ml.ops[k].host_slot)
                            : nullptr;
      x.code = op_code::collective;
      x.index = static_cast<std::uint32_t>(colls.size());
      auto part = [&](std::byte* dev, std::byte* to, std::size_t n) {
        if (dev == nullptr || to == nullptr || n == 0) return;  // a recomputed forward's: nothing moves
        coll c;
        c.what = m.code;
        c.array = dev;
        c.host = to;
        c.n = n;
        colls.push_back(c);
      };
      part(pl.stash_at(k), host, entry(m.stage, w.L).stash_bytes());  // its stash, then each input it moves
      const int moved = mesh->act_count(m);
      const std::size_t stride = pl.layout.activation_stride;
      for (int q = 0; q < moved; ++q)
        part(pools::at(pl.acts, stride, mesh->act_at(m, q).slot),
             host ? host + pl.ml.stride + stride * static_cast<std::size_t>(q) : nullptr,
             pipetype::detail::moved_input_bytes(entry(m.stage, w.L), moved, stride));
      x.last = static_cast<std::uint32_t>(colls.size());
      if (x.last == x.index) return;
    }
    labels.push_back(pipetype::detail::mesh_op_label(m));
    ops.push_back(x);
  }

  // An op of a mesh step's own (no lowered op behind it): an event's record or wait, a collective
  // on the data-parallel stream, or a release (nothing on a device: the proof keeps every compute
  // of the stage after its next gather).
  void bind_mesh_op(const mesh_op& m, int L, std::size_t& staging_bytes) {
    issue_op x;
    x.code = op_code::collective;
    x.index = no_collective;
    x.s = stream_of(m.stream);
    x.stream = static_cast<std::uint8_t>(m.stream);
    switch (m.code) {
      case mesh_op_code::record:
      case mesh_op_code::wait:
        (m.code == mesh_op_code::record ? x.has_record : x.has_wait) = true;
        (m.code == mesh_op_code::record ? x.record : x.wait) = events.at(static_cast<std::size_t>(m.event));
        labels.push_back(std::string(m.code == mesh_op_code::record ? "record e" : "wait e") + std::to_string(m.event));
        ops.push_back(x);
        return;
      case mesh_op_code::release:
        return;
      case mesh_op_code::grad_norm:
      case mesh_op_code::finite_check:
        return bind_norm(m, L, x);
      case mesh_op_code::optimizer_step:
        return bind_optimizer_step(m, L, x);
      case mesh_op_code::local_sum:
        throw std::invalid_argument(who() + ": tie group " + std::to_string(m.tie) +
                                    " has all its stages on this rank: their sum would need a device add pipetype "
                                    "does not have (place the tied stages on different ranks)");
      default:
        break;
    }
    if constexpr (!(issues_collectives<D> && copies<D>))
      throw std::invalid_argument(who() + ": the mesh step has collectives (" + pipetype::detail::mesh_op_label(m) +
                                  ") and the driver issues none (issues_collectives)");
    int stage = m.stage;  // the stage whose array it works on: its own, or the tie group's one on this rank
    if (m.tie >= 0) {
      int held = 0;
      for (const int s : mesh->ties.at(static_cast<std::size_t>(m.tie)))
        if (std::find(stages_here.begin(), stages_here.end(), s) != stages_here.end()) stage = s, ++held;
      if (held != 1)
        throw std::invalid_argument(who() + ": tie group " + std::to_string(m.tie) + " has " + std::to_string(held) +
                                    " stages on this rank; a device executor reduces one tied array per rank");
    }
    const stage_entry& e = entries[static_cast<std::size_t>(stage % L)];
    std::size_t size = 0;
    const bool gathers = m.code == mesh_op_code::all_gather || m.code == mesh_op_code::param_sync;  // (parameters)
    const std::span<std::byte> a = pipetype::detail::collective_array(e, gathers, m.tie, stage, size, "pipetype::cuda");
    coll c;
    c.what = gathers ? mesh_op_code::all_gather : m.code;  // (ZeRO-1's PARAM_SYNC: a gather, as UNSHARD's)
    c.array = a.data();
    if (std::byte* slot = gathers ? held_slot(stage, m.param_slot) : nullptr) {  // a lent stage's: into its slot
      c.array = slot;
      c.src = lent_of(stage)->shard;
    }
    c.size = size;
    c.n = size ? a.size() / size : 0;
    if (m.bucket >= 0) {  // a bucket of a REDUCE_GRAD: its part of the array (bucket_of)
      if (c.n != 0 && c.n < static_cast<std::size_t>(mesh->buckets))
        throw shape_error(who() + ": stage " + std::to_string(stage) + " has " + std::to_string(c.n) +
                          " weight-gradient elements, fewer than the step's " + std::to_string(mesh->buckets) +
                          " buckets");
      const shard_range part = bucket_of(c.n, mesh->buckets, m.bucket);
      c.array += part.begin * size;
      c.n = part.size();
      // a bucket of a scattering step: each member keeps its shard of the stage within the bucket,
      // parts of unequal size that ncclReduceScatter cannot cut; an all-reduce of the bucket leaves
      // them summed (and the rest too: twice a reduce-scatter's bytes)
      if (c.what == mesh_op_code::reduce_scatter) c.what = mesh_op_code::all_reduce;
    }
    c.t = gathers ? elem_kind::other : e.grad_kind;
    if (!gathers && c.t == elem_kind::other)
      throw shape_error(who() + ": stage " + std::to_string(stage) +
                        "'s weight_grad elements are no type NCCL sums from here (float, double, int32, int64, "
                        "pipetype::half, pipetype::bfloat16)");
    c.c = comms[static_cast<std::size_t>(m.comm)];
    const std::vector<int>& ms = mesh->comms[static_cast<std::size_t>(m.comm)].members;
    const int members = static_cast<int>(ms.size());
    const int me = static_cast<int>(std::lower_bound(ms.begin(), ms.end(), global) - ms.begin());
    c.chunk = (c.n + static_cast<std::size_t>(members) - 1) / static_cast<std::size_t>(members);
    c.own = shard_of(c.n, members, me);
    if (c.what != mesh_op_code::all_reduce)
      staging_bytes = std::max(staging_bytes, static_cast<std::size_t>(members) * c.chunk * c.size);
    push_collective(m, c, x);
  }

  // An OPT_STEP: the stage's optimizer_step, called as the walk reaches it with the data-parallel
  // stream (it launches its update there, after the reduction on that stream), on the part of its
  // parameters this replica updates: its shard when REDUCE_GRAD scatters (ZeRO-1, FSDP), else all.
  void bind_optimizer_step(const mesh_op& m, int L, issue_op& x) {
    const stage_entry& e = entries[static_cast<std::size_t>(m.stage % L)];
    const int replicas = mesh->shape.dp, replica = mesh->shape.replica(global);
    coll c;
    c.what = mesh_op_code::optimizer_step;
    c.own = pipetype::detail::optimizer_part(e, m.stage, mesh->scatters_gradients(), replicas, replica, who());
    if (e.optimize) {
      c.optimize = &e;
      c.args.stage = m.stage % L;
      const lent_params* h = lent_of(m.stage);  // (a lent stage's: pipetype's shard)
      c.args.params = h ? h->shard : e.params_of(e.obj, -1).data() + c.own.begin * e.param_size;
      c.args.grads = e.weight_grads_of(e.obj, -1).data();
      c.args.offset = c.own.begin;
      c.args.elems = c.own.size();
      c.args.replica = replica;
      c.args.replicas = replicas;
      c.args.stream = d.native(x.s);
      for (const mesh_op& o : mesh->rank_ops(global))  // (the sum GRAD_NORM or FINITE_CHECK leaves)
        if (o.code == mesh_op_code::grad_norm || o.code == mesh_op_code::finite_check)
          c.args.squares = sum_of_squares();
    }
    push_collective(m, c, x);
  }

  // Mesh op `m`, bound as collective `c` of issue op `x`.
  void push_collective(const mesh_op& m, const coll& c, issue_op& x) {
    x.index = static_cast<std::uint32_t>(colls.size());
    colls.push_back(c);
    labels.push_back(pipetype::detail::mesh_op_label(m));
    ops.push_back(x);
  }

  // The one device double of the step's sum of squares, allocated once.
  double* sum_of_squares() {
    if (!squares) squares = reinterpret_cast<double*>(alloc(sizeof(double)));
    return squares;
  }

  // A GRAD_NORM or FINITE_CHECK on the data-parallel stream: each stage of the rank writes or adds
  // the squares of its part (bind/norm_parts.hpp) into the sum (sum_squares: pipetype has no
  // kernel), then the world's all-reduce of that one double. A rank that answers for no element
  // still takes part, its sum written 0 by one of its stages.
  void bind_norm(const mesh_op& m, int L, issue_op& x) {
    const char* name = m.code == mesh_op_code::grad_norm ? "GRAD_NORM" : "FINITE_CHECK";
    if constexpr (!issues_collectives<D>)
      throw std::invalid_argument(who() + ": the mesh step has collectives (" + name +
                                  ") and the driver issues none (issues_collectives)");
    auto entry_at = [&](int s) -> const stage_entry& { return entry(s, L); };
    constexpr const char* hook = "`void sum_squares(std::span<const T> part, double* sum, bool add, void* stream)`";
    auto squares_of = [&](const stage_entry& e, int s) {
      if (!e.squares)
        throw shape_error(who() + ": stage " + std::to_string(s) + " has no " + hook + " for the step's " + name +
                          " (the squares of its gradients in device memory, on a stream; pipetype has no kernel)");
    };
    coll c;
    c.what = m.code;
    c.array = reinterpret_cast<std::byte*>(sum_of_squares());
    c.n = 1;
    c.size = sizeof(double);
    c.t = elem_kind::f64;
    c.c = comms[static_cast<std::size_t>(m.comm)];
    c.parts = static_cast<std::uint32_t>(norms.size());
    for (const pipetype::detail::norm_part& q :
         pipetype::detail::norm_parts(*mesh, stages_here, global, entry_at, squares_of, who()))
      norms.push_back({&entry_at(q.stage), q.array.data(), q.begin, q.end});
    if (norms.size() == c.parts) {  // nothing to add: a stage that can writes the rank's 0
      for (const int s : stages_here)
        if (entry_at(s).squares) {
          norms.push_back({&entry_at(s), nullptr, 0, 0});
          break;
        }
      if (norms.size() == c.parts)
        throw shape_error(who() + ": no stage of this rank has " + hook + " to write its part of the step's " + name +
                          " (0: it answers for no gradient)");
    }
    c.parts_end = static_cast<std::uint32_t>(norms.size());
    push_collective(m, c, x);
  }
};

}  // namespace pipetype::cuda::detail
