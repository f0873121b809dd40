// The passing twin of zb_auto_negative_local.fail.cpp: one local-search pass, in the compiler.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct equal_costs {
  static constexpr pt::costs value{.f = 1, .b = 2};
};
constexpr auto pr =
    pt::zb_auto<pt::ranks<3>, pt::microbatches<4>, equal_costs, 3, pt::zb_effort{.local = 1}>::problem();
static_assert(pr.local == 1);
static_assert(pt::zb_auto_search(pr).rank_span == 4 * 3 + 2);  // ZB-H1's m(F + I + W) + (p − 1)
