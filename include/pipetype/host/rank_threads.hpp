// pipetype/host/rank_threads.hpp — threads kept for an executor's life, parked between steps.
//
// Starting a thread costs tens of microseconds; a step of a pipeline with no-op stages costs
// less than that per rank. So the host executor (one thread per stream per rank) and the
// loopback pipeline (one thread per rank) keep theirs: `rank_threads{n, init}` starts n threads,
// each runs `init(i)` once (the loopback pipeline binds its device there) and parks;
// `run(job)` has every thread call `job(i)` once and returns when all have, with what the
// threads did visible to the caller (and what the caller wrote before run visible to them).
// Parking and waking use C++20 atomic wait/notify (a futex on Linux), not a mutex: the caller
// publishes a new generation and wakes all; the last thread to finish wakes the caller. Both
// sides yield a little before they park, so back-to-back steps rarely sleep at all.
//
// `job` must not throw (the executors catch inside it and record a failure); it is called
// through a plain function pointer, so run() allocates nothing. Not reentrant: one run at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

namespace pipetype::detail {

class rank_threads {
 public:
  rank_threads() = default;
  /// Starts `n` threads; each calls `init(i)` once before it first parks.
  explicit rank_threads(int n, std::function<void(int)> init = {}) : init_(std::move(init)) {
    threads_.reserve(static_cast<std::size_t>(n > 0 ? n : 0));
    for (int i = 0; i < n; ++i) threads_.emplace_back([this, i] { serve(i); });
  }
  rank_threads(const rank_threads&) = delete;
  rank_threads& operator=(const rank_threads&) = delete;
  ~rank_threads() {
    quit_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  int size() const noexcept { return static_cast<int>(threads_.size()); }

  /// Every thread calls job(i) once; returns when all have.
  template <class Job>
  void run(Job& job) {
    if (threads_.empty()) return;
    job_ = &job;
    call_ = [](void* j, int i) { (*static_cast<Job*>(j))(i); };
    remaining_.store(size(), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    // a short yielding spin first: a step of small stages ends within microseconds, and a
    // parked caller takes several to wake
    for (int k = 0; k < spin && remaining_.load(std::memory_order_acquire) != 0; ++k) std::this_thread::yield();
    for (int left = remaining_.load(std::memory_order_acquire); left != 0;
         left = remaining_.load(std::memory_order_acquire))
      remaining_.wait(left, std::memory_order_acquire);
  }

 private:
  void serve(int i) {
    if (init_) init_(i);
    std::uint64_t seen = 0;
    for (;;) {
      std::uint64_t g = generation_.load(std::memory_order_acquire);
      for (int k = 0; k < spin && g == seen; ++k) {  // the next step often follows at once
        std::this_thread::yield();
        g = generation_.load(std::memory_order_acquire);
      }
      while (g == seen) {
        generation_.wait(g, std::memory_order_acquire);
        g = generation_.load(std::memory_order_acquire);
      }
      seen = g;
      if (quit_.load(std::memory_order_relaxed)) return;
      call_(job_, i);
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_one();
    }
  }

  static constexpr int spin = 128;  // yields before parking (a few microseconds)

  std::function<void(int)> init_;
  void* job_ = nullptr;
  void (*call_)(void*, int) = nullptr;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> remaining_{0};
  std::atomic<bool> quit_{false};
  std::vector<std::thread> threads_;  // last: started after every member above exists
};

}  // namespace pipetype::detail
