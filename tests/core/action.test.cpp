#include <pipetype/core/action.hpp>

#include <doctest/doctest.h>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_action {

namespace pt = pipetype;

static_assert(pt::F(2, 0) == pt::action{pt::kind::F, 2, 0, false});
static_assert(pt::kind_char(pt::kind::I) == 'I' && pt::kind_char(pt::kind::W) == 'W');

TEST_CASE("action: constructors name kind, stage and microbatch") {
  CHECK(pt::B(3, 1).what == pt::kind::B);
  CHECK(pt::I(3, 1).stage == 3);
  CHECK(pt::W(3, 1).microbatch == 1);
  CHECK_FALSE(pt::W(3, 1).overlapped);
  CHECK(pt::F(0, 0) != pt::F(0, 1));
}

TEST_CASE("action: B and I produce the input gradient, F and W do not") {
  CHECK(pt::is_input_backward(pt::kind::B));
  CHECK(pt::is_input_backward(pt::kind::I));
  CHECK_FALSE(pt::is_input_backward(pt::kind::F));
  CHECK_FALSE(pt::is_input_backward(pt::kind::W));
}

}  // namespace test_action
}  // namespace
