// pipetype/host/rendezvous.hpp — NCCL's point-to-point rules between threads of one process.
//
// The one meeting point of every in-process transport: the host executor's fabric (channel.hpp:
// the receiver copies the bytes) and the loopback transport of the device executor
// (cuda/loopback.hpp: the receiver issues a copy on its stream between two events). Both keep
// the semantics the verifier proved the lowered program against (NCCL user guide,
// "Point-to-point communication" and "Group calls"):
//   • a send and its receive are a blocking rendezvous: neither completes before both are posted;
//   • the k-th send from a to b on a communicator is taken by the k-th receive at b from a on it
//     (FIFO per communicator and peer);
//   • a group's operations are posted together and complete together: `exchange` posts all of
//     the group's sends and receives, pairing each with the other end's if it is there, then
//     waits for its receives in order (each only for its sender to have reached the matching
//     group, which posted before it waited) and for its sends to be taken. So a group blocks
//     only on peers reaching their groups, and the rendezvous is deadlock-free exactly when the
//     lowered program is;
//   • both ends must carry the same number of bytes; a mismatch fails both.
// Every wait has a deadline, and abort(reason) wakes every waiter; exchange then returns what
// went wrong and where instead of throwing, so each transport words its own errors. A short
// yielding spin precedes each sleep (the peer is often microseconds away).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace pipetype::detail {

/// `d`, or std::invalid_argument naming `option` ("pipetype::host: executor_options::deadline")
/// when it is not positive: every wait would end at once, so every step would fail.
inline std::chrono::milliseconds positive_deadline(std::chrono::milliseconds d, const char* option) {
  if (d.count() <= 0)
    throw std::invalid_argument(std::string(option) + " must be positive, got " + std::to_string(d.count()) + " ms");
  return d;
}

/// `Extra` is what a transport's send leaves for its receiver besides the bytes (the loopback
/// transport: its ready event; the receiver writes its done event back). `SenderCopies`: a send
/// that finds its receive posted copies the bytes itself and goes on (host memory: the fabric);
/// otherwise only the receiver's thread completes a transfer, through its `take` callback (the
/// loopback transport issues device calls there, on its own driver).
template <class Extra, bool SenderCopies = false>
class rendezvous {
 public:
  /// One send, from its post to the receiver's take. Owned by the sender, stable until taken.
  struct post : Extra {
    const void* src = nullptr;
    std::size_t bytes = 0;
    std::size_t receiver_bytes = 0;  // set on a mismatch
    bool taken = false;
    bool mismatch = false;
  };
  struct send_op {
    int comm = -1, peer = -1;
    post* p = nullptr;
  };
  /// One receive; owned by the receiver for the exchange.
  struct recv_op {
    int comm = -1, peer = -1;
    std::size_t bytes = 0;
    void* dst = nullptr;    // where a copying sender writes (SenderCopies)
    post* match = nullptr;  // the send paired with it, not yet taken
    bool done = false;      // the bytes are there
    bool mismatch = false;
    std::size_t sender_bytes = 0;
  };
  enum class outcome { done, timeout, aborted, mismatch };
  /// What an exchange ended with; for anything but `done`, the op at fault.
  struct result {
    outcome what = outcome::done;
    bool send = false;
    int index = -1;                              // in the group's sends or receives
    std::size_t send_bytes = 0, recv_bytes = 0;  // a mismatch's two sizes
    std::string reason;                          // an abort's
    constexpr bool ok() const noexcept { return what == outcome::done; }
  };

  rendezvous(int ranks, int communicators, std::chrono::milliseconds deadline)
      : ranks_(ranks),
        comms_(communicators),
        deadline_(deadline) {
    if (ranks < 1 || communicators < 0) throw std::invalid_argument("pipetype: rendezvous: bad sizes");
  }
  rendezvous(const rendezvous&) = delete;
  rendezvous& operator=(const rendezvous&) = delete;

  /// Wakes every waiter; later exchanges end `aborted` with the first reason.
  void abort(const std::string& reason) {
    {
      const std::lock_guard lock(m_);
      if (aborted_.empty()) aborted_ = reason.empty() ? std::string("aborted") : reason;
      aborted_flag_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }
  /// Forgets an abort and every posted operation (between steps, after every thread stopped).
  void reset() {
    const std::lock_guard lock(m_);
    aborted_.clear();
    aborted_flag_.store(false, std::memory_order_release);
    for (auto& [key, c] : channels_) {  // (kept: the same pairs talk again next step)
      c.sends.clear();
      c.recvs.clear();
    }
  }
  bool aborted() const {
    const std::lock_guard lock(m_);
    return !aborted_.empty();
  }
  int ranks() const noexcept { return ranks_; }
  int communicators() const noexcept { return comms_; }
  std::chrono::milliseconds deadline() const noexcept { return deadline_; }

  /// One group of rank `me`: posts every send and receive, then waits for each receive in order
  /// and for each send. `take(i, post&)` is called for receive i when its send is paired and not
  /// copied yet, without the lock (the sender waits until taken, so the post is stable);
  /// `sent(i, post&)` for send i once it was taken, without the lock. Ranks and communicators
  /// are checked.
  template <class Take, class Sent>
  result exchange(int me, std::span<send_op> sends, std::span<recv_op> recvs, Take&& take, Sent&& sent) {
    for (const send_op& s : sends) check(s.comm, me, s.peer);
    for (const recv_op& r : recvs) check(r.comm, r.peer, me);
    const auto until = std::chrono::steady_clock::now() + deadline_;
    std::unique_lock lock(m_);
    if (!aborted_.empty()) return stopped(-1, true);
    for (send_op& s : sends) {
      store(s.p->taken, false);
      s.p->mismatch = false;
      channel& c = chan(s.comm, me, s.peer);
      c.sends.push_back(s.p);
      match(c);
    }
    for (recv_op& r : recvs) {
      store(r.match, static_cast<post*>(nullptr));
      store(r.done, false);
      r.mismatch = false;
      channel& c = chan(r.comm, r.peer, me);
      c.recvs.push_back(&r);
      match(c);
    }
    changed();
    for (std::size_t i = 0; i < recvs.size(); ++i) {
      recv_op& r = recvs[i];
      if (!wait(lock, until, [&] { return is_aborted() || load(r.done) || load(r.match) != nullptr; }))
        return give_up(me, sends, recvs, failed(outcome::timeout, false, i));
      if (r.mismatch) return give_up(me, sends, recvs, failed(outcome::mismatch, false, i, r.sender_bytes, r.bytes));
      if (r.done) continue;
      if (r.match == nullptr) return give_up(me, sends, recvs, stopped(static_cast<int>(i), false));
      post* p = r.match;
      lock.unlock();
      take(i, *p);
      lock.lock();
      store(r.match, static_cast<post*>(nullptr));
      store(r.done, true);
      store(p->taken, true);
      changed();
    }
    for (std::size_t i = 0; i < sends.size(); ++i) {
      post* p = sends[i].p;
      if (!wait(lock, until, [&] { return is_aborted() || load(p->taken); }))
        return give_up(me, sends, recvs, failed(outcome::timeout, true, i));
      if (p->mismatch)
        return give_up(me, sends, recvs, failed(outcome::mismatch, true, i, p->bytes, p->receiver_bytes));
      if (!p->taken) return give_up(me, sends, recvs, stopped(static_cast<int>(i), true));
      lock.unlock();
      sent(i, *p);
      lock.lock();
    }
    return {};
  }

 private:
  struct channel {
    std::deque<post*> sends;     // posted, not yet paired, oldest first
    std::deque<recv_op*> recvs;  // likewise
  };
  static constexpr int spin = 64;  // yields before sleeping on the condition variable

  void check(int comm, int src, int dst) const {
    if (comm < 0 || comm >= comms_ || src < 0 || src >= ranks_ || dst < 0 || dst >= ranks_)
      throw std::out_of_range("pipetype: rendezvous: communicator " + std::to_string(comm) + " or rank " +
                              std::to_string(src) + " → " + std::to_string(dst) + " out of range");
  }
  // With the lock held: the channel of (comm, src, dst), made on its first use. Only the pairs
  // that talk have one: a table of every (comm, src, dst) was comms × ranks² channels, cubic in a
  // mesh's ranks (4.3 GB at 64 × 2 ranks for 252 channels in use).
  channel& chan(int comm, int src, int dst) {
    const std::uint64_t key =
        (static_cast<std::uint64_t>(comm) * static_cast<std::uint64_t>(ranks_) + static_cast<std::uint64_t>(src)) *
            static_cast<std::uint64_t>(ranks_) +
        static_cast<std::uint64_t>(dst);
    return channels_[key];
  }
  // With the lock held: pair the heads of a channel while both sides have posted (FIFO).
  static void match(channel& c) {
    while (!c.sends.empty() && !c.recvs.empty()) {
      post* s = c.sends.front();
      recv_op* r = c.recvs.front();
      c.sends.pop_front();
      c.recvs.pop_front();
      if (s->bytes != r->bytes) {
        s->mismatch = r->mismatch = true;
        s->receiver_bytes = r->bytes;
        r->sender_bytes = s->bytes;
        store(s->taken, true);
        store(r->done, true);
      } else if constexpr (SenderCopies) {
        if (s->bytes > 0) std::memcpy(r->dst, s->src, s->bytes);
        store(s->taken, true);
        store(r->done, true);
      } else {
        store(r->match, s);  // the receiver's thread takes it
      }
    }
  }
  // A yielding spin that reads the flags it waits for without the lock (they are written with
  // atomic stores under it), then a sleep on the condition variable until `ready` or the deadline.
  template <class Ready>
  bool wait(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point until, Ready ready) {
    if (ready()) return true;
    lock.unlock();
    for (int k = 0; k < spin && !ready(); ++k) std::this_thread::yield();
    lock.lock();
    return cv_.wait_until(lock, until, ready);
  }
  // With the lock held: something a waiter may be waiting for changed.
  void changed() { cv_.notify_all(); }
  template <class T>
  static void store(T& field, T value) {
    std::atomic_ref<T>(field).store(value, std::memory_order_release);
  }
  template <class T>
  static T load(T& field) {
    return std::atomic_ref<T>(field).load(std::memory_order_acquire);
  }
  bool is_aborted() const { return aborted_flag_.load(std::memory_order_acquire); }

  // With the lock held: take back this group's operations nobody paired, so nobody touches them
  // later, and hand back `r`.
  result give_up(int me, std::span<send_op> sends, std::span<recv_op> recvs, result r) {
    for (const send_op& s : sends) {
      if (s.p->taken) continue;
      std::deque<post*>& q = chan(s.comm, me, s.peer).sends;
      for (auto it = q.begin(); it != q.end(); ++it)
        if (*it == s.p) {
          q.erase(it);
          break;
        }
    }
    for (recv_op& x : recvs) {
      if (x.done) continue;
      if (x.match != nullptr) {  // paired but never taken (its sender ends by the abort that follows)
        store(x.match, static_cast<post*>(nullptr));
        continue;
      }
      std::deque<recv_op*>& q = chan(x.comm, x.peer, me).recvs;
      for (auto it = q.begin(); it != q.end(); ++it)
        if (*it == &x) {
          q.erase(it);
          break;
        }
    }
    return r;
  }
  static result failed(outcome what, bool send, std::size_t index, std::size_t send_bytes = 0,
                       std::size_t recv_bytes = 0) {
    result r;
    r.what = what;
    r.send = send;
    r.index = static_cast<int>(index);
    r.send_bytes = send_bytes;
    r.recv_bytes = recv_bytes;
    return r;
  }
  result stopped(int index, bool send) const {
    result r;
    r.what = outcome::aborted;
    r.send = send;
    r.index = index;
    r.reason = aborted_;
    return r;
  }

  int ranks_;
  int comms_;
  std::chrono::milliseconds deadline_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::atomic<bool> aborted_flag_{false};  // !aborted_.empty(), readable without the lock
  std::unordered_map<std::uint64_t, channel> channels_;  // (comm, from, to) of the pairs that talked
  std::string aborted_;
};

}  // namespace pipetype::detail
