// pipetype/exec/channel.hpp — point-to-point transfers between rank threads, with NCCL's rules.
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
// One mutex and one condition variable serve the whole fabric: a pipeline moves a few transfers
// per tick, so contention is not what limits it, and one lock makes the rules easy to keep.
//
//   pipetype::host::fabric f{/*ranks*/ 2, /*communicators*/ 1, std::chrono::seconds(5)};
//   // on rank 0's thread:                     // on rank 1's thread:
//   auto e = f.at(0);                          auto e = f.at(1);
//   e.group_begin();                           e.group_begin();
//   e.send(0, 1, out_bytes, "0F3");            e.recv(0, 0, in_bytes, "0F3");
//   e.group_end();                             e.group_end();
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

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
 public:
  fabric(int ranks, int communicators, std::chrono::milliseconds deadline)
      : ranks_(ranks),
        comms_(communicators),
        deadline_(deadline),
        channels_(static_cast<std::size_t>(communicators > 0 ? communicators : 0) *
                  static_cast<std::size_t>(ranks > 0 ? ranks : 0) * static_cast<std::size_t>(ranks > 0 ? ranks : 0)) {
    if (ranks < 1 || communicators < 0) throw std::invalid_argument("pipetype::host::fabric: bad sizes");
  }
  fabric(const fabric&) = delete;
  fabric& operator=(const fabric&) = delete;

  class endpoint;
  /// Rank `rank`'s endpoint.
  endpoint at(int rank);

  /// Wakes every waiter with aborted_error(reason); later operations fail the same way.
  void abort(const std::string& reason) {
    {
      std::lock_guard lock(mutex_);
      if (aborted_.empty()) aborted_ = reason.empty() ? std::string("aborted") : reason;
    }
    changed_.notify_all();
  }
  /// Forgets an abort and every posted transfer (between steps, after a failed one).
  void reset() {
    std::lock_guard lock(mutex_);
    aborted_.clear();
    for (channel& ch : channels_) {
      ch.sends.clear();
      ch.recvs.clear();
    }
  }
  bool aborted() const {
    std::lock_guard lock(mutex_);
    return !aborted_.empty();
  }
  int ranks() const noexcept { return ranks_; }

 private:
  struct posted {
    std::byte* recv_to = nullptr;          // recv: destination
    const std::byte* send_from = nullptr;  // send: source
    std::size_t bytes = 0;
    std::atomic<bool> done{false};  // set under the lock; read by its owner without it (spin)
    std::string error;              // set on a size mismatch, for both ends (before done)
  };
  struct channel {
    std::deque<posted*> sends;  // posted, not yet matched, in issue order
    std::deque<posted*> recvs;
  };

  channel& chan(int comm, int src, int dst) {
    if (comm < 0 || comm >= comms_ || src < 0 || src >= ranks_ || dst < 0 || dst >= ranks_)
      throw std::out_of_range("pipetype::host::fabric: communicator or rank out of range");
    return channels_[(static_cast<std::size_t>(comm) * static_cast<std::size_t>(ranks_) +
                      static_cast<std::size_t>(src)) *
                         static_cast<std::size_t>(ranks_) +
                     static_cast<std::size_t>(dst)];
  }
  // With the lock held: match the heads of a channel while both sides have posted ops.
  static bool match(channel& c) {
    bool any = false;
    while (!c.sends.empty() && !c.recvs.empty()) {
      posted* s = c.sends.front();
      posted* r = c.recvs.front();
      c.sends.pop_front();
      c.recvs.pop_front();
      if (s->bytes != r->bytes) {
        s->error = r->error =
            "send of " + std::to_string(s->bytes) + " bytes matched a recv of " + std::to_string(r->bytes) + " bytes";
      } else if (s->bytes > 0) {
        std::memcpy(r->recv_to, s->send_from, s->bytes);
      }
      s->done.store(true, std::memory_order_release);
      r->done.store(true, std::memory_order_release);
      any = true;
    }
    return any;
  }

  int ranks_;
  int comms_;
  std::chrono::milliseconds deadline_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<channel> channels_;
  std::string aborted_;

  friend class endpoint;
};

/// One rank's view of the fabric. Not shared between threads: a rank's communication stream is
/// one thread, as NCCL wants one thread to issue a group.
class fabric::endpoint {
 public:
  endpoint(fabric& f, int rank) : f_(&f), rank_(rank) {
    if (rank < 0 || rank >= f.ranks_) throw std::out_of_range("pipetype::host::fabric: rank out of range");
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
    if (pending_.size() > slot_capacity_) {
      slot_capacity_ = pending_.size();
      slots_ = std::make_unique<posted[]>(slot_capacity_);
    }
    posted* const slots = slots_.get();
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      slots[i].recv_to = nullptr;
      slots[i].send_from = nullptr;
      slots[i].bytes = 0;
      slots[i].done.store(false, std::memory_order_relaxed);
      slots[i].error.clear();
    }
    fabric& f = *f_;
    const auto until = std::chrono::steady_clock::now() + f.deadline_;
    std::unique_lock lock(f.mutex_);
    if (!f.aborted_.empty()) {
      pending_.clear();
      throw aborted_error(f.aborted_);
    }
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      const op& o = pending_[i];
      posted& p = slots[i];
      p.bytes = o.bytes;
      p.recv_to = o.to;
      p.send_from = o.from;
      channel& c = o.sending ? f.chan(o.comm, rank_, o.peer) : f.chan(o.comm, o.peer, rank_);
      (o.sending ? c.sends : c.recvs).push_back(&p);
      if (match(c)) f.changed_.notify_all();
    }
    auto all_done = [&] {
      for (std::size_t i = 0; i < pending_.size(); ++i)
        if (!slots[i].done.load(std::memory_order_acquire)) return false;
      return true;
    };
    if (!all_done()) {  // a short yielding spin first: the peer is often about to post
      lock.unlock();
      for (int k = 0; k < spin && !all_done(); ++k) std::this_thread::yield();
      lock.lock();
    }
    while (!all_done()) {
      if (!f.aborted_.empty() || f.changed_.wait_until(lock, until) == std::cv_status::timeout) {
        if (all_done()) break;
        // withdraw what is still posted, so no peer ever touches these stack slots again
        for (std::size_t i = 0; i < pending_.size(); ++i) {
          if (slots[i].done.load(std::memory_order_relaxed)) continue;
          const op& o = pending_[i];
          channel& c = o.sending ? f.chan(o.comm, rank_, o.peer) : f.chan(o.comm, o.peer, rank_);
          auto& q = o.sending ? c.sends : c.recvs;
          for (auto it = q.begin(); it != q.end(); ++it)
            if (*it == &slots[i]) {
              q.erase(it);
              break;
            }
        }
        std::string stuck;
        for (std::size_t i = 0; i < pending_.size(); ++i)
          if (!slots[i].done.load(std::memory_order_relaxed)) {
            const op& o = pending_[i];
            stuck = std::string(o.sending ? "send" : "recv") + (o.what.empty() ? "" : " " + std::string(o.what)) +
                    (o.sending ? " to rank " : " from rank ") + std::to_string(o.peer) + " on communicator " +
                    std::to_string(o.comm);
            break;
          }
        const std::string reason = f.aborted_;
        pending_.clear();
        if (!reason.empty()) throw aborted_error(reason);
        throw timeout_error("pipetype::host: rank " + std::to_string(rank_) + ": " + stuck +
                            " did not complete within " + std::to_string(f.deadline_.count()) +
                            " ms (a peer is stuck or the program deadlocks)");
      }
    }
    for (std::size_t i = 0; i < pending_.size(); ++i)
      if (!slots[i].error.empty()) {
        const op& o = pending_[i];
        const std::string msg = "pipetype::host: rank " + std::to_string(rank_) + ": " + (o.sending ? "send" : "recv") +
                                (o.what.empty() ? "" : " " + std::string(o.what)) + ": " + slots[i].error;
        pending_.clear();
        throw transfer_error(msg);
      }
    pending_.clear();
  }

  fabric* f_;
  int rank_;
  bool in_group_ = false;
  std::vector<op> pending_;
  static constexpr int spin = 64;    // yields before sleeping on the fabric's condition variable
  std::unique_ptr<posted[]> slots_;  // one per pending op while a group completes; reused
  std::size_t slot_capacity_ = 0;
};

inline fabric::endpoint fabric::at(int rank) { return fabric::endpoint(*this, rank); }

}  // namespace pipetype::host
