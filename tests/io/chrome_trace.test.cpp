#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <string>

#include "small_step.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_chrome_trace {

namespace pt = pipetype;

TEST_CASE("chrome_trace: a process per rank, a thread per stream, an event per span, a flow per transfer") {
  const std::string j = pt::chrome_trace(test_io::small_step());
  CHECK(j.rfind("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", 0) == 0);
  CHECK(test_io::count(j, "\"ph\": \"X\"") == 8);
  CHECK(test_io::count(j, "\"ph\": \"s\"") == 4);
  CHECK(test_io::count(j, "\"ph\": \"f\", \"bp\": \"e\"") == 4);
  CHECK(test_io::count(j, "\"name\": \"process_name\"") == 2);
  CHECK(test_io::count(j, "\"name\": \"thread_name\"") == 4);
  CHECK(j.find("\"args\": {\"name\": \"rank 1\"}") != std::string::npos);
  // 1B0: rank 1, from 2.5 to 4.5 units, drawn as ms
  CHECK(
      j.find("{\"name\": \"1B0\", \"cat\": \"B\", \"ph\": \"X\", \"ts\": 2500, \"dur\": 2000, \"pid\": 1, \"tid\": 0, "
             "\"args\": {\"stage\": 1, \"microbatch\": 0, \"kind\": \"B\", \"activations\": 0}}") != std::string::npos);
  // the flow of 0F0 leaves just before 0F0 ends (1000 µs) and lands just inside 1F0 (from 1500 µs)
  CHECK(
      j.find("{\"name\": \"activation 0F0\", \"cat\": \"transfer\", \"ph\": \"s\", \"id\": 0, \"ts\": 999, \"pid\": 0, "
             "\"tid\": 0}") != std::string::npos);
  CHECK(j.find("{\"name\": \"activation 0F0\", \"cat\": \"transfer\", \"ph\": \"f\", \"bp\": \"e\", \"id\": 0, \"ts\": "
               "1501, \"pid\": 1, \"tid\": 0}") != std::string::npos);
  CHECK(j.substr(j.size() - 4) == "\n]}\n");
}

TEST_CASE("chrome_trace: parts get their own processes, in order, named by the part") {
  const pt::step_trace a = test_io::small_step();
  pt::step_trace b = test_io::small_step();
  b.unit = "ms";
  const std::string j = pt::chrome_trace({{&a, "simulated", 1000}, {&b, "measured", 1000}});
  CHECK(j.find("\"pid\": 0, \"tid\": 0, \"args\": {\"name\": \"simulated rank 0\"}") != std::string::npos);
  CHECK(j.find("\"pid\": 3, \"tid\": 0, \"args\": {\"name\": \"measured rank 1\"}") != std::string::npos);
  CHECK(test_io::count(j, "\"ph\": \"X\"") == 16);
  CHECK(test_io::count(j, "\"ph\": \"s\"") == 8);
  // flow ids are unique over the parts
  CHECK(j.find("\"id\": 7,") != std::string::npos);
  CHECK(j.find("\"id\": 8,") == std::string::npos);
}

TEST_CASE("chrome_trace: a measured group is an event on the communication thread") {
  pt::step_trace t;
  t.ranks = 1;
  t.unit = "ms";
  t.comms.push_back({0, 1.0, 1.5, 2});
  const std::string j = pt::chrome_trace(t);
  CHECK(
      j.find("{\"name\": \"group\", \"cat\": \"comm\", \"ph\": \"X\", \"ts\": 1000, \"dur\": 500, \"pid\": 0, \"tid\": "
             "1, \"args\": {\"transfers\": 2}}") != std::string::npos);
  CHECK(j.find("\"args\": {\"name\": \"communication\"}") != std::string::npos);
}

TEST_CASE("chrome_trace: a flow's ends lie inside short measured spans, not on their edges") {
  // two measured groups in ms: rank 0's 81.613 µs to 81.936 µs (323 ns, whose 1/1000 rounds to
  // 0 ns), rank 1's 2 ns and 1 ns long; the transfer leaves rank 0's group and lands in rank 1's
  pt::step_trace t;
  t.ranks = 2;
  t.unit = "ms";
  t.measured = true;
  t.comms.push_back({0, 0.081613, 0.081936, 1});
  t.comms.push_back({1, 0.090000, 0.090002, 1});
  t.comms.push_back({1, 0.095000, 0.095001, 1});
  pt::traced_transfer x;
  x.stage = 0, x.microbatch = 1, x.from = 0, x.to = 1, x.via_comm = true, x.from_span = 0, x.to_span = 1;
  t.transfers.push_back(x);
  x.microbatch = 2, x.to_span = 2;
  t.transfers.push_back(x);
  const std::string j = pt::chrome_trace(t);
  // 1 ns before the end, not at 81.936 where the next span on the thread may start
  CHECK(j.find("\"ph\": \"s\", \"id\": 0, \"ts\": 81.935, \"pid\": 0") != std::string::npos);
  CHECK(j.find("\"ph\": \"f\", \"bp\": \"e\", \"id\": 0, \"ts\": 90.001, \"pid\": 1") != std::string::npos);
  // a span of 1 ns has no inside: the flow lands at its start
  CHECK(j.find("\"ph\": \"f\", \"bp\": \"e\", \"id\": 1, \"ts\": 95, \"pid\": 1") != std::string::npos);
}

}  // namespace test_chrome_trace
}  // namespace
