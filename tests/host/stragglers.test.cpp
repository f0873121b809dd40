// The plan set's detector (host/stragglers.hpp): each rank's speed from a traced step's compute
// ops against the plan's cost model, the fastest rank 1, waits not counted, a stretched op or two
// not either.
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
  // an op or two stretched by the host (a preempted thread) do not move a rank's speed
  std::vector<pt::op_time> stretched = trace;
  int on_rank0 = 0;
  for (pt::op_time& t : stretched)
    if (t.rank == 0 && t.code == pt::op_code::compute && on_rank0++ < 2) t.end = t.start + 20 * (t.end - t.start);
  REQUIRE(on_rank0 > 5);
  const std::vector<double> steady = ph::measured_speeds(stretched, prog.view(), c);
  CHECK(steady[0] == doctest::Approx(1));
  CHECK(steady[1] == doctest::Approx(1 / 1.5));
  // a rank that ran nothing reads as nominal
  std::vector<pt::op_time> two;
  for (const pt::op_time& t : trace)
    if (t.rank != 2) two.push_back(t);
  CHECK(ph::measured_speeds(two, prog.view(), c)[2] == 1);
  CHECK(ph::measured_speeds({}, prog.view(), c) == std::vector<double>{1, 1, 1});
}

TEST_CASE("stragglers: the speed window gives each rank's median over the last steps, one noisy step outvoted") {
  ph::speed_window w{3};
  CHECK(w.speeds().empty());
  CHECK_FALSE(w.full());
  w.add({1, 0.66, 1});
  w.add({1, 1, 0.5});  // a step read on a loaded host: rank 2 stretched, rank 1 not
  CHECK_FALSE(w.full());
  CHECK(w.speeds() == std::vector<double>{1, 0.66, 0.5});  // (two steps: the lower median, the slower)
  w.add({1, 0.67, 1});
  REQUIRE(w.full());
  CHECK(w.speeds() == std::vector<double>{1, 0.67, 1});
  w.add({1, 0.65, 1});  // the oldest (0.66) forgotten: 0.67, not the four's lower median 0.66
  CHECK(w.speeds() == std::vector<double>{1, 0.67, 1});
  w.add({1, 1});  // another pipeline's speeds: the window starts again
  CHECK_FALSE(w.full());
  CHECK(w.speeds() == std::vector<double>{1, 1});
}

}  // namespace test_stragglers
}  // namespace
