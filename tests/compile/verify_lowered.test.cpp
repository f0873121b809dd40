#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_verify_lowered {

namespace pt = pipetype;

namespace {
pt::lowered_program lowered_1f1b(int p, int m) {
  const pt::program prog = pt::make_one_f_one_b(p, m);
  const pt::program_facts f = pt::check_program(prog.view());
  return pt::lower(prog.view(), f.tick);
}
std::size_t find(const pt::lowered_program& L, int rank, pt::op_code code, int nth = 0) {
  for (int i = L.begin[static_cast<std::size_t>(rank)]; i < L.begin[static_cast<std::size_t>(rank) + 1]; ++i)
    if (L.ops[static_cast<std::size_t>(i)].code == code && nth-- == 0) return static_cast<std::size_t>(i);
  FAIL("op not found");
  return 0;
}
std::size_t find_waiting(const pt::lowered_program& L, int rank) {
  for (int i = L.begin[static_cast<std::size_t>(rank)]; i < L.begin[static_cast<std::size_t>(rank) + 1]; ++i)
    if (L.ops[static_cast<std::size_t>(i)].wait_event >= 0) return static_cast<std::size_t>(i);
  FAIL("no op waits");
  return 0;
}

/// A two-rank neighbour exchange on one communicator: both ranks issue `seq` ({code, tick}) with
/// the other rank as peer (microbatch 0, stage 0).
struct step_spec {
  pt::op_code code;
  int tick;
};
pt::lowered_program exchange(std::initializer_list<step_spec> seq) {
  pt::lowered_program L;
  L.ranks = 2;
  L.comms = {{0, 1, 0}};
  L.resources.assign(2, pt::rank_resources{});
  L.begin = {0};
  for (int r = 0; r < 2; ++r) {
    for (const step_spec& st : seq) {
      pt::lowered_op o;
      o.code = st.code;
      o.stream = pt::stream_id::comm;
      o.tick = st.tick;
      if (st.code != pt::op_code::group) {
        o.peer = 1 - r;
        o.comm = 0;
        o.stage = 0;
        o.microbatch = 0;
      }
      L.ops.push_back(o);
    }
    L.begin.push_back(static_cast<int>(L.ops.size()));
  }
  return L;
}
}  // namespace

TEST_CASE("verify_lowered: the lowering's own output passes") {
  CHECK(pt::verify_lowered(lowered_1f1b(4, 8).view()).ok());
}

TEST_CASE("verify_lowered: swapping two sends of one channel breaks FIFO matching") {
  pt::lowered_program L = lowered_1f1b(2, 4);
  const std::size_t a = find(L, 0, pt::op_code::send, 0), b = find(L, 0, pt::op_code::send, 1);
  std::swap(L.ops[a].microbatch, L.ops[b].microbatch);
  const pt::verdict v = pt::verify_lowered(L.view());
  CHECK(v.code == pt::errc::transfer_mismatch);
  CHECK(v.rank == 1);
}

TEST_CASE("verify_lowered: a recv with no send") {
  pt::lowered_program L = lowered_1f1b(2, 2);
  const std::size_t a = find(L, 0, pt::op_code::send, 0);
  L.ops[a].code = pt::op_code::recv;  // both ends now receive
  CHECK(pt::verify_lowered(L.view()).code == pt::errc::transfer_mismatch);
}

TEST_CASE("verify_lowered: transfers in separate groups that wait on each other deadlock") {
  // rank 0 sends then receives in two groups; rank 1 does the same: with blocking rendezvous
  // both sit in their send group forever (the classic unordered neighbour exchange).
  using pt::op_code;
  const pt::lowered_program L =
      exchange({{op_code::group, -1}, {op_code::send, -1}, {op_code::group, -1}, {op_code::recv, -1}});
  CHECK(pt::verify_lowered(L.view()).code == pt::errc::nccl_deadlock);
  // ungrouped, the same: each transfer is a group of one
  CHECK(pt::verify_lowered(exchange({{op_code::send, -1}, {op_code::recv, -1}}).view()).code ==
        pt::errc::nccl_deadlock);
  // grouping the two makes it complete
  CHECK(pt::verify_lowered(exchange({{op_code::group, -1}, {op_code::send, -1}, {op_code::recv, -1}}).view()).ok());
}

TEST_CASE("verify_lowered: a wait before any record of its event") {
  pt::lowered_program L = lowered_1f1b(2, 2);
  const std::size_t w = find_waiting(L, 1);
  L.ops[w].wait_event = 7;
  CHECK(pt::verify_lowered(L.view()).code == pt::errc::event_misuse);
}

TEST_CASE("verify_lowered: dropping a wait leaves a buffer unordered between the streams") {
  pt::lowered_program L = lowered_1f1b(2, 2);
  const std::size_t w = find_waiting(L, 1);
  L.ops[w].wait_event = -1;
  const pt::verdict v = pt::verify_lowered(L.view());
  CHECK(v.code == pt::errc::event_misuse);
  CHECK(v.rank == 1);
}

TEST_CASE("verify_lowered: a peer outside the communicator") {
  pt::lowered_program L = lowered_1f1b(3, 2);
  const std::size_t s = find(L, 0, pt::op_code::send);
  L.ops[s].peer = 2;
  CHECK(pt::verify_lowered(L.view()).code == pt::errc::transfer_mismatch);
}

TEST_CASE("verify_lowered: events ride on compute and group ops only") {
  pt::lowered_program L = lowered_1f1b(2, 2);
  const std::size_t s = find(L, 0, pt::op_code::send);
  L.ops[s].record_event = 0;
  CHECK(pt::verify_lowered(L.view()).code == pt::errc::event_misuse);
}

TEST_CASE("verify_lowered: a slot outside the rank's pool") {
  pt::lowered_program L = lowered_1f1b(2, 2);
  const std::size_t c = find(L, 1, pt::op_code::compute);
  L.ops[c].slot = 99;
  CHECK(pt::verify_lowered(L.view()).code == pt::errc::index_out_of_range);
}

TEST_CASE("verify_lowered: a tick certificate that does not hold falls back to the simulation") {
  // The unordered neighbour exchange again, now labelled with ticks: each rank sends at tick 0
  // and receives at tick 1, so a send's partner (a recv) has another tick. The certificate fails;
  // the simulation finds the deadlock.
  using pt::op_code;
  CHECK(pt::verify_lowered(
            exchange({{op_code::group, 0}, {op_code::send, 0}, {op_code::group, 1}, {op_code::recv, 1}}).view())
            .code == pt::errc::nccl_deadlock);
  // the same exchange in one group per rank at one tick is certified and completes
  CHECK(pt::verify_lowered(exchange({{op_code::group, 0}, {op_code::send, 0}, {op_code::recv, 0}}).view()).ok());
}

TEST_CASE("verify_lowered: certified or simulated, every lowered schedule of the sweep passes") {
  // lowered programs with their ticks erased lose the certificate and go through the simulation
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 6; ++m) {
      const pt::program prog = pt::make_interleaved_1f1b(p, p * m, 2);
      const pt::program_facts f = pt::check_program(prog.view());
      pt::lowered_program L = pt::lower(prog.view(), f.tick);
      CHECK(pt::verify_lowered(L.view()).ok());
      for (pt::lowered_op& o : L.ops) o.tick = 0;
      CAPTURE(p);
      CAPTURE(m);
      CHECK(pt::verify_lowered(L.view()).ok());
    }
}

namespace {
/// Three ranks, one tick, one group per peer: rank r's groups in `order[r]`, each a send to (or
/// a recv from) that peer. Pairs use communicators 0 = {0,1}, 1 = {1,2}, 2 = {0,2}.
struct end_spec {
  int peer;
  bool send;
};
pt::lowered_program three_ranks(const std::vector<std::vector<end_spec>>& order) {
  pt::lowered_program L;
  L.ranks = 3;
  L.policy = pt::comm_policy::per_rank_pair;
  L.comms = {{0, 1, -1}, {1, 2, -1}, {0, 2, -1}};
  L.resources.assign(3, pt::rank_resources{});
  L.begin = {0};
  auto comm_of = [](int a, int b) { return a + b == 1 ? 0 : a + b == 3 ? 1 : 2; };
  for (int r = 0; r < 3; ++r) {
    for (const end_spec& e : order[static_cast<std::size_t>(r)]) {
      pt::lowered_op g;
      g.code = pt::op_code::group;
      g.stream = pt::stream_id::comm;
      g.tick = 0;
      L.ops.push_back(g);
      pt::lowered_op o = g;
      o.code = e.send ? pt::op_code::send : pt::op_code::recv;
      o.peer = e.peer;
      o.comm = comm_of(r, e.peer);
      o.stage = e.send ? r : e.peer;  // the sender's "stage": one tensor per ordered pair
      o.microbatch = 0;
      L.ops.push_back(o);
    }
    L.begin.push_back(static_cast<int>(L.ops.size()));
  }
  return L;
}
}  // namespace

TEST_CASE("verify_lowered: groups per peer certify only when every rank takes the tick's peers in one direction") {
  // a ring, each rank sending before it receives: rank 1 takes its peers in decreasing order,
  // ranks 0 and 2 in increasing order; every send waits for a recv posted after a blocked send.
  // The direction is not the tick's one, so no certificate: the simulation finds the deadlock.
  bool certified = true;
  CHECK(pt::verify_lowered(
            three_ranks({{{1, true}, {2, false}}, {{2, true}, {0, false}}, {{0, true}, {1, false}}}).view(), &certified)
            .code == pt::errc::nccl_deadlock);
  CHECK_FALSE(certified);
  // a chain's backward: every rank takes its peers highest first (receive from above, then pass
  // below), one direction for the tick: certified, and it completes
  CHECK(pt::verify_lowered(three_ranks({{{1, false}}, {{2, false}, {0, true}}, {{1, true}}}).view(), &certified).ok());
  CHECK(certified);
  // the same chain lowest first on rank 1 only is still one direction (rank 1 is the only rank
  // with two groups): certified too
  CHECK(pt::verify_lowered(three_ranks({{{1, false}}, {{0, true}, {2, false}}, {{1, true}}}).view(), &certified).ok());
  CHECK(certified);
}

TEST_CASE("verify_lowered: every built-in schedule's lowering takes the fast proof, under every group policy") {
  // make_plan runs verify_lowered in constant evaluation: the simulation there would cost far
  // more compile time, so the lowering's own output must always carry a valid certificate
  for (const pt::schedule_info& s : pt::schedule_infos)
    for (const pt::group_policy g :
         {pt::group_policy::per_tick, pt::group_policy::per_peer, pt::group_policy::automatic})
      for (const auto& [p, m] : {std::pair{4, 8}, std::pair{3, 6}}) {
        if (pt::schedule_error(s.name, p, m, 0)) continue;
        CAPTURE(s.name);
        CAPTURE(static_cast<int>(g));
        const pt::program prog = pt::make_schedule(s.name, p, m);
        const pt::program_facts f = pt::check_program(prog.view());
        const pt::lowered_program L = pt::lower(prog.view(), f.tick, pt::comm_policy::per_edge, g);
        bool certified = false;
        CHECK(pt::verify_lowered(L.view(), &certified).ok());
        CHECK(certified);
      }
}

TEST_CASE("verify_lowered: a tick far out of range voids the certificate instead of sizing a table by it") {
  pt::lowered_program L = lowered_1f1b(2, 2);
  L.ops[find(L, 0, pt::op_code::compute)].tick = 1 << 30;
  bool certified = true;
  const pt::verdict v = pt::verify_lowered(L.view(), &certified);
  CHECK_FALSE(certified);
  CHECK(v.ok());  // the simulation still proves it: ticks are only the certificate's data
}

TEST_CASE("verify_lowered: a hand-made program's declared slots and events are held to the limits before any table") {
  pt::lowered_program L = lowered_1f1b(2, 2);
  L.resources[1].activation_slots = 1 << 30;  // would size (and reset, per rank) a table of 2^33 entries
  pt::verdict v = pt::verify_lowered(L.view());
  CHECK(v.code == pt::errc::too_large);
  CHECK(std::string(v.detail).find("limits::actions") != std::string::npos);
  L = lowered_1f1b(2, 2);
  L.resources[0].events = pt::limits::actions;  // each rank within, both together past the limit
  L.resources[1].events = 1;
  CHECK(pt::verify_lowered(L.view()).code == pt::errc::too_large);
  L = lowered_1f1b(2, 2);
  L.resources[0].gradient_slots = -1;
  CHECK(pt::verify_lowered(L.view()).code == pt::errc::index_out_of_range);
  L = lowered_1f1b(2, 2);
  L.begin.pop_back();  // fewer begins than ranks + 1
  CHECK(pt::verify_lowered(L.view()).code == pt::errc::index_out_of_range);
  // generous but bounded declarations still verify: only the slots the ops use matter
  L = lowered_1f1b(2, 2);
  L.resources[1].activation_slots += 1000;
  L.resources[0].events += 1000;
  CHECK(pt::verify_lowered(L.view()).ok());
}

}  // namespace test_verify_lowered
}  // namespace
