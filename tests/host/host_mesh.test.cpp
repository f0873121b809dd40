// The host executor over a pp × dp mesh (host/mesh_executor.hpp): every schedule that runs over a
// mesh gives, on every replica, bitwise the gradients of an unpipelined run over the same dp · m
// microbatches summed in the documented order (each replica's in microbatch order, then the
// replicas' sums in replica order), plain, sharded (FSDP: on each replica's own shard, its own
// partial sums elsewhere, the
// parameters gathered again after their release) and with a tie group; faults end the step on
// every rank and the next step runs; bad input is one sentence.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include "mesh_stages.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_host_mesh {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

namespace {

using mesh_stages::throw_at;
using mesh_stages::width;
using lin = mesh_stages::lin<false>;
using mse = mesh_stages::mse;

using model_t = pt::chain<lin, lin, lin, mse>;

struct replicas {
  std::deque<model_t> models;
  std::vector<model_t*> ptrs;
  explicit replicas(int n) {
    for (int d = 0; d < n; ++d) {
      ptrs.push_back(&models.emplace_back());
    }
  }
};

struct data {
  std::vector<float> x, t;
};
data make_data(int microbatches) {
  data d;
  for (int j = 0; j < microbatches * static_cast<int>(width); ++j) {
    d.x.push_back(static_cast<float>(j % 7 - 3) * 0.37f);
    d.t.push_back(static_cast<float>((5 * j) % 3) * 0.5f);
  }
  return d;
}

// The unpipelined run over D·m microbatches: per replica its microbatches' gradients summed in
// order from zero, tied w's summed in stage order; then the replicas' sums added in replica order.
struct reference {
  std::vector<float> losses;
  float g[3][2 * width] = {};
  std::vector<std::array<std::array<float, 2 * width>, 3>> part;  // per replica: its own sums (tied: summed)
};
reference reference_of(const data& x, int D, int m, bool tied) {
  const lin l;
  reference r;
  const float f = 1.0f / static_cast<float>(D * m);
  for (int d = 0; d < D; ++d) {
    float acc[3][2 * width] = {};
    for (int j = d * m; j < (d + 1) * m; ++j) {
      float h[4][width];
      for (std::size_t i = 0; i < width; ++i) h[0][i] = x.x[static_cast<std::size_t>(j) * width + i];
      for (int s = 0; s < 3; ++s)
        for (std::size_t i = 0; i < width; ++i) h[s + 1][i] = l.p[i] * h[s][i] + l.p[width + i];
      float loss = 0, g[width];
      for (std::size_t i = 0; i < width; ++i) {
        const float e = h[3][i] - x.t[static_cast<std::size_t>(j) * width + i];
        loss += 0.5f * e * e;
        g[i] = f * e;
      }
      r.losses.push_back(loss);
      for (int s = 2; s >= 0; --s)
        for (std::size_t i = 0; i < width; ++i) {
          acc[s][i] += g[i] * h[s][i];
          acc[s][width + i] += g[i];
          g[i] *= l.p[i];
        }
    }
    if (tied)
      for (std::size_t i = 0; i < width; ++i) acc[0][i] = acc[2][i] = acc[0][i] + acc[2][i];
    auto& mine = r.part.emplace_back();
    for (int s = 0; s < 3; ++s)
      for (std::size_t i = 0; i < 2 * width; ++i) mine[static_cast<std::size_t>(s)][i] = acc[s][i];
    for (int s = 0; s < 3; ++s)
      for (std::size_t i = 0; i < 2 * width; ++i) r.g[s][i] = d == 0 ? acc[s][i] : r.g[s][i] + acc[s][i];
  }
  return r;
}

template <class S>
void zero(S& s) {
  for (float& v : s.acc) v = 0;
}

}  // namespace

TEST_CASE("host mesh: every schedule over dp replicas gives bitwise the reference's gradients") {
  const int m = 4;
  struct scheduled {
    const char* name;
    int ranks;
  };
  for (const scheduled s :
       {scheduled{"gpipe", 4}, {"1f1b", 4}, {"interleaved-1f1b", 2}, {"looped-bfs", 2}, {"zb-h1", 4}, {"zb-h2", 4}}) {
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(s.name, s.ranks, m, 4 / s.ranks));
    REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
    for (const int D : {2, 3})
      for (const pt::mesh_order order : {pt::mesh_order::dp_inner, pt::mesh_order::pp_inner})
        for (const bool shard : {false, true})
          for (const bool tied : {false, true}) {
            CAPTURE(s.name);
            CAPTURE(D);
            CAPTURE(shard);
            CAPTURE(tied);
            CAPTURE(static_cast<int>(order));
            replicas reps(D);
            pt::dp_options o{.dp = D, .shard = shard};
            if (tied) o.ties = {{0, 2}};
            ph::mesh_executor ex{plan, pt::mesh{s.ranks, D, order}, o, reps.ptrs, {.exec = {.deadline = 20s}}};
            const data x = make_data(D * m);
            pt::batch b;
            b.input(x.x).target(x.t);
            const reference r = reference_of(x, D, m, tied);
            for (int step = 0; step < 2; ++step) {  // the second: after every release, gathered again
              const pt::step_losses& l = ex.step(b);
              REQUIRE(l.values.size() == static_cast<std::size_t>(D * m));
              CHECK(l.scale == doctest::Approx(1.0 / (D * m)));
              for (int j = 0; j < D * m; ++j) CHECK(l.at(0, j) == r.losses[static_cast<std::size_t>(j)]);
              for (int d = 0; d < D; ++d) {
                model_t& md = *reps.ptrs[static_cast<std::size_t>(d)];
                const float* got[3] = {md.stage<0>().acc, md.stage<1>().acc, md.stage<2>().acc};
                const pt::shard_range own = pt::shard_of(2 * width, D, d);
                for (int st = 0; st < 3; ++st)
                  for (std::size_t i = 0; i < 2 * width; ++i) {
                    const bool mine = !shard || (i >= own.begin && i < own.end);
                    // outside its shard a replica keeps its own partial sums
                    CHECK(got[st][i] ==
                          (mine ? r.g[st][i] : r.part[static_cast<std::size_t>(d)][static_cast<std::size_t>(st)][i]));
                  }
                if (shard) {  // released: what the replica does not own is NaN, its own shard intact
                  const lin fresh;
                  for (std::size_t i = 0; i < 2 * width; ++i) {
                    const bool mine = i >= own.begin && i < own.end;
                    CHECK((mine ? md.stage<1>().p[i] == fresh.p[i] : std::isnan(md.stage<1>().p[i])));
                  }
                }
                zero(md.stage<0>()), zero(md.stage<1>()), zero(md.stage<2>());
              }
            }
          }
  }
}

TEST_CASE("host mesh: the mesh program is the proven one, with its collectives on a third stream") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 4));
  replicas reps(2);
  ph::mesh_executor ex{plan, pt::mesh{4, 2}, pt::dp_options{.dp = 2, .ties = {{0, 2}}}, reps.ptrs};
  const pt::mesh_program& mp = ex.program();
  CHECK(pt::verify_mesh(mp).ok());
  int reductions = 0, ties = 0;
  for (const pt::mesh_op& o : mp.ops) {
    reductions += o.code == pt::mesh_op_code::all_reduce && o.tie < 0;
    ties += o.code == pt::mesh_op_code::all_reduce && o.tie >= 0;
    if (pt::is_collective(o.code)) CHECK(o.stream == pt::dp_stream);
  }
  CHECK(reductions == 4 * 2);  // each of the 4 stages on each of the 2 replicas
  CHECK(ties == 2 * 2);        // ranks 0 and 2 of each replica
  CHECK(ex.shape() == pt::mesh{4, 2});
}

TEST_CASE("host mesh: a traced step draws its collectives on the data-parallel stream") {
  const int D = 2, m = 4;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, m));
  replicas reps(D);
  ph::mesh_executor ex{plan,
                       pt::mesh{4, D},
                       pt::dp_options{.dp = D, .shard = true},
                       reps.ptrs,
                       {.exec = {.deadline = 20s, .trace = true}}};
  const data x = make_data(D * m);
  pt::batch b;
  b.input(x.x).target(x.t);
  ex.step(b);
  const pt::step_trace tr = pt::trace_of(ex.trace());
  int expected = 0;  // every collective and release of the mesh program
  for (const pt::mesh_op& o : ex.program().ops)
    expected += pt::is_collective(o.code) || o.code == pt::mesh_op_code::release ? 1 : 0;
  CHECK(static_cast<int>(tr.collectives.size()) == expected);
  int reductions = 0;
  for (const pt::traced_collective& c : tr.collectives) {
    CHECK(c.end >= c.start);
    CHECK(c.start >= 0);
    if (c.name.rfind("REDUCE_GRAD(", 0) == 0) {
      ++reductions;
      CHECK(c.comm == ex.program().dp_comm(ex.shape().pipeline_rank(c.rank)));
    }
  }
  CHECK(reductions == 4 * D);
  CHECK(pt::svg(tr).find("class=\"collective\"><title>REDUCE_GRAD(") != std::string::npos);
}

TEST_CASE("host mesh: a tie group within one rank is summed there") {
  // interleaved over 2 ranks: stages 0 and 2 both on rank 0
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("interleaved-1f1b", 2, 4, 2));
  REQUIRE(plan.ok());
  const int D = 2, m = 4;
  replicas reps(D);
  ph::mesh_executor ex{plan, pt::mesh{2, D}, pt::dp_options{.dp = D, .ties = {{0, 2}}}, reps.ptrs};
  int local = 0;
  for (const pt::mesh_op& o : ex.program().ops) local += o.code == pt::mesh_op_code::local_sum;
  CHECK(local == D);
  const data x = make_data(D * m);
  pt::batch b;
  b.input(x.x).target(x.t);
  ex.step(b);
  const reference r = reference_of(x, D, m, true);
  for (const model_t* md : reps.ptrs)
    for (std::size_t i = 0; i < 2 * width; ++i) {
      CHECK(md->stage<0>().acc[i] == r.g[0][i]);
      CHECK(md->stage<2>().acc[i] == r.g[2][i]);
    }
}

TEST_CASE("host mesh: a stage that throws ends the step on every rank of the mesh, and the next step runs") {
  const int D = 2, m = 4;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, m));
  replicas reps(D);
  ph::mesh_executor ex{
      plan, pt::mesh{4, D}, pt::dp_options{.dp = D, .shard = true}, reps.ptrs, {.exec = {.deadline = 20s}}};
  const data x = make_data(D * m);
  pt::batch b;
  b.input(x.x).target(x.t);
  throw_at = 2;  // microbatch 2 of each replica, on stage 1
  try {
    ex.step(b);
    FAIL("the step should have failed");
  } catch (const ph::step_error& e) {
    CHECK(e.cause() == pt::failure_cause::stage_threw);
    CHECK(std::string(e.what()).find("stage 1, microbatch 2, action 1F2 threw: injected") != std::string::npos);
    CHECK(!e.failures().empty());
    CHECK(e.failures().size() == ex.failures().size());
    bool other_stopped = false;  // threads of other ranks than the thrower's ended too
    for (const pt::failure& f : e.failures()) {
      other_stopped = other_stopped || f.cause == pt::failure_cause::aborted;
      if (f.cause != pt::failure_cause::stage_threw) continue;
      // the failure names the mesh program's op: the thrower's 1F2
      const auto ops = ex.program().rank_ops(f.rank);
      REQUIRE(f.op >= 0);
      REQUIRE(f.op < static_cast<int>(ops.size()));
      const pt::mesh_op& o = ops[static_cast<std::size_t>(f.op)];
      CHECK(o.code == pt::mesh_op_code::compute);
      CHECK(o.stage == 1);
      CHECK(o.microbatch == 2);
    }
    CHECK(other_stopped);
    for (const float v : ex.losses().values) CHECK(std::isnan(v));  // no loss of a failed step survives
  }
  throw_at = -1;
  for (model_t* md : reps.ptrs) zero(md->stage<0>()), zero(md->stage<1>()), zero(md->stage<2>());
  for (model_t& md : reps.models) {  // the failed step released what it gathered
    const lin fresh;
    for (std::size_t i = 0; i < 2 * width; ++i) md.stage<0>().p[i] = fresh.p[i];
    for (std::size_t i = 0; i < 2 * width; ++i) md.stage<1>().p[i] = fresh.p[i];
    for (std::size_t i = 0; i < 2 * width; ++i) md.stage<2>().p[i] = fresh.p[i];
  }
  const pt::step_losses& l = ex.step(b);
  CHECK(ex.failures().empty());
  const reference r = reference_of(x, D, m, false);
  for (int j = 0; j < D * m; ++j) CHECK(l.at(0, j) == r.losses[static_cast<std::size_t>(j)]);
}

// A stage that keeps its own gradient accumulators: pipetype cannot reduce what it cannot see.
struct own_acc {
  using input = pt::tensor<float, width>;
  using output = pt::tensor<float, width>;
  void forward(const pt::forward_ctx<own_acc>& c) {
    for (std::size_t i = 0; i < width; ++i) c.output[i] = c.input[i];
  }
  void backward(const pt::backward_ctx<own_acc>& c) {
    for (std::size_t i = 0; i < c.grad_input.size(); ++i) c.grad_input[i] = c.grad_output[i];
  }
};
// A stage with gradients pipetype sees, but no parameters() to gather.
struct no_params {
  using input = pt::tensor<float, width>;
  using output = pt::tensor<float, width>;
  using weight_grad = pt::tensor<float, width>;
  float acc[width] = {};
  std::span<float> weight_gradients() { return acc; }
  void forward(const pt::forward_ctx<no_params>& c) {
    for (std::size_t i = 0; i < width; ++i) c.output[i] = c.input[i];
  }
  void backward(const pt::backward_ctx<no_params>& c) {
    for (std::size_t i = 0; i < c.grad_input.size(); ++i) c.grad_input[i] = c.grad_output[i];
    for (std::size_t i = 0; i < width; ++i) c.weight_grad[i] = c.grad_output[i];
  }
};

TEST_CASE("host mesh: bad input is one sentence") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 4));
  replicas reps(2);
  const pt::dp_options o{.dp = 2};
  CHECK_THROWS_WITH_AS((ph::mesh_executor{plan, pt::mesh{2, 4}, pt::dp_options{.dp = 4}, reps.ptrs}),
                       "pipetype::host: the mesh has 2 pipeline ranks (pp), the plan 4", std::invalid_argument);
  CHECK_THROWS_WITH_AS((ph::mesh_executor{plan, pt::mesh{4, 2}, pt::dp_options{.dp = 3}, reps.ptrs}),
                       "pipetype::host: dp_options::dp is 3 but the mesh has 2 replicas", std::invalid_argument);
  replicas three(3);
  CHECK_THROWS_WITH_AS((ph::mesh_executor{plan, pt::mesh{4, 2}, o, three.ptrs}),
                       "pipetype::host: the mesh has 2 replicas but 3 models were given (one per replica)",
                       std::invalid_argument);
  std::vector<model_t*> same{reps.ptrs[0], reps.ptrs[0]};
  CHECK_THROWS_WITH_AS(
      (ph::mesh_executor{plan, pt::mesh{4, 2}, o, same}),
      "pipetype::host: replicas 0 and 1 are one model; each replica needs its own parameters and gradients",
      std::invalid_argument);
  CHECK_THROWS_WITH_AS((ph::mesh_executor{plan, pt::mesh{4, 2}, pt::dp_options{.dp = 2, .ties = {{0, 7}}}, reps.ptrs}),
                       doctest::Contains("a tie group names a stage the program does not have"), std::invalid_argument);
  // the user's collectives, one REDUCE_GRAD left out
  pt::collective_program c = pt::place_collectives(plan.compute(), o);
  pt::collective_program fewer = c;
  fewer.ops.erase(fewer.ops.begin());
  for (std::size_t k = 1; k < fewer.begin.size(); ++k) fewer.begin[k] -= 1;
  CHECK_THROWS_WITH_AS((ph::mesh_executor{plan, pt::mesh{4, 2}, o, fewer, reps.ptrs}), doctest::Contains("REDUCE_GRAD"),
                       std::invalid_argument);

  using own_t = pt::chain<own_acc, own_acc, own_acc, own_acc>;
  own_t a, b2;
  std::vector<own_t*> owns{&a, &b2};
  CHECK_THROWS_WITH_AS((ph::mesh_executor{plan, pt::mesh{4, 2}, o, owns}),
                       "pipetype::host: stage 0 hands no weight gradients to pipetype, so the replicas could not "
                       "reduce them: declare `using weight_grad = pipetype::tensor<T, N>;` and `std::span<T> "
                       "weight_gradients();` (a stage without parameters: N = 0 and an empty span)",
                       pt::shape_error);
  using np_t = pt::chain<no_params, no_params, no_params, no_params>;
  np_t c1, c2;
  std::vector<np_t*> nps{&c1, &c2};
  CHECK_THROWS_WITH_AS((ph::mesh_executor{plan, pt::mesh{4, 2}, pt::dp_options{.dp = 2, .shard = true}, nps}),
                       "pipetype::host: stage 0 has no parameters() for FSDP (dp_options::shard) to gather and "
                       "release: give it `std::span<T> parameters()`",
                       pt::shape_error);
  CHECK_THROWS_WITH_AS((ph::mesh_executor{plan, pt::mesh{4, 2}, pt::dp_options{.dp = 2, .ties = {{0, 3}}}, nps}),
                       "pipetype::host: stage 0 is in tie group 0 but has no `std::span<T> tied_gradients(int tie)` "
                       "saying where the tied gradient is",
                       pt::shape_error);
  const pt::runtime_plan dual = pt::build_plan(pt::make_schedule("dualpipe", 4, 8));
  REQUIRE(dual.ok());
  CHECK_THROWS_WITH_AS((ph::mesh_executor{dual, pt::mesh{4, 2}, o, reps.ptrs}),
                       doctest::Contains("(DualPipe) does not run over a mesh yet"), std::invalid_argument);
  // a batch of one replica's microbatches is not the global batch
  ph::mesh_executor ex{plan, pt::mesh{4, 2}, o, reps.ptrs};
  const data x = make_data(4);
  pt::batch b;
  b.input(x.x).target(x.t);
  CHECK_THROWS_AS(ex.step(b), pt::shape_error);
}

}  // namespace test_host_mesh
}  // namespace
