// The device executor over the record driver: each rank issues exactly its lowered program as
// driver calls, nothing is allocated or created during a step, and the ranks' sends and recvs
// pair up channel by channel. CPU only (no CUDA headers).
#include <pipetype/cuda/executor.hpp>
#include <pipetype/cuda/record.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "order.hpp"
#include "plans.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_record {

namespace pt = pipetype;
namespace pc = pipetype::cuda;
using call = pc::record_driver::call;
using ck = pc::record_driver::call_kind;

namespace {

// A stage that launches nothing: the record driver sees the executor's calls only.
struct quiet {
  using input = pt::tensor<float, 16>;
  using output = pt::tensor<float, 16>;
  using stash = pt::tensor<float, 8>;
  using weight_grad = pt::tensor<float, 4>;  // DualPipe runs a stage on two ranks: pipetype adds
  float grads[4] = {};
  std::span<float> weight_gradients() { return grads; }
  void forward(const pt::forward_ctx<quiet>&) {}
  void backward(const pt::backward_ctx<quiet>&) {}
  void backward_input(const pt::backward_ctx<quiet>&) {}
  void backward_weight(const pt::backward_ctx<quiet>&) {}
};

struct rank_run {
  std::vector<call> bind, step1, step2;
};

std::vector<rank_run> record_step(const pt::runtime_plan& plan) {
  const int L = plan.compute().lane_length();
  pt::uniform_chain<quiet> model(std::vector<quiet>(static_cast<std::size_t>(L)));
  std::vector<float> batch(2 * 16 * static_cast<std::size_t>(plan.compute().microbatches));  // two sources at most
  std::vector<int> comms(plan.lowered().comms.size());
  for (std::size_t c = 0; c < comms.size(); ++c) comms[c] = static_cast<int>(c);
  std::vector<rank_run> out;
  for (int r = 0; r < plan.compute().ranks; ++r) {
    pc::record_driver d;
    // quiet accumulates nothing: schedules that run backwards out of microbatch order are fine
    // (a stage graph's plan: the stages erased, so that one chain of quiet stages serves every graph)
    pc::executor ex{
        pt::views_of(plan), pt::entries_of(model), d, {.rank = r, .comms = comms, .ordered_gradients = false}};
    rank_run run;
    run.bind = d.calls();
    d.clear();
    ex.step(batch.data());
    run.step1 = d.calls();
    d.clear();
    ex.step(batch.data());
    run.step2 = d.calls();
    out.push_back(std::move(run));
  }
  return out;
}

bool same_call(const call& a, const call& b) {
  return a.what == b.what && a.stream == b.stream && a.event == b.event && a.comm == b.comm && a.peer == b.peer &&
         a.bytes == b.bytes && a.ptr == b.ptr && a.kind == b.kind && a.stage == b.stage && a.microbatch == b.microbatch;
}

// The calls rank r's lowered ops stand for, in order, checked against what was recorded.
std::string compare(const pt::lowered_view& L, int r, const std::vector<call>& got) {
  std::size_t k = 0;
  auto next = [&](ck what) -> const call* {
    if (k >= got.size() || got[k].what != what) return nullptr;
    return &got[k++];
  };
  const auto ops = L.rank_ops(r);
  const int aux = 2;    // the second compute stream (ranks with F&B pairs)
  bool second = false;  // the next compute op is the second half of an F&B pair
  int pair_fork = -1;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const pt::lowered_op& o = ops[i];
    const std::string where = "op " + std::to_string(i) + " (" + pt::to_text(o) + ")";
    if (o.code == pt::op_code::send || o.code == pt::op_code::recv) continue;  // inside its group
    const bool first_half = o.code == pt::op_code::compute && o.overlapped;
    const bool second_half = o.code == pt::op_code::compute && second;
    const int stream = second_half ? aux : static_cast<int>(o.stream);
    if (second_half) {
      const call* c = next(ck::wait);
      if (!c || c->stream != aux || c->event != pair_fork)
        return "expected the wait on the pair's fork before " + where;
    }
    if (o.wait_event >= 0) {
      const call* c = next(ck::wait);
      if (!c || c->event != o.wait_event || c->stream != stream) return "missing wait before " + where;
    }
    if (first_half) {  // the pair forks off the compute stream after the first half's wait
      const call* c = next(ck::record);
      if (!c || c->stream != 0) return "expected the pair's fork before " + where;
      pair_fork = c->event;
      second = true;
    }
    if (o.code == pt::op_code::compute) {
      const call* c = next(ck::compute);
      if (!c || c->stage != o.stage || c->microbatch != o.microbatch || c->kind != pt::kind_char(o.what) ||
          c->stream != (second_half ? aux : 0))
        return "expected the compute of " + where;
      if (second_half) {  // joins the compute stream again
        const call* j = next(ck::record);
        const call* w = next(ck::wait);
        if (!j || !w || j->stream != aux || w->stream != 0 || w->event != j->event)
          return "expected the pair's join after " + where;
        second = false;
      }
    } else {
      if (!next(ck::group_start)) return "expected group_start for " + where;
      std::size_t j = i + 1;
      for (; j < ops.size() && (ops[j].code == pt::op_code::send || ops[j].code == pt::op_code::recv); ++j) {
        const call* c = next(ops[j].code == pt::op_code::send ? ck::send : ck::recv);
        const pt::comm_desc& cd = L.comms[static_cast<std::size_t>(ops[j].comm)];
        const int local_peer = ops[j].peer == cd.rank_a ? 0 : 1;  // its rank in the communicator
        if (!c || c->peer != local_peer || c->comm != ops[j].comm || c->stream != 1 || c->bytes == 0)
          return "expected transfer " + pt::to_text(ops[j]) + " in the group of " + where;
      }
      if (!next(ck::group_end)) return "expected group_end after the transfers of " + where;
    }
    if (o.record_event >= 0) {  // a pair's second half records on the compute stream, after the join
      const call* c = next(ck::record);
      if (!c || c->event != o.record_event || c->stream != (second_half ? 0 : static_cast<int>(o.stream)))
        return "missing record after " + where;
    }
  }
  if (second) return "an F&B pair without its second half";
  // the step's fence: each stream records, then waits for the other's record
  const call* r0 = next(ck::record);
  const call* r1 = next(ck::record);
  const call* w1 = next(ck::wait);
  const call* w0 = next(ck::wait);
  if (!r0 || !r1 || !w1 || !w0 || r0->stream != 0 || r1->stream != 1 || w1->stream != 1 || w1->event != r0->event ||
      w0->stream != 0 || w0->event != r1->event)
    return "expected the step's fence after the last op";
  if (k != got.size()) return "extra calls after the last op";
  return "";
}

// The data dependencies of rank r's lowered program hold in the issued calls under CUDA's
// semantics: with vector clocks over the rank's streams (a record snapshots its stream's clock,
// a wait merges it), every op that reads or overwrites a slot must come after the slot's last
// writer, and a write after the readers since. Ops: computes and groups (a group stands for its
// transfers), identified by order.
std::string happens_before(const pt::lowered_view& L, int r, const std::vector<call>& got, int steps = 1) {
  using clock = std::array<int, 4>;
  std::array<clock, 4> at{};  // per stream
  std::map<int, clock> ev;
  const auto ops = L.rank_ops(r);
  std::vector<std::size_t> units;  // the compute and group ops of the rank, in order, step after step
  for (std::size_t k = 0; k < static_cast<std::size_t>(steps); ++k)
    for (std::size_t i = 0; i < ops.size(); ++i)
      if (ops[i].code == pt::op_code::compute || ops[i].code == pt::op_code::group) units.push_back(k * ops.size() + i);
  std::map<std::size_t, std::pair<int, clock>> done;  // op → (its stream, the clock when it was issued)
  std::size_t u = 0;
  for (const call& c : got) {
    const int stream = c.what == ck::group_end ? 1 : c.stream;  // groups run on the communication stream
    if (stream < 0 || stream > 3) continue;
    clock& me = at[static_cast<std::size_t>(stream)];
    if (c.what == ck::record) ev[c.event] = me;
    if (c.what == ck::wait)
      for (std::size_t k = 0; k < 4; ++k) me[k] = std::max(me[k], ev[c.event][k]);
    if (c.what == ck::compute || c.what == ck::group_end) {  // a group is placed at its group_end
      if (u >= units.size()) return "more computes and groups than the program has";
      ++me[static_cast<std::size_t>(stream)];
      done[units[u++]] = {stream, me};
    }
  }
  auto hb = [&](std::size_t w, std::size_t x) {
    const auto& [ws, wc] = done.at(w);
    const auto& [xs, xc] = done.at(x);
    return xc[static_cast<std::size_t>(ws)] >= wc[static_cast<std::size_t>(ws)];
  };
  // a transfer stands for its group (ops are numbered across steps: step k's op i is k·N + i)
  const std::size_t count = ops.size() * static_cast<std::size_t>(steps);
  std::vector<std::size_t> unit(count);
  for (std::size_t n = 0, group = 0; n < count; ++n) {
    const pt::op_code code = ops[n % ops.size()].code;
    if (code == pt::op_code::group) group = n;
    unit[n] = code == pt::op_code::send || code == pt::op_code::recv ? group : n;
  }
  return slot_order<std::size_t>(
      count, [&](std::size_t n) { return ops[n % ops.size()]; },
      [&](std::size_t n) { return unit[n]; }, hb, [](std::size_t x) { return "op " + std::to_string(x); },
      L.slot_lists);
}

void check_plan(const pt::runtime_plan& plan) {
  REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
  const std::vector<rank_run> runs = record_step(plan);
  const pt::lowered_view L = plan.lowered();
  std::map<std::tuple<int, int, int>, std::vector<std::size_t>> sends, recvs;  // (comm, from, to) → bytes in order
  for (int r = 0; r < L.ranks; ++r) {
    CAPTURE(r);
    const rank_run& run = runs[static_cast<std::size_t>(r)];
    // binding: events and two streams made, pools allocated — and nothing of that in a step
    int events = 0, streams = 0;
    for (const call& c : run.bind) {
      events += c.what == ck::make_event;
      streams += c.what == ck::make_stream;
    }
    // the pool, the step's fence, an F&B pair's fork and join, the capture's fork and one join per
    // stream; compute, comm, the pairs' second compute stream and the capture's origin
    bool pairs = false;
    for (const pt::lowered_op& o : L.rank_ops(r)) pairs = pairs || o.overlapped;
    CHECK(events == L.resources[static_cast<std::size_t>(r)].events + 2 + (pairs ? 2 : 0) + 1 + (pairs ? 3 : 2));
    CHECK(streams == (pairs ? 4 : 3));
    for (const call& c : run.step1)
      CHECK((c.what != ck::allocate && c.what != ck::make_event && c.what != ck::make_stream));
    // exactly the lowered program; every wait after a record of its event in the same step;
    // every slot's readers and writers ordered by the streams and events as issued
    CHECK(compare(L, r, run.step1) == "");
    CHECK(happens_before(L, r, run.step1) == "");
    std::vector<call> both = run.step1;  // and across the step boundary (the fence)
    both.insert(both.end(), run.step2.begin(), run.step2.end());
    CHECK(happens_before(L, r, both, 2) == "");
    std::vector<char> recorded(static_cast<std::size_t>(events), 0);  // (ids: the pool first)
    for (const call& c : run.step1) {
      if (c.what == ck::record) recorded[static_cast<std::size_t>(c.event)] = 1;
      if (c.what == ck::wait) CHECK(recorded[static_cast<std::size_t>(c.event)]);
      const auto global = [&](const call& x) {
        const pt::comm_desc& cd = L.comms[static_cast<std::size_t>(x.comm)];
        return x.peer == 0 ? cd.rank_a : cd.rank_b;
      };
      if (c.what == ck::send) sends[{c.comm, r, global(c)}].push_back(c.bytes);
      if (c.what == ck::recv) recvs[{c.comm, global(c), r}].push_back(c.bytes);
    }
    // the program is static: the second step issues the same calls, on the same buffers
    REQUIRE(run.step2.size() == run.step1.size());
    for (std::size_t i = 0; i < run.step1.size(); ++i) CHECK(same_call(run.step1[i], run.step2[i]));
  }
  CHECK(sends == recvs);  // per channel: as many sends as recvs, the same sizes in the same order
}

}  // namespace

TEST_CASE("cuda record: every built-in schedule issues exactly its lowered program on every rank") {
  int pair_ranks = 0;  // ranks with overlapped F&B pairs (DualPipe, DualPipeV): the second stream is covered
  for_each_builtin_plan([&](const pt::runtime_plan& plan) {
    check_plan(plan);
    for (int r = 0; r < plan.lowered().ranks; ++r)
      for (const pt::lowered_op& o : plan.lowered().rank_ops(r))
        if (o.overlapped) {
          ++pair_ranks;
          break;
        }
  });
  CHECK(pair_ranks > 20);
}

TEST_CASE("cuda record: a stage graph's plans issue exactly their lowered program, fan-ins and fan-outs ordered") {
  const std::vector<pt::stage_edge> skip{{0, 1}, {1, 2}, {2, 3}, {0, 2}}, towers{{0, 2}, {1, 2}, {2, 3}};
  for (const auto* edges : {&skip, &towers})
    for (const char* name : {"gpipe", "1f1b", "zb-h1", "zb-auto", "interleaved-1f1b", "zb-v", "dualpipe"}) {
      CAPTURE(std::string(name));
      pt::schedule_params params;
      params.edges = *edges;
      const int v = pt::default_chunks(*pt::find_schedule(name));
      const int m = std::string_view(name) == "dualpipe" ? 8 : 6;  // DualPipe: m >= 2 x ranks
      const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, 4 / v, m, v, params));
      REQUIRE(!plan.lowered().slot_lists.empty());
      check_plan(plan);
    }
}

TEST_CASE("cuda record: a compile-time plan binds too") {
  constexpr auto plan = pt::make_plan<pt::zb_v<pt::ranks<2>, pt::microbatches<4>>>();
  pt::uniform_chain<quiet> model(std::vector<quiet>(4));
  pc::record_driver d;
  pc::executor ex{plan, model, d, {.rank = 1}};
  std::vector<float> batch(16 * 4);
  d.clear();
  ex.step(batch.data());
  int computes = 0;
  for (const call& c : d.calls()) computes += c.what == ck::compute;
  CHECK(computes == 2 * 3 * 4);  // rank 1: two stages, F I W per microbatch
}

TEST_CASE("cuda record: bad bindings are named") {
  const auto plan = pt::build_plan(pt::make_one_f_one_b(2, 4));
  pc::record_driver d;
  pt::uniform_chain<quiet> three(std::vector<quiet>(3)), two(std::vector<quiet>(2));
  CHECK_THROWS_AS(pc::executor(plan, three, d, {.rank = 0}), pt::shape_error);
  CHECK_THROWS_WITH(pc::executor(plan, two, d, {.rank = 2}), doctest::Contains("rank 2 is not in the plan's 2 ranks"));
  CHECK_NOTHROW(pc::executor(plan, two, d, {.rank = 0}));  // integer communicators default to 0, 1, ...
  const auto four_ranks = pt::build_plan(pt::make_one_f_one_b(4, 4));
  pt::uniform_chain<quiet> four(std::vector<quiet>(4));
  CHECK_THROWS_WITH(pc::executor(four_ranks, four, d, {.rank = 0, .comms = {0, 1}}),
                    doctest::Contains("uses 3 communicators, 2 given"));
  CHECK_THROWS_WITH(pc::executor(plan, two, d), doctest::Contains("executor_options::rank is not set"));
}

TEST_CASE("cuda record: a step captured into a graph forks from the origin stream, joins back, and updates in place") {
  const auto plan = pt::build_plan(pt::make_interleaved_1f1b(2, 4, 2));
  pt::uniform_chain<quiet> model(std::vector<quiet>(4));
  pc::record_driver d;
  pc::executor ex{plan, model, d, {.rank = 0}};
  std::vector<float> a(16 * 4), b(16 * 4);
  d.clear();
  ex.step(a.data());
  const std::vector<call> eager = d.calls();
  d.clear();
  ex.capture(a.data());
  const std::vector<call>& c = d.calls();
  // begin_capture on the origin (stream 2), fork: record there, both streams wait on it
  REQUIRE(c.size() > 8);
  CHECK(c[0].what == ck::begin_capture);
  const int origin = c[0].stream, fork = c[1].event;
  CHECK(origin == 2);
  CHECK((c[1].what == ck::record && c[1].stream == origin));
  CHECK((c[2].what == ck::wait && c[2].stream == 0 && c[2].event == fork));
  CHECK((c[3].what == ck::wait && c[3].stream == 1 && c[3].event == fork));
  // then exactly the eager step's calls
  for (std::size_t i = 0; i < eager.size(); ++i) CHECK(same_call(c[4 + i], eager[i]));
  // join: each stream records, the origin waits; end_capture, instantiate
  std::size_t k = 4 + eager.size();
  for (int s = 0; s < 2; ++s, k += 2) {
    CHECK((c[k].what == ck::record && c[k].stream == s));
    CHECK((c[k + 1].what == ck::wait && c[k + 1].stream == origin && c[k + 1].event == c[k].event));
  }
  CHECK((c[k].what == ck::end_capture && c[k].stream == origin));
  CHECK(c[k + 1].what == ck::instantiate);
  CHECK(ex.instantiations() == 1);
  // a new batch: the same topology, other addresses → update, no second instantiation
  ex.capture(b.data());
  CHECK(ex.instantiations() == 1);
  CHECK(ex.updates() == 1);
  // replay: the rank's streams join into the origin, one launch there, the streams wait on it
  d.clear();
  ex.replay();
  const std::vector<call>& rp = d.calls();
  REQUIRE(rp.size() == 2 * 2 + 1 + 1 + 2);
  for (std::size_t s = 0; s < 2; ++s) {
    CHECK((rp[2 * s].what == ck::record && rp[2 * s].stream == static_cast<int>(s)));
    CHECK((rp[2 * s + 1].what == ck::wait && rp[2 * s + 1].stream == origin && rp[2 * s + 1].event == rp[2 * s].event));
  }
  CHECK((rp[4].what == ck::launch && rp[4].stream == origin));
  CHECK((rp[5].what == ck::record && rp[5].stream == origin));
  CHECK((rp[6].what == ck::wait && rp[6].stream == 0 && rp[6].event == rp[5].event));
  CHECK((rp[7].what == ck::wait && rp[7].stream == 1 && rp[7].event == rp[5].event));
  pc::executor fresh{plan, model, d, {.rank = 1}};
  CHECK_THROWS_AS(fresh.replay(), std::logic_error);
}

namespace {
constexpr auto unrolled_1f1b = pt::make_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>>();
constexpr auto unrolled_zbv = pt::make_plan<pt::zb_v<pt::ranks<2>, pt::microbatches<4>>>();
constexpr auto unrolled_dpv = pt::make_plan<pt::dualpipe_v<pt::ranks<4>, pt::microbatches<8>>>();  // F&B pairs

template <const auto& Plan, int Rank>
void check_unrolled(int stages) {
  CAPTURE(Rank);
  pt::uniform_chain<quiet> model(std::vector<quiet>(static_cast<std::size_t>(stages)));
  std::vector<int> comms(Plan.lowered().comms.size());
  for (std::size_t c = 0; c < comms.size(); ++c) comms[c] = static_cast<int>(c);
  std::vector<float> batch(16 * 8);
  pc::record_driver d;
  pc::executor ex{Plan, model, d, {.rank = Rank, .comms = comms}};
  d.clear();
  ex.step(batch.data());
  const std::vector<call> looped = d.calls();
  d.clear();
  ex.template step_unrolled<Plan, Rank>(batch.data());
  REQUIRE(d.calls().size() == looped.size());
  for (std::size_t i = 0; i < looped.size(); ++i) CHECK(same_call(d.calls()[i], looped[i]));
  CHECK(compare(Plan.lowered(), Rank, d.calls()) == "");
}
}  // namespace

TEST_CASE("cuda record: the unrolled step of a compile-time plan issues exactly the looped step's calls") {
  check_unrolled<unrolled_1f1b, 0>(4);
  check_unrolled<unrolled_1f1b, 1>(4);
  check_unrolled<unrolled_1f1b, 3>(4);
  check_unrolled<unrolled_zbv, 0>(4);
  check_unrolled<unrolled_zbv, 1>(4);
  check_unrolled<unrolled_dpv, 1>(8);
  check_unrolled<unrolled_dpv, 3>(8);
  // bound to another rank: refused, not issued
  pt::uniform_chain<quiet> model(std::vector<quiet>(4));
  pc::record_driver d;
  pc::executor ex{unrolled_1f1b, model, d, {.rank = 2}};
  std::vector<float> batch(16 * 8);
  const auto wrong_rank = [&] { ex.step_unrolled<unrolled_1f1b, 1>(batch.data()); };
  CHECK_THROWS_WITH(wrong_rank(), doctest::Contains("bound to rank 2"));
}

namespace {
// The record driver, failing its n-th send the way the CUDA driver fails a call.
struct failing_driver : pc::record_driver {
  int sends_left = 0;
  void send(const void* p, std::size_t n, int peer, comm c, stream s) {
    if (sends_left-- == 0) throw pc::device_error("pipetype::cuda: rank 1: ncclSend failed: unhandled system error");
    record_driver::send(p, n, peer, c, s);
  }
};
}  // namespace

TEST_CASE("cuda record: a failing call names the op being issued") {
  const auto plan = pt::build_plan(pt::make_one_f_one_b(2, 4));
  pt::uniform_chain<quiet> model(std::vector<quiet>(2));
  failing_driver d;
  d.sends_left = 1;  // rank 0's second send: activation 0F1
  pc::executor ex{plan, model, d, {.rank = 0}};
  std::vector<float> batch(16 * 4);
  try {
    ex.step(batch.data());
    FAIL("the send should have failed");
  } catch (const pc::device_error& e) {
    const std::string what = e.what();
    CHECK(what.find("ncclSend failed: unhandled system error") != std::string::npos);
    CHECK(what.find("[while issuing rank 0, op ") != std::string::npos);
    CHECK(what.find("group: send activation 0F1 to rank 1") != std::string::npos);
  }
}

namespace {
// Notes the stream each stage call was handed, next to what the executor issued it on.
struct probe {
  using input = pt::tensor<float, 16>;
  using output = pt::tensor<float, 16>;
  using weight_grad = pt::tensor<float, 4>;
  float grads[4] = {};
  std::vector<void*>* seen = nullptr;
  std::span<float> weight_gradients() { return grads; }
  void forward(const pt::forward_ctx<probe>& c) { seen->push_back(c.stream); }
  void backward(const pt::backward_ctx<probe>& c) { seen->push_back(c.stream); }
  void backward_input(const pt::backward_ctx<probe>& c) { seen->push_back(c.stream); }
  void backward_weight(const pt::backward_ctx<probe>& c) { seen->push_back(c.stream); }
};
}  // namespace

TEST_CASE(
    "cuda record: a stage is handed the stream its call is issued on (an F&B pair's second half: the second stream)") {
  const auto plan = pt::build_plan(pt::make_schedule("dualpipe-v", 2, 4));
  REQUIRE(plan.ok());
  std::vector<void*> seen;
  std::vector<probe> stages(4);
  for (probe& s : stages) s.seen = &seen;
  pt::uniform_chain<probe> model(std::move(stages));
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    pc::record_driver d;
    pc::executor ex{plan, model, d, {.rank = r}};
    std::vector<float> batch(16 * 4);
    seen.clear();
    d.clear();
    ex.step(batch.data());
    std::vector<void*> issued;
    for (const call& c : d.calls())
      if (c.what == ck::compute) issued.push_back(d.native(c.stream));
    CHECK(seen == issued);
    CHECK(std::count(issued.begin(), issued.end(), d.native(2)) > 0);  // some halves ran on the second stream
  }
}

}  // namespace test_record
}  // namespace

namespace {
namespace test_record_sets {
namespace pt = pipetype;
namespace pc = pipetype::cuda;
using ck = pc::record_driver::call_kind;

// Several tensors per edge on the device executor: an activation moves the whole block (floats,
// then the ids at the next 64 bytes), a gradient only the floats; a batch gives each source tensor
// its own array, and one that does not fit is refused before any call.
struct set_stage {
  using input = pt::tensors<pt::tensor<float, 4>, pt::no_grad<pt::tensor<std::int32_t, 4>>>;
  using output = input;
  std::vector<const void*> seen;  // where the source read its ids, per forward
  void forward(const pt::forward_ctx<set_stage>& c) {
    if (c.stage == 0) seen.push_back(c.input.get<1>().data());
  }
  void backward(const pt::backward_ctx<set_stage>&) {}
};

TEST_CASE("cuda record: a set's activation moves its whole block, its gradient only the tensors with one") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 3));
  REQUIRE(plan.ok());
  std::vector<float> x(12);
  std::vector<std::int32_t> ids(12);
  for (int r = 0; r < 2; ++r) {
    pt::uniform_chain<set_stage> model(std::vector<set_stage>(2));
    pc::record_driver d;
    pc::executor ex{pt::views_of(plan), pt::entries_of(model), d, {.rank = r, .comms = {0}}};
    d.clear();
    pt::batch bad;
    bad.input(x);
    CHECK_THROWS_AS(ex.step(bad), pt::shape_error);
    CHECK(d.calls().empty());  // nothing issued
    pt::batch b;
    b.input(x).input(ids);
    ex.step(b);
    int sends = 0;
    for (const pc::record_driver::call& c : d.calls()) {
      if (c.what != ck::send && c.what != ck::recv) continue;
      ++sends;
      // rank 0 sends activations and receives gradients; rank 1 the other way round
      const bool activation = (c.what == ck::send) == (r == 0);
      CHECK(c.bytes == (activation ? 80u : 16u));
    }
    CHECK(sends == 6);
    if (r == 0) {
      REQUIRE(model.stage(0).seen.size() == 3);
      for (std::size_t j = 0; j < 3; ++j) CHECK(model.stage(0).seen[j] == ids.data() + 4 * j);
    }
  }
}

// A sink on the device executor: its targets come from the batch, its losses go to the executor's
// loss array (the driver's memory: host memory with the record driver), its backward gets the
// loss scaling's factor.
struct scored {
  using input = pt::tensor<float, 2>;
  using output = pt::tensor<float, 2>;
  using target = pt::tensor<std::int32_t, 1>;
  float seen_scale = -1;
  void forward(const pt::forward_ctx<scored>& c) {
    if (c.loss) *c.loss = static_cast<float>(c.target[0]) + 0.5f;
    if (c.loss && !c.output.empty()) c.output[1] = 3.0f * static_cast<float>(c.microbatch);  // kept outputs
  }
  void backward(const pt::backward_ctx<scored>& c) {
    if (!c.target.empty()) seen_scale = c.loss_scale;
  }
};

TEST_CASE("cuda record: a sink reads its targets and writes its losses into the executor's loss array") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("gpipe", 2, 4));
  REQUIRE(plan.ok());
  std::vector<float> x(8);
  const std::vector<std::int32_t> labels{7, 8, 9, 10};
  for (int r = 0; r < 2; ++r) {
    pt::uniform_chain<scored> model(std::vector<scored>(2));
    pc::record_driver d;
    pc::executor ex{pt::views_of(plan), pt::entries_of(model), d, {.rank = r, .comms = {0}}};
    CHECK_THROWS_AS(ex.step(x.data()), pt::shape_error);  // one array has no targets
    pt::batch b;
    b.input(x).target(labels).scale(pt::loss_scaling::sum());
    ex.step(b);
    CHECK(ex.loss_scale() == 1.0);
    if (r == 0) {
      CHECK(ex.losses() == nullptr);  // no sink here
      continue;
    }
    REQUIRE(ex.losses() != nullptr);
    for (int j = 0; j < 4; ++j) CHECK(ex.losses()[j] == static_cast<float>(labels[static_cast<std::size_t>(j)]) + 0.5f);
    CHECK(model.stage(1).seen_scale == 1.0f);
  }
}

// `scored` with a weight_grad (pipetype adds it), as DualPipe needs of a stage it runs on two ranks.
struct scored_w : scored {
  using weight_grad = pt::tensor<float, 4>;
  float grads[4] = {};
  std::span<float> weight_gradients() { return grads; }
  void forward(const pt::forward_ctx<scored_w>& c) {
    if (c.loss) *c.loss = static_cast<float>(c.target[0]) + 0.5f;
  }
  void backward(const pt::backward_ctx<scored_w>&) {}
  void backward_input(const pt::backward_ctx<scored_w>&) {}
  void backward_weight(const pt::backward_ctx<scored_w>&) {}
};

TEST_CASE("cuda record: under DualPipe each microbatch's loss is written by exactly one rank, as writes_loss says") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("dualpipe", 2, 4));
  REQUIRE(plan.ok());
  std::vector<float> x(8);
  const std::vector<std::int32_t> labels{7, 8, 9, 10};
  std::vector<int> writers(4, 0);
  for (int r = 0; r < 2; ++r) {
    pt::uniform_chain<scored_w> model(std::vector<scored_w>(2));
    pc::record_driver d;
    pc::executor ex{pt::views_of(plan), pt::entries_of(model), d, {.rank = r}};
    pt::batch b;
    b.input(x).target(labels);
    ex.step(b);
    REQUIRE(ex.losses() != nullptr);  // both ranks hold the sink (one lane's each)
    CHECK_FALSE(ex.writes_loss(0, -1));
    CHECK_FALSE(ex.writes_loss(0, 4));
    CHECK_FALSE(ex.writes_loss(1, 0));  // one sink
    for (int j = 0; j < 4; ++j)
      if (ex.writes_loss(0, j)) {
        ++writers[static_cast<std::size_t>(j)];
        CHECK(ex.losses()[j] == static_cast<float>(labels[static_cast<std::size_t>(j)]) + 0.5f);
      }
  }
  CHECK(writers == std::vector<int>{1, 1, 1, 1});
}

// Varying tensors on the device executor: each transfer moves its microbatch's bytes.
struct tokens {
  using input = pt::varying<pt::tensor<float, 8>>;  // 2 floats per token, 4 tokens at most
  using output = input;
  void forward(const pt::forward_ctx<tokens>&) {}
  void backward(const pt::backward_ctx<tokens>&) {}
};

TEST_CASE("cuda record: a transfer of varying tensors moves its microbatch's bytes") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("gpipe", 2, 3));
  REQUIRE(plan.ok());
  const std::vector<float> x(3 * 8);
  const std::vector<std::size_t> lens{4, 1, 0};
  for (int r = 0; r < 2; ++r) {
    pt::uniform_chain<tokens> model(std::vector<tokens>(2));
    pc::record_driver d;
    pc::executor ex{pt::views_of(plan), pt::entries_of(model), d, {.rank = r, .comms = {0}}};
    pt::batch b;
    b.input(x).lengths(lens, 4);
    d.clear();
    ex.step(b);
    std::vector<std::size_t> act, grad;
    for (const pc::record_driver::call& c : d.calls())
      if (c.what == ck::send || c.what == ck::recv) ((c.what == ck::send) == (r == 0) ? act : grad).push_back(c.bytes);
    CHECK(act == std::vector<std::size_t>{32, 8, 0});   // gpipe: forwards in microbatch order
    CHECK(grad == std::vector<std::size_t>{32, 8, 0});  // and its backwards too
    d.clear();
    pt::batch full;  // no lengths: the whole slot
    full.input(x);
    ex.step(full);
    for (const pc::record_driver::call& c : d.calls())
      if (c.what == ck::send || c.what == ck::recv) CHECK(c.bytes == 32);
  }
}

TEST_CASE("cuda record: a forward-only plan issues forwards and activation transfers only") {
  const pt::runtime_plan plan = pt::build_plan(pt::forward_only_of(pt::make_schedule("1f1b", 2, 4)));
  REQUIRE(plan.ok());
  std::vector<float> x(8);
  const std::vector<std::int32_t> labels{1, 2, 3, 4};
  int transfers = 0;
  for (int r = 0; r < 2; ++r) {
    pt::uniform_chain<scored> model(std::vector<scored>(2));
    pc::record_driver d;
    pc::executor ex{pt::views_of(plan), pt::entries_of(model), d, {.rank = r, .comms = {0}}};
    pt::batch b;
    b.input(x).target(labels);
    d.clear();
    ex.step(b);
    for (const pc::record_driver::call& c : d.calls()) {
      if (c.what == ck::compute) CHECK(c.kind == 'F');
      if (c.what == ck::send || c.what == ck::recv) {
        ++transfers;
        CHECK(c.bytes == 2 * sizeof(float));  // an activation
        CHECK((c.what == ck::send) == (r == 0));
      }
    }
    if (r == 1)
      for (int j = 0; j < 4; ++j)
        CHECK(ex.losses()[j] == static_cast<float>(labels[static_cast<std::size_t>(j)]) + 0.5f);
  }
  CHECK(transfers == 8);  // each microbatch's activation, sent and received
}

TEST_CASE("cuda record: with keep_outputs the sinks write their outputs where outputs() says") {
  const pt::runtime_plan plan = pt::build_plan(pt::forward_only_of(pt::make_schedule("gpipe", 2, 3)));
  std::vector<float> x(6);
  const std::vector<std::int32_t> labels{1, 2, 3};
  for (int r = 0; r < 2; ++r) {
    pt::uniform_chain<scored> model(std::vector<scored>(2));
    pc::record_driver d;
    pc::executor ex{pt::views_of(plan), pt::entries_of(model), d, {.rank = r, .comms = {0}, .keep_outputs = true}};
    pt::batch b;
    b.input(x).target(labels);
    ex.step(b);
    if (r == 0) {
      CHECK(ex.outputs() == nullptr);  // no sink here
      continue;
    }
    REQUIRE(ex.outputs() != nullptr);
    for (int j = 0; j < 3; ++j) {
      const auto* out = reinterpret_cast<const float*>(ex.outputs() + ex.output_offset(0, j));
      CHECK(out[1] == 3.0f * static_cast<float>(j));
    }
  }
}

}  // namespace test_record_sets
}  // namespace
