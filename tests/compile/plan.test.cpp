#include "../schedules/sweep.hpp"

#include <doctest/doctest.h>

#include <string>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_plan {

namespace pt = pipetype;

using sched = pt::interleaved_1f1b<pt::ranks<3>, pt::microbatches<6>, pt::chunks<2>>;
constexpr auto plan = pt::make_plan<sched>();
constexpr auto by_pair = pt::make_plan<sched, pt::plan_options{.comms = pt::comm_policy::per_rank_pair}>();

// facts are constants
static_assert(plan.peak_activations(0) == 3 + 4 + 1);
static_assert(plan.comms().size() == 5 && by_pair.comms().size() == 3);
static_assert(plan.resources[0].events >= 1);
static_assert(std::is_same_v<pt::plan_t<sched>, std::remove_cv_t<decltype(plan)>>);
static_assert(pt::verify_lowered(plan.lowered()).ok());
// one group per peer: more groups, still proved at compile time
constexpr auto by_peer = pt::make_plan<sched, pt::plan_options{.groups = pt::group_policy::per_peer}>();
static_assert(by_peer.resources[1].groups > plan.resources[1].groups && pt::verify_lowered(by_peer.lowered()).ok());

// a memory limit that holds
constexpr auto limited =
    pt::make_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>, pt::plan_options{.mem_limit = 4}>();
static_assert(limited.peak_activations(0) == 4);

TEST_CASE("plan: the compile-time tables equal the run-time plan of the same schedule") {
  const pt::runtime_plan rt = pt::build_plan(pt::make_interleaved_1f1b(3, 6, 2));
  REQUIRE(rt.ok());
  REQUIRE(rt.lowered().ops.size() == plan.ops().size());
  for (std::size_t i = 0; i < plan.ops().size(); ++i) CHECK(rt.lowered().ops[i] == plan.ops()[i]);
  CHECK(rt.compute_table.actions.size() == plan.compute().actions.size());
  for (std::size_t i = 0; i < plan.compute().actions.size(); ++i)
    CHECK(rt.compute_table.actions[i] == plan.compute().actions[i]);
  for (int r = 0; r < 3; ++r) {
    CHECK(rt.lowered().resources[static_cast<std::size_t>(r)] == plan.resources[static_cast<std::size_t>(r)]);
    CHECK(rt.peak_activations(r) == plan.peak_activations(r));
  }
  CHECK(rt.ticks() == plan.ticks());
}

TEST_CASE("plan: a run-time plan reports the verdict instead of failing to compile") {
  const pt::runtime_plan bad = pt::build_plan(pt::parse_schedule("0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n"));
  CHECK_FALSE(bad.ok());
  CHECK(bad.result.code == pt::errc::cross_rank_deadlock);
  pt::plan_options o;
  o.mem_limit = 3;
  CHECK(pt::build_plan(pt::make_one_f_one_b(4, 8), o).result.code == pt::errc::memory_limit_exceeded);
}

// plan_v: the same plan by reference, no copy
static_assert(&pt::plan_v<sched> == &pt::plan_v<sched>);
static_assert(pt::plan_v<sched>.ops().size() == plan.ops().size());
static_assert(pt::plan_v<sched>.used.ops <= pt::plan_t<sched>::shape.ops);

TEST_CASE("plan: built-in schedules state their extent exactly, so make_plan need not generate twice") {
  auto same = [](const pt::program_extent& a, const pt::program_extent& b) {
    return a.ranks == b.ranks && a.stages == b.stages && a.microbatches == b.microbatches && a.actions == b.actions &&
           a.crossing_edges == b.crossing_edges;
  };
  sweep::for_each_builtin(6, 12, 3, [&](const pt::program& prog, int v) {
    const std::string name = prog.name;
    const int p = prog.ranks, m = prog.microbatches;
    if (name == "dualpipe-v" || name == "dualpipe") {  // extents from the types, checked at a few sizes
      const pt::program_extent got = pt::detail::extent_of(prog);
      if (name == "dualpipe-v" && p == 4 && m == 8)
        CHECK(same(got, pt::dualpipe_v<pt::ranks<4>, pt::microbatches<8>>::extent()));
      if (name == "dualpipe-v" && p == 3 && m == 7)
        CHECK(same(got, pt::dualpipe_v<pt::ranks<3>, pt::microbatches<7>>::extent()));
      if (name == "dualpipe" && p == 4 && m == 8)
        CHECK(same(got, pt::dualpipe<pt::ranks<4>, pt::microbatches<8>>::extent()));
      if (name == "dualpipe" && p == 6 && m == 12)
        CHECK(same(got, pt::dualpipe<pt::ranks<6>, pt::microbatches<12>>::extent()));
      return;
    }
    const pt::program_extent want = name == "zb-v" || name == "v-min" || name == "v-half" ? pt::v_split_extent(p, m)
                                    : name.rfind("zb-", 0) == 0                           ? pt::split_extent(p, m)
                                                                                          : pt::looped_extent(p, m, v);
    CHECK(same(pt::detail::extent_of(prog), want));
  });
  static_assert(
      std::is_same_v<decltype(pt::one_f_one_b<pt::ranks<2>, pt::microbatches<2>>::extent()), pt::program_extent>);
}

}  // namespace test_plan
}  // namespace
