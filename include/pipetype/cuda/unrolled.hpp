// pipetype/cuda/unrolled.hpp — a rank's issue list as compile-time constants, issued as
// straight-line code (executor::step_unrolled).
//
// For a plan known at compile time, static_program<plan, rank> reads the rank's lowered ops once,
// in a constant expression, into two arrays: the issues (kind, stream, wait and record events,
// the pair half, the call or transfer range) and the transfers (direction, peer in the
// communicator). issue_unrolled expands them into one driver call after another: every stream,
// event index, kind and peer a constant, only the addresses read from the binding
// (cuda/binding.hpp). The calls are those the eager walk makes for the same ops, in the same order
// (bench_cuda_issue measures both against hand-written code).
#pragma once

#include <array>
#include <cstddef>
#include <utility>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/cuda/binding.hpp"

namespace pipetype::cuda::detail {

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

// What the unrolled step reads, in locals (so the compiler need not reload them after every
// driver call).
template <device_driver D>
struct static_args {
  device_binding<D>& b;
  D& d;
  const bound_op* calls;
  const typename device_binding<D>::transfer* tr;
  const typename D::event* ev;
  typename D::stream compute, comm, aux;
  const step_feed* feed;
};

template <class P, std::size_t K, device_driver D>
PIPETYPE_INLINE void transfer_static(const static_args<D>& a, typename D::stream s) {
  const auto& t = a.tr[K];
  if constexpr (P::transfers[K].send)
    a.d.send(t.buf, device_binding<D>::bytes_of(t, *a.feed), P::transfers[K].peer, t.c, s);
  else
    a.d.recv(t.buf, device_binding<D>::bytes_of(t, *a.feed), P::transfers[K].peer, t.c, s);
}
template <class P, std::size_t First, device_driver D, std::size_t... K>
PIPETYPE_INLINE void transfer_all(const static_args<D>& a, typename D::stream s, std::index_sequence<K...>) {
  (transfer_static<P, First + K>(a, s), ...);
}
// One op: the same calls as the eager walk's (cuda/executor.hpp, run and issue_pair_half).
template <class P, static_issue X, device_driver D>
PIPETYPE_INLINE void issue_static(const static_args<D>& a) {
  const typename D::stream s = X.pair == 2 ? a.aux : X.stream == 0 ? a.compute : a.comm;
  if constexpr (X.pair == 2) a.d.wait(s, a.b.pair_fork);
  if constexpr (X.wait >= 0) a.d.wait(s, a.ev[X.wait]);
  if constexpr (X.pair == 1) a.d.record(a.b.pair_fork, s);  // after the first half's wait
  if constexpr (X.code == op_code::compute) {
    a.b.compute(a.d, a.calls[X.index], s, *a.feed);
    if constexpr (X.pair == 2) {
      a.d.record(a.b.pair_join, s);
      a.d.wait(a.compute, a.b.pair_join);
    }
  } else {
    a.d.group_start();
    transfer_all<P, X.index>(a, s, std::make_index_sequence<X.last - X.index>{});
    a.d.group_end();
  }
  if constexpr (X.record >= 0) a.d.record(a.ev[X.record], X.pair == 2 ? a.compute : s);
}
template <class P, device_driver D, std::size_t... I>
PIPETYPE_INLINE void issue_all(const static_args<D>& a, std::index_sequence<I...>) {
  (issue_static<P, P::issues[I]>(a), ...);
}

// The whole step of program P over binding `b`: its ops, the later lanes' adds, the fence.
template <class P, device_driver D>
void issue_unrolled(device_binding<D>& b, const step_feed& f) {
  const static_args<D> a{
      b, b.d, b.calls.data(), b.transfers.data(), b.events.data(), b.streams[0], b.streams[1], b.streams[2], &f};
  issue_all<P>(a, std::make_index_sequence<P::issues.size()>{});
  if (!b.later.empty()) b.add_later();
  b.fence(b.d);
}

}  // namespace pipetype::cuda::detail
