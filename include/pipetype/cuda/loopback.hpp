// pipetype/cuda/loopback.hpp — every rank of a pipeline in one process, on one device.
//
// NCCL refuses two ranks of a communicator on one GPU (2.28), so a single GPU runs a p-rank
// pipeline through this transport instead: each rank keeps its own executor, streams, events and
// buffers; a transfer is a copy on the receiver's communication stream, ordered by events:
//
//   sender, in its group:   record(ready, comm stream)            — the data is there
//   receiver, its group:    wait(comm stream, ready); copy(dst, src); record(done, comm stream)
//   sender, after that:     wait(comm stream, done)               — the buffer may be reused
//
// which is what ncclSend/ncclRecv promise their streams. The two sides meet on the host, in the
// rendezvous the host executor's fabric uses too (host/rendezvous.hpp): at group_end a rank
// posts its sends and, for each of its recvs in order, takes the oldest posted send of that
// (communicator, sender → receiver) channel — NCCL's FIFO per (communicator, peer) — then waits
// until its own sends were taken. A rank blocks only on peers reaching their matching group, so
// the rendezvous is deadlock-free exactly when the lowered program is (verify_lowered proves it
// for every plan). Every rank runs on its own host thread (loopback_pipeline).
//
// Events: each rank has one `ready` and one `done` event per transfer of its step
// (resources.transfers), created once; the k-th transfer a rank issues uses the k-th pair, so a
// step creates nothing. Reuse is safe: the next record of a transfer's event happens a step
// later, after a rendezvous with the same peer, which has by then issued its wait.
//
// Deadline: a rank that waits longer than `deadline` for a peer (a peer thread died or is stuck),
// or a pipeline whose rank failed (abort), throws loopback_error naming the rank, the channel and
// why, instead of hanging.
//
// Graphs: loopback_pipeline::capture records the whole pipeline's step — every rank's streams
// forked from one origin stream and joined back — as one graph, since an event recorded in one
// capture cannot be waited on in another; replay() launches it (no host threads at all).
//
// Memory actions (loopback_options::memory; docs/13): the ranks then run the one-replica mesh
// step lowered with them, each with a copy stream and its offloaded stashes in its base driver's
// host memory (runtime_driver: pinned), so one GPU runs offload and recompute of every rank.
//
// Any driver that `copies` works as the base: runtime_driver (cudaMemcpyAsync on the device), or
// the record driver (memcpy at once, so on CPU the pipeline computes what the device would:
// tests/cuda/loopback.test.cpp checks gradients against the host executor's, bit for bit).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipetype/bind/checks.hpp"
#include "pipetype/bind/layout.hpp"
#include "pipetype/bind/stage_entry.hpp"
#include "pipetype/mesh/collectives.hpp"
#include "pipetype/mesh/plan.hpp"
#include "pipetype/mesh/verify.hpp"
#include "pipetype/mesh/verify_memory.hpp"
#include "pipetype/core/mesh.hpp"
#include "pipetype/cuda/capture.hpp"
#include "pipetype/cuda/driver.hpp"
#include "pipetype/cuda/executor.hpp"
#include "pipetype/host/rank_threads.hpp"
#include "pipetype/host/rendezvous.hpp"

namespace pipetype::cuda {

/// A loopback transfer that could not complete: a peer missed its deadline, or the pipeline was
/// aborted because another rank failed.
struct loopback_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class Base>
class loopback_driver;

/// The meeting point of one pipeline's ranks (one per pipeline, shared by its drivers): the
/// NCCL-semantics rendezvous every in-process transport shares (host/rendezvous.hpp), whose
/// posted sends carry the sender's ready event and take the receiver's done event back.
template <class Base>
class loopback_hub {
 public:
  loopback_hub(const lowered_view& l, std::chrono::milliseconds deadline)
      : comms_(l.comms.begin(), l.comms.end()), core_(l.ranks, static_cast<int>(l.comms.size()), deadline) {
    for (const rank_resources& r : l.resources) transfers_.push_back(r.transfers);
  }
  loopback_hub(const loopback_hub&) = delete;
  loopback_hub& operator=(const loopback_hub&) = delete;

  /// Wakes every waiting rank with loopback_error(`why`); later exchanges fail the same way.
  void abort(const std::string& why) { core_.abort(why); }
  /// Forgets an abort and every posted transfer (after all ranks stopped).
  void reset() { core_.reset(); }
  std::chrono::milliseconds deadline() const noexcept { return core_.deadline(); }

 private:
  friend class loopback_driver<Base>;
  using event = typename Base::event;
  using stream = typename Base::stream;
  struct events {
    event ready{}, done{};  // the sender's, recorded when the data is there; the receiver's, after its copy
  };
  using core = pipetype::detail::rendezvous<events>;
  using posted = typename core::post;
  struct pending_recv {  // a receive of an open group, besides what the core matches on
    void* buf = nullptr;
    stream s{};
    event done{};
  };
  struct pending_send {
    stream s{};
  };

  int global_peer(int comm, int local) const {
    const comm_desc& c = comms_.at(static_cast<std::size_t>(comm));
    return local == 0 ? c.rank_a : c.rank_b;
  }
  int transfers(int rank) const { return transfers_.at(static_cast<std::size_t>(rank)); }

  std::string channel_name(int comm, int from, int to) const {
    return "communicator " + std::to_string(comm) + ", rank " + std::to_string(from) + " → rank " + std::to_string(to);
  }

  // One group of rank `me`: the core posts its sends, takes its recvs in order (each a wait on
  // the sender's ready event, a copy and a done record on the receiver's stream), and waits for
  // its sends to be taken (then the sender's stream waits on the receiver's done event).
  void exchange(int me, std::vector<typename core::send_op>& sends, std::vector<pending_send>& send_extra,
                std::vector<typename core::recv_op>& recvs, std::vector<pending_recv>& recv_extra, Base& d) {
    const typename core::result r = core_.exchange(
        me, std::span<typename core::send_op>(sends), std::span<typename core::recv_op>(recvs),
        [&](std::size_t k, posted& p) {
          const pending_recv& x = recv_extra[k];
          d.wait(x.s, p.ready);
          d.copy(x.buf, p.src, p.bytes, x.s);
          d.record(x.done, x.s);
          p.done = x.done;
        },
        [&](std::size_t k, const posted& p) { d.wait(send_extra[k].s, p.done); });
    if (r.ok()) return;
    const auto at = static_cast<std::size_t>(r.index < 0 ? 0 : r.index);
    const std::string who = "pipetype::cuda loopback: rank " + std::to_string(me);
    switch (r.what) {
      case core::outcome::aborted:
        throw loopback_error(who + " stopped: " + r.reason);
      case core::outcome::timeout:
        if (r.send)
          throw loopback_error(who + " waited " + std::to_string(core_.deadline().count()) + " ms for its send on " +
                               channel_name(sends[at].comm, me, sends[at].peer) +
                               " to be received (the peer stopped or is stuck)");
        throw loopback_error(who + " waited " + std::to_string(core_.deadline().count()) + " ms for a send on " +
                             channel_name(recvs[at].comm, recvs[at].peer, me) + " (the peer stopped or is stuck)");
      case core::outcome::mismatch:
        throw loopback_error(who + (r.send ? " sends " : " receives ") +
                             std::to_string(r.send ? r.send_bytes : r.recv_bytes) + " bytes on " +
                             (r.send ? channel_name(sends[at].comm, me, sends[at].peer)
                                     : channel_name(recvs[at].comm, recvs[at].peer, me)) +
                             " but the other end has " + std::to_string(r.send ? r.recv_bytes : r.send_bytes));
      case core::outcome::done:
        break;
    }
  }

  std::vector<comm_desc> comms_;
  std::vector<int> transfers_;
  core core_;
};

/// One rank's driver over the hub: streams, events, buffers and copies from `Base`; send/recv
/// inside a group become the rendezvous above. Communicators are the lowered ids.
template <class Base>
class loopback_driver {
 public:
  using stream = typename Base::stream;
  using event = typename Base::event;
  using comm = int;
  static constexpr bool host_memory = cuda::host_memory<Base>;

  loopback_driver(Base& base, loopback_hub<Base>& hub, int rank) : d_(base), hub_(hub), rank_(rank) {
    const auto n = static_cast<std::size_t>(hub.transfers(rank));
    posts_ = std::make_unique<posted[]>(n > 0 ? n : 1);
    npost_ = n;
    done_.reserve(n);
    for (std::size_t k = 0; k < n; ++k) {
      posts_[k].ready = d_.make_event();
      done_.push_back(d_.make_event());
    }
    sends_.reserve(n);
    recvs_.reserve(n);
  }
  loopback_driver(const loopback_driver&) = delete;
  loopback_driver& operator=(const loopback_driver&) = delete;

  void* allocate(std::size_t n) { return d_.allocate(n); }
  void free(void* p) requires frees<Base> { d_.free(p); }
  // memory actions: the base's host pool and copies, on the rank's own streams (no peer involved)
  void* allocate_host(std::size_t n) requires moves_to_host<Base> { return d_.allocate_host(n); }
  void free_host(void* p) requires moves_to_host<Base> { d_.free_host(p); }
  void copy_to_host(void* dst, const void* src, std::size_t n, stream s) requires moves_to_host<Base> {
    d_.copy_to_host(dst, src, n, s);
  }
  void copy_to_device(void* dst, const void* src, std::size_t n, stream s) requires moves_to_host<Base> {
    d_.copy_to_device(dst, src, n, s);
  }
  stream make_stream() { return d_.make_stream(); }
  event make_event() { return d_.make_event(); }
  void* native(stream s) const { return d_.native(s); }
  void record(event e, stream s) { d_.record(e, s); }
  void wait(stream s, event e) { d_.wait(s, e); }
  void group_start() {
    sends_.clear();
    send_extra_.clear();
    recvs_.clear();
    recv_extra_.clear();
  }
  void send(const void* p, std::size_t n, int peer, comm c, stream s) {
    posted& post = posts_[next()];
    d_.record(post.ready, s);
    post.src = p;
    post.bytes = n;
    sends_.push_back({c, hub_.global_peer(c, peer), &post});
    send_extra_.push_back({s});
  }
  void recv(void* p, std::size_t n, int peer, comm c, stream s) {
    recvs_.push_back({c, hub_.global_peer(c, peer), n});
    recv_extra_.push_back({p, s, done_[next()]});
  }
  void group_end() { hub_.exchange(rank_, sends_, send_extra_, recvs_, recv_extra_, d_); }
  void on_compute(stream s, char what, int stage, int microbatch) requires observes_compute<Base> {
    d_.on_compute(s, what, stage, microbatch);
  }

  /// The next transfer is the step's first (the pipeline calls it before every step, so a step
  /// cut short by an error does not shift the event pairs of the next).
  void restart() noexcept { ordinal_ = 0; }
  Base& base() noexcept { return d_; }
  int rank() const noexcept { return rank_; }

 private:
  using hub_type = loopback_hub<Base>;
  using posted = typename hub_type::posted;

  std::size_t next() {  // the k-th transfer of the step uses the k-th event pair
    const std::size_t k = ordinal_;
    ordinal_ = npost_ == 0 ? 0 : (ordinal_ + 1) % npost_;
    return k;
  }

  Base& d_;
  hub_type& hub_;
  int rank_;
  std::unique_ptr<posted[]> posts_;  // stable while a receiver may read them
  std::size_t npost_ = 0;
  std::vector<event> done_;
  std::vector<typename hub_type::core::send_op> sends_;
  std::vector<typename hub_type::pending_send> send_extra_;
  std::vector<typename hub_type::core::recv_op> recvs_;
  std::vector<typename hub_type::pending_recv> recv_extra_;
  std::size_t ordinal_ = 0;
};

struct loopback_options {
  std::chrono::milliseconds deadline{60'000};  // a rank waiting longer for a peer throws
  bool ordered_gradients = true;               // as for every executor (bind/checks.hpp)
  // OFFLOAD, RELOAD and RECOMPUTE of the plan (docs/13; place_memory or plan_memory, or written;
  // ranks 0: none): the step is then the one-replica mesh step with them (build_mesh over
  // mesh{p, 1}), each rank's copies on a copy stream of its own, its offloaded stashes in pinned
  // host memory (a base driver that moves_to_host)
  memory_program memory{};
};

/// A whole pipeline in one process: one executor per rank over `Base` drivers (one per rank,
/// the caller's; with CUDA, runtime_driver{r, device} for every r on the same device), each rank
/// stepping on its own persistent host thread. A rank has two streams, three with F&B pairs.
///
///   std::vector<runtime_driver*> drivers;   // one per rank, same device
///   loopback_pipeline pipe{plan, model, drivers};        // or {plan, models, drivers}: one per rank
///   pipe.step(batch);                 // eager: every rank's program, rendezvous on the host
///   pipe.capture(batch); pipe.replay();
///
/// One model may serve every rank when each of its stages lives on one rank; under DualPipe a
/// model stage runs on two ranks at once (it would add gradients from two streams): give each
/// rank its own model then (a std::vector of models, one per rank).
template <class Base>
requires device_driver<Base> && copies<Base>
class loopback_pipeline {
 public:
  using rank_executor = executor<loopback_driver<Base>>;

  /// Every rank with its own model (`models[r]` for rank r), or — one model given — all
  /// sharing it.
  template <class Plan, stage_graph Model>
  loopback_pipeline(const Plan& plan, std::vector<Model>& models, std::vector<Base*> drivers, loopback_options opt = {})
      : loopback_pipeline(views_of(plan), entries_per_rank(models, views_of(plan).compute), std::move(drivers), opt) {
    static_assert(pipetype::detail::stages_fit_plan<Plan, Model>());
  }
  /// Every rank sharing one model (plans where each stage lives on one rank).
  template <class Plan, stage_graph Model>
  loopback_pipeline(const Plan& plan, Model& shared, std::vector<Base*> drivers, loopback_options opt = {})
      : loopback_pipeline(views_of(plan),
                          std::vector<std::vector<stage_entry>>(
                              static_cast<std::size_t>(views_of(plan).compute.ranks),
                              pipetype::detail::entries_for(views_of(plan).compute, shared, "pipetype::cuda loopback")),
                          std::move(drivers), opt) {
    static_assert(pipetype::detail::stages_fit_plan<Plan, Model>());
  }
  /// The same from stages erased already: `entries[r]` are rank r's.
  loopback_pipeline(const plan_views& v, std::vector<std::vector<stage_entry>> entries, std::vector<Base*> drivers,
                    loopback_options opt = {})
      : ranks_(v.compute.ranks),
        hub_(v.lowered,
             pipetype::detail::positive_deadline(opt.deadline, "pipetype::cuda loopback: loopback_options::deadline")) {
    if (static_cast<int>(drivers.size()) != ranks_ || static_cast<int>(entries.size()) != ranks_)
      throw std::invalid_argument("pipetype::cuda loopback: the plan has " + std::to_string(ranks_) + " ranks, " +
                                  std::to_string(drivers.size()) + " drivers and " + std::to_string(entries.size()) +
                                  " models given");
    if (v.compute.lanes > 1)
      for (int a = 0; a < ranks_; ++a)
        for (int b = a + 1; b < ranks_; ++b)
          if (!entries[static_cast<std::size_t>(a)].empty() && !entries[static_cast<std::size_t>(b)].empty() &&
              entries[static_cast<std::size_t>(a)].front().obj == entries[static_cast<std::size_t>(b)].front().obj)
            throw std::invalid_argument("pipetype::cuda loopback: ranks " + std::to_string(a) + " and " +
                                        std::to_string(b) +
                                        " share one model, but the plan runs each model stage on two ranks (" +
                                        std::to_string(v.compute.lanes) + " lanes): give every rank its own model");
    if (!opt.memory.empty())  // the one-replica mesh step with the memory actions, checked and proved
      mesh_ = std::make_unique<mesh_program>(build_mesh(v.compute, v.lowered, mesh{ranks_, 1},
                                                        place_collectives(v.compute, {}), {}, opt.memory,
                                                        "pipetype::cuda loopback"));
    for (int r = 0; r < ranks_; ++r) {
      Base& d = *drivers.at(static_cast<std::size_t>(r));
      bases_.push_back(&d);
      links_.push_back(std::make_unique<loopback_driver<Base>>(d, hub_, r));
      execs_.push_back(std::make_unique<rank_executor>(
          v, std::move(entries[static_cast<std::size_t>(r)]), *links_.back(),
          executor_options<loopback_driver<Base>>{.rank = r, .comms = {}, .ordered_gradients = opt.ordered_gradients},
          mesh_.get()));
    }
    if constexpr (captures_graphs<Base>) {  // one origin (rank 0's driver), joined with every rank's streams
      capture_.open(*bases_.front());
      for (int r = 0; r < ranks_; ++r)
        for (const typename Base::stream s : execs_[static_cast<std::size_t>(r)]->streams())
          capture_.add(*bases_[static_cast<std::size_t>(r)], s);
    }
    threads_ = std::make_unique<pipetype::detail::rank_threads>(
        ranks_, [&](int r) {  // `&`: without bind_thread nothing is used
          if constexpr (requires(Base & d) { d.bind_thread(); }) bases_[static_cast<std::size_t>(r)]->bind_thread();
        });
  }
  loopback_pipeline(const loopback_pipeline&) = delete;
  loopback_pipeline& operator=(const loopback_pipeline&) = delete;
  ~loopback_pipeline() {
    threads_.reset();
    if constexpr (captures_graphs<Base>) capture_.release();
  }

  /// One step of every rank, each on its thread; returns when all have issued theirs (with CUDA
  /// the work is then enqueued, not done). The first failure aborts the others and is rethrown.
  void step(const void* batch) { run(batch); }
  /// The same with every source tensor's array (bind/batch.hpp), checked against the plan before
  /// any rank starts (shape_error).
  void step(const pipetype::batch& b) {
    execs_.front()->check_batch(b);
    run(b);
  }

  /// Records one step of the whole pipeline into one graph (or updates the graph made before in
  /// place when only addresses changed); replay() launches it on the origin stream.
  void capture(const void* batch) requires captures_graphs<Base> {
    capture_.capture([&] { run(batch); });
  }
  void capture(const pipetype::batch& b) requires captures_graphs<Base> {
    execs_.front()->check_batch(b);
    capture_.capture([&] { run(b); });
  }
  /// Launches the pipeline's graph, ordered after everything already on the ranks' streams and
  /// before whatever comes next on them, like an eager step.
  void replay() requires captures_graphs<Base> { capture_.replay(); }
  int instantiations() const noexcept requires captures_graphs<Base> { return capture_.instantiations(); }
  int updates() const noexcept requires captures_graphs<Base> { return capture_.updates(); }
  typename Base::stream origin_stream() const noexcept requires captures_graphs<Base> { return capture_.origin(); }

  int ranks() const noexcept { return ranks_; }
  rank_executor& rank(int r) { return *execs_.at(static_cast<std::size_t>(r)); }
  /// How the last step failed, one entry per rank that failed (a rank stopped by another's
  /// failure is `aborted`), or empty when it succeeded.
  const std::vector<failure>& failures() const noexcept { return failures_; }

 private:
  template <class Model>
  static std::vector<std::vector<stage_entry>> entries_per_rank(std::vector<Model>& models, const program_view& p) {
    constexpr const char* who = "pipetype::cuda loopback";
    if (models.size() == 1)
      return std::vector<std::vector<stage_entry>>(static_cast<std::size_t>(p.ranks),
                                                   pipetype::detail::entries_for(p, models.front(), who));
    std::vector<std::vector<stage_entry>> out;
    for (Model& m : models) out.push_back(pipetype::detail::entries_for(p, m, who));
    return out;
  }
  template <class B>  // const void* (one array) or const pipetype::batch&
  void run(const B& batch) {
    errors_.assign(static_cast<std::size_t>(ranks_), nullptr);
    auto job = [this, &batch](int r) { serve(r, batch); };
    threads_->run(job);
    const bool failed =
        std::any_of(errors_.begin(), errors_.end(), [](const std::exception_ptr& e) { return e != nullptr; });
    if constexpr (requires(Base & d) { d.synchronize(); })
      if (failed)  // a step cut short left copies in flight whose senders never waited: let them land
        for (Base* d : bases_) try {
            d->synchronize();
          } catch (...) {
          }
    hub_.reset();
    failures_.clear();
    // the first error that is not an echo of another rank's abort
    std::exception_ptr first, cause;
    for (std::size_t r = 0; r < errors_.size(); ++r) {
      const std::exception_ptr& e = errors_[r];
      if (!e) continue;
      failure f;
      f.rank = static_cast<int>(r);
      try {
        std::rethrow_exception(e);
      } catch (const loopback_error& x) {
        const bool echo = std::string_view(x.what()).find(" stopped: ") != std::string_view::npos;
        f.cause = echo ? failure_cause::aborted : failure_cause::timeout;
        f.message = x.what();
        if (!first) first = e;
      } catch (const device_error& x) {
        f.cause = failure_cause::device;
        f.message = x.what();
        if (!cause) cause = e;
      } catch (const std::exception& x) {
        f.cause = failure_cause::stage_threw;
        f.message = x.what();
        if (!cause) cause = e;
      } catch (...) {
        f.cause = failure_cause::stage_threw;
        f.message = "an exception not derived from std::exception";
        if (!cause) cause = e;
      }
      failures_.push_back(std::move(f));
    }
    if (cause) std::rethrow_exception(cause);
    if (first) std::rethrow_exception(first);
  }

  // Rank r's step, on its thread; a failure aborts the other ranks' rendezvous.
  template <class B>
  void serve(int r, const B& batch) noexcept {
    std::exception_ptr err;
    try {
      links_[static_cast<std::size_t>(r)]->restart();
      execs_[static_cast<std::size_t>(r)]->step(batch);
    } catch (const std::exception& e) {
      err = std::current_exception();
      hub_.abort("rank " + std::to_string(r) + " failed: " + e.what());
    } catch (...) {
      err = std::current_exception();
      hub_.abort("rank " + std::to_string(r) + " failed");
    }
    errors_[static_cast<std::size_t>(r)] = err;
  }

  int ranks_;
  loopback_hub<Base> hub_;
  std::unique_ptr<mesh_program> mesh_;  // with memory actions: the step the executors run (else none)
  std::vector<Base*> bases_;
  std::vector<std::unique_ptr<loopback_driver<Base>>> links_;
  std::vector<std::unique_ptr<rank_executor>> execs_;
  std::vector<std::exception_ptr> errors_;  // per rank, the last step's
  std::vector<failure> failures_;
  // the whole-pipeline graph
  [[no_unique_address]] detail::capture_for<Base> capture_{};
  std::unique_ptr<pipetype::detail::rank_threads> threads_;  // one per rank, parked between steps
};

}  // namespace pipetype::cuda
