#include "../schedules/sweep.hpp"

#include <doctest/doctest.h>

#include <map>
#include <tuple>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_lower {

namespace pt = pipetype;

namespace {
pt::runtime_plan plan_of(pt::program p, pt::comm_policy c = pt::comm_policy::per_edge,
                         pt::group_policy g = pt::group_policy::per_tick) {
  pt::plan_options o;
  o.comms = c;
  o.groups = g;
  return pt::build_plan(std::move(p), o);
}
}  // namespace

TEST_CASE("lower: every schedule in the sweep lowers and verifies under both communicator and group policies") {
  for (const auto policy : {pt::comm_policy::per_edge, pt::comm_policy::per_rank_pair})
    for (const auto groups : {pt::group_policy::per_tick, pt::group_policy::per_peer})
      sweep::for_each_builtin(6, 12, 3,
                              [&](const pt::program& prog, int) { CHECK(plan_of(prog, policy, groups).ok()); });
}

TEST_CASE("lower: group_policy::per_peer — one group per peer and tick, in the tick's one peer order on every rank") {
  for (const pt::program& prog : {pt::make_dualpipe_v(4, 8), pt::make_interleaved_1f1b(4, 8, 2)}) {
    const pt::runtime_plan tick = plan_of(prog),
                           peer = plan_of(prog, pt::comm_policy::per_edge, pt::group_policy::per_peer);
    REQUIRE(peer.ok());
    int groups_tick = 0, groups_peer = 0;
    for (const pt::rank_resources& r : tick.lowered().resources) groups_tick += r.groups;
    for (const pt::rank_resources& r : peer.lowered().resources) groups_peer += r.groups;
    CHECK(groups_peer > groups_tick);  // middle ranks talk to both neighbours in one tick
    const pt::lowered_view L = peer.lowered();
    // the direction each tick should take: by a vote of the transfers a compute of the same tick
    // reads (+1 when it comes from above), else by where most transfers go (+1: down); > 0 means
    // highest peer first
    std::map<int, int> lean, vote;
    std::map<int, int> direction;  // tick → +1 increasing peers, -1 decreasing, as met
    for (int r = 0; r < L.ranks; ++r) {
      std::map<std::tuple<int, int, int>, int> compute_tick;  // (kind F or B/I, stage, mb) → tick
      for (const pt::lowered_op& o : L.rank_ops(r))
        if (o.code == pt::op_code::compute && o.what != pt::kind::W)
          compute_tick[{o.what == pt::kind::F ? 0 : 1, o.stage, o.microbatch}] = o.tick;
      for (const pt::lowered_op& o : L.rank_ops(r)) {
        if (o.code == pt::op_code::send) lean[o.tick] += o.peer < r ? 1 : -1;
        if (o.code != pt::op_code::recv) continue;
        const bool act = o.what == pt::kind::F;
        const auto use = compute_tick.find({act ? 0 : 1, act ? o.stage + 1 : o.stage - 1, o.microbatch});
        REQUIRE(use != compute_tick.end());
        if (use->second == o.tick) vote[o.tick] += o.peer > r ? 1 : -1;
      }
    }
    bool both = false;
    for (int r = 0; r < L.ranks; ++r) {
      int last_tick = -1, last_peer = -1, group_peer = -1;
      for (const pt::lowered_op& o : L.rank_ops(r)) {
        if (o.code == pt::op_code::group) {
          group_peer = -2;  // set by its first transfer
          if (o.tick != last_tick) last_peer = -1;
          last_tick = o.tick;
        } else if (o.code == pt::op_code::send || o.code == pt::op_code::recv) {
          if (group_peer == -2) {
            if (last_peer >= 0) {  // a second group in this tick: a new peer, in the tick's order
              CAPTURE(o.tick);
              CHECK(o.peer != last_peer);
              const int d = o.peer > last_peer ? 1 : -1;
              const int want = vote[o.tick] != 0 ? vote[o.tick] : lean[o.tick];
              CHECK(d == (want > 0 ? -1 : 1));  // inputs read at once come from above: highest first
              auto [it, fresh] = direction.emplace(o.tick, d);
              CHECK(it->second == d);  // every rank takes the tick's peers in one order
              (void)fresh;
            }
            group_peer = last_peer = o.peer;
          }
          CHECK(o.peer == group_peer);  // every transfer of a group goes to one peer
        }
      }
    }
    for (const auto& [t, d] : direction) both = both || d < 0;
    CHECK(both);  // some tick takes its peers highest first (the backwards)
  }
}

TEST_CASE("lower: one transfer each way per crossing edge and microbatch, matched send/recv") {
  const pt::runtime_plan plan = plan_of(pt::make_interleaved_1f1b(2, 4, 2));
  REQUIRE(plan.ok());
  const pt::lowered_view L = plan.lowered();
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
  CHECK(plan_of(pt::make_interleaved_1f1b(2, 4, 2), pt::comm_policy::per_rank_pair).lowered().comms.size() == 1);
}

TEST_CASE("lower: groups hold only transfers, and every compute op reads the slots its producer wrote") {
  const pt::runtime_plan plan = plan_of(pt::make_one_f_one_b(3, 4));
  REQUIRE(plan.ok());
  const pt::lowered_view L = plan.lowered();
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
  const pt::lowered_view L = plan.lowered();
  CHECK(L.comms.empty());
  CHECK(L.ops.size() == 4);
  for (const pt::lowered_op& o : L.ops) CHECK((o.wait_event == -1 && o.record_event == -1));
  CHECK(L.ops[1].slot == L.ops[0].out_slot);       // 1F0 reads what 0F0 wrote
  CHECK(L.ops[3].grad_slot == L.ops[2].out_slot);  // 0B0 reads what 1B0 wrote
}

TEST_CASE("lower: slots are reused, so the pool is the peak of live buffers, not one per microbatch") {
  const pt::runtime_plan plan = plan_of(pt::make_one_f_one_b(4, 32));
  REQUIRE(plan.ok());
  for (const pt::rank_resources& res : plan.lowered().resources) {
    CHECK(res.activation_slots <= 8);
    CHECK(res.gradient_slots <= 4);
    CHECK(res.events <= 4);
  }
}

TEST_CASE("lower: group_policy::automatic is per_peer for programs with overlapped pairs, per_tick otherwise") {
  const pt::program dpv = pt::make_dualpipe_v(4, 8), dp = pt::make_dualpipe(4, 8), chain = pt::make_zb_h1(4, 8);
  CHECK(pt::resolve(pt::group_policy::automatic, dpv.view()) == pt::group_policy::per_peer);
  CHECK(pt::resolve(pt::group_policy::automatic, dp.view()) == pt::group_policy::per_peer);
  CHECK(pt::resolve(pt::group_policy::automatic, chain.view()) == pt::group_policy::per_tick);
  CHECK(pt::resolve(pt::group_policy::per_tick, dpv.view()) == pt::group_policy::per_tick);
  CHECK(pt::resolve(pt::group_policy::per_peer, chain.view()) == pt::group_policy::per_peer);
  // the default plan options lower DualPipeV per peer and ZB-H1 per tick
  auto ops_of = [](const pt::program& p, pt::group_policy g) {
    pt::plan_options o;
    o.groups = g;
    const pt::runtime_plan plan = pt::build_plan(p, o);
    REQUIRE(plan.ok());
    return std::vector<pt::lowered_op>(plan.lowered().ops.begin(), plan.lowered().ops.end());
  };
  CHECK(ops_of(dpv, pt::plan_options{}.groups) == ops_of(dpv, pt::group_policy::per_peer));
  CHECK(ops_of(chain, pt::plan_options{}.groups) == ops_of(chain, pt::group_policy::per_tick));
  CHECK(ops_of(dpv, pt::group_policy::per_tick) != ops_of(dpv, pt::group_policy::per_peer));
}

}  // namespace test_lower
}  // namespace
