// pipetype/cuda/runtime.hpp — the CUDA + NCCL device driver (the only header that includes
// cuda_runtime.h and nccl.h).
//
// Link pipetype::cuda (CMake: CUDA::cudart and NCCL). Compiles in a .cpp with the host
// compiler; keep plan instantiation there too (docs/08_architecture.md, "Rules"), kernels in .cu files.
// Example, given rank, device, id, world, plan, model, device_batch:
//   #include <pipetype/cuda/executor.hpp>                   // the executor, beside this driver
//   pipetype::cuda::runtime_driver d{rank, device};          // cudaSetDevice(device) first
//   std::vector<ncclComm_t> comms = d.connect(id, world, plan.lowered());
//   pipetype::cuda::executor<pipetype::cuda::runtime_driver> ex{plan, model, d, {.rank = rank, .comms = comms}};
//   ex.step(device_batch);
//   d.synchronize();                                          // or record an event and wait on it
//
// Every CUDA and NCCL return code is checked: a failure throws `device_error`, whose message
// names the rank, the call and the library's error string. The driver owns everything it
// creates — buffers, streams, events and the communicators connect() makes — and frees it when
// destroyed (release() frees one plan's communicators earlier). A communicator the caller made
// itself and passes in executor_options::comms stays the caller's.
//
// Communicators (connect): one world communicator from NCCL's unique id, then one two-rank
// communicator per lowered id by ncclCommSplit (collective over the world, in id order, key =
// rank, so the lower rank is rank 0 in it), all non-blocking by default (cfg.blocking = 0). Every
// wait on NCCL — init, split, a group that returns ncclInProgress — and synchronize() polls with
// the driver's deadline: a peer that died or hangs ends in ncclCommAbort on every communicator
// of this rank and a device_error naming the rank, the call and the deadline, not in a hang.
//
// Bootstrap (docs/06_cuda_execution.md §6.6): launch_from_env() (launch.hpp) gives rank, world and
// local rank under torchrun-style variables, mpirun, PMI or Slurm; unique_id() makes NCCL's id
// reach every rank through NCCL_COMM_ID or a shared file.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/mesh/verify.hpp"
#include "pipetype/cuda/driver.hpp"
#include "pipetype/cuda/launch.hpp"

namespace pipetype::cuda {

/// Devices visible to this process; 0 when there is no driver or no device (error 35, 100, 34
/// and friends in the CUDA runtime API's error list), with the sticky error cleared.
inline int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

/// "NCCL 2.28.9" — works without a GPU.
inline std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

struct runtime_options {
  std::chrono::milliseconds deadline{120'000};  // the longest any NCCL wait or synchronize() may take
  bool nonblocking = true;                      // communicators made by connect()
};

/// Throws device_error for an NCCL call the caller makes itself (ncclInProgress is not a failure:
/// settle the communicator before using the result).
inline void check_nccl(ncclResult_t r, const char* call) {
  if (r != ncclSuccess && r != ncclInProgress)
    throw device_error(std::string("pipetype::cuda: ") + call + " failed: " + ncclGetErrorString(r));
}

class runtime_driver {
 public:
  using stream = cudaStream_t;
  using event = cudaEvent_t;
  using comm = ncclComm_t;
  using graph = cudaGraph_t;
  using graph_exec = cudaGraphExec_t;

  /// Makes `device` current for this thread; `rank` names the messages.
  runtime_driver(int rank, int device, runtime_options opt = {}) : rank_(rank), device_(device), opt_(opt) {
    check(cudaSetDevice(device), "cudaSetDevice");
  }
  runtime_driver(const runtime_driver&) = delete;
  runtime_driver& operator=(const runtime_driver&) = delete;
  ~runtime_driver() {
    release_comms();
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
    for (cudaStream_t s : streams_) (void)cudaStreamDestroy(s);
    for (void* p : buffers_) (void)cudaFree(p);
    for (void* p : host_buffers_) (void)cudaFreeHost(p);
  }

  void* allocate(std::size_t n) {
    void* p = nullptr;
    check(cudaMalloc(&p, n > 0 ? n : 1), "cudaMalloc");
    buffers_.push_back(p);
    return p;
  }
  /// cudaFree of a buffer allocate() gave (an executor's, when it is destroyed).
  void free(void* p) {
    const auto it = std::find(buffers_.begin(), buffers_.end(), p);
    if (it == buffers_.end()) return;
    buffers_.erase(it);
    check(cudaFree(p), "cudaFree");
  }
  /// Pinned host memory (cudaHostAlloc), for a step's offloaded stashes (moves_to_host).
  void* allocate_host(std::size_t n) {
    void* p = nullptr;
    check(cudaHostAlloc(&p, n > 0 ? n : 1, cudaHostAllocDefault), "cudaHostAlloc");
    host_buffers_.push_back(p);
    return p;
  }
  void free_host(void* p) {
    const auto it = std::find(host_buffers_.begin(), host_buffers_.end(), p);
    if (it == host_buffers_.end()) return;
    host_buffers_.erase(it);
    check(cudaFreeHost(p), "cudaFreeHost");
  }
  /// An OFFLOAD's and a RELOAD's copies (cudaMemcpyAsync between the device and pinned memory).
  void copy_to_host(void* dst, const void* src, std::size_t n, stream s) {
    check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync(DeviceToHost)");
  }
  void copy_to_device(void* dst, const void* src, std::size_t n, stream s) {
    check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync(HostToDevice)");
  }
  stream make_stream() {
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    streams_.push_back(s);
    return s;
  }
  event make_event() {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags(cudaEventDisableTiming)");
    events_.push_back(e);
    return e;
  }
  void* native(stream s) const noexcept { return static_cast<void*>(s); }
  void record(event e, stream s) { check(cudaEventRecord(e, s), "cudaEventRecord"); }
  void wait(stream s, event e) { check(cudaStreamWaitEvent(s, e, 0), "cudaStreamWaitEvent"); }
  void group_start() {
    live();
    check(ncclGroupStart(), "ncclGroupStart", nullptr);
    group_comms_.clear();
  }
  /// With non-blocking communicators the group may still be issuing: wait for each of its
  /// communicators (up to the deadline) before anything else touches their streams.
  void group_end() {
    const ncclResult_t r = ncclGroupEnd();
    if (r != ncclInProgress) check(r, "ncclGroupEnd", group_comms_.empty() ? nullptr : group_comms_.front());
    for (ncclComm_t c : group_comms_) settle(c, "ncclGroupEnd");
  }
  void send(const void* p, std::size_t n, int peer, comm c, stream s) {
    note(c);
    check_queued(ncclSend(p, n, ncclUint8, peer, c, s), "ncclSend", c);
  }
  void recv(void* p, std::size_t n, int peer, comm c, stream s) {
    note(c);
    check_queued(ncclRecv(p, n, ncclUint8, peer, c, s), "ncclRecv", c);
  }
  // a mesh step's collectives, in place (driver.hpp: issues_collectives)
  void all_reduce(void* p, std::size_t n, elem_kind t, comm c, stream s) {
    live();
    issued(ncclAllReduce(p, p, n, nccl_type(t), ncclSum, c, s), "ncclAllReduce", c);
  }
  void reduce_scatter(void* p, std::size_t n, elem_kind t, comm c, stream s) {
    live();
    auto* own = static_cast<std::byte*>(p) + static_cast<std::size_t>(rank_in(c)) * n * size_of(t);
    issued(ncclReduceScatter(p, own, n, nccl_type(t), ncclSum, c, s), "ncclReduceScatter", c);
  }
  void all_gather(void* p, std::size_t n, comm c, stream s) {
    live();
    const auto* own = static_cast<const std::byte*>(p) + static_cast<std::size_t>(rank_in(c)) * n;
    issued(ncclAllGather(own, p, n, ncclUint8, c, s), "ncclAllGather", c);
  }
  /// cudaMemcpyAsync device to device: the loopback transport's transfers (loopback.hpp).
  void copy(void* dst, const void* src, std::size_t n, stream s) {
    check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
  }
  /// Makes this driver's device current on the calling thread (a loopback pipeline's rank threads).
  void bind_thread() { check(cudaSetDevice(device_), "cudaSetDevice"); }
  // whole-step graphs (executor::capture / replay)
  void begin_capture(stream s) {
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  }
  graph end_capture(stream s) {
    cudaGraph_t g = nullptr;
    check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
    return g;
  }
  graph_exec instantiate(graph g) {
    cudaGraphExec_t x = nullptr;
    check(cudaGraphInstantiate(&x, g, 0ULL), "cudaGraphInstantiate");
    return x;
  }
  /// False when the graph's topology differs (then instantiate anew); other failures throw.
  bool update(graph_exec x, graph g) {
    cudaGraphExecUpdateResultInfo info{};
    const cudaError_t e = cudaGraphExecUpdate(x, g, &info);
    if (e == cudaErrorGraphExecUpdateFailure) {
      (void)cudaGetLastError();
      return false;
    }
    check(e, "cudaGraphExecUpdate");
    return true;
  }
  void launch(graph_exec x, stream s) { check(cudaGraphLaunch(x, s), "cudaGraphLaunch"); }
  void destroy(graph g) { check(cudaGraphDestroy(g), "cudaGraphDestroy"); }
  void destroy(graph_exec x) { check(cudaGraphExecDestroy(x), "cudaGraphExecDestroy"); }

  /// Waits for everything this driver's streams were given, polling so that a peer that never
  /// comes (its NCCL kernel waits forever) ends at the deadline: the communicators are aborted
  /// and device_error says so.
  void synchronize() {
    live();
    const auto until = std::chrono::steady_clock::now() + opt_.deadline;
    for (cudaStream_t s : streams_) {
      for (;;) {
        const cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) check(e, "cudaStreamQuery");
        for (ncclComm_t c : comms_) poll_async(c, "synchronize");
        if (std::chrono::steady_clock::now() > until) fail_deadline("synchronize (a stream did not finish)");
        std::this_thread::yield();
      }
    }
  }

  // ---- communicators ---------------------------------------------------------------------------

  /// The world communicator of `world` ranks from `id` (every rank calls it), then one two-rank
  /// communicator per lowered communicator of `l` by ncclCommSplit, in id order: rank_a is rank 0
  /// in it, rank_b rank 1; a rank outside gets nullptr. The driver owns them all (destroyed with
  /// it, or aborted at a deadline). Returns the lowered ids' communicators, for the executor.
  /// Every plan of a run may connect again: the world communicator is made once (the first
  /// call's `id` and `world`; a later call with another `world` is refused), the splits per call
  /// (release() them when the plan is done).
  std::vector<comm> connect(const ncclUniqueId& id, int world, const lowered_view& l) {
    join(id, world);
    std::vector<comm> out;
    for (std::size_t c = 0; c < l.comms.size(); ++c) {
      const comm_desc& d = l.comms[c];
      out.push_back(split(d.rank_a == rank_ || d.rank_b == rank_, static_cast<int>(c)));
    }
    return out;
  }
  /// The same for a mesh step (mesh/plan.hpp: build_mesh), this driver's rank its
  /// global rank: one communicator per mesh communicator (each replica's copies of the pipeline's,
  /// the DP groups', the tie groups'), split from the world in id order with key = global rank, so
  /// that a member's rank in each is its place among the communicator's members.
  std::vector<comm> connect(const ncclUniqueId& id, int world, const mesh_program& mp) {
    join(id, world);
    std::vector<comm> out;
    for (std::size_t c = 0; c < mp.comms.size(); ++c) {
      const std::vector<int>& ms = mp.comms[c].members;
      out.push_back(split(std::binary_search(ms.begin(), ms.end(), rank_), static_cast<int>(c)));
    }
    return out;
  }
  comm world() const noexcept { return world_; }
  /// Finalizes and destroys communicators connect() made for a plan that is done (its executor
  /// gone, its work finished), within the deadline; the world stays. nullptr entries are skipped.
  void release(const std::vector<comm>& done) {
    live();
    for (ncclComm_t c : done)
      if (c) check(ncclCommFinalize(c), "ncclCommFinalize", c);
    for (ncclComm_t c : done) settle(c, "ncclCommFinalize");
    for (ncclComm_t c : done) {
      if (!c) continue;
      check(ncclCommDestroy(c), "ncclCommDestroy", c);
      std::erase(comms_, c);
    }
  }
  /// Aborts every communicator this driver owns (ncclCommAbort): what a deadline does.
  void abort() noexcept {
    if (aborted_) return;
    aborted_ = true;
    for (ncclComm_t c : comms_) (void)ncclCommAbort(c);
  }
  bool aborted() const noexcept { return aborted_; }
  /// Waits until a non-blocking communicator has finished what it was given (a group that
  /// returned ncclInProgress, a collective the caller issued on world()), up to the deadline.
  void settle(ncclComm_t c, const char* call) {
    live();
    if (!c) return;
    const auto until = std::chrono::steady_clock::now() + opt_.deadline;
    while (poll_async(c, call)) {
      if (std::chrono::steady_clock::now() > until) fail_deadline(call);
      std::this_thread::yield();
    }
  }
  std::chrono::milliseconds deadline() const noexcept { return opt_.deadline; }

  int rank() const noexcept { return rank_; }
  int device() const noexcept { return device_; }

 private:
  // The world communicator, once (the first call's id and world; another world size is refused).
  void join(const ncclUniqueId& id, int world) {
    if (aborted_) throw device_error("pipetype::cuda: rank " + std::to_string(rank_) + ": connect after an abort");
    if (!world_) {
      ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
      cfg.blocking = opt_.nonblocking ? 0 : 1;
      ncclComm_t w = nullptr;
      const ncclResult_t r = ncclCommInitRankConfig(&w, world, id, rank_, &cfg);
      if (w) comms_.push_back(w);
      if (r != ncclInProgress) check(r, "ncclCommInitRankConfig", w);
      settle(w, "ncclCommInitRankConfig");
      world_ = w;
    }
    if (world != world_size_ && world_size_ > 0)
      throw std::invalid_argument("pipetype::cuda: rank " + std::to_string(rank_) + ": connect: the world has " +
                                  std::to_string(world_size_) + " ranks, not " + std::to_string(world));
    world_size_ = world;
  }
  // One split of the world (collective over it): this rank's communicator of color `color`, or
  // nullptr when it is no member.
  ncclComm_t split(bool member, int color) {
    ncclComm_t sub = nullptr;
    const ncclResult_t rs = ncclCommSplit(world_, member ? color : NCCL_SPLIT_NOCOLOR, rank_, &sub, nullptr);
    if (rs != ncclInProgress) check(rs, "ncclCommSplit", world_);
    settle(world_, "ncclCommSplit");  // a non-blocking split writes `sub` when it completes
    if (sub) {
      comms_.push_back(sub);
      settle(sub, "ncclCommSplit");
    }
    return sub;
  }
  static ncclDataType_t nccl_type(elem_kind t) {
    switch (t) {
      case elem_kind::f32:
        return ncclFloat32;
      case elem_kind::f64:
        return ncclFloat64;
      case elem_kind::i32:
        return ncclInt32;
      case elem_kind::i64:
        return ncclInt64;
      case elem_kind::f16:
        return ncclFloat16;
      case elem_kind::bf16:
        return ncclBfloat16;
      case elem_kind::other:
        break;
    }
    throw device_error(
        "pipetype::cuda: a collective over elements NCCL cannot sum from here (float, double, int32, "
        "int64, pipetype::half, pipetype::bfloat16)");
  }
  static std::size_t size_of(elem_kind t) {
    if (t == elem_kind::f16 || t == elem_kind::bf16) return 2;
    return t == elem_kind::f64 || t == elem_kind::i64 ? 8 : 4;
  }
  int rank_in(ncclComm_t c) {
    int k = 0;
    check(ncclCommUserRank(c, &k), "ncclCommUserRank", c);
    return k;
  }
  // A collective outside a group: on a non-blocking communicator it may return ncclInProgress,
  // settled before anything else touches its stream.
  void issued(ncclResult_t r, const char* call, ncclComm_t c) {
    if (r == ncclInProgress) return settle(c, call);
    check(r, call, c);
  }
  void check(cudaError_t e, const char* call) const {
    if (e != cudaSuccess)
      throw device_error("pipetype::cuda: rank " + std::to_string(rank_) + ": " + call +
                         " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
  void note(ncclComm_t c) {
    for (ncclComm_t x : group_comms_)
      if (x == c) return;
    group_comms_.push_back(c);
  }
  // A call on a non-blocking communicator may return ncclInProgress: queued, settled at group_end.
  // A failure closes the open group first, so later NCCL calls are not deferred into it.
  void check_queued(ncclResult_t r, const char* call, ncclComm_t c) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    const std::string what = message(r, call, c);
    (void)ncclGroupEnd();
    throw device_error(what);
  }
  // After an abort the communicators are gone: refuse instead of using them.
  void live() const {
    if (aborted_)
      throw device_error("pipetype::cuda: rank " + std::to_string(rank_) +
                         ": the NCCL communicators were aborted (an earlier deadline or error)");
  }
  // Finalizes and destroys every communicator, within the deadline; aborts them when a peer does
  // not finish (so a destructor never hangs).
  void release_comms() noexcept {
    if (aborted_ || comms_.empty()) return;
    const auto until = std::chrono::steady_clock::now() + opt_.deadline;
    for (ncclComm_t c : comms_) (void)ncclCommFinalize(c);
    for (ncclComm_t c : comms_) {
      ncclResult_t state = ncclInProgress;
      while (ncclCommGetAsyncError(c, &state) == ncclSuccess && state == ncclInProgress) {
        if (std::chrono::steady_clock::now() > until) {
          abort();
          return;
        }
        std::this_thread::yield();
      }
      if (state != ncclSuccess) {  // a communicator in error: abort them all rather than destroy
        abort();
        return;
      }
    }
    for (auto it = comms_.rbegin(); it != comms_.rend(); ++it) (void)ncclCommDestroy(*it);
    comms_.clear();
  }
  // One look at a communicator's asynchronous state; true while it is still in progress.
  bool poll_async(ncclComm_t c, const char* call) {
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(c, &state), "ncclCommGetAsyncError", c);
    if (state == ncclInProgress) return true;
    if (state != ncclSuccess) {
      const std::string what = message(state, call, c);
      abort();
      throw device_error(what + "; communicators aborted");
    }
    return false;
  }
  [[noreturn]] void fail_deadline(const std::string& call) {
    abort();
    throw device_error("pipetype::cuda: rank " + std::to_string(rank_) + ": " + call + " did not complete within " +
                       std::to_string(opt_.deadline.count()) +
                       " ms (a peer is stuck or dead); this rank's NCCL communicators were aborted");
  }
  std::string message(ncclResult_t r, const char* call, ncclComm_t c) const {
    std::string what =
        "pipetype::cuda: rank " + std::to_string(rank_) + ": " + call + " failed: " + ncclGetErrorString(r);
    if (const char* last = ncclGetLastError(c); last && *last) what += std::string(" (") + last + ")";
    return what;
  }
  void check(ncclResult_t r, const char* call, ncclComm_t c) const {
    if (r == ncclSuccess) return;
    throw device_error(message(r, call, c));
  }

  int rank_;
  int device_;
  runtime_options opt_;
  std::vector<ncclComm_t> comms_, group_comms_;
  ncclComm_t world_ = nullptr;
  int world_size_ = 0;
  bool aborted_ = false;
  std::vector<void*> buffers_;
  std::vector<void*> host_buffers_;  // allocate_host's
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> events_;
};

static_assert(device_driver<runtime_driver> && captures_graphs<runtime_driver> && copies<runtime_driver> &&
              issues_collectives<runtime_driver> && frees<runtime_driver> && moves_to_host<runtime_driver>);

/// NCCL's unique id on every rank of `l`: from NCCL_COMM_ID when it is set (each rank computes it;
/// rank 0 starts the root in ncclCommInitRank), else through `id_file` (rank 0 makes it and
/// publishes it, the others read it: share_bytes), else — one process — made here.
inline ncclUniqueId unique_id(const launch_info& l, const std::string& id_file = {},
                              std::chrono::milliseconds deadline = std::chrono::seconds(60)) {
  ncclUniqueId id{};
  auto get = [&] {
    if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      throw device_error("pipetype::cuda: rank " + std::to_string(l.rank) +
                         ": ncclGetUniqueId failed: " + ncclGetErrorString(r));
  };
  const char* comm_id = std::getenv("NCCL_COMM_ID");
  if (comm_id && *comm_id) {
    get();
    return id;
  }
  if (l.world == 1) {
    get();
    return id;
  }
  if (id_file.empty())
    throw std::invalid_argument("pipetype::cuda: rank " + std::to_string(l.rank) + " of " + std::to_string(l.world) +
                                ": no way to share NCCL's unique id: set NCCL_COMM_ID=<host>:<port> or give a file "
                                "every rank can see");
  if (l.rank == 0) get();
  share_bytes(id_file, l.rank, std::as_writable_bytes(std::span<char, sizeof(id.internal)>(id.internal)), deadline);
  return id;
}

}  // namespace pipetype::cuda
