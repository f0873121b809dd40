// pipetype/host/channel.hpp — point-to-point transfers between rank threads, with NCCL's rules.
//
// The host executor runs each rank on threads and moves activations and gradients through a
// `fabric`: the in-process stand-in for NCCL that the lowered program's send/recv/group ops are
// issued against. It keeps the semantics the verifier proved the program against
// (NCCL user guide, "Point-to-point communication" and "Group calls"), so a program that would hang on NCCL hangs here
// too — and then ends with an error instead, because every wait has a deadline:
//   • a send and a recv are a blocking rendezvous: neither completes before the other is posted;
//   • the k-th send from a to b on a communicator matches the k-th recv at b from a on it
//     (FIFO per communicator and peer); both must have the same size;
//   • ops between group_begin and group_end are posted together and complete together:
//     group_end returns when all of them have;
//   • abort(reason) wakes every waiting thread with an error (a stage that threw ends the step
//     on all ranks, and no thread is left blocked).
// The rules themselves live in one place, host/rendezvous.hpp, which the device executor's
// loopback transport shares; here whichever end of a transfer comes second copies the bytes,
// and the fabric words the errors. One mutex and one condition variable serve the whole fabric: a pipeline
// moves a few transfers per tick, so contention is not what limits it.
//
//   pipetype::host::fabric f{/*ranks*/ 2, /*communicators*/ 1, std::chrono::seconds(5)};
//   // on rank 0's thread:                     // on rank 1's thread:
//   auto e = f.at(0);                          auto e = f.at(1);
//   e.group_begin();                           e.group_begin();
//   e.send(0, 1, out_bytes, "0F3");            e.recv(0, 0, in_bytes, "0F3");
//   e.group_end();                             e.group_end();
#pragma once

#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "pipetype/host/rendezvous.hpp"

namespace pipetype::host {

/// A transfer did not complete before the fabric's deadline: the program (or a peer) is stuck.
struct timeout_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The fabric was aborted (another rank failed); `what()` carries the first reason.
struct aborted_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A transfer's two ends disagree (sizes), as NCCL requires the same count on both.
struct transfer_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class fabric {
  struct no_extra {};
  using core = pipetype::detail::rendezvous<no_extra, /*SenderCopies*/ true>;

 public:
  fabric(int ranks, int communicators, std::chrono::milliseconds deadline) : core_(ranks, communicators, deadline) {}
  fabric(const fabric&) = delete;
  fabric& operator=(const fabric&) = delete;

  class endpoint;
  /// Rank `rank`'s endpoint.
  endpoint at(int rank);

  /// Wakes every waiter with aborted_error(reason); later operations fail the same way.
  void abort(const std::string& reason) { core_.abort(reason); }
  /// Forgets an abort and every posted transfer (between steps, after a failed one).
  void reset() { core_.reset(); }
  bool aborted() const { return core_.aborted(); }
  int ranks() const noexcept { return core_.ranks(); }

 private:
  core core_;
  friend class endpoint;
};

/// One rank's view of the fabric. Not shared between threads: a rank's communication stream is
/// one thread, as NCCL wants one thread to issue a group.
class fabric::endpoint {
 public:
  endpoint(fabric& f, int rank) : f_(&f), rank_(rank) {
    if (rank < 0 || rank >= f.ranks()) throw std::out_of_range("pipetype::host::fabric: rank out of range");
  }

  /// Starts a group: the sends and recvs until group_end are posted together.
  void group_begin() {
    if (in_group_) throw std::logic_error("pipetype::host::fabric: nested group");
    in_group_ = true;
  }
  /// Posts the group's ops and waits until all of them completed.
  void group_end() {
    if (!in_group_) throw std::logic_error("pipetype::host::fabric: group_end without group_begin");
    in_group_ = false;
    complete();
  }
  /// Sends `data` to `peer` on communicator `comm`; blocks (outside a group) until received.
  /// `what` names the transfer in errors (e.g. "act 0F3"); it must outlive the call.
  void send(int comm, int peer, std::span<const std::byte> data, std::string_view what = {}) {
    pending_.push_back({comm, peer, true, nullptr, data.data(), data.size(), what});
    if (!in_group_) complete();
  }
  /// Receives into `data` from `peer` on communicator `comm`; blocks (outside a group) until done.
  void recv(int comm, int peer, std::span<std::byte> data, std::string_view what = {}) {
    pending_.push_back({comm, peer, false, data.data(), nullptr, data.size(), what});
    if (!in_group_) complete();
  }
  int rank() const noexcept { return rank_; }

 private:
  struct op {
    int comm, peer;
    bool sending;
    std::byte* to;
    const std::byte* from;
    std::size_t bytes;
    std::string_view what;  // the caller's label, kept alive by the caller
  };

  void complete() {
    sends_.clear();
    recvs_.clear();
    send_of_.clear();
    recv_of_.clear();
    std::size_t nsend = 0;
    for (const op& o : pending_) nsend += o.sending ? 1 : 0;
    if (nsend > post_capacity_) {  // posts stay where they are while a receiver may read them
      post_capacity_ = nsend;
      posts_ = std::make_unique<core::post[]>(post_capacity_);
    }
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      const op& o = pending_[i];
      if (o.sending) {
        core::post& p = posts_[sends_.size()];
        p.src = o.from;
        p.bytes = o.bytes;
        sends_.push_back({o.comm, o.peer, &p});
        send_of_.push_back(i);
      } else {
        recvs_.push_back({o.comm, o.peer, o.bytes, o.to});
        recv_of_.push_back(i);
      }
    }
    // whichever end comes second copies the bytes (the core does it: host memory)
    const core::result r = f_->core_.exchange(
        rank_, sends_, recvs_, [](std::size_t, const core::post&) {}, [](std::size_t, const core::post&) {});
    if (r.ok()) {
      pending_.clear();
      return;
    }
    const op o = r.index >= 0 ? pending_[(r.send ? send_of_ : recv_of_)[static_cast<std::size_t>(r.index)]] : op{};
    pending_.clear();
    std::string label(o.sending ? "send" : "recv");
    if (!o.what.empty()) label.append(" ").append(o.what);
    switch (r.what) {
      case core::outcome::aborted:
        throw aborted_error(r.reason);
      case core::outcome::timeout:
        throw timeout_error(
            "pipetype::host: rank " + std::to_string(rank_) + ": " + label + (o.sending ? " to rank " : " from rank ") +
            std::to_string(o.peer) + " on communicator " + std::to_string(o.comm) + " did not complete within " +
            std::to_string(f_->core_.deadline().count()) + " ms (a peer is stuck or the program deadlocks)");
      case core::outcome::mismatch:
        throw transfer_error("pipetype::host: rank " + std::to_string(rank_) + ": " + label + ": send of " +
                             std::to_string(r.send_bytes) + " bytes matched a recv of " + std::to_string(r.recv_bytes) +
                             " bytes");
      case core::outcome::done:
        break;
    }
  }

  fabric* f_;
  int rank_;
  bool in_group_ = false;
  std::vector<op> pending_;
  // one group's posting, reused
  std::vector<core::send_op> sends_;
  std::vector<core::recv_op> recvs_;
  std::vector<std::size_t> send_of_, recv_of_;  // the pending op of each send / recv
  std::unique_ptr<core::post[]> posts_;
  std::size_t post_capacity_ = 0;
};

inline fabric::endpoint fabric::at(int rank) { return fabric::endpoint(*this, rank); }

}  // namespace pipetype::host
