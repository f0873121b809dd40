#include <pipetype/compile/diagnostics.hpp>

#include <doctest/doctest.h>

#include <type_traits>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_diagnostics {

namespace pt = pipetype;

namespace {

// error_of reads `Planner::value.rejection`: stand-ins for make_plan's planner.
struct rejected_plan {
  pt::verdict rejection;
};
struct some_schedule {};

constexpr pt::verdict missing_w() {
  pt::verdict v;
  v.code = pt::errc::missing_action;
  v.rank = 1, v.stage = 2, v.microbatch = 3, v.kind = 'I';
  v.detail = "W without its I";
  return v;
}

constexpr pt::verdict two_rank_cycle() {
  pt::verdict v;
  v.code = pt::errc::cross_rank_deadlock;
  v.rank = 0, v.stage = 0, v.microbatch = 0, v.kind = 'B', v.index = 1;
  v.cycle[0] = {0, 1, 'B', 0, 0, 'B', 1, 0, 1};
  v.cycle[1] = {1, 1, 'F', 1, 1, 'F', 0, 1, 0};
  v.cycle_length = 2;
  return v;
}

constexpr pt::verdict parse_error() {
  pt::verdict v;
  v.code = pt::errc::parse_error;
  v.line = 4, v.column = 7;
  return v;
}

constexpr pt::verdict empty() {
  pt::verdict v;
  v.code = pt::errc::empty_program;
  return v;
}

template <pt::verdict (*Make)()>
struct planner_of {
  static constexpr rejected_plan value{Make()};
};
template <pt::verdict (*Make)()>
using rejection_t = typename pt::detail::error_of<planner_of<Make>, some_schedule>::type;

template <pt::errc E>
using fix_t = pt::to_fix<pt::detail::string_of<pt::detail::advice<E>>()>;

}  // namespace

// Only the places that apply: an absent action has no index; the reason, the fix and the
// schedule follow.
static_assert(std::is_same_v<rejection_t<missing_w>,
                             pt::error<pt::what<pt::_MISSING_ACTION_>, pt::at_rank<1>, pt::at_stage<2>,
                                       pt::at_microbatch<3>, pt::at_action<'I'>, pt::because<"W without its I">,
                                       fix_t<pt::errc::missing_action>, pt::in_schedule<some_schedule>>>);
// A deadlock carries its wait-for cycle, link by link.
static_assert(
    std::is_same_v<
        rejection_t<two_rank_cycle>,
        pt::error<pt::what<pt::_CROSS_RANK_DEADLOCK_>, pt::at_rank<0>, pt::at_stage<0>, pt::at_microbatch<0>,
                  pt::at_action<'B', 1>,
                  pt::wait_for_cycle<
                      pt::rank_waits<pt::at_rank<0>, pt::at_action<'B', 1>, pt::needs<1, 'B', 0>, pt::from_rank<1>>,
                      pt::rank_waits<pt::at_rank<1>, pt::at_action<'F', 1>, pt::needs<0, 'F', 1>, pt::from_rank<0>>>,
                  fix_t<pt::errc::cross_rank_deadlock>, pt::in_schedule<some_schedule>>>);
// A parse error is placed by line and column only; a size error by nothing.
static_assert(
    std::is_same_v<rejection_t<parse_error>, pt::error<pt::what<pt::_PARSE_ERROR_>, pt::at_line_column<4, 7>,
                                                       fix_t<pt::errc::parse_error>, pt::in_schedule<some_schedule>>>);
static_assert(
    std::is_same_v<rejection_t<empty>, pt::error<pt::what<pt::_EMPTY_PROGRAM_>, fix_t<pt::errc::empty_program>,
                                                 pt::in_schedule<some_schedule>>>);

TEST_CASE("every category has a sentence on how to fix it") {
  for (int e = 1; e < pt::errc_count; ++e) {
    CAPTURE(e);
    const std::string fix = pt::how_to_fix(static_cast<pt::errc>(e));
    CHECK(fix.size() > 20);
    CHECK(fix != pt::how_to_fix(pt::errc::ok));
  }
}

}  // namespace test_diagnostics
}  // namespace
