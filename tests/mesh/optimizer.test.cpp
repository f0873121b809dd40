// The optimizer in the step (dp_options::optimizer, zero): OPT_STEP, each stage's optimizer hook
// after the reductions it needs and its stage's last compute, and ZeRO-1's PARAM_SYNC, the
// all-gather after it; their placement over every schedule, their refusals, their proof.
#include <pipetype/mesh/plan.hpp>
#include <pipetype/mesh/simulate.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include "collective_cases.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_optimizer {

namespace pt = pipetype;

using collective_cases::misplaced;
bool says(const std::string& why, const char* what) { return why.find(what) != std::string::npos; }

// where in `c`'s rank r the first collective of kind k (of stage s; −1: any) is; −1: none
int find(const pt::collective_program& c, int r, pt::collective_kind k, int s = -1) {
  return collective_cases::first_of(c.begin, c.ops, r,
                                    [&](const pt::collective& x) { return x.what == k && (s < 0 || x.stage == s); });
}

TEST_CASE("optimizer: an OPT_STEP a stage after its reduction and last compute, PARAM_SYNC after it with ZeRO-1") {
  enum class mode { plain, zero, fsdp };
  for (const collective_cases::shape& sh : collective_cases::shapes)
    for (const int dp : {1, 2, 3})
      for (const mode md : {mode::plain, mode::zero, mode::fsdp})
        for (const bool tie : {false, true})
          for (const bool norm : {false, true}) {
            CAPTURE(sh.name);
            CAPTURE(dp);
            CAPTURE(static_cast<int>(md));
            CAPTURE(tie);
            CAPTURE(norm);
            const pt::runtime_plan plan = collective_cases::plan_of(sh);
            REQUIRE(plan.ok());
            const pt::program_view p = plan.compute();
            pt::dp_options o{.dp = dp, .shard = md == mode::fsdp, .grad_norm = norm};
            if (md == mode::zero)
              o.zero = 1;
            else
              o.optimizer = true;
            if (tie) o.ties = {{0, p.stages - 1}};
            const pt::collective_program c = pt::place_collectives(p, o);
            REQUIRE(misplaced(p, c, o).empty());
            for (int r = 0; r < p.ranks; ++r) {
              const std::span<const pt::action> acts = p.rank_actions(r);
              std::vector<int> held;
              for (const pt::action& a : acts)
                if (std::find(held.begin(), held.end(), a.stage) == held.end()) held.push_back(a.stage);
              for (const int s : held) {
                int last = -1;
                for (int k = 0; k < static_cast<int>(acts.size()); ++k)
                  if (acts[static_cast<std::size_t>(k)].stage == s) last = k;
                const int step = find(c, r, pt::collective_kind::optimizer_step, s);
                REQUIRE(step >= 0);
                CHECK(c.ops[static_cast<std::size_t>(step)].after >= last);
                CHECK(step > find(c, r, pt::collective_kind::reduce_grad, s));  // (−1 with one replica)
                if (norm) CHECK(step > find(c, r, pt::collective_kind::grad_norm));
                const int sync = find(c, r, pt::collective_kind::param_sync, s);
                CHECK((sync >= 0) == (md == mode::zero && dp > 1));
                if (sync >= 0) CHECK(sync == step + 1);
              }
            }
            const pt::mesh_program mp = pt::build_mesh(p, plan.lowered(), pt::mesh{p.ranks, dp}, o);
            CHECK(pt::verify_mesh(mp).ok());
            const auto count = [&](pt::mesh_op_code k, bool of_stage) {
              return std::count_if(mp.ops.begin(), mp.ops.end(),
                                   [&](const pt::mesh_op& x) { return x.code == k && (x.stage >= 0) == of_stage; });
            };
            const long per_stage = dp > 1 ? static_cast<long>(p.stages) * dp : 0;  // a reduction a stage a replica
            CHECK(count(pt::mesh_op_code::optimizer_step, true) == static_cast<long>(p.stages) * dp);
            CHECK(count(pt::mesh_op_code::param_sync, true) == (md == mode::zero ? per_stage : 0));
            CHECK(count(pt::mesh_op_code::all_reduce, true) == (md == mode::plain ? per_stage : 0));
            CHECK(count(pt::mesh_op_code::reduce_scatter, true) == (md == mode::plain ? 0 : per_stage));
          }
}

TEST_CASE("optimizer: without GRAD_NORM an OPT_STEP follows its own stage's reduction, overlapping the others'") {
  // interleaved: each rank's stage of the later chunk finishes its backward first; its OPT_STEP
  // then comes before the earlier chunk's last backward, not at the step's end
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("interleaved-1f1b", 2, 4, 2));
  const pt::program_view p = plan.compute();
  const pt::dp_options o{.dp = 2, .zero = 1};
  const pt::collective_program c = pt::place_collectives(p, o);
  REQUIRE(misplaced(p, c, o).empty());
  const int n = static_cast<int>(p.rank_actions(0).size());
  int early = 0;
  for (int i = c.begin[0]; i < c.begin[1]; ++i)
    if (c.ops[static_cast<std::size_t>(i)].what == pt::collective_kind::optimizer_step)
      early += c.ops[static_cast<std::size_t>(i)].after < n - 1;
  CHECK(early == 1);
}

TEST_CASE("optimizer: misplaced OPT_STEPs and PARAM_SYNCs, and options that cannot be, are refused") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  const pt::program_view p = plan.compute();
  const pt::dp_options o{.dp = 2, .zero = 1};
  const pt::collective_program placed = pt::place_collectives(p, o);
  REQUIRE(misplaced(p, placed, o).empty());
  // rank 0's list: REDUCE_GRAD(0), OPT_STEP(0), PARAM_SYNC(0), all after its last action
  REQUIRE(placed.begin[1] == 3);
  REQUIRE(placed.ops[1].what == pt::collective_kind::optimizer_step);
  auto edited = [&](auto&& edit) {
    pt::collective_program c = placed;
    edit(c);
    return c;
  };
  auto erase = [](pt::collective_program& c, int i) {
    c.ops.erase(c.ops.begin() + i);
    for (std::size_t r = 1; r < c.begin.size(); ++r)
      if (c.begin[r] > i) --c.begin[r];
  };
  CHECK(says(misplaced(p, edited([](pt::collective_program& c) { std::swap(c.ops[0], c.ops[1]); }), o),
             "an OPT_STEP before its stage's REDUCE_GRAD: it would step with an unreduced gradient"));
  CHECK(says(misplaced(p, edited([](pt::collective_program& c) { std::swap(c.ops[1], c.ops[2]); }), o),
             "a PARAM_SYNC before its stage's OPT_STEP: it would gather parameters not updated yet"));
  CHECK(says(misplaced(p, edited([&](pt::collective_program& c) { erase(c, 2); }), o),
             "a ZeRO-1 stage without PARAM_SYNC: each replica would keep only its own shard updated"));
  CHECK(says(misplaced(p, edited([&](pt::collective_program& c) { erase(c, 2), erase(c, 1); }), o),
             "a stage with weight backwards and no OPT_STEP: its parameters would not be updated"));
  CHECK(says(misplaced(p, placed, {.dp = 2}), "an OPT_STEP without dp_options::optimizer (or zero)"));
  CHECK(says(misplaced(p, placed, {.dp = 2, .optimizer = true}),
             "a PARAM_SYNC without ZeRO-1 over replicas (dp_options::zero)"));
  CHECK(says(misplaced(p, edited([](pt::collective_program& c) {
                         c.ops.insert(c.ops.begin() + 2, c.ops[1]);
                         for (std::size_t r = 1; r < c.begin.size(); ++r) ++c.begin[r];
                       }),
                       o),
             "a second OPT_STEP of the stage"));
  // one replica: an OPT_STEP moved before the rank's last backward of its stage
  const pt::dp_options alone{.dp = 1, .optimizer = true};
  pt::collective_program early = pt::place_collectives(p, alone);
  REQUIRE(early.ops.size() == 2);
  early.ops[0].after = 0;
  CHECK(says(misplaced(p, early, alone),
             "a compute action after its stage's OPT_STEP: it would read parameters the step updated"));
  // with GRAD_NORM: an OPT_STEP before it
  const pt::dp_options normed{.dp = 2, .grad_norm = true, .zero = 1};
  pt::collective_program first = pt::place_collectives(p, normed);
  REQUIRE(misplaced(p, first, normed).empty());
  REQUIRE(first.ops[1].what == pt::collective_kind::grad_norm);
  std::swap(first.ops[1], first.ops[2]);
  CHECK(says(misplaced(p, first, normed), "an OPT_STEP before the rank's GRAD_NORM: clipping needs the global norm"));
  // options
  CHECK(says(misplaced(p, placed, {.dp = 2, .zero = 2}), "a ZeRO stage other than 0 or 1"));
  CHECK(says(misplaced(p, placed, {.dp = 2, .shard = true, .zero = 1}), "ZeRO-1 with FSDP"));
  CHECK_THROWS_WITH_AS(pt::lower_mesh(p, plan.lowered(), {2, 2}, placed, {.dp = 2, .zero = 3}),
                       doctest::Contains("a ZeRO stage other than 0 or 1"), std::invalid_argument);
}

// global rank g's first op of code k (of stage s; −1: any), as an index into mp.ops; −1: none
int op_of(const pt::mesh_program& mp, int g, pt::mesh_op_code k, int s = -1) {
  return collective_cases::first_of(mp.begin, mp.ops, g,
                                    [&](const pt::mesh_op& x) { return x.code == k && (s < 0 || x.stage == s); });
}

TEST_CASE("optimizer: the proof refuses an OPT_STEP not ordered after its stage's compute or reduction") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  const pt::program_view p = plan.compute();
  const pt::dp_options o{.dp = 2, .grad_norm = true, .zero = 1};
  const pt::mesh_program mp = pt::build_mesh(p, plan.lowered(), pt::mesh{2, 2}, o);
  REQUIRE(pt::verify_mesh(mp).ok());
  const int step = op_of(mp, 0, pt::mesh_op_code::optimizer_step, 0);
  const int sync = op_of(mp, 0, pt::mesh_op_code::param_sync, 0);
  REQUIRE(step >= 0);
  REQUIRE(sync == step + 1);
  // on the copy stream, ordered after nothing: it may run while the stage still computes
  pt::mesh_program loose = mp;
  loose.ops[static_cast<std::size_t>(step)].stream = pt::copy_stream;
  const pt::verdict v = pt::verify_mesh(loose);
  REQUIRE_FALSE(v.ok());
  CHECK(v.code == pt::errc::event_misuse);
  CHECK(says(pt::describe(v), "an OPT_STEP may update its stage's parameters while a compute of the stage reads them"));
  // PARAM_SYNC and OPT_STEP swapped: the gather may come first
  pt::mesh_program swapped = mp;
  std::swap(swapped.ops[static_cast<std::size_t>(step)], swapped.ops[static_cast<std::size_t>(sync)]);
  CHECK(says(pt::describe(pt::verify_mesh(swapped)),
             "a PARAM_SYNC may gather its stage's parameters before their OPT_STEP completes"));
  // before the GRAD_NORM on its stream: the norm it clips by is not known yet
  pt::mesh_program unclipped = mp;
  const int norm = op_of(mp, 0, pt::mesh_op_code::grad_norm);
  REQUIRE(norm >= 0);
  REQUIRE(norm < step);
  std::swap(unclipped.ops[static_cast<std::size_t>(norm)], unclipped.ops[static_cast<std::size_t>(step)]);
  CHECK(says(pt::describe(pt::verify_mesh(unclipped)), "an OPT_STEP may run before the rank's GRAD_NORM completes"));
}

TEST_CASE("optimizer: ZeRO-1's reduce-scatter and all-gather cost what the all-reduce did, the gather exposed") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 8));
  const pt::program_view p = plan.compute();
  const pt::costs cost{.f = 1, .b = 2};
  const pt::mesh_costs d{.param_bytes = {8}, .bandwidth = 1};
  const pt::dp_options plain{.dp = 2}, zero{.dp = 2, .zero = 1};
  const double a = pt::exposed_dp(p, plan.lowered(), {4, 2}, pt::place_collectives(p, plain), plain, cost, d);
  const double b = pt::exposed_dp(p, plan.lowered(), {4, 2}, pt::place_collectives(p, zero), zero, cost, d);
  // rank 0's stage ends the step: its all-reduce moves 2·(1/2)·8 = 8; ZeRO-1's reduce-scatter and
  // all-gather (1/2)·8 = 4 each, one after the other behind the backward
  CHECK(a == doctest::Approx(8));
  CHECK(b == doctest::Approx(8));
  // the optimizer in the step at 4 bytes a time unit: plain, each replica updates all 8 bytes (2
  // more); ZeRO-1, its shard of 4 (1 more), between the reduce-scatter and the gather
  pt::mesh_costs timed = d;
  timed.optimizer_bandwidth = 4;
  const pt::dp_options stepped{.dp = 2, .optimizer = true};
  CHECK(pt::exposed_dp(p, plan.lowered(), {4, 2}, pt::place_collectives(p, stepped), stepped, cost, timed) ==
        doctest::Approx(10));
  CHECK(pt::exposed_dp(p, plan.lowered(), {4, 2}, pt::place_collectives(p, zero), zero, cost, timed) ==
        doctest::Approx(9));
}

// the compile-time plan: zero<1> and with_optimizer as options
using zero1 = pt::mesh_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>, pt::mesh_t<4, 2>, pt::zero<1>>;
static_assert(zero1::facts.rejection.ok());
static_assert(zero1::facts.collectives == 2 * 4 * 2);  // REDUCE_GRAD, PARAM_SYNC a stage a replica (OPT_STEP: local)
static_assert(zero1::options().zero == 1);
using stepped = pt::mesh_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>, pt::mesh_t<4, 2>, pt::with_optimizer,
                              pt::with_grad_norm>;
static_assert(stepped::facts.rejection.ok());
static_assert(stepped::facts.collectives == 4 * 2 * 2);  // REDUCE_GRAD and GRAD_NORM a global rank

}  // namespace test_optimizer
}  // namespace
