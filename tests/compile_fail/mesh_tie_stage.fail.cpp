// expect: _COLLECTIVE_MISPLACED_>, pipetype::at_stage<9>
// expect: "a tie group names a stage the program does not have"
// A tie group naming stage 9 of a plan of 4 stages.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>;
constexpr auto facts = pt::make_mesh_plan<S, pt::mesh_t<4, 2>, pt::tied<0, 9>>();
