// The mesh (core/mesh.hpp), the collectives' passes and checks (mesh/collectives.hpp), and the
// mesh step's lowering and proof (mesh/lower.hpp, mesh/verify.hpp), against an independent oracle.
#include <pipetype/core/mesh.hpp>
#include <pipetype/mesh/collectives.hpp>
#include <pipetype/mesh/simulate.hpp>
#include <pipetype/mesh/verify.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_mesh_program {

namespace pt = pipetype;

namespace {

// A plan over 2 lanes (DualPipe) runs a model stage on two ranks: not yet meshed (docs/12).
bool meshable(const pt::runtime_plan& plan) { return plan.ok() && plan.compute().lanes == 1; }

pt::runtime_plan plan_of(const std::string& name, int p, int m) {
  return pt::build_plan(pt::make_schedule(name, p, m));
}

pt::mesh_program meshed(const pt::runtime_plan& plan, const pt::mesh& m, const pt::dp_options& o) {
  const pt::collective_program c = pt::place_collectives(plan.compute(), o);
  REQUIRE(pt::check_collectives(plan.compute(), c, o).ok());
  return pt::lower_mesh(plan.compute(), plan.lowered(), m, c, o);
}

/// The oracle: the happens-before graph of a mesh program, each rendezvous (a group and its
/// partners' groups; the k-th collective of every member of a communicator) one node, edges from
/// stream order and event waits. The step completes exactly when that graph has no cycle. Written
/// apart from verify_mesh (no simulation), for the mutation test.
bool oracle_completes(const pt::mesh_program& mp) {
  const int N = static_cast<int>(mp.ops.size()), G = mp.shape.size();
  std::vector<int> parent(static_cast<std::size_t>(N));
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[static_cast<std::size_t>(x)] != x)
      x = parent[static_cast<std::size_t>(x)] = parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(x)])];
    return x;
  };
  auto unite = [&](int a, int b) { parent[static_cast<std::size_t>(find(a))] = find(b); };
  std::vector<std::pair<int, int>> edges;  // before → after
  std::map<std::tuple<int, int, int>, std::vector<int>> sends, recvs;
  std::map<std::pair<int, int>, std::vector<int>> colls;  // (comm, member) → its collectives in order
  for (int g = 0; g < G; ++g) {
    const int b = mp.begin[static_cast<std::size_t>(g)], e = mp.begin[static_cast<std::size_t>(g) + 1];
    std::vector<int> last_on_stream(pt::mesh_stream_count, -1),
        last_record(static_cast<std::size_t>(mp.events[static_cast<std::size_t>(g)]), -1);
    int group = -1;
    for (int i = b; i < e; ++i) {
      const pt::mesh_op& o = mp.ops[static_cast<std::size_t>(i)];
      if (last_on_stream[static_cast<std::size_t>(o.stream)] >= 0)
        edges.push_back({last_on_stream[static_cast<std::size_t>(o.stream)], i});
      last_on_stream[static_cast<std::size_t>(o.stream)] = i;
      const int wait = o.code == pt::mesh_op_code::wait ? o.event : o.wait_event;
      if (wait >= 0) {
        if (last_record[static_cast<std::size_t>(wait)] < 0) return false;  // waits for nothing: malformed
        edges.push_back({last_record[static_cast<std::size_t>(wait)], i});
      }
      const int rec = o.code == pt::mesh_op_code::record ? o.event : o.record_event;
      if (rec >= 0) last_record[static_cast<std::size_t>(rec)] = i;
      if (o.code == pt::mesh_op_code::group) group = i;
      if (o.code == pt::mesh_op_code::send || o.code == pt::mesh_op_code::recv) {
        if (group >= 0) unite(i, group);
        const bool s = o.code == pt::mesh_op_code::send;
        (s ? sends : recvs)[{o.comm, s ? g : o.peer, s ? o.peer : g}].push_back(i);
      } else if (o.code != pt::mesh_op_code::group) {
        group = -1;
      }
      if (pt::is_collective(o.code)) colls[{o.comm, g}].push_back(i);
    }
  }
  for (const auto& [key, s] : sends)
    for (std::size_t k = 0; k < s.size() && k < recvs[key].size(); ++k) unite(s[k], recvs[key][k]);
  for (const auto& [key, list] : colls)
    for (const auto& [other, olist] : colls)
      if (other.first == key.first)
        for (std::size_t k = 0; k < list.size() && k < olist.size(); ++k) unite(list[k], olist[k]);
  // Kahn's algorithm on the quotient graph
  std::vector<int> indeg(static_cast<std::size_t>(N), 0);
  std::vector<std::vector<int>> out(static_cast<std::size_t>(N));
  for (const auto& [a, b2] : edges) {
    const int x = find(a), y = find(b2);
    if (x == y) {  // within one rendezvous: a group and its own transfers are one node; else it waits for itself
      const pt::mesh_op &oa = mp.ops[static_cast<std::size_t>(a)], &ob = mp.ops[static_cast<std::size_t>(b2)];
      const bool same_group = oa.stream == ob.stream &&
                              (ob.code == pt::mesh_op_code::send || ob.code == pt::mesh_op_code::recv) &&
                              (oa.code == pt::mesh_op_code::group || oa.code == pt::mesh_op_code::send ||
                               oa.code == pt::mesh_op_code::recv) &&
                              b2 == a + 1;
      if (same_group) continue;
      return false;
    }
    out[static_cast<std::size_t>(x)].push_back(y);
    ++indeg[static_cast<std::size_t>(y)];
  }
  std::vector<int> ready;
  int nodes = 0, fired = 0;
  for (int i = 0; i < N; ++i)
    if (find(i) == i) {
      ++nodes;
      if (indeg[static_cast<std::size_t>(i)] == 0) ready.push_back(i);
    }
  while (!ready.empty()) {
    const int x = ready.back();
    ready.pop_back();
    ++fired;
    for (const int y : out[static_cast<std::size_t>(x)])
      if (--indeg[static_cast<std::size_t>(y)] == 0) ready.push_back(y);
  }
  return fired == nodes;
}

}  // namespace

TEST_CASE("mesh: global ranks in both orders, and a mesh that does not fit its world is one sentence") {
  constexpr pt::mesh inner{.pp = 4, .dp = 2};
  static_assert(inner.size() == 8 && inner.global(1, 1) == 3 && inner.pipeline_rank(3) == 1 && inner.replica(3) == 1);
  constexpr pt::mesh outer{.pp = 4, .dp = 2, .order = pt::mesh_order::pp_inner};
  static_assert(outer.global(1, 1) == 5 && outer.pipeline_rank(5) == 1 && outer.replica(5) == 1);
  static_assert(pt::mesh_t<4, 2, pt::mesh_order::pp_inner>::value == outer);
  for (const pt::mesh m : {inner, outer})
    for (int g = 0; g < m.size(); ++g) CHECK(m.global(m.pipeline_rank(g), m.replica(g)) == g);
  CHECK(pt::check_mesh(inner, 8).ok());
  CHECK(pt::describe(pt::check_mesh(inner, 6)) ==
        "bad mesh: the world's ranks are not a multiple of the pipeline's ranks (pp)");
  CHECK(pt::describe(pt::check_mesh(inner, 12)) == "bad mesh: pp × dp is not the world's number of ranks");
  CHECK(pt::check_mesh({.pp = 0, .dp = 2}).code == pt::errc::bad_mesh);
  CHECK(pt::check_mesh({.pp = 1 << 10, .dp = 1 << 10}).code == pt::errc::too_large);
}

TEST_CASE("collectives: REDUCE_GRAD right after each stage's last B or W, once per stage a rank holds") {
  for (const char* name : {"1f1b", "zb-h1", "interleaved-1f1b", "zb-v", "gpipe"}) {
    CAPTURE(name);
    const pt::runtime_plan plan = plan_of(name, 4, 8);
    REQUIRE(plan.ok());
    const pt::program_view p = plan.compute();
    const pt::dp_options o{.dp = 2};
    const pt::collective_program c = pt::place_collectives(p, o);
    CHECK(pt::check_collectives(p, c, o).ok());
    for (int r = 0; r < p.ranks; ++r) {
      const auto acts = p.rank_actions(r);
      for (const pt::collective& x : c.rank_ops(r)) {
        REQUIRE(x.what == pt::collective_kind::reduce_grad);
        const pt::action& a = acts[static_cast<std::size_t>(x.after)];
        CHECK(a.stage == x.stage);
        CHECK((a.what == pt::kind::B || a.what == pt::kind::W));
        for (std::size_t k = static_cast<std::size_t>(x.after) + 1; k < acts.size(); ++k)
          CHECK_FALSE((acts[k].stage == x.stage && (acts[k].what == pt::kind::B || acts[k].what == pt::kind::W)));
      }
      std::vector<int> held;
      for (const pt::action& a : acts) held.push_back(a.stage);
      std::sort(held.begin(), held.end());
      held.erase(std::unique(held.begin(), held.end()), held.end());
      CHECK(c.rank_ops(r).size() == held.size());
    }
  }
  // one replica, no ties: nothing to add
  const pt::runtime_plan plan = plan_of("1f1b", 4, 8);
  CHECK(pt::place_collectives(plan.compute(), {}).ops.empty());
}

TEST_CASE("collectives: sharded, each compute runs on an unsharded stage and at most `window` are unsharded at once") {
  for (const pt::schedule_info& info : pt::schedule_infos) {
    const std::string name(info.name);
    if (pt::schedule_error(name, 4, 8, 0)) continue;
    const pt::runtime_plan plan = plan_of(name, 4, 8);
    if (!meshable(plan)) continue;
    CAPTURE(name);
    // an overlapped pair (DualPipeV's F&B) runs two stages together: both gathered first
    bool pairs = false;
    for (const pt::action& a : plan.compute().actions) pairs = pairs || a.overlapped;
    for (const int window : {1, 2, 3}) {
      CAPTURE(window);
      const pt::dp_options o{.dp = 2, .shard = true, .window = window};
      const pt::collective_program c = pt::place_collectives(plan.compute(), o);
      const pt::verdict v = pt::check_collectives(plan.compute(), c, o);
      if (pairs && window == 1) {
        CHECK(pt::describe(v).find("an overlapped pair whose second half's stage is not unsharded before its first "
                                   "half") != std::string::npos);
        continue;
      }
      CHECK(v.ok());  // the window and every rule, checked
      int unshards = 0;
      for (const pt::collective& x : c.ops) unshards += x.what == pt::collective_kind::unshard;
      CHECK(unshards > 0);
    }
  }
}

TEST_CASE("collectives: check_collectives names each misplacement in one sentence") {
  const pt::runtime_plan plan = plan_of("1f1b", 2, 4);
  const pt::program_view p = plan.compute();
  const pt::dp_options o{.dp = 2, .shard = true, .window = 3, .ties = {{0, 1}}};
  const pt::collective_program good = pt::place_collectives(p, o);
  REQUIRE(pt::check_collectives(p, good, o).ok());
  auto with = [&](auto change) {
    pt::collective_program c = good;
    change(c);
    return pt::describe(pt::check_collectives(p, c, o));
  };
  auto find = [&](const pt::collective_program& c, int r, pt::collective_kind k) {
    for (int i = c.begin[static_cast<std::size_t>(r)]; i < c.begin[static_cast<std::size_t>(r) + 1]; ++i)
      if (c.ops[static_cast<std::size_t>(i)].what == k) return static_cast<std::size_t>(i);
    return std::size_t{0};
  };
  // a REDUCE_GRAD moved before its stage's last backward (no sharding, no tie: one collective a rank)
  {
    const pt::dp_options plain{.dp = 2};
    pt::collective_program c = pt::place_collectives(p, plain);
    REQUIRE(c.rank_ops(1).size() == 1);
    c.ops[static_cast<std::size_t>(c.begin[1])].after = 0;
    CHECK(pt::describe(pt::check_collectives(p, c, plain)) ==
          "collective misplaced at rank 1, stage 1, action 1REDUCE_GRAD (index 0): a REDUCE_GRAD before the stage's "
          "last weight backward (B or W)");
  }
  // an UNSHARD dropped: a compute on a sharded stage
  CHECK(with([&](pt::collective_program& c) {
          c.ops.erase(c.ops.begin() + static_cast<std::ptrdiff_t>(find(c, 0, pt::collective_kind::unshard)));
          for (std::size_t r = 1; r < c.begin.size(); ++r) --c.begin[r];
        }) ==
        "collective misplaced at rank 0, stage 0, microbatch 0, action 0F0 (index 0): a compute action on a "
        "sharded stage (no UNSHARD of it before, or a RESHARD since)");
  // a tie group naming a stage that does not exist
  {
    const pt::dp_options bad{.dp = 2, .ties = {{0, 7}}};
    CHECK(pt::describe(pt::check_collectives(p, pt::place_collectives(p, {.dp = 2}), bad)) ==
          "collective misplaced, stage 7, action 7TIE (index 0): a tie group names a stage the program does not have");
  }
  // the window: placed for 3, checked against 1 (PyTorch's pass gathers one stage per rank here: fine)
  {
    const pt::runtime_plan il = plan_of("interleaved-1f1b", 2, 4);
    const pt::dp_options three{.dp = 2, .shard = true, .window = 3}, one{.dp = 2, .shard = true, .window = 1};
    CHECK(pt::describe(pt::check_collectives(il.compute(), pt::place_collectives(il.compute(), three), one))
              .find("more stages unsharded at once than the window allows") != std::string::npos);
  }
  // no REDUCE_GRAD at all
  {
    pt::collective_program none = pt::place_collectives(p, {});
    CHECK(pt::describe(pt::check_collectives(p, none, {.dp = 2})) ==
          "collective misplaced at rank 0, stage 0, action 0REDUCE_GRAD: a stage with weight backwards and no "
          "REDUCE_GRAD: its replicas' gradients would differ");
  }
}

TEST_CASE("mesh program: every built-in schedule over dp = 2, plain, sharded and with a tie, proves in both orders") {
  int proved = 0;
  for (const pt::schedule_info& info : pt::schedule_infos) {
    const std::string name(info.name);
    for (const std::pair<int, int>& size : {std::pair{2, 4}, std::pair{4, 8}}) {
      const int p = size.first, m = size.second;  // (not a structured binding: CAPTURE's lambda reads p)
      if (pt::schedule_error(name, p, m, 0)) continue;
      const pt::runtime_plan plan = plan_of(name, p, m);
      if (!meshable(plan)) continue;
      CAPTURE(name);
      CAPTURE(p);
      const int S = plan.compute().stages;
      for (const pt::mesh_order order : {pt::mesh_order::dp_inner, pt::mesh_order::pp_inner})
        for (const bool shard : {false, true}) {
          const pt::dp_options o{.dp = 2, .shard = shard, .window = 3, .ties = {{0, S - 1}}};
          const pt::mesh_program mp = meshed(plan, {.pp = p, .dp = 2, .order = order}, o);
          const pt::verdict v = pt::verify_mesh(mp);
          CHECK_MESSAGE(v.ok(), pt::describe(v));
          CHECK(oracle_completes(mp));
          ++proved;
        }
    }
  }
  CHECK(proved >= 40);
}

TEST_CASE("mesh program: sharded with a tie group, no gather waits behind a tie on the dp stream") {
  // four stages a rank and a window below four: a rank gathers stages again after its tied stage's
  // last backward. A tie there held up the gather behind it, whose backward the other end of the
  // tie waited for: a cycle (the placement once made it; verify_mesh refused the step)
  int proved = 0;
  for (const char* name : {"interleaved-1f1b", "looped-bfs"})
    for (const int window : {1, 2, 3})
      for (const pt::mesh_order order : {pt::mesh_order::dp_inner, pt::mesh_order::pp_inner}) {
        CAPTURE(name);
        CAPTURE(window);
        const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, 2, 4, 4));
        REQUIRE(plan.ok());
        const pt::dp_options o{.dp = 2, .shard = true, .window = window, .ties = {{0, 7}}};
        const pt::mesh_program mp = meshed(plan, {.pp = 2, .dp = 2, .order = order}, o);
        const pt::verdict v = pt::verify_mesh(mp);
        CHECK_MESSAGE(v.ok(), pt::describe(v));
        CHECK(oracle_completes(mp));
        for (int g = 0; g < mp.shape.size(); ++g) {
          bool tied = false;
          for (const pt::mesh_op& x : mp.rank_ops(g)) {
            if (x.code == pt::mesh_op_code::all_reduce && x.tie >= 0) tied = true;
            CHECK_FALSE((tied && x.code == pt::mesh_op_code::all_gather));
          }
          CHECK(tied);
        }
        ++proved;
      }
  CHECK(proved == 12);
}

TEST_CASE("mesh program: the communicators — each replica's pipeline ones, one per DP group, one per tie and replica") {
  const pt::runtime_plan plan = plan_of("1f1b", 4, 8);
  const pt::mesh m{.pp = 4, .dp = 2};
  const pt::mesh_program mp = meshed(plan, m, {.dp = 2, .ties = {{0, 3}}});
  const int C = static_cast<int>(plan.lowered().comms.size());
  REQUIRE(static_cast<int>(mp.comms.size()) == 2 * C + 4 + 2);
  for (int r = 0; r < 4; ++r)
    CHECK(mp.comms[static_cast<std::size_t>(mp.dp_comm(r))].members ==
          std::vector<int>{m.global(r, 0), m.global(r, 1)});
  CHECK(mp.comms.back().what == pt::mesh_comm_kind::tie);
  CHECK(mp.comms.back().members == std::vector<int>{m.global(0, 1), m.global(3, 1)});
  // rank (3, 1): its tie all-reduce comes before its REDUCE_GRAD, both on the dp stream after its last backward
  std::vector<pt::mesh_op_code> dp_ops;
  for (const pt::mesh_op& o : mp.rank_ops(m.global(3, 1)))
    if (o.stream == pt::dp_stream && pt::is_collective(o.code)) dp_ops.push_back(o.code);
  CHECK(dp_ops == std::vector<pt::mesh_op_code>{pt::mesh_op_code::all_reduce, pt::mesh_op_code::all_reduce});
  CHECK(mp.dp_comm(0) >= 0);
  // a tie within one rank (V placement: stage 0 and 2p − 1 share rank 0) needs no communicator
  const pt::runtime_plan v = plan_of("zb-v", 2, 4);
  const pt::mesh_program mv = meshed(v, {.pp = 2, .dp = 2}, {.dp = 2, .ties = {{0, 3}}});
  for (const pt::mesh_comm& c : mv.comms) CHECK(c.what != pt::mesh_comm_kind::tie);
  CHECK(pt::verify_mesh(mv).ok());
}

TEST_CASE("mesh program: a mismatched collective sequence and a tie reduced out of order are refused by name") {
  const pt::runtime_plan plan = plan_of("interleaved-1f1b", 2, 4);
  const pt::mesh m{.pp = 2, .dp = 2};
  pt::mesh_program mp = meshed(plan, m, {.dp = 2});
  // swap rank 0's two REDUCE_GRADs (its two stages) on replica 0 only
  std::vector<std::size_t> at;
  for (int i = mp.begin[0]; i < mp.begin[1]; ++i)
    if (pt::is_collective(mp.ops[static_cast<std::size_t>(i)].code)) at.push_back(static_cast<std::size_t>(i));
  REQUIRE(at.size() == 2);
  std::swap(mp.ops[at[0]].stage, mp.ops[at[1]].stage);
  const pt::verdict v = pt::verify_mesh(mp);
  CHECK(v.code == pt::errc::collective_mismatch);
  CHECK(pt::describe(v).find("members of a communicator issue different collectives") != std::string::npos);
}

TEST_CASE(
    "mesh program: mutations — every swap of two collectives, or of a collective and a transfer group, that can hang "
    "is refused") {
  struct setup {
    const char* name;
    int p, m;
    pt::dp_options o;
  };
  const std::vector<setup> setups{
      {"1f1b", 2, 4, {.dp = 2, .ties = {{0, 1}}}},
      {"interleaved-1f1b", 2, 4, {.dp = 2, .ties = {{0, 3}}}},
      {"zb-h1", 2, 4, {.dp = 2, .shard = true, .window = 2}},
      {"1f1b", 3, 3, {.dp = 2, .shard = true, .window = 3, .ties = {{0, 2}}}},
  };
  int refused = 0, accepted = 0;
  for (const setup& s : setups) {
    CAPTURE(s.name);
    const pt::runtime_plan plan = plan_of(s.name, s.p, s.m);
    const pt::mesh_program base = meshed(plan, {.pp = s.p, .dp = 2}, s.o);
    REQUIRE(pt::verify_mesh(base).ok());
    for (int g = 0; g < base.shape.size(); ++g) {
      const int b = base.begin[static_cast<std::size_t>(g)], e = base.begin[static_cast<std::size_t>(g) + 1];
      std::vector<int> nccl;  // the rank's collectives and group heads, in issue order
      for (int i = b; i < e; ++i)
        if (pt::is_collective(base.ops[static_cast<std::size_t>(i)].code) ||
            base.ops[static_cast<std::size_t>(i)].code == pt::mesh_op_code::group)
          nccl.push_back(i);
      for (std::size_t k = 0; k + 1 < nccl.size(); ++k) {
        const int x = nccl[k], y = nccl[k + 1];
        const bool cx = pt::is_collective(base.ops[static_cast<std::size_t>(x)].code),
                   cy = pt::is_collective(base.ops[static_cast<std::size_t>(y)].code);
        if (!cx && !cy) continue;
        pt::mesh_program mut = base;
        // the two trade places in the rank's NCCL order and on its streams: the collective takes
        // the group's stream and slot (as if issued on the pipeline's stream), the group the other's
        auto block = [&](int i) {  // a group with its transfers
          int j = i;
          while (j + 1 < e && (base.ops[static_cast<std::size_t>(j) + 1].code == pt::mesh_op_code::send ||
                               base.ops[static_cast<std::size_t>(j) + 1].code == pt::mesh_op_code::recv))
            ++j;
          return std::vector<pt::mesh_op>(base.ops.begin() + i, base.ops.begin() + j + 1);
        };
        std::vector<pt::mesh_op> bx = block(x), by = block(y);
        if (cx && cy) {
          std::swap(mut.ops[static_cast<std::size_t>(x)], mut.ops[static_cast<std::size_t>(y)]);
        } else {
          // rebuild the rank's list with the two blocks exchanged, each taking the other's stream
          const int sx = base.ops[static_cast<std::size_t>(x)].stream,
                    sy = base.ops[static_cast<std::size_t>(y)].stream;
          for (pt::mesh_op& o : bx)
            o.stream = o.code == pt::mesh_op_code::group || !pt::is_collective(o.code) ? o.stream : sy;
          for (pt::mesh_op& o : by)
            o.stream = o.code == pt::mesh_op_code::group || !pt::is_collective(o.code) ? o.stream : sx;
          std::vector<pt::mesh_op> list(base.ops.begin() + b, base.ops.begin() + x);
          list.insert(list.end(), by.begin(), by.end());
          list.insert(list.end(), base.ops.begin() + x + static_cast<int>(bx.size()), base.ops.begin() + y);
          list.insert(list.end(), bx.begin(), bx.end());
          list.insert(list.end(), base.ops.begin() + y + static_cast<int>(by.size()), base.ops.begin() + e);
          std::copy(list.begin(), list.end(), mut.ops.begin() + b);
        }
        const pt::verdict v = pt::verify_mesh(mut);
        const bool completes = oracle_completes(mut);
        CAPTURE(g);
        CAPTURE(k);
        CAPTURE(pt::describe(v));
        if (!completes) CHECK_FALSE(v.ok());                            // every mutation that can hang is refused
        if (v.code == pt::errc::nccl_deadlock) CHECK_FALSE(completes);  // and a named deadlock is one
        (v.ok() ? accepted : refused) += 1;
      }
    }
  }
  CHECK(refused > 0);
  CHECK(accepted > 0);  // not everything: a swap of two independent collectives is harmless
}

TEST_CASE("mesh program: a deadlock names its cycle across ranks and communicators") {
  // two replicas of a two-rank pipeline with a tie: rank (0,0) reduces its tie before its DP
  // group, (0,1) after; (1,0) after, (1,1) before — each waits for the next around a cycle
  const pt::runtime_plan plan = plan_of("1f1b", 2, 2);
  const pt::mesh m{.pp = 2, .dp = 2};
  pt::mesh_program mp = meshed(plan, m, {.dp = 2, .ties = {{0, 1}}});
  auto swap_on = [&](int g) {
    std::vector<std::size_t> at;
    for (int i = mp.begin[static_cast<std::size_t>(g)]; i < mp.begin[static_cast<std::size_t>(g) + 1]; ++i)
      if (pt::is_collective(mp.ops[static_cast<std::size_t>(i)].code)) at.push_back(static_cast<std::size_t>(i));
    REQUIRE(at.size() == 2);
    std::swap(mp.ops[at[0]], mp.ops[at[1]]);
  };
  swap_on(m.global(0, 1));
  swap_on(m.global(1, 0));
  const pt::verdict v = pt::verify_mesh(mp);
  REQUIRE(v.code == pt::errc::nccl_deadlock);
  CHECK(v.cycle_length == 4);
  const std::string d = pt::describe(v);
  CHECK(d.find("at TIE") != std::string::npos);
  CHECK(d.find("waits for REDUCE_GRAD of stage") != std::string::npos);
  CHECK(d.find("on communicator") != std::string::npos);
  for (int k = 0; k < v.cycle_length; ++k) CHECK(v.cycle[k].comm >= 0);  // each link waits on a communicator
  CHECK_FALSE(oracle_completes(mp));
}

}  // namespace test_mesh_program
}  // namespace

namespace {  // a second block of this file's names (unity build: still its own namespace)
namespace test_mesh_costs {

namespace pt = pipetype;

pt::runtime_plan plan_named(const std::string& name, int p, int m) {
  return pt::build_plan(pt::make_schedule(name, p, m));
}

TEST_CASE("mesh costs: without collectives a replica's step is the pipeline simulator's, on every rank of the mesh") {
  for (const char* name : {"gpipe", "1f1b", "zb-h1", "interleaved-1f1b", "looped-bfs", "dualpipe-v"}) {
    CAPTURE(name);
    const pt::runtime_plan plan = plan_named(name, 4, 8);
    REQUIRE(plan.ok());
    const pt::collective_program none = pt::place_collectives(plan.compute(), {});
    const pt::costs c{.f = 1, .b = 2};
    const pt::mesh_timeline t =
        pt::simulate_mesh(pt::lower_mesh(plan.compute(), plan.lowered(), {.pp = 4, .dp = 2}, none, {.dp = 2}), c, {});
    CHECK(t.completed);
    CHECK(t.makespan == doctest::Approx(pt::simulate(plan.compute(), c).makespan()));
  }
}

TEST_CASE("mesh costs: a reduction hidden behind compute costs nothing, one at the end shows whole") {
  const pt::runtime_plan plan = plan_named("1f1b", 4, 8);
  const pt::program_view p = plan.compute();
  const pt::dp_options o{.dp = 2};
  const pt::collective_program c = pt::place_collectives(p, o);
  const pt::costs cost{.f = 1, .b = 2};
  // 1F1B: rank 3 (the last stage) finishes its backwards first; rank 0 last. Rank 0's reduction
  // always shows; with bytes such that one all-reduce takes 5 time units: 2(n−1)/n = 1 at n = 2
  const pt::mesh_costs d{.param_bytes = {5}, .bandwidth = 1};
  const double exposed = pt::exposed_dp(p, plan.lowered(), {.pp = 4, .dp = 2}, c, o, cost, d);
  CHECK(exposed == doctest::Approx(5));
  // sharded: the gathers before the first forward show too (each stage's all-gather: 2.5)
  const pt::dp_options s{.dp = 2, .shard = true};
  const double sharded = pt::exposed_dp(p, plan.lowered(), {.pp = 4, .dp = 2}, pt::place_collectives(p, s), s, cost, d);
  CHECK(sharded == doctest::Approx(5));  // 2.5 before the first forward, 2.5 for the reduce-scatter at the end
  // a collective that cannot complete (a member that never arrives): completed = false, not a hang
  pt::mesh_program mp = pt::lower_mesh(p, plan.lowered(), {.pp = 4, .dp = 2}, c, o);
  mp.comms[static_cast<std::size_t>(mp.dp_comm(0))].members.push_back(99);
  CHECK_FALSE(pt::simulate_mesh(mp, cost, d).completed);
}

TEST_CASE("mesh program: a release waits for a gather that no compute waited for") {
  // hand-written: rank 0 gathers stage 0 and releases it before computing with it
  const pt::program prog = pt::parse_schedule("0F0,0B0\n1F0,1B0");
  const pt::runtime_plan plan = pt::build_plan(prog);
  REQUIRE(plan.ok());
  pt::collective_program c;
  c.ranks = 2;
  c.ops = {{pt::collective_kind::unshard, 0, -1, -1},    {pt::collective_kind::reshard, 0, -1, -1},
           {pt::collective_kind::unshard, 0, -1, -1},    {pt::collective_kind::reduce_grad, 0, -1, 1},
           {pt::collective_kind::reshard, 0, -1, 1},     {pt::collective_kind::unshard, 1, -1, -1},
           {pt::collective_kind::reduce_grad, 1, -1, 1}, {pt::collective_kind::reshard, 1, -1, 1}};
  c.begin = {0, 5, 8};
  const pt::dp_options o{.dp = 2, .shard = true};
  REQUIRE_MESSAGE(pt::check_collectives(plan.compute(), c, o).ok(),
                  pt::describe(pt::check_collectives(plan.compute(), c, o)));
  const pt::mesh_program mp = pt::lower_mesh(plan.compute(), plan.lowered(), {2, 2}, c, o);
  CHECK(pt::verify_mesh(mp).ok());
  const auto ops = mp.rank_ops(0);
  int gather_event = -1;
  bool checked = false;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].code == pt::mesh_op_code::all_gather && gather_event < 0) gather_event = ops[i + 1].event;
    if (ops[i].code == pt::mesh_op_code::release && !checked) {  // the first release: right after a wait on it
      REQUIRE(i > 0);
      CHECK(ops[i - 1].code == pt::mesh_op_code::wait);
      CHECK(ops[i - 1].stream == 0);
      CHECK(ops[i - 1].event == gather_event);
      checked = true;
    }
  }
  CHECK(checked);
}

}  // namespace test_mesh_costs
}  // namespace
