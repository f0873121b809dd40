// pipetype/cuda/executor.hpp — one rank's lowered program, issued through a device driver.
//
// The device executor runs on one host thread per rank (a process per GPU with NCCL, or one
// thread per rank with the loopback transport). Construction checks the model against the plan
// and binds the rank's lowered ops once (cuda/binding.hpp): buffer slots become addresses in
// pools the driver allocates (activations, gradients, stashes), event ids become events from a
// pool of `resources.events`, stream ids become the rank's two streams, communicator ids become
// the transport's communicators. `step()` then walks the ops
// in lowered order and issues, per op, exactly
//   [wait(stream, event)]  compute: the stage's forward/backward on the compute stream
//                          group:   group_start, its sends and recvs on the comm stream, group_end
//   [record(event, stream)]
// and ends with a fence (each stream records an event the other waits on, so the next step's
// ops come after every use in this one) — no allocation, no creation, no decision. For a plan
// known at compile time,
// `step_unrolled<plan, rank>()` issues the same calls as straight-line code: the op list is a
// constant, so the compiler unrolls it into one call after another with every stream, event,
// kind and peer decided at compile time (cuda/unrolled.hpp; bench_cuda_issue measures both
// against hand-written code). What the stage receives is the host executor's
// context (graph/stage.hpp) with device pointers and `stream`, the driver's native stream (a
// cudaStream_t with the CUDA driver) to launch its kernels on.
//
// Overlapped F&B pairs (DualPipe): the pair's second half runs on a second compute stream —
// forked from the compute stream after the first half's wait (the lowering leaves out a second
// half's wait when the first's covers it), joined back right after (record/wait), its own record
// issued on the compute stream after the join — so the two halves may run at once while
// everything after the pair sees both done. The stage's context carries that stream. Ranks
// without pairs have two streams.
//
// Transfers name the peer by its rank in the communicator: lowered communicator c joins ranks
// comms[c].rank_a (rank 0 in it) and comms[c].rank_b (rank 1), as make_communicators creates them.
//
// Weight gradients: a stage that declares `weight_grad` writes each microbatch's into a slot the
// executor allocated; after the B/W, the held ones next in microbatch order are added through the
// stage's `add_weight_grad(span, stream)` on the compute stream (on a device pipetype has no
// kernel of its own; a driver with `host_memory` lets the plain host loop do it). A later lane's
// (DualPipe's second direction) are added at the end of the step. So each rank's stage objects
// hold the same sums, in the same order, under every schedule. Under DualPipe a model stage runs
// on two ranks: give every rank its own stage objects and sum the two copies' gradients after
// the step (an all-reduce between the pair).
//
// Memory actions (a mesh step lowered with OFFLOAD, RELOAD and RECOMPUTE: docs/13): the stashes
// then live in a pool of the step's peak, in the lowering's slots as on the host, and the
// activations in the pool the step planned (mesh/activation_slots.hpp: an offloaded input
// leaves its slot); a copy stream joins the others (and the fence); the offloaded stashes and
// inputs go to one block of pinned host memory allocated at binding (a driver that
// moves_to_host: cudaHostAlloc), a host slot being the stash, then the inputs. An OFFLOAD is
//   [wait(copy, e)] copy_to_host(host slot, stash slot, bytes, copy) copy_to_host(.., input) [record(copy, done)]
// (cudaMemcpyAsync device to host) after the event the compute stream recorded behind the
// forward, a RELOAD the copy back, which the backward or RECOMPUTE that reads it waits for, and a
// RECOMPUTE the microbatch's forward again on the compute stream, into a slot of its own (its
// output to a scratch block: the forward's is still in its slot). Nothing is allocated in a step.
//
// Stage graphs: a stage whose output feeds several stages gets their gradients summed into the
// first, in edge order, before its B or I, by its `add_grad_output(into, g, stream)` on the
// stream that backward runs on (the compute stream, or an overlapped pair's second one;
// graph/stage.hpp); a device driver refuses such a stage without that member.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipetype/bind/batch.hpp"
#include "pipetype/bind/checks.hpp"
#include "pipetype/bind/part.hpp"
#include "pipetype/bind/report.hpp"
#include "pipetype/bind/stage_entry.hpp"
#include "pipetype/compile/lowered.hpp"
#include "pipetype/core/mesh.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/cuda/binding.hpp"
#include "pipetype/cuda/driver.hpp"
#include "pipetype/cuda/unrolled.hpp"
#include "pipetype/mesh/verify.hpp"

namespace pipetype::cuda {

/// How a device executor is built.
template <class D>
struct executor_options {
  int rank = -1;                          // the plan's rank this executor runs; -1: the driver's rank()
  std::vector<typename D::comm> comms{};  // per lowered communicator; empty: 0, 1, ... (integer comms)
  bool ordered_gradients = true;          // see bind/checks.hpp
  bool keep_outputs = false;              // the sinks write their outputs where outputs() says (inference)
};

template <device_driver D>
class executor {
  using binding = detail::device_binding<D>;
  using issue_op = typename binding::issue_op;
  using transfer = typename binding::transfer;
  using coll = typename binding::coll;
  static constexpr std::uint32_t no_collective = binding::no_collective;

 public:
  /// Binds one rank of `plan` (a static_plan or an accepted runtime_plan) to the stages of
  /// `model` (a chain or uniform_chain), allocating and creating everything through `driver`.
  /// Example, given plan, model, driver, comms:
  ///   pipetype::cuda::executor ex{plan, model, driver, {.rank = 1, .comms = comms}};
  /// `opt.rank` defaults to the driver's rank(); `opt.comms[c]` is lowered communicator c (only
  /// those the rank is a member of are used; integer communicators default to 0, 1, ...). A
  /// compile-time plan that splits backwards is checked against the stage types here.
  template <class Plan, stage_graph Model>
  executor(const Plan& plan, Model& model, D& driver, executor_options<D> opt = {})
      : executor(views_of(plan), pipetype::detail::entries_for(views_of(plan).compute, model, "pipetype::cuda"), driver,
                 std::move(opt)) {
    static_assert(pipetype::detail::stages_fit_plan<Plan, Model>());
  }
  /// Binds one rank of `plan` to that rank's part of the model (bind/part.hpp): only the stages the
  /// plan runs there, checked before anything is allocated (shape_error naming the stage).
  /// Example, given plan, part, driver, comms:
  ///   pipetype::cuda::executor ex{plan, part, driver, {.rank = 1, .comms = comms}};
  template <class Plan>
  executor(const Plan& plan, const model_part& part, D& driver, executor_options<D> opt = {})
      : executor(views_of(plan), entries_of_part(views_of(plan).compute, part, rank_of(driver, opt.rank)), driver,
                 std::move(opt)) {}
  /// Binds global rank `opt.rank` (default: the driver's rank()) of the mesh step `mp` —
  /// build_mesh(plan.compute(), plan.lowered(), mesh, dp_options) — to the stages of its replica's
  /// `model`: its pipeline rank's ops on its replica's communicators, and the collectives where
  /// the proof placed them, on a data-parallel stream of their own (docs/12_data_parallel.md).
  /// `opt.comms[c]` is mesh communicator c (runtime_driver::connect(id, world, mp)).
  /// Example, given plan, mp, model, driver, comms:
  ///   pipetype::cuda::executor ex{plan, mp, model, driver, {.rank = 3, .comms = comms}};
  template <class Plan, stage_graph Model>
  executor(const Plan& plan, const mesh_program& mp, Model& model, D& driver, executor_options<D> opt = {})
      : executor(views_of(plan), pipetype::detail::entries_for(views_of(plan).compute, model, "pipetype::cuda"), driver,
                 std::move(opt), &mp) {
    static_assert(pipetype::detail::stages_fit_plan<Plan, Model>());
  }
  /// The same with the global rank's part of its replica's model (bind/part.hpp).
  template <class Plan>
  executor(const Plan& plan, const mesh_program& mp, const model_part& part, D& driver, executor_options<D> opt = {})
      : executor(views_of(plan),
                 entries_of_part(views_of(plan).compute, part, mp.shape.pipeline_rank(rank_of(driver, opt.rank))),
                 driver, std::move(opt), &mp) {}
  /// The same from stages erased already (entries_of, or entries made by hand); `mp`: a mesh
  /// step's program, `opt.rank` then a global rank.
  executor(const plan_views& v, std::vector<stage_entry> entries, D& driver, executor_options<D> opt = {},
           const mesh_program* mp = nullptr)
      : b_(driver, rank_of(driver, opt.rank), mp, std::move(entries), std::move(opt.comms), opt.keep_outputs) {
    const program_view& p = v.compute;
    const lowered_view& l = v.lowered;
    if (mp && (b_.global < 0 || b_.global >= mp->shape.size() || mp->shape.pp != p.ranks))
      throw std::invalid_argument("pipetype::cuda: rank " + std::to_string(b_.global) + " is not in the mesh's " +
                                  std::to_string(mp->shape.size()) + " ranks, or the mesh is not the plan's");
    if (b_.rank < 0 || b_.rank >= p.ranks)
      throw std::invalid_argument("pipetype::cuda: rank " + std::to_string(b_.rank) + " is not in the plan's " +
                                  std::to_string(p.ranks) + " ranks");
    pipetype::detail::check_model(p, b_.entries, "pipetype::cuda");
    pipetype::detail::check_gradients(p, b_.entries, opt.ordered_gradients, "pipetype::cuda");
    if constexpr (!host_memory<D>)
      for (std::size_t s = 0; s < b_.entries.size(); ++s)
        if (b_.entries[s].add != nullptr && !b_.entries[s].adds_on_stream)
          throw std::invalid_argument(
              "pipetype::cuda: stage " + std::to_string(s) +
              " declares a weight_grad but has no add_weight_grad(std::span<const T> g, void* stream): on a device "
              "pipetype cannot add weight gradients itself; give the stage that member (launch the add on "
              "`stream`) or accumulate in the stage and drop weight_grad");
    const std::size_t ncomms = mp ? mp->comms.size() : l.comms.size();
    if constexpr (std::is_integral_v<typename D::comm>)
      if (b_.comms.empty())
        for (std::size_t c = 0; c < ncomms; ++c) b_.comms.push_back(static_cast<typename D::comm>(c));
    if (b_.comms.size() < ncomms)
      throw std::invalid_argument("pipetype::cuda: the " + std::string(mp ? "mesh step" : "plan") + " uses " +
                                  std::to_string(ncomms) + " communicators, " + std::to_string(b_.comms.size()) +
                                  " given");
    if constexpr (!host_memory<D>) {
      const std::vector<int> consumers = pipetype::detail::consumers_of(p);
      for (std::size_t s = 0; s < consumers.size(); ++s)
        if (consumers[s] > 1 && b_.entries[s].obj != nullptr && !b_.entries[s].sums_on_stream)
          throw std::invalid_argument(
              "pipetype::cuda: stage " + std::to_string(s) + " feeds " + std::to_string(consumers[s]) +
              " stages, whose gradients are summed before its backward, and has no add_grad_output(std::span<T> "
              "into, std::span<const T> g, void* stream): on a device pipetype cannot add them itself; give the "
              "stage that member (launch the add on `stream`)");
    }
    b_.batch = pipetype::detail::batch_layout_of(p, b_.entries);
    batch_bytes_ = b_.batch.row;
    microbatches_ = p.microbatches;
    forward_only_ = is_forward_only(p);
    if (mp && p.lanes > 1)
      throw std::invalid_argument("pipetype::cuda: a plan of " + std::to_string(p.lanes) +
                                  " lanes (DualPipe) does not run over a mesh yet: each stage lives on two ranks of a "
                                  "replica, whose copies would need a reduction of their own");
    try {
      b_.bind(p, l);
    } catch (...) {  // a binding refused half-way frees what it allocated so far
      b_.free_owned();
      throw;
    }
  }

  /// One step: `b` holds every source tensor's array over all microbatches (bind/batch.hpp;
  /// device memory with the CUDA driver), read only on the ranks that hold a source. A batch
  /// that does not fit the plan is a shape_error before anything is issued.
  void step(const pipetype::batch& b) {
    feed(b);
    run();
  }
  /// The shorthand for one array: `batch` is stage 0's input for every microbatch (microbatch j
  /// at j × its bytes; a graph's sources side by side in one row per microbatch), read only on
  /// the rank that holds a lane's first stage.
  void step(const void* batch) {
    feed(batch);
    run();
  }
  /// Checks `b` against the plan as step(b) does (shape_error), issuing nothing.
  void check_batch(const pipetype::batch& b) const {
    std::vector<feed_tensor> in, tg;
    pipetype::detail::feed_from_batch(b_.batch, b_.entries, microbatches_, b, in, tg, "pipetype::cuda");
  }
  /// Where the sinks on this rank write their losses: sinks × microbatches floats (sink k's
  /// microbatch j at k · microbatches + j) in memory from the driver (device memory with the CUDA
  /// driver), written by the sinks' kernels during the step; read them once the step's work is
  /// done. nullptr when the model has no sink on this rank. Only the cells this rank's forwards
  /// write are the step's (writes_loss): under DualPipe(V) a sink runs on two ranks, each for its
  /// half of the microbatches, and the other cells keep whatever they held.
  float* losses() const noexcept { return b_.losses; }
  /// Whether this rank runs sink k's forward of microbatch j, and so writes losses()[k · m + j].
  bool writes_loss(int sink, int microbatch) const noexcept {
    const std::size_t at =
        static_cast<std::size_t>(sink) * static_cast<std::size_t>(microbatches_) + static_cast<std::size_t>(microbatch);
    return sink >= 0 && microbatch >= 0 && microbatch < microbatches_ && at < b_.loss_written.size() &&
           b_.loss_written[at];
  }
  /// Where the sinks on this rank keep their outputs (executor_options::keep_outputs; nullptr
  /// otherwise): sink k's output block of microbatch j at output_offset(k, j) bytes, in memory from
  /// the driver (device memory with the CUDA driver), written by the sinks' kernels during the step.
  /// A block of varying tensors is packed at its microbatch's length (graph/tensors.hpp's shape_at).
  std::byte* outputs() const noexcept { return b_.outputs; }
  std::size_t output_offset(int sink, int microbatch) const noexcept {
    return b_.outputs_at.at(sink, microbatch, microbatches_);
  }
  /// The loss scaling's factor of the last step (d objective / d loss_j, batch::scale).
  double loss_scale() const noexcept { return fed_.scale; }

 private:
  void feed(const void* batch) {
    pipetype::detail::check_one_array(b_.batch, b_.entries, "pipetype::cuda");
    fed_.take_rows(static_cast<const std::byte*>(batch), b_.batch, b_.entries, microbatches_);
  }
  void feed(const pipetype::batch& b) { fed_.take(b, b_.batch, b_.entries, microbatches_, "pipetype::cuda"); }
  step_feed feed_of() const noexcept {
    step_feed f = fed_.view(b_.losses, microbatches_);
    f.forward_only = forward_only_;
    return f;
  }
  void run() {
    // locals, so the compiler need not reload them after every driver call
    D& d = b_.d;
    const bound_op* const calls = b_.calls.data();
    const transfer* const tr = b_.transfers.data();
    const step_feed b = feed_of();
    const issue_op* o = b_.ops.data();
    failures_.clear();  // current after every step: empty, or how this one ended
    try {
      for (const issue_op* e = o + b_.ops.size(); o != e; ++o) {
        if (o->pair) [[unlikely]] {
          issue_pair_half(d, *o, b);
          continue;
        }
        const typename D::stream s = o->s;
        if (o->has_wait) d.wait(s, o->wait);
        if (o->code == op_code::compute) {
          b_.compute(d, calls[o->index], s, b);
        } else if (o->code == op_code::collective) {  // a mesh step's (or only its record or wait)
          if (o->index != no_collective)              // (a copy's parts: its stash, then each input it moves)
            for (std::uint32_t k = o->index, end = o->last > k ? o->last : k + 1; k != end; ++k)
              collective(d, b_.colls[k], s);
        } else {
          d.group_start();
          for (const transfer *x = tr + o->index, *end = tr + o->last; x != end; ++x) {
            if (x->send)
              d.send(x->buf, binding::bytes_of(*x, b), x->peer, x->c, s);
            else
              d.recv(x->buf, binding::bytes_of(*x, b), x->peer, x->c, s);
          }
          d.group_end();
        }
        if (o->has_record) d.record(o->record, s);
      }
      if (!b_.later.empty()) b_.add_later();
      b_.fence(d);
    } catch (const device_error& err) {
      const device_error named(std::string(err.what()) + " [while issuing " + where(o) + "]");
      note_failure(o, named.what(), failure_cause::device);
      throw named;
    } catch (const std::exception& err) {  // a stage (or a driver's non-device error): kept, and rethrown as it is
      note_thrown(o, err.what());
      throw;
    } catch (...) {
      note_thrown(o, "an exception not derived from std::exception");
      throw;
    }
  }

 public:
  /// The same step for a plan known at compile time (`Plan` a constexpr plan with static storage,
  /// `Rank` this executor's rank), as straight-line code: one call after another, the kinds,
  /// streams, events and peers compile-time constants, only the addresses read from the binding.
  ///   static constexpr auto plan = pipetype::make_plan<S>();
  ///   ex.step_unrolled<plan, 1>(batch);
  template <const auto& Plan, int Rank>
  void step_unrolled(const void* batch) {
    using P = detail::static_program<Plan, Rank>;
    if (b_.mesh || b_.rank != Rank || b_.ops.size() != P::issues.size() || b_.transfers.size() != P::transfers.size())
      throw std::logic_error("pipetype::cuda: step_unrolled<plan, " + std::to_string(Rank) +
                             ">: this executor was bound to rank " + std::to_string(b_.rank) + " of another plan");
    feed(batch);
    const step_feed f = feed_of();
    try {
      detail::issue_unrolled<P>(b_, f);
    } catch (const device_error& err) {
      const device_error named(std::string(err.what()) + " [while issuing rank " + std::to_string(b_.rank) +
                               "'s unrolled step]");
      note_failure(nullptr, named.what(), failure_cause::device);
      throw named;
    } catch (const std::exception& err) {
      note_failure(nullptr, err.what(), failure_cause::stage_threw);
      throw;
    }
    failures_.clear();
  }

  /// Records one step into a graph (fork from an origin stream to the compute and communication
  /// streams, the step, join back), then instantiates it — or, when a graph was made before and
  /// only buffer addresses changed (a new `batch`), updates it in place. replay() launches it.
  void capture(const void* batch) requires captures_graphs<D> {
    feed(batch);
    b_.capture.capture([&] { run(); });
  }
  void capture(const pipetype::batch& b) requires captures_graphs<D> {
    feed(b);
    b_.capture.capture([&] { run(); });
  }
  /// Launches the captured step (capture() first), ordered like an eager step: after everything
  /// already on the rank's streams (they join into the origin stream), and before whatever comes
  /// next on them (they wait on the origin after the launch).
  void replay() requires captures_graphs<D> { b_.capture.replay(); }
  typename D::stream origin_stream() const noexcept requires captures_graphs<D> { return b_.capture.origin(); }
  int instantiations() const noexcept requires captures_graphs<D> { return b_.capture.instantiations(); }
  int updates() const noexcept requires captures_graphs<D> { return b_.capture.updates(); }

  executor(const executor&) = delete;
  executor& operator=(const executor&) = delete;
  /// Frees what the executor allocated through the driver (drivers that free: `frees`); the
  /// streams and events stay the driver's until it is destroyed.
  /// After a failed step the buffers are left to the driver (its deadline and abort handle work
  /// still queued on them, which a free would wait for).
  ~executor() {
    if constexpr (captures_graphs<D>) b_.capture.release();
    if (failures_.empty()) b_.free_owned();
  }

  int rank() const noexcept { return b_.rank; }
  /// How the last step failed (one entry: this rank's thread), or empty when it succeeded.
  const std::vector<failure>& failures() const noexcept { return failures_; }
  /// A mesh step with GRAD_NORM or FINITE_CHECK: the one double in device memory that holds the
  /// step's Σ x² over every rank's reduced gradients (√: the global norm; not finite: some gradient
  /// overflowed), written on the data-parallel stream (what optimizer_ctx::squares points to);
  /// nullptr for a step without either.
  const double* grad_squares() const noexcept { return b_.squares; }
  /// FSDP with stages that lend their parameters (graph/stage.hpp): plan stage `stage`'s shard as
  /// pipetype holds it on this rank, in device memory (the replica's part, shard_of; what its
  /// OPT_STEP updates and its next gather reads), as bytes; empty where the stage is not lent here.
  /// A lent stage may free its own parameters() once the executor is built: nothing reads them after.
  std::span<std::byte> parameter_shard(int stage) const noexcept {
    if (stage < 0 || static_cast<std::size_t>(stage) >= b_.lent.size()) return {};
    const auto& h = b_.lent[static_cast<std::size_t>(stage)];
    return {h.shard, h.range.size() * h.size};
  }
  /// The same stage's shard's elements of its whole parameters.
  shard_range parameter_range(int stage) const noexcept {
    return stage < 0 || static_cast<std::size_t>(stage) >= b_.lent.size()
               ? shard_range{}
               : b_.lent[static_cast<std::size_t>(stage)].range;
  }
  /// The parameter slots the step's gathers fill on this rank (mesh_program::param_slots), each of
  /// `parameter_slot_bytes()`; 0 where no stage lends its parameters.
  int parameter_slots() const noexcept { return b_.param_slot_count; }
  std::size_t parameter_slot_bytes() const noexcept { return b_.param_stride; }
  std::size_t batch_bytes() const noexcept { return batch_bytes_; }  // per microbatch
  int ops() const noexcept { return static_cast<int>(b_.ops.size()); }
  typename D::stream compute_stream() const noexcept { return b_.streams[0]; }
  typename D::stream comm_stream() const noexcept { return b_.streams[1]; }
  /// Every stream a step uses: compute, communication, and — on a rank with overlapped F&B
  /// pairs — the second compute stream their backward halves run on.
  std::span<const typename D::stream> streams() const noexcept {
    return {b_.streams, static_cast<std::size_t>(b_.nstreams)};
  }

 private:
  // One half of an overlapped F&B pair: the first forks the second compute stream off the
  // compute stream before it runs; the second runs there and joins back, then records on the
  // compute stream.
  void issue_pair_half(D& d, const issue_op& o, const step_feed& b) {
    const typename D::stream s = o.s;
    if (o.pair == 2) d.wait(s, b_.pair_fork);
    if (o.has_wait) d.wait(s, o.wait);
    // after the first half's wait: the lowering drops a second half's wait that the first's covers
    if (o.pair == 1) d.record(b_.pair_fork, s);
    b_.compute(d, b_.calls[o.index], s, b);
    if (o.pair == 2) {
      d.record(b_.pair_join, s);
      d.wait(b_.streams[0], b_.pair_join);
    }
    if (o.has_record) d.record(o.record, o.pair == 2 ? b_.streams[0] : s);
  }
  // What the op at `o` is, for an error: "rank 1, op 7 of 36: group: send activation 1F3 to rank 2".
  std::string where(const issue_op* o) const {
    const auto k = static_cast<std::size_t>(o - b_.ops.data());
    std::string s = "rank " + std::to_string(b_.global) + ", ";
    if (k >= b_.ops.size()) return s + "the step's end";
    return s + "op " + std::to_string(k) + " of " + std::to_string(b_.ops.size()) + ": " + b_.labels[k];
  }
  // One collective of a mesh step, as lowered: in place on the stage's array, or (sharded)
  // through the staging buffer that holds every member's part (NCCL's in-place forms need
  // members · count elements, which a stage's array of n need not be).
  void collective(D& d, const coll& x, typename D::stream s) {
    if (x.what == mesh_op_code::optimizer_step) {  // the stage's hook, launching on the dp stream
      if (x.optimize) x.optimize->optimize(x.optimize->obj, x.args);
      return;
    }
    if (x.what == mesh_op_code::grad_norm || x.what == mesh_op_code::finite_check) {
      if constexpr (issues_collectives<D>) {  // the rank's squares into the one double, then the world's sum
        for (std::uint32_t k = x.parts; k < x.parts_end; ++k) {
          const auto& q = b_.norms[k];
          q.e->squares(q.e->obj, q.array, q.begin, q.end, b_.squares, k > x.parts, d.native(s));
        }
        d.all_reduce(x.array, 1, elem_kind::f64, x.c, s);
      }
      return;  // (a driver without collectives was refused at binding)
    }
    if (x.what == mesh_op_code::offload || x.what == mesh_op_code::reload) {  // on the copy stream
      if constexpr (moves_to_host<D>) {
        if (x.what == mesh_op_code::offload)
          d.copy_to_host(x.host, x.array, x.n, s);
        else
          d.copy_to_device(x.array, x.host, x.n, s);
      }
      return;
    }
    if constexpr (issues_collectives<D> && copies<D>) {
      const std::size_t own = x.own.begin * x.size, own_bytes = x.own.size() * x.size;
      switch (x.what) {
        case mesh_op_code::all_reduce:
          d.all_reduce(x.array, x.n, x.t, x.c, s);
          break;
        case mesh_op_code::reduce_scatter:
          d.copy(b_.staging, x.array, x.n * x.size, s);
          d.reduce_scatter(b_.staging, x.chunk, x.t, x.c, s);
          if (own_bytes) d.copy(x.array + own, b_.staging + own, own_bytes, s);
          break;
        case mesh_op_code::all_gather:
          if (own_bytes) d.copy(b_.staging + own, x.src ? x.src : x.array + own, own_bytes, s);
          d.all_gather(b_.staging, x.chunk * x.size, x.c, s);
          d.copy(x.array, b_.staging, x.n * x.size, s);
          break;
        default:
          break;
      }
    } else {
      (void)d, (void)x, (void)s;
    }
  }
  static std::vector<stage_entry> entries_of_part(const program_view& p, const model_part& part, int rank) {
    pipetype::detail::check_graph(p, part.topology(), "pipetype::cuda");
    if (rank >= 0 && rank < p.ranks) pipetype::detail::check_part(p, part, rank, "pipetype::cuda");
    return part.entries();
  }
  static int rank_of(const D& d, int rank) {
    if (rank >= 0) return rank;
    if constexpr (requires { d.rank(); })
      return d.rank();
    else
      throw std::invalid_argument(
          "pipetype::cuda: executor_options::rank is not set and the driver does not know its rank");
  }
  void note_failure(const issue_op* o, const std::string& what, failure_cause cause) {
    failure f;
    f.rank = b_.global;
    f.cause = cause;
    f.message = what;
    const auto k = o ? static_cast<std::size_t>(o - b_.ops.data()) : b_.ops.size();
    if (k < b_.ops.size()) {
      f.op = static_cast<int>(k);
      f.action = b_.labels[k];
      f.stream = static_cast<stream_id>(o->stream);
    }
    failures_.assign(1, std::move(f));
  }
  // An exception that is no device error, at op `o`: a stage's (a compute op), named as the host
  // executor names it, or another's.
  void note_thrown(const issue_op* o, const char* what) {
    const auto k = static_cast<std::size_t>(o - b_.ops.data());
    if (k >= b_.ops.size() || o->code != op_code::compute)
      return note_failure(o, "pipetype::cuda: rank " + std::to_string(b_.global) + ": " + what,
                          failure_cause::transfer);
    const bound_op& c = b_.calls[o->index];
    note_failure(o,
                 "pipetype::cuda: rank " + std::to_string(b_.global) + ", stage " + std::to_string(c.plan_stage) +
                     ", microbatch " + std::to_string(c.microbatch) + ", action " + std::to_string(c.plan_stage) +
                     kind_char(c.what) + std::to_string(c.microbatch) + " threw: " + what,
                 failure_cause::stage_threw);
  }

  binding b_;                         // what binding made, and the driver
  pipetype::detail::batch_feed fed_;  // the step's feed
  std::vector<failure> failures_;     // the last step's
  int microbatches_ = 0;
  bool forward_only_ = false;  // the plan has no backward (step_feed::forward_only)
  std::size_t batch_bytes_ = 0;
};

template <class Plan, class Model, class D>
executor(const Plan&, Model&, D&) -> executor<D>;
template <class Plan, class Model, class D>
executor(const Plan&, Model&, D&, executor_options<D>) -> executor<D>;

}  // namespace pipetype::cuda
