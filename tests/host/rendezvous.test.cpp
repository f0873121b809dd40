// host/rendezvous.hpp on its own: the core both in-process transports (the host fabric, the
// loopback transport) are built on.
#include <pipetype/host/rendezvous.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_rendezvous {

namespace pd = pipetype::detail;
using namespace std::chrono_literals;

namespace {
struct tag {
  int note = 0;  // what a receiver writes back to its sender (the loopback transport: its done event)
};
using core = pd::rendezvous<tag>;
}  // namespace

TEST_CASE("rendezvous: a group posts its sends, takes its receives in order, and hears back from its receivers") {
  core c{2, 1, 5s};
  std::vector<int> got;   // rank 1: which sends it took, in order
  std::vector<int> back;  // rank 0: the receivers' notes
  std::thread receiver([&] {
    std::vector<core::send_op> none;
    std::vector<core::recv_op> recvs{{0, 0, 4}, {0, 0, 8}};
    const core::result r = c.exchange(
        1, none, recvs,
        [&](std::size_t k, core::post& p) {
          got.push_back(static_cast<int>(p.bytes));
          p.note = 10 + static_cast<int>(k);
        },
        [](std::size_t, const core::post&) {});
    CHECK(r.ok());
  });
  core::post a, b;
  a.bytes = 4, b.bytes = 8;
  std::vector<core::send_op> sends{{0, 1, &a}, {0, 1, &b}};
  const core::result r = c.exchange(
      0, sends, {}, [](std::size_t, core::post&) {}, [&](std::size_t, const core::post& p) { back.push_back(p.note); });
  receiver.join();
  CHECK(r.ok());
  CHECK(got == std::vector<int>{4, 8});     // FIFO on the channel
  CHECK(back == std::vector<int>{10, 11});  // each send learns what its receiver wrote
}

TEST_CASE("rendezvous: a send nobody takes is withdrawn at the deadline, so no later receiver sees it") {
  core c{2, 1, 50ms};
  core::post stale;
  stale.bytes = 4;
  std::vector<core::send_op> sends{{0, 1, &stale}};
  const core::result r = c.exchange(
      0, sends, {}, [](std::size_t, core::post&) {}, [](std::size_t, const core::post&) {});
  CHECK(r.what == core::outcome::timeout);
  CHECK(r.send);
  CHECK(r.index == 0);
  // rank 1 now waits for a send on the channel: the withdrawn one must not be there
  std::vector<core::send_op> none;
  std::vector<core::recv_op> recvs{{0, 0, 4}};
  bool took = false;
  const core::result late = c.exchange(
      1, none, recvs, [&](std::size_t, core::post&) { took = true; }, [](std::size_t, const core::post&) {});
  CHECK(late.what == core::outcome::timeout);
  CHECK(!late.send);
  CHECK(!took);
}

TEST_CASE("rendezvous: with SenderCopies, a send that finds its receive posted copies the bytes itself") {
  pd::rendezvous<tag, true> c{2, 1, 5s};
  int out = 42, in = 0;
  std::thread receiver([&] {
    std::vector<pd::rendezvous<tag, true>::send_op> none;
    std::vector<pd::rendezvous<tag, true>::recv_op> recvs{{0, 0, sizeof in, &in}};
    CHECK(c.exchange(
               1, none, recvs, [](std::size_t, auto&) {}, [](std::size_t, const auto&) {})
              .ok());
  });
  pd::rendezvous<tag, true>::post p;
  p.src = &out;
  p.bytes = sizeof out;
  std::vector<pd::rendezvous<tag, true>::send_op> sends{{0, 1, &p}};
  CHECK(c.exchange(
             0, sends, {}, [](std::size_t, auto&) {}, [](std::size_t, const auto&) {})
            .ok());
  receiver.join();
  CHECK(in == 42);
}

TEST_CASE("rendezvous: sizes that differ fail both ends, and abort ends every waiter with its reason") {
  core c{2, 1, 5s};
  core::result sender;
  std::thread t([&] {
    core::post p;
    p.bytes = 16;
    std::vector<core::send_op> sends{{0, 1, &p}};
    sender = c.exchange(
        0, sends, {}, [](std::size_t, core::post&) {}, [](std::size_t, const core::post&) {});
  });
  std::vector<core::send_op> none;
  std::vector<core::recv_op> recvs{{0, 0, 3}};
  const core::result receiver = c.exchange(
      1, none, recvs, [](std::size_t, core::post&) {}, [](std::size_t, const core::post&) {});
  t.join();
  CHECK(receiver.what == core::outcome::mismatch);
  CHECK(sender.what == core::outcome::mismatch);
  CHECK(receiver.send_bytes == 16);
  CHECK(receiver.recv_bytes == 3);
  CHECK(sender.recv_bytes == 3);

  core d{2, 1, 5s};
  core::result waiting;
  std::thread w([&] {
    std::vector<core::send_op> no_sends;
    std::vector<core::recv_op> one{{0, 0, 4}};
    waiting = d.exchange(
        1, no_sends, one, [](std::size_t, core::post&) {}, [](std::size_t, const core::post&) {});
  });
  std::this_thread::sleep_for(20ms);
  d.abort("rank 0 failed");
  w.join();
  CHECK(waiting.what == core::outcome::aborted);
  CHECK(waiting.reason == "rank 0 failed");
  d.reset();
  CHECK(!d.aborted());
  std::vector<core::send_op> bad{{3, 1, nullptr}};
  CHECK_THROWS_AS(d.exchange(
                      0, bad, {}, [](std::size_t, core::post&) {}, [](std::size_t, const core::post&) {}),
                  std::out_of_range);
}

}  // namespace test_rendezvous
}  // namespace
