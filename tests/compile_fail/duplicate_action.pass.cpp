// The passing twin of duplicate_action.fail.cpp: each forward once.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1">>();
static_assert(plan.compute().actions.size() == 8);
