// host/rank_threads.hpp: threads kept for an owner's life, parked between runs.
#include <pipetype/host/rank_threads.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_rank_threads {

namespace pd = pipetype::detail;

TEST_CASE("rank_threads: every thread runs each job once, on its own thread, and run waits for all") {
  std::mutex m;
  std::set<std::thread::id> init_ids;
  pd::rank_threads pool(4, [&](int) {
    const std::lock_guard lock(m);
    init_ids.insert(std::this_thread::get_id());
  });
  CHECK(pool.size() == 4);
  std::vector<int> calls(4, 0);
  std::vector<std::thread::id> ids(4);
  for (int round = 0; round < 200; ++round) {
    auto job = [&](int i) {
      ++calls[static_cast<std::size_t>(i)];  // each index is one thread's: no lock needed
      ids[static_cast<std::size_t>(i)] = std::this_thread::get_id();
    };
    pool.run(job);
    // run returned: every thread's writes are visible here
    for (int c : calls) REQUIRE(c == round + 1);
  }
  const std::set<std::thread::id> distinct(ids.begin(), ids.end());
  CHECK(distinct.size() == 4);
  CHECK(distinct.count(std::this_thread::get_id()) == 0);  // not the caller's thread
  const std::lock_guard lock(m);
  CHECK(init_ids == distinct);  // init ran once on each of the same threads
}

TEST_CASE("rank_threads: no threads, or a slow one, still end every run") {
  pd::rank_threads none(0);
  int ran = 0;
  auto job = [&](int) { ++ran; };
  none.run(job);
  CHECK(ran == 0);
  pd::rank_threads two(2);
  std::atomic<int> done{0};
  auto slow = [&](int i) {
    if (i == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    done.fetch_add(1);
  };
  two.run(slow);
  CHECK(done.load() == 2);  // run waited for the slow thread too
}

}  // namespace test_rank_threads
}  // namespace
