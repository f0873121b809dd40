// The plan set's detector (host/stragglers.hpp): each rank's speed from a traced step's compute
// ops against the plan's cost model, the fastest rank 1, waits not counted.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_stragglers {

namespace pt = pipetype;
namespace ph = pipetype::host;

TEST_CASE("stragglers: the measured speeds of a traced step, the slow rank's below 1, waits not counted") {
  const pt::program prog = pt::make_one_f_one_b(3, 4);
  const pt::costs c{.f = 1, .b = 2};
  // every compute op as long as the model says, times 1.5 on rank 1, at made-up starts; a transfer
  // of any length on the communication stream (not counted)
  std::vector<pt::op_time> trace;
  double at = 0;
  for (int r = 0; r < 3; ++r)
    for (const pt::action& a : prog.view().rank_actions(r)) {
      const double d = c.time(a) * (r == 1 ? 1.5 : 1.0) * 0.001;  // (seconds or anything: only ratios count)
      trace.push_back({r, pt::stream_id::compute, pt::op_code::compute, a.what, a.stage, a.microbatch, at, at + d});
      trace.push_back({r, pt::stream_id::comm, pt::op_code::recv, a.what, a.stage, a.microbatch, at, at + 7});
      at += d + 1;
    }
  const std::vector<double> speed = ph::measured_speeds(trace, prog.view(), c);
  REQUIRE(speed.size() == 3);
  CHECK(speed[0] == doctest::Approx(1));
  CHECK(speed[1] == doctest::Approx(1 / 1.5));
  CHECK(speed[2] == doctest::Approx(1));
  // a rank that ran nothing reads as nominal
  std::vector<pt::op_time> two;
  for (const pt::op_time& t : trace)
    if (t.rank != 2) two.push_back(t);
  CHECK(ph::measured_speeds(two, prog.view(), c)[2] == 1);
  CHECK(ph::measured_speeds({}, prog.view(), c) == std::vector<double>{1, 1, 1});
}

}  // namespace test_stragglers
}  // namespace
