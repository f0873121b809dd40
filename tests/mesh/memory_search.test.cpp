// fastest_under_limit (mesh/memory_search.hpp): zb-auto's searches at activation limits 2, 3,
// 4 and none, under a byte limit of two activations per rank. With cheap copies and recompute, a
// candidate that holds more is faster than the one that fits as it is (47.8 against 61 time units); with no memory
// actions allowed only that one fits; every rank of the answer is under the limit; a limit below one activation is
// refused with the pass's sentence.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_memory_search {

namespace pt = pipetype;

constexpr std::int64_t act = 1000;  // bytes a microbatch saves on a stage
constexpr pt::costs cost{.f = 1, .b = 2, .i = 1, .w = 1};

std::vector<pt::program> zb_auto_candidates() {
  std::vector<pt::program> out;
  for (const double limit : {2.0, 3.0, 4.0, 0.0}) {  // the one that fits as it is first
    pt::schedule_params sp;
    sp.cost = cost;
    sp.mem_limit = limit;
    out.push_back(pt::make_schedule("zb-auto", 4, 12, 0, sp));
  }
  return out;
}

pt::memory_choice choose(pt::memory_policy offload, pt::memory_policy recompute, std::int64_t limit, double bandwidth) {
  pt::memory_options o;
  o.offload = offload;
  o.recompute = recompute;
  o.limit = limit;
  o.copy_bandwidth = bandwidth;
  return pt::fastest_under_limit(
      zb_auto_candidates(),
      [](pt::program_view) {
        return pt::memory_sizes{{act}, {act / 17}};
      },
      [](pt::program_view) { return pt::cost_model{cost}; }, o);
}

TEST_CASE("fastest_under_limit: zb-auto holding more and offloading beats the schedule that fits as it is") {
  const pt::memory_choice fit = choose(pt::memory_policy::none, pt::memory_policy::none, 2 * act, 1);
  REQUIRE(fit.result.ok());
  CHECK(fit.chosen == 0);  // no actions allowed: only the search within two activations fits
  REQUIRE(fit.makespans.size() == 4);
  CHECK(fit.makespans[0] > 0);
  CHECK(fit.makespans[3] == -1);
  CHECK(fit.step.actions.empty());

  // copies at 10 × the bytes of a microbatch per time unit (a round trip of 0.2, k = 0.07), and
  // recompute where the offloads' gaps are too short (a zero-bubble rank's I follows its F closely)
  const pt::memory_choice off = choose(pt::memory_policy::automatic, pt::memory_policy::automatic, 2 * act, 10 * act);
  REQUIRE(off.result.ok());
  CHECK(off.chosen > 0);
  CHECK(off.step.makespan < fit.step.makespan);
  CHECK(off.makespans[0] == doctest::Approx(fit.makespans[0]));  // the same first candidate, it fits as it is
  CHECK_FALSE(off.step.actions.empty());
  for (const pt::rank_memory& r : off.step.memory) CHECK(r.peak_bytes <= 2 * act);
  for (std::size_t k = 0; k < off.makespans.size(); ++k)
    if (off.makespans[k] > 0) CHECK(off.makespans[k] >= off.step.makespan);
  CHECK(off.plan.ok());
  CHECK(off.plan.compute().microbatches == 12);
}

TEST_CASE("fastest_under_limit: a limit below one activation fits no candidate, and says so") {
  const pt::memory_choice none = choose(pt::memory_policy::automatic, pt::memory_policy::none, act / 2, 10 * act);
  CHECK(none.chosen == -1);
  CHECK(none.result.code == pt::errc::memory_limit_exceeded);
  for (const double m : none.makespans) CHECK(m == -1);
}

}  // namespace test_memory_search
}  // namespace
