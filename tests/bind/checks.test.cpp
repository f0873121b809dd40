// bind/checks.hpp: a model against a plan, before anything runs; every executor's messages.
#include <pipetype/bind/checks.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <span>
#include <stdexcept>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_checks {

namespace pt = pipetype;

namespace {

template <int In, int Out>
struct dense {
  using input = pt::tensor<float, In>;
  using output = pt::tensor<float, Out>;
  void forward(const pt::forward_ctx<dense>&) {}
  void backward(const pt::backward_ctx<dense>&) {}
};
struct owned {  // a stage that hands its gradients over
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  using weight_grad = pt::tensor<float, 1>;
  float acc[1] = {};
  std::span<float> weight_gradients() { return acc; }
  void forward(const pt::forward_ctx<owned>&) {}
  void backward(const pt::backward_ctx<owned>&) {}
  void backward_input(const pt::backward_ctx<owned>&) {}
  void backward_weight(const pt::backward_ctx<owned>&) {}
};

}  // namespace

TEST_CASE("checks: check_model names the stage counts that do not fit") {
  dense<4, 4> a, b, c;
  pt::chain<dense<4, 4>, dense<4, 4>, dense<4, 4>> three{a, b, c};
  const auto plan = pt::build_plan(pt::make_one_f_one_b(2, 2));
  CHECK_THROWS_WITH_AS(pt::detail::check_model(plan.compute(), pt::entries_of(three), "pipetype::cuda"),
                       "pipetype::cuda: the plan has 2 stages but the model has 3", pt::shape_error);
  pt::chain<dense<4, 4>, dense<4, 4>> good{a, b};
  CHECK_NOTHROW(pt::detail::check_model(plan.compute(), pt::entries_of(good), "who"));
}

TEST_CASE("checks: check_gradients wants microbatch order, the split, and handed-over gradients under two lanes") {
  dense<4, 4> a;
  pt::chain<dense<4, 4>> one{a};
  const auto reversed = pt::build_plan(pt::parse_schedule("0F0,0F1,0B1,0B0"));
  REQUIRE(reversed.ok());
  CHECK_THROWS_WITH_AS(pt::detail::check_gradients(reversed.compute(), pt::entries_of(one), true, "who"),
                       doctest::Contains("comes after microbatch 1's weight gradient"), std::invalid_argument);
  CHECK_NOTHROW(pt::detail::check_gradients(reversed.compute(), pt::entries_of(one), false, "who"));
  const auto split = pt::build_plan(pt::parse_schedule("0F0,0I0,0W0"));
  REQUIRE(split.ok());
  CHECK_THROWS_WITH_AS(pt::detail::check_gradients(split.compute(), pt::entries_of(one), true, "who"),
                       doctest::Contains("no backward_input/backward_weight"), std::invalid_argument);
  owned o;
  pt::chain<owned> handed{o};
  CHECK_NOTHROW(pt::detail::check_gradients(split.compute(), pt::entries_of(handed), true, "who"));
}

}  // namespace test_checks
}  // namespace
