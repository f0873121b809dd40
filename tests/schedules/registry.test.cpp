#include <pipetype/schedules/registry.hpp>

#include <doctest/doctest.h>

#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_registry {

namespace pt = pipetype;

TEST_CASE("registry: every name builds the same program as its generator") {
  CHECK(pt::make_schedule("gpipe", 3, 4).actions == pt::make_gpipe(3, 4).actions);
  CHECK(pt::make_schedule("1f1b", 3, 4).actions == pt::make_one_f_one_b(3, 4).actions);
  CHECK(pt::make_schedule("interleaved-1f1b", 2, 4, 2).actions == pt::make_interleaved_1f1b(2, 4, 2).actions);
  CHECK(pt::make_schedule("looped-bfs", 2, 4, 3).actions == pt::make_looped_bfs(2, 4, 3).actions);
  CHECK(pt::make_schedule("zb-h1", 3, 4).actions == pt::make_zb_h1(3, 4).actions);
  CHECK(pt::make_schedule("zb-h2", 3, 4).actions == pt::make_zb_h2(3, 4).actions);
  CHECK(pt::make_schedule("zb-v", 3, 4).actions == pt::make_zb_v(3, 4).actions);
  CHECK(pt::make_schedule("v-min", 3, 4).actions == pt::make_v_min(3, 4).actions);
  CHECK(pt::make_schedule("v-half", 3, 4).actions == pt::make_v_half(3, 4).actions);
  CHECK(pt::make_schedule("dualpipe-v", 2, 4).actions == pt::make_dualpipe_v(2, 4).actions);
  pt::zb_problem pr;
  pr.ranks = 3;
  pr.microbatches = 6;
  pr.costs = pt::cost_model{pt::costs{.f = 1, .b = 3}};
  pr.mem_limit = 3;
  CHECK(pt::make_schedule("zb-auto", 3, 6, 0, {pt::costs{.f = 1, .b = 3}, 3}).actions == pt::make_zb_auto(pr).actions);
}

TEST_CASE("registry: v = 0 asks for the schedule's own stages per rank") {
  CHECK(pt::make_schedule("interleaved-1f1b", 2, 4).stages == 4);
  CHECK(pt::make_schedule("zb-v", 2, 4).stages == 4);
  CHECK(pt::make_schedule("1f1b", 2, 4).stages == 2);
  for (const pt::schedule_info& s : pt::schedule_infos) CHECK(pt::default_chunks(s) == (s.chunks ? s.chunks : 2));
}

TEST_CASE("registry: bad requests are named, not built") {
  CHECK(std::string(pt::schedule_error("zigzag", 2, 2, 1)).find("unknown schedule") == 0);
  CHECK(std::string(pt::schedule_error("1f1b", 2, 2, 2)).find("--chunks must be 1") != std::string::npos);
  CHECK(std::string(pt::schedule_error("zb-v", 2, 2, 3)).find("--chunks must be 2") != std::string::npos);
  CHECK(std::string(pt::schedule_error("dualpipe-v", 4, 7, 2)).find("at least 2 x ranks") != std::string::npos);
  CHECK(pt::schedule_error("dualpipe-v", 4, 8, 2) == nullptr);
  CHECK(pt::schedule_error("1f1b", 0, 2, 1) != nullptr);
  CHECK(pt::schedule_error("gpipe", 2, 0, 1) != nullptr);
  CHECK(pt::schedule_error("looped-bfs", 2, 2, -1) != nullptr);
  CHECK(pt::schedule_error("interleaved-1f1b", 3, 7, 2) != nullptr);
  CHECK_THROWS_AS(pt::make_schedule("interleaved-1f1b", 3, 7, 2), std::invalid_argument);
  CHECK_THROWS_AS(pt::make_schedule("zb-auto", 2, 4, 1, {{}, 0.5}), std::invalid_argument);
  for (const pt::schedule_info& s : pt::schedule_infos) CHECK(pt::find_schedule(s.name) == &s);
}

// Each compile-time schedule names its family, and the family's run-time generator is the same code.
static_assert(std::is_same_v<pt::one_f_one_b<pt::ranks<2>, pt::microbatches<4>>::family, pt::one_f_one_b_family>);
static_assert(std::is_same_v<pt::zb_v<pt::ranks<2>, pt::microbatches<4>>::family, pt::zb_v_family>);
static_assert(std::is_same_v<pt::v_min<pt::ranks<2>, pt::microbatches<4>>::family, pt::v_min_family>);
static_assert(std::is_same_v<pt::v_half<pt::ranks<2>, pt::microbatches<4>>::family, pt::v_half_family>);
static_assert(pt::interleaved_1f1b<pt::ranks<2>, pt::microbatches<4>, pt::chunks<3>>::family::name ==
              "interleaved-1f1b");
static_assert(pt::schedule_infos.size() == pt::builtin_families::size);
static_assert(pt::find_schedule("dualpipe")->split && !pt::find_schedule("gpipe")->split);
// the size tags are concepts (a swapped pair is a compile error: compile_fail/swapped_sizes)
static_assert(pt::rank_count<pt::ranks<4>> && !pt::rank_count<pt::microbatches<4>> && !pt::rank_count<int>);
static_assert(pt::microbatch_count<pt::microbatches<8>> && !pt::microbatch_count<pt::ranks<8>>);
static_assert(pt::chunk_count<pt::chunks<2>> && !pt::chunk_count<pt::stages<2>>);

TEST_CASE("registry: one list, names unique, the unknown-name message lists them all in order") {
  std::set<std::string_view> names;
  std::string known;
  for (const pt::schedule_info& s : pt::schedule_infos) {
    CHECK(names.insert(s.name).second);
    CHECK(!s.summary.empty());
    known += (known.empty() ? "" : ", ") + std::string(s.name);
  }
  CHECK(names.size() == 13);
  CHECK(std::string(pt::schedule_error("zigzag", 2, 2, 1)) == "unknown schedule; known: " + known);
  CHECK(known.find("gpipe, 1f1b, interleaved-1f1b") == 0);
  CHECK_THROWS_WITH(pt::make_schedule("zigzag", 2, 2), doctest::Contains("known: gpipe"));
}

TEST_CASE("registry: a family's make() is its compile-time schedule's generate()") {
  CHECK(pt::zb_h2_family::make(3, 6, 1, {}).actions ==
        pt::zb_h2<pt::ranks<3>, pt::microbatches<6>>::generate().actions);
  CHECK(pt::looped_bfs_family::make(2, 4, 3, {}).actions ==
        pt::looped_bfs<pt::ranks<2>, pt::microbatches<4>, pt::chunks<3>>::generate().actions);
  CHECK(pt::dualpipe_family::error(4, 7, 1) != nullptr);
  CHECK(pt::dualpipe_family::error(4, 8, 1) == nullptr);
}

TEST_CASE("registry: costs that would make times infinite are refused by every family, before any search") {
  pt::schedule_params tiny;
  tiny.rank_speed = {1e-300, 1, 1, 1};
  for (const pt::schedule_info& s : pt::schedule_infos) {
    CAPTURE(s.name);
    const int p = 4, m = 8, v = pt::default_chunks(s);
    if (pt::schedule_error(s.name, p, m, v)) continue;
    // zb-auto once blamed a memory limit nobody gave
    CHECK_THROWS_WITH_AS(pt::make_schedule(s.name, p, m, v, tiny), doctest::Contains("rank speeds must be finite"),
                         std::invalid_argument);
    pt::schedule_params huge;
    huge.cost.f = std::numeric_limits<double>::infinity();
    CHECK_THROWS_WITH_AS(pt::make_schedule(s.name, p, m, v, huge), doctest::Contains("costs: every time"),
                         std::invalid_argument);
  }
}

TEST_CASE("registry: a graph naming another number of stages than the program is refused alike by every family") {
  pt::schedule_params fewer;
  fewer.edges = {{0, 1}};  // 2 stages named, 3 in the program
  for (const pt::schedule_info& s : pt::schedule_infos) {
    CAPTURE(s.name);
    const int p = 3, m = 6, v = pt::default_chunks(s);
    if (pt::schedule_error(s.name, p, m, v)) continue;
    CHECK_THROWS_WITH_AS(pt::make_schedule(s.name, p, m, v, fewer),
                         doctest::Contains("the stage graph's edges name 2 stages, but this schedule's program has "),
                         std::invalid_argument);
  }
  // one past the program's stages, under a family with a graph form of its own: the same sentence
  pt::schedule_params more;
  more.edges = {{0, 1}, {1, 5}};
  CHECK_THROWS_WITH_AS(pt::make_schedule("1f1b", 3, 6, 1, more),
                       "the stage graph's edges name 6 stages, but this schedule's program has 3 (1 per rank over 3 "
                       "ranks)",
                       std::invalid_argument);
  pt::schedule_params right;
  right.edges = {{0, 1}, {1, 2}, {0, 2}};
  CHECK_NOTHROW(pt::make_schedule("1f1b", 3, 6, 1, right));
}

}  // namespace test_registry
}  // namespace
