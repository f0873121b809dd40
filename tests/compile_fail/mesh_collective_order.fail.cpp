// expect: _COLLECTIVE_MISPLACED_>, pipetype::at_rank<0>, pipetype::at_stage<0>
// expect: "a REDUCE_GRAD before the stage.?'s last weight backward \(B or W\)"
// Collectives written by hand: rank 0 reduces stage 0's gradients before its last backward.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::from_text<"0F0,0F1,0B0,0REDUCE_GRAD,0B1\n1F0,1B0,1F1,1B1,1REDUCE_GRAD">;
constexpr auto facts = pt::make_mesh_plan<S, pt::mesh_t<2, 2>>();
