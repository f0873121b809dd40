// The passing twin of cross_rank_deadlock.fail.cpp: rank 1 runs 1B0 first, so both can proceed.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0B0,0F1,0B1\n1F0,1B0,1F1,1B1">>();
static_assert(plan.ticks() == 8);
