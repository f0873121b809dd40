#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <string>
#include <thread>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_channel {

namespace ph = pipetype::host;
using namespace std::chrono_literals;

namespace {
std::span<std::byte> bytes_of(std::array<int, 4>& a) { return std::as_writable_bytes(std::span(a)); }
}  // namespace

TEST_CASE("fabric: a grouped neighbour exchange completes and moves the data") {
  ph::fabric f{2, 1, 5s};
  std::array<int, 4> out0{1, 2, 3, 4}, out1{5, 6, 7, 8}, in0{}, in1{};
  std::thread t1([&] {
    auto e = f.at(1);
    e.group_begin();
    e.send(0, 0, bytes_of(out1));
    e.recv(0, 0, bytes_of(in1));
    e.group_end();
  });
  auto e = f.at(0);
  e.group_begin();
  e.send(0, 1, bytes_of(out0));
  e.recv(0, 1, bytes_of(in0));
  e.group_end();
  t1.join();
  CHECK(in0 == out1);
  CHECK(in1 == out0);
}

TEST_CASE("fabric: the k-th send matches the k-th recv of a channel (FIFO)") {
  ph::fabric f{2, 1, 5s};
  std::array<int, 4> a{1, 1, 1, 1}, b{2, 2, 2, 2}, first{}, second{};
  std::thread t([&] {
    auto e = f.at(0);
    e.group_begin();
    e.send(0, 1, bytes_of(a));
    e.send(0, 1, bytes_of(b));
    e.group_end();
  });
  auto e = f.at(1);
  e.recv(0, 0, bytes_of(first));
  e.recv(0, 0, bytes_of(second));
  t.join();
  CHECK(first == a);
  CHECK(second == b);
}

TEST_CASE("fabric: an unordered exchange in separate groups hangs, and ends at the deadline on both ranks") {
  ph::fabric f{2, 1, 200ms};
  std::array<int, 4> out{}, in{};
  std::atomic<int> timeouts{0};
  auto body = [&](int r) {
    auto e = f.at(r);
    try {
      e.send(0, 1 - r, bytes_of(out), "act 0F0");  // both send first: blocking rendezvous
      e.recv(0, 1 - r, bytes_of(in));
    } catch (const ph::timeout_error& err) {
      CHECK(std::string(err.what()).find("send act 0F0 to rank") != std::string::npos);
      ++timeouts;
    }
  };
  std::thread t(body, 1);
  body(0);
  t.join();
  CHECK(timeouts == 2);
}

TEST_CASE("fabric: two ends of different sizes are an error on both") {
  ph::fabric f{2, 1, 5s};
  std::array<int, 4> out{};
  std::array<std::byte, 3> small{};
  std::atomic<int> errors{0};
  std::thread t([&] {
    try {
      f.at(0).send(0, 1, bytes_of(out));
    } catch (const ph::transfer_error&) {
      ++errors;
    }
  });
  try {
    f.at(1).recv(0, 0, std::span<std::byte>(small));
  } catch (const ph::transfer_error& err) {
    CHECK(std::string(err.what()).find("send of 16 bytes matched a recv of 3 bytes") != std::string::npos);
    ++errors;
  }
  t.join();
  CHECK(errors == 2);
}

TEST_CASE("fabric: abort wakes a blocked rank with the reason") {
  ph::fabric f{2, 1, 10s};
  std::array<int, 4> in{};
  std::string seen;
  std::thread t([&] {
    try {
      f.at(1).recv(0, 0, bytes_of(in));
    } catch (const ph::aborted_error& err) {
      seen = err.what();
    }
  });
  std::this_thread::sleep_for(20ms);
  f.abort("rank 0, stage 0, microbatch 3, action 0F3 threw: boom");
  t.join();
  CHECK(seen == "rank 0, stage 0, microbatch 3, action 0F3 threw: boom");
  CHECK(f.aborted());
  CHECK_THROWS_AS(f.at(0).send(0, 1, bytes_of(in)), ph::aborted_error);
}

TEST_CASE("fabric: misuse is reported, not undefined") {
  ph::fabric f{2, 1, 1s};
  CHECK_THROWS_AS(f.at(2), std::out_of_range);
  auto e = f.at(0);
  CHECK_THROWS_AS(e.group_end(), std::logic_error);
  e.group_begin();
  CHECK_THROWS_AS(e.group_begin(), std::logic_error);
  std::array<int, 4> a{};
  e.send(3, 1, bytes_of(a));  // a bad communicator is reported when the group is posted
  CHECK_THROWS_AS(e.group_end(), std::out_of_range);
  CHECK_THROWS_AS((ph::fabric{0, 1, 1s}), std::invalid_argument);
}

}  // namespace test_channel
}  // namespace
