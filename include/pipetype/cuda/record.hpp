// pipetype/cuda/record.hpp — a device driver that writes every call down (CUDA-free).
//
// The record backend: run a device executor over it on a machine without a GPU and check the
// exact call sequence of each rank — every wait after the record it refers to, every send
// matched by a recv in the same order on the peer, groups as lowered, nothing allocated or
// created during a step (tests/cuda). Buffers are real host memory, so stage code that only
// passes pointers along runs unchanged; streams, events and communicators are small integers.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "pipetype/cuda/driver.hpp"

namespace pipetype::cuda {

class record_driver {
 public:
  using stream = int;
  using event = int;
  using comm = int;
  using graph = int;
  using graph_exec = int;
  static constexpr bool host_memory = true;  // buffers are host memory: the executor may add on the host

  enum class call_kind : std::uint8_t {
    allocate,
    make_stream,
    make_event,
    record,
    wait,
    group_start,
    group_end,
    send,
    recv,
    copy,
    compute,
    begin_capture,
    end_capture,
    instantiate,
    update,
    launch,
    destroy,
    all_reduce,
    reduce_scatter,
    all_gather,
    free,
    allocate_host,
    free_host,
    copy_to_host,
    copy_to_device
  };
  struct call {
    call_kind what = call_kind::allocate;
    int stream = -1, event = -1, comm = -1, peer = -1;
    std::size_t bytes = 0;
    const void* ptr = nullptr;
    char kind = '?';  // compute: F, B, I or W
    int stage = -1, microbatch = -1;
    const void* src = nullptr;  // copy: the source
    std::uint64_t seq = 0;      // with a shared sequence: the call's place among every driver's calls
  };

  /// `id_base`: the first stream and event id (give the drivers of one pipeline disjoint ranges);
  /// `sequence`: a counter shared by several drivers, so their calls can be merged in the order
  /// they were made (tests of the loopback transport's cross-rank ordering).
  explicit record_driver(int id_base = 0, std::atomic<std::uint64_t>* sequence = nullptr)
      : seq_(sequence), streams_(id_base), events_(id_base) {}

  void* allocate(std::size_t n) {
    blocks_.push_back(std::make_unique<std::byte[]>(n > 0 ? n : 1));
    note({call_kind::allocate, -1, -1, -1, -1, n, blocks_.back().get()});
    return blocks_.back().get();
  }
  /// Frees a buffer allocate() gave (written down; the memory is released at once).
  void free(void* p) {
    note({call_kind::free, -1, -1, -1, -1, 0, p});
    std::erase_if(blocks_, [p](const std::unique_ptr<std::byte[]>& b) { return b.get() == p; });
  }
  // memory actions' host pool and copies (moves_to_host): memory from the heap, copied at once
  // like copy(), written down with `src`
  void* allocate_host(std::size_t n) {
    blocks_.push_back(std::make_unique<std::byte[]>(n > 0 ? n : 1));
    note({call_kind::allocate_host, -1, -1, -1, -1, n, blocks_.back().get()});
    return blocks_.back().get();
  }
  void free_host(void* p) {
    note({call_kind::free_host, -1, -1, -1, -1, 0, p});
    std::erase_if(blocks_, [p](const std::unique_ptr<std::byte[]>& b) { return b.get() == p; });
  }
  void copy_to_host(void* dst, const void* src, std::size_t n, stream s) {
    moved(call_kind::copy_to_host, dst, src, n, s);
  }
  void copy_to_device(void* dst, const void* src, std::size_t n, stream s) {
    moved(call_kind::copy_to_device, dst, src, n, s);
  }
  stream make_stream() {
    note({call_kind::make_stream, streams_});
    return streams_++;
  }
  event make_event() {
    note({call_kind::make_event, -1, events_});
    return events_++;
  }
  void* native(stream s) const { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(s) + 1); }
  void record(event e, stream s) { note({call_kind::record, s, e}); }
  void wait(stream s, event e) { note({call_kind::wait, s, e}); }
  void group_start() { note({call_kind::group_start}); }
  void group_end() { note({call_kind::group_end}); }
  void send(const void* p, std::size_t n, int peer, comm c, stream s) { note({call_kind::send, s, -1, c, peer, n, p}); }
  void recv(void* p, std::size_t n, int peer, comm c, stream s) { note({call_kind::recv, s, -1, c, peer, n, p}); }
  /// Copies at once (memcpy): run in issue order, so a loopback pipeline of record drivers
  /// computes what the device would (tests/cuda/loopback.test.cpp).
  void copy(void* dst, const void* src, std::size_t n, stream s) { moved(call_kind::copy, dst, src, n, s); }
  // a mesh step's collectives: written down (their peers are other drivers); `bytes` the count
  // per member in elements (all_gather: bytes), `kind` the element kind as a digit ('0' + elem_kind)
  void all_reduce(void* p, std::size_t n, elem_kind t, comm c, stream s) {
    note({call_kind::all_reduce, s, -1, c, -1, n, p, static_cast<char>('0' + static_cast<int>(t))});
  }
  void reduce_scatter(void* p, std::size_t n, elem_kind t, comm c, stream s) {
    note({call_kind::reduce_scatter, s, -1, c, -1, n, p, static_cast<char>('0' + static_cast<int>(t))});
  }
  void all_gather(void* p, std::size_t n, comm c, stream s) { note({call_kind::all_gather, s, -1, c, -1, n, p}); }
  void on_compute(stream s, char kind, int stage, int microbatch) {
    note({call_kind::compute, s, -1, -1, -1, 0, nullptr, kind, stage, microbatch});
  }
  // graphs: a graph is the calls made between begin_capture and end_capture; update succeeds
  // when the new graph has the same calls up to buffer addresses (CUDA's "same topology")
  void begin_capture(stream s) {
    note({call_kind::begin_capture, s});
    capture_begin_ = calls_.size();
  }
  graph end_capture(stream s) {
    graphs_.emplace_back(calls_.begin() + static_cast<std::ptrdiff_t>(capture_begin_), calls_.end());
    note({call_kind::end_capture, s, static_cast<int>(graphs_.size()) - 1});
    return static_cast<graph>(graphs_.size()) - 1;
  }
  graph_exec instantiate(graph g) {
    execs_.push_back(graphs_[static_cast<std::size_t>(g)]);
    note({call_kind::instantiate, -1, g});
    return static_cast<graph_exec>(execs_.size()) - 1;
  }
  bool update(graph_exec x, graph g) {
    std::vector<call>& have = execs_[static_cast<std::size_t>(x)];
    const std::vector<call>& want = graphs_[static_cast<std::size_t>(g)];
    bool same = have.size() == want.size();
    for (std::size_t i = 0; same && i < have.size(); ++i)
      same = have[i].what == want[i].what && have[i].stream == want[i].stream && have[i].event == want[i].event &&
             have[i].peer == want[i].peer && have[i].comm == want[i].comm && have[i].bytes == want[i].bytes;
    if (same) have = want;
    note({call_kind::update, -1, g, same ? 1 : 0});
    return same;
  }
  void launch(graph_exec x, stream s) { note({call_kind::launch, s, x}); }
  void destroy(graph) { note({call_kind::destroy}); }
  /// The calls graph `g` holds (what a launch of an exec made from it replays).
  const std::vector<call>& graph_calls(graph g) const { return graphs_[static_cast<std::size_t>(g)]; }

  const std::vector<call>& calls() const noexcept { return calls_; }
  void clear() { calls_.clear(); }

 private:
  void moved(call_kind k, void* dst, const void* src, std::size_t n, stream s) {
    if (n) std::memcpy(dst, src, n);
    call c{k, s, -1, -1, -1, n, dst};
    c.src = src;
    note(c);
  }
  void note(call c) {
    if (seq_) c.seq = seq_->fetch_add(1, std::memory_order_relaxed);
    calls_.push_back(c);
  }

  std::atomic<std::uint64_t>* seq_ = nullptr;
  std::vector<call> calls_;
  std::vector<std::unique_ptr<std::byte[]>> blocks_;
  std::vector<std::vector<call>> graphs_, execs_;
  std::size_t capture_begin_ = 0;
  int streams_ = 0, events_ = 0;
};

static_assert(device_driver<record_driver> && observes_compute<record_driver> && captures_graphs<record_driver> &&
              host_memory<record_driver> && copies<record_driver> && issues_collectives<record_driver> &&
              frees<record_driver> && moves_to_host<record_driver>);

}  // namespace pipetype::cuda
