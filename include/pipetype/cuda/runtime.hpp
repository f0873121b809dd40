// pipetype/cuda/runtime.hpp — the CUDA + NCCL device driver (the only header that includes
// cuda_runtime.h and nccl.h).
//
// Link pipetype::cuda (CMake: CUDA::cudart and NCCL). Compiles in a .cpp with the host
// compiler; keep plan instantiation there too (DESIGN.md §4.2), kernels in .cu files.
//
//   pipetype::cuda::runtime_driver d{rank, device};   // cudaSetDevice(device) first
//   pipetype::cuda::rank_executor ex{views_of(plan), rank, entries_of(model), d, comms};
//   ex.step(device_batch);
//   d.synchronize();                                   // or record an event and wait on it
//
// Every CUDA and NCCL return code is checked: a failure throws `device_error`, whose message
// names the rank, the call and the library's error string. The driver owns what it creates
// (buffers, streams, events) and frees it when destroyed; communicators stay the caller's.
//
// State of play (issue 4): eager issue with blocking NCCL communicators. Next: non-blocking
// communicators with a deadline and ncclCommAbort, whole-step graph capture, the loopback
// transport, bootstrap helpers (docs/06_cuda_execution.md).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetype/cuda/driver.hpp"

namespace pipetype::cuda {

/// A CUDA or NCCL call failed: which rank, which call, what the library said.
struct device_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Devices visible to this process; 0 when there is no driver or no device (error 35, 100, 34
/// and friends: shared/reference/nccl_cuda.md A.2), with the sticky error cleared.
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

class runtime_driver {
 public:
  using stream = cudaStream_t;
  using event = cudaEvent_t;
  using comm = ncclComm_t;
  using graph = cudaGraph_t;
  using graph_exec = cudaGraphExec_t;

  /// Makes `device` current for this thread; `rank` names the messages.
  runtime_driver(int rank, int device) : rank_(rank), device_(device) { check(cudaSetDevice(device), "cudaSetDevice"); }
  runtime_driver(const runtime_driver&) = delete;
  runtime_driver& operator=(const runtime_driver&) = delete;
  ~runtime_driver() {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
    for (cudaStream_t s : streams_) (void)cudaStreamDestroy(s);
    for (void* p : buffers_) (void)cudaFree(p);
  }

  void* allocate(std::size_t n) {
    void* p = nullptr;
    check(cudaMalloc(&p, n > 0 ? n : 1), "cudaMalloc");
    buffers_.push_back(p);
    return p;
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
  void group_start() { check(ncclGroupStart(), "ncclGroupStart", nullptr); }
  void group_end() { check(ncclGroupEnd(), "ncclGroupEnd", nullptr); }
  void send(const void* p, std::size_t n, int peer, comm c, stream s) {
    check(ncclSend(p, n, ncclUint8, peer, c, s), "ncclSend", c);
  }
  void recv(void* p, std::size_t n, int peer, comm c, stream s) {
    check(ncclRecv(p, n, ncclUint8, peer, c, s), "ncclRecv", c);
  }
  // whole-step graphs (rank_executor::capture / replay)
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

  /// Waits for everything this driver's streams were given.
  void synchronize() {
    for (cudaStream_t s : streams_) check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }

  int rank() const noexcept { return rank_; }
  int device() const noexcept { return device_; }

 private:
  void check(cudaError_t e, const char* call) const {
    if (e != cudaSuccess)
      throw device_error("pipetype::cuda: rank " + std::to_string(rank_) + ": " + call +
                         " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
  void check(ncclResult_t r, const char* call, ncclComm_t c) const {
    if (r == ncclSuccess) return;
    std::string what =
        "pipetype::cuda: rank " + std::to_string(rank_) + ": " + call + " failed: " + ncclGetErrorString(r);
    if (const char* last = ncclGetLastError(c); last && *last) what += std::string(" (") + last + ")";
    throw device_error(what);
  }

  int rank_;
  int device_;
  std::vector<void*> buffers_;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> events_;
};

static_assert(device_driver<runtime_driver> && captures_graphs<runtime_driver>);

}  // namespace pipetype::cuda
