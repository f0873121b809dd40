#include <pipetype/compile/diagnostics.hpp>

#include <doctest/doctest.h>

#include <type_traits>

namespace pt = pipetype;

static_assert(std::is_same_v<pt::detail::error_for_t<pt::errc::missing_action, 1, 2, 3, 'B', -1, -1, -1>,
                             pt::error<pt::what<pt::_MISSING_ACTION_>, pt::at_rank<1>, pt::at_stage<2>,
                                       pt::at_microbatch<3>, pt::at_action<'B', -1>>>);
static_assert(std::is_same_v<pt::detail::error_for_t<pt::errc::parse_error, -1, -1, -1, '?', -1, 4, 7>,
                             pt::error<pt::what<pt::_PARSE_ERROR_>, pt::at_line_column<4, 7>>>);

TEST_CASE("diagnostics: every code has a name") {
  for (int c = 0; c <= static_cast<int>(pt::errc::bad_extent); ++c)
    CHECK(std::string(pt::errc_name(static_cast<pt::errc>(c))) != "unknown");
}

TEST_CASE("diagnostics: describe lists only the parts that are known") {
  pt::verdict v;
  v.code = pt::errc::missing_action;
  v.rank = 1;
  v.stage = 1;
  v.microbatch = 3;
  v.kind = 'B';
  CHECK(pt::describe(v) == "missing action at rank 1, stage 1, microbatch 3, action 1B3");
  v.detail = "no backward";
  v.index = 2;
  CHECK(pt::describe(v) == "missing action at rank 1, stage 1, microbatch 3, action 1B3 (index 2): no backward");
}
