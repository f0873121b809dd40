// The passing twin of action_before_its_input.fail.cpp: stage 0 first.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,1F0,1B0,0B0">>();
static_assert(plan.stage_rank[1] == 0);
