// The loopback transport over record drivers (memory on the host, copies at once): every rank
// of a pipeline in one process, each on its own thread, meeting at its groups. With the MLP of
// examples/mlp.hpp this runs the device executor end to end on CPU: every built-in schedule's
// gradients and loss equal the unpipelined reference bit for bit (DualPipe's two model copies
// summed: to rounding) and every data dependency, across ranks and streams, holds under CUDA's
// event semantics, a rank that fails stops the others with its error, and a whole-pipeline
// capture forks every rank from one origin stream.
#include <pipetype/cuda/executor.hpp>
#include <pipetype/cuda/loopback.hpp>
#include <pipetype/cuda/record.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "../host/fan_out_stages.hpp"
#include "graph_model.hpp"
#include "mlp.hpp"
#include "order.hpp"
#include "plans.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_loopback {

namespace pt = pipetype;
namespace pc = pipetype::cuda;
using ck = pc::record_driver::call_kind;
using namespace std::chrono_literals;

namespace {

// One record driver per rank, with disjoint stream and event ids and one shared call sequence.
struct drivers {
  std::atomic<std::uint64_t> sequence{0};
  std::vector<std::unique_ptr<pc::record_driver>> own;
  std::vector<pc::record_driver*> ptrs;
  explicit drivers(int p) {
    for (int r = 0; r < p; ++r) {
      own.push_back(std::make_unique<pc::record_driver>(r * 100000, &sequence));
      ptrs.push_back(own.back().get());
    }
  }
};

// Every data dependency of the whole pipeline holds in the calls the ranks made, under CUDA's
// semantics, across ranks: the ranks' calls merged in the order they were made; vector clocks
// over every stream (a record snapshots its stream's clock, a wait merges it in, a compute or a
// copy ticks it); a transfer is the receiver's copy, which writes the receiver's slot and reads
// the sender's (the k-th recv of a channel matches its k-th send). Each slot's reader must come
// after its writer, each overwrite after the readers.
std::string pipeline_happens_before(const pt::runtime_plan& plan, const std::vector<pc::record_driver*>& d) {
  using call = pc::record_driver::call;
  using clock = std::map<int, int>;
  const pt::lowered_view L = plan.lowered();
  const int p = L.ranks;
  std::vector<std::pair<int, const call*>> all;
  for (int r = 0; r < p; ++r)
    for (const call& c : d[static_cast<std::size_t>(r)]->calls()) all.emplace_back(r, &c);
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.second->seq < b.second->seq; });
  // per rank: its compute ops and its recv ops, in lowered order (the order their calls come in)
  std::vector<std::vector<std::size_t>> computes(static_cast<std::size_t>(p)), recvs(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    const auto ops = L.rank_ops(r);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].code == pt::op_code::compute) computes[static_cast<std::size_t>(r)].push_back(i);
      if (ops[i].code == pt::op_code::recv) recvs[static_cast<std::size_t>(r)].push_back(i);
    }
  }
  std::map<int, clock> at, ev;
  using unit = std::pair<int, std::size_t>;  // (rank, lowered op)
  std::map<unit, std::pair<int, clock>> stamp;
  std::vector<std::size_t> nc(static_cast<std::size_t>(p), 0), nr(static_cast<std::size_t>(p), 0);
  for (const auto& [r, c] : all) {
    clock& me = at[c->stream];
    const auto R = static_cast<std::size_t>(r);
    if (c->what == ck::record) ev[c->event] = me;
    if (c->what == ck::wait)
      for (const auto& [k, v] : ev[c->event]) me[k] = std::max(me[k], v);
    if (c->what == ck::compute || c->what == ck::copy) {
      ++me[c->stream];
      std::vector<std::size_t>& list = c->what == ck::compute ? computes[R] : recvs[R];
      std::size_t& n = c->what == ck::compute ? nc[R] : nr[R];
      if (n >= list.size()) return "rank " + std::to_string(r) + " made more computes or copies than its program has";
      stamp[{r, list[n++]}] = {c->stream, me};
    }
  }
  // the k-th send of each (comm, from, to) channel is the k-th recv's copy
  std::map<std::tuple<int, int, int>, std::vector<unit>> sends, recv_units;
  for (int r = 0; r < p; ++r) {
    const auto ops = L.rank_ops(r);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].code == pt::op_code::send) sends[{ops[i].comm, r, ops[i].peer}].push_back({r, i});
      if (ops[i].code == pt::op_code::recv) recv_units[{ops[i].comm, ops[i].peer, r}].push_back({r, i});
    }
  }
  std::map<unit, unit> copy_of;
  for (const auto& [ch, list] : sends)
    for (std::size_t k = 0; k < list.size(); ++k) copy_of[list[k]] = recv_units.at(ch).at(k);
  auto hb = [&](const unit& w, const unit& x) {
    const auto& [ws, wc] = stamp.at(w);
    const clock& xc = stamp.at(x).second;
    const auto it = xc.find(ws);
    return it != xc.end() && it->second >= wc.at(ws);
  };
  auto name = [](const unit& u) { return "rank " + std::to_string(u.first) + " op " + std::to_string(u.second); };
  for (int r = 0; r < p; ++r) {  // a send stands for the receiver's copy; every other op for itself
    const auto ops = L.rank_ops(r);
    const std::string e = slot_order<unit>(
        ops.size(), [&](std::size_t i) { return ops[i]; },
        [&](std::size_t i) {
          return ops[i].code == pt::op_code::send ? copy_of.at({r, i}) : unit{r, i};
        },
        hb, name, L.slot_lists);
    if (!e.empty()) return "on rank " + std::to_string(r) + "'s slots: " + e;
  }
  return "";
}

struct outcome {
  double max_diff = -1, rel_diff = -1;
  bool bitwise = false, loss_bitwise = false;
  std::string order;  // pipeline_happens_before's verdict ("" when every dependency holds)
};

// One step of `plan` over loopback record drivers against mlp::reference_step. Plans with several
// lanes get one model per rank (a model stage runs on two ranks), whose gradients are summed.
outcome loopback_step(const pt::runtime_plan& plan) {
  REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
  const pt::program_view pv = plan.compute();
  const int p = pv.ranks, S = pv.lane_length(), m = pv.microbatches;
  const bool own_models = pv.lanes > 1;
  std::vector<pt::uniform_chain<mlp::stage>> models;
  for (int r = 0; r < (own_models ? p : 1); ++r) models.push_back(mlp::make_model(8, S));
  auto ref = mlp::make_model(8, S);
  const mlp::batch b = mlp::make_batch(m, 0);
  std::vector<double> losses(static_cast<std::size_t>(m)), ref_losses;
  for (auto& model : models) mlp::attach(model, b, losses, m);
  drivers d(p);
  outcome o;
  pc::loopback_pipeline<pc::record_driver> pipe{plan, models, d.ptrs, {.deadline = 20s}};  // one per rank, or shared
  for (auto* x : d.ptrs) x->clear();
  pipe.step(b.inputs.data());
  o.order = pipeline_happens_before(plan, d.ptrs);
  mlp::reference_step(ref, b, ref_losses, m);
  // the models' gradients, summed over the copies
  auto sum = mlp::make_model(8, S);
  for (int s = 0; s < S; ++s) {
    std::span<float> acc = sum.stage(s).weight_gradients();
    for (auto& model : models) {
      std::span<const float> g = model.stage(s).weight_gradients();
      for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += g[i];
    }
  }
  o.max_diff = mlp::max_grad_diff(sum, ref, &o.bitwise);
  double scale = 0;
  for (int s = 0; s < S; ++s)
    for (float g : ref.stage(s).weight_gradients()) scale = std::max(scale, std::fabs(double(g)));
  o.rel_diff = o.max_diff / scale;
  const double loss = mlp::mean_loss(losses), ref_loss = mlp::mean_loss(ref_losses);
  o.loss_bitwise = std::memcmp(&loss, &ref_loss, sizeof(double)) == 0;
  return o;
}

}  // namespace

TEST_CASE("cuda loopback: every built-in schedule trains the MLP like the unpipelined reference") {
  int runs = 0;
  for_each_builtin_plan([&](const pt::runtime_plan& plan) {
    const outcome o = loopback_step(plan);
    CHECK(o.order == "");
    CHECK(o.loss_bitwise);
    if (plan.compute().lanes > 1) {
      CHECK(o.rel_diff < 1e-5);  // two copies' partial sums: equal to rounding
    } else {
      CHECK(o.bitwise);
      CHECK(o.max_diff == 0.0);
    }
    ++runs;
  });
  CHECK(runs >= 100);
}

TEST_CASE("cuda loopback: a stage graph's fan-ins and fan-outs train like the unpipelined reference") {
  namespace gm = graph_model;
  auto run = [](auto model, auto ref, const char* schedule, int sources) {
    using M = decltype(model);
    pt::schedule_params params;
    params.edges = M::topology().edges;
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(schedule, 4, 6, 0, params));
    REQUIRE(plan.ok());
    const gm::batch b = gm::make_batch(sources, 6, 0);
    std::vector<double> losses, ref_losses;
    gm::attach(model, b, losses, 6);
    drivers d(4);
    pc::loopback_pipeline<pc::record_driver> pipe{plan, model, d.ptrs, {.deadline = 20s}};
    for (auto* x : d.ptrs) x->clear();
    pipe.step(b.inputs.data());
    CHECK(pipeline_happens_before(plan, d.ptrs) == "");
    gm::reference_step(ref, b, ref_losses, 6);
    bool same = false;
    CHECK(gm::max_grad_diff(model, ref, &same) == 0.0);
    CHECK(same);
    CHECK(losses == ref_losses);
  };
  for (const char* s : {"gpipe", "1f1b", "zb-h1"}) {
    CAPTURE(std::string(s));
    run(gm::make<gm::skip>(5), gm::make<gm::skip>(5), s, 1);
    run(gm::make<gm::two_tower>(5), gm::make<gm::two_tower>(5), s, 2);
  }
}

namespace {
// The record driver as a device driver sees it: buffers it will not let the executor add on the
// host (they are host memory still, so the stages' own adds can run here)
struct device_record : pc::record_driver {
  using record_driver::record_driver;
  static constexpr bool host_memory = false;
};
}  // namespace

TEST_CASE("cuda loopback: on a device, a fan-out's gradients are summed by the stage's add_grad_output") {
  static_assert(!pc::host_memory<device_record>);
  const int m = 4;
  const pt::runtime_plan plan = fan_out::plan("1f1b", m);
  REQUIRE(plan.ok());
  std::vector<std::unique_ptr<device_record>> own;
  std::vector<device_record*> ptrs;
  for (int r = 0; r < 3; ++r) {
    own.push_back(std::make_unique<device_record>(r * 100000));
    ptrs.push_back(own.back().get());
  }
  // without the member: refused, naming the stage and the member to add
  fan_out::model<false> plain;
  CHECK_THROWS_WITH_AS((pc::loopback_pipeline<device_record>{plan, plain, ptrs, {.deadline = 20s}}),
                       doctest::Contains("stage 0 feeds 2 stages, whose gradients are summed before its backward, "
                                         "and has no add_grad_output"),
                       std::invalid_argument);
  // with it: called on stage 0's compute stream, once per microbatch, in edge order
  fan_out::model<true> model;
  pc::loopback_pipeline<device_record> pipe{plan, model, ptrs, {.deadline = 20s}};
  const std::vector<float> batch(fan_out::n * m, 1.0f);
  pipe.step(batch.data());
  CHECK(fan_out::sums_in_edge_order(model.stage<0>(), m));
  std::set<void*> streams;
  for (const fan_out::add_call& c : model.stage<0>().calls) streams.insert(c.stream);
  REQUIRE(streams.size() == 1);
  CHECK(*streams.begin() != nullptr);
  std::set<void*> computes;  // the streams rank 0's computes ran on: the same one
  for (const auto& c : ptrs[0]->calls())
    if (c.what == ck::compute) computes.insert(ptrs[0]->native(c.stream));
  CHECK(computes == streams);
}

TEST_CASE("cuda loopback: transfers are copies on the receiver's communication stream, between events") {
  const auto plan = pt::build_plan(pt::make_one_f_one_b(2, 4));
  auto model = mlp::make_model(4, 2);
  const mlp::batch b = mlp::make_batch(4, 0);
  std::vector<double> losses;
  mlp::attach(model, b, losses, 4);
  drivers d(2);
  pc::loopback_pipeline<pc::record_driver> pipe{plan, model, d.ptrs};
  for (auto* x : d.ptrs) x->clear();
  pipe.step(b.inputs.data());
  const int comm_stream = pipe.rank(1).comm_stream();
  // rank 1 receives 4 activations: each a wait (on rank 0's ready event), a copy and a record
  // on its communication stream; it creates and allocates nothing
  int copies = 0;
  const auto& c1 = d.ptrs[1]->calls();
  for (std::size_t i = 0; i < c1.size(); ++i) {
    CHECK((c1[i].what != ck::allocate && c1[i].what != ck::make_event && c1[i].what != ck::make_stream));
    CHECK((c1[i].what != ck::send && c1[i].what != ck::recv));  // no NCCL in loopback
    if (c1[i].what != ck::copy) continue;
    ++copies;
    REQUIRE(i >= 1);
    REQUIRE(i + 1 < c1.size());
    CHECK((c1[i - 1].what == ck::wait && c1[i - 1].stream == comm_stream));
    CHECK((c1[i + 1].what == ck::record && c1[i + 1].stream == comm_stream));
    CHECK(c1[i].bytes == mlp::act * sizeof(float));
  }
  CHECK(copies == 4);
  // rank 0 receives the 4 gradients the same way
  int copies0 = 0;
  for (const auto& c : d.ptrs[0]->calls()) copies0 += c.what == ck::copy;
  CHECK(copies0 == 4);
}

namespace {
// A stage that throws in the forward of one microbatch.
struct faulty {
  using input = pt::tensor<float, 16>;
  using output = pt::tensor<float, 16>;
  int fail_at = -1;
  void forward(const pt::forward_ctx<faulty>& c) {
    if (c.microbatch == fail_at) throw std::runtime_error("stage fault at microbatch " + std::to_string(c.microbatch));
    for (std::size_t i = 0; i < c.output.size(); ++i) c.output[i] = c.input[i];
  }
  void backward(const pt::backward_ctx<faulty>& c) {
    for (std::size_t i = 0; i < c.grad_input.size(); ++i)
      c.grad_input[i] = c.grad_output.empty() ? 1.0f : c.grad_output[i];  // the last stage: its own loss
  }
};
}  // namespace

TEST_CASE("cuda loopback: a rank that fails stops the others with its error, and the pipeline steps again") {
  const auto plan = pt::build_plan(pt::make_one_f_one_b(4, 8));
  std::vector<faulty> stages(4);
  stages[2].fail_at = 3;
  pt::uniform_chain<faulty> model(std::move(stages));
  drivers d(4);
  pc::loopback_pipeline<pc::record_driver> pipe{plan, model, d.ptrs, {.deadline = 20s}};
  std::vector<float> batch(16 * 8, 1.0f);
  CHECK_THROWS_WITH(pipe.step(batch.data()), doctest::Contains("stage fault at microbatch 3"));
  // failures(): rank 2's stage threw; every other rank that failed was stopped by it
  bool rank2 = false;
  for (const pt::failure& f : pipe.failures()) {
    if (f.rank == 2) {
      rank2 = true;
      CHECK(f.cause == pt::failure_cause::stage_threw);
      CHECK(f.message.find("stage fault at microbatch 3") != std::string::npos);
    } else {
      CHECK(f.cause == pt::failure_cause::aborted);
    }
  }
  CHECK(rank2);
  // the rank's own executor knows it too: its failures() are current after any exception
  REQUIRE(pipe.rank(2).failures().size() == 1);
  CHECK(pipe.rank(2).failures().front().cause == pt::failure_cause::stage_threw);
  CHECK(pipe.rank(2).failures().front().message ==
        "pipetype::cuda: rank 2, stage 2, microbatch 3, action 2F3 threw: stage fault at microbatch 3");
  model.stage(2).fail_at = -1;
  CHECK_NOTHROW(pipe.step(batch.data()));  // the hub forgot the abort and the half-done transfers
  CHECK(pipe.failures().empty());
  CHECK(pipe.rank(2).failures().empty());
}

TEST_CASE("cuda loopback: the ranks' executors free what they allocated when the pipeline goes") {
  const auto plan = pt::build_plan(pt::make_one_f_one_b(2, 4));
  pt::uniform_chain<faulty> model(std::vector<faulty>(2));
  drivers d(2);
  {
    pc::loopback_pipeline<pc::record_driver> pipe{plan, model, d.ptrs, {.deadline = 20s}};
    std::vector<float> batch(16 * 4, 1.0f);
    pipe.step(batch.data());
  }
  for (const auto& driver : d.own) {
    std::vector<const void*> allocated, freed;
    for (const pc::record_driver::call& c : driver->calls()) {
      if (c.what == pc::record_driver::call_kind::allocate) allocated.push_back(c.ptr);
      if (c.what == pc::record_driver::call_kind::free) freed.push_back(c.ptr);
    }
    REQUIRE(!allocated.empty());
    std::sort(allocated.begin(), allocated.end());
    std::sort(freed.begin(), freed.end());
    CHECK(freed == allocated);
  }
}

TEST_CASE("cuda loopback: a deadline that is not positive is refused at construction") {
  const auto plan = pt::build_plan(pt::make_one_f_one_b(2, 4));
  pt::uniform_chain<faulty> model(std::vector<faulty>(2));
  drivers d(2);
  CHECK_THROWS_WITH_AS((pc::loopback_pipeline<pc::record_driver>{plan, model, d.ptrs, {.deadline = 0ms}}),
                       doctest::Contains("deadline must be positive, got 0 ms"), std::invalid_argument);
}

TEST_CASE("cuda loopback: a peer that never comes ends in a deadline error naming the channel") {
  // two ranks, but rank 1's thread is never told to step: drive rank 0's executor by hand
  const auto plan = pt::build_plan(pt::make_gpipe(2, 2));
  std::vector<faulty> stages(2);
  pt::uniform_chain<faulty> model(std::move(stages));
  const pt::lowered_view l = plan.lowered();
  pc::record_driver d0;
  pc::loopback_hub<pc::record_driver> hub{l, 100ms};
  pc::loopback_driver<pc::record_driver> link{d0, hub, 0};
  pc::executor ex{plan, model, link};
  std::vector<float> batch(32, 1.0f);
  CHECK_THROWS_WITH_AS(ex.step(batch.data()),
                       doctest::Contains("rank 0 waited 100 ms for its send on communicator 0, rank 0 → rank 1"),
                       pc::loopback_error);
}

TEST_CASE("cuda loopback: DualPipe refuses one model shared by every rank") {
  const auto plan = pt::build_plan(pt::make_schedule("dualpipe", 4, 8));
  REQUIRE(plan.ok());
  auto model = mlp::make_model(8, plan.compute().lane_length());
  drivers d(4);
  CHECK_THROWS_WITH(pc::loopback_pipeline<pc::record_driver>(plan, model, d.ptrs),
                    doctest::Contains("give every rank its own model"));
  drivers d3(3);
  CHECK_THROWS_WITH(pc::loopback_pipeline<pc::record_driver>(plan, model, d3.ptrs),
                    doctest::Contains("the plan has 4 ranks, 3 drivers"));
}

TEST_CASE("cuda loopback: the whole pipeline is captured as one graph, forked from one origin stream") {
  const auto plan = pt::build_plan(pt::make_interleaved_1f1b(2, 4, 2));
  auto model = mlp::make_model(8, 4);
  const mlp::batch a = mlp::make_batch(4, 0), b = mlp::make_batch(4, 1);
  std::vector<double> losses;
  mlp::attach(model, a, losses, 4);
  drivers d(2);
  pc::loopback_pipeline<pc::record_driver> pipe{plan, model, d.ptrs};
  for (auto* x : d.ptrs) x->clear();
  pipe.capture(a.inputs.data());
  CHECK(pipe.instantiations() == 1);
  // rank 1's streams wait on the fork recorded on the origin (rank 0's driver) before anything
  // else, and record their join events last
  const auto& c0 = d.ptrs[0]->calls();
  REQUIRE(c0.size() > 3);
  CHECK(c0[0].what == ck::begin_capture);
  const int origin = c0[0].stream;
  CHECK(origin == pipe.origin_stream());
  CHECK((c0[1].what == ck::record && c0[1].stream == origin));
  const int fork = c0[1].event;
  const auto& c1 = d.ptrs[1]->calls();
  REQUIRE(c1.size() > 4);
  CHECK((c1[0].what == ck::wait && c1[0].event == fork && c1[0].stream == pipe.rank(1).compute_stream()));
  CHECK((c1[1].what == ck::wait && c1[1].event == fork && c1[1].stream == pipe.rank(1).comm_stream()));
  CHECK((c1[c1.size() - 2].what == ck::record && c1.back().what == ck::record));
  REQUIRE(c0.size() > 3);
  CHECK(c0[c0.size() - 3].what == ck::end_capture);
  CHECK(c0[c0.size() - 2].what == ck::instantiate);
  CHECK(c0.back().what == ck::destroy);
  // a new batch updates the graph in place; replay is one launch on the origin
  pipe.capture(b.inputs.data());
  CHECK(pipe.instantiations() == 1);
  CHECK(pipe.updates() == 1);
  for (auto* x : d.ptrs) x->clear();
  pipe.replay();  // after the ranks' streams (joined into the origin), before what follows on them
  int launches = 0, origin_waits = 0;
  for (const auto& x : d.ptrs[0]->calls()) {
    launches += x.what == ck::launch;
    origin_waits += x.what == ck::wait && x.stream == pipe.origin_stream();
  }
  CHECK(launches == 1);
  CHECK(origin_waits == 4);  // two ranks × two streams
  const auto& after = d.ptrs[1]->calls();
  REQUIRE(after.size() == 4);  // rank 1: two join records, then both streams wait on the launch
  CHECK((after[2].what == ck::wait && after[3].what == ck::wait && after[2].event == after[3].event));
}

TEST_CASE("cuda loopback: DualPipeV's capture forks and joins every rank's three streams") {
  const auto plan = pt::build_plan(pt::make_schedule("dualpipe-v", 2, 4));
  REQUIRE(plan.ok());
  const int S = plan.compute().lane_length();
  auto m0 = mlp::make_model(4, S), m1 = mlp::make_model(4, S);
  const mlp::batch b = mlp::make_batch(4, 0);
  std::vector<double> losses;
  mlp::attach(m0, b, losses, 4);
  mlp::attach(m1, b, losses, 4);
  drivers d(2);
  pc::loopback_pipeline<pc::record_driver> pipe{pt::views_of(plan), {pt::entries_of(m0), pt::entries_of(m1)}, d.ptrs};
  for (auto* x : d.ptrs) x->clear();
  pipe.capture(b.inputs.data());
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    const auto streams = pipe.rank(r).streams();
    REQUIRE(streams.size() == 3);  // DualPipeV's ranks overlap F&B pairs: a second compute stream
    const auto& c = d.ptrs[static_cast<std::size_t>(r)]->calls();
    const std::size_t first = r == 0 ? 2 : 0;  // rank 0's driver began the capture and recorded the fork
    REQUIRE(c.size() > first + 6);
    for (std::size_t k = 0; k < 3; ++k) CHECK((c[first + k].what == ck::wait && c[first + k].stream == streams[k]));
    // each stream records its join last; the origin (rank 0's driver) waits on all six
    std::size_t end = c.size();
    if (r == 0) {
      while (end > 0 && c[end - 1].what != ck::end_capture) --end;
      REQUIRE(end >= 10);
      --end;  // before end_capture: rank 0's three joins, each followed by the origin's wait, then rank 1's three waits
      for (std::size_t k = 0; k < 3; ++k)
        CHECK((c[end - 1 - k].what == ck::wait && c[end - 1 - k].stream == pipe.origin_stream()));
      end -= 3;
      for (std::size_t k = 0; k < 3; ++k) {
        const auto& rec = c[end - 6 + 2 * k];
        const auto& w = c[end - 5 + 2 * k];
        CHECK((rec.what == ck::record && rec.stream == streams[k]));
        CHECK((w.what == ck::wait && w.stream == pipe.origin_stream() && w.event == rec.event));
      }
    } else {
      REQUIRE(end >= 3);
      for (std::size_t k = 0; k < 3; ++k)
        CHECK((c[end - 3 + k].what == ck::record && c[end - 3 + k].stream == streams[k]));
    }
  }
}

}  // namespace test_loopback
}  // namespace
