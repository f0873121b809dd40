// Gradient buckets (dp_options::buckets, mesh/lower.hpp): each stage's REDUCE_GRAD as N
// all-reduces of bucket_of's parts, each waiting for the event its stage's last weight backward
// records once it has written that bucket; their proof, their timing, their refusals.
#include <pipetype/mesh/plan.hpp>
#include <pipetype/mesh/simulate.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_buckets {

namespace pt = pipetype;

pt::mesh_program bucketed_step(const pt::runtime_plan& plan, int buckets, int dp = 2) {
  const pt::dp_options o{.dp = dp, .buckets = buckets};
  return pt::build_mesh(plan.compute(), plan.lowered(), pt::mesh{plan.compute().ranks, dp}, o);
}

// a schedule at a size: its name, ranks, microbatches and stages a rank
struct shape {
  const char* name;
  int ranks, microbatches, stages_per_rank;
};

std::string refusal_of(const pt::mesh_program& mp) {
  const pt::verdict v = pt::verify_mesh(mp);
  return v.ok() ? std::string() : pt::describe(v);
}

TEST_CASE("bucket_of: N parts from the array's end, contiguous, none empty while N <= n") {
  CHECK(pt::bucket_of(8, 4, 0) == pt::shard_range{6, 8});
  CHECK(pt::bucket_of(8, 4, 3) == pt::shard_range{0, 2});
  CHECK(pt::bucket_of(5, 1, 0) == pt::shard_range{0, 5});
  for (const std::size_t n : {1u, 3u, 5u, 8u, 1000003u})
    for (int k = 1; k <= 7; ++k) {
      std::size_t end = n, smallest = n, largest = 0;
      for (int b = 0; b < k; ++b) {
        const pt::shard_range r = pt::bucket_of(n, k, b);
        CHECK(r.end == end);  // bucket b + 1 ends where bucket b begins
        end = r.begin;
        smallest = std::min(smallest, r.size());
        largest = std::max(largest, r.size());
      }
      CHECK(end == 0);
      CHECK(largest - smallest <= 1);
      if (static_cast<std::size_t>(k) <= n) CHECK(smallest >= 1);
    }
}

TEST_CASE("buckets: each REDUCE_GRAD is N all-reduces in bucket order, each after its event of the last backward") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 8));
  REQUIRE(plan.ok());
  const pt::mesh_program mp = bucketed_step(plan, 4);
  CHECK(mp.buckets == 4);
  CHECK(refusal_of(mp).empty());
  for (int g = 0; g < mp.shape.size(); ++g) {
    CAPTURE(g);
    const std::span<const pt::mesh_op> ops = mp.rank_ops(g);
    int backward = -1, next_bucket = 0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const pt::mesh_op& o = ops[i];
      if (o.bucket_event >= 0) {
        CHECK(backward < 0);  // one stage a rank: one backward records buckets
        CHECK(o.code == pt::mesh_op_code::compute);
        CHECK(o.what == pt::kind::B);
        backward = static_cast<int>(i);
      }
      if (o.code != pt::mesh_op_code::all_reduce) continue;
      REQUIRE(backward >= 0);
      CHECK(o.bucket == next_bucket);
      // the op before it: the dp stream's wait on the backward's bucket event
      REQUIRE(i > 0);
      CHECK(ops[i - 1].code == pt::mesh_op_code::wait);
      CHECK(ops[i - 1].stream == pt::dp_stream);
      CHECK(ops[i - 1].event == ops[static_cast<std::size_t>(backward)].bucket_event + next_bucket);
      ++next_bucket;
    }
    CHECK(next_bucket == 4);
    // the backward is the stage's last: no compute of the stage after it
    for (std::size_t i = static_cast<std::size_t>(backward) + 1; i < ops.size(); ++i)
      CHECK(ops[i].code != pt::mesh_op_code::compute);
  }
  // one bucket: the step as it was, no bucket fields
  const pt::mesh_program one = bucketed_step(plan, 1);
  const pt::mesh_program plain =
      pt::build_mesh(plan.compute(), plan.lowered(), pt::mesh{4, 2}, pt::dp_options{.dp = 2});
  CHECK((one.ops == plain.ops && one.events == plain.events && one.buckets == 1));
  for (const pt::mesh_op& o : one.ops) CHECK((o.bucket == -1 && o.bucket_event == -1));
}

TEST_CASE("buckets: every one-lane schedule proves with 1 to 4 buckets, tied, sharded, ZeRO-1, several stages a rank") {
  const shape shapes[] = {{"1f1b", 4, 8, 1},       {"gpipe", 3, 6, 1}, {"interleaved-1f1b", 2, 4, 2},
                          {"looped-bfs", 2, 4, 3}, {"zb-h1", 3, 6, 1}, {"zb-h2", 3, 6, 1},
                          {"zb-v", 2, 4, 2},       {"v-half", 2, 4, 2}};
  for (const shape& sh : shapes)
    for (int buckets = 1; buckets <= 4; ++buckets)
      for (const bool tie : {false, true})
        for (const int scatter : {0, 1, 2}) {  // plain, FSDP, ZeRO-1: the last two a reduce-scatter a bucket
          CAPTURE(sh.name);
          CAPTURE(buckets);
          CAPTURE(tie);
          CAPTURE(scatter);
          const pt::runtime_plan plan =
              pt::build_plan(pt::make_schedule(sh.name, sh.ranks, sh.microbatches, sh.stages_per_rank));
          REQUIRE(plan.ok());
          pt::dp_options o{.dp = 2, .shard = scatter == 1, .buckets = buckets, .zero = scatter == 2 ? 1 : 0};
          if (tie) o.ties = {{0, plan.compute().stages - 1}};
          const pt::mesh_program mp =
              pt::build_mesh(plan.compute(), plan.lowered(), pt::mesh{plan.compute().ranks, 2}, o);
          CHECK(refusal_of(mp).empty());
          const pt::mesh_op_code code = scatter ? pt::mesh_op_code::reduce_scatter : pt::mesh_op_code::all_reduce;
          int reductions = 0;
          for (const pt::mesh_op& x : mp.ops) reductions += x.code == code && x.tie < 0;
          CHECK(reductions == plan.compute().stages * 2 * buckets);
        }
}

TEST_CASE("buckets: the reduction hides behind the backward it waits for, all but its first bucket") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 8));
  const pt::program_view p = plan.compute();
  const pt::costs cost{.f = 1, .b = 2};
  // one all-reduce of a stage takes 5 (2(n−1)/n = 1 at n = 2); rank 0's last B takes 2 and ends
  // the step: bucket b is ready at (b + 1)/N of it, so N buckets show 2/N + 5 − 2
  const pt::mesh_costs d{.param_bytes = {5}, .bandwidth = 1};
  const double expected[] = {5, 4, 2.0 / 3 + 3, 3.5};
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    const pt::dp_options o{.dp = 2, .buckets = n};
    CHECK(pt::exposed_dp(p, plan.lowered(), {.pp = 4, .dp = 2}, pt::place_collectives(p, o), o, cost, d) ==
          doctest::Approx(expected[n - 1]));
  }
  // each bucket pays its own α: at α = 0.1, four buckets of 1.35 from 0.5 on end 5.9 after the B
  // starts (3.9 shown), one of 5.1 from its end
  const pt::mesh_costs a{.param_bytes = {5}, .bandwidth = 1, .alpha = 0.1};
  const pt::dp_options four{.dp = 2, .buckets = 4}, one{.dp = 2};
  CHECK(pt::exposed_dp(p, plan.lowered(), {.pp = 4, .dp = 2}, pt::place_collectives(p, four), four, cost, a) ==
        doctest::Approx(3.9));
  CHECK(pt::exposed_dp(p, plan.lowered(), {.pp = 4, .dp = 2}, pt::place_collectives(p, one), one, cost, a) ==
        doctest::Approx(5.1));
}

TEST_CASE("buckets: refused below one and above the limit, and replicas that disagree on a bucket") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  const pt::program_view p = plan.compute();
  auto refusal = [&](const pt::dp_options& o) {
    const pt::verdict v = pt::check_collectives(p, pt::place_collectives(p, o), o);
    return v.ok() ? std::string() : pt::describe(v);
  };
  CHECK(refusal({.dp = 2, .buckets = 0}).find("a gradient reduction in fewer than one bucket") != std::string::npos);
  CHECK(refusal({.dp = 2, .buckets = 1025}).find("more than 1024 buckets") != std::string::npos);
  CHECK(refusal({.dp = 2, .shard = true, .buckets = 2}).empty());  // (a reduce-scatter a bucket)
  CHECK(refusal({.dp = 2, .buckets = 2, .zero = 1}).empty());
  CHECK(refusal({.dp = 2, .buckets = 1024}).empty());
  CHECK_THROWS_WITH_AS(pt::build_mesh(p, plan.lowered(), {.pp = 2, .dp = 2}, {.dp = 2, .buckets = 0}),
                       doctest::Contains("fewer than one bucket"), std::invalid_argument);
  // one replica issues its buckets in another order: the communicator's members disagree
  pt::mesh_program mp = bucketed_step(plan, 2);
  REQUIRE(refusal_of(mp).empty());
  const int g = mp.shape.global(0, 1);
  for (int i = mp.begin[static_cast<std::size_t>(g)]; i < mp.begin[static_cast<std::size_t>(g) + 1]; ++i)
    if (pt::mesh_op& o = mp.ops[static_cast<std::size_t>(i)]; o.bucket >= 0) o.bucket = 1 - o.bucket;
  CHECK(refusal_of(mp).find("members of a communicator issue different collectives") != std::string::npos);
  // a bucket the step does not have, bucket events on a forward
  pt::mesh_program past = bucketed_step(plan, 2);
  for (pt::mesh_op& o : past.ops)
    if (o.bucket == 1) o.bucket = 2;
  CHECK(refusal_of(past).find("a collective of a bucket the step does not have") != std::string::npos);
  pt::mesh_program on_f = bucketed_step(plan, 2);
  for (pt::mesh_op& o : on_f.ops)
    if (o.bucket_event >= 0) o.what = pt::kind::F;
  CHECK(refusal_of(on_f).find("bucket events on an op that is no weight backward") != std::string::npos);
}

// the compile-time plan: bucketed<N> as an option, its collectives counted
using bucketed_1f1b =
    pt::mesh_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>, pt::mesh_t<4, 2>, pt::bucketed<3>>;
static_assert(bucketed_1f1b::facts.rejection.ok());
static_assert(bucketed_1f1b::facts.collectives == 4 * 2 * 3);
static_assert(bucketed_1f1b::options().buckets == 3);

}  // namespace test_buckets
}  // namespace
