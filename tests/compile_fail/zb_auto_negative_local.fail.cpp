// expect: zb_auto: the effort's refinement and local-search passes must not be negative
// zb_auto's fifth argument, its effort, counts search passes; a negative count is refused by name.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct equal_costs {
  static constexpr pt::costs value{.f = 1, .b = 2};
};
constexpr auto pr =
    pt::zb_auto<pt::ranks<3>, pt::microbatches<4>, equal_costs, 3, pt::zb_effort{.local = -1}>::problem();
