#include "../schedules/sweep.hpp"

#include <doctest/doctest.h>

#include <map>
#include <tuple>

namespace pt = pipetype;

namespace {
pt::runtime_plan plan_of(pt::program p, pt::comm_policy c = pt::comm_policy::per_edge) {
  pt::plan_options o;
  o.comms = c;
  return pt::build_plan(std::move(p), o);
}
}  // namespace

TEST_CASE("lower: every schedule in the sweep lowers and verifies under both communicator policies") {
  for (const auto policy : {pt::comm_policy::per_edge, pt::comm_policy::per_rank_pair})
    sweep::for_each_builtin(6, 12, 3, [&](const pt::program& prog, int) { CHECK(plan_of(prog, policy).ok()); });
}

TEST_CASE("lower: one transfer each way per crossing edge and microbatch, matched send/recv") {
  const pt::runtime_plan plan = plan_of(pt::make_interleaved_1f1b(2, 4, 2));
  REQUIRE(plan.ok());
  const pt::lowered_view L = plan.lowered.view();
  std::map<std::tuple<int, int, int>, int> sends, recvs;  // (kind, stage, mb)
  for (int r = 0; r < L.ranks; ++r)
    for (const pt::lowered_op& o : L.rank_ops(r)) {
      if (o.code == pt::op_code::send) ++sends[{static_cast<int>(o.what), o.stage, o.microbatch}];
      if (o.code == pt::op_code::recv) ++recvs[{static_cast<int>(o.what), o.stage, o.microbatch}];
    }
  // 4 stages on 2 ranks: edges 0→1, 1→2, 2→3 all cross; 4 microbatches; both directions
  CHECK(sends.size() == 3 * 4 * 2);
  CHECK(sends == recvs);
  for (const auto& [k, n] : sends) CHECK(n == 1);
  CHECK(L.comms.size() == 3);  // one per edge
  CHECK(plan_of(pt::make_interleaved_1f1b(2, 4, 2), pt::comm_policy::per_rank_pair).lowered.comms.size() == 1);
}

TEST_CASE("lower: groups hold only transfers; every compute op reads the slots its producer wrote") {
  const pt::runtime_plan plan = plan_of(pt::make_one_f_one_b(3, 4));
  REQUIRE(plan.ok());
  const pt::lowered_view L = plan.lowered.view();
  for (int r = 0; r < L.ranks; ++r) {
    bool in_group = false;
    int computes = 0;
    for (const pt::lowered_op& o : L.rank_ops(r)) {
      if (o.code == pt::op_code::group)
        in_group = true;
      else if (o.code == pt::op_code::compute)
        in_group = false;
      else
        CHECK(in_group);  // every transfer follows its group op
      if (o.code == pt::op_code::compute) {
        ++computes;
        CHECK(o.stream == pt::stream_id::compute);
        if (o.stage > 0)
          CHECK(o.slot >= 0);
        else
          CHECK(o.slot == -1);  // stage 0 reads the batch
        if (o.what == pt::kind::F && o.stage < 2) CHECK(o.out_slot >= 0);
        if (o.what == pt::kind::B && o.stage < 2) CHECK(o.grad_slot >= 0);
        if (o.what == pt::kind::B && o.stage == 0) CHECK(o.out_slot == -1);
      } else {
        CHECK(o.stream == pt::stream_id::comm);
      }
    }
    CHECK(computes == 8);
    const pt::rank_resources& res = L.resources[static_cast<std::size_t>(r)];
    CHECK(res.events >= 1);
    CHECK(res.groups > 0);
  }
}

TEST_CASE("lower: a local hand-off needs no transfer") {
  // two stages on one rank
  const pt::runtime_plan plan = plan_of(pt::parse_schedule("0F0,1F0,1B0,0B0\n"));
  REQUIRE(plan.ok());
  const pt::lowered_view L = plan.lowered.view();
  CHECK(L.comms.empty());
  CHECK(L.ops.size() == 4);
  for (const pt::lowered_op& o : L.ops) CHECK((o.wait_event == -1 && o.record_event == -1));
  CHECK(L.ops[1].slot == L.ops[0].out_slot);       // 1F0 reads what 0F0 wrote
  CHECK(L.ops[3].grad_slot == L.ops[2].out_slot);  // 0B0 reads what 1B0 wrote
}

TEST_CASE("lower: slots are reused, so the pool is the peak of live buffers, not one per microbatch") {
  const pt::runtime_plan plan = plan_of(pt::make_one_f_one_b(4, 32));
  REQUIRE(plan.ok());
  for (const pt::rank_resources& res : plan.lowered.resources) {
    CHECK(res.activation_slots <= 8);
    CHECK(res.gradient_slots <= 4);
    CHECK(res.events <= 4);
  }
}
