// LibTorch modules as stages (include/pipetype/torch/stage.hpp): a chain of torch::nn modules run by
// the host executor under every kind of schedule gives bitwise the gradients of the same model run
// unpipelined by LibTorch, microbatch after microbatch; the split backward gives what the full one
// does; parameters and gradients are flat; bad modules are refused with a sentence.
#include <pipetype/host.hpp>
#include <pipetype/torch/stage.hpp>

#include <torch/torch.h>

#include <doctest/doctest.h>

#include "spec.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace {
namespace test_torch_stage {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

constexpr std::int64_t rows = 3, width = 8;
using hidden = pt::tensor<float, pt::dynamic>;
using block_stage = pt::torch::module_stage<hidden, hidden, hidden>;

// Stage k of n: Linear + tanh, the last one Linear only with a mean-squared-error loss against the
// targets. Parameters from a seed of their own, so the reference builds the same ones.
torch::nn::Sequential make_block(int k, int n) {
  torch::manual_seed(static_cast<std::uint64_t>(100 + k));
  torch::nn::Sequential s(torch::nn::Linear(width, width));
  if (k < n - 1) s->push_back(torch::nn::Functional(torch::tanh));
  return s;
}

pt::torch::stage_spec spec_of(int k) { return torch_test::square_spec("block " + std::to_string(k), rows, width); }

pt::uniform_chain<block_stage> make_model(int n) {
  std::vector<block_stage> v;
  for (int k = 0; k < n; ++k) v.emplace_back(make_block(k, n), spec_of(k));
  return pt::uniform_chain<block_stage>(std::move(v));
}

struct data {
  std::vector<float> x, t;
};
data make_data(int m) {
  torch::manual_seed(7);
  const at::Tensor x = torch::randn({m, rows, width}), t = torch::randn({m, rows, width});
  return {std::vector<float>(x.data_ptr<float>(), x.data_ptr<float>() + x.numel()),
          std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel())};
}

// The same model unpipelined: microbatch after microbatch, d(f · loss_j)/dθ added in order.
struct reference {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;  // per stage, flat, in parameters() order
};
reference reference_of(const data& d, int n, int m) {
  std::vector<torch::nn::Sequential> blocks;
  for (int k = 0; k < n; ++k) blocks.push_back(make_block(k, n));
  reference r;
  r.grads.resize(static_cast<std::size_t>(n));
  std::vector<std::vector<at::Tensor>> acc(static_cast<std::size_t>(n));
  const float f = 1.0f / static_cast<float>(m);
  for (int j = 0; j < m; ++j) {
    const auto at_j = [&](const std::vector<float>& v) {
      return torch::from_blob(const_cast<float*>(v.data()) + j * rows * width, {rows, width}).clone();
    };
    at::Tensor h = at_j(d.x);
    for (auto& b : blocks) h = b->forward(h);
    const at::Tensor loss = torch::mse_loss(h, at_j(d.t), at::Reduction::Sum);
    r.losses.push_back(loss.item<float>());
    std::vector<at::Tensor> params;
    for (auto& b : blocks)
      for (const auto& p : b->parameters()) params.push_back(p);
    const auto g = torch::autograd::grad({loss}, params, {torch::full({}, f)});
    std::size_t i = 0;
    for (int k = 0; k < n; ++k) {
      std::size_t q = 0;
      for (const auto& p : blocks[static_cast<std::size_t>(k)]->parameters()) {
        (void)p;
        auto& a = acc[static_cast<std::size_t>(k)];
        if (a.size() <= q) a.push_back(torch::zeros_like(g[i]));
        a[q].add_(g[i]);
        ++q, ++i;
      }
    }
  }
  for (int k = 0; k < n; ++k)
    for (const auto& a : acc[static_cast<std::size_t>(k)])
      r.grads[static_cast<std::size_t>(k)].insert(r.grads[static_cast<std::size_t>(k)].end(), a.data_ptr<float>(),
                                                  a.data_ptr<float>() + a.numel());
  return r;
}

// A schedule by name, on `ranks` ranks of `chunks` stages each.
struct scheduled {
  const char* name;
  int ranks, chunks;
};

bool same_bits(std::span<const float> a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), b.size() * sizeof(float)) == 0;
}

}  // namespace test_torch_stage
}  // namespace

using namespace test_torch_stage;

TEST_CASE("torch stage: every kind of schedule gives bitwise the unpipelined LibTorch gradients") {
  at::set_num_threads(1);
  const int m = 8;
  const data d = make_data(m);
  for (const scheduled s : {scheduled{"gpipe", 4, 1}, {"1f1b", 4, 1}, {"interleaved-1f1b", 2, 2}, {"zb-h1", 4, 1},
                            {"zb-v", 2, 2}, {"dualpipe-v", 2, 2}, {"looped-bfs", 2, 2}}) {
    CAPTURE(s.name);
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(s.name, s.ranks, m, s.chunks));
    REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
    const int n = s.ranks * s.chunks;
    const reference r = reference_of(d, n, m);
    auto model = make_model(n);
    ph::executor ex{plan, model, {.deadline = 60s}};
    pt::batch b;
    b.input(d.x).target(d.t);
    const pt::step_losses& l = ex.step(b);
    for (int j = 0; j < m; ++j) CHECK(l.at(0, j) == r.losses[static_cast<std::size_t>(j)]);
    // the plan's stash model counts a graph from F to the microbatch's last backward: per rank, the
    // most graphs held at once is its planned peak (a rank of one stage: that stage's high water;
    // of several: each stage's at most the rank's)
    const std::vector<pt::rank_memory> planned = pt::memory_of(
        plan.compute(), pt::no_memory_actions(plan.compute()), pt::memory_sizes{{1}, {0}}, pt::stash_model);
    for (int k = 0; k < n; ++k) {
      CAPTURE(k);
      block_stage& st = model.stage(k);
      CHECK(same_bits(st.weight_gradients(), r.grads[static_cast<std::size_t>(k)]));
      CHECK(st.graphs_held() == 0);
      const int owner = pt::detail::stage_owners(plan.compute())[static_cast<std::size_t>(k)];
      const auto rank_peak = static_cast<std::size_t>(planned[static_cast<std::size_t>(owner)].peak_bytes);
      if (s.chunks == 1)
        CHECK(st.graphs_high_water() == rank_peak);
      else
        CHECK(st.graphs_high_water() <= rank_peak);
      CHECK(st.split_exact());
      // the module's own .grad() are views of the flat gradients
      const auto p = st.module().parameters();
      CHECK(p.front().grad().data_ptr() == static_cast<void*>(st.weight_gradients().data()));
    }
  }
}

TEST_CASE("torch stage: parameters move into one flat array with their values, and an optimizer steps through the views") {
  torch::nn::Linear lin(4, 2);
  const at::Tensor w0 = lin->weight.detach().clone(), b0 = lin->bias.detach().clone();
  pt::torch::module_stage<pt::tensor<float, 4>, pt::tensor<float, 2>> s{lin, {.inputs = {{{4}}}, .outputs = {{{2}}}}};
  REQUIRE(s.parameters().size() == 10);
  CHECK(std::memcmp(s.parameters().data(), w0.data_ptr<float>(), 8 * sizeof(float)) == 0);
  CHECK(std::memcmp(s.parameters().data() + 8, b0.data_ptr<float>(), 2 * sizeof(float)) == 0);
  CHECK(lin->weight.data_ptr() == static_cast<void*>(s.parameters().data()));
  for (float& g : s.weight_gradients()) g = 1.0f;
  torch::optim::SGD opt(lin->parameters(), torch::optim::SGDOptions(0.5));
  opt.step();
  CHECK(s.parameters()[0] == doctest::Approx(w0.data_ptr<float>()[0] - 0.5f));
  opt.zero_grad(true);  // sets each .grad() to undefined (zero_grad(false) refuses: a view cannot detach)
  s.zero_grad();        // zeroes the flat gradients and re-attaches the views
  CHECK(lin->weight.grad().data_ptr() == static_cast<void*>(s.weight_gradients().data()));
  CHECK(s.weight_gradients()[3] == 0.0f);
}

TEST_CASE("torch stage: a tie group names a parameter, whose part of the flat arrays tied_gradients() gives") {
  torch::nn::Linear lin(4, 2);
  using one = pt::torch::module_stage<pt::tensor<float, 4>, pt::tensor<float, 2>>;
  one s{lin, {.inputs = {{{4}}}, .outputs = {{{2}}}, .ties = {{0, "bias"}}}};
  CHECK(s.tied_gradients(0).data() == s.weight_gradients().data() + 8);
  CHECK(s.tied_gradients(0).size() == 2);
  CHECK(s.tied_parameters(0).data() == s.parameters().data() + 8);
  CHECK_THROWS_WITH_AS(s.tied_gradients(1),
                       "pipetype::torch: stage is in no tie group 1 (stage_spec::ties names the parameter of each group)",
                       std::invalid_argument);
  torch::nn::Linear other(4, 2);
  CHECK_THROWS_WITH_AS((one{other, {.inputs = {{{4}}}, .outputs = {{{2}}}, .ties = {{0, "wte"}}}}),
                       "pipetype::torch: stage: tie group 0 names a parameter 'wte' the module does not have",
                       std::invalid_argument);
}

TEST_CASE("torch stage: a parameter used twice in one stage falls back to a W from the outputs, still right") {
  at::set_num_threads(1);
  // y = W·tanh(W·x): the second use's node and the first's both feed W's accumulator, so W cannot
  // start from both kept gradients without counting a path twice.
  struct twice_impl : torch::nn::Module {
    twice_impl() { w = register_parameter("w", torch::randn({width, width})); }
    at::Tensor forward(const at::Tensor& x) { return torch::matmul(torch::tanh(torch::matmul(x, w)), w); }
    at::Tensor w;
  };
  const int m = 4;
  const data d = make_data(m);
  const auto spec = [](int k) {
    pt::torch::stage_spec s = spec_of(k);
    return s;
  };
  for (const char* name : {"1f1b", "zb-h1"}) {
    CAPTURE(name);
    torch::manual_seed(3);
    auto a = std::make_shared<twice_impl>();
    auto b = std::make_shared<twice_impl>();
    std::vector<block_stage> v;
    v.emplace_back(a, [a](const std::vector<at::Tensor>& x) { return std::vector<at::Tensor>{a->forward(x[0])}; },
                   spec(0));
    v.emplace_back(b, [b](const std::vector<at::Tensor>& x) { return std::vector<at::Tensor>{b->forward(x[0])}; },
                   spec(1));
    pt::uniform_chain<block_stage> model(std::move(v));
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, 2, m, 1));
    REQUIRE(plan.ok());
    ph::executor ex{plan, model, {.deadline = 60s}};
    pt::batch bt;
    bt.input(d.x).target(d.t);
    ex.step(bt);
    // reference: the same two modules, unpipelined (their parameters are the stages' views)
    std::vector<float> ga(static_cast<std::size_t>(width * width), 0.0f), gb = ga;
    at::Tensor acc_a = torch::zeros({width, width}), acc_b = torch::zeros({width, width});
    for (int j = 0; j < m; ++j) {
      const at::Tensor x = torch::from_blob(const_cast<float*>(d.x.data()) + j * rows * width, {rows, width});
      const at::Tensor t = torch::from_blob(const_cast<float*>(d.t.data()) + j * rows * width, {rows, width});
      const at::Tensor loss = torch::mse_loss(b->forward(a->forward(x)), t, at::Reduction::Sum);
      const auto g = torch::autograd::grad({loss}, {a->w, b->w}, {torch::full({}, 1.0f / m)});
      acc_a.add_(g[0]);
      acc_b.add_(g[1]);
    }
    CHECK(torch::allclose(model.stage(0).flat_gradients(), acc_a.reshape(-1), 1e-5, 1e-6));
    CHECK(torch::allclose(model.stage(1).flat_gradients(), acc_b.reshape(-1), 1e-5, 1e-6));
    if (std::string(name) == "zb-h1") {
      CHECK(model.stage(0).split_exact());  // no input gradient asked: W runs from the loss
      CHECK_FALSE(model.stage(1).split_exact());
    }
  }
}

TEST_CASE("torch stage: bad modules and specs are refused with a sentence naming the stage and the tensor") {
  at::set_num_threads(1);
  using one = pt::torch::module_stage<pt::tensor<float, 4>, pt::tensor<float, 4>>;
  const pt::torch::stage_spec ok{.name = "s", .inputs = {{{4}}}, .outputs = {{{4}}}, .targets = {}, .loss = [](const std::vector<at::Tensor>& out, const std::vector<at::Tensor>&) { return out.at(0).sum(); }};
  SUBCASE("a shape that disagrees with the edge's type") {
    CHECK_THROWS_WITH_AS(one(torch::nn::Linear(4, 4), {.name = "s", .inputs = {{{5}}}, .outputs = {{{4}}}}),
                         "pipetype::torch: stage 's''s input 0 has shape [5] (5 elements); its type says 4",
                         pt::shape_error);
    CHECK_THROWS_WITH_AS(one(torch::nn::Linear(4, 4), {.name = "s", .inputs = {{{4}}, {{4}}}, .outputs = {{{4}}}}),
                         "pipetype::torch: stage 's' describes 2 input tensor(s); its type has 1",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(one(torch::nn::Linear(4, 4), {.name = "s", .inputs = {{{4}, 0}}, .outputs = {{{4}}}}),
                         "pipetype::torch: stage 's''s input 0 names a varying_dim but is not varying<...>",
                         std::invalid_argument);
  }
  SUBCASE("a parameter that is not float, refused before any parameter moves") {
    torch::nn::Linear lin(4, 4);
    lin->to(at::kDouble);
    const void* before = lin->weight.data_ptr();
    CHECK_THROWS_WITH_AS(one(lin, ok),
                         "pipetype::torch: stage 's''s parameter 'weight' is Double; the stage's flat parameters and "
                         "gradients are float",
                         std::invalid_argument);
    CHECK(lin->weight.data_ptr() == before);
  }
  // One forward of a one-stage plan, to reach the checks a forward makes.
  const auto run = [](one& s) {
    pt::uniform_chain<one> model(std::vector<one>{});
    model.stages().push_back(std::move(s));
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 1, 1, 1));
    REQUIRE(plan.ok());
    ph::executor_options o;
    o.deadline = 20s;
    o.keep_outputs = true;
    ph::executor ex{plan, model, o};
    std::vector<float> x(4, 1.0f);
    ex.step(x);
  };
  SUBCASE("an output of the wrong dtype") {
    auto lin = torch::nn::Linear(4, 4);
    one s(lin.ptr(), [lin](const std::vector<at::Tensor>& x) mutable { return std::vector<at::Tensor>{lin->forward(x[0]).to(at::kDouble)}; },
          ok);
    CHECK_THROWS_WITH(run(s), doctest::Contains("stage 's''s output 0 is Double; the edge declares Float"));
  }
  SUBCASE("an output of the wrong size") {
    auto lin = torch::nn::Linear(4, 5);
    one s(lin, ok);
    CHECK_THROWS_WITH(run(s), doctest::Contains("stage 's''s output 0 has shape [5] (5 elements); its slot holds 4"));
  }
  SUBCASE("a forward that runs a backward itself") {
    auto lin = torch::nn::Linear(4, 4);
    one s(lin.ptr(),
          [lin](const std::vector<at::Tensor>& x) mutable {
            at::Tensor y = lin->forward(x[0]);
            y.sum().backward({}, true);
            return std::vector<at::Tensor>{y};
          },
          ok);
    CHECK_THROWS_WITH(run(s), doctest::Contains("stage 's''s forward ran a backward itself"));
  }
  SUBCASE("a parameter that changes shape after binding") {
    auto lin = torch::nn::Linear(4, 4);
    one s(lin, ok);
    {
      at::NoGradGuard g;
      lin->weight.set_data(torch::zeros({4, 4}));
    }
    CHECK_THROWS_WITH(run(s), doctest::Contains("stage 's''s parameter 'weight' changed after binding"));
  }
}

namespace {
namespace test_torch_stage {

// A set edge: hidden states [t, width] that vary with the microbatch's length and carry a gradient,
// and positions [t] (int64, no gradient) that an embedding reads.
constexpr std::int64_t max_len = 5;
using seq_set = pt::tensors<pt::varying<pt::tensor<float, pt::dynamic>>,
                            pt::no_grad<pt::varying<pt::tensor<std::int64_t, pt::dynamic>>>>;
using set_stage = pt::torch::module_stage<seq_set, seq_set, pt::varying<pt::tensor<float, pt::dynamic>>>;

struct pos_block_impl : torch::nn::Module {
  explicit pos_block_impl(int k) {
    torch::manual_seed(static_cast<std::uint64_t>(200 + k));
    lin = register_module("lin", torch::nn::Linear(width, width));
    emb = register_module("emb", torch::nn::Embedding(max_len, width));
  }
  at::Tensor forward(const at::Tensor& h, const at::Tensor& pos) { return torch::tanh(lin->forward(h) + emb->forward(pos)); }
  torch::nn::Linear lin{nullptr};
  torch::nn::Embedding emb{nullptr};
};

set_stage make_set_stage(const std::shared_ptr<pos_block_impl>& b) {
  pt::torch::stage_spec s;
  s.name = "pos block";
  s.inputs = {{{max_len, width}, 0}, {{max_len}, 0}};
  s.outputs = s.inputs;
  s.targets = {{{max_len, width}, 0}};
  s.loss = [](const std::vector<at::Tensor>& out, const std::vector<at::Tensor>& t) {
    return torch::mse_loss(out.at(0), t.at(0), at::Reduction::Sum);
  };
  return set_stage(b, [b](const std::vector<at::Tensor>& x) { return std::vector<at::Tensor>{b->forward(x[0], x[1]), x[1]}; },
                   s);
}

}  // namespace test_torch_stage
}  // namespace

TEST_CASE("torch stage: a set edge with a no_grad member and lengths gives the unpipelined gradients") {
  at::set_num_threads(1);
  const std::vector<std::size_t> lens{5, 2, 4, 0, 3, 1};
  const int m = static_cast<int>(lens.size()), n = 3;
  torch::manual_seed(11);
  const at::Tensor all = torch::randn({m, max_len, width}), target = torch::randn({m, max_len, width});
  std::vector<float> x(all.data_ptr<float>(), all.data_ptr<float>() + all.numel()),
      t(target.data_ptr<float>(), target.data_ptr<float>() + target.numel());
  std::vector<std::int64_t> pos(static_cast<std::size_t>(m * max_len));
  for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<std::int64_t>(i % max_len);
  // the reference: the same three blocks (same seeds), unpipelined, each microbatch its length
  std::vector<std::shared_ptr<pos_block_impl>> ref;
  for (int k = 0; k < n; ++k) ref.push_back(std::make_shared<pos_block_impl>(k));
  std::vector<at::Tensor> params;
  for (auto& b : ref)
    for (const auto& p : b->parameters()) params.push_back(p);
  std::vector<at::Tensor> acc;
  for (const auto& p : params) acc.push_back(torch::zeros_like(p));
  std::vector<float> losses;
  for (int j = 0; j < m; ++j) {
    const auto len = static_cast<std::int64_t>(lens[static_cast<std::size_t>(j)]);
    at::Tensor h = all[j].narrow(0, 0, len).clone();
    const at::Tensor p = torch::arange(len, torch::kLong);
    for (auto& b : ref) h = b->forward(h, p);
    const at::Tensor loss = torch::mse_loss(h, target[j].narrow(0, 0, len), at::Reduction::Sum);
    losses.push_back(loss.item<float>());
    const auto g = torch::autograd::grad({loss}, params, {torch::full({}, 1.0f / static_cast<float>(m))}, false, false, true);
    for (std::size_t i = 0; i < g.size(); ++i)
      if (g[i].defined()) acc[i].add_(g[i]);
  }
  // the reference's flat gradients per stage, in parameters() order
  std::vector<std::vector<float>> want(static_cast<std::size_t>(n));
  std::size_t i = 0;
  for (int k = 0; k < n; ++k)
    for (std::size_t q = 0; q < ref[static_cast<std::size_t>(k)]->parameters().size(); ++q, ++i)
      want[static_cast<std::size_t>(k)].insert(want[static_cast<std::size_t>(k)].end(), acc[i].data_ptr<float>(),
                                               acc[i].data_ptr<float>() + acc[i].numel());
  for (const char* name : {"1f1b", "zb-h1"}) {
    CAPTURE(name);
    std::vector<set_stage> v;
    for (int k = 0; k < n; ++k) v.push_back(make_set_stage(std::make_shared<pos_block_impl>(k)));
    pt::uniform_chain<set_stage> model(std::move(v));
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, n, m, 1));
    REQUIRE(plan.ok());
    ph::executor ex{plan, model, {.deadline = 60s}};
    pt::batch b;
    b.input(x).input(pos).target(t).lengths(lens, static_cast<std::size_t>(max_len));
    const pt::step_losses& l = ex.step(b);
    for (int j = 0; j < m; ++j) CHECK(l.at(0, j) == losses[static_cast<std::size_t>(j)]);
    for (int k = 0; k < n; ++k) {
      CAPTURE(k);
      CHECK(same_bits(model.stage(k).weight_gradients(), want[static_cast<std::size_t>(k)]));
    }
  }
}

TEST_CASE("torch stage: over a pp x dp mesh, plain and sharded, the flat arrays are what the replicas reduce") {
  at::set_num_threads(1);
  const int m = 4, ranks = 2;
  for (const int D : {2}) {
    const data d = make_data(D * m);
    // the reference: per replica its microbatches' gradients in order, then the replicas' sums in order
    const reference r0 = reference_of({std::vector<float>(d.x.begin(), d.x.begin() + m * rows * width),
                                       std::vector<float>(d.t.begin(), d.t.begin() + m * rows * width)},
                                      ranks, m);
    const reference r1 = reference_of({std::vector<float>(d.x.begin() + m * rows * width, d.x.end()),
                                       std::vector<float>(d.t.begin() + m * rows * width, d.t.end())},
                                      ranks, m);
    for (const bool shard : {false, true}) {
      CAPTURE(shard);
      std::deque<pt::uniform_chain<block_stage>> models;
      std::vector<pt::uniform_chain<block_stage>*> ptrs;
      for (int k = 0; k < D; ++k) ptrs.push_back(&models.emplace_back(make_model(ranks)));
      const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("zb-h1", ranks, m, 1));
      REQUIRE(plan.ok());
      ph::mesh_executor ex{plan, pt::mesh{ranks, D}, pt::dp_options{.dp = D, .shard = shard}, ptrs,
                           {.exec = {.deadline = 60s}}};
      pt::batch b;
      b.input(d.x).target(d.t);
      ex.step(b);
      for (int rep = 0; rep < D; ++rep)
        for (int k = 0; k < ranks; ++k) {
          CAPTURE(rep);
          CAPTURE(k);
          block_stage& st = ptrs[static_cast<std::size_t>(rep)]->stage(k);
          const std::span<const float> got = st.weight_gradients();
          const auto& own_part = (rep == 0 ? r0 : r1).grads[static_cast<std::size_t>(k)];
          const pt::shard_range own = pt::shard_of(got.size(), D, rep);
          bool ok = true;
          for (std::size_t e = 0; e < got.size(); ++e) {
            // the mean over D·m microbatches: each replica's part was scaled by 1/m in the reference
            const float whole = r0.grads[static_cast<std::size_t>(k)][e] * 0.5f + r1.grads[static_cast<std::size_t>(k)][e] * 0.5f;
            const bool mine = !shard || (e >= own.begin && e < own.end);
            const float want = mine ? whole : own_part[e] * 0.5f;
            ok = ok && std::abs(got[e] - want) <= 1e-6f * (1 + std::abs(want));
          }
          CHECK(ok);
          if (shard)  // released: outside its shard the module's parameters are NaN, its own intact
            CHECK(std::isnan(st.parameters()[own.begin == 0 ? got.size() - 1 : 0]));
        }
    }
  }
}

TEST_CASE("torch stage: a forward-only plan runs without a graph and keeps nothing, with the training plan's losses") {
  at::set_num_threads(1);
  const int m = 4, n = 4;
  const data d = make_data(m);
  const reference r = reference_of(d, n, m);
  auto model = make_model(n);
  const pt::runtime_plan plan = pt::build_plan(pt::forward_only_of(pt::make_schedule("1f1b", n, m, 1)));
  REQUIRE(plan.ok());
  ph::executor ex{plan, model, {.deadline = 60s}};
  pt::batch b;
  b.input(d.x).target(d.t);
  const pt::step_losses& l = ex.step(b);
  for (int j = 0; j < m; ++j) CHECK(l.at(0, j) == r.losses[static_cast<std::size_t>(j)]);
  for (int k = 0; k < n; ++k) {
    CAPTURE(k);
    CHECK(model.stage(k).graphs_held() == 0);
    for (const float g : model.stage(k).weight_gradients()) REQUIRE(g == 0.0f);
  }
}

TEST_CASE("torch stage: a graph's bytes are measured, and grow with what the forward saves") {
  at::set_num_threads(1);
  using wide = pt::torch::module_stage<hidden, hidden>;
  const auto bytes_of = [](std::int64_t r, std::int64_t w) {
    torch::nn::Sequential s(torch::nn::Linear(w, w), torch::nn::Functional(torch::tanh), torch::nn::Linear(w, w));
    wide st{s, {.inputs = {{{r, w}}}, .outputs = {{{r, w}}}}};
    const std::size_t b = st.measure_graph_bytes();
    CHECK(st.graphs_held() == 0);  // the probe keeps nothing
    return b;
  };
  const std::size_t small = bytes_of(64, 256), large = bytes_of(256, 256);
  // what the graph keeps beyond its input: tanh's output (saved) and the output, both [r, w] floats
  MESSAGE("graph bytes: " << small << " at 64 rows");
  CHECK(small >= static_cast<std::size_t>(2 * 64 * 256 * 4));
  CHECK(large >= static_cast<std::size_t>(2 * 256 * 256 * 4));
  CHECK(large > 3 * small);
  MESSAGE("graph bytes: " << small << " at 64 rows, " << large << " at 256");
}

// Memory actions (docs/14 §14.5): no copy can move an autograd graph, so a module stage's
// microbatches are recomputed (their forward keeps nothing but its input, which OFFLOAD and RELOAD
// may move; RECOMPUTE builds the graph again) and an OFFLOAD of one that is not is refused.
TEST_CASE("torch stage: recomputed microbatches, inputs offloaded or not, keep the plan's graphs and the gradients") {
  at::set_num_threads(1);
  const int m = 8;
  const data d = make_data(m);
  for (const scheduled s : {scheduled{"gpipe", 4, 1}, {"1f1b", 4, 1}, {"zb-h1", 4, 1}, {"interleaved-1f1b", 2, 2}})
    for (const pt::memory_policy offload : {pt::memory_policy::none, pt::memory_policy::all}) {
      CAPTURE(s.name);
      CAPTURE(offload == pt::memory_policy::all);
      const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(s.name, s.ranks, m, s.chunks));
      REQUIRE(plan.ok());
      const int n = s.ranks * s.chunks;
      const reference r = reference_of(d, n, m);
      auto model = make_model(n);
      // a graph of 4 KB besides its input (what placement weighs; the run counts graphs)
      constexpr std::int64_t input = rows * width * sizeof(float);
      pt::memory_sizes z;
      z.saved.assign(static_cast<std::size_t>(n), 4096 + input);
      z.kept.assign(static_cast<std::size_t>(n), input);
      pt::memory_options o;
      o.offload = offload;
      o.recompute = pt::memory_policy::all;
      o.copy_bandwidth = static_cast<double>(z.saved_of(0));
      const pt::memory_placement placed = pt::place_memory(plan.compute(), z, pt::costs{.f = 1, .b = 2}, o);
      REQUIRE_MESSAGE(placed.result.ok(), pt::describe(placed.result));
      int offloads = 0, recomputes = 0;
      for (const pt::memory_action& a : placed.actions.ops) {
        offloads += a.what == pt::memory_kind::offload;
        recomputes += a.what == pt::memory_kind::recompute;
      }
      CHECK(recomputes > 0);
      if (offload == pt::memory_policy::all) CHECK(offloads > 0);
      std::vector<pt::uniform_chain<block_stage>*> one{&model};
      ph::mesh_executor ex{plan, pt::mesh{s.ranks, 1}, pt::dp_options{}, one,
                           {.exec = {.deadline = 60s}, .memory = placed.actions}};
      pt::batch b;
      b.input(d.x).target(d.t);
      const pt::step_losses& l = ex.step(b);
      for (int j = 0; j < m; ++j) CHECK(l.at(0, j) == r.losses[static_cast<std::size_t>(j)]);
      // in graphs: a recomputed forward keeps none, its RECOMPUTE one until the last backward
      const std::vector<pt::rank_memory> planned =
          pt::memory_of(plan.compute(), placed.actions, pt::memory_sizes{{1}, {0}}, pt::stash_model);
      const std::vector<ph::stash_pool_use> pools = ex.stash_pools();
      const std::vector<int> owner = pt::detail::stage_owners(plan.compute());
      for (int k = 0; k < n; ++k) {
        CAPTURE(k);
        block_stage& st = model.stage(k);
        CHECK(same_bits(st.weight_gradients(), r.grads[static_cast<std::size_t>(k)]));
        CHECK(st.graphs_held() == 0);
        const auto rank = static_cast<std::size_t>(owner[static_cast<std::size_t>(k)]);
        const auto peak = static_cast<std::size_t>(planned[rank].peak_bytes);
        CHECK(peak <= static_cast<std::size_t>(planned[rank].base_peak_bytes));
        if (s.chunks == 1) {
          CHECK(st.graphs_high_water() == peak);
          CHECK(static_cast<std::size_t>(pools[rank].high_water) == peak);  // the executor's count agrees
        } else {
          CHECK(st.graphs_high_water() <= peak);
        }
      }
    }
}

TEST_CASE("torch stage: a step that offloads a module stage's microbatch without recomputing it is refused") {
  at::set_num_threads(1);
  const int m = 4, n = 2;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("gpipe", n, m, 1));
  REQUIRE(plan.ok());
  auto model = make_model(n);
  std::vector<pt::uniform_chain<block_stage>*> one{&model};
  // rank 0 runs F0 F1 F2 F3 B0 ...: OFFLOAD(0, 0) after F0, RELOAD after F3, before B0; right for a
  // stash, not for a graph
  const pt::memory_program moves = pt::memory_program_of(plan.compute(), {{pt::offload(0, 0, 0), pt::reload(0, 0, 3)}, {}});
  CHECK_THROWS_WITH_AS((ph::mesh_executor{plan, pt::mesh{n, 1}, pt::dp_options{}, one, {.memory = moves}}),
                       doctest::Contains("an OFFLOAD of a forward the step does not recompute, but the stage keeps "
                                         "what its backward needs outside its stash"),
                       std::invalid_argument);
}
