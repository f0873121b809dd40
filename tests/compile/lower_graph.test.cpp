// The lowering over a stage graph given as edges (compile/lower.hpp): one transfer per crossing
// edge, a fan-out's one output read here and sent once per crossing edge, per-edge gradients
// listed in edge order, and the proof over all of it. The dataflow check runs the lowered ops
// tick by tick, moving tokens instead of tensors, and asserts that every compute reads exactly
// what its stage graph says, in edge order.
#include <pipetype/compile/lower.hpp>

#include <doctest/doctest.h>

#include <pipetype/compile/plan.hpp>
#include <pipetype/io/text.hpp>
#include <pipetype/schedules/registry.hpp>

#include "../graph_programs.hpp"

#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_lower_graph {

namespace pt = pipetype;

namespace {

const std::vector<pt::stage_edge> skip{{0, 1}, {1, 2}, {2, 3}, {0, 2}};       // 0 → 1 → 2 → 3, and 0 → 2
const std::vector<pt::stage_edge> two_tower{{0, 1}, {2, 3}, {1, 4}, {3, 4}};  // 0 → 1 and 2 → 3 into 4

/// What a buffer holds: F(s,j)'s output, the gradient edge e carries back for microbatch j, or a
/// stage's summed output gradient.
struct token {
  char what = '?';  // 'F', 'G' (per edge), 'S' (the sum), '?' (nothing written)
  int a = -1, b = -1;
  friend bool operator==(const token&, const token&) = default;
};

/// The program's edges as numbered by the lowering: its own, or a chain's s → s+1 as e = s.
struct numbered_edges {
  std::vector<int> from, to;
  std::vector<char> cut;                            // detached: no gradient back
  std::vector<std::vector<int>> pred, succ, grads;  // per stage: edge indices in edge order (grads: not detached)
};
numbered_edges edges_of(pt::program_view p) {
  numbered_edges g;
  g.pred.resize(static_cast<std::size_t>(p.stages));
  g.succ.resize(static_cast<std::size_t>(p.stages));
  g.grads.resize(static_cast<std::size_t>(p.stages));
  const int E = p.has_edges() ? static_cast<int>(p.edges.size()) : p.stages - 1;
  for (int e = 0; e < E; ++e) {
    const pt::stage_edge x = p.has_edges() ? p.edges[static_cast<std::size_t>(e)] : pt::stage_edge{e, e + 1};
    g.from.push_back(x.from);
    g.to.push_back(x.to);
    g.cut.push_back(x.detached);
    if (!p.has_edges() && p.lane_tail(e)) continue;
    g.pred[static_cast<std::size_t>(x.to)].push_back(e);
    g.succ[static_cast<std::size_t>(x.from)].push_back(e);
    if (!x.detached) g.grads[static_cast<std::size_t>(x.from)].push_back(e);
  }
  return g;
}

/// Runs `plan`'s lowered ops tick by tick (each tick: every send, every receive, then each rank's
/// computes in order) and checks each compute's slots against the graph. Returns the number of
/// computes checked.
int check_dataflow(const pt::runtime_plan& plan) {
  const pt::program_view p = plan.compute();
  const pt::lowered_view L = plan.lowered();
  const numbered_edges g = edges_of(p);
  std::vector<std::vector<token>> act(static_cast<std::size_t>(L.ranks)), grad(act.size());
  int last_tick = 0;
  for (int r = 0; r < L.ranks; ++r) {
    act[static_cast<std::size_t>(r)].resize(
        static_cast<std::size_t>(L.resources[static_cast<std::size_t>(r)].activation_slots));
    grad[static_cast<std::size_t>(r)].resize(
        static_cast<std::size_t>(L.resources[static_cast<std::size_t>(r)].gradient_slots));
    for (const pt::lowered_op& o : L.rank_ops(r)) last_tick = o.tick > last_tick ? o.tick : last_tick;
  }
  auto pool = [&](int r, bool gradient) -> std::vector<token>& {
    return (gradient ? grad : act)[static_cast<std::size_t>(r)];
  };
  using key = std::tuple<int, int, int, int, int, int>;  // comm, link, kind, stage, microbatch, src
  std::map<key, std::vector<token>> wire;
  int checked = 0;
  for (int t = 0; t <= last_tick; ++t) {
    for (int pass = 0; pass < 3; ++pass)
      for (int r = 0; r < L.ranks; ++r)
        for (const pt::lowered_op& o : L.rank_ops(r)) {
          if (o.tick != t) continue;
          const bool gradient = o.what != pt::kind::F;
          if (pass == 0 && o.code == pt::op_code::send) {
            wire[{o.comm, o.link, static_cast<int>(o.what), o.stage, o.microbatch, r}].push_back(
                pool(r, gradient).at(static_cast<std::size_t>(o.slot)));
          } else if (pass == 1 && o.code == pt::op_code::recv) {
            std::vector<token>& q = wire[{o.comm, o.link, static_cast<int>(o.what), o.stage, o.microbatch, o.peer}];
            REQUIRE_MESSAGE(!q.empty(), "a receive with nothing sent: " << pt::to_text(o));
            pool(r, gradient).at(static_cast<std::size_t>(o.slot)) = q.front();
            q.erase(q.begin());
          } else if (pass == 2 && o.code == pt::op_code::compute) {
            CAPTURE(pt::to_text(o, L.slot_lists));
            const pt::op_slots sl = L.slots_of(o);
            const int s = o.stage, j = o.microbatch;
            const std::vector<int>& pred = g.pred[static_cast<std::size_t>(s)];
            const std::vector<int>& succ = g.succ[static_cast<std::size_t>(s)];
            REQUIRE(sl.in.size() == pred.size());
            for (std::size_t k = 0; k < pred.size(); ++k)
              CHECK(pool(r, false).at(static_cast<std::size_t>(sl.in[k])) ==
                    token{'F', g.from[static_cast<std::size_t>(pred[k])], j});
            if (o.what == pt::kind::F) {
              REQUIRE(sl.out.size() == (succ.empty() ? 0u : 1u));
              if (!succ.empty()) pool(r, false).at(static_cast<std::size_t>(sl.out[0])) = token{'F', s, j};
              ++checked;
              continue;
            }
            const std::vector<int>& grads = g.grads[static_cast<std::size_t>(s)];  // none over a detached edge
            REQUIRE(sl.grad.size() == grads.size());
            const bool sums = grads.size() > 1;
            for (std::size_t k = 0; k < grads.size(); ++k) {
              const token want = k == 0 && sums && o.what == pt::kind::W ? token{'S', s, j} : token{'G', grads[k], j};
              CHECK(pool(r, true).at(static_cast<std::size_t>(sl.grad[k])) == want);
            }
            if (sums && o.what != pt::kind::W)
              pool(r, true).at(static_cast<std::size_t>(sl.grad[0])) = token{'S', s, j};
            // (an op without lists names no slot for a detached input's gradient)
            const bool none = o.link < 0 && pred.size() == 1 && g.cut[static_cast<std::size_t>(pred[0])];
            REQUIRE(sl.out.size() == (o.what == pt::kind::W || none ? 0u : pred.size()));
            for (std::size_t k = 0; k < sl.out.size(); ++k) {
              const bool cut = g.cut[static_cast<std::size_t>(pred[k])];
              CHECK((sl.out[k] < 0) == cut);  // no gradient buffer for a detached edge
              if (!cut) pool(r, true).at(static_cast<std::size_t>(sl.out[k])) = token{'G', pred[k], j};
            }
            ++checked;
          }
        }
  }
  for (const auto& [k, q] : wire) CHECK_MESSAGE(q.empty(), "a send nobody received");
  return checked;
}

using graph_programs::build;

int count(const pt::runtime_plan& plan, pt::op_code code, pt::kind what) {
  int n = 0;
  for (const pt::lowered_op& o : plan.ops()) n += o.code == code && o.what == what;
  return n;
}

pt::lowered_op compute_op(const pt::runtime_plan& plan, pt::action a) {
  for (const pt::lowered_op& o : plan.ops())
    if (o.code == pt::op_code::compute && o.what == a.what && o.stage == a.stage && o.microbatch == a.microbatch)
      return o;
  FAIL("no such op");
  return plan.ops()[0];
}

std::vector<int> as_vector(std::span<const int> s) { return {s.begin(), s.end()}; }

}  // namespace

TEST_CASE("lower graph: every chain schedule's dataflow checks out") {
  for (const pt::schedule_info& s : pt::schedule_infos) {
    const int v = pt::schedule_error(s.name, 4, 8, 2) ? 1 : 2;
    if (pt::schedule_error(s.name, 4, 8, v)) continue;
    CAPTURE(std::string(s.name));
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(s.name, 4, 8, v, {}));
    REQUIRE(plan.ok());
    CHECK(plan.lowered().slot_lists.empty());
    CHECK(check_dataflow(plan) == plan.compute().size());
  }
}

TEST_CASE("lower graph: a chain written as edges lowers to the chain's ops and slots") {
  for (const pt::schedule_info& s : pt::schedule_infos) {
    if (pt::schedule_error(s.name, 4, 8, 1)) continue;
    CAPTURE(std::string(s.name));
    const pt::program chain = pt::make_schedule(s.name, 4, 8, 1, {});
    if (chain.lanes > 1 || chain.view().has_edges()) continue;  // (local-1f1b's chain is detached edges already)
    pt::program edged = chain;
    for (int k = 0; k + 1 < chain.stages; ++k) edged.edges.push_back({k, k + 1});
    for (const pt::comm_policy policy : {pt::comm_policy::per_edge, pt::comm_policy::per_rank_pair}) {
      const pt::runtime_plan a = pt::build_plan(chain, {.comms = policy});
      const pt::runtime_plan b = pt::build_plan(edged, {.comms = policy});
      REQUIRE(a.ok());
      REQUIRE(b.ok());
      std::vector<pt::lowered_op> ops(b.ops().begin(), b.ops().end());
      for (pt::lowered_op& o : ops) {
        if (o.code == pt::op_code::send || o.code == pt::op_code::recv)
          CHECK(o.link == o.stage - (o.what == pt::kind::F ? 0 : 1));
        o.link = -1;  // the transfers name their edge (e = s for s → s+1); the rest is the chain's
      }
      CHECK(ops == std::vector<pt::lowered_op>(a.ops().begin(), a.ops().end()));
      CHECK(a.lowered_table.resources == b.lowered_table.resources);
      REQUIRE(a.comms().size() == b.comms().size());
      for (std::size_t c = 0; c < a.comms().size(); ++c) {
        CHECK(a.comms()[c].rank_a == b.comms()[c].rank_a);
        CHECK(a.comms()[c].stage == b.comms()[c].stage);
      }
    }
  }
}

TEST_CASE("lower graph: a skip connection, one transfer per crossing edge, gradients in edge order") {
  const pt::stage_dag g{4, skip};
  for (const bool one_f_one_b : {false, true})
    for (const pt::group_policy groups : {pt::group_policy::per_tick, pt::group_policy::per_peer})
      for (const pt::comm_policy policy : {pt::comm_policy::per_edge, pt::comm_policy::per_rank_pair}) {
        CAPTURE(one_f_one_b);
        CAPTURE(static_cast<int>(groups));
        CAPTURE(static_cast<int>(policy));
        const pt::program p = one_f_one_b ? pt::make_one_f_one_b(4, 6, g) : pt::make_gpipe(4, 6, g);
        const pt::runtime_plan plan = pt::build_plan(p, {.comms = policy, .groups = groups});
        REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
        bool certified = false;
        CHECK(pt::verify_lowered(plan.lowered(), &certified).ok());
        CHECK(certified);
        CHECK(check_dataflow(plan) == p.view().size());
        // four crossing edges, six microbatches: 24 activations and 24 gradients
        CHECK(count(plan, pt::op_code::send, pt::kind::F) == 24);
        CHECK(count(plan, pt::op_code::send, pt::kind::B) == 24);
        CHECK(plan.comms().size() == (policy == pt::comm_policy::per_edge ? 4u : 4u));
        if (policy == pt::comm_policy::per_edge)
          for (std::size_t c = 0; c < 4; ++c) CHECK(plan.comms()[c].edge >= 0);
        // F(2,j) reads stage 1's output (edge 1) then stage 0's (edge 3); B(0,j) sums the
        // gradients of edges 0 and 3
        const pt::lowered_op f2_op = compute_op(plan, pt::F(2, 0)), b0_op = compute_op(plan, pt::B(0, 0)),
                             b2_op = compute_op(plan, pt::B(2, 0));
        const pt::op_slots f2 = plan.lowered().slots_of(f2_op);
        CHECK(f2.in.size() == 2);
        const pt::op_slots b0 = plan.lowered().slots_of(b0_op);
        CHECK(b0.grad.size() == 2);
        CHECK(b0.out.empty());
        const pt::op_slots b2 = plan.lowered().slots_of(b2_op);
        CHECK(b2.out.size() == 2);
        CHECK(b2.grad.size() == 1);
      }
}

TEST_CASE("lower graph: a fan-out on one rank is read in place and sent once per crossing edge") {
  // rank 0 holds stages 0 and 1, rank 1 stage 2: 0 → 1 stays on rank 0, 0 → 2 and 1 → 2 cross
  const pt::program p =
      build(2, 3, 2, {{0, 1}, {1, 2}, {0, 2}},
            {{pt::F(0, 0), pt::F(1, 0), pt::F(0, 1), pt::F(1, 1), pt::B(1, 0), pt::B(0, 0), pt::B(1, 1), pt::B(0, 1)},
             {pt::F(2, 0), pt::F(2, 1), pt::B(2, 0), pt::B(2, 1)}});
  const pt::runtime_plan plan = pt::build_plan(p);
  REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
  CHECK(check_dataflow(plan) == 12);
  CHECK(count(plan, pt::op_code::send, pt::kind::F) == 4);  // edges 1 and 2, two microbatches
  CHECK(count(plan, pt::op_code::send, pt::kind::B) == 4);
  // F(1,0) reads F(0,0)'s output slot itself: the slot F(0,0) writes
  const pt::lowered_op& f0 = compute_op(plan, pt::F(0, 0));
  const pt::lowered_op& f1 = compute_op(plan, pt::F(1, 0));
  CHECK(f1.slot == f0.out_slot);
  // and the send of edge 2 (0 → 2) sends from that same slot
  bool sent_from_output = false;
  for (const pt::lowered_op& o : plan.rank_ops(0))
    if (o.code == pt::op_code::send && o.what == pt::kind::F && o.stage == 0 && o.microbatch == 0)
      sent_from_output = o.slot == f0.out_slot && o.link == 2;
  CHECK(sent_from_output);
  // B(0,0) sums the gradient of 0 → 1 (written on the rank) and of 0 → 2 (received)
  const pt::lowered_op b0 = compute_op(plan, pt::B(0, 0));
  CHECK(plan.lowered().slots_of(b0).grad.size() == 2);
  CHECK(pt::listing(plan.lowered(), 0).find("grad=g") != std::string::npos);
  // a listed op printed without the plan's lists says where its slots are instead
  CHECK(pt::to_text(b0).find("slots in list " + std::to_string(b0.link)) != std::string::npos);
  CHECK(pt::to_text(b0, plan.lowered().slot_lists).find("grad=g") != std::string::npos);
}

TEST_CASE("lower graph: two towers into a head, split backwards") {
  // five ranks, stage s on rank s; the head's I writes a gradient for each tower
  std::vector<std::vector<pt::action>> order(5);
  for (int s = 0; s < 5; ++s) {
    for (int j = 0; j < 2; ++j) order[static_cast<std::size_t>(s)].push_back(pt::F(s, j));
    for (int j = 0; j < 2; ++j) order[static_cast<std::size_t>(s)].push_back(pt::I(s, j));
    for (int j = 0; j < 2; ++j) order[static_cast<std::size_t>(s)].push_back(pt::W(s, j));
  }
  const pt::runtime_plan plan = pt::build_plan(build(5, 5, 2, two_tower, order));
  REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
  CHECK(check_dataflow(plan) == 30);
  const pt::lowered_op i4_op = compute_op(plan, pt::I(4, 1)), w4_op = compute_op(plan, pt::W(4, 1));
  const pt::op_slots i4 = plan.lowered().slots_of(i4_op);
  CHECK(i4.in.size() == 2);
  CHECK(i4.out.size() == 2);
  CHECK(plan.lowered().slots_of(w4_op).out.empty());
}

namespace {
struct skip_schedule {
  static constexpr pt::program generate() { return pt::make_one_f_one_b(4, 4, pt::stage_dag{4, skip_edges()}); }
  static constexpr std::vector<pt::stage_edge> skip_edges() { return {{0, 1}, {1, 2}, {2, 3}, {0, 2}}; }
};
}  // namespace

TEST_CASE("lower graph: a compile-time plan freezes the graph and its slot lists") {
  constexpr auto plan = pt::make_plan<skip_schedule>();
  static_assert(plan.compute().has_edges());
  static_assert(plan.shape.edges == 4);
  const pt::runtime_plan run = pt::build_plan(skip_schedule::generate());
  REQUIRE(run.ok());
  CHECK(std::vector<pt::lowered_op>(plan.ops().begin(), plan.ops().end()) ==
        std::vector<pt::lowered_op>(run.ops().begin(), run.ops().end()));
  CHECK(as_vector(plan.lowered().slot_lists) == run.lowered_table.slot_lists);
  CHECK(std::vector<pt::stage_edge>(plan.compute().edges.begin(), plan.compute().edges.end()) == skip);
}

namespace {
struct dualpipe_skip {  // DualPipe over the skip graph: a copy of it in each direction
  static constexpr pt::program generate() {
    return pt::make_dualpipe(4, 8, pt::stage_dag{4, skip_schedule::skip_edges()});
  }
};
}  // namespace

TEST_CASE("lower graph: DualPipe over a graph, at compile time and at run time alike") {
  constexpr auto plan = pt::make_plan<dualpipe_skip>();
  static_assert(plan.compute().lanes == 2);
  static_assert(plan.shape.edges == 8);
  const pt::runtime_plan run = pt::build_plan(dualpipe_skip::generate());
  REQUIRE_MESSAGE(run.ok(), pt::describe(run.result));
  CHECK(std::vector<pt::lowered_op>(plan.ops().begin(), plan.ops().end()) ==
        std::vector<pt::lowered_op>(run.ops().begin(), run.ops().end()));
  // every microbatch's F of stage 2 (and of its lane-1 copy, 6) reads two inputs
  int fan_ins = 0;
  for (const pt::lowered_op& o : run.ops())
    if (o.code == pt::op_code::compute && o.what == pt::kind::F && o.stage % 4 == 2) {
      CHECK(run.lowered().slots_of(o).in.size() == 2);
      ++fan_ins;
    }
  CHECK(fan_ins == 8);
  CHECK(check_dataflow(run) > 0);
}

TEST_CASE("lower graph: the proof catches a receive of the wrong edge and a slot list out of range") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_gpipe(4, 2, pt::stage_dag{4, skip}));
  REQUIRE(plan.ok());
  {
    pt::lowered_program bad = pt::copy_of(plan.lowered());
    for (pt::lowered_op& o : bad.ops)
      if (o.code == pt::op_code::recv && o.link == 3) {
        o.link = 1;
        break;
      }
    const pt::verdict v = pt::verify_lowered(bad.view());
    CHECK(v.code == pt::errc::transfer_mismatch);
  }
  {
    pt::lowered_program bad = pt::copy_of(plan.lowered());
    REQUIRE(bad.slot_lists.size() > 3);
    bad.slot_lists.resize(bad.slot_lists.size() - 1);
    const pt::verdict v = pt::verify_lowered(bad.view());
    CHECK(v.code == pt::errc::index_out_of_range);
  }
  {
    pt::lowered_program bad = pt::copy_of(plan.lowered());
    for (pt::lowered_op& o : bad.ops)
      if (o.code == pt::op_code::compute && o.link >= 0) {
        bad.slot_lists[static_cast<std::size_t>(o.link) + 3] = 1000;
        break;
      }
    CHECK(pt::verify_lowered(bad.view()).code == pt::errc::index_out_of_range);
  }
}

TEST_CASE("lower graph: a detached edge carries activations only, and its stage's backward waits for nobody") {
  // local learning over two towers into a head (every edge detached), and a skip connection whose
  // skip alone is detached (stage 0 gets its gradient from stage 1 only)
  std::vector<pt::stage_edge> local = two_tower, skip_cut = skip;
  for (pt::stage_edge& e : local) e.detached = true;
  skip_cut[3].detached = true;
  pt::schedule_params over_local, over_cut;
  over_local.edges = local, over_cut.edges = skip_cut;
  for (const bool split : {false, true}) {
    CAPTURE(split);
    const pt::runtime_plan towers =
        pt::build_plan(pt::make_schedule(split ? "zb-h1" : "local-1f1b", 5, 6, 1, over_local));
    REQUIRE_MESSAGE(towers.ok(), pt::describe(towers.result));
    CHECK(check_dataflow(towers) == towers.compute().size());
    CHECK(count(towers, pt::op_code::send, pt::kind::F) == 4 * 6);  // every edge crosses ranks
    CHECK(count(towers, pt::op_code::send, pt::kind::B) == 0);      // and sends no gradient
    for (int r = 0; r < 5; ++r) CHECK(towers.lowered().resources[static_cast<std::size_t>(r)].gradient_slots == 0);
    const pt::runtime_plan cut = pt::build_plan(pt::make_schedule(split ? "zb-h1" : "1f1b", 4, 6, 1, over_cut));
    REQUIRE_MESSAGE(cut.ok(), pt::describe(cut.result));
    CHECK(check_dataflow(cut) == cut.compute().size());
    CHECK(count(cut, pt::op_code::send, pt::kind::F) == 4 * 6);
    CHECK(count(cut, pt::op_code::send, pt::kind::B) == 3 * 6);  // not over 0~2
  }
  // stage 2's backward writes one gradient (for 1 > 2) and none for its detached input from 0
  const pt::runtime_plan cut = pt::build_plan(pt::make_schedule("1f1b", 4, 6, 1, over_cut));
  const pt::lowered_op b2 = compute_op(cut, pt::B(2, 0));
  const pt::op_slots sl = cut.lowered().slots_of(b2);
  REQUIRE(sl.out.size() == 2);
  CHECK(sl.out[0] >= 0);
  CHECK(sl.out[1] == -1);
}

}  // namespace test_lower_graph
}  // namespace
