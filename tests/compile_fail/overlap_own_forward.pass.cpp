// The passing twin of overlap_own_forward.fail.cpp: the pair overlaps the forward of microbatch 1
// with the backward of microbatch 0, whose forward ran before it.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,(0F1;0B0),0B1">>();
static_assert(plan.ranks == 1);
