// A model part per rank (bind/part.hpp) on the device executor over the record driver: a rank
// that holds only its stages issues exactly the calls of one that holds the whole model; a part
// that does not fit the plan is one sentence naming the stage, before anything is allocated.
#include <pipetype/bind/part.hpp>
#include <pipetype/cuda/executor.hpp>
#include <pipetype/cuda/record.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_part {

namespace pt = pipetype;
namespace pc = pipetype::cuda;
using call = pc::record_driver::call;
using ck = pc::record_driver::call_kind;

namespace {

// Stages of different sizes, so that a transfer sized from the wrong end would show: stage s
// gives 4 (s + 1) floats and an int id that carries no gradient.
struct sized {
  using input = pt::tensors<pt::tensor<float, pt::dynamic>, pt::no_grad<pt::tensor<std::int32_t, 1>>>;
  using output = input;
  using weight_grad = pt::tensor<float, 1>;
  std::size_t in_n = 4, out_n = 4;
  float acc[1] = {};
  std::span<float> weight_gradients() { return acc; }
  std::size_t input_extent(std::size_t) const { return in_n; }
  std::size_t output_extent(std::size_t) const { return out_n; }
  void forward(const pt::forward_ctx<sized>&) {}
  void backward_input(const pt::backward_ctx<sized>&) {}
  void backward_weight(const pt::backward_ctx<sized>&) {}
};

std::vector<sized> make_stages(int L) {
  std::vector<sized> out(static_cast<std::size_t>(L));
  for (int s = 0; s < L; ++s) {
    out[static_cast<std::size_t>(s)].in_n = 4 * static_cast<std::size_t>(s);  // stage 0 takes 0: the batch
    out[static_cast<std::size_t>(s)].out_n = 4 * static_cast<std::size_t>(s + 1);
  }
  out[0].in_n = 3;
  return out;
}

std::vector<call> issued(pc::record_driver& d) {
  std::vector<call> out;
  for (const call& c : d.calls())
    if (c.what != ck::allocate && c.what != ck::make_stream && c.what != ck::make_event) out.push_back(c);
  return out;
}

bool same(const call& a, const call& b) {  // the addresses differ: the two executors allocate apart
  return a.what == b.what && a.stream == b.stream && a.event == b.event && a.comm == b.comm && a.peer == b.peer &&
         a.bytes == b.bytes && a.kind == b.kind && a.stage == b.stage && a.microbatch == b.microbatch;
}

}  // namespace

TEST_CASE("model part: a rank that holds only its stages issues the whole model's calls") {
  for (const char* name : {"interleaved-1f1b", "zb-v", "dualpipe-v", "1f1b"}) {
    const std::string schedule = name;
    CAPTURE(schedule);
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, 2, 4));
    REQUIRE(plan.ok());
    const int L = plan.compute().lane_length();
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      pt::uniform_chain<sized> whole(make_stages(L));
      std::vector<sized> own = make_stages(L);
      pt::model_part part{L};
      for (const int s : pt::stages_on(plan.compute(), r)) part.hold(s, own[static_cast<std::size_t>(s)]);
      pc::record_driver dw, dp;
      pc::executor ew{plan, whole, dw, {.rank = r, .comms = {0, 1, 2, 3, 4, 5, 6, 7}}};
      pc::executor ep{plan, part, dp, {.rank = r, .comms = {0, 1, 2, 3, 4, 5, 6, 7}}};
      const std::vector<float> x(3 * 4);
      const std::vector<std::int32_t> ids(4);
      pt::batch whole_batch;
      whole_batch.input(x).input(ids);
      pt::batch part_batch;  // only the sources this rank holds
      if (part.holds(0)) part_batch.input(x).input(ids);
      dw.clear();
      dp.clear();
      ew.step(whole_batch);
      ep.step(part_batch);
      const std::vector<call> a = issued(dw), b = issued(dp);
      REQUIRE(a.size() == b.size());
      int transfers = 0;
      for (std::size_t k = 0; k < a.size(); ++k) {
        CHECK(same(a[k], b[k]));
        transfers += a[k].what == ck::send || a[k].what == ck::recv;
      }
      CHECK(transfers > 0);
    }
  }
}

TEST_CASE("model part: a part that does not fit the plan is one sentence naming the stage") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("interleaved-1f1b", 2, 4));  // rank 0: 0, 2
  std::vector<sized> own = make_stages(4);
  pc::record_driver d;
  pt::model_part missing{4};
  missing.hold(0, own[0]);
  CHECK_THROWS_WITH_AS((pc::executor{plan, missing, d, {.rank = 0, .comms = {0, 1, 2}}}),
                       "pipetype::cuda: rank 0 runs stage 2 (the plan places it there), but its part does not hold it",
                       pt::shape_error);
  pt::model_part extra{4};
  extra.hold(0, own[0]).hold(2, own[2]).hold(3, own[3]);
  CHECK_THROWS_WITH_AS((pc::executor{plan, extra, d, {.rank = 0, .comms = {0, 1, 2}}}),
                       "pipetype::cuda: rank 0's part holds stage 3, which the plan does not run on rank 0 (give each "
                       "rank only its stages: pipetype::stages_on)",
                       pt::shape_error);
  CHECK(d.calls().empty());  // nothing allocated
  pt::model_part twice{4};
  twice.hold(1, own[1]);
  CHECK_THROWS_WITH_AS(twice.hold(1, own[1]), "pipetype::model_part: stage 1 is held twice", pt::shape_error);
  CHECK_THROWS_WITH_AS(twice.hold(4, own[0]), "pipetype::model_part: stage 4 is not one of the model's 4",
                       pt::shape_error);
  pt::model_part other_graph{pt::stage_dag{4, {{0, 1}, {1, 3}, {0, 2}, {2, 3}}}};
  CHECK_THROWS_AS((pc::executor{plan, other_graph, d, {.rank = 0, .comms = {0, 1, 2}}}), pt::shape_error);
  CHECK(pt::stages_on(plan.compute(), 0) == std::vector<int>{0, 2});
  CHECK(pt::stages_on(plan.compute(), 1) == std::vector<int>{1, 3});
}

// A fan-in whose edges carry different types (per_edge<...>): each transfer is sized by its own
// edge's type, on both ends.
template <std::size_t N>
struct tower {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, N>;
  void forward(const pt::forward_ctx<tower>&) {}
  void backward(const pt::backward_ctx<tower>&) {}
};
struct joined {
  using inputs = pt::per_edge<pt::tensor<float, 3>, pt::tensor<float, 5>>;
  using output = pt::tensor<float, 1>;
  void forward(const pt::forward_ctx<joined>&) {}
  void backward(const pt::backward_ctx<joined>&) {}
};

TEST_CASE("cuda record: a fan-in's edges of different types move their own bytes") {
  using model_t = pt::dag<pt::nodes<tower<3>, tower<5>, joined>, pt::edges<pt::edge<0, 2>, pt::edge<1, 2>>>;
  pt::schedule_params params;
  params.edges = model_t::topology().edges;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 3, 2, 1, params));
  REQUIRE(plan.ok());
  const std::vector<float> x(2 * 4);
  std::vector<std::size_t> sent, received;
  for (int r = 0; r < 3; ++r) {
    model_t model;
    pc::record_driver d;
    pc::executor ex{plan, model, d, {.rank = r, .comms = {0, 1}}};
    pt::batch b;
    b.input(x).input(x);  // the whole model on every rank: both sources' arrays
    d.clear();
    ex.step(b);
    for (const call& c : d.calls()) {
      if (c.what == ck::send) sent.push_back(c.bytes);
      if (c.what == ck::recv) received.push_back(c.bytes);
    }
  }
  std::sort(sent.begin(), sent.end());
  std::sort(received.begin(), received.end());
  CHECK(sent == received);                                                  // every transfer's two ends agree
  CHECK(sent == std::vector<std::size_t>{12, 12, 12, 12, 20, 20, 20, 20});  // each way, per microbatch
}

}  // namespace test_part
}  // namespace
