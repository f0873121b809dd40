// pipetype/cuda/record.hpp — a device driver that writes every call down (CUDA-free).
//
// The record backend: run a device executor over it on a machine without a GPU and check the
// exact call sequence of each rank — every wait after the record it refers to, every send
// matched by a recv in the same order on the peer, groups as lowered, nothing allocated or
// created during a step (tests/cuda). Buffers are real host memory, so stage code that only
// passes pointers along runs unchanged; streams, events and communicators are small integers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "pipetype/cuda/driver.hpp"

namespace pipetype::cuda {

class record_driver {
 public:
  using stream = int;
  using event = int;
  using comm = int;

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
    compute
  };
  struct call {
    call_kind what = call_kind::allocate;
    int stream = -1, event = -1, comm = -1, peer = -1;
    std::size_t bytes = 0;
    const void* ptr = nullptr;
    char kind = '?';  // compute: F, B, I or W
    int stage = -1, microbatch = -1;
  };

  void* allocate(std::size_t n) {
    blocks_.push_back(std::make_unique<std::byte[]>(n > 0 ? n : 1));
    calls_.push_back({call_kind::allocate, -1, -1, -1, -1, n, blocks_.back().get()});
    return blocks_.back().get();
  }
  stream make_stream() {
    calls_.push_back({call_kind::make_stream, streams_});
    return streams_++;
  }
  event make_event() {
    calls_.push_back({call_kind::make_event, -1, events_});
    return events_++;
  }
  void* native(stream s) const { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(s) + 1); }
  void record(event e, stream s) { calls_.push_back({call_kind::record, s, e}); }
  void wait(stream s, event e) { calls_.push_back({call_kind::wait, s, e}); }
  void group_start() { calls_.push_back({call_kind::group_start}); }
  void group_end() { calls_.push_back({call_kind::group_end}); }
  void send(const void* p, std::size_t n, int peer, comm c, stream s) {
    calls_.push_back({call_kind::send, s, -1, c, peer, n, p});
  }
  void recv(void* p, std::size_t n, int peer, comm c, stream s) {
    calls_.push_back({call_kind::recv, s, -1, c, peer, n, p});
  }
  void on_compute(stream s, char kind, int stage, int microbatch) {
    calls_.push_back({call_kind::compute, s, -1, -1, -1, 0, nullptr, kind, stage, microbatch});
  }

  const std::vector<call>& calls() const noexcept { return calls_; }
  void clear() { calls_.clear(); }

 private:
  std::vector<call> calls_;
  std::vector<std::unique_ptr<std::byte[]>> blocks_;
  int streams_ = 0, events_ = 0;
};

static_assert(device_driver<record_driver> && observes_compute<record_driver>);

}  // namespace pipetype::cuda
