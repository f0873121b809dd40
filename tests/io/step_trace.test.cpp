#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include "../graph_programs.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "small_step.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_step_trace {

namespace pt = pipetype;

namespace {

const pt::traced_compute& span(const pt::step_trace& t, const std::string& label) {
  auto it = std::find_if(t.computes.begin(), t.computes.end(),
                         [&](const pt::traced_compute& c) { return c.label() == label; });
  REQUIRE_MESSAGE(it != t.computes.end(), "no span " << label);
  return *it;
}

pt::op_time op(int rank, pt::stream_id st, pt::op_code code, pt::kind k, int stage, int mb, double s, double e) {
  pt::op_time t;
  t.rank = rank, t.stream = st, t.code = code, t.what = k, t.stage = stage, t.microbatch = mb, t.start = s, t.end = e;
  return t;
}

}  // namespace

TEST_CASE("step_trace: a simulation's spans, times and transfers") {
  const pt::step_trace t = test_io::small_step();
  CHECK(t.ranks == 2);
  CHECK(t.unit.empty());
  CHECK_FALSE(t.measured);
  REQUIRE(t.computes.size() == 8);
  const struct {
    const char* label;
    int rank;
    double start, end, live;
  } want[] = {{"0F0", 0, 0, 1, 1},     {"0F1", 0, 1, 2, 2},     {"0B0", 0, 5, 7, 1},     {"0B1", 0, 8, 10, 0},
              {"1F0", 1, 1.5, 2.5, 1}, {"1B0", 1, 2.5, 4.5, 0}, {"1F1", 1, 4.5, 5.5, 1}, {"1B1", 1, 5.5, 7.5, 0}};
  for (const auto& w : want) {
    CAPTURE(w.label);
    const pt::traced_compute& c = span(t, w.label);
    CHECK(c.rank == w.rank);
    CHECK(c.start == w.start);
    CHECK(c.end == w.end);
    CHECK(c.activations == w.live);
  }
  // computes are grouped by rank, in each rank's order
  for (std::size_t k = 1; k < t.computes.size(); ++k)
    CHECK((t.computes[k - 1].rank < t.computes[k].rank ||
           (t.computes[k - 1].rank == t.computes[k].rank && t.computes[k - 1].end <= t.computes[k].start)));
  REQUIRE(t.transfers.size() == 4);
  for (const pt::traced_transfer& x : t.transfers) {
    CAPTURE(x.label());
    CHECK_FALSE(x.via_comm);
    CHECK(x.arrived - x.sent == 0.5);
    const pt::traced_compute& from = t.computes[static_cast<std::size_t>(x.from_span)];
    const pt::traced_compute& to = t.computes[static_cast<std::size_t>(x.to_span)];
    CHECK(from.rank == x.from);
    CHECK(to.rank == x.to);
    CHECK(from.end == x.sent);
    CHECK(to.start >= x.arrived);
    CHECK(from.first.microbatch == x.microbatch);
  }
  // in the order they were sent
  CHECK(t.transfers[0].label() == "activation 0F0");
  CHECK(t.transfers[1].label() == "activation 0F1");
  CHECK(t.transfers[2].label() == "gradient 1B0");
  CHECK(t.transfers[3].label() == "gradient 1B1");
  CHECK(t.makespan() == 10);
  CHECK(t.busy(0) == 6);
  CHECK(t.bubble_fraction() == doctest::Approx((4.0 + 4.0) / 20.0));
  CHECK(t.peak_activations(0) == 2);
  CHECK(t.peak_activations() == 2);
}

TEST_CASE("step_trace: its figures are the simulator's, for every built-in schedule") {
  for (const pt::schedule_info& s : pt::schedule_infos) {
    if (pt::schedule_error(s.name, 4, 8, 0)) continue;
    CAPTURE(s.name);
    const pt::program p = pt::make_schedule(s.name, 4, 8);
    const pt::costs c{.f = 1, .b = 2, .comm = 0.25};
    const pt::timeline tl = pt::simulate(p.view(), c);
    const pt::step_trace t = pt::trace_of(p.view(), tl, {.unit = "", .latency = c.comm});
    CHECK(t.makespan() == doctest::Approx(tl.makespan()));
    CHECK(t.bubble_fraction() == doctest::Approx(tl.bubble_fraction()));
    std::size_t pairs = 0;
    for (const pt::action& a : p.view().actions) pairs += a.overlapped ? 1 : 0;
    CHECK(t.computes.size() == p.view().actions.size() - pairs);
    for (int r = 0; r < 4; ++r) CHECK(t.peak_activations(r) == doctest::Approx(tl.peak_activations(r)));
    // one transfer per lowered send
    const pt::runtime_plan plan = pt::build_plan(p);
    REQUIRE(plan.ok());
    const auto sends = std::count_if(plan.lowered().ops.begin(), plan.lowered().ops.end(),
                                     [](const pt::lowered_op& o) { return o.code == pt::op_code::send; });
    CHECK(static_cast<long>(t.transfers.size()) == static_cast<long>(sends));
  }
}

TEST_CASE("step_trace: a measured trace pairs each send with its receive through their groups") {
  using pt::kind, pt::op_code, pt::stream_id;
  const std::vector<pt::op_time> ops = {
      op(0, stream_id::compute, op_code::compute, kind::F, 0, 0, 0.000, 0.001),
      op(0, stream_id::comm, op_code::group, kind::F, -1, -1, 0.0012, 0.0020),
      op(0, stream_id::comm, op_code::send, kind::F, 0, 0, -1, -1),
      op(0, stream_id::comm, op_code::send, kind::F, 0, 7, -1, -1),  // its receive is missing: no transfer
      op(1, stream_id::compute, op_code::compute, kind::F, 1, 0, 0.0021, 0.0030),
      op(1, stream_id::compute, op_code::compute, kind::B, 1, 0, 0.0030, 0.0050),
      op(1, stream_id::comm, op_code::group, kind::F, -1, -1, 0.0005, 0.0020),
      op(1, stream_id::comm, op_code::recv, kind::F, 0, 0, -1, -1),
  };
  const pt::step_trace t = pt::trace_of(ops);
  CHECK(t.measured);
  CHECK(t.unit == "ms");
  CHECK(t.ranks == 2);
  REQUIRE(t.computes.size() == 3);
  CHECK(t.computes[0].start == 0);
  CHECK(t.computes[0].end == doctest::Approx(1.0));
  CHECK(t.computes[1].activations == 1);
  CHECK(t.computes[2].activations == 0);
  REQUIRE(t.comms.size() == 2);
  CHECK(t.comms[0].transfers == 2);
  CHECK(t.comms[1].transfers == 1);
  REQUIRE(t.transfers.size() == 1);
  const pt::traced_transfer& x = t.transfers[0];
  CHECK(x.via_comm);
  CHECK(x.from == 0);
  CHECK(x.to == 1);
  CHECK(x.from_span == 0);
  CHECK(x.to_span == 1);
  CHECK(x.sent == doctest::Approx(1.2));
  CHECK(x.arrived == doctest::Approx(2.0));
  CHECK(t.makespan() == doctest::Approx(5.0));
  // the latency the step implies: 1F0 waited for 0F0 (rank 1 was free), 2.1 − 1.0
  const pt::cost_model c = pt::measure_costs(t);
  CHECK(c.base().comm == doctest::Approx(1.1));
  CHECK(c.time(pt::F(0, 3)) == doctest::Approx(1.0));
  CHECK(c.time(pt::F(1, 3)) == doctest::Approx(0.9));
  CHECK(c.time(pt::B(1, 3)) == doctest::Approx(2.0));
}

TEST_CASE("step_trace: measure_costs of a simulated step gives back its cost model") {
  for (const pt::schedule_info& s : pt::schedule_infos) {
    if (pt::schedule_error(s.name, 4, 8, 0)) continue;
    CAPTURE(s.name);
    const pt::program p = pt::make_schedule(s.name, 4, 8);
    pt::cost_model truth(pt::costs{.f = 1, .b = 2, .comm = 0.25});
    const int S = p.view().stages;
    truth.stage(S - 1, pt::kind::F, 1.75);  // a heavy loss head
    truth.stage(0, pt::kind::B, 2.5);
    const pt::timeline tl = pt::simulate(p.view(), truth);
    pt::trace_options o;
    o.latency = 0.25;
    const pt::cost_model back = pt::measure_costs(pt::trace_of(p.view(), tl, o));
    CHECK(back.base().comm == doctest::Approx(0.25));
    for (const pt::action& a : p.view().actions) {
      if (a.overlapped) continue;  // a pair's halves have no times of their own
      CAPTURE(pt::to_text(a));
      bool only_paired = true;  // a kind of a stage seen only inside pairs keeps the base time
      for (std::size_t k = 0; k < p.view().actions.size(); ++k) {
        const pt::action& b = p.view().actions[k];
        const bool second = k > 0 && p.view().actions[k - 1].overlapped;
        if (b.stage == a.stage && b.what == a.what && !b.overlapped && !second) only_paired = false;
      }
      if (!only_paired) CHECK(back.time(a) == doctest::Approx(truth.time(a)));
    }
    // a simulated pair's halves are not measured apart (a measured step has no pairs: the host
    // executor runs them one after the other), so the whole step is compared without pairs
    const bool pairs =
        std::any_of(p.view().actions.begin(), p.view().actions.end(), [](const pt::action& a) { return a.overlapped; });
    if (!pairs) CHECK(pt::simulate(p.view(), back).makespan() == doctest::Approx(tl.makespan()));
  }
}

namespace {
/// Costs whose latency depends on the edge: 0.5 out of stage 0, 0.25 elsewhere.
struct edge_costs {
  pt::costs base{.f = 1, .b = 2};
  double time(const pt::action& a) const { return base.time(a); }
  double pair_time(const pt::action& x, const pt::action& y) const { return base.pair_time(x, y); }
  double latency(int from, int) const { return from == 0 ? 0.5 : 0.25; }
};
}  // namespace

TEST_CASE("step_trace: a cost source's per-edge latencies, an incomplete timeline, empty and unknown ranks") {
  const pt::program p = pt::make_one_f_one_b(3, 2);
  const edge_costs c;
  const pt::step_trace t = pt::trace_of(p.view(), pt::simulate(p.view(), c), c);
  REQUIRE(t.transfers.size() == 8);
  for (const pt::traced_transfer& x : t.transfers) {
    CAPTURE(x.label());
    CHECK(x.arrived - x.sent == (x.stage == 0 ? 0.5 : 0.25));
  }
  // a timeline that did not complete draws nothing
  pt::timeline stuck = pt::simulate(p.view());
  stuck.complete = false;
  const pt::step_trace none = pt::trace_of(p.view(), stuck);
  CHECK(none.ranks == 3);
  CHECK(none.computes.empty());
  CHECK(none.transfers.empty());
  // measured: the plan's rank count keeps a trailing idle rank; an op of no rank is skipped
  std::vector<pt::op_time> ops = {op(0, pt::stream_id::compute, pt::op_code::compute, pt::kind::F, 0, 0, 0, 0.001),
                                  op(-1, pt::stream_id::compute, pt::op_code::compute, pt::kind::F, 0, 1, 0, 0.001)};
  pt::trace_options o;
  o.ranks = 3;
  const pt::step_trace m = pt::trace_of(ops, o);
  CHECK(m.ranks == 3);
  CHECK(m.computes.size() == 1);
  CHECK(pt::trace_of(ops).ranks == 1);
  CHECK(m.bubble_fraction() == doctest::Approx(2.0 / 3.0));  // two ranks idle all along
}

TEST_CASE("step_trace: measure_costs takes the median, the mean of the middle two for an even count") {
  std::vector<pt::op_time> ops;
  double at = 0;
  for (double d : {1.0, 3.0, 2.0, 10.0}) {  // four forwards of stage 0: median (2 + 3) / 2
    ops.push_back(op(0, pt::stream_id::compute, pt::op_code::compute, pt::kind::F, 0, static_cast<int>(ops.size()), at,
                     at + d / 1000));
    at += d / 1000;
  }
  CHECK(pt::measure_costs(pt::trace_of(ops)).time(pt::F(0, 0)) == doctest::Approx(2.5));
}

TEST_CASE("step_trace: with edges, one transfer per crossing edge each way") {
  // 0 → 1 → 2 and the skip 0 → 2, stage s on rank s: three activations down, three gradients up
  const pt::program p = graph_programs::skip3();
  const pt::costs c{.f = 1, .b = 2, .comm = 0.5};
  const pt::step_trace st = pt::trace_of(p.view(), pt::simulate(p.view(), c), c);
  REQUIRE(st.transfers.size() == 6);
  int skip_down = 0, skip_up = 0;
  for (const pt::traced_transfer& x : st.transfers) {
    CHECK(x.arrived == doctest::Approx(x.sent + 0.5));
    skip_down += x.what == pt::kind::F && x.from == 0 && x.to == 2 ? 1 : 0;
    skip_up += x.what == pt::kind::B && x.from == 2 && x.to == 0 ? 1 : 0;
  }
  CHECK(skip_down == 1);
  CHECK(skip_up == 1);
}

}  // namespace test_step_trace
}  // namespace
