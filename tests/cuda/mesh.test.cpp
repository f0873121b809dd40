// The device executor over a pp × dp mesh, through the record driver: each global rank issues its
// mesh program — the pipeline's calls on its replica's communicators and the collectives on a
// data-parallel stream, each reduction after an event recorded behind its stage's last weight
// backward, each gather before the stage's next compute — every member of a communicator issues
// the same collectives in the same order, the sharded ones go through a staging buffer allocated
// once, and a stage's own collectives stay on its compute stream in the plan's order; faults: what
// an executor allocated is freed with it, failures() is current after a stage throws, a failing
// collective names rank, action and communicator. CPU only.
#include <pipetype/cuda/executor.hpp>
#include <pipetype/cuda/record.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_cuda_mesh {

namespace pt = pipetype;
namespace pc = pipetype::cuda;
using call = pc::record_driver::call;
using ck = pc::record_driver::call_kind;

namespace {

constexpr std::size_t grad_elems = 7;  // no multiple of 2: the shards differ in size

// A stage that launches nothing and whose arrays pipetype reduces and gathers. With `tp` set, its
// forward issues a "tensor-parallel" all-reduce of its own on the stream its context carries.
struct quiet {
  using input = pt::tensor<float, 16>;
  using output = pt::tensor<float, 16>;
  using weight_grad = pt::tensor<float, grad_elems>;
  float grads[grad_elems] = {}, params[grad_elems] = {};
  pc::record_driver* tp = nullptr;
  float tp_buf[4] = {};
  // OPT_STEP: where in `log`'s calls each of its hook's calls came, and what it was given
  pc::record_driver* log = nullptr;
  std::vector<std::size_t> stepped_at;
  std::size_t offset = 0, elems = 0;
  const float* stepped = nullptr;
  const void* stepped_stream = nullptr;
  void optimizer_step(const pt::optimizer_ctx<quiet>& c) {
    if (log) stepped_at.push_back(log->calls().size());
    offset = c.offset, elems = c.params.size(), stepped = c.params.data(), stepped_stream = c.stream;
  }
  std::span<float> weight_gradients() { return grads; }
  std::span<float> parameters() { return params; }
  std::span<float> tied_gradients(int) { return std::span<float>(grads).first(3); }
  void forward(const pt::forward_ctx<quiet>& c) {
    if (tp)  // the record driver's native stream is its id + 1
      tp->all_reduce(tp_buf, 4, pt::elem_kind::f32, 99,
                     static_cast<int>(reinterpret_cast<std::uintptr_t>(c.stream)) - 1);
  }
  void backward(const pt::backward_ctx<quiet>&) {}
  void backward_input(const pt::backward_ctx<quiet>&) {}
  void backward_weight(const pt::backward_ctx<quiet>&) {}
};
using model_t = pt::uniform_chain<quiet>;

struct mesh_run {
  pt::mesh_program mp;
  std::vector<std::unique_ptr<pc::record_driver>> drivers;
  std::vector<std::unique_ptr<model_t>> models;  // one per global rank (its replica's stages)
  std::vector<std::vector<call>> bind, step;
};

mesh_run run_mesh(const pt::runtime_plan& plan, const pt::mesh& m, const pt::dp_options& o) {
  mesh_run out;
  out.mp = pt::build_mesh(plan.compute(), plan.lowered(), m, o);
  const int L = plan.compute().lane_length();
  std::vector<float> batch(16 * static_cast<std::size_t>(plan.compute().microbatches));
  for (int g = 0; g < m.size(); ++g) {
    out.drivers.push_back(std::make_unique<pc::record_driver>());
    out.models.push_back(std::make_unique<model_t>(std::vector<quiet>(static_cast<std::size_t>(L))));
    pc::record_driver& d = *out.drivers.back();
    pc::executor ex{plan, out.mp, *out.models.back(), d, {.rank = g}};
    out.bind.push_back(d.calls());
    d.clear();
    ex.step(batch.data());
    out.step.push_back(d.calls());
  }
  return out;
}

bool collective_call(const call& c) {
  return c.what == ck::all_reduce || c.what == ck::reduce_scatter || c.what == ck::all_gather;
}

}  // namespace

TEST_CASE("cuda mesh: every member issues the same collectives per communicator, on the data-parallel stream") {
  struct scheduled {
    const char* name;
    int ranks, chunks;
  };
  for (const scheduled s : {scheduled{"1f1b", 2, 1}, {"interleaved-1f1b", 2, 2}, {"zb-h1", 2, 1}, {"gpipe", 3, 1}})
    for (const bool shard : {false, true})
      for (const pt::mesh_order order : {pt::mesh_order::dp_inner, pt::mesh_order::pp_inner}) {
        CAPTURE(s.name);
        CAPTURE(shard);
        const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(s.name, s.ranks, 4, s.chunks));
        REQUIRE(plan.ok());
        const pt::mesh m{s.ranks, 2, order};
        const mesh_run run = run_mesh(plan, m, {.dp = 2, .shard = shard});
        // per communicator, each member's collectives as (kind, count)
        std::map<int, std::vector<std::vector<std::pair<ck, std::size_t>>>> per_comm;
        for (int g = 0; g < m.size(); ++g) {
          const std::vector<call>& calls = run.step[static_cast<std::size_t>(g)];
          CHECK(std::none_of(calls.begin(), calls.end(), [](const call& c) {
            return c.what == ck::allocate || c.what == ck::make_stream || c.what == ck::make_event;
          }));
          std::map<int, std::vector<std::pair<ck, std::size_t>>> mine;
          int reductions = 0;
          for (const call& c : calls) {
            if (!collective_call(c)) continue;
            CHECK(c.stream == 2);  // compute 0, comm 1, then the data-parallel stream
            mine[c.comm].push_back({c.what, c.bytes});
            reductions += c.what != ck::all_gather;
          }
          CHECK(reductions == plan.compute().stages / s.ranks);  // one REDUCE_GRAD per stage held
          for (auto& [comm, seq] : mine) per_comm[comm].push_back(seq);
        }
        for (const auto& entry : per_comm) {  // (no structured binding: clang 14 cannot capture one)
          const int comm = entry.first;
          CAPTURE(comm);
          REQUIRE(entry.second.size() == 2);  // a DP group of two replicas
          CHECK(entry.second[0] == entry.second[1]);
        }
      }
}

TEST_CASE("cuda mesh: a reduction waits for its stage's last backward, a compute for its stage's gather") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("interleaved-1f1b", 2, 4, 2));
  REQUIRE(plan.ok());
  std::ptrdiff_t allocations[2] = {};
  for (const bool shard : {false, true}) {
    CAPTURE(shard);
    const mesh_run run = run_mesh(plan, {2, 2}, {.dp = 2, .shard = shard, .window = 1});
    for (int g = 0; g < 4; ++g) {
      CAPTURE(g);
      const std::vector<call>& calls = run.step[static_cast<std::size_t>(g)];
      model_t& model = *run.models[static_cast<std::size_t>(g)];
      std::map<int, std::size_t> recorded;  // event → the call index of its latest record
      int last_compute_stage = -1;
      std::map<std::size_t, int> compute_before_record;  // record call → the stage of the compute before it
      std::vector<int> gathered_event(4, -1);            // per stage: the event after its gather, not yet waited
      for (std::size_t k = 0; k < calls.size(); ++k) {
        const call& c = calls[k];
        if (c.what == ck::compute) last_compute_stage = c.stage;
        if (c.what == ck::record) {
          recorded[c.event] = k;
          if (c.stream == 0) compute_before_record[k] = last_compute_stage;
        }
        if (c.what == ck::all_reduce || c.what == ck::reduce_scatter) {
          // the wait on the dp stream just before it (or before the staging copy) refers to a
          // record on the compute stream right after a backward of the stage whose gradients it reduces
          std::size_t w = k;
          while (w > 0 && calls[w].what != ck::wait) --w;
          REQUIRE(calls[w].what == ck::wait);
          CHECK(calls[w].stream == 2);
          const std::size_t rec = recorded.at(calls[w].event);
          CHECK(calls[rec].stream == 0);
          const int stage = compute_before_record.at(rec);
          const std::span<const float> grads = model.stages()[static_cast<std::size_t>(stage)].grads;
          if (!shard) {
            CHECK(c.ptr == grads.data());
            CHECK(c.bytes == grad_elems);
          } else {  // staging ← the gradients, reduce-scatter of ⌈7/2⌉ = 4 per member, the own shard back
            CHECK(calls[k - 1].what == ck::copy);
            CHECK(calls[k - 1].src == grads.data());
            CHECK(calls[k - 1].bytes == grad_elems * sizeof(float));
            CHECK(c.bytes == 4);
            CHECK(c.ptr == calls[k - 1].ptr);
            const int replica = run.mp.shape.replica(g);
            const pt::shard_range own = pt::shard_of(grad_elems, 2, replica);
            CHECK(calls[k + 1].what == ck::copy);
            CHECK(calls[k + 1].ptr == grads.data() + own.begin);
            CHECK(calls[k + 1].bytes == own.size() * sizeof(float));
          }
        }
        if (c.what == ck::all_gather) {
          CHECK(c.bytes == 4 * sizeof(float));
          REQUIRE(k + 2 < calls.size());
          CHECK(calls[k + 1].what == ck::copy);  // the gathered parameters into the stage's array
          CHECK(calls[k + 2].what == ck::record);
          CHECK(calls[k + 2].stream == 2);
          for (int s = 0; s < 4; ++s)
            if (calls[k + 1].ptr == model.stages()[static_cast<std::size_t>(s)].params)
              gathered_event[static_cast<std::size_t>(s)] = calls[k + 2].event;
        }
        if (c.what == ck::compute && c.stage >= 0 && gathered_event[static_cast<std::size_t>(c.stage)] >= 0) {
          // the stage's first compute after its gather waits for the gather's event
          const auto waited =
              std::find_if(calls.begin(), calls.begin() + static_cast<std::ptrdiff_t>(k), [&](const call& x) {
                return x.what == ck::wait && x.stream == 0 &&
                       x.event == gathered_event[static_cast<std::size_t>(c.stage)];
              });
          CHECK(waited != calls.begin() + static_cast<std::ptrdiff_t>(k));
          gathered_event[static_cast<std::size_t>(c.stage)] = -1;
        }
      }
      // the step's fence takes the data-parallel stream in: compute waits for it, it for compute
      const auto n = calls.size();
      REQUIRE(n >= 7);
      CHECK(calls[n - 3].what == ck::record);
      CHECK(calls[n - 3].stream == 2);
      CHECK(calls[n - 2].what == ck::wait);
      CHECK(calls[n - 2].stream == 0);
      CHECK(calls[n - 1].what == ck::wait);
      CHECK(calls[n - 1].stream == 2);
    }
    // the staging buffer: allocated once, at bind, only when sharded, for both members' parts
    const std::vector<call>& bind = run.bind.front();
    allocations[shard ? 1 : 0] =
        std::count_if(bind.begin(), bind.end(), [](const call& c) { return c.what == ck::allocate; });
    if (shard)
      CHECK(std::any_of(bind.begin(), bind.end(),
                        [](const call& c) { return c.what == ck::allocate && c.bytes == 2 * 4 * sizeof(float); }));
  }
  CHECK(allocations[1] == allocations[0] + 1);
}

TEST_CASE("cuda mesh: a bucketed reduction is one all-reduce a bucket, each after its event behind the last backward") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  REQUIRE(plan.ok());
  // (under ZeRO-1 too: a bucket of a scattering step is an all-reduce of its part on a device)
  for (const int zero : {0, 1}) {
    const mesh_run run = run_mesh(plan, {2, 2}, {.dp = 2, .buckets = 3, .zero = zero});
    for (int g = 0; g < 4; ++g) {
      CAPTURE(zero);
      CAPTURE(g);
      const std::vector<call>& calls = run.step[static_cast<std::size_t>(g)];
      const int stage = run.mp.shape.pipeline_rank(g);
      const std::span<const float> grads =
          run.models[static_cast<std::size_t>(g)]->stages()[static_cast<std::size_t>(stage)].grads;
      std::map<int, std::size_t> recorded;
      std::size_t last_compute = 0;
      int bucket = 0;
      for (std::size_t k = 0; k < calls.size(); ++k) {
        const call& c = calls[k];
        if (c.what == ck::compute) last_compute = k;
        if (c.what == ck::record) recorded[c.event] = k;
        if (c.what != ck::all_reduce) continue;
        // bucket b: its part of the gradients (bucket_of: from the end), after a wait on an event
        // recorded on the compute stream after the stage's last backward
        const pt::shard_range part = pt::bucket_of(grad_elems, 3, bucket);
        CHECK(c.ptr == grads.data() + part.begin);
        CHECK(c.bytes == part.size());
        REQUIRE(calls[k - 1].what == ck::wait);
        CHECK(calls[k - 1].stream == 2);
        const std::size_t rec = recorded.at(calls[k - 1].event);
        CHECK(calls[rec].stream == 0);
        CHECK(rec > last_compute);
        CHECK(calls[last_compute].stage == stage);
        ++bucket;
      }
      CHECK(bucket == 3);
    }
  }
}

TEST_CASE("cuda mesh: an overlapped pair's second half, on its own stream, comes after its stage's gather") {
  // DualPipeV's F&B pairs: the second half runs on a stream forked from the compute stream before
  // the pair, so the gather it needs must be waited for before that fork (a window of 2: a pair's
  // two stages are gathered together)
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("dualpipe-v", 2, 4));
  REQUIRE(plan.ok());
  const mesh_run run = run_mesh(plan, {2, 2}, {.dp = 2, .shard = true, .window = 2});
  int checked = 0;
  for (int g = 0; g < 4; ++g) {
    const std::vector<call>& calls = run.step[static_cast<std::size_t>(g)];
    std::map<int, int> gather_of_stage;  // stage → the event recorded after its latest gather
    std::map<int, std::size_t> waited;   // event → where the compute stream waited for it
    for (std::size_t k = 0; k < calls.size(); ++k) {
      const call& c = calls[k];
      if (c.what == ck::all_gather && k + 2 < calls.size() && calls[k + 2].what == ck::record) {
        for (int s = 0; s < 4; ++s)
          if (calls[k + 1].ptr == run.models[static_cast<std::size_t>(g)]->stages()[static_cast<std::size_t>(s)].params)
            gather_of_stage[s] = calls[k + 2].event;
      }
      if (c.what == ck::wait && c.stream == 0) waited[c.event] = k;
      if (c.what != ck::compute || c.stream != 2 || !gather_of_stage.count(c.stage)) continue;
      // the fork this second half started from: its stream's last wait, on an event recorded on stream 0
      std::size_t w = k;
      while (w > 0 && !(calls[w].what == ck::wait && calls[w].stream == 2)) --w;
      std::size_t fork = w;
      while (fork > 0 && !(calls[fork].what == ck::record && calls[fork].event == calls[w].event)) --fork;
      const auto it = waited.find(gather_of_stage[c.stage]);
      REQUIRE(it != waited.end());
      CHECK(it->second < fork);  // the gather's wait came before the fork
      ++checked;
    }
  }
  CHECK(checked > 0);
}

TEST_CASE("cuda mesh: a tie group's all-reduce on its tied arrays comes before their stages' reductions") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  const mesh_run run = run_mesh(plan, {2, 2}, {.dp = 2, .ties = {{0, 1}}});
  for (int g = 0; g < 4; ++g) {
    const std::vector<call>& calls = run.step[static_cast<std::size_t>(g)];
    std::vector<const call*> colls;
    for (const call& c : calls)
      if (collective_call(c)) colls.push_back(&c);
    REQUIRE(colls.size() == 2);
    const int r = run.mp.shape.pipeline_rank(g);
    const float* tied = run.models[static_cast<std::size_t>(g)]->stages()[static_cast<std::size_t>(r)].grads;
    CHECK(colls[0]->ptr == tied);  // TIE(0): the tied part, 3 elements, on the tie group's communicator
    CHECK(colls[0]->bytes == 3);
    CHECK(run.mp.comms[static_cast<std::size_t>(colls[0]->comm)].what == pt::mesh_comm_kind::tie);
    CHECK(colls[1]->bytes == grad_elems);  // then REDUCE_GRAD over the DP group
    CHECK(run.mp.comms[static_cast<std::size_t>(colls[1]->comm)].what == pt::mesh_comm_kind::data_parallel);
  }
}

TEST_CASE("cuda mesh: what a device cannot do is one sentence") {
  // zb-v places stages 0 and 3 on rank 0: their tie would be a local sum, which needs a device add
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("zb-v", 2, 4));
  REQUIRE(plan.ok());
  const pt::mesh_program mp = pt::build_mesh(plan.compute(), plan.lowered(), {2, 2}, {.dp = 2, .ties = {{0, 3}}});
  model_t model(std::vector<quiet>(4));
  pc::record_driver d;
  CHECK_THROWS_WITH_AS((pc::executor{plan, mp, model, d, {.rank = 0}}),
                       "pipetype::cuda: rank 0: tie group 0 has all its stages on this rank: their sum would need a "
                       "device add pipetype does not have (place the tied stages on different ranks)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((pc::executor{plan, mp, model, d, {.rank = 4}}),
                       "pipetype::cuda: rank 4 is not in the mesh's 4 ranks, or the mesh is not the plan's",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(pt::build_mesh(plan.compute(), plan.lowered(), {2, 2}, {.dp = 3}),
                       "pipetype: dp_options::dp is 3 but the mesh has 2 replicas", std::invalid_argument);
  const pt::runtime_plan line = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  model_t two(std::vector<quiet>(2));
  const pt::mesh_program checked =
      pt::build_mesh(line.compute(), line.lowered(), {2, 2}, {.dp = 2, .finite_check = true});
  CHECK_THROWS_WITH_AS((pc::executor{line, checked, two, d, {.rank = 0}}),
                       "pipetype::cuda: rank 0: stage 0 has no `void sum_squares(std::span<const T> part, double* "
                       "sum, bool add, void* stream)` for the step's FINITE_CHECK (the squares of its gradients in "
                       "device memory, on a stream; pipetype has no kernel)",
                       pt::shape_error);
}

// A stage that squares its gradients (on the host: the record driver's memory is the host's) and
// writes down each call: its part, whether it added, its stream.
struct squaring : quiet {
  struct squared {
    const float* data;
    std::size_t size;
    bool add;
    void* stream;
    std::size_t at;  // where in the driver's calls
  };
  std::vector<squared> squared_calls;
  const double* seen_squares = nullptr;
  void sum_squares(std::span<const float> part, double* sum, bool add, void* stream) {
    squared_calls.push_back({part.data(), part.size(), add, stream, log ? log->calls().size() : 0});
    double x = add ? *sum : 0;
    for (const float v : part) x += static_cast<double>(v) * static_cast<double>(v);
    *sum = x;
  }
  void optimizer_step(const pt::optimizer_ctx<squaring>& c) {
    if (log) stepped_at.push_back(log->calls().size());
    seen_squares = c.squares;
    stepped_stream = c.stream;
  }
  void forward(const pt::forward_ctx<squaring>&) {}
  void backward(const pt::backward_ctx<squaring>&) {}
  void backward_input(const pt::backward_ctx<squaring>&) {}
  void backward_weight(const pt::backward_ctx<squaring>&) {}
};

TEST_CASE(
    "cuda mesh: GRAD_NORM and FINITE_CHECK square each stage's part on the data-parallel stream, then sum one "
    "double over the world") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  const pt::mesh m{2, 2};
  std::vector<float> batch(16 * 4);
  for (const int zero : {0, 1}) {
    CAPTURE(zero);
    const pt::dp_options o{
        .dp = 2, .ties = {{0, 1}}, .grad_norm = true, .finite_check = true, .optimizer = true, .zero = zero};
    const pt::mesh_program mp = pt::build_mesh(plan.compute(), plan.lowered(), m, o);
    int world = -1;
    for (std::size_t c = 0; c < mp.comms.size(); ++c)
      if (mp.comms[c].what == pt::mesh_comm_kind::world) world = static_cast<int>(c);
    REQUIRE(world >= 0);
    for (int g = 0; g < m.size(); ++g) {
      CAPTURE(g);
      pc::record_driver d;
      pt::uniform_chain<squaring> model(std::vector<squaring>(2));
      const int r = mp.shape.pipeline_rank(g), replica = mp.shape.replica(g);
      squaring& q = model.stages()[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < grad_elems; ++i) q.grads[i] = static_cast<float>(i + 1);
      q.log = &d;
      pc::executor ex{plan, mp, model, d, {.rank = g}};
      d.clear();
      ex.step(batch.data());
      REQUIRE(ex.grad_squares() != nullptr);
      // what the rank answers for: its shard (ZeRO-1) or, on replica 0, all; stage 1's tied span
      // [0, 3) counted on stage 0 only
      const pt::shard_range own =
          zero ? pt::shard_of(grad_elems, 2, replica) : pt::shard_range{0, replica == 0 ? grad_elems : 0};
      double want = 0;
      std::size_t elems = 0;
      for (std::size_t i = own.begin; i < own.end; ++i)
        if (r == 0 || i >= 3) want += static_cast<double>(q.grads[i]) * q.grads[i], ++elems;
      // FINITE_CHECK, then GRAD_NORM: each the rank's parts (one empty call writing 0 when none)
      REQUIRE(q.squared_calls.size() % 2 == 0);
      const std::size_t per = q.squared_calls.size() / 2;
      std::size_t squared = 0;
      for (std::size_t k = 0; k < per; ++k) {
        CHECK(q.squared_calls[k].add == (k > 0));
        squared += q.squared_calls[k].size;
      }
      CHECK(squared == elems);
      CHECK(*ex.grad_squares() == want);
      // each followed by the world's all-reduce of the one double, on the stream the stage squared on
      const std::vector<call>& calls = d.calls();
      std::vector<std::size_t> sums;
      for (std::size_t k = 0; k < calls.size(); ++k)
        if (calls[k].what == ck::all_reduce && calls[k].comm == world) {
          CHECK(calls[k].bytes == 1);
          CHECK(calls[k].kind == '0' + static_cast<int>(pt::elem_kind::f64));
          CHECK(calls[k].ptr == ex.grad_squares());
          CHECK(d.native(calls[k].stream) == q.squared_calls.front().stream);
          sums.push_back(k);
        }
      REQUIRE(sums.size() == 2);
      CHECK(q.squared_calls[per - 1].at <= sums[0]);
      CHECK(q.squared_calls[per].at > sums[0]);
      CHECK(q.squared_calls.back().at <= sums[1]);
      // the OPT_STEP after both, given the sum
      REQUIRE(q.stepped_at.size() == 1);
      CHECK(q.stepped_at.front() > sums[1]);
      CHECK(q.seen_squares == ex.grad_squares());
    }
  }
}

TEST_CASE("cuda mesh: ZeRO-1's OPT_STEP steps each replica's shard on the data-parallel stream, then PARAM_SYNC") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  const pt::mesh m{2, 2};
  const pt::mesh_program mp = pt::build_mesh(plan.compute(), plan.lowered(), m, {.dp = 2, .zero = 1});
  std::vector<float> batch(16 * 4);
  for (int g = 0; g < m.size(); ++g) {
    CAPTURE(g);
    pc::record_driver d;
    model_t model(std::vector<quiet>(2));
    for (quiet& q : model.stages()) q.log = &d;
    pc::executor ex{plan, mp, model, d, {.rank = g}};
    d.clear();
    ex.step(batch.data());
    const quiet& q = model.stages()[static_cast<std::size_t>(mp.shape.pipeline_rank(g))];
    REQUIRE(q.stepped_at.size() == 1);  // once a step, on its replica's shard
    const pt::shard_range own = pt::shard_of(grad_elems, 2, mp.shape.replica(g));
    CHECK(q.offset == own.begin);
    CHECK(q.elems == own.size());
    CHECK(q.stepped == q.params + own.begin);
    // after the reduce-scatter of its gradients, before the all-gather of its parameters, both on
    // the stream its hook was given
    const std::vector<call>& calls = d.calls();
    const std::size_t at = q.stepped_at.front();
    int scatter = -1, gather = -1;
    for (std::size_t k = 0; k < calls.size(); ++k) {
      if (calls[k].what == ck::reduce_scatter && k < at) scatter = static_cast<int>(k);
      if (calls[k].what == ck::all_gather && k >= at && gather < 0) gather = static_cast<int>(k);
    }
    REQUIRE(scatter >= 0);
    REQUIRE(gather >= 0);
    CHECK(d.native(calls[static_cast<std::size_t>(scatter)].stream) == q.stepped_stream);
    CHECK(d.native(calls[static_cast<std::size_t>(gather)].stream) == q.stepped_stream);
    CHECK(calls[static_cast<std::size_t>(gather)].bytes == (grad_elems + 1) / 2 * sizeof(float));  // a shard's bytes
  }
}

// A stage that lends its parameters (FSDP): pipetype holds its shard and gathers the whole into a
// slot; it writes down where each call read them (ctx.params) and where its OPT_STEP stepped.
struct lending : quiet {
  static constexpr bool lends_parameters = true;
  std::vector<const float*> read_at;
  void forward(const pt::forward_ctx<lending>& c) { read_at.push_back(c.params.data()); }
  void backward(const pt::backward_ctx<lending>& c) { read_at.push_back(c.params.data()); }
  void backward_input(const pt::backward_ctx<lending>& c) { read_at.push_back(c.params.data()); }
  void backward_weight(const pt::backward_ctx<lending>& c) { read_at.push_back(c.params.data()); }
  void optimizer_step(const pt::optimizer_ctx<lending>& c) {
    offset = c.offset, elems = c.params.size(), stepped = c.params.data();
  }
};

TEST_CASE(
    "cuda mesh: FSDP with stages that lend their parameters: pipetype's shard, gathered into a slot each "
    "call reads") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  const pt::mesh m{2, 2};
  const pt::mesh_program mp =
      pt::build_mesh(plan.compute(), plan.lowered(), m, {.dp = 2, .shard = true, .optimizer = true});
  REQUIRE(!mp.param_slots.empty());
  std::vector<float> batch(16 * 4);
  for (int g = 0; g < m.size(); ++g) {
    CAPTURE(g);
    pc::record_driver d;
    pt::uniform_chain<lending> model(std::vector<lending>(2));
    const int r = mp.shape.pipeline_rank(g);
    lending& q = model.stages()[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < grad_elems; ++i) q.params[i] = static_cast<float>(i + 1);
    pc::executor ex{plan, mp, model, d, {.rank = g}};
    // at binding: the replica's shard copied out of the stage's parameters(), and the slots
    const pt::shard_range own = pt::shard_of(grad_elems, 2, mp.shape.replica(g));
    const std::span<std::byte> shard = ex.parameter_shard(r);
    REQUIRE(shard.size() == own.size() * sizeof(float));
    CHECK(std::memcmp(shard.data(), q.params + own.begin, shard.size()) == 0);
    CHECK(ex.parameter_range(r).begin == own.begin);
    CHECK(ex.parameter_slots() == mp.param_slots[static_cast<std::size_t>(g)]);
    CHECK(ex.parameter_slot_bytes() >= grad_elems * sizeof(float));
    CHECK(ex.parameter_shard(1 - r).empty());  // (the other rank's stage)
    {  // the copy on the compute stream, then the data-parallel stream waits for it (its first gather)
      const std::vector<call>& bound = d.calls();
      std::size_t copied = bound.size(), recorded = bound.size();
      for (std::size_t k = 0; k < bound.size(); ++k) {
        if (bound[k].what == ck::copy && bound[k].src == static_cast<const void*>(q.params + own.begin)) copied = k;
        if (copied < k && bound[k].what == ck::record && bound[k].stream == 0 && recorded == bound.size()) recorded = k;
      }
      REQUIRE(copied < bound.size());
      CHECK(bound[copied].stream == 0);
      REQUIRE(recorded < bound.size());
      CHECK(std::any_of(bound.begin() + static_cast<std::ptrdiff_t>(recorded), bound.end(), [&](const call& c) {
        return c.what == ck::wait && c.stream == 2 && c.event == bound[recorded].event;
      }));
    }
    float before[grad_elems];
    std::memcpy(before, q.params, sizeof before);
    d.clear();
    ex.step(batch.data());
    // the gather: its own part from the shard into staging, the all-gather, staging into a slot,
    // which every call of the stage then reads; the stage's own array is left alone
    const std::vector<call>& calls = d.calls();
    std::vector<const void*> slots;
    for (std::size_t k = 0; k < calls.size(); ++k) {
      if (calls[k].what != ck::all_gather) continue;
      REQUIRE(k >= 1);
      REQUIRE(k + 1 < calls.size());
      CHECK(calls[k - 1].what == ck::copy);
      CHECK(calls[k - 1].src == shard.data());
      CHECK(calls[k + 1].what == ck::copy);
      slots.push_back(calls[k + 1].ptr);
    }
    REQUIRE(!slots.empty());
    REQUIRE(!q.read_at.empty());
    for (const float* at : q.read_at) {
      CHECK(at != nullptr);
      CHECK(static_cast<const void*>(at) != static_cast<const void*>(q.params));
      CHECK(std::find(slots.begin(), slots.end(), static_cast<const void*>(at)) != slots.end());
    }
    CHECK(std::memcmp(before, q.params, sizeof before) == 0);
    // the OPT_STEP steps pipetype's shard
    CHECK(static_cast<const void*>(q.stepped) == static_cast<const void*>(shard.data()));
    CHECK(q.offset == own.begin);
    CHECK(q.elems == own.size());
  }
}

TEST_CASE("cuda mesh: a stage's own collectives stay on its compute stream, in the plan's order on every peer") {
  // two tensor-parallel peers of one pipeline rank run the same rank program: the collectives their
  // stages issue on ctx.stream come out in the same order, on the compute stream, never on the
  // plan's communication or data-parallel streams
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("interleaved-1f1b", 2, 4, 2));
  const pt::mesh_program mp = pt::build_mesh(plan.compute(), plan.lowered(), {2, 2}, {.dp = 2});
  std::vector<std::vector<call>> tp_calls;
  for (int peer = 0; peer < 2; ++peer) {
    pc::record_driver d, tp;
    model_t model(std::vector<quiet>(4));
    for (quiet& q : model.stages()) q.tp = &tp;
    pc::executor ex{plan, mp, model, d, {.rank = 1}};
    std::vector<float> batch(16 * 4);
    ex.step(batch.data());
    for (const call& c : tp.calls()) CHECK(c.stream == 0);  // the compute stream (ex.compute_stream())
    CHECK(ex.compute_stream() == 0);
    tp_calls.push_back(tp.calls());
  }
  REQUIRE(tp_calls[0].size() == 2 * 4);  // rank 1's two stages, four forwards each
  REQUIRE(tp_calls[0].size() == tp_calls[1].size());
  for (std::size_t k = 0; k < tp_calls[0].size(); ++k) {
    CHECK(tp_calls[0][k].what == tp_calls[1][k].what);
    CHECK(tp_calls[0][k].comm == tp_calls[1][k].comm);
  }
}

}  // namespace test_cuda_mesh
}  // namespace

namespace {
namespace test_cuda_faults {

namespace pt = pipetype;
namespace pc = pipetype::cuda;
using call = pc::record_driver::call;
using ck = pc::record_driver::call_kind;

int throw_at = -1;  // a forward of this microbatch throws (−1: none)

struct flaky {
  using input = pt::tensor<float, 16>;
  using output = pt::tensor<float, 16>;
  using weight_grad = pt::tensor<float, 4>;
  float grads[4] = {};
  std::span<float> weight_gradients() { return grads; }
  void forward(const pt::forward_ctx<flaky>& c) {
    if (c.microbatch == throw_at) throw std::runtime_error("injected");
  }
  void backward(const pt::backward_ctx<flaky>&) {}
};

// A driver whose all-reduces fail as NCCL's would.
struct failing_reduce : pc::record_driver {
  void all_reduce(void*, std::size_t, pt::elem_kind, comm, stream) {
    throw pc::device_error(
        "pipetype::cuda: rank 1: ncclAllReduce failed: remote process exited or there was a network error");
  }
};

}  // namespace test_cuda_faults
}  // namespace

namespace {
namespace test_cuda_faults {

TEST_CASE("cuda faults: an executor frees what it allocated when it is destroyed") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  pt::uniform_chain<flaky> model(std::vector<flaky>(2));
  pc::record_driver d;
  std::vector<const void*> allocated;
  {
    pc::executor ex{plan, model, d, {.rank = 0}};
    for (const call& c : d.calls())
      if (c.what == ck::allocate) allocated.push_back(c.ptr);
    d.clear();
  }
  std::vector<const void*> freed;
  for (const call& c : d.calls())
    if (c.what == ck::free) freed.push_back(c.ptr);
  REQUIRE(!allocated.empty());
  std::sort(allocated.begin(), allocated.end());
  std::sort(freed.begin(), freed.end());
  CHECK(freed == allocated);
}

TEST_CASE("cuda faults: failures() is current after a stage throws, and the next step runs") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  pt::uniform_chain<flaky> model(std::vector<flaky>(2));
  pc::record_driver d;
  pc::executor ex{plan, model, d, {.rank = 0}};
  std::vector<float> batch(16 * 4);
  throw_at = 2;
  CHECK_THROWS_WITH_AS(ex.step(batch.data()), "injected", std::runtime_error);
  REQUIRE(ex.failures().size() == 1);
  const pt::failure& f = ex.failures().front();
  CHECK(f.cause == pt::failure_cause::stage_threw);
  CHECK(f.rank == 0);
  CHECK(f.message == "pipetype::cuda: rank 0, stage 0, microbatch 2, action 0F2 threw: injected");
  CHECK(f.action == "compute 0F2");
  throw_at = -1;
  ex.step(batch.data());
  CHECK(ex.failures().empty());
}

TEST_CASE("cuda faults: a collective that fails names the rank, the action and the communicator") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  const pt::mesh_program mp = pt::build_mesh(plan.compute(), plan.lowered(), {2, 2}, {.dp = 2});
  pt::uniform_chain<flaky> model(std::vector<flaky>(2));
  failing_reduce d;
  pc::executor ex{plan, mp, model, d, {.rank = 3}};  // pipeline rank 1 of replica 1
  std::vector<float> batch(16 * 4);
  try {
    ex.step(batch.data());
    FAIL("the all-reduce should have failed");
  } catch (const pc::device_error& e) {
    const std::string what = e.what();
    CHECK(what.find("ncclAllReduce failed") != std::string::npos);
    CHECK(what.find("[while issuing rank 3, op ") != std::string::npos);
    CHECK(what.find(": REDUCE_GRAD(1) on communicator " + std::to_string(mp.dp_comm(1)) + "]") != std::string::npos);
  }
  REQUIRE(ex.failures().size() == 1);
  CHECK(ex.failures().front().cause == pt::failure_cause::device);
  CHECK(ex.failures().front().rank == 3);
  CHECK(static_cast<int>(ex.failures().front().stream) == pt::dp_stream);
}

}  // namespace test_cuda_faults
}  // namespace
