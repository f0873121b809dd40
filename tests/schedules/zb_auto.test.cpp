#include "sweep.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_zb_auto {

namespace pt = pipetype;

namespace {

struct equal_costs {
  static constexpr pt::costs value{.f = 1, .b = 2};  // F = I = W = 1
};

// A heavy loss head and unequal microbatches (variable sequence lengths).
struct uneven_costs {
  static constexpr pt::cost_model model() {
    pt::cost_model c{pt::costs{.f = 1, .i = 1.5, .w = 0.5}};
    c.stage(3, pt::kind::F, 2).microbatch(0, 2.0).microbatch(5, 0.5);
    return c;
  }
};

pt::zb_problem problem(int p, int m, double limit, pt::cost_model c = pt::cost_model{pt::costs{.f = 1, .b = 2}}) {
  return sweep::zb_problem_of(p, m, limit, std::move(c));
}

}  // namespace

// The scheduler runs inside the compiler: a plan from costs and a limit given as template arguments.
constexpr auto plan_h1 = pt::make_plan<pt::zb_auto<pt::ranks<4>, pt::microbatches<8>, equal_costs, 4>>();
constexpr auto plan_zero = pt::make_plan<pt::zb_auto<pt::ranks<4>, pt::microbatches<8>, equal_costs, 8>>();
static_assert(pt::simulate(plan_h1, equal_costs::value).max_rank_span() == 8 * 3 + 3 * 1);  // ZB-H1's
static_assert(pt::simulate(plan_zero, equal_costs::value).max_rank_span() == 8 * 3);        // zero bubble
static_assert(plan_h1.peak_activations(0) <= 4 && plan_zero.peak_activations(0) <= 8);
constexpr auto plan_uneven = pt::make_plan<pt::zb_auto<pt::ranks<4>, pt::microbatches<8>, uneven_costs, 6>>();
static_assert(plan_uneven.shape.split && plan_uneven.peak_activations(0) <= 6);
// the local search runs in the compiler too when asked for (the fifth argument, zb_effort); small
// sizes, within clang's default step limit, and costs whose answer is above the bound so that the
// local search does run
struct i_heavy {
  static constexpr pt::costs value{.f = 1, .b = 2, .i = 1.5, .w = 0.5, .comm = 0.25};
};
using local_on = pt::zb_auto<pt::ranks<3>, pt::microbatches<4>, i_heavy, 3, pt::zb_effort{.local = 1}>;
constexpr bool local_search_in_the_compiler() {
  pt::zb_problem pr = local_on::problem();
  const pt::zb_result with = pt::zb_auto_search(pr);
  pr.local = 0;
  return with.gap() > 0 && with.rank_span <= pt::zb_auto_search(pr).rank_span;
}
static_assert(local_search_in_the_compiler());
// by default the compiler runs neither the refinement nor the local search (zb_effort{})
static_assert(pt::zb_auto<pt::ranks<3>, pt::microbatches<4>, i_heavy, 3>::problem().refine == 0 &&
              pt::zb_auto<pt::ranks<3>, pt::microbatches<4>, i_heavy, 3>::problem().local == 0);
static_assert(
    pt::zb_auto<pt::ranks<3>, pt::microbatches<4>, i_heavy, 3, pt::zb_effort{.refine = 1}>::problem().refine == 1);

TEST_CASE("zb_auto: equal costs - ZB-H1's span at limit p, zero bubble at limit 2p (m >= 2p-1)") {
  for (int p = 1; p <= 6; ++p)
    for (int m = p; m <= 3 * p + 2; ++m) {
      CAPTURE(p);
      CAPTURE(m);
      const pt::zb_result at_p = pt::zb_auto_search(problem(p, m, p));
      CHECK(at_p.rank_span == 3.0 * m + (p - 1));
      const pt::zb_result at_2p = pt::zb_auto_search(problem(p, m, 2 * p));
      if (m >= 2 * p - 1) CHECK(at_2p.rank_span == 3.0 * m);
      if (m >= 2 * p - 1) CHECK(at_2p.gap() == 0);  // the bound proves zero bubble optimal
      CHECK(at_p.bound.value() <= at_p.rank_span);
      CHECK(at_p.gap() >= 0);
      for (const pt::zb_result* r : {&at_p, &at_2p}) {
        const pt::timeline t = pt::simulate(r->schedule.view(), pt::costs{.f = 1, .b = 2});
        CHECK(t.max_rank_span() == r->rank_span);  // the reported figure is the simulator's
        CHECK(pt::build_plan(r->schedule).ok());
      }
      CHECK(pt::build_plan(at_p.schedule, {.mem_limit = p}).ok());
      CHECK(pt::build_plan(at_2p.schedule, {.mem_limit = 2 * p}).ok());
    }
}

TEST_CASE("zb_auto: never worse than the hand-written schedules that fit the same limit") {
  std::uint64_t seed = 12345;
  auto next = [&] {  // small deterministic costs in quarters
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return 0.25 * static_cast<double>(1 + (seed >> 33) % 8);
  };
  for (int trial = 0; trial < 24; ++trial) {
    const int p = 2 + trial % 4, m = p + (trial * 5) % (2 * p + 1);
    const double f = next(), i = next(), w = next();  // a full backward B costs I + W
    pt::cost_model c{pt::costs{.f = f, .b = i + w, .i = i, .w = w, .comm = trial % 3 == 0 ? 0.25 : 0}};
    c.stage(p - 1, pt::kind::F, next() * 2);  // an unbalanced last stage (its B = I + W stays)
    if (trial % 2) c.microbatch(trial % m, 1.5);
    for (const double limit : {static_cast<double>(p), p + 1.5, 2.0 * p}) {
      CAPTURE(trial);
      CAPTURE(p);
      CAPTURE(m);
      CAPTURE(limit);
      const pt::zb_result r = pt::zb_auto_search(problem(p, m, limit, c));
      REQUIRE(pt::build_plan(r.schedule, {.mem_limit_units = static_cast<int>(2 * limit)}).ok());
      for (const pt::program& h :
           {pt::make_one_f_one_b(p, m), pt::make_gpipe(p, m), pt::make_zb_h1(p, m), pt::make_zb_h2(p, m)}) {
        if (!pt::build_plan(h, {.mem_limit_units = static_cast<int>(2 * limit)}).ok()) continue;
        const std::string name = h.name;
        CAPTURE(name);
        CHECK(r.rank_span <= pt::simulate(h.view(), c).max_rank_span() + 1e-9);
      }
    }
  }
}

TEST_CASE("zb_auto: per-stage memory accounting (an I that frees three quarters) is honoured") {
  pt::zb_problem pr = problem(4, 12, 3);
  pr.memory = pt::memory_model{.f = 4, .b = -4, .i = -3, .w = -1, .unit = 4};
  const pt::zb_result r = pt::zb_auto_search(pr);
  CHECK(pt::build_plan(r.schedule, {.mem_limit = 3, .memory = pr.memory}).ok());
  // an I that frees more leaves more room under the same limit: never a longer span than with halves
  const pt::zb_result halves = pt::zb_auto_search(problem(4, 12, 3));
  CHECK(r.rank_span <= halves.rank_span);
  pr.stage_memory.assign(4, pr.memory);
  pr.stage_memory[0] = pt::memory_model{};  // stage 0 keeps the halves
  const pt::zb_result mixed = pt::zb_auto_search(pr);
  int live = 0, peak = 0;
  for (const pt::action& a : mixed.schedule.view().rank_actions(0))
    peak = std::max(peak, live += pr.memory_of(0).delta(a.what));
  CHECK(peak <= 3 * 2);
}

TEST_CASE("zb_auto: unschedulable problems are named") {
  CHECK(std::string(pt::zb_problem_error(problem(4, 8, 0.5))).find("below one microbatch activation") !=
        std::string::npos);
  CHECK(pt::zb_problem_error(problem(0, 8, 4)) != nullptr);
  CHECK_THROWS_AS(pt::zb_auto_search(problem(4, 8, 0.5)), std::invalid_argument);
  CHECK(pt::zb_problem_error(problem(4, 8, 1)) == nullptr);  // one activation: GPipe-like lock-step, but valid
  const pt::zb_result tight = pt::zb_auto_search(problem(4, 8, 1));
  CHECK(pt::build_plan(tight.schedule, {.mem_limit = 1}).ok());
  CHECK(tight.candidates > 0);
}

TEST_CASE("zb_auto: by name with rank speeds and microbatch scales, it searches under them") {
  const pt::costs base{.f = 1, .b = 2, .comm = 0.1};
  const std::vector<double> speeds{1, 1, 0.7, 1}, scales{0.4, 0.4, 3, 0.4, 0.4, 2.5, 0.4, 0.5};
  const pt::cost_model real = pt::scaled_costs(base, pt::looped_placement(4, 1), speeds, scales);
  const pt::program aware = pt::make_schedule("zb-auto", 4, 8, 0, {base, 6, speeds, scales});
  const pt::program blind = pt::make_schedule("zb-auto", 4, 8, 0, {base, 6});
  const double aware_span = pt::simulate(aware.view(), real).max_rank_span();
  CHECK(aware_span == doctest::Approx(pt::zb_auto_search(sweep::zb_problem_of(4, 8, 6, real)).rank_span));
  CHECK(aware_span < pt::simulate(blind.view(), real).max_rank_span());
  CHECK(pt::build_plan(aware, {.mem_limit = 6}).ok());
}

TEST_CASE(
    "zb_auto: over a stage graph it counts a fan-in's inputs and keeps the shorter of its search and the graph forms") {
  // two towers into a head: the head's rank holds two activations per microbatch
  pt::schedule_params params;
  params.cost = pt::costs{.f = 1, .b = 2};
  params.edges = {{0, 1}, {2, 3}, {1, 4}, {3, 4}};
  double last_span = 0;
  for (const int limit : {6, 4, 3, 2}) {
    CAPTURE(limit);
    params.mem_limit = limit;
    const pt::program prog = pt::make_schedule("zb-auto", 5, 8, 0, params);
    CHECK(std::string(prog.name) == "zb-auto");
    CHECK(std::none_of(prog.actions.begin(), prog.actions.end(), [](const pt::action& a) {
      return a.what == pt::kind::B;  // every answer splits its backwards, whichever form won
    }));
    const pt::runtime_plan plan = pt::build_plan(prog, {.mem_limit = limit});
    REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
    const double span = pt::simulate(prog.view(), params.cost).max_rank_span();
    CHECK(span >= last_span);  // a tighter limit never shortens the schedule
    last_span = span;
    // never longer than ZB-H1's or 1F1B's graph form where that fits the limit
    const pt::stage_dag g{5, params.edges};
    for (const pt::program& other : {pt::make_zb_h1(5, 8, g), pt::make_one_f_one_b(5, 8, g)})
      if (pt::build_plan(other, {.mem_limit = limit}).ok())
        CHECK(span <= pt::simulate(other.view(), params.cost).max_rank_span());
  }
  params.mem_limit = 1;  // below the head's two inputs of one microbatch
  CHECK_THROWS_WITH_AS(pt::make_schedule("zb-auto", 5, 8, 0, params), doctest::Contains("fan-in holds one per input"),
                       std::invalid_argument);
}

TEST_CASE("zb_auto: by name with stage weights (an uneven layout), it searches under them") {
  // E,t*2 | t*6 | t*2 | t*2,L: stage 1 holds three times the layers of the others
  const pt::costs layer{.f = 1, .b = 2};
  const std::vector<double> weights{2.5, 6, 2, 2.5};
  pt::cost_model real{layer};
  for (int s = 0; s < 4; ++s) real.stage_scale(s, weights[static_cast<std::size_t>(s)]);
  pt::schedule_params params;
  params.cost = layer;
  params.mem_limit = 3;  // unlimited, both reach the heavy rank's busy time; under a limit they part
  params.stage_scale = weights;
  const pt::program aware = pt::make_schedule("zb-auto", 4, 8, 0, params);
  params.stage_scale.clear();
  const pt::program blind = pt::make_schedule("zb-auto", 4, 8, 0, params);
  const double aware_span = pt::simulate(aware.view(), real).max_rank_span();
  const double blind_span = pt::simulate(blind.view(), real).max_rank_span();
  MESSAGE("rank span under the layout: searched with its weights " << aware_span << ", without " << blind_span);
  CHECK(aware_span == 144);  // the heavy rank's busy time, 8 × 6 × (1 + 2): no bubble there
  CHECK(aware_span < blind_span);
  CHECK(pt::build_plan(aware, {.mem_limit = 3}).ok());
  // over a graph the weights follow the stages to their ranks (the search's order is the graph's)
  params.stage_scale = weights;
  params.edges = {{0, 2}, {1, 2}, {2, 3}};
  const pt::program graph = pt::make_schedule("zb-auto", 4, 8, 0, params);
  CHECK(pt::build_plan(graph, {.mem_limit = 3}).ok());
  const double graph_span = pt::simulate(graph.view(), real).max_rank_span();
  params.stage_scale.clear();
  CHECK(graph_span <= pt::simulate(pt::make_schedule("zb-auto", 4, 8, 0, params).view(), real).max_rank_span());
}

TEST_CASE("zb_auto: stage weights pick the placement they name when both are tried") {
  pt::schedule_params params;
  params.placement = pt::search_placement::automatic;
  params.stage_scale = {1, 2, 2, 1};  // p stages: one per rank
  CHECK(pt::make_schedule("zb-auto", 4, 8, 0, params).stages == 4);
  params.stage_scale = {1, 2, 2, 1, 1, 2, 2, 1};  // 2p: the V
  CHECK(pt::make_schedule("zb-auto", 4, 8, 0, params).stages == 8);
}

}  // namespace test_zb_auto
}  // namespace
