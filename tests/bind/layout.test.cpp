// bind/layout.hpp: slot strides and the order weight-gradient sums are made in, over the stash and
// weight-gradient slots of the lowering (compile/saved_slots.hpp); a stage type's sizes as
// constants (stage_bytes_of) equal to its bound entry's, and the host binding allocating exactly
// the pools the plan counts (compile/pool_bytes.hpp).
#include <pipetype/bind/layout.hpp>
#include <pipetype/host/binding.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <span>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_layout {

namespace pt = pipetype;

namespace {

struct quiet {
  using input = pt::tensor<float, 16>;
  using output = pt::tensor<float, 16>;
  using stash = pt::tensor<float, 8>;
  using weight_grad = pt::tensor<float, 4>;
  float grads[4] = {};
  std::span<float> weight_gradients() { return grads; }
  void forward(const pt::forward_ctx<quiet>&) {}
  void backward(const pt::backward_ctx<quiet>&) {}
  void backward_input(const pt::backward_ctx<quiet>&) {}
  void backward_weight(const pt::backward_ctx<quiet>&) {}
};

}  // namespace

TEST_CASE("layout: the halves of a B&F pair never share a stash slot (they may run at once)") {
  // the first half frees its stash at its last use; the second half's F must not take it
  const auto plan = pt::build_plan(pt::parse_schedule("0F0,(0B0;0F1),0B1"));
  REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
  pt::uniform_chain<quiet> model(std::vector<quiet>(1));
  const auto ops = plan.lowered().rank_ops(0);
  int b0 = -1, f1 = -1;
  for (const pt::lowered_op& o : ops) {
    if (o.code != pt::op_code::compute) continue;
    if (o.what == pt::kind::B && o.microbatch == 0) b0 = o.stash_slot;
    if (o.what == pt::kind::F && o.microbatch == 1) f1 = o.stash_slot;
  }
  REQUIRE(b0 >= 0);
  REQUIRE(f1 >= 0);
  CHECK(b0 != f1);
  CHECK(plan.lowered().resources[0].stash_slots == 2);
  CHECK(pt::detail::layout_of(plan.compute(), ops, plan.lowered().resources[0], pt::entries_of(model)).stash_stride ==
        64);  // 8 floats, a cache line
  // without the pair the slot is reused
  const auto serial = pt::build_plan(pt::parse_schedule("0F0,0B0,0F1,0B1"));
  REQUIRE(serial.ok());
  CHECK(serial.lowered().resources[0].stash_slots == 1);
}

TEST_CASE("layout: out-of-order backwards are held and added in microbatch order") {
  // rank 0 runs B1 before B0: B1's gradient waits in a slot until B0's is added
  const auto plan = pt::build_plan(pt::parse_schedule("0F0,0F1,0B1,0B0"));
  REQUIRE(plan.ok());
  pt::uniform_chain<quiet> model(std::vector<quiet>(1));
  const auto ops = plan.lowered().rank_ops(0);
  const pt::detail::weight_grad_plan wg =
      pt::detail::plan_weight_grads(ops, plan.lowered().resources[0], pt::entries_of(model));
  int b1 = -1, b0 = -1;
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].code == pt::op_code::compute && ops[i].what == pt::kind::B) (ops[i].microbatch == 1 ? b1 : b0) = int(i);
  REQUIRE(b0 >= 0);
  REQUIRE(b1 >= 0);
  CHECK(wg.adds[static_cast<std::size_t>(b1)].empty());  // microbatch 0 not made yet
  REQUIRE(wg.adds[static_cast<std::size_t>(b0)].size() == 2);
  CHECK(wg.adds[static_cast<std::size_t>(b0)][0] == wg.slot[static_cast<std::size_t>(b0)]);  // 0 first, then 1
  CHECK(wg.adds[static_cast<std::size_t>(b0)][1] == wg.slot[static_cast<std::size_t>(b1)]);
  CHECK(wg.offset.size() == 2);
  CHECK(wg.bytes == 2 * 64);
  CHECK(wg.later.empty());
}

TEST_CASE("layout: a later lane's weight gradients are held to the step's end") {
  const auto plan = pt::build_plan(pt::make_dualpipe(2, 4));
  REQUIRE(plan.ok());
  pt::uniform_chain<quiet> model(std::vector<quiet>(2));
  int later = 0;
  for (int r = 0; r < 2; ++r)
    later += static_cast<int>(pt::detail::plan_weight_grads(plan.lowered().rank_ops(r),
                                                            plan.lowered().resources[static_cast<std::size_t>(r)],
                                                            pt::entries_of(model))
                                  .later.size());
  CHECK(later == 2 * 2);  // lane 1: 2 stages × 2 microbatches (half of m runs each direction)
}

// a set with a no_grad member, per-edge inputs: their blocks packed at 64 bytes
struct towers {
  using inputs =
      pt::per_edge<pt::tensor<float, 3>, pt::tensors<pt::tensor<float, 40>, pt::no_grad<pt::tensor<int, 2>>>>;
  using output = pt::tensor<double, 5>;
  void forward(const pt::forward_ctx<towers>&) {}
  void backward(const pt::backward_ctx<towers>&) {}
};
static_assert(pt::stage_bytes_of<quiet>() == pt::stage_bytes{64, 64, 64, 64, 0, 0, 32, 16});
static_assert(pt::stage_bytes_of<towers>() == pt::stage_bytes{12, 40, 12, 40, 192 + 8, 160, 0, 0});

TEST_CASE("layout: a stage type's sizes are its bound entry's") {
  quiet q;
  CHECK(pt::detail::bytes_of(pt::detail::entry_of(q)) == pt::stage_bytes_of<quiet>());
  towers t;
  CHECK(pt::detail::bytes_of(pt::detail::entry_of(t)) == pt::stage_bytes_of<towers>());
}

TEST_CASE("layout: the host binding allocates the pools the plan counts") {
  constexpr pt::stage_bytes sizes[] = {pt::stage_bytes_of<quiet>()};
  for (const char* name : {"1f1b", "gpipe", "interleaved-1f1b", "zb-h1", "dualpipe-v"}) {
    const auto plan = pt::build_plan(pt::make_schedule(name, 4, 8));
    REQUIRE_MESSAGE(plan.ok(), name);
    const int stages = plan.compute().stages / (plan.compute().lanes > 1 ? plan.compute().lanes : 1);
    pt::uniform_chain<quiet> model(std::vector<quiet>(static_cast<std::size_t>(stages)));
    const pt::host::bound_program bound = pt::host::bind(pt::views_of(plan), pt::entries_of(model));
    for (int r = 0; r < plan.compute().ranks; ++r) {
      const pt::rank_pools want = pt::pools_of(plan, r, sizes);
      const pt::host::bound_rank& br = bound.rank[static_cast<std::size_t>(r)];
      CHECK_MESSAGE(br.activations.size() == want.activations, name, " rank ", r);
      CHECK_MESSAGE(br.gradients.size() == want.gradients, name, " rank ", r);
      CHECK_MESSAGE(br.stashes.size() == want.stashes, name, " rank ", r);
      CHECK_MESSAGE(br.weight_grads.size() == want.weight_grads, name, " rank ", r);
      CHECK(want.stashes > 0);
    }
  }
}

}  // namespace test_layout
}  // namespace
