#include <pipetype/compile/diagnostics.hpp>

#include <doctest/doctest.h>

#include <type_traits>

namespace pt = pipetype;

static_assert(std::is_same_v<pt::detail::error_for_t<pt::errc::missing_action, 1, 2, 3, 'B', -1, -1, -1>,
                             pt::error<pt::what<pt::_MISSING_ACTION_>, pt::at_rank<1>, pt::at_stage<2>,
                                       pt::at_microbatch<3>, pt::at_action<'B', -1>>>);
static_assert(std::is_same_v<pt::detail::error_for_t<pt::errc::parse_error, -1, -1, -1, '?', -1, 4, 7>,
                             pt::error<pt::what<pt::_PARSE_ERROR_>, pt::at_line_column<4, 7>>>);
