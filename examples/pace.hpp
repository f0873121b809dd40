// examples/pace.hpp — a stage's pretend pace, for the examples and the host benchmarks: a call
// that lasts at least a given time (a layer's pretend cost), or a given multiple of its own
// (a rank slowed down: a throttled device, a noisy neighbour).
//
// Sleeps go to an absolute deadline with the thread's timer slack lowered (Linux), so that a call
// lasts its pace plus the kernel's wake-up latency (tens of microseconds), not plus the default
// 50 µs slack as well.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

namespace examples {

/// Sleeps until `deadline` (returns at once if it has passed).
inline void sleep_to(std::chrono::steady_clock::time_point deadline) {
#if defined(__linux__)
  thread_local const bool slack = [] { return prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0) == 0; }();
  (void)slack;
#endif
  std::this_thread::sleep_until(deadline);
}

/// Sleeps for `d` from now.
inline void hold(std::chrono::nanoseconds d) { sleep_to(std::chrono::steady_clock::now() + d); }

/// A guard over one call: when it goes, the call has lasted `factor` × max(its own time, `floor`)
/// (factor 1 and floor 0: the call's own time, no sleep).
struct paced {
  double factor = 1;
  std::chrono::nanoseconds floor{0};
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  paced(double f, std::chrono::nanoseconds fl = {}) : factor(f), floor(fl) {}
  paced(const paced&) = delete;
  paced& operator=(const paced&) = delete;
  ~paced() {
    if (factor == 1 && floor.count() <= 0) return;
    const auto spent = std::max<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0, floor);
    sleep_to(t0 + std::chrono::duration_cast<std::chrono::nanoseconds>(spent * factor));
  }
};

}  // namespace examples
