// pipetype/cuda/executor.hpp — one rank's lowered program, issued through a device driver.
//
// The device executor runs on one host thread per rank (a process per GPU with NCCL, or one
// thread per rank with the loopback transport). Construction binds the rank's lowered ops once:
// buffer slots become addresses in pools the driver allocates (activations, gradients, stashes),
// event ids become events from a pool of `resources.events`, stream ids become the rank's two
// streams, communicator ids become the transport's communicators. `step()` then walks the ops
// in lowered order and issues, per op, exactly
//   [wait(stream, event)]  compute: the stage's forward/backward on the compute stream
//                          group:   group_start, its sends and recvs on the comm stream, group_end
//   [record(event, stream)]
// and ends with a fence (each stream records an event the other waits on, so the next step's
// ops come after every use in this one) — no allocation, no creation, no decision. For a plan
// known at compile time,
// `step_unrolled<plan, rank>()` issues the same calls as straight-line code: the op list is a
// constant, so the compiler unrolls it into one call after another with every stream, event,
// kind and peer decided at compile time (bench_cuda_issue measures both against hand-written
// code). What the stage receives is the host executor's
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

#include <algorithm>
#include <array>
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
#include "pipetype/bind/part.hpp"
#include "pipetype/bind/report.hpp"
#include "pipetype/bind/stage_entry.hpp"
#include "pipetype/compile/lowered.hpp"
#include "pipetype/mesh/verify.hpp"
#include "pipetype/core/mesh.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/cuda/capture.hpp"
#include "pipetype/cuda/driver.hpp"

#if defined(__GNUC__) || defined(__clang__)
#define PIPETYPE_INLINE [[gnu::always_inline]] inline
#else
#define PIPETYPE_INLINE inline
#endif

namespace pipetype::cuda {

namespace detail {

// A rank's issue list as compile-time constants (executor::step_unrolled).
struct static_issue {
  op_code code = op_code::compute;
  int stream = 0, wait = -1, record = -1;
  int pair = 0;                     // an overlapped F&B pair: 1 its first half, 2 its second
  std::size_t index = 0, last = 0;  // compute: the call's index; group: its transfers [index, last)
};
struct static_transfer {
  bool send = false;
  int peer = 0;  // in the communicator
};
template <const auto& Plan, int Rank>
struct static_program {
  static constexpr lowered_view lowered = Plan.lowered();
  static constexpr std::size_t count(bool of_transfers) {
    std::size_t n = 0;
    for (const lowered_op& o : lowered.rank_ops(Rank))
      n += (o.code == op_code::send || o.code == op_code::recv) == of_transfers;
    return n;
  }
  static constexpr auto issues = [] {
    std::array<static_issue, count(false)> out{};
    std::size_t k = 0, calls = 0, transfers = 0;
    bool second_half = false;
    for (const lowered_op& o : lowered.rank_ops(Rank)) {
      if (o.code == op_code::send || o.code == op_code::recv) {
        out[k - 1].last = ++transfers;
        continue;
      }
      static_issue& x = out[k++];
      if (o.code == op_code::compute) {
        x.pair = second_half ? 2 : o.overlapped ? 1 : 0;
        second_half = x.pair == 1;
      }
      x.code = o.code;
      x.stream = static_cast<int>(o.stream);
      x.wait = o.wait_event;
      x.record = o.record_event;
      x.index = x.last = o.code == op_code::compute ? calls++ : transfers;
    }
    return out;
  }();
  static constexpr auto transfers = [] {
    std::array<static_transfer, count(true)> out{};
    std::size_t k = 0;
    for (const lowered_op& o : lowered.rank_ops(Rank))
      if (o.code == op_code::send || o.code == op_code::recv)
        out[k++] = {o.code == op_code::send, o.peer == lowered.comms[static_cast<std::size_t>(o.comm)].rank_a ? 0 : 1};
    return out;
  }();
};
}  // namespace detail

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
      : d_(driver),
        global_(rank_of(driver, opt.rank)),
        rank_(mp ? mp->shape.pipeline_rank(global_) : global_),
        entries_(std::move(entries)),
        comms_(std::move(opt.comms)),
        keep_outputs_(opt.keep_outputs),
        mesh_(mp) {
    const program_view& p = v.compute;
    const lowered_view& l = v.lowered;
    if (mp && (global_ < 0 || global_ >= mp->shape.size() || mp->shape.pp != p.ranks))
      throw std::invalid_argument("pipetype::cuda: rank " + std::to_string(global_) + " is not in the mesh's " +
                                  std::to_string(mp->shape.size()) + " ranks, or the mesh is not the plan's");
    if (rank_ < 0 || rank_ >= p.ranks)
      throw std::invalid_argument("pipetype::cuda: rank " + std::to_string(rank_) + " is not in the plan's " +
                                  std::to_string(p.ranks) + " ranks");
    const int L = p.lane_length();
    pipetype::detail::check_model(p, entries_, "pipetype::cuda");
    pipetype::detail::check_gradients(p, entries_, opt.ordered_gradients, "pipetype::cuda");
    if constexpr (!host_memory<D>)
      for (std::size_t s = 0; s < entries_.size(); ++s)
        if (entries_[s].add != nullptr && !entries_[s].adds_on_stream)
          throw std::invalid_argument(
              "pipetype::cuda: stage " + std::to_string(s) +
              " declares a weight_grad but has no add_weight_grad(std::span<const T> g, void* stream): on a device "
              "pipetype cannot add weight gradients itself; give the stage that member (launch the add on "
              "`stream`) or accumulate in the stage and drop weight_grad");
    const std::size_t ncomms = mp ? mp->comms.size() : l.comms.size();
    if constexpr (std::is_integral_v<typename D::comm>)
      if (comms_.empty())
        for (std::size_t c = 0; c < ncomms; ++c) comms_.push_back(static_cast<typename D::comm>(c));
    if (comms_.size() < ncomms)
      throw std::invalid_argument("pipetype::cuda: the " + std::string(mp ? "mesh step" : "plan") + " uses " +
                                  std::to_string(ncomms) + " communicators, " + std::to_string(comms_.size()) +
                                  " given");
    if constexpr (!host_memory<D>) {
      const std::vector<int> consumers = pipetype::detail::consumers_of(p);
      for (std::size_t s = 0; s < consumers.size(); ++s)
        if (consumers[s] > 1 && entries_[s].obj != nullptr && !entries_[s].sums_on_stream)
          throw std::invalid_argument(
              "pipetype::cuda: stage " + std::to_string(s) + " feeds " + std::to_string(consumers[s]) +
              " stages, whose gradients are summed before its backward, and has no add_grad_output(std::span<T> "
              "into, std::span<const T> g, void* stream): on a device pipetype cannot add them itself; give the "
              "stage that member (launch the add on `stream`)");
    }
    batch_ = pipetype::detail::batch_layout_of(p, entries_);
    batch_bytes_ = batch_.row;
    microbatches_ = p.microbatches;
    forward_only_ = is_forward_only(p);
    if (mp && p.lanes > 1)
      throw std::invalid_argument("pipetype::cuda: a plan of " + std::to_string(p.lanes) +
                                  " lanes (DualPipe) does not run over a mesh yet: each stage lives on two ranks of a "
                                  "replica, whose copies would need a reduction of their own");
    try {
      bind(p, l, L);
    } catch (...) {  // a binding refused half-way frees what it allocated so far
      free_owned();
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
    pipetype::detail::feed_from_batch(batch_, entries_, microbatches_, b, in, tg, "pipetype::cuda");
  }
  /// Where the sinks on this rank write their losses: sinks × microbatches floats (sink k's
  /// microbatch j at k · microbatches + j) in memory from the driver (device memory with the CUDA
  /// driver), written by the sinks' kernels during the step; read them once the step's work is
  /// done. nullptr when the model has no sink on this rank. Only the cells this rank's forwards
  /// write are the step's (writes_loss): under DualPipe(V) a sink runs on two ranks, each for its
  /// half of the microbatches, and the other cells keep whatever they held.
  float* losses() const noexcept { return losses_; }
  /// Whether this rank runs sink k's forward of microbatch j, and so writes losses()[k · m + j].
  bool writes_loss(int sink, int microbatch) const noexcept {
    const std::size_t at =
        static_cast<std::size_t>(sink) * static_cast<std::size_t>(microbatches_) + static_cast<std::size_t>(microbatch);
    return sink >= 0 && microbatch >= 0 && microbatch < microbatches_ && at < loss_written_.size() && loss_written_[at];
  }
  /// Where the sinks on this rank keep their outputs (executor_options::keep_outputs; nullptr
  /// otherwise): sink k's output block of microbatch j at output_offset(k, j) bytes, in memory from
  /// the driver (device memory with the CUDA driver), written by the sinks' kernels during the step.
  /// A block of varying tensors is packed at its microbatch's length (graph/tensors.hpp's shape_at).
  std::byte* outputs() const noexcept { return outputs_; }
  std::size_t output_offset(int sink, int microbatch) const noexcept {
    return outputs_at_.at(sink, microbatch, microbatches_);
  }
  /// The loss scaling's factor of the last step (d objective / d loss_j, batch::scale).
  double loss_scale() const noexcept { return fed_.scale; }

 private:
  void feed(const void* batch) {
    pipetype::detail::check_one_array(batch_, entries_, "pipetype::cuda");
    fed_.take_rows(static_cast<const std::byte*>(batch), batch_, entries_, microbatches_);
  }
  void feed(const pipetype::batch& b) { fed_.take(b, batch_, entries_, microbatches_, "pipetype::cuda"); }
  step_feed feed_of() const noexcept {
    step_feed f = fed_.view(losses_, microbatches_);
    f.forward_only = forward_only_;
    return f;
  }
  void run() {
    // locals, so the compiler need not reload them after every driver call
    D& d = d_;
    const bound_op* const calls = calls_.data();
    const transfer* const tr = transfers_.data();
    const step_feed b = feed_of();
    const issue_op* o = ops_.data();
    failures_.clear();  // current after every step: empty, or how this one ended
    try {
      for (const issue_op* e = o + ops_.size(); o != e; ++o) {
        if (o->pair) [[unlikely]] {
          issue_pair_half(d, *o, b);
          continue;
        }
        const typename D::stream s = o->s;
        if (o->has_wait) d.wait(s, o->wait);
        if (o->code == op_code::compute) {
          compute(d, calls[o->index], s, b);
        } else if (o->code == op_code::collective) {  // a mesh step's (or only its record or wait)
          if (o->index != no_collective)              // (a copy's parts: its stash, then each input it moves)
            for (std::uint32_t k = o->index, end = o->last > k ? o->last : k + 1; k != end; ++k)
              collective(d, colls_[k], s);
        } else {
          d.group_start();
          for (const transfer *x = tr + o->index, *end = tr + o->last; x != end; ++x) {
            if (x->send)
              d.send(x->buf, bytes_of(*x, b), x->peer, x->c, s);
            else
              d.recv(x->buf, bytes_of(*x, b), x->peer, x->c, s);
          }
          d.group_end();
        }
        if (o->has_record) d.record(o->record, s);
      }
      if (!later_.empty()) add_later();
      fence(d);
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
    if (mesh_ || rank_ != Rank || ops_.size() != P::issues.size() || transfers_.size() != P::transfers.size())
      throw std::logic_error("pipetype::cuda: step_unrolled<plan, " + std::to_string(Rank) +
                             ">: this executor was bound to rank " + std::to_string(rank_) + " of another plan");
    feed(batch);
    const step_feed f = feed_of();
    const static_args a{d_,          calls_.data(), transfers_.data(), events_.data(),
                        streams_[0], streams_[1],   streams_[2],       &f};
    try {
      issue_all<P>(a, std::make_index_sequence<P::issues.size()>{});
      if (!later_.empty()) add_later();
      fence(d_);
    } catch (const device_error& err) {
      const device_error named(std::string(err.what()) + " [while issuing rank " + std::to_string(rank_) +
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
    capture_.capture([&] { run(); });
  }
  void capture(const pipetype::batch& b) requires captures_graphs<D> {
    feed(b);
    capture_.capture([&] { run(); });
  }
  /// Launches the captured step (capture() first), ordered like an eager step: after everything
  /// already on the rank's streams (they join into the origin stream), and before whatever comes
  /// next on them (they wait on the origin after the launch).
  void replay() requires captures_graphs<D> { capture_.replay(); }
  typename D::stream origin_stream() const noexcept requires captures_graphs<D> { return capture_.origin(); }
  int instantiations() const noexcept requires captures_graphs<D> { return capture_.instantiations(); }
  int updates() const noexcept requires captures_graphs<D> { return capture_.updates(); }

  executor(const executor&) = delete;
  executor& operator=(const executor&) = delete;
  /// Frees what the executor allocated through the driver (drivers that free: `frees`); the
  /// streams and events stay the driver's until it is destroyed.
  /// After a failed step the buffers are left to the driver (its deadline and abort handle work
  /// still queued on them, which a free would wait for).
  ~executor() {
    if constexpr (captures_graphs<D>) capture_.release();
    if (failures_.empty()) free_owned();
  }

  int rank() const noexcept { return rank_; }
  /// How the last step failed (one entry: this rank's thread), or empty when it succeeded.
  const std::vector<failure>& failures() const noexcept { return failures_; }
  std::size_t batch_bytes() const noexcept { return batch_bytes_; }  // per microbatch
  int ops() const noexcept { return static_cast<int>(ops_.size()); }
  typename D::stream compute_stream() const noexcept { return streams_[0]; }
  typename D::stream comm_stream() const noexcept { return streams_[1]; }
  /// Every stream a step uses: compute, communication, and — on a rank with overlapped F&B
  /// pairs — the second compute stream their backward halves run on.
  std::span<const typename D::stream> streams() const noexcept {
    return {streams_, static_cast<std::size_t>(nstreams_)};
  }

 private:
  struct transfer {
    bool send = false;
    int peer = -1;  // in the communicator
    void* buf = nullptr;
    std::size_t bytes = 0;
    typename D::comm c{};
    const bound_op* varies = nullptr;  // tensors that vary per microbatch: its bytes (transfer_bytes)
  };
  // A transfer's bytes this step (its microbatch's, when its tensors vary and the batch has lengths).
  static std::size_t bytes_of(const transfer& x, const step_feed& f) noexcept {
    return f.lengths && x.varies ? pipetype::detail::transfer_bytes(*x.varies, f) : x.bytes;
  }
  struct later_add {
    add_fn add = nullptr;
    void* obj = nullptr;
    const std::byte* grad = nullptr;
    int stage = -1, microbatch = -1;
  };
  // One collective of a mesh step, bound: the stage's array (device memory), its elements and
  // kind, the communicator, and (sharded) this member's shard and each member's part in staging_.
  // An OFFLOAD or RELOAD: `n` bytes between the device slot `array` and the host slot `host`.
  struct coll {
    mesh_op_code what = mesh_op_code::all_reduce;
    std::byte* array = nullptr;
    std::byte* host = nullptr;
    std::size_t n = 0, size = 0, chunk = 0;
    elem_kind t = elem_kind::other;
    typename D::comm c{};
    shard_range own{};
  };
  static constexpr std::uint32_t no_collective = 0xffffffffu;
  // One op as issued: its stream and events resolved to the driver's handles.
  struct issue_op {
    op_code code = op_code::compute;
    bool has_wait = false, has_record = false;
    std::uint8_t pair = 0;    // an overlapped F&B pair: 1 its first half, 2 its second (on streams_[2])
    std::uint8_t stream = 0;  // the program's stream (0 compute, 1 comm, 2 a mesh's dp), for failures
    std::uint32_t index = 0;  // compute: calls_[index]; group: transfers_[index, last); collective: colls_[index]
                              // (a copy: colls_[index, last), its parts)
    std::uint32_t last = 0;
    typename D::stream s{};
    typename D::event wait{}, record{};
  };

  PIPETYPE_INLINE void compute(D& d, const bound_op& c, typename D::stream s, const step_feed& b) {
    if constexpr (observes_compute<D>) d.on_compute(s, kind_char(c.what), c.plan_stage, c.microbatch);
    c.fn(c.obj, c, b);
    for (int k = 0; k < c.add_count; ++k) c.add(c.obj, adds_[static_cast<std::size_t>(c.add_begin + k)], c.stream);
  }
  // One half of an overlapped F&B pair: the first forks the second compute stream off the
  // compute stream before it runs; the second runs there and joins back, then records on the
  // compute stream.
  void issue_pair_half(D& d, const issue_op& o, const step_feed& b) {
    const typename D::stream s = o.s;
    if (o.pair == 2) d.wait(s, pair_fork_);
    if (o.has_wait) d.wait(s, o.wait);
    // after the first half's wait: the lowering drops a second half's wait that the first's covers
    if (o.pair == 1) d.record(pair_fork_, s);
    compute(d, calls_[o.index], s, b);
    if (o.pair == 2) {
      d.record(pair_join_, s);
      d.wait(streams_[0], pair_join_);
    }
    if (o.has_record) d.record(o.record, o.pair == 2 ? streams_[0] : s);
  }
  // What the op at `o` is, for an error: "rank 1, op 7 of 36: group: send activation 1F3 to rank 2".
  std::string where(const issue_op* o) const {
    const auto k = static_cast<std::size_t>(o - ops_.data());
    std::string s = "rank " + std::to_string(global_) + ", ";
    if (k >= ops_.size()) return s + "the step's end";
    return s + "op " + std::to_string(k) + " of " + std::to_string(ops_.size()) + ": " + labels_[k];
  }
  // The step's end: each stream waits for the other's last op, so the next step's first ops
  // (a recv into a slot, a compute over one) come after every use in this step.
  // A mesh step's data-parallel stream joins in: the compute stream waits for it (the next
  // step's adds come after this step's reductions) and it for the compute stream (the next
  // gathers after this step's computes); so does the copy stream of memory actions.
  PIPETYPE_INLINE void fence(D& d) {
    d.record(fence_[0], streams_[0]);
    d.record(fence_[1], streams_[1]);
    d.wait(streams_[1], fence_[0]);
    d.wait(streams_[0], fence_[1]);
    if (dp_ > 0) [[unlikely]] {
      d.record(fence_[2], streams_[dp_]);
      d.wait(streams_[0], fence_[2]);
      d.wait(streams_[dp_], fence_[0]);
    }
    if (copy_ > 0) [[unlikely]] {  // the copy stream likewise (the next step's slots after this one's copies)
      d.record(fence_[3], streams_[copy_]);
      d.wait(streams_[0], fence_[3]);
      d.wait(streams_[copy_], fence_[0]);
    }
  }
  // One collective of a mesh step, as lowered: in place on the stage's array, or (sharded)
  // through the staging buffer that holds every member's part (NCCL's in-place forms need
  // members · count elements, which a stage's array of n need not be).
  void collective(D& d, const coll& x, typename D::stream s) {
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
          d.copy(staging_, x.array, x.n * x.size, s);
          d.reduce_scatter(staging_, x.chunk, x.t, x.c, s);
          if (own_bytes) d.copy(x.array + own, staging_ + own, own_bytes, s);
          break;
        case mesh_op_code::all_gather:
          if (own_bytes) d.copy(staging_ + own, x.array + own, own_bytes, s);
          d.all_gather(staging_, x.chunk * x.size, x.c, s);
          d.copy(x.array, staging_, x.n * x.size, s);
          break;
        default:
          break;
      }
    } else {
      (void)d, (void)x, (void)s;
    }
  }
  void add_later() {
    for (const later_add& a : later_) a.add(a.obj, a.grad, compute_native_);  // later lanes', in order
  }
  // What the unrolled step reads, in locals.
  struct static_args {
    D& d;
    const bound_op* calls;
    const transfer* tr;
    const typename D::event* ev;
    typename D::stream compute, comm, aux;
    const step_feed* feed;
  };
  template <class P, std::size_t... I>
  PIPETYPE_INLINE void issue_all(const static_args a, std::index_sequence<I...>) {
    (issue_static<P, P::issues[I]>(a), ...);
  }
  template <class P, std::size_t First, std::size_t... K>
  PIPETYPE_INLINE void transfer_all(const static_args a, typename D::stream s, std::index_sequence<K...>) {
    (transfer_static<P, First + K>(a, s), ...);
  }
  template <class P, detail::static_issue X>
  PIPETYPE_INLINE void issue_static(const static_args& a) {
    const typename D::stream s = X.pair == 2 ? a.aux : X.stream == 0 ? a.compute : a.comm;
    if constexpr (X.pair == 2) a.d.wait(s, pair_fork_);
    if constexpr (X.wait >= 0) a.d.wait(s, a.ev[X.wait]);
    if constexpr (X.pair == 1) a.d.record(pair_fork_, s);  // after the first half's wait (see issue_pair_half)
    if constexpr (X.code == op_code::compute) {
      compute(a.d, a.calls[X.index], s, *a.feed);
      if constexpr (X.pair == 2) {
        a.d.record(pair_join_, s);
        a.d.wait(a.compute, pair_join_);
      }
    } else {
      a.d.group_start();
      transfer_all<P, X.index>(a, s, std::make_index_sequence<X.last - X.index>{});
      a.d.group_end();
    }
    if constexpr (X.record >= 0) a.d.record(a.ev[X.record], X.pair == 2 ? a.compute : s);
  }
  template <class P, std::size_t K>
  PIPETYPE_INLINE void transfer_static(const static_args& a, typename D::stream s) {
    const transfer& t = a.tr[K];
    if constexpr (P::transfers[K].send)
      a.d.send(t.buf, bytes_of(t, *a.feed), P::transfers[K].peer, t.c, s);
    else
      a.d.recv(t.buf, bytes_of(t, *a.feed), P::transfers[K].peer, t.c, s);
  }

  void bind(const program_view& p, const lowered_view& l, int L) {
    const std::vector<int> edge_inputs = pipetype::detail::edge_input_positions(p);  // per-edge inputs' positions
    const rank_resources& res = l.resources[static_cast<std::size_t>(rank_)];
    const std::span<const lowered_op> ops = l.rank_ops(rank_);
    auto entry = [&](int s) -> const stage_entry& { return entries_[static_cast<std::size_t>(s % L)]; };
    const rank_pools layout = pipetype::detail::layout_of(p, ops, res, entries_);  // the plan's pools (pools_of)
    // a mesh step with memory actions: the stashes in a pool of the step's peak, in the slots its
    // lowering gave them (mesh/memory_slots.hpp), the offloaded ones in pinned host memory, and
    // the activations in the pool it planned (mesh/activation_slots.hpp)
    const bool memory = mesh_ && !mesh_->memory.empty();
    const std::size_t activation_slots =
        memory ? static_cast<std::size_t>(mesh_->activation_slots.at(static_cast<std::size_t>(global_)))
               : static_cast<std::size_t>(res.activation_slots);
    std::byte* acts = alloc(layout.activation_stride * activation_slots);
    std::byte* grads = alloc(layout.gradients);
    pipetype::detail::memory_layout ml;
    std::size_t host_stride = 0;  // a host slot: a stash, then the inputs its copy moves
    std::byte *stash_pool = nullptr, *scratch_stash = nullptr, *scratch_out = nullptr;
    if (memory) {
      ml = pipetype::detail::memory_layout_of(mesh_->memory, *mesh_, global_, layout.stash_stride);
      pipetype::detail::check_offloads_movable(*mesh_, global_,
                                               [&](int stage) -> const stage_entry& { return entry(stage); });
      stash_pool = alloc(ml.stride * static_cast<std::size_t>(ml.device_slots));
      scratch_stash = alloc(ml.stride);
      std::size_t out_bytes = 0;
      for (const lowered_op& o : ops)
        if (o.code == op_code::compute) out_bytes = std::max(out_bytes, entry(o.stage).out.bytes);
      scratch_out = alloc(pipetype::detail::round_up64(out_bytes));
      host_stride = ml.stride + layout.activation_stride * pipetype::detail::most_moved_inputs(*mesh_, global_);
      if (ml.host_slots > 0 && host_stride > 0) {
        if constexpr (moves_to_host<D>)
          host_pool_ = static_cast<std::byte*>(d_.allocate_host(host_stride * static_cast<std::size_t>(ml.host_slots)));
        else
          throw std::invalid_argument("pipetype::cuda: rank " + std::to_string(global_) +
                                      ": the step offloads stashes to host memory and the driver cannot keep them "
                                      "there (moves_to_host: allocate_host, free_host, copy_to_host, copy_to_device)");
      }
    }
    // mesh op k's stash: its slot in the pool, the scratch block (a forward that is recomputed), or none
    auto stash_at = [&](std::size_t k) -> std::byte* {
      if (ml.stride == 0) return nullptr;
      const mesh_op& o = ml.ops[k];
      if (o.scratch) return scratch_stash;
      return o.stash_slot >= 0 ? stash_pool + ml.stride * static_cast<std::size_t>(o.stash_slot) : nullptr;
    };
    // per (stage, microbatch): its forward's calls_ index and lowered op (for a RECOMPUTE)
    std::vector<int> forward_call, forward_op;
    if (memory) forward_call.assign(static_cast<std::size_t>(p.stages) * static_cast<std::size_t>(p.microbatches), -1);
    if (memory) forward_op.assign(forward_call.size(), -1);
    std::byte* stashes = memory ? nullptr : alloc(layout.stashes);
    for (const lowered_op& o : ops)
      if (o.code == op_code::compute &&
          std::find(stages_here_.begin(), stages_here_.end(), o.stage) == stages_here_.end())
        stages_here_.push_back(o.stage);
    bool sinks_here = false;
    for (const lowered_op& o : ops)
      sinks_here =
          sinks_here || (o.code == op_code::compute && batch_.sink[static_cast<std::size_t>(o.stage % L)] >= 0);
    if (sinks_here) {
      const std::size_t cells = static_cast<std::size_t>(batch_.sinks) * static_cast<std::size_t>(p.microbatches);
      losses_ = reinterpret_cast<float*>(alloc(sizeof(float) * cells));
      loss_written_.assign(cells, false);
      for (const lowered_op& o : ops) {
        if (o.code != op_code::compute || o.what != kind::F) continue;
        if (const int k = batch_.sink[static_cast<std::size_t>(o.stage % L)]; k >= 0)
          loss_written_[static_cast<std::size_t>(k) * static_cast<std::size_t>(p.microbatches) +
                        static_cast<std::size_t>(o.microbatch)] = true;
      }
    }
    if (sinks_here && keep_outputs_) {
      outputs_at_ = pipetype::detail::output_layout_of(batch_, entries_, p.microbatches);
      outputs_ = alloc(outputs_at_.bytes);
    }
    auto at = [](std::byte* pool, std::size_t stride, int slot) {
      return slot < 0 || pool == nullptr ? nullptr : pool + stride * static_cast<std::size_t>(slot);
    };
    // the activation slot of lowered slot `slot` at the op being bound: the lowering's, or with
    // memory actions the one the step's pool has it in at mesh op `here` (act_slot)
    const mesh_op* here = nullptr;
    auto act_at = [&](int slot) {
      if (memory && slot >= 0) {
        const int k = here ? mesh_->act_slot(*here, slot) : -1;
        if (k < 0) throw std::logic_error("pipetype::cuda: an activation the mesh step does not place");
        return at(acts, layout.activation_stride, k);
      }
      return at(acts, layout.activation_stride, slot);
    };
    auto grad_at = [&](int slot) { return at(grads, layout.gradient_stride, slot); };
    // (with memory actions, room for each RECOMPUTE's inputs again: at most one a forward)
    lists_.reserve(pipetype::detail::list_pool_size(l, ops) * (memory ? 2 : 1));
    const pipetype::detail::weight_grad_plan wg = pipetype::detail::plan_weight_grads(ops, res, entries_);
    std::byte* wgrads = alloc(wg.bytes);
    auto wg_at = [&](int slot) { return wgrads + wg.offset[static_cast<std::size_t>(slot)]; };
    for (const pipetype::detail::weight_grad_plan::held& h : wg.later)
      later_.push_back({entry(h.stage).add, entry(h.stage).obj, wg_at(h.slot), h.stage, h.microbatch});
    pipetype::detail::sort_later(later_, L);
    // events and streams, once (a mesh step's rank has the mesh program's events: the pipeline's and more)
    const int nevents = mesh_ ? mesh_->events[static_cast<std::size_t>(global_)] : res.events;
    for (int e = 0; e < nevents; ++e) events_.push_back(d_.make_event());
    streams_[0] = d_.make_stream();
    streams_[1] = d_.make_stream();
    compute_native_ = d_.native(streams_[0]);
    fence_[0] = d_.make_event();
    fence_[1] = d_.make_event();
    bool pairs = false;
    for (const lowered_op& o : ops) pairs = pairs || (o.code == op_code::compute && o.overlapped);
    if (pairs) {  // the second compute stream of F&B pairs, with its fork and join events
      streams_[2] = d_.make_stream();
      nstreams_ = 3;
      pair_fork_ = d_.make_event();
      pair_join_ = d_.make_event();
    }
    void* const aux_native = pairs ? d_.native(streams_[2]) : nullptr;
    if (mesh_) {  // a mesh step's data-parallel stream, after the others
      dp_ = nstreams_;
      streams_[nstreams_++] = d_.make_stream();
      fence_[2] = d_.make_event();
    }
    if (memory) {  // and its copy stream, with memory actions
      copy_ = nstreams_;
      streams_[nstreams_++] = d_.make_stream();
      fence_[3] = d_.make_event();
    }
    if constexpr (captures_graphs<D>) {  // the capture's origin stream and its fork/join with each stream
      capture_.open(d_);
      for (int k = 0; k < nstreams_; ++k) capture_.add(d_, streams_[k]);
    }
    bool second_half = false;  // the next compute op is the second half of a pair
    // the issue list: the rank's lowered ops, or (a mesh step) its mesh program's, whose ops copy
    // lowered ones (`source`) on the replica's communicators or are the mesh's own
    const std::span<const mesh_op> mesh_ops = mesh_ ? mesh_->rank_ops(global_) : std::span<const mesh_op>{};
    const std::size_t count = mesh_ ? mesh_ops.size() : ops.size();
    std::size_t staging = 0;  // the largest sharded collective's parts, all members'
    for (std::size_t k = 0; k < count; ++k) {
      const mesh_op* m = mesh_ ? &mesh_ops[k] : nullptr;
      if (m && (is_copy(m->code) || m->code == mesh_op_code::recompute)) {
        const std::size_t cell = static_cast<std::size_t>(m->stage) * static_cast<std::size_t>(p.microbatches) +
                                 static_cast<std::size_t>(m->microbatch);
        issue_op x;
        x.s = stream_of(m->stream);
        x.stream = static_cast<std::uint8_t>(m->stream);
        if (m->code == mesh_op_code::recompute) {  // its forward again, on the compute stream, into its slot
          const int f = forward_call.empty() ? -1 : forward_call[cell];
          if (f < 0)
            throw std::invalid_argument("pipetype::cuda: rank " + std::to_string(global_) + ": " +
                                        pipetype::detail::mesh_op_label(*m) + " comes before its forward");
          bound_op again = calls_[static_cast<std::size_t>(f)];
          // its inputs where the RECOMPUTE finds them (a RELOAD may have brought them back elsewhere)
          const op_slots sl = l.slots_of(ops[static_cast<std::size_t>(forward_op[cell])]);
          here = m;
          if (!sl.in.empty()) again.in = act_at(sl.in[0]);
          if (sl.in.size() > 1) {
            if (lists_.size() + sl.in.size() > lists_.capacity())
              throw std::logic_error("pipetype::cuda: the list pool is smaller than its RECOMPUTEs need");
            again.in_list = lists_.data() + lists_.size();
            for (const int slot : sl.in) lists_.push_back(act_at(slot));
          }
          again.stash = stash_at(k);
          again.stream = compute_native_;  // (on the compute stream, after the RELOAD it waits for)
          again.out = scratch_out;         // (its output is the forward's, still in its slot)
          again.add_count = 0;
          again.recomputed = false;  // (the forward it repeats keeps nothing; this one builds the backward's state)
          x.code = op_code::compute;
          x.index = static_cast<std::uint32_t>(calls_.size());
          calls_.push_back(again);
        } else {  // a copy between its device slots and its host slot, on the copy stream
          std::byte* host = ml.ops[k].host_slot >= 0 && host_pool_
                                ? host_pool_ + host_stride * static_cast<std::size_t>(ml.ops[k].host_slot)
                                : nullptr;
          x.code = op_code::collective;
          x.index = static_cast<std::uint32_t>(colls_.size());
          auto part = [&](std::byte* dev, std::byte* to, std::size_t n) {
            if (dev == nullptr || to == nullptr || n == 0) return;  // a recomputed forward's: nothing moves
            coll c;
            c.what = m->code;
            c.array = dev;
            c.host = to;
            c.n = n;
            colls_.push_back(c);
          };
          part(stash_at(k), host, entry(m->stage).stash_bytes());  // its stash, then each input it moves
          const int moved = mesh_->act_count(*m);
          for (int q = 0; q < moved; ++q)
            part(at(acts, layout.activation_stride, mesh_->act_at(*m, q).slot),
                 host ? host + ml.stride + layout.activation_stride * static_cast<std::size_t>(q) : nullptr,
                 pipetype::detail::moved_input_bytes(entry(m->stage), moved, layout.activation_stride));
          x.last = static_cast<std::uint32_t>(colls_.size());
          if (x.last == x.index) continue;
        }
        labels_.push_back(pipetype::detail::mesh_op_label(*m));
        ops_.push_back(x);
        continue;
      }
      if (m && m->source < 0) {
        bind_mesh_op(*m, L, staging);
        continue;
      }
      const std::size_t i = m ? static_cast<std::size_t>(m->source) : k;
      here = m;  // (act_at: the slots this op finds its activations in)
      const lowered_op& o = ops[i];
      const int wait_event = m ? m->wait_event : o.wait_event, record_event = m ? m->record_event : o.record_event;
      if (o.code == op_code::send || o.code == op_code::recv) {
        const stage_entry& e = entry(pipetype::detail::transfer_stage(p, o));  // its end on this rank
        const int cid = m ? m->comm : o.comm;
        // the peer's rank in the communicator: its place among the members (a pipeline's rank_a is 0)
        int peer = o.peer == l.comms[static_cast<std::size_t>(o.comm)].rank_a ? 0 : 1;
        if (m) {
          const std::vector<int>& ms = mesh_->comms[static_cast<std::size_t>(cid)].members;
          peer = static_cast<int>(std::lower_bound(ms.begin(), ms.end(), m->peer) - ms.begin());
        }
        transfers_.push_back(
            {o.code == op_code::send, peer, o.what == kind::F ? act_at(o.slot) : grad_at(o.slot),
             pipetype::detail::full_transfer_bytes(o, e, pipetype::detail::transfer_edge_input(edge_inputs, o)),
             comms_[static_cast<std::size_t>(cid)], nullptr});
        if (e.varies) {  // its bytes per microbatch: an op that says which (kept in varying_)
          bound_op& v = varying_.emplace_back();
          v.code = o.code;
          v.what = o.what;
          v.microbatch = o.microbatch;
          v.entry = &e;
          v.edge_input = pipetype::detail::transfer_edge_input(edge_inputs, o);
          v.bytes = transfers_.back().bytes;
          transfers_.back().varies = &v;
        }
        ops_.back().last = static_cast<std::uint32_t>(transfers_.size());
        std::string& label = labels_.back();  // "group: send activation 1F3 to rank 2; recv …"
        label += label == "group" ? ": " : "; ";
        label += std::string(o.code == op_code::send ? "send " : "recv ") +
                 (o.what == kind::F ? "activation " : "gradient ") + pipetype::detail::action_name(o) +
                 (o.code == op_code::send ? " to rank " : " from rank ") + std::to_string(m ? m->peer : o.peer);
        continue;
      }
      issue_op x;
      x.code = o.code;
      x.s = streams_[static_cast<int>(o.stream)];
      x.stream = static_cast<std::uint8_t>(o.stream);
      x.has_wait = wait_event >= 0;
      x.has_record = record_event >= 0;
      if (x.has_wait) x.wait = events_[static_cast<std::size_t>(wait_event)];
      if (x.has_record) x.record = events_[static_cast<std::size_t>(record_event)];
      if (o.code == op_code::group) {
        x.index = x.last = static_cast<std::uint32_t>(transfers_.size());
        labels_.emplace_back("group");
      } else {
        labels_.push_back("compute " + pipetype::detail::action_name(o));
        if (second_half) {
          x.pair = 2;
          x.s = streams_[2];
          second_half = false;
        } else if (o.overlapped) {
          x.pair = 1;
          second_half = true;
        }
        x.index = static_cast<std::uint32_t>(calls_.size());
        bound_op& call = calls_.emplace_back();
        const stage_entry& e = entry(o.stage);
        pipetype::detail::check_split(e, action{o.what, o.stage, o.microbatch, false}, "pipetype::cuda");
        const int st = layout.stash_stride > 0 ? o.stash_slot : -1;
        pipetype::detail::bind_compute(call, o, e, L, act_at, grad_at,
                                       memory    ? stash_at(k)
                                       : st >= 0 ? stashes + layout.stash_stride * static_cast<std::size_t>(st)
                                                 : nullptr,
                                       l, batch_, lists_);
        if (memory && o.what == kind::F) {
          call.recomputed = mesh_ops[k].scratch;
          const std::size_t cell = static_cast<std::size_t>(o.stage) * static_cast<std::size_t>(p.microbatches) +
                                   static_cast<std::size_t>(o.microbatch);
          forward_call[cell] = static_cast<int>(x.index);
          forward_op[cell] = static_cast<int>(i);
        }
        call.stream = x.pair == 2 ? aux_native : compute_native_;
        if (outputs_ && o.what == kind::F && call.sink >= 0)  // a sink's output, kept
          call.out = outputs_ + outputs_at_.at(call.sink, o.microbatch, p.microbatches);
        if (wg.slot[i] >= 0) {
          call.weight_grad = wg_at(wg.slot[i]);
          call.add = e.add;
          call.add_begin = static_cast<int>(adds_.size());
          call.add_count = static_cast<int>(wg.adds[i].size());
          for (int g : wg.adds[i]) adds_.push_back(wg_at(g));
        }
      }
      ops_.push_back(x);
    }
    if (staging) staging_ = alloc(staging);
  }

  // The driver's stream of mesh stream `s` (compute, comm, dp, copy).
  typename D::stream stream_of(int s) const noexcept {
    return s == dp_stream ? streams_[dp_] : s == copy_stream ? streams_[copy_] : streams_[s];
  }
  // An op of a mesh step's own (no lowered op behind it): an event's record or wait, a collective
  // on the data-parallel stream, or a release (nothing on a device: the proof keeps every compute
  // of the stage after its next gather).
  void bind_mesh_op(const mesh_op& m, int L, std::size_t& staging) {
    issue_op x;
    x.code = op_code::collective;
    x.index = no_collective;
    x.s = stream_of(m.stream);
    x.stream = static_cast<std::uint8_t>(m.stream);
    const std::string at = "pipetype::cuda: rank " + std::to_string(global_);
    switch (m.code) {
      case mesh_op_code::record:
      case mesh_op_code::wait:
        (m.code == mesh_op_code::record ? x.has_record : x.has_wait) = true;
        (m.code == mesh_op_code::record ? x.record : x.wait) = events_.at(static_cast<std::size_t>(m.event));
        labels_.push_back(std::string(m.code == mesh_op_code::record ? "record e" : "wait e") +
                          std::to_string(m.event));
        ops_.push_back(x);
        return;
      case mesh_op_code::release:
        return;
      case mesh_op_code::local_sum:
        throw std::invalid_argument(at + ": tie group " + std::to_string(m.tie) +
                                    " has all its stages on this rank: their sum would need a device add pipetype "
                                    "does not have (place the tied stages on different ranks)");
      default:
        break;
    }
    if constexpr (!(issues_collectives<D> && copies<D>))
      throw std::invalid_argument(at + ": the mesh step has collectives (" + pipetype::detail::mesh_op_label(m) +
                                  ") and the driver issues none (issues_collectives)");
    int stage = m.stage;  // the stage whose array it works on: its own, or the tie group's one on this rank
    if (m.tie >= 0) {
      int held = 0;
      for (const int s : mesh_->ties.at(static_cast<std::size_t>(m.tie)))
        if (std::find(stages_here_.begin(), stages_here_.end(), s) != stages_here_.end()) stage = s, ++held;
      if (held != 1)
        throw std::invalid_argument(at + ": tie group " + std::to_string(m.tie) + " has " + std::to_string(held) +
                                    " stages on this rank; a device executor reduces one tied array per rank");
    }
    const stage_entry& e = entries_[static_cast<std::size_t>(stage % L)];
    std::size_t size = 0;
    const std::span<std::byte> a =
        pipetype::detail::collective_array(e, m.code == mesh_op_code::all_gather, m.tie, stage, size, "pipetype::cuda");
    coll c;
    c.what = m.code;
    c.array = a.data();
    c.size = size;
    c.n = size ? a.size() / size : 0;
    c.t = m.code == mesh_op_code::all_gather ? elem_kind::other : e.grad_kind;
    if (m.code != mesh_op_code::all_gather && c.t == elem_kind::other)
      throw shape_error(at + ": stage " + std::to_string(stage) +
                        "'s weight_grad elements are no type NCCL sums from here (float, double, int32, int64)");
    c.c = comms_[static_cast<std::size_t>(m.comm)];
    const std::vector<int>& ms = mesh_->comms[static_cast<std::size_t>(m.comm)].members;
    const int members = static_cast<int>(ms.size());
    const int me = static_cast<int>(std::lower_bound(ms.begin(), ms.end(), global_) - ms.begin());
    c.chunk = (c.n + static_cast<std::size_t>(members) - 1) / static_cast<std::size_t>(members);
    c.own = shard_of(c.n, members, me);
    if (m.code != mesh_op_code::all_reduce)
      staging = std::max(staging, static_cast<std::size_t>(members) * c.chunk * c.size);
    x.index = static_cast<std::uint32_t>(colls_.size());
    colls_.push_back(c);
    labels_.push_back(pipetype::detail::mesh_op_label(m));
    ops_.push_back(x);
  }

  void free_owned() noexcept {
    if constexpr (frees<D>)
      for (std::byte* p : owned_) {
        try {
          d_.free(p);
        } catch (...) {  // (never throws out: a device that fails here has failed already)
        }
      }
    owned_.clear();
    if constexpr (moves_to_host<D>)
      if (host_pool_) try {
          d_.free_host(host_pool_);
        } catch (...) {
        }
    host_pool_ = nullptr;
  }
  std::byte* alloc(std::size_t n) {
    if (n == 0) return nullptr;
    owned_.reserve(owned_.size() + 1);  // (so that a pointer allocated is a pointer kept)
    owned_.push_back(static_cast<std::byte*>(d_.allocate(n)));
    return owned_.back();
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
    f.rank = global_;
    f.cause = cause;
    f.message = what;
    const auto k = o ? static_cast<std::size_t>(o - ops_.data()) : ops_.size();
    if (k < ops_.size()) {
      f.op = static_cast<int>(k);
      f.action = labels_[k];
      f.stream = static_cast<stream_id>(o->stream);
    }
    failures_.assign(1, std::move(f));
  }
  // An exception that is no device error, at op `o`: a stage's (a compute op), named as the host
  // executor names it, or another's.
  void note_thrown(const issue_op* o, const char* what) {
    const auto k = static_cast<std::size_t>(o - ops_.data());
    if (k >= ops_.size() || o->code != op_code::compute)
      return note_failure(o, "pipetype::cuda: rank " + std::to_string(global_) + ": " + what, failure_cause::transfer);
    const bound_op& c = calls_[o->index];
    note_failure(o,
                 "pipetype::cuda: rank " + std::to_string(global_) + ", stage " + std::to_string(c.plan_stage) +
                     ", microbatch " + std::to_string(c.microbatch) + ", action " + std::to_string(c.plan_stage) +
                     kind_char(c.what) + std::to_string(c.microbatch) + " threw: " + what,
                 failure_cause::stage_threw);
  }

  D& d_;
  int global_;  // a mesh step's global rank (a pipeline's: its rank)
  int rank_;    // the pipeline rank
  std::vector<stage_entry> entries_;
  std::vector<typename D::comm> comms_;
  std::vector<issue_op> ops_;
  std::vector<std::string> labels_;  // per issue op, for errors
  std::vector<failure> failures_;    // the last step's
  std::vector<bound_op> calls_;      // the compute ops' stage calls
  std::vector<transfer> transfers_;
  std::vector<std::byte*> adds_;   // held weight gradients, per op's [add_begin, + add_count)
  std::vector<std::byte*> lists_;  // a stage graph's fan-in and fan-out addresses (bind_compute)
  pipetype::detail::batch_layout batch_;
  pipetype::detail::batch_feed fed_;  // the step's feed
  std::deque<bound_op> varying_;      // per transfer of varying tensors: what transfer_bytes reads
  float* losses_ = nullptr;           // sinks × microbatches, from the driver
  std::vector<bool> loss_written_;    // per cell of losses_: a forward on this rank writes it
  bool keep_outputs_ = false;
  std::byte* outputs_ = nullptr;  // the sinks' kept outputs (keep_outputs)
  pipetype::detail::output_layout outputs_at_;
  int microbatches_ = 0;
  bool forward_only_ = false;  // the plan has no backward (step_feed::forward_only)
  std::vector<later_add> later_;  // added after the step
  void* compute_native_ = nullptr;
  std::vector<typename D::event> events_;
  // compute, comm, the second compute stream of F&B pairs, a mesh's dp stream, its copy stream
  typename D::stream streams_[5]{};
  int nstreams_ = 2;
  int dp_ = 0;                                   // the data-parallel stream's index (0: none)
  int copy_ = 0;                                 // the copy stream's (memory actions; 0: none)
  typename D::event fence_[4]{};                 // the step's end (fence)
  typename D::event pair_fork_{}, pair_join_{};  // F&B pairs
  std::size_t batch_bytes_ = 0;
  const mesh_program* mesh_ = nullptr;                      // a mesh step's program (nullptr: a pipeline)
  std::vector<int> stages_here_;                            // the plan stages this rank runs (a mesh's tie groups)
  std::vector<coll> colls_;                                 // a mesh step's collectives
  std::vector<std::byte*> owned_;                           // everything alloc() allocated (freed with the executor)
  std::byte* host_pool_ = nullptr;                          // memory actions' offloaded stashes (allocate_host)
  std::byte* staging_ = nullptr;                            // the sharded collectives' parts, all members'
  [[no_unique_address]] detail::capture_for<D> capture_{};  // whole-step graphs (captures_graphs drivers)
};

template <class Plan, class Model, class D>
executor(const Plan&, Model&, D&) -> executor<D>;
template <class Plan, class Model, class D>
executor(const Plan&, Model&, D&, executor_options<D>) -> executor<D>;

}  // namespace pipetype::cuda
