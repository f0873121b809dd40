// cuda/capture.hpp: one step as one graph — fork from the origin, the step, join back — over the
// record driver, and the graph updated in place when only addresses change.
#include <pipetype/cuda/capture.hpp>
#include <pipetype/cuda/record.hpp>

#include <doctest/doctest.h>

#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_capture {

namespace pc = pipetype::cuda;
using ck = pc::record_driver::call_kind;

TEST_CASE("step_capture: capture forks every stream from the origin and joins them back, and replay launches") {
  pc::record_driver a, b;  // two drivers: one stream each (a loopback pipeline's ranks)
  const auto sa = a.make_stream(), sb = b.make_stream();
  pc::step_capture<pc::record_driver> cap;
  cap.open(a);
  cap.add(a, sa);
  cap.add(b, sb);
  a.clear();
  b.clear();
  int steps = 0;
  cap.capture([&] { ++steps; });
  CHECK(steps == 1);
  CHECK(cap.instantiations() == 1);
  std::vector<ck> on_a;
  for (const auto& c : a.calls()) on_a.push_back(c.what);
  // origin: begin, record fork; a's stream waits on it; join: a's stream records, origin waits (twice:
  // once for each stream); end, instantiate, destroy the graph
  CHECK(on_a == std::vector<ck>{ck::begin_capture, ck::record, ck::wait, ck::record, ck::wait, ck::wait,
                                ck::end_capture, ck::instantiate, ck::destroy});
  std::vector<ck> on_b;
  for (const auto& c : b.calls()) on_b.push_back(c.what);
  CHECK(on_b == std::vector<ck>{ck::wait, ck::record});  // b's stream: waits on the fork, records its join
  a.clear();
  cap.capture([&] { ++steps; });  // the same calls: the graph is updated in place
  CHECK(cap.updates() == 1);
  CHECK(cap.instantiations() == 1);
  a.clear();
  cap.replay();
  bool launched = false;
  for (const auto& c : a.calls()) launched = launched || (c.what == ck::launch && c.stream == cap.origin());
  CHECK(launched);
  cap.release();
}

TEST_CASE("step_capture: a step that throws abandons the capture, and the next one works") {
  pc::record_driver d;
  const auto s = d.make_stream();
  pc::step_capture<pc::record_driver> cap;
  cap.open(d);
  cap.add(d, s);
  CHECK_THROWS_AS(cap.capture([] { throw std::runtime_error("stage failed"); }), std::runtime_error);
  CHECK(cap.instantiations() == 0);
  CHECK_THROWS_AS(cap.replay(), std::logic_error);  // nothing captured
  cap.capture([] {});
  CHECK(cap.instantiations() == 1);
  cap.release();
}

}  // namespace test_capture
}  // namespace
