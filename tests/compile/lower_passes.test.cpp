// The lowering's passes (compile/lower_tables.hpp and compile/lower.hpp), each on its own: communicators, transfers, slots,
// transfer-end order and groups, and the per-rank emission with its events.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "../schedules/sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_lower_passes {

namespace pt = pipetype;
namespace pd = pipetype::detail;

namespace {

// A verified program with its ticks and the lowering's input tables, kept alive together.
struct lowering_case {
  pt::program prog;
  pt::program_facts facts;
  pd::lowering_tables tables;
  pd::lowering_input in;
  explicit lowering_case(pt::program p)
      : prog(std::move(p)),
        facts(pt::check_program(prog.view())),
        tables(pd::lowering_tables_of(prog.view(), facts.tick.data())),
        in(pd::lowering_input_of(prog.view(), facts.tick.data(), tables)) {
    REQUIRE_MESSAGE(facts.result.ok(), pt::describe(facts.result));
  }
};

}  // namespace

TEST_CASE("lower passes: communicators, one per crossing edge or one per rank pair") {
  const lowering_case v(pt::make_zb_v(2, 4));  // stages 0..3 on ranks 0, 1, 1, 0: edge 1 → 2 stays on rank 1
  std::vector<pt::comm_desc> comms;
  const pd::scratch<int> edge = pd::lower_communicators(v.in, pt::comm_policy::per_edge, comms);
  CHECK(comms == std::vector<pt::comm_desc>{{0, 1, 0}, {0, 1, 2}});
  CHECK(edge[0] == 0);
  CHECK(edge[1] == -1);
  CHECK(edge[2] == 1);
  std::vector<pt::comm_desc> pairs;
  const pd::scratch<int> by_pair = pd::lower_communicators(v.in, pt::comm_policy::per_rank_pair, pairs);
  CHECK(pairs == std::vector<pt::comm_desc>{{0, 1, -1}});
  CHECK(by_pair[0] == 0);
  CHECK(by_pair[2] == 0);
}

TEST_CASE("lower passes: transfers, one each way per crossing edge and microbatch, a tick after the producer") {
  sweep::for_each_builtin(4, 8, 2, [](const pt::program& prog, int) {
    const lowering_case c(prog);
    const pd::transfer_table tt = pd::lower_transfers(c.in);
    int crossing = 0;
    for (int s = 0; s + 1 < prog.stages; ++s)
      if (!prog.view().lane_tail(s) && c.in.owner[s] != c.in.owner[s + 1])
        for (int j = 0; j < prog.microbatches; ++j) crossing += prog.view().runs_through(s, j) ? 1 : 0;
    CHECK(tt.nx == (prog.view().has_detached() ? 1 : 2) * crossing);  // local learning: activations only
    const auto tick = tt.x_field(pd::transfer_table::x_tick);
    const auto pool = tt.x_field(pd::transfer_table::x_pool);
    const auto stage = tt.x_field(pd::transfer_table::x_stage);
    const auto mb = tt.x_field(pd::transfer_table::x_mb);
    for (int x = 0; x < tt.nx; ++x) {
      // the producer: F(stage) for an activation, B/I(stage) for a gradient
      const int q = stage[x] * prog.microbatches + mb[x];
      const int made = pool[x] == 0 ? c.in.posF[q] : c.in.posG[q];
      CHECK(tick[x] == (made - 1) / 2 + 1);
    }
  });
}

TEST_CASE("lower passes: slots, each pool as large as its peak of live buffers") {
  sweep::for_each_builtin(4, 8, 2, [](const pt::program& prog, int) {
    const lowering_case c(prog);
    const pd::transfer_table tt = pd::lower_transfers(c.in);
    std::vector<pt::rank_resources> res(static_cast<std::size_t>(prog.ranks));
    const pd::slot_table st = pd::assign_slots(c.in, tt, res.data());
    // the peak of live intervals per (rank, pool), by brute force over positions
    std::map<std::pair<int, int>, std::map<int, int>> live;
    for (int i = 0; i < tt.niv; ++i) {
      const int r = tt.iv_field(pd::transfer_table::iv_rank)[i], pl = tt.iv_field(pd::transfer_table::iv_pool)[i];
      for (int t = tt.iv_field(pd::transfer_table::iv_alloc)[i]; t <= tt.iv_field(pd::transfer_table::iv_free)[i]; ++t)
        ++live[{r, pl}][t];
    }
    for (int r = 0; r < prog.ranks; ++r)
      for (int pl = 0; pl < 2; ++pl) {
        int peak = 0;
        for (const auto& [t, k] : live[{r, pl}]) peak = std::max(peak, k);
        const int slots = pl == 0 ? res[static_cast<std::size_t>(r)].activation_slots
                                  : res[static_cast<std::size_t>(r)].gradient_slots;
        CHECK(slots == peak);
      }
    // two buffers that share a slot never live at once
    for (int i = 0; i < tt.niv; ++i)
      for (int k = i + 1; k < tt.niv; ++k) {
        auto f = [&](int field, int idx) { return tt.iv_field(field)[idx]; };
        if (f(pd::transfer_table::iv_rank, i) != f(pd::transfer_table::iv_rank, k) ||
            f(pd::transfer_table::iv_pool, i) != f(pd::transfer_table::iv_pool, k))
          continue;
        const int pl = f(pd::transfer_table::iv_pool, i);
        if (st.buffer(pl, f(pd::transfer_table::iv_id, i)) != st.buffer(pl, f(pd::transfer_table::iv_id, k))) continue;
        const bool apart = f(pd::transfer_table::iv_free, i) < f(pd::transfer_table::iv_alloc, k) ||
                           f(pd::transfer_table::iv_free, k) < f(pd::transfer_table::iv_alloc, i);
        CHECK(apart);
      }
  });
}

TEST_CASE(
    "lower passes: transfer ends in tick order, both ends of a channel alike, per_peer by peer in the tick's order") {
  for (const auto groups : {pt::group_policy::per_tick, pt::group_policy::per_peer}) {
    const lowering_case c(pt::make_dualpipe_v(4, 8));
    const pd::transfer_table tt = pd::lower_transfers(c.in);
    std::vector<pt::rank_resources> res(4);
    const pd::slot_table st = pd::assign_slots(c.in, tt, res.data());
    const pd::end_table et = pd::order_ends(c.in, tt, st, groups);
    const auto src = tt.x_field(pd::transfer_table::x_src);
    const auto dst = tt.x_field(pd::transfer_table::x_dst);
    std::map<std::tuple<int, int, int>, std::vector<int>> sent, received;  // (src, dst, pool) → transfers
    for (int r = 0; r < 4; ++r)
      for (int e = et.rank_begin[r]; e < et.rank_begin[r + 1]; ++e) {
        const int x = et.x()[e];
        CHECK((et.send[e] ? src[x] : dst[x]) == r);
        if (e > et.rank_begin[r]) {
          CHECK(et.tick()[e] >= et.tick()[e - 1]);
          if (groups == pt::group_policy::per_peer && et.tick()[e] == et.tick()[e - 1]) {
            // one direction per tick: highest peer first where the transfers read in their own tick
            // mostly come from above (or, none being read at once, most transfers go down)
            int lean = 0, vote = 0;
            for (int y = 0; y < tt.nx; ++y) {
              if (tt.x_field(pd::transfer_table::x_tick)[y] != et.tick()[e]) continue;
              const int down = src[y] > dst[y] ? 1 : -1, s = tt.x_field(pd::transfer_table::x_stage)[y],
                        j = tt.x_field(pd::transfer_table::x_mb)[y];
              lean += down;
              const int use = tt.x_field(pd::transfer_table::x_pool)[y] == 0 ? c.in.posF[(s + 1) * c.in.m + j]
                                                                             : c.in.posG[(s - 1) * c.in.m + j];
              if ((use - 1) / 2 == et.tick()[e]) vote += down;
            }
            if ((vote != 0 ? vote : lean) > 0)
              CHECK(et.peer()[e] <= et.peer()[e - 1]);
            else
              CHECK(et.peer()[e] >= et.peer()[e - 1]);
          }
        }
        const int pl = tt.x_field(pd::transfer_table::x_pool)[x];
        (et.send[e] ? sent : received)[{src[x], dst[x], pl}].push_back(x);
      }
    CHECK(sent == received);  // every channel's sends and receives in one order
    CHECK(pd::count_ops(c.in, tt, et) > c.prog.view().size() + 2 * tt.nx);  // plus the groups
  }
}

TEST_CASE("lower passes: a rank's ops, groups before the tick's compute, every wait after its record") {
  const lowering_case c(pt::make_one_f_one_b(3, 6));
  // ranks 0..2 through lower_rank and assign_saved_slots directly: the same ops as lower() gives
  const pt::lowered_program whole = pt::lower(c.prog.view(), c.facts.tick);
  const pd::transfer_table tt = pd::lower_transfers(c.in);
  std::vector<pt::rank_resources> res(3);
  const pd::slot_table st = pd::assign_slots(c.in, tt, res.data());
  const pd::end_table et = pd::order_ends(c.in, tt, st, pt::group_policy::per_tick);
  std::vector<pt::comm_desc> comms;
  const pd::scratch<int> edge = pd::lower_communicators(c.in, pt::comm_policy::per_edge, comms);
  pd::rank_scratch ws = pd::rank_scratch_for(c.in, et, res.data());
  std::vector<pt::lowered_op> ops(static_cast<std::size_t>(pd::count_ops(c.in, tt, et)));
  int nout = 0;
  for (int r = 0; r < 3; ++r) {
    const int from = nout;
    nout = pd::lower_rank(c.in, r, tt, st, et, edge.data(), ws, res[static_cast<std::size_t>(r)], ops.data(), nout);
    const pt::program_view pv = c.prog.view();
    pd::assign_saved_slots(ops.data(), from, nout, pv.stages, pv.microbatches, pv.lane_length(),
                           res[static_cast<std::size_t>(r)]);
    CHECK(from == whole.begin[static_cast<std::size_t>(r)]);
    CHECK(res[static_cast<std::size_t>(r)] == whole.resources[static_cast<std::size_t>(r)]);
    std::vector<int> recorded;
    int last_tick = -1;
    bool compute_seen_this_tick = false;
    for (int i = from; i < nout; ++i) {
      const pt::lowered_op& o = ops[static_cast<std::size_t>(i)];
      CHECK(o == whole.ops[static_cast<std::size_t>(i)]);
      if (o.tick != last_tick) compute_seen_this_tick = false, last_tick = o.tick;
      if (o.code == pt::op_code::compute) compute_seen_this_tick = true;
      if (o.code == pt::op_code::group) CHECK(!compute_seen_this_tick);  // a tick's groups come first
      if (o.wait_event >= 0) CHECK(std::find(recorded.begin(), recorded.end(), o.wait_event) != recorded.end());
      if (o.record_event >= 0) recorded.push_back(o.record_event);
    }
  }
  CHECK(nout == static_cast<int>(whole.ops.size()));
}

// The passes run in constant evaluation too.
static_assert([] {
  const pt::program prog = pt::make_one_f_one_b(2, 4);
  const pt::program_facts f = pt::check_program(prog.view());
  const pd::lowering_tables lt = pd::lowering_tables_of(prog.view(), f.tick.data());
  const pd::lowering_input in = pd::lowering_input_of(prog.view(), f.tick.data(), lt);
  return pd::lower_transfers(in).nx == 2 * 4;
}());

}  // namespace test_lower_passes
}  // namespace
