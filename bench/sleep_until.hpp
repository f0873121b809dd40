// bench/sleep_until.hpp — a stage's pretend work for the host benchmarks: a sleep to an absolute
// deadline with the thread's timer slack lowered (Linux), so that each action lasts its cost plus
// the kernel's wake-up latency (tens of microseconds), not its cost plus the default 50 µs slack.
#pragma once

#include <chrono>
#include <thread>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

namespace bench {

inline void hold(std::chrono::microseconds d) {
#if defined(__linux__)
  thread_local const bool slack = [] { return prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0) == 0; }();
  (void)slack;
#endif
  std::this_thread::sleep_until(std::chrono::steady_clock::now() + d);
}

}  // namespace bench
