// pipetype/host/executor.hpp — runs a plan on host threads: real numerics, NCCL's rules.
// Example, given model, batch (a uniform_chain<block> of 4 stages, or a chain<embed, block, head>):
//   const auto plan = pipetype::build_plan(pipetype::make_schedule("1f1b", 4, 8));
//   pipetype::host::executor ex{plan, model};                        // bind once
//   ex.step(batch);                                                  // one training step
//
// Per rank, one thread per stream of the lowered program (compute, communication), as a GPU
// runs a compute and an NCCL stream: each walks its list of bound ops (binding.hpp) in order and
// issues each as it stands. Compute ops call the stage; a group op posts its transfers to the
// `fabric` (channel.hpp: NCCL's rendezvous, FIFO and grouped progress) and waits for them; an
// op's event wait blocks until the other stream has completed the op that recorded it. There
// is no readiness check, no queue of ready work and no choice: the compile-time proofs of the
// lowered program cover exactly these calls.
//
// Faults end the step on every rank, and no thread is left blocked:
//   • a stage that throws aborts the step; step() throws step_error naming rank, stage,
//     microbatch and action (the stage's own exception is kept: stage_exception());
//   • every wait (a transfer, an event) has a deadline (executor_options::deadline); past it,
//     step_error says which op waited, on whom, and which ranks were still inside a stage;
//   • sizes are checked before any thread starts: the model against the plan at construction,
//     the batch at step() (shape_error).
//
// Determinism: a stage's weight gradients are produced in microbatch order (checked by bind),
// and each microbatch's numerics do not depend on the schedule, so every schedule gives bitwise
// the same gradients as running the microbatches one after the other.
//
// The rank threads (one per stream of each rank that has ops on it) start with the executor and
// live as long as it does, parked between steps (rank_threads.hpp); a step wakes them, and
// returns when all have finished their lists. The fabric and each thread's endpoint live as
// long, so a step allocates nothing unless it is traced.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "pipetype/bind/batch.hpp"
#include "pipetype/bind/report.hpp"
#include "pipetype/host/binding.hpp"
#include "pipetype/host/channel.hpp"
#include "pipetype/host/mesh_binding.hpp"
#include "pipetype/host/rank_threads.hpp"
#include "pipetype/graph/chain.hpp"

namespace pipetype::host {

using pipetype::failure;  // the execution vocabulary every executor shares (bind/report.hpp)
using pipetype::failure_cause;
using pipetype::op_time;

/// A step that did not complete. what() is the first failure (the cause of the others);
/// failures() lists how every thread that had not finished ended.
class step_error : public std::runtime_error {
 public:
  step_error(const std::string& what, failure_cause cause, std::vector<failure> all, std::exception_ptr stage)
      : std::runtime_error(what), cause_(cause), failures_(std::move(all)), stage_(std::move(stage)) {}
  failure_cause cause() const noexcept { return cause_; }
  const std::vector<failure>& failures() const noexcept { return failures_; }
  /// The exception the stage threw (cause() == stage_threw), for rethrow_exception.
  std::exception_ptr stage_exception() const noexcept { return stage_; }

 private:
  failure_cause cause_;
  std::vector<failure> failures_;
  std::exception_ptr stage_;
};

struct executor_options {
  std::chrono::milliseconds deadline{std::chrono::seconds(30)};  // the longest any wait may block
  bool ordered_gradients = true;                                 // see binding.hpp
  bool trace = false;                                            // record each op's start and end
  bool keep_outputs = false;  // the sinks write their outputs, read after the step with output() (inference)
};

namespace detail {

/// Per rank: how far each stream got (events), and where its threads are (diagnostics).
struct alignas(64) rank_sync {
  std::atomic<int> progress[mesh_stream_count] = {};  // per stream: ops completed, published at records
  std::atomic<int> computing{-1};                     // position of the compute op whose stage call is running
  std::atomic<int> waiters{0};
  std::mutex m;
  std::condition_variable cv;
};

/// A transport that moves nothing: for walking a program without peers (benchmarks).
struct null_transport {
  void group_begin() noexcept {}
  void group_end() noexcept {}
  void send(int, int, std::span<const std::byte>, std::string_view) noexcept {}
  void recv(int, int, std::span<std::byte>, std::string_view) noexcept {}
};

class engine {
 public:
  /// A pipeline's program, or (with `mesh`) a mesh's: every global rank's lists, and what they
  /// point into (host/mesh_binding.hpp).
  explicit engine(bound_program prog, const executor_options& opt, std::unique_ptr<mesh_state> mesh = nullptr)
      : prog_(std::move(prog)),
        opt_(opt),
        mesh_(std::move(mesh)),
        sync_(std::make_unique<rank_sync[]>(static_cast<std::size_t>(prog_.ranks))),
        fabric_(prog_.ranks, prog_.comms,
                pipetype::detail::positive_deadline(opt.deadline, "pipetype::host: executor_options::deadline")) {
    for (int r = 0; r < prog_.ranks; ++r)
      for (int st = 0; st < mesh_stream_count; ++st)
        if (!prog_.rank[static_cast<std::size_t>(r)].ops[st].empty()) {
          workers_.push_back({r, st});
          endpoints_.push_back(fabric_.at(r));
        }
    if (mesh_)  // a bucketed step's backwards publish their buckets on their rank's compute stream
      for (bucket_marks& k : mesh_->marks) {
        k.at = &sync_[static_cast<std::size_t>(k.rank)];
        k.publish = [](void* at, int value) { publish(*static_cast<rank_sync*>(at), 0, value); };
      }
    threads_ = std::make_unique<pipetype::detail::rank_threads>(static_cast<int>(workers_.size()));
  }
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  const bound_program& program() const noexcept { return prog_; }
  const mesh_state* mesh() const noexcept { return mesh_.get(); }
  const std::vector<op_time>& trace() const noexcept { return trace_; }

  /// One step: every rank's streams on their own (parked) threads, reading the batch through
  /// `feed` (its arrays stay the caller's through the step).
  void run(const step_feed& feed) { run(std::span<const step_feed>(&feed, 1)); }
  /// A mesh's step: replica d's ranks read feeds[d].
  void run(std::span<const step_feed> feeds) {
    if (dirty_) {  // a failed step may have left an abort, posted transfers and half-met collectives
      fabric_.reset();
      if (mesh_) mesh_->fabric->reset();
    }
    dirty_ = false;
    feeds_.assign(feeds.begin(), feeds.end());
    aborted_.store(false);
    failures_.clear();
    primary_ = -1;
    stage_exc_ = nullptr;
    for (int r = 0; r < prog_.ranks; ++r) {
      rank_sync& s = sync_[static_cast<std::size_t>(r)];
      for (int st = 0; st < mesh_stream_count; ++st) s.progress[st].store(0, std::memory_order_relaxed);
      s.computing.store(-1, std::memory_order_relaxed);
    }
    if (opt_.trace) prepare_trace();
    t0_ = std::chrono::steady_clock::now();
    auto job = [this](int k) { thread_main(k); };
    threads_->run(job);
    if (!failures_.empty()) {
      dirty_ = true;
      const failure& p = failures_[static_cast<std::size_t>(primary_ >= 0 ? primary_ : 0)];
      throw step_error(p.message, p.cause, failures_, stage_exc_);
    }
    for (const deferred_add& d : prog_.deferred) d.add(d.obj, d.grad, nullptr);  // later lanes' gradients, in order
  }
  /// How every thread that had not finished ended the last step (empty when it succeeded).
  const std::vector<failure>& failures() const noexcept { return failures_; }

  /// Issues op `i` of rank r's stream `st` (a group with its transfers) through `t`; returns
  /// the index of the next op. The one code path of the executor threads and of walk_in_order.
  /// (The rank's program `br` and state `s` come from the caller, which looks them up once: read
  /// here through `this`, they were loaded again after every stage call.)
  template <class Transport>
  int issue(const bound_rank& br, rank_sync& s, int r, int st, int i, Transport& t, const step_feed& feed,
            std::chrono::steady_clock::time_point* started = nullptr) {
    const bound_op* list = br.ops[st].data();
    const bound_op& op = list[i];
    if (op.wait > 0 && s.progress[op.wait_on].load(std::memory_order_acquire) < op.wait)
      wait_for(r, st, op.wait_on, op.wait, op);
    if (started) *started = std::chrono::steady_clock::now();  // a traced op starts once its wait is over
    if (op.counted) [[unlikely]]
      take_slots(op);
    switch (op.code) {
      case op_code::compute:
        s.computing.store(i, std::memory_order_relaxed);  // inside the stage (for a timeout's message)
        op.fn(op.obj, op, feed);  // (a bucketed backward's fn is run_bucketed, with its adds: stage_entry.hpp)
        for (int k = 0; k < op.add_count; ++k)
          op.add(op.obj, br.adds[static_cast<std::size_t>(op.add_begin + k)], nullptr);
        s.computing.store(-1, std::memory_order_relaxed);
        break;
      case op_code::group:
        t.group_begin();
        for (int k = i + 1; k < op.end; ++k) post(t, list[k], br.labels[st][static_cast<std::size_t>(k)], feed);
        t.group_end();
        break;
      case op_code::send:
      case op_code::recv:
        post(t, op, br.labels[st][static_cast<std::size_t>(i)], feed);
        break;
      case op_code::collective:  // a mesh's: a collective, a release, a copy, or only an event's record or wait
        if (op.fn) op.fn(op.obj, op, feed);
        break;
    }
    if (op.counted && op.freed_after) [[unlikely]]
      op.use->in_use.fetch_add(op.freed_after, std::memory_order_acq_rel);
    if (op.record) publish(s, st, op.end);
    return op.end;
  }

  /// Walks rank r's program on the calling thread in the lowered order (both streams
  /// interleaved), with `t` for transfers. For benchmarks and single-rank checks.
  template <class Transport>
  void walk_in_order(int r, Transport& t, const step_feed& feed) {
    feeds_.assign(1, feed);
    const bound_rank& br = prog_.rank[static_cast<std::size_t>(r)];
    rank_sync& s = sync_[static_cast<std::size_t>(r)];
    s.progress[0].store(0, std::memory_order_relaxed);
    s.progress[1].store(0, std::memory_order_relaxed);
    const step_feed& f = feeds_.front();
    for (const std::uint32_t u : br.order) issue(br, s, r, static_cast<int>(u & 1), static_cast<int>(u >> 1), t, f);
  }

 private:
  // A step with memory actions: the stash slots in use before op runs, and the most at once.
  [[gnu::noinline]] static void take_slots(const bound_op& op) {
    const int now =
        op.use->in_use.fetch_add(op.freed_before + op.taken, std::memory_order_acq_rel) + op.freed_before + op.taken;
    for (int h = op.use->high.load(std::memory_order_relaxed);
         now > h && !op.use->high.compare_exchange_weak(h, now, std::memory_order_relaxed);) {
    }
  }
  template <class Transport>
  static void post(Transport& t, const bound_op& x, std::string_view label, const step_feed& feed) {
    const std::size_t bytes = pipetype::detail::transfer_bytes(x, feed);
    if (x.code == op_code::send)
      t.send(x.comm, x.peer, std::span<const std::byte>(x.buf, bytes), label);
    else
      t.recv(x.comm, x.peer, std::span<std::byte>(x.buf, bytes), label);
  }

  // An event record: publish this stream's progress; wake the other stream if it sleeps. The
  // store is a release and the waiter check is relaxed (no StoreLoad fence on the fast path), so
  // in a narrow race a sleeping waiter can miss the wake-up: it re-checks every `recheck`.
  static void publish(rank_sync& s, int st, int value) {
    s.progress[st].store(value, std::memory_order_release);
    if (s.waiters.load(std::memory_order_relaxed) > 0) {
      { std::lock_guard lock(s.m); }
      s.cv.notify_all();
    }
  }
  static constexpr std::chrono::microseconds recheck{100};

  [[gnu::noinline]] void wait_for(int r, int st, int other, int value, const bound_op& op) {
    rank_sync& s = sync_[static_cast<std::size_t>(r)];
    // a short yielding spin first: the other stream is often microseconds away, and a blocked
    // thread takes tens of microseconds to wake
    for (int k = 0; k < 64; ++k) {
      std::this_thread::yield();
      if (s.progress[other].load(std::memory_order_acquire) >= value) return;
    }
    s.waiters.fetch_add(1, std::memory_order_seq_cst);
    const auto until = std::chrono::steady_clock::now() + opt_.deadline;
    auto done = [&] { return s.progress[other].load(std::memory_order_acquire) >= value || aborted_.load(); };
    bool ok = false;
    {
      std::unique_lock lock(s.m);
      while (!(ok = done()) && std::chrono::steady_clock::now() < until) s.cv.wait_for(lock, recheck);
    }
    s.waiters.fetch_sub(1, std::memory_order_seq_cst);
    if (aborted_.load()) throw aborted_error("aborted");
    if (!ok)
      throw timeout_error("pipetype::host: rank " + std::to_string(r) + ": the " + stream_name(st) + " stream waited " +
                          std::to_string(opt_.deadline.count()) + " ms for the " + stream_name(other) +
                          " stream before " +
                          (op.code == op_code::compute ? to_text(action{op.what, op.plan_stage, op.microbatch, false})
                           : op.code == op_code::group ? std::string("a group")
                                                       : std::string("its next op")));
  }

  static const char* stream_name(int st) { return st == 0 ? "compute" : st == 1 ? "communication" : "data-parallel"; }
  int replica_of(int r) const noexcept { return mesh_ ? mesh_->replica_of[static_cast<std::size_t>(r)] : 0; }

  void thread_main(int k) {
    const int r = workers_[static_cast<std::size_t>(k)].rank, st = workers_[static_cast<std::size_t>(k)].stream;
    rank_sync& s = sync_[static_cast<std::size_t>(r)];
    const bound_rank& br = prog_.rank[static_cast<std::size_t>(r)];
    const auto& list = br.ops[st];
    const auto n = static_cast<int>(list.size());
    int i = 0;
    // on the compute stream, anything but a timeout or an abort came from the stage
    const bool compute_stream = st == 0;
    try {
      fabric::endpoint& ep = endpoints_[static_cast<std::size_t>(k)];
      const step_feed& feed = feeds_[static_cast<std::size_t>(replica_of(r))];  // this rank's replica's
      op_time* trace =
          opt_.trace ? trace_.data() + trace_begin_[static_cast<std::size_t>(mesh_stream_count * r + st)] : nullptr;
      while (i < n) {
        if (aborted_.load(std::memory_order_relaxed)) throw aborted_error("aborted");
        auto start = t0_;
        const int next = issue(br, s, r, st, i, ep, feed, trace ? &start : nullptr);
        if (trace) {
          op_time& t = trace[i];
          t.start = seconds(start);
          t.end = seconds(std::chrono::steady_clock::now());
        }
        i = next;
      }
    } catch (const aborted_error&) {
      fail(r, st, i, failure_cause::aborted, "", nullptr);
    } catch (const timeout_error& e) {
      fail(r, st, i, failure_cause::timeout, e.what(), nullptr);
    } catch (const transfer_error& e) {
      fail(r, st, i, failure_cause::transfer, e.what(), nullptr);
    } catch (const std::exception& e) {
      fail(r, st, i, compute_stream ? failure_cause::stage_threw : failure_cause::transfer, e.what(),
           std::current_exception());
    } catch (...) {
      fail(r, st, i, failure_cause::stage_threw, "an exception not derived from std::exception",
           std::current_exception());
    }
    if (compute_stream) s.computing.store(-1, std::memory_order_relaxed);
  }

  void fail(int r, int st, int i, failure_cause cause, const std::string& what, std::exception_ptr exc) {
    const bound_rank& br = prog_.rank[static_cast<std::size_t>(r)];
    const auto& list = br.ops[st];
    failure f;
    f.rank = r;
    f.stream = static_cast<stream_id>(st);
    f.cause = cause;
    if (i < static_cast<int>(list.size())) {
      f.op = list[static_cast<std::size_t>(i)].index;
      f.action = br.labels[st][static_cast<std::size_t>(i)];
    }
    const bound_op* op = i < static_cast<int>(list.size()) ? &list[static_cast<std::size_t>(i)] : nullptr;
    std::lock_guard lock(fail_mutex_);
    switch (cause) {
      case failure_cause::stage_threw:
        f.message = "pipetype::host: rank " + std::to_string(r) + ", stage " +
                    std::to_string(op ? op->plan_stage : -1) + ", microbatch " +
                    std::to_string(op ? op->microbatch : -1) + ", action " + f.action + " threw: " + what;
        break;
      case failure_cause::timeout:
        f.message = what + still_running();
        break;
      case failure_cause::transfer:
      case failure_cause::device:  // (the host executor makes no device calls)
        f.message = what;
        break;
      case failure_cause::aborted:
        f.message = "pipetype::host: rank " + std::to_string(r) + " (" + stream_name(st) + " stream, at " +
                    (f.action.empty() ? std::string("its end") : f.action) + ") stopped: another rank failed";
        break;
    }
    failures_.push_back(f);
    if (cause != failure_cause::aborted && primary_ < 0) {
      primary_ = static_cast<int>(failures_.size()) - 1;
      stage_exc_ = exc;
      abort_all(f.message);
    }
  }

  // Which ranks are inside a stage call right now (for a timeout's message).
  std::string still_running() const {
    std::string out;
    for (int r = 0; r < prog_.ranks; ++r) {
      const rank_sync& s = sync_[static_cast<std::size_t>(r)];
      const int i = s.computing.load(std::memory_order_relaxed);
      if (i < 0) continue;
      out += (out.empty() ? "; still inside a stage: rank " : ", rank ") + std::to_string(r) + " in " +
             prog_.rank[static_cast<std::size_t>(r)].labels[0][static_cast<std::size_t>(i)];
    }
    return out;
  }

  void abort_all(const std::string& reason) {
    aborted_.store(true);
    fabric_.abort(reason);
    if (mesh_) mesh_->fabric->abort(reason);
    for (int r = 0; r < prog_.ranks; ++r) {
      rank_sync& s = sync_[static_cast<std::size_t>(r)];
      { std::lock_guard lock(s.m); }
      s.cv.notify_all();
    }
  }

  void prepare_trace() {
    trace_.clear();
    trace_begin_.assign(static_cast<std::size_t>(mesh_stream_count * prog_.ranks) + 1, 0);
    for (int r = 0; r < prog_.ranks; ++r)
      for (int st = 0; st < mesh_stream_count; ++st) {
        trace_begin_[static_cast<std::size_t>(mesh_stream_count * r + st)] = trace_.size();
        const bound_rank& br = prog_.rank[static_cast<std::size_t>(r)];
        for (std::size_t i = 0; i < br.ops[st].size(); ++i) {
          const bound_op& op = br.ops[st][i];
          op_time t;
          if (op.code == op_code::collective && op.fn) t.name = br.labels[st][i].c_str();  // (a record or wait: none)
          t.rank = r;
          t.stream = static_cast<stream_id>(st);
          t.code = op.code;
          t.what = op.what;
          t.stage = op.plan_stage;
          t.microbatch = op.microbatch;
          t.start = t.end = -1;  // transfers inside a group keep -1: the group carries the time
          trace_.push_back(t);
        }
      }
  }
  double seconds(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration<double>(t - t0_).count();
  }

  bound_program prog_;
  executor_options opt_;
  std::unique_ptr<mesh_state> mesh_;  // a mesh's replicas, collectives and calls (nullptr: a pipeline)
  std::unique_ptr<rank_sync[]> sync_;
  fabric fabric_;
  struct worker {
    int rank, stream;
  };
  std::vector<worker> workers_;              // per rank thread: the stream it walks
  std::vector<fabric::endpoint> endpoints_;  // per rank thread, reused every step
  bool dirty_ = false;                       // the last step failed: reset the fabric first
  std::vector<step_feed> feeds_;             // by replica (a pipeline: one)
  std::atomic<bool> aborted_{false};
  std::mutex fail_mutex_;
  std::vector<failure> failures_;
  int primary_ = -1;
  std::exception_ptr stage_exc_;
  std::vector<op_time> trace_;
  std::vector<std::size_t> trace_begin_;
  std::chrono::steady_clock::time_point t0_;
  std::unique_ptr<pipetype::detail::rank_threads> threads_;  // last: the threads use everything above
};

}  // namespace detail

/// Runs a plan's lowered program on host threads with the stages of `Model` (a chain or
/// uniform_chain). The model is held by reference: parameters and gradients stay the user's.
template <stage_graph Model>
class executor {
 public:
  /// The element type of step(span)'s one array: stage 0's input's (a set: bytes, its blocks).
  using batch_type = typename pipetype::detail::row_type<typename Model::first_stage::input>::type;

  /// A compile-time plan whose schedule splits backwards is checked against the stage types here
  /// (a compile error naming the stage): every stage type must offer the split, even one that the
  /// schedule happens never to split. A run-time plan is checked when bound, action by action
  /// (std::invalid_argument).
  template <class Plan>
  executor(const Plan& plan, Model& model, const executor_options& opt = {})
      : engine_(bind(views_of(plan), pipetype::detail::entries_for(views_of(plan).compute, model, "pipetype::host"),
                     {opt.ordered_gradients, opt.keep_outputs}),
                opt) {
    static_assert(pipetype::detail::stages_fit_plan<Plan, Model>());
  }

  /// One training step over all microbatches: `b` holds every source tensor's array and every
  /// sink target's (bind/batch.hpp). Returns what the sinks wrote as their losses. Throws
  /// shape_error before anything runs if the batch does not fit the plan, step_error if the step
  /// failed on some rank.
  const step_losses& step(const pipetype::batch& b) {
    feed(b);
    return run();
  }
  /// The shorthand for one array: `batch` holds microbatches × (stage 0's input extent)
  /// elements, microbatch j at j · extent (a graph's sources side by side in one row per
  /// microbatch, in stage order); no targets, the mean as loss scaling.
  const step_losses& step(std::span<const batch_type> batch) {
    feed(batch);
    return run();
  }
  /// Runs one step and keeps the batch (its arrays' addresses: the caller keeps them alive) for
  /// replay(), as the device executors capture a step into a graph: generic code drives every
  /// executor with the same calls. The host executor has no graph; a replay is a step over the
  /// same batch.
  const step_losses& capture(std::span<const batch_type> batch) {
    feed(batch);
    captured_ = now_;
    has_capture_ = true;
    return run();
  }
  const step_losses& capture(const pipetype::batch& b) {
    feed(b);
    captured_ = now_;
    has_capture_ = true;
    return run();
  }
  const step_losses& replay() {
    if (!has_capture_) throw std::logic_error("pipetype::host: replay() before capture()");
    now_ = captured_;  // the captured batch, whatever stepped since
    return run();
  }
  /// The last step's losses (the same step() returned).
  const step_losses& losses() const noexcept { return losses_; }
  /// Tensor k of sink `sink`'s output of microbatch j in the last step, as elements of T (the
  /// tensor's element type; std::byte reads any), at the microbatch's length when it varies.
  /// Needs executor_options::keep_outputs (the sinks write their outputs there, evaluation or
  /// inference); std::invalid_argument otherwise, or for a sink, microbatch or tensor out of
  /// range, or another element type.
  template <class T = std::byte>
  std::span<const T> output(int sink, int microbatch, int tensor = 0) const {
    const bound_program& p = engine_.program();
    auto bad = [](const std::string& why) { return std::invalid_argument("pipetype::host: output(): " + why); };
    if (!p.keeps_outputs) throw bad("the executor keeps no outputs (executor_options::keep_outputs)");
    if (sink < 0 || sink >= p.batch.sinks || microbatch < 0 || microbatch >= p.microbatches)
      throw bad("no sink " + std::to_string(sink) + ", microbatch " + std::to_string(microbatch) + " (" +
                std::to_string(p.batch.sinks) + " sinks, " + std::to_string(p.microbatches) + " microbatches)");
    const auto s =
        static_cast<std::size_t>(std::find(p.batch.sink.begin(), p.batch.sink.end(), sink) - p.batch.sink.begin());
    const edge_shape& full = p.entries[s].out;
    const edge_shape sh =
        now_.max_length > 0 && full.varies
            ? pipetype::detail::shape_at(full, now_.lengths[static_cast<std::size_t>(microbatch)], now_.max_length)
            : full;
    if (tensor < 0 || tensor >= sh.count)
      throw bad("sink stage " + std::to_string(s) + "'s output has " + std::to_string(sh.count) + " tensors");
    const tensor_place& t = sh.t[static_cast<std::size_t>(tensor)];
    if constexpr (!std::is_same_v<T, std::byte>)
      if (t.type != pipetype::detail::type_id<T>)
        throw bad("tensor " + std::to_string(tensor) + " has elements of another type");
    const std::byte* at = p.outputs.data() + p.outputs_at.at(sink, microbatch, p.microbatches) + t.offset;
    return {reinterpret_cast<const T*>(at), std::is_same_v<T, std::byte> ? t.bytes() : t.elems};
  }

  const bound_program& program() const noexcept { return engine_.program(); }
  /// How every thread that had not finished ended the last step (empty when it succeeded; the
  /// same list step_error::failures() carries).
  const std::vector<failure>& failures() const noexcept { return engine_.failures(); }
  /// Per op, its start and end in the last step (executor_options::trace).
  const std::vector<op_time>& trace() const noexcept { return engine_.trace(); }
  /// For benchmarks: walk rank r's program on this thread with a transport that moves nothing (the
  /// sinks read the last step's targets and write their losses to a scratch array).
  void walk_rank(int r, std::span<const batch_type> batch) {
    const bound_program& p = engine_.program();
    // the array's places (kept while a benchmark walks the same one), the last step's targets,
    // and a scratch array for the sinks' losses
    walk_.take_rows(reinterpret_cast<const std::byte*>(batch.data()), p.batch, p.entries, p.microbatches);
    const std::size_t cells = static_cast<std::size_t>(p.batch.sinks) * static_cast<std::size_t>(p.microbatches);
    if (walk_losses_.size() != cells) walk_losses_.assign(cells, 0.0f);
    const bool targets = now_.targets.size() == static_cast<std::size_t>(p.batch.targets) && p.batch.targets > 0;
    detail::null_transport t;
    engine_.walk_in_order(r, t,
                          step_feed{walk_.inputs.data(), targets ? now_.targets.data() : nullptr, walk_losses_.data(),
                                    1.0f, p.microbatches, nullptr, 0, p.forward_only});
  }

 private:
  // A new feed replaces the last one only once it is known to fit.
  void feed(const pipetype::batch& b) {
    const bound_program& p = engine_.program();
    now_.take(b, p.batch, p.entries, p.microbatches, "pipetype::host");
  }
  void feed(std::span<const batch_type> batch) {
    const bound_program& p = engine_.program();
    pipetype::detail::check_one_array(p.batch, p.entries, "pipetype::host");  // (before the size: the better reason)
    const std::size_t want = p.batch_bytes / sizeof(batch_type) * static_cast<std::size_t>(p.microbatches);
    if (batch.size() != want)
      throw shape_error("pipetype::host: step() got a batch of " + std::to_string(batch.size()) +
                        " elements; the plan has " + std::to_string(p.microbatches) + " microbatches of " +
                        std::to_string(p.batch_bytes / sizeof(batch_type)) +
                        (p.sources > 1 ? " (its sources' inputs side by side), so " : " (stage 0's input), so ") +
                        std::to_string(want));
    now_.take_rows(reinterpret_cast<const std::byte*>(batch.data()), p.batch, p.entries, p.microbatches);
  }
  step_feed feed_of() {
    const bound_program& p = engine_.program();
    losses_.sinks = p.batch.sinks;
    losses_.microbatches = p.microbatches;
    losses_.scale = now_.scale;
    losses_.values.assign(static_cast<std::size_t>(p.batch.sinks) * static_cast<std::size_t>(p.microbatches),
                          __builtin_nanf(""));
    step_feed f = now_.view(losses_.values.data(), p.microbatches);
    f.forward_only = p.forward_only;
    return f;
  }
  const step_losses& run() {
    engine_.run(feed_of());
    return losses_;
  }

  detail::engine engine_;
  // a step's feed: this step's, and the captured one replay() runs
  pipetype::detail::batch_feed now_, captured_;
  step_losses losses_;
  bool has_capture_ = false;
  pipetype::detail::batch_feed walk_;  // walk_rank's feed
  std::vector<float> walk_losses_;
};

template <class Plan, class Model>
executor(const Plan&, Model&, const executor_options& = {}) -> executor<Model>;

}  // namespace pipetype::host
