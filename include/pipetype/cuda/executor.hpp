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
// — no allocation, no creation, no decision. What the stage receives is the host executor's
// context (graph/stage.hpp) with device pointers and `stream`, the driver's native stream (a
// cudaStream_t with the CUDA driver) to launch its kernels on.
//
// State of play (issue 4): this CUDA-free core and the record driver (record.hpp) are tested on
// CPU (tests/cuda); the CUDA + NCCL driver, loopback transport, graph capture, weight-gradient
// accumulation on the device and the bootstrap are the next steps. A stage that declares
// `weight_grad` is given no buffer yet (it must accumulate its own gradients on the device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/cuda/driver.hpp"
#include "pipetype/exec/binding.hpp"

namespace pipetype::cuda {

using host::entries_of;  // the stages of a model, as the executors bind them

template <device_driver D>
class rank_executor {
 public:
  /// Binds rank `rank` of the plan `v` (host::views_of(plan)) to the model's stages, allocating
  /// and creating everything through `driver`; `comms[c]` is lowered communicator c (only those
  /// the rank is a member of are used).
  rank_executor(const host::plan_views& v, int rank, std::vector<host::stage_entry> entries, D& driver,
                std::vector<typename D::comm> comms)
      : d_(driver), rank_(rank), entries_(std::move(entries)), comms_(std::move(comms)) {
    const program_view& p = v.compute;
    const lowered_view& l = v.lowered;
    if (rank < 0 || rank >= p.ranks)
      throw std::invalid_argument("pipetype::cuda: rank " + std::to_string(rank) + " is not in the plan's " +
                                  std::to_string(p.ranks) + " ranks");
    const int L = p.chain_length();
    host::detail::check_model(p, entries_, "pipetype::cuda");
    if (comms_.size() < l.comms.size())
      throw std::invalid_argument("pipetype::cuda: the plan uses " + std::to_string(l.comms.size()) +
                                  " communicators, " + std::to_string(comms_.size()) + " given");
    batch_bytes_ = entries_.front().in_bytes();
    bind(p, l, L);
  }

  /// One step: `batch` is stage 0's input for every microbatch (microbatch j at j × its bytes),
  /// read only on the rank that holds a chain's first stage (device memory with the CUDA driver).
  void step(const void* batch) {
    const auto* b = static_cast<const std::byte*>(batch);
    for (const issue_op& o : ops_) {
      const typename D::stream s = streams_[o.stream];
      if (o.wait >= 0) d_.wait(s, events_[static_cast<std::size_t>(o.wait)]);
      if (o.code == op_code::compute) {
        if constexpr (observes_compute<D>)
          d_.on_compute(s, kind_char(o.call.what), o.call.plan_stage, o.call.microbatch);
        o.call.fn(o.call.obj, o.call, b);
      } else {
        d_.group_start();
        for (int k = o.first; k < o.last; ++k) {
          const transfer& x = transfers_[static_cast<std::size_t>(k)];
          if (x.send)
            d_.send(x.buf, x.bytes, x.peer, comms_[static_cast<std::size_t>(x.comm)], s);
          else
            d_.recv(x.buf, x.bytes, x.peer, comms_[static_cast<std::size_t>(x.comm)], s);
        }
        d_.group_end();
      }
      if (o.record >= 0) d_.record(events_[static_cast<std::size_t>(o.record)], s);
    }
  }

  /// Records one step into a graph (fork from an origin stream to the compute and communication
  /// streams, the step, join back), then instantiates it — or, when a graph was made before and
  /// only buffer addresses changed (a new `batch`), updates it in place. replay() launches it.
  void capture(const void* batch) requires captures_graphs<D> {
    const typename D::stream origin = origin_;
    d_.begin_capture(origin);
    d_.record(fork_, origin);
    d_.wait(streams_[0], fork_);
    d_.wait(streams_[1], fork_);
    step(batch);
    for (int s = 0; s < 2; ++s) {
      d_.record(join_[s], streams_[s]);
      d_.wait(origin, join_[s]);
    }
    const typename D::graph g = d_.end_capture(origin);
    if (captured_ && d_.update(exec_, g)) {
      ++updates_;
    } else {
      if (captured_) d_.destroy(exec_);
      exec_ = d_.instantiate(g);
      captured_ = true;
      ++instantiations_;
    }
    d_.destroy(g);
  }
  /// Launches the captured step on the origin stream (capture() first).
  void replay() requires captures_graphs<D> {
    if (!captured_) throw std::logic_error("pipetype::cuda: replay() before capture()");
    d_.launch(exec_, origin_);
  }
  int instantiations() const noexcept { return instantiations_; }
  int updates() const noexcept { return updates_; }

  int rank() const noexcept { return rank_; }
  std::size_t batch_bytes() const noexcept { return batch_bytes_; }  // per microbatch
  int ops() const noexcept { return static_cast<int>(ops_.size()); }

 private:
  struct transfer {
    bool send = false;
    void* buf = nullptr;
    std::size_t bytes = 0;
    int peer = -1, comm = -1;
  };
  struct issue_op {
    op_code code = op_code::compute;
    int stream = 0, wait = -1, record = -1;
    host::bound_op call;      // compute: the stage call, pointers into the device pools
    int first = 0, last = 0;  // group: transfers_[first, last)
  };

  void bind(const program_view& p, const lowered_view& l, int L) {
    const rank_resources& res = l.resources[static_cast<std::size_t>(rank_)];
    const std::span<const lowered_op> ops = l.rank_ops(rank_);
    auto entry = [&](int s) -> const host::stage_entry& { return entries_[static_cast<std::size_t>(s % L)]; };
    const host::detail::rank_layout layout = host::detail::layout_of(p, ops, entries_);
    const std::size_t stride = layout.stride;
    std::byte* acts = alloc(stride * static_cast<std::size_t>(res.activation_slots));
    std::byte* grads = alloc(stride * static_cast<std::size_t>(res.gradient_slots));
    std::byte* stashes = alloc(layout.stash_stride * static_cast<std::size_t>(layout.stash_slots));
    auto at = [stride](std::byte* pool, int slot) {
      return slot < 0 ? nullptr : pool + stride * static_cast<std::size_t>(slot);
    };
    auto act_at = [&](int slot) { return at(acts, slot); };
    auto grad_at = [&](int slot) { return at(grads, slot); };
    // events and streams, once
    for (int e = 0; e < res.events; ++e) events_.push_back(d_.make_event());
    streams_[0] = d_.make_stream();
    streams_[1] = d_.make_stream();
    if constexpr (captures_graphs<D>) {  // the capture's origin stream and its fork/join events
      origin_ = d_.make_stream();
      fork_ = d_.make_event();
      join_[0] = d_.make_event();
      join_[1] = d_.make_event();
    }
    // the issue list
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const lowered_op& o = ops[i];
      if (o.code == op_code::send || o.code == op_code::recv) {
        const host::stage_entry& e = entry(o.stage);
        transfers_.push_back({o.code == op_code::send, o.what == kind::F ? act_at(o.slot) : grad_at(o.slot),
                              o.what == kind::F ? e.out_bytes() : e.in_bytes(), o.peer, o.comm});
        ops_.back().last = static_cast<int>(transfers_.size());
        continue;
      }
      issue_op x;
      x.code = o.code;
      x.stream = static_cast<int>(o.stream);
      x.wait = o.wait_event;
      x.record = o.record_event;
      if (o.code == op_code::group) {
        x.first = x.last = static_cast<int>(transfers_.size());
      } else {
        const host::stage_entry& e = entry(o.stage);
        host::detail::check_split(e, action{o.what, o.stage, o.microbatch, false}, "pipetype::cuda");
        const int st = layout.op_stash[i];
        host::detail::bind_compute(x.call, o, e, L, act_at, grad_at,
                                   st >= 0 ? stashes + layout.stash_stride * static_cast<std::size_t>(st) : nullptr);
        x.call.stream = d_.native(streams_[0]);
      }
      ops_.push_back(x);
    }
  }

  std::byte* alloc(std::size_t n) { return n ? static_cast<std::byte*>(d_.allocate(n)) : nullptr; }

  D& d_;
  int rank_;
  std::vector<host::stage_entry> entries_;
  std::vector<typename D::comm> comms_;
  std::vector<issue_op> ops_;
  std::vector<transfer> transfers_;
  std::vector<typename D::event> events_;
  typename D::stream streams_[2]{};
  std::size_t batch_bytes_ = 0;
  // whole-step graphs (drivers with captures_graphs)
  struct no_graph {
    using graph_exec = int;
  };
  using exec_t = typename std::conditional_t<captures_graphs<D>, D, no_graph>::graph_exec;
  typename D::stream origin_{};
  typename D::event fork_{}, join_[2]{};
  exec_t exec_{};
  bool captured_ = false;
  int instantiations_ = 0, updates_ = 0;
};

}  // namespace pipetype::cuda
