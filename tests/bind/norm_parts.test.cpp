// bind/norm_parts.hpp: what GRAD_NORM and FINITE_CHECK sum on each global rank — per stage of its
// pipeline rank, its shard when the step scatters, all of it on replica 0 otherwise, nothing on
// the other replicas, a tied span counted on its group's first stage only — and the stages it
// asks the executor to check.
#include <pipetype/bind/norm_parts.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_norm_parts {

namespace pt = pipetype;

constexpr std::size_t elems = 7;  // no multiple of 2: the shards differ in size

struct tied {  // its first 3 weight-gradient elements hold tie group 0's parameter
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  using weight_grad = pt::tensor<float, elems>;
  float grads[elems] = {};
  std::span<float> weight_gradients() { return grads; }
  std::span<float> tied_gradients(int) { return std::span<float>(grads).first(3); }
  void forward(const pt::forward_ctx<tied>&) {}
  void backward(const pt::backward_ctx<tied>&) {}
};

struct part {
  int stage;
  std::size_t begin, end;
  bool operator==(const part&) const = default;
};

TEST_CASE("norm parts: the shard or replica 0's whole, a tied span once, every stage with gradients checked") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  REQUIRE(plan.ok());
  pt::uniform_chain<tied> model(std::vector<tied>(2));
  const std::vector<pt::stage_entry> entries = pt::entries_of(model);
  auto entry_of = [&](int s) -> const pt::stage_entry& { return entries[static_cast<std::size_t>(s)]; };
  for (const int scatter : {0, 1, 2}) {  // plain, FSDP, ZeRO-1
    CAPTURE(scatter);
    const pt::dp_options o{.dp = 2, .shard = scatter == 1, .ties = {{0, 1}}, .grad_norm = true, .zero = scatter == 2};
    const pt::mesh_program mp = pt::build_mesh(plan.compute(), plan.lowered(), pt::mesh{2, 2}, o);
    for (int g = 0; g < mp.shape.size(); ++g) {
      CAPTURE(g);
      const int r = mp.shape.pipeline_rank(g), d = mp.shape.replica(g);
      std::vector<int> checked;
      std::vector<part> got;
      for (const pt::detail::norm_part& q : pt::detail::norm_parts(
               mp, {r}, g, entry_of, [&](const pt::stage_entry&, int s) { checked.push_back(s); }, "test")) {
        CHECK(q.array.data() == reinterpret_cast<std::byte*>(model.stage(q.stage).grads));
        CHECK(q.size == sizeof(float));
        got.push_back({q.stage, q.begin, q.end});
      }
      CHECK(checked == std::vector<int>{r});  // (whether or not this rank answers for any of it)
      const pt::shard_range own = scatter ? pt::shard_of(elems, 2, d) : pt::shard_range{0, d == 0 ? elems : 0};
      std::vector<part> want;  // stage 1's tied span [0, 3) is stage 0's to count
      const std::size_t from = r == 1 ? std::max<std::size_t>(own.begin, 3) : own.begin;
      if (from < own.end) want.push_back({r, from, own.end});
      CHECK(got == want);
    }
  }
}

}  // namespace test_norm_parts
}  // namespace
