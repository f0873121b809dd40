// bind/layout.hpp: slot strides and the order weight-gradient sums are made in, over the stash and
// weight-gradient slots of the lowering (compile/saved_slots.hpp).
#include <pipetype/bind/layout.hpp>
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
  CHECK(pt::detail::layout_of(plan.compute(), ops, pt::entries_of(model)).stash_stride ==
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

}  // namespace test_layout
}  // namespace
