// pipetype/cuda/driver.hpp — the calls a device executor makes, as a concept.
//
// A driver is the executor's only way to touch a device: it creates streams and events once,
// allocates buffers once, and during a step records and waits on events and issues grouped
// point-to-point transfers. Two drivers implement it:
//   record_driver (record.hpp)   CUDA-free: writes every call down, for CPU tests of the exact
//                                call sequence a rank issues (and for benchmarks of the host cost)
//   the CUDA + NCCL driver       cudaEventRecord / cudaStreamWaitEvent / ncclGroupStart,
//                                ncclSend, ncclRecv, ncclGroupEnd (runtime_driver, runtime.hpp)
// Header-only and CUDA-free: handles are the driver's own small types.
#pragma once

#include <concepts>
#include <cstddef>
#include <stdexcept>

#include "pipetype/bind/stage_entry.hpp"

namespace pipetype::cuda {

/// A device call failed: which rank, which call, what the library said — and, from the executor,
/// which op of the step was being issued.
struct device_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class D>
concept device_driver = requires(D& d, typename D::stream s, typename D::event e, typename D::comm c, void* p,
                                 const void* cp, std::size_t n, int peer) {
  { d.allocate(n) } -> std::same_as<void*>;                 // cudaMalloc: only while binding
  { d.make_stream() } -> std::same_as<typename D::stream>;  // only while binding
  { d.make_event() } -> std::same_as<typename D::event>;    // cudaEventDisableTiming; only while binding
  { d.native(s) } -> std::convertible_to<void*>;            // what a stage's context carries
  d.record(e, s);                                           // cudaEventRecord(e, s)
  d.wait(s, e);                                             // cudaStreamWaitEvent(s, e)
  d.group_start();                                          // ncclGroupStart()
  d.group_end();                                            // ncclGroupEnd()
  d.send(cp, n, peer, c, s);                                // ncclSend(bytes, peer, comm, stream)
  d.recv(p, n, peer, c, s);                                 // ncclRecv(bytes, peer, comm, stream)
};

/// Drivers that can record a step into a graph and replay it (whole-step CUDA graphs):
///   begin_capture(origin)          cudaStreamBeginCapture(origin, ThreadLocal)
///   end_capture(origin) -> graph   cudaStreamEndCapture
///   instantiate(graph) -> exec     cudaGraphInstantiate
///   update(exec, graph) -> bool    cudaGraphExecUpdate; false when the topology changed
///   launch(exec, stream)           cudaGraphLaunch
///   destroy(graph), destroy(exec)
template <class D>
concept captures_graphs = device_driver<D> &&
    requires(D& d, typename D::stream s, typename D::graph g, typename D::graph_exec x) {
  d.begin_capture(s);
  { d.end_capture(s) } -> std::same_as<typename D::graph>;
  { d.instantiate(g) } -> std::same_as<typename D::graph_exec>;
  { d.update(x, g) } -> std::same_as<bool>;
  d.launch(x, s);
  d.destroy(g);
  d.destroy(x);
};

/// Drivers that free a buffer allocate() gave (cudaFree): an executor then frees what it
/// allocated when it is destroyed.
template <class D>
concept frees = requires(D& d, void* p) {
  d.free(p);
};

/// Drivers whose buffers are host memory (the record driver): the executor may then add weight
/// gradients with a plain loop. A device driver leaves `host_memory` out.
template <class D>
concept host_memory = requires {
  requires D::host_memory;
};

/// Drivers that copy between buffers on a stream (cudaMemcpyAsync device to device): what the
/// loopback transport (loopback.hpp) builds transfers from.
template <class D>
concept copies = requires(D& d, typename D::stream s, void* p, const void* cp, std::size_t n) {
  d.copy(p, cp, n, s);
};

/// Drivers that issue a mesh step's collectives (mesh/lower.hpp), each in place on
/// `count` elements of kind `t` per member, on communicator `c` and stream `s`:
///   all_reduce(buf, count, t, c, s)       ncclAllReduce(buf, buf, count, t, ncclSum, c, s)
///   reduce_scatter(buf, count, t, c, s)   buf holds members · count; member k keeps the sums of
///                                         its part: ncclReduceScatter(buf, buf + k·count, count, …)
///   all_gather(buf, count, c, s)          buf holds members · count bytes; member k's part goes
///                                         to every member: ncclAllGather(buf + k·count, buf, …)
/// (k: the member's rank in `c`, which the driver knows.)
template <class D>
concept issues_collectives = requires(D& d, void* p, std::size_t n, elem_kind t, typename D::comm c,
                                      typename D::stream s) {
  d.all_reduce(p, n, t, c, s);
  d.reduce_scatter(p, n, t, c, s);
  d.all_gather(p, n, c, s);
};

/// Drivers that keep a step's offloaded stashes in host memory (memory actions, docs/13):
///   allocate_host(n) -> void*        cudaHostAlloc: pinned, so that the copies run asynchronously
///                                    beside the compute stream; only while binding
///   free_host(p)                     cudaFreeHost of what allocate_host gave
///   copy_to_host(dst, src, n, s)     cudaMemcpyAsync device to host on stream s (an OFFLOAD)
///   copy_to_device(dst, src, n, s)   cudaMemcpyAsync host to device on stream s (a RELOAD)
template <class D>
concept moves_to_host = requires(D& d, typename D::stream s, void* p, const void* cp, std::size_t n) {
  { d.allocate_host(n) } -> std::same_as<void*>;
  d.free_host(p);
  d.copy_to_host(p, cp, n, s);
  d.copy_to_device(p, cp, n, s);
};

/// Drivers may also observe each compute op just before the stage is called (the record driver
/// writes it down; a CUDA driver could open an NVTX range).
template <class D>
concept observes_compute = requires(D& d, typename D::stream s) {
  d.on_compute(s, 'F', 0, 0);
};

}  // namespace pipetype::cuda
