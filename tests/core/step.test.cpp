#include <pipetype/core/step.hpp>

#include <doctest/doctest.h>

#include <string_view>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_step {

namespace pt = pipetype;

// PyTorch's spellings, and the three families a file's cells fall into
static_assert(std::string_view(pt::step_kind_name(pt::step_kind::recv_b)) == "RECV_B");
static_assert(std::string_view(pt::step_kind_name(pt::step_kind::wait_reduce_grad)) == "WAIT_REDUCE_GRAD");
static_assert(std::string_view(pt::step_kind_name(pt::step_kind::compute)).empty());
static_assert(pt::is_transfer(pt::step_kind::send_f) && !pt::is_transfer(pt::step_kind::wait_send_f));
static_assert(pt::is_send_wait(pt::step_kind::wait_send_b) && !pt::is_send_wait(pt::step_kind::send_b));
static_assert(pt::is_marker(pt::step_kind::unshard) && !pt::is_marker(pt::step_kind::recv_f) &&
              !pt::is_marker(pt::step_kind::compute));
// a compute step is the action it carries
static_assert(pt::compute_step(pt::I(3, 1)).compute() == pt::I(3, 1));
static_assert(pt::compute_step(pt::action{pt::kind::F, 0, 7, true}).overlapped);

TEST_CASE("step: every kind has one family") {
  for (int k = 0; k <= static_cast<int>(pt::step_kind::wait_reduce_grad); ++k) {
    const auto s = static_cast<pt::step_kind>(k);
    CAPTURE(k);
    const int families = (s == pt::step_kind::compute) + pt::is_transfer(s) + pt::is_send_wait(s) + pt::is_marker(s);
    CHECK(families == 1);
    CHECK(std::string_view(pt::step_kind_name(s)) != "?");
  }
}

TEST_CASE("step_view: a rank's steps") {
  const int begin[] = {0, 2, 3};
  const pt::step steps[] = {pt::compute_step(pt::F(0, 0)),
                            {pt::step_kind::send_f, pt::kind::F, 0, 0, false},
                            {pt::step_kind::recv_f, pt::kind::F, 1, 0, false}};
  const pt::step_view v{2, begin, steps};
  CHECK(v.rank_steps(0).size() == 2);
  CHECK(v.rank_steps(1)[0].op == pt::step_kind::recv_f);
}

}  // namespace test_step
}  // namespace
